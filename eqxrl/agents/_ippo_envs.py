"""IPPO's views of a team env as single-agent envs PPO trains on.

- `AgentSeat`: one agent's view (its observation, optionally with its one-hot id, its
  action, its reward). Under `jax.vmap(..., axis_name=AGENT_AXIS)` (IPPO with separate
  parameters: one PPO per agent, vmapped) every lane is one agent: `step` gathers the
  lanes' actions into the joint action and every lane steps the same team env with lane
  0's key, so the replicated team states stay equal. Outside that axis (`check_env`) the
  one action is every agent's and the seat is agent 0's.
- `SharedSeats`: `num_envs` team envs seen as `num_envs * num_agents` single-agent envs
  (IPPO with shared parameters: one PPO whose batch holds every agent's experience); with
  `whole_teams` its `minibatch_group` keeps every team env step's seats together in PPO's
  minibatches (`PPO.minibatch_group`: MAPPO's critic computes the team's part once).

An agent's observation may be a `Dict` (features and an action mask, `eqxrl.envs.ACTION_MASK`):
the seats take every entry's row of the agent, so each seat's observation carries that agent's
own mask, and PPO's `ObservationLayout` stores and honours it as on a single-agent env. The
one-hot id is then an extra `"agent_id"` entry (`AGENT_ID`).
"""

from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, Int

from ..core import EnvState, Key
from ..envs import (
    AbstractEnv,
    AbstractSpace,
    AbstractWrapper,
    AutoReset,
    Box,
    Dict,
    MultiBinary,
    MultiDiscrete,
    Tuple,
    TimeStep,
    VectorEnv,
    agent_rewards,
)

AGENT_AXIS = "eqxrl_ippo_agent"
"""The `vmap` axis name of IPPO's agents (separate parameters)."""
AGENT_ID = "agent_id"
"""The entry of a `Dict` observation `IPPO(agent_ids=True)` adds: the agent's one-hot id."""


def _lane() -> Int[Array, ""] | int:
    try:
        return jax.lax.axis_index(AGENT_AXIS)
    except NameError:  # not under IPPO's vmap over agents
        return 0


def _gather(x: Array, num_agents: int) -> Array:
    try:
        return jax.lax.all_gather(x, AGENT_AXIS)
    except NameError:
        return jnp.broadcast_to(x, (num_agents, *x.shape))


def _first_lane_key(key: Key) -> Key:
    """Lane 0's key in every lane (the team env must step alike in every agent's lane)."""
    typed = jnp.issubdtype(key.dtype, jax.dtypes.prng_key)
    data = jax.random.key_data(key) if typed else key
    try:
        data = jax.lax.all_gather(data, AGENT_AXIS)[0]
    except NameError:
        return key
    return jax.random.wrap_key_data(data, impl=jax.random.key_impl(key)) if typed else data


def with_agent_ids(obs: Any, index: Array | int, num_agents: int, lead: tuple[Any, ...]) -> Any:  # (lead: ints, or symbolic under jax.export)
    """`[obs, one_hot(index, num_agents)]` along the last axis, for observations with leading
    axes `lead`; a dict observation gets the one-hot id as its `AGENT_ID` entry instead, a
    tuple one as its last entry."""
    one_hot = jnp.broadcast_to(jax.nn.one_hot(index, num_agents, dtype=jnp.float32), (*lead, num_agents))
    if isinstance(obs, dict):
        return {**obs, AGENT_ID: one_hot}
    if isinstance(obs, (tuple, list)):
        return (*obs, one_hot)
    return jnp.concatenate([obs.astype(jnp.float32), one_hot], axis=-1)


def agent_rows(obs: Any, index: Any) -> Any:
    """Agent `index`'s row of team observations `obs` (an array, or a dict of them)."""
    return jax.tree.map(lambda x: x[index], obs)


def seat_space(agent_space: AbstractSpace, num_agents: int, agent_ids: bool) -> AbstractSpace:
    """One agent's observation space, with room for its one-hot id when `agent_ids` (a `Dict`
    one: an `AGENT_ID` entry; a `Tuple` one: a last entry)."""
    if not agent_ids:
        return agent_space
    if isinstance(agent_space, Dict):
        if AGENT_ID in agent_space.spaces:
            raise ValueError(f"IPPO(agent_ids=True) adds an {AGENT_ID!r} entry, and the observations have one already")
        return Dict({**agent_space.spaces, AGENT_ID: Box(0.0, 1.0, (num_agents,))})
    if isinstance(agent_space, Tuple):
        return Tuple((*agent_space.spaces, Box(0.0, 1.0, (num_agents,))))
    if isinstance(agent_space, Box) and len(agent_space.shape) == 1:
        low, high = np.asarray(agent_space.low), np.asarray(agent_space.high)
    elif isinstance(agent_space, MultiDiscrete):  # (its entries as floats, the id after them)
        low, high = np.zeros(len(agent_space.nvec), np.float32), np.asarray(agent_space.nvec, np.float32) - 1.0
    elif isinstance(agent_space, MultiBinary) and len(agent_space.shape) == 1:
        low, high = np.zeros(agent_space.shape, np.float32), np.ones(agent_space.shape, np.float32)
    else:
        raise ValueError(
            "IPPO(agent_ids=True) needs 1-D Box, MultiDiscrete, 1-D MultiBinary, Dict or Tuple observations per agent, "
            f"got {agent_space!r}"
        )
    low = np.concatenate([low, np.zeros(num_agents, np.float32)])
    high = np.concatenate([high, np.ones(num_agents, np.float32)])
    return Box(low, high, (low.shape[0],))


class ClipAgentActions(AbstractWrapper):
    """Clip every agent's continuous action into its Box before the team env steps."""

    env: AbstractEnv

    def step(self, key: Key, state: EnvState, action: Array) -> tuple[EnvState, TimeStep]:
        space = self.env.action_space.space
        return self.env.step(key, state, jnp.clip(action, space.low, space.high))


class AbstractSeats(AbstractEnv):
    """A team env seen as single-agent envs (`AgentSeat`, `SharedSeats`): an agent's
    observation (with its one-hot id where `agent_ids`) and action spaces."""

    team: eqx.AbstractVar[AbstractEnv]
    agent_ids: eqx.AbstractVar[bool]

    @property
    def num_agents(self) -> int:
        return self.team.action_space.num_agents

    @property
    def observation_space(self) -> AbstractSpace:
        return seat_space(self.team.observation_space.space, self.num_agents, self.agent_ids)

    @property
    def action_space(self) -> AbstractSpace:
        return self.team.action_space.space


class AgentSeat(AbstractSeats):
    """One agent's view of a team env (see the module's description)."""

    team: AbstractEnv
    agent_ids: bool = eqx.field(static=True, default=False)

    @property
    def name(self) -> str:
        return self.team.name

    @property
    def max_episode_steps(self) -> int | None:
        return self.team.max_episode_steps

    def _view(self, ts: TimeStep) -> TimeStep:
        i = _lane()
        obs = agent_rows(ts.obs, i)
        if self.agent_ids:
            obs = with_agent_ids(obs, i, self.num_agents, ())
        return TimeStep(obs, agent_rewards(ts)[i], ts.terminated, ts.truncated, {})

    def reset(self, key: Key) -> tuple[EnvState, TimeStep]:
        state, ts = self.team.reset(_first_lane_key(key))
        return state, self._view(ts)

    def step(self, key: Key, state: EnvState, action: Array) -> tuple[EnvState, TimeStep]:
        state, ts = self.team.step(_first_lane_key(key), state, _gather(action, self.num_agents))
        return state, self._view(ts)


class SharedSeatsState(eqx.Module):
    inner: EnvState
    agent_return: Float[Array, "envs agents"]
    length: Int[Array, " envs"]
    finished_return: Float[Array, " agents"]
    """The agents' returns summed over the episodes finished since the last `clear`."""
    finished: Float[Array, ""]
    """How many episodes finished since the last `clear`."""

    def clear(self) -> "SharedSeatsState":
        return eqx.tree_at(
            lambda s: (s.finished_return, s.finished), self, (jnp.zeros_like(self.finished_return), jnp.zeros_like(self.finished))
        )


class SharedSeats(AbstractSeats):
    """`num_envs` auto-resetting team envs as `num_envs * num_agents` single-agent envs
    (env-major): what PPO's `train_env` is for IPPO with shared parameters. Its `info`
    carries `final_obs`, `episode_return` (each agent's) and `episode_length`, as PPO's
    own `VectorEnv(EpisodeStatistics(AutoReset(env)))` does."""

    team: AbstractEnv
    num_envs: int = eqx.field(static=True)
    agent_ids: bool = eqx.field(static=True)
    whole_teams: bool = eqx.field(static=True, default=False)

    @property
    def minibatch_group(self) -> int:
        """How many adjacent envs (seats) PPO's minibatches keep together: a team's with `whole_teams`, else 1."""
        return self.num_agents if self.whole_teams else 1

    def _vector(self) -> VectorEnv:
        return VectorEnv(AutoReset(self.team), self.num_envs)

    def _flat_obs(self, obs: Any) -> Any:
        n, e = self.num_agents, self.num_envs
        if self.agent_ids:
            obs = with_agent_ids(obs, jnp.arange(n)[None, :], n, (e, n))
        return jax.tree.map(lambda x: x.reshape((e * n, *x.shape[2:])), obs)

    def _flat(self, x: Array) -> Array:
        """`(num_envs, num_agents)` or a team flag `(num_envs,)` as `(num_envs * num_agents,)`."""
        if x.ndim == 1:
            x = jnp.broadcast_to(x[:, None], (self.num_envs, self.num_agents))
        return x.reshape(self.num_envs * self.num_agents)

    def reset(self, key: Key) -> tuple[SharedSeatsState, TimeStep]:
        inner, ts = self._vector().reset(key)
        n, e = self.num_agents, self.num_envs
        state = SharedSeatsState(
            inner, jnp.zeros((e, n), jnp.float32), jnp.zeros((e,), jnp.int32), jnp.zeros((n,), jnp.float32), jnp.zeros((), jnp.float32)
        )
        obs = self._flat_obs(ts.obs)
        info = {"final_obs": obs, "episode_return": self._flat(state.agent_return), "episode_length": self._flat(state.length)}
        return state, TimeStep(obs, self._flat(agent_rewards(ts)), self._flat(ts.terminated), self._flat(ts.truncated), info)

    def step(self, key: Key, state: SharedSeatsState, action: Array) -> tuple[SharedSeatsState, TimeStep]:
        action = action.reshape((self.num_envs, self.num_agents, *action.shape[1:]))
        inner, ts = self._vector().step(key, state.inner, action)
        rewards = agent_rewards(ts)
        ret, length, done = state.agent_return + rewards, state.length + 1, ts.done
        new = SharedSeatsState(
            inner,
            jnp.where(done[:, None], 0.0, ret),
            jnp.where(done, 0, length).astype(jnp.int32),
            state.finished_return + jnp.sum(jnp.where(done[:, None], ret, 0.0), axis=0),
            state.finished + jnp.sum(done.astype(jnp.float32)),
        )
        info = {
            "final_obs": self._flat_obs(ts.info["final_obs"]),
            "episode_return": self._flat(ret),
            "episode_length": self._flat(length),
        }
        ts = TimeStep(self._flat_obs(ts.obs), self._flat(rewards), self._flat(ts.terminated), self._flat(ts.truncated), info)
        return new, ts
