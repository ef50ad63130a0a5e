"""Running a trained policy: evaluation episodes (`evaluate`, and `episode_returns` /
`episode_outcomes` traced inside larger programs such as PBT's fitness), each
episode's final state descriptor for quality-diversity (`EpisodeDescriptor`,
`EvalResult`), and trajectories (`rollout`)."""

from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, PyTree

from ..agents import AbstractAgent, Batch
from ..core import EnvState, Key, check_positive_int, tree_mismatch
from ..envs import (
    AbstractEnv,
    AbstractWrapper,
    AutoReset,
    DescriptorWrapper,
    VectorEnv,
    brax_xy,
    innermost_state,
    resolve_descriptor,
)
from ._keys import as_keys, check_eval_episodes
from ._trajectory import TrajectoryDescriptor, feet_contact_descriptor

__all__ = [
    "EpisodeDescriptor",
    "EvalResult",
    "default_eval_steps",
    "episode_descriptor",
    "episode_outcomes",
    "episode_returns",
    "evaluate",
    "rollout",
    "state_batch",
]

EPISODE_DESCRIPTORS = ("auto", "observation", "xy", "feet_contact")
"""The descriptor names `evaluate` and `PBT` take: the final state's (`"feet_contact"`: the whole episode's)."""


def _flat_observation(state: EnvState, obs: Array) -> Float[Array, " n"]:
    del state
    return jnp.asarray(obs, jnp.float32).reshape(-1)


class EpisodeDescriptor(eqx.Module):
    """How an evaluation reads a state descriptor from one env's state and observation
    (built by `episode_descriptor`; traced inside the evaluation loop).

    - `fn`: `(innermost env state, observation) -> vector`, or None to read the slice
      `[start, start + size)` of the flat observation (the descriptor a
      `DescriptorWrapper` in the env appended, as DADS's env has).
    - `size`: the descriptor's length; `kind`: its name (`"xy"`, `"observation"`,
      the callable's name, or the wrapper's kind).
    """

    fn: Callable[[Any, Array], Array] | None = eqx.field(static=True)
    start: int = eqx.field(static=True)
    size: int = eqx.field(static=True)
    kind: str = eqx.field(static=True)

    def __call__(self, state: EnvState, obs: Array) -> Float[Array, " descriptor"]:
        """The descriptor of one (unbatched) env `state` and its observation `obs`."""
        if self.fn is None:
            return jnp.asarray(obs, jnp.float32).reshape(-1)[self.start : self.start + self.size]
        return jnp.asarray(self.fn(innermost_state(state), obs), jnp.float32).reshape(-1)


def _descriptor_wrapper(env: AbstractEnv) -> tuple[DescriptorWrapper | None, AbstractEnv | None]:
    """The first `DescriptorWrapper` in `env`'s wrapper chain, and the first wrapper above
    it that does not keep the flat observation as a prefix (None when all do)."""
    blocker = None
    while isinstance(env, AbstractWrapper):
        if isinstance(env, DescriptorWrapper):
            return env, blocker
        if blocker is None and not env.keeps_observation_prefix:  # (a DescriptorWrapper below it moves)
            blocker = env
        env = env.env
    return None, None


def episode_descriptor(
    env: Any, descriptor: Any = "auto", owner: str = "evaluate"
) -> EpisodeDescriptor | TrajectoryDescriptor:
    """Resolve a descriptor name for an evaluation env (an agent's `eval_env`).

    **Arguments:**

    - `env`: the env episodes run in.
    - `descriptor`: `"auto"` (the descriptor of a `DescriptorWrapper` inside `env`,
      e.g. DADS's; else `"xy"` for brax envs and `"observation"` for `Point2D`),
      `"xy"` (a brax env's torso x-y), `"observation"` (the flat observation the
      policy sees), or a callable `(state, obs) -> vector` given the innermost env
      state (below eqxrl's wrappers) and the observation, as `DescriptorWrapper` takes;
      or a descriptor of the whole episode: `"feet_contact"` (a brax locomotion env's
      fraction of steps each foot touches the ground, `feet_contact_descriptor`) or a
      `TrajectoryDescriptor(fn)`, `fn(transitions, mask) -> vector`.
    - `owner`: the name in error messages (`owner(descriptor)`).

    **Returns:** an `EpisodeDescriptor`, or a `TrajectoryDescriptor` with its `size`. Raises a `ValueError` naming `owner` for an
    unknown name, `"xy"` on a non-brax env, `"auto"` on an env with no known descriptor,
    or a callable that does not return a non-empty vector.
    """
    if not isinstance(env, AbstractEnv):
        raise ValueError(f"{owner}(descriptor) needs an eqxrl env, got {env!r}")
    if descriptor is None or (not callable(descriptor) and descriptor not in EPISODE_DESCRIPTORS):
        raise ValueError(
            f"{owner}(descriptor) must be one of {list(EPISODE_DESCRIPTORS)}, a callable (state, obs) -> vector "
            f"or a TrajectoryDescriptor, got {descriptor!r}"
        )
    if isinstance(descriptor, TrajectoryDescriptor) or descriptor == "feet_contact":
        whole = descriptor if isinstance(descriptor, TrajectoryDescriptor) else feet_contact_descriptor(env, owner)
        return whole.resolved(env, owner)
    if descriptor == "auto":
        wrapper, blocker = _descriptor_wrapper(env)
        if wrapper is not None:
            if blocker is not None:
                raise ValueError(
                    f"{owner}(descriptor='auto') reads the descriptor that env {env.name!r}'s DescriptorWrapper "
                    f"appends to the observation, but {type(blocker).__name__} above it changes the observation; "
                    "pass descriptor='xy' or a callable"
                )
            return EpisodeDescriptor(None, wrapper.base_obs_size, wrapper.descriptor_size, wrapper.kind)
    if callable(descriptor):
        fn, kind = descriptor, getattr(descriptor, "__name__", "callable")
    else:
        kind = resolve_descriptor(env, descriptor, owner=owner)
        fn = brax_xy if kind == "xy" else _flat_observation
    probe = EpisodeDescriptor(fn, 0, 0, kind)
    out = jax.eval_shape(lambda k: probe(*_state_and_obs(env.reset(k))), jax.random.key(0))
    if len(out.shape) != 1 or out.shape[0] < 1:
        raise ValueError(f"{owner}(descriptor) must give a non-empty vector, got shape {out.shape} on env {env.name!r}")
    return EpisodeDescriptor(fn, 0, int(out.shape[0]), kind)


def _state_and_obs(reset: tuple) -> tuple[EnvState, Array]:
    state, ts = reset
    return state, ts.obs


class EvalResult(eqx.Module):
    """What `evaluate(..., descriptor=...)` returns.

    - `returns`: the undiscounted return of each episode, `(num_episodes,)` or
      `(batch, num_episodes)`.
    - `descriptors`: each episode's final state descriptor (the state the episode
      ended in, or was cut at `max_steps` in), `(..., num_episodes, descriptor_size)`;
      with a `TrajectoryDescriptor`, each episode's descriptor of its whole trajectory.
    """

    returns: Float[Array, "*batch episodes"]
    descriptors: Float[Array, "*batch episodes descriptor"]

    @property
    def descriptor(self) -> Float[Array, "*batch descriptor"]:
        """The mean final descriptor over the episodes, `(..., descriptor_size)`."""
        return jnp.mean(self.descriptors, axis=-2)


def default_eval_steps(agent: AbstractAgent) -> int:
    """Where an evaluation episode is cut by default: the eval env's time limit, or 10,000 steps."""
    return agent.eval_env.max_episode_steps or 10_000


def episode_outcomes(
    agent: AbstractAgent,
    state: PyTree,
    key: Key,
    num_episodes: int,
    deterministic: bool,
    max_steps: int,
    descriptor: EpisodeDescriptor | TrajectoryDescriptor | None = None,
) -> tuple[Float[Array, " episodes"], Float[Array, "episodes descriptor"] | None]:
    """One member's evaluation, traceable inside a larger program (as PBT's fitness does).

    **Returns:** `(returns, descriptors)`: the undiscounted returns of `num_episodes`
    episodes run in parallel in `agent.eval_env`, each cut at `max_steps` steps, and
    with a `descriptor` (from `episode_descriptor`) each episode's final descriptor,
    `(num_episodes, descriptor.size)` (None without); a `TrajectoryDescriptor` records
    every step's transition (up to `max_steps`) and describes each episode from them.
    """
    env = VectorEnv(agent.eval_env, num_episodes)
    reset_key, key = jax.random.split(key)
    env_state, ts = env.reset(reset_key)
    whole = isinstance(descriptor, TrajectoryDescriptor)
    describe = None if descriptor is None or whole else jax.vmap(descriptor)
    desc = None if describe is None else describe(env_state, ts.obs)
    zeros = jnp.zeros((num_episodes,), jnp.float32)
    # The last slot is a recurrent policy's memory (None for a feed-forward one): it starts
    # fresh and each env runs one episode, so it is never reset.
    memory = agent.initial_carry(state, (num_episodes,))
    if whole:  # buffers of `max_steps` transitions, shaped like one step's
        record, done0 = jax.vmap(descriptor.record), jnp.zeros((num_episodes,), bool)
        action = jax.eval_shape(lambda: agent.act_with_carry(state, ts.obs, memory, done0, key, deterministic)[0])
        like = jax.eval_shape(lambda a: record(ts.obs, a, ts.reward, env_state, ts.obs), action)
        desc = descriptor.start(like, num_episodes, max_steps)
    carry = (env_state, ts.obs, zeros, jnp.zeros((num_episodes,), bool), key, jnp.zeros((), jnp.int32), desc, memory)

    def cond(c):
        return (~jnp.all(c[3])) & (c[5] < max_steps)

    def body(c):
        env_state, obs, returns, done, key, t, desc, memory = c
        key, act_key, env_key = jax.random.split(key, 3)
        action, memory = agent.act_with_carry(state, obs, memory, jnp.zeros_like(done), act_key, deterministic)
        env_state, ts = env.step(env_key, env_state, action)
        returns = returns + jnp.where(done, 0.0, ts.reward)
        if describe is not None:  # the state each episode ended in: frozen once it is done
            desc = jnp.where(done[:, None], desc, describe(env_state, ts.obs))
        if whole:  # every step, and whether it was inside the episode
            desc = descriptor.step(desc, t, ~done, record(obs, action, ts.reward, env_state, ts.obs))
        return env_state, ts.obs, returns, done | ts.done, key, t + 1, desc, memory

    out = jax.lax.while_loop(cond, body, carry)
    return out[2], descriptor.finish(out[6]) if whole else out[6]


def episode_returns(
    agent: AbstractAgent, state: PyTree, key: Key, num_episodes: int, deterministic: bool, max_steps: int
) -> Array:
    """One member's evaluation, traceable inside a larger program (as PBT's fitness does).

    **Returns:** the undiscounted returns of `num_episodes` episodes run in parallel
    in `agent.eval_env`, each cut at `max_steps` steps.
    """
    return episode_outcomes(agent, state, key, num_episodes, deterministic, max_steps)[0]


@eqx.filter_jit
def _evaluate(batch: Batch, state, key, num_episodes: int, deterministic: bool, max_steps: int, descriptor=None):
    def single(agent: AbstractAgent, state, key, _):
        return episode_outcomes(agent, state, key, num_episodes, deterministic, max_steps, descriptor)

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
    descriptor: Any = None,
) -> Array | EvalResult:
    """Run complete evaluation episodes with a trained policy.

    **Arguments:**

    - `agent`, `state`: as returned by `train` (a batched state is evaluated per member).
    - `key`: a PRNG key (split per member when the state is batched).
    - `num_episodes`: episodes per member, run in parallel.
    - `deterministic`: act with the policy's mode (True) or sample (False).
    - `max_steps`: cap on episode length (defaults to the env's time limit, or 10,000).
    - `descriptor`: also record each episode's final state descriptor, for
      quality-diversity: `"auto"` (the descriptor a `DescriptorWrapper` in
      `agent.eval_env` appends, e.g. DADS's; else a brax env's torso x-y or
      `Point2D`'s position), `"xy"`, `"observation"`, or a callable `(state, obs) ->
      vector`; or a descriptor of each whole episode: `"feet_contact"` (brax) or a
      `TrajectoryDescriptor` (see `episode_descriptor`). Default None: returns only.

    **Returns:** the undiscounted return of each episode, shape `(num_episodes,)`
    or `(batch, num_episodes)`; with `descriptor`, an `EvalResult` holding those
    `returns` and the `descriptors` of the episodes' final states (`.descriptor`:
    their mean over episodes).
    """
    key = as_keys(key)
    if key.ndim != 0:
        raise ValueError(f"evaluate(key) must be a single key of shape (), got shape {key.shape}")
    check_eval_episodes("evaluate", "num_episodes", num_episodes)
    batch = state_batch("evaluate", agent, state)
    describe = None if descriptor is None else episode_descriptor(batch.agent.eval_env, descriptor, "evaluate")
    if max_steps is None:
        max_steps = default_eval_steps(batch.agent)
    if batch.batched:
        key = jax.random.split(key, batch.size)
    returns, descriptors = _evaluate(batch, state, key, num_episodes, bool(deterministic), int(max_steps), describe)
    return returns if describe is None else EvalResult(returns, descriptors)


@eqx.filter_jit
def _rollout(batch: Batch, state, key, num_envs: int, num_steps: int, deterministic: bool, states: bool = False):
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
            if states:  # the suite's state the action was taken in (below eqxrl's wrappers)
                out["state"] = innermost_state(carry[0])
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
    states: bool = False,
) -> dict[str, Any]:
    """Run a trained policy for `num_steps` steps in `num_envs` parallel envs (episodes
    restart automatically) and return the trajectory.

    **Arguments:** `agent` and `state` as returned by `train` (a seed batch or a
    sweep: every member, or only `member`), a PRNG `key`, `num_steps`,
    `num_envs`, `deterministic` (the policy's mode, or sampled actions), and
    `states`: also return each step's env state.

    **Returns:** NumPy arrays `obs`, `action`, `reward`, `terminated`, `truncated`
    of shape `(num_steps, num_envs, ...)`, with a leading member axis when the
    state is batched and `member` is None; with `states`, `state`: the pytree of
    the suite's env states (below eqxrl's wrappers, `eqxrl.envs.innermost_state`)
    that `obs` was observed in, leaves of the same leading shape
    (`eqxrl.envs.render_frames` draws them).
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
    return jax.device_get(_rollout(batch, state, key, num_envs, num_steps, bool(deterministic), bool(states)))
