"""Running a trained policy: evaluation episodes (`evaluate`, and `episode_returns`
traced inside larger programs such as PBT's fitness) and trajectories (`rollout`)."""

from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, PyTree

from ..agents import AbstractAgent, Batch
from ..core import Key, check_positive_int, tree_mismatch
from ..envs import AutoReset, VectorEnv
from ._keys import as_keys, check_eval_episodes

__all__ = ["default_eval_steps", "episode_returns", "evaluate", "rollout", "state_batch"]


def default_eval_steps(agent: AbstractAgent) -> int:
    """Where an evaluation episode is cut by default: the eval env's time limit, or 10,000 steps."""
    return agent.eval_env.max_episode_steps or 10_000


def episode_returns(
    agent: AbstractAgent, state: PyTree, key: Key, num_episodes: int, deterministic: bool, max_steps: int
) -> Array:
    """One member's evaluation, traceable inside a larger program (as PBT's fitness does).

    **Returns:** the undiscounted returns of `num_episodes` episodes run in parallel
    in `agent.eval_env`, each cut at `max_steps` steps.
    """
    env = VectorEnv(agent.eval_env, num_episodes)
    reset_key, key = jax.random.split(key)
    env_state, ts = env.reset(reset_key)
    zeros = jnp.zeros((num_episodes,), jnp.float32)
    # The last slot is a recurrent policy's memory (None for a feed-forward one): it starts
    # fresh and each env runs one episode, so it is never reset.
    memory = agent.initial_carry(state, (num_episodes,))
    carry = (env_state, ts.obs, zeros, jnp.zeros((num_episodes,), bool), key, jnp.zeros((), jnp.int32), memory)

    def cond(c):
        return (~jnp.all(c[3])) & (c[5] < max_steps)

    def body(c):
        env_state, obs, returns, done, key, t, memory = c
        key, act_key, env_key = jax.random.split(key, 3)
        action, memory = agent.act_with_carry(state, obs, memory, jnp.zeros_like(done), act_key, deterministic)
        env_state, ts = env.step(env_key, env_state, action)
        returns = returns + jnp.where(done, 0.0, ts.reward)
        return env_state, ts.obs, returns, done | ts.done, key, t + 1, memory

    return jax.lax.while_loop(cond, body, carry)[2]


@eqx.filter_jit
def _evaluate(batch: Batch, state, key, num_episodes: int, deterministic: bool, max_steps: int):
    def single(agent: AbstractAgent, state, key, _):
        return episode_returns(agent, state, key, num_episodes, deterministic, max_steps)

    return batch.vmap(single)(state, key)


def state_batch(owner: str, agent: Any, state: PyTree) -> Batch:
    """The `Batch` of `agent` that `state` belongs to: one run's state, or a batch's
    (a leading axis), found by comparing with `agent.init`'s shapes.

    Raises a `ValueError` naming `owner` when the state does not fit the agent.
    """
    batch = Batch.of(agent, owner=f"{owner}(agent)")
    one = eqx.filter_eval_shape(batch.member(0).init, jax.random.key(0))
    want, got = jax.tree.leaves(one), jax.tree.leaves(state)
    # Batched when every leaf has one more axis than one run's (compared leaf by leaf
    # when the trees have as many leaves, else by the first leaf).
    pairs = list(zip(want, got)) if len(want) == len(got) else list(zip(want[:1], got[:1]))
    extra_axis = bool(pairs) and all(getattr(g, "ndim", 0) == e.ndim + 1 for e, g in pairs)
    rows = got[0].shape[0] if extra_axis else None
    if batch.stacked or rows is not None:
        # A batch: every leaf carries a leading axis of `rows` (or of the stack's size).
        rows = batch.size if batch.stacked else rows
        expected = jax.tree.map(lambda x: jax.ShapeDtypeStruct((rows, *x.shape), x.dtype), one)
    else:
        rows, expected = None, one
    mismatch = tree_mismatch(expected, state)
    if mismatch is not None:
        kind = f"a batch of {rows}" if rows is not None else "one run"
        raise ValueError(
            f"{owner}(state) does not match {batch.name} ({type(one).__name__}, {kind}) at {mismatch}"
        )
    return batch if batch.stacked else Batch.of(agent, rows)


def evaluate(
    agent: Any,
    state: PyTree,
    key: Key | Array | int,
    num_episodes: int = 10,
    deterministic: bool = True,
    max_steps: int | None = None,
) -> Array:
    """Run complete evaluation episodes with a trained policy.

    **Arguments:**

    - `agent`, `state`: as returned by `train` (a batched state is evaluated per member).
    - `key`: a PRNG key (split per member when the state is batched).
    - `num_episodes`: episodes per member, run in parallel.
    - `deterministic`: act with the policy's mode (True) or sample (False).
    - `max_steps`: cap on episode length (defaults to the env's time limit, or 10,000).

    **Returns:** the undiscounted return of each episode, shape `(num_episodes,)`
    or `(batch, num_episodes)`.
    """
    key = as_keys(key)
    if key.ndim != 0:
        raise ValueError(f"evaluate(key) must be a single key of shape (), got shape {key.shape}")
    check_eval_episodes("evaluate", "num_episodes", num_episodes)
    batch = state_batch("evaluate", agent, state)
    if max_steps is None:
        max_steps = default_eval_steps(batch.agent)
    if batch.batched:
        key = jax.random.split(key, batch.size)
    return _evaluate(batch, state, key, num_episodes, bool(deterministic), int(max_steps))


@eqx.filter_jit
def _rollout(batch: Batch, state, key, num_envs: int, num_steps: int, deterministic: bool):
    def single(agent: AbstractAgent, state, key, _):
        env = VectorEnv(AutoReset(agent.eval_env), num_envs)
        reset_key, key = jax.random.split(key)
        env_state, ts = env.reset(reset_key)

        def step(carry, k):
            # `memory`: a recurrent policy's (None for a feed-forward one), reset after an episode ends.
            env_state, obs, memory, start = carry
            act_key, env_key = jax.random.split(k)
            action, memory = agent.act_with_carry(state, obs, memory, start, act_key, deterministic)
            env_state, ts = env.step(env_key, env_state, action)
            out = dict(obs=obs, action=action, reward=ts.reward, terminated=ts.terminated, truncated=ts.truncated)
            return (env_state, ts.obs, memory, ts.done), out

        memory = agent.initial_carry(state, (num_envs,))
        init = (env_state, ts.obs, memory, jnp.zeros((num_envs,), bool))
        return jax.lax.scan(step, init, jax.random.split(key, num_steps))[1]

    return batch.vmap(single)(state, key)


def rollout(
    agent: Any,
    state: PyTree,
    key: Key | Array | int,
    num_steps: int,
    *,
    num_envs: int = 1,
    member: int | None = None,
    deterministic: bool = True,
) -> dict[str, np.ndarray]:
    """Run a trained policy for `num_steps` steps in `num_envs` parallel envs (episodes
    restart automatically) and return the trajectory.

    **Arguments:** `agent` and `state` as returned by `train` (a seed batch or a
    sweep: every member, or only `member`), a PRNG `key`, `num_steps`,
    `num_envs`, and `deterministic` (the policy's mode, or sampled actions).

    **Returns:** NumPy arrays `obs`, `action`, `reward`, `terminated`, `truncated`
    of shape `(num_steps, num_envs, ...)`, with a leading member axis when the
    state is batched and `member` is None.
    """
    key = as_keys(key)
    if key.ndim != 0:
        raise ValueError(f"rollout(key) must be a single key of shape (), got shape {key.shape}")
    check_positive_int("rollout", "num_steps", num_steps)
    check_positive_int("rollout", "num_envs", num_envs)
    batch = state_batch("rollout", agent, state)
    if member is not None:
        if not batch.batched:
            raise ValueError("rollout(member) needs a batched state (seeds or a sweep)")
        if not -batch.size <= member < batch.size:
            raise ValueError(f"rollout(member) must be in [-{batch.size}, {batch.size}) for a batch of {batch.size}, got {member}")
        state = jax.tree.map(lambda x: x[member], state)
        batch = Batch.of(batch.member(member))
    if batch.batched:
        key = jax.random.split(key, batch.size)
    return jax.device_get(_rollout(batch, state, key, num_envs, num_steps, bool(deterministic)))
