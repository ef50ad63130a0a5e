"""Wrappers: time limit, auto-reset, episode statistics, batching, normalisation, actions."""

from typing import Any, ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, Int

from ..components import RunningMeanStd
from ..core import EnvState, Key, check_positive_int, tree_select
from ._base import ACTION_MASK, AbstractEnv, AbstractWrapper, TimeStep
from ._spaces import AbstractCompositeSpace, AbstractSpace, Box, Dict


class TimeLimitState(eqx.Module):
    inner: EnvState
    steps: Int[Array, ""]


class TimeLimit(AbstractWrapper):
    """Truncate episodes after `max_episode_steps` steps (sets `truncated`, not `terminated`)."""

    keeps_observation_prefix: ClassVar[bool] = True

    env: AbstractEnv
    limit: int = eqx.field(static=True)

    def __init__(self, env: AbstractEnv, max_episode_steps: int):
        self.env = env
        self.limit = check_positive_int("TimeLimit", "max_episode_steps", max_episode_steps)

    @property
    def max_episode_steps(self) -> int:
        inner = self.env.max_episode_steps
        return self.limit if inner is None else min(inner, self.limit)

    def reset(self, key: Key) -> tuple[TimeLimitState, TimeStep]:
        state, ts = self.env.reset(key)
        return TimeLimitState(state, jnp.zeros((), jnp.int32)), ts

    def step(self, key: Key, state: TimeLimitState, action: Array) -> tuple[TimeLimitState, TimeStep]:
        inner, ts = self.env.step(key, state.inner, action)
        steps = state.steps + 1
        ts = eqx.tree_at(lambda t: t.truncated, ts, ts.truncated | (steps >= self.limit))
        return TimeLimitState(inner, steps), ts


class AutoReset(AbstractWrapper):
    """Start a new episode as soon as one ends.

    The returned `obs` is the first observation of the new episode; the last
    observation of the finished one is kept in `info["final_obs"]` (on every
    step it is the true next observation of the transition, so bootstrapping
    through truncation reads it directly).
    """

    keeps_observation_prefix: ClassVar[bool] = True

    env: AbstractEnv

    def reset(self, key: Key) -> tuple[EnvState, TimeStep]:
        state, ts = self.env.reset(key)
        return state, eqx.tree_at(lambda t: t.info, ts, {**ts.info, "final_obs": ts.obs})

    def step(self, key: Key, state: EnvState, action: Array) -> tuple[EnvState, TimeStep]:
        step_key, reset_key = jax.random.split(key)
        next_state, ts = self.env.step(step_key, state, action)
        reset_state, reset_ts = self.env.reset(reset_key)
        done = ts.done
        # tree_select selects a leaf that is an array on either side: gymnax resets some
        # leaves to Python ints (CartPole's `time=0`) where the stepped state holds arrays.
        state = tree_select(done, reset_state, next_state)
        obs = tree_select(done, reset_ts.obs, ts.obs)
        info = {**ts.info, "final_obs": ts.obs}
        return state, TimeStep(obs, ts.reward, ts.terminated, ts.truncated, info)


class EpisodeStatsState(eqx.Module):
    inner: EnvState
    episode_return: Float[Array, ""]
    episode_length: Int[Array, ""]


class EpisodeStatistics(AbstractWrapper):
    """Accumulate the return and length of each episode.

    `info["episode_return"]` and `info["episode_length"]` hold the finished
    episode's totals on the step where `done` is true (and the running totals
    otherwise).
    """

    keeps_observation_prefix: ClassVar[bool] = True

    env: AbstractEnv

    def reset(self, key: Key) -> tuple[EpisodeStatsState, TimeStep]:
        state, ts = self.env.reset(key)
        zero_r, zero_l = jnp.zeros((), jnp.float32), jnp.zeros((), jnp.int32)
        info = {**ts.info, "episode_return": zero_r, "episode_length": zero_l}
        return EpisodeStatsState(state, zero_r, zero_l), eqx.tree_at(lambda t: t.info, ts, info)

    def step(self, key: Key, state: EpisodeStatsState, action: Array) -> tuple[EpisodeStatsState, TimeStep]:
        inner, ts = self.env.step(key, state.inner, action)
        ret = state.episode_return + ts.reward.astype(jnp.float32)
        length = state.episode_length + 1
        info = {**ts.info, "episode_return": ret, "episode_length": length}
        done = ts.done
        new_state = EpisodeStatsState(
            inner, jnp.where(done, 0.0, ret), jnp.where(done, 0, length).astype(jnp.int32)
        )
        return new_state, eqx.tree_at(lambda t: t.info, ts, info)


class VectorEnv(AbstractWrapper):
    """Run `num_envs` independent copies of an environment in lockstep (vmapped).

    Observations, rewards and flags gain a leading `num_envs` axis; actions must
    carry it too. Spaces stay those of one copy.
    """

    env: AbstractEnv
    num_envs: int = eqx.field(static=True)

    def __init__(self, env: AbstractEnv, num_envs: int):
        self.env = env
        self.num_envs = check_positive_int("VectorEnv", "num_envs", num_envs)

    def reset(self, key: Key) -> tuple[EnvState, TimeStep]:
        return jax.vmap(self.env.reset)(jax.random.split(key, self.num_envs))

    def step(self, key: Key, state: EnvState, action: Array) -> tuple[EnvState, TimeStep]:
        keys = jax.random.split(key, self.num_envs)
        return jax.vmap(self.env.step)(keys, state, action)


class NormalizeState(eqx.Module):
    inner: EnvState
    stats: Any  # a RunningMeanStd, or (a Dict observation) a tuple of them, None for a leaf left alone


def _normalized_leaves(space: AbstractSpace, top: bool = True) -> tuple[tuple[int, ...] | None, ...] | None:
    """For a `Dict` or `Tuple` space: per leaf (in `jax.tree.leaves` order) the shape of the
    statistics of a `Box` entry, None for an entry left as it is (a `Dict`'s action mask,
    integer entries); None otherwise."""
    if not isinstance(space, AbstractCompositeSpace):
        return None
    out = []
    for name, sub in space.named_spaces().items():
        if isinstance(sub, AbstractCompositeSpace):
            out += list(_normalized_leaves(sub, top=False))
        else:
            mask = top and isinstance(space, Dict) and name == ACTION_MASK
            out.append(tuple(sub.shape) if isinstance(sub, Box) and not mask else None)
    return tuple(out)


class NormalizeObservation(AbstractWrapper):
    """Normalise observations by running statistics kept in the env state.

    Works on a single or a batched (`VectorEnv`) environment: every leading
    axis beyond the observation shape counts as samples. `info["final_obs"]`
    is normalised with the same statistics. A `Dict` (or `Tuple`) observation is normalised
    entry by entry: every `Box` entry by statistics of its own, the action mask
    (`ACTION_MASK`) and the integer entries left as they are. Agents that must act
    from a saved policy (inference) should prefer their own `normalize_observations`
    option, which keeps the statistics in the agent state.
    """

    env: AbstractEnv
    clip: float = eqx.field(static=True, default=10.0)

    def _map(self, stats: Any, obs: Any, fn: Any) -> Any:
        if isinstance(stats, RunningMeanStd):
            return fn(stats, obs)
        leaves, treedef = jax.tree.flatten(obs)
        return treedef.unflatten([x if st is None else fn(st, x) for st, x in zip(stats, leaves)])

    def _normalize(self, stats: Any, ts: TimeStep) -> TimeStep:
        norm = lambda obs: self._map(stats, obs, lambda st, x: st.normalize(x, self.clip))  # noqa: E731
        info = dict(ts.info)
        if "final_obs" in info:
            info["final_obs"] = norm(info["final_obs"])
        return TimeStep(norm(ts.obs), ts.reward, ts.terminated, ts.truncated, info)

    def _update(self, stats: Any, obs: Any) -> Any:
        if isinstance(stats, RunningMeanStd):
            return stats.update(obs)
        return tuple(None if st is None else st.update(x) for st, x in zip(stats, jax.tree.leaves(obs)))

    def reset(self, key: Key) -> tuple[NormalizeState, TimeStep]:
        state, ts = self.env.reset(key)
        leaves = _normalized_leaves(self.env.observation_space)
        if leaves is None:
            stats = RunningMeanStd(self.env.observation_space.shape)
        else:
            stats = tuple(None if shape is None else RunningMeanStd(shape) for shape in leaves)
        stats = self._update(stats, ts.obs)
        return NormalizeState(state, stats), self._normalize(stats, ts)

    def step(self, key: Key, state: NormalizeState, action: Array) -> tuple[NormalizeState, TimeStep]:
        inner, ts = self.env.step(key, state.inner, action)
        stats = self._update(state.stats, ts.obs)
        return NormalizeState(inner, stats), self._normalize(stats, ts)


def _box(space: AbstractSpace, wrapper: str) -> Box:
    if not isinstance(space, Box):
        raise ValueError(f"{wrapper}(env) needs an env with a Box action space, got {space!r}")
    return space


class ClipAction(AbstractWrapper):
    """Clip continuous actions into the action space's bounds before stepping."""

    keeps_observation_prefix: ClassVar[bool] = True

    env: AbstractEnv

    def __check_init__(self):
        _box(self.env.action_space, "ClipAction")

    def step(self, key: Key, state: EnvState, action: Array) -> tuple[EnvState, TimeStep]:
        space = self.env.action_space
        return self.env.step(key, state, jnp.clip(action, space.low, space.high))


class RescaleAction(AbstractWrapper):
    """Expose a `[low, high]` action box (default `[-1, 1]`) mapped affinely onto the env's bounds."""

    keeps_observation_prefix: ClassVar[bool] = True

    env: AbstractEnv
    low: float = eqx.field(static=True, default=-1.0)
    high: float = eqx.field(static=True, default=1.0)

    def __check_init__(self):
        space = _box(self.env.action_space, "RescaleAction")
        if not space.bounded:
            raise ValueError(f"RescaleAction(env) needs finite action bounds, got {space!r}")
        if not self.low < self.high:
            raise ValueError(f"RescaleAction(low, high) needs low < high, got low={self.low}, high={self.high}")

    @property
    def action_space(self) -> Box:
        return Box(self.low, self.high, self.env.action_space.shape)

    def step(self, key: Key, state: EnvState, action: Array) -> tuple[EnvState, TimeStep]:
        space = self.env.action_space
        action = jnp.clip(action, self.low, self.high)
        scaled = space.low + (action - self.low) * (space.high - space.low) / (self.high - self.low)
        return self.env.step(key, state, scaled)


class SelectObservation(AbstractWrapper):
    """Keep only the entries `indices` of a 1-D `Box` observation (and of `info["final_obs"]`):
    a partially observed task from a fully observed one, e.g. CartPole without its two
    velocities (`make("CartPoleNoVel-v1")`), which a policy can only solve with memory."""

    env: AbstractEnv
    indices: tuple[int, ...] = eqx.field(static=True, converter=tuple)

    def __check_init__(self):
        space = self.env.observation_space
        if not isinstance(space, Box) or len(space.shape) != 1:
            raise ValueError(f"SelectObservation(env) needs a 1-D Box observation space, got {space!r}")
        size = space.shape[0]
        if not self.indices or any(
            isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < size for i in self.indices
        ) or len(set(self.indices)) != len(self.indices):
            raise ValueError(
                f"SelectObservation(indices) must be distinct ints in [0, {size}), got {self.indices!r}"
            )

    @property
    def observation_space(self) -> Box:
        space = self.env.observation_space
        index = np.asarray(self.indices)  # bounds may be NumPy or JAX arrays: a NumPy array indexes both
        return Box(space.low[index], space.high[index], (len(self.indices),))

    def transform(self, state: EnvState, ts: TimeStep) -> TimeStep:
        index = jnp.asarray(self.indices)
        info = dict(ts.info)
        if "final_obs" in info:
            info["final_obs"] = info["final_obs"][..., index]
        return TimeStep(ts.obs[..., index], ts.reward, ts.terminated, ts.truncated, info)
