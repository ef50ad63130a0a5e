"""What DADS's skills do: one episode of every skill (`SkillReport`), for
`DADS.evaluate_skills` and `DADS.report` (the run floor writes it: `skills.json`, and
`eqxrl.runs.plot_skill_trajectories` draws `skills.png`)."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, Int

from ..core import Key, check_positive_int
from ..envs import RescaleAction
from ._base import flatten_obs
from ._off_policy import AbstractOffPolicyAgent, OffPolicyState


class SkillReport(eqx.Module):
    """What each skill does: one episode per skill (and per seed, on a leading axis).

    - `env_return`: the env's (task) return, `(*seeds, skills)`.
    - `intrinsic_return`: the summed DADS reward under the current dynamics, `(*seeds, skills)`.
    - `descriptors`: the descriptor at every step, the start included, `(*seeds, skills, steps + 1, descriptor)`;
      after an episode ends it stays at its last value.
    - `lengths`: the episode lengths (at most `steps`), `(*seeds, skills)`.
    """

    env_return: Float[Array, "*seeds skills"]
    intrinsic_return: Float[Array, "*seeds skills"]
    descriptors: Float[Array, "*seeds skills steps descriptor"]
    lengths: Int[Array, "*seeds skills"]

    @property
    def final_descriptors(self) -> Float[Array, "*seeds skills descriptor"]:
        """The descriptor at the end of each skill's episode."""
        return self.descriptors[..., -1, :]

    def mean_pairwise_distance(self) -> Float[Array, "*seeds"]:
        """**Returns:** the mean Euclidean distance between the final descriptors of distinct skills."""
        final = self.final_descriptors
        diff = final[..., :, None, :] - final[..., None, :, :]
        dist = jnp.sqrt(jnp.sum(jnp.square(diff), axis=-1) + 1e-12)
        num = final.shape[-2]
        off = 1.0 - jnp.eye(num, dtype=jnp.float32)
        return jnp.sum(dist * off, axis=(-2, -1)) / jnp.float32(num * (num - 1))

    def summary(self) -> dict[str, list]:
        """**Returns:** what `skills.json` holds: per skill (and seed) the env return, the
        intrinsic return and the final descriptor, and the mean pairwise distance of the final
        descriptors, as nested lists."""
        return {
            "env_return": np.asarray(self.env_return).tolist(),
            "intrinsic_return": np.asarray(self.intrinsic_return).tolist(),
            "final_descriptor": np.asarray(self.final_descriptors).tolist(),
            "mean_pairwise_distance": np.asarray(self.mean_pairwise_distance()).tolist(),
        }

    def max_distance_from_start(self) -> Float[Array, "*seeds"]:
        """**Returns:** the largest distance of any skill's descriptor from its episode's start."""
        diff = self.descriptors - self.descriptors[..., :1, :]
        return jnp.max(jnp.sqrt(jnp.sum(jnp.square(diff), axis=-1)), axis=(-2, -1))


def evaluate_skills(
    agent: AbstractOffPolicyAgent, state: OffPolicyState, key: Key, num_steps: int | None, deterministic: bool
) -> SkillReport:
    """`DADS.evaluate_skills` for a DADS `agent` (see there)."""
    if num_steps is None:
        num_steps = agent.env.max_episode_steps
        if num_steps is None:
            raise ValueError(f"DADS.evaluate_skills(num_steps) is required: env {agent.env.name!r} has no time limit")
    num_steps = check_positive_int("DADS.evaluate_skills", "num_steps", num_steps)
    if not isinstance(state, OffPolicyState) or state.env_steps.ndim > 1:
        raise ValueError(
            f"DADS.evaluate_skills(state) must be one run's state or a batch of seeds', "
            f"got {type(state).__name__}"
        )
    batched = state.env_steps.ndim == 1
    return _skill_rollouts(agent, state, key, num_steps, bool(deterministic), batched)


def _skill_episode(
    agent: AbstractOffPolicyAgent,
    state: OffPolicyState,
    key: Key,
    skill: Int[Array, ""],
    num_steps: int,
    deterministic: bool,
) -> tuple[Array, Array, Array, Array]:
    """One episode of `skill`. **Returns:** `(env_return, intrinsic_return, descriptors, length)`."""
    env = agent.env
    stepper = RescaleAction(env)
    reset_key, key = jax.random.split(key)
    env_state, ts = env.reset_with_skill(reset_key, skill)
    obs = flatten_obs(env, ts.obs, "DADS")
    _, start, _ = agent.split(obs)
    zero = jnp.zeros((), jnp.float32)

    def body(carry, k):
        env_state, obs, alive, env_ret, int_ret, length = carry
        act_key, step_key = jax.random.split(k)
        action = agent.act(state, obs[None], act_key, deterministic=deterministic)[0]
        env_state, ts = stepper.step(step_key, env_state, action)
        next_obs = flatten_obs(env, ts.obs, "DADS")
        reward, _ = agent.intrinsic_reward(state.learner, obs, next_obs)
        env_ret = env_ret + jnp.where(alive, ts.reward, 0.0)
        int_ret = int_ret + jnp.where(alive, reward, 0.0)
        length = length + alive.astype(jnp.int32)
        next_obs = jnp.where(alive, next_obs, obs)
        alive = alive & ~ts.done
        _, desc, _ = agent.split(next_obs)
        return (env_state, next_obs, alive, env_ret, int_ret, length), desc

    carry = (env_state, obs, jnp.ones((), bool), zero, zero, jnp.zeros((), jnp.int32))
    (_, _, _, env_ret, int_ret, length), descs = jax.lax.scan(body, carry, jax.random.split(key, num_steps))
    return env_ret, int_ret, jnp.concatenate([start[None], descs], axis=0), length


@eqx.filter_jit
def _skill_rollouts(
    agent: AbstractOffPolicyAgent, state: OffPolicyState, key: Key, num_steps: int, deterministic: bool, batched: bool
) -> SkillReport:
    def one_run(state, key):
        skills = jnp.arange(agent.num_skills, dtype=jnp.int32)
        keys = jax.random.split(key, agent.num_skills)
        run = lambda k, z: _skill_episode(agent, state, k, z, num_steps, deterministic)  # noqa: E731
        env_ret, int_ret, descs, lengths = jax.vmap(run)(keys, skills)
        return SkillReport(env_ret, int_ret, descs, lengths)

    if batched:
        n = state.env_steps.shape[0]
        return jax.vmap(one_run)(state, jax.random.split(key, n))
    return one_run(state, key)
