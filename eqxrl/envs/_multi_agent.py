"""The multi-agent protocol: a team of agents behind the single-agent `AbstractEnv` protocol.

A multi-agent env is an `AbstractEnv` whose agent is the team, so every wrapper,
`check_env`, `evaluate` and the training loop work on it unchanged:

- `observation_space` and `action_space` are `MultiAgentSpace(agent_space, num_agents)`:
  observations are `(num_agents, *obs_shape)`, actions `(num_agents, *action_shape)`,
  stacked in the fixed order of `env.agents`; an agent's `Dict` observation (features and
  an action mask, `{"obs": ..., "action_mask": ...}`) makes the team's a dict of the same
  keys, each entry stacked: `{"obs": (num_agents, *shape), "action_mask": (num_agents, n)}`;
- `reward` is the team reward, the sum of the agents' rewards, which `info["agent_rewards"]`
  holds (shape `(num_agents,)`);
- `terminated` and `truncated` are the team's: the episode ends for every agent at once,
  a terminal state and a time limit kept apart as in the single-agent protocol.

`agent_rewards(ts)` reads the agents' rewards so that they always sum to `ts.reward`:
a wrapper that changes the team reward without touching `info["agent_rewards"]`
(a reward scale, a fault injection) has its change split equally between the agents.
"""

import abc
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Bool, Float

from ..core import Key, is_positive_int
from ._base import AbstractEnv, TimeStep
from ._spaces import AbstractCompositeSpace, AbstractSpace


class MultiAgentSpace(AbstractSpace):
    """The joint space of `num_agents` agents that each use `space`: elements have shape
    `(num_agents, *space.shape)`, one row per agent. For a `Dict` (`Tuple`) `space` an element is a dict
    (tuple) of the same entries, every entry stacked along a leading agent axis (`shape` is the dict (tuple) of
    the entries' `(num_agents, *entry_shape)`); `flatten_space` gives one
    `MultiAgentSpace(entry_space, num_agents)` leaf per entry."""

    space: Any
    num_agents: int = eqx.field(static=True)

    def __check_init__(self):
        if not isinstance(self.space, AbstractSpace):
            raise ValueError(f"MultiAgentSpace(space) must be an eqxrl space, got {self.space!r}")
        if isinstance(self.space, MultiAgentSpace):
            raise ValueError("MultiAgentSpace(space) must be one agent's space, got another MultiAgentSpace")
        if not is_positive_int(self.num_agents):
            raise ValueError(f"MultiAgentSpace(num_agents) must be a positive int, got {self.num_agents!r}")

    @property
    def shape(self) -> Any:
        if isinstance(self.space, AbstractCompositeSpace):
            stacked = [MultiAgentSpace(sub, self.num_agents).shape for sub in self.space.named_spaces().values()]
            return self.space.from_entries(stacked)
        return (self.num_agents, *self.space.shape)

    def element_tree(self) -> Any:
        if not isinstance(self.space, AbstractCompositeSpace):
            return self
        stacked = lambda s: MultiAgentSpace(s, self.num_agents)  # noqa: E731
        return jax.tree.map(stacked, self.space.element_tree(), is_leaf=lambda s: isinstance(s, AbstractSpace))

    @property
    def dtype(self):
        return self.space.dtype

    def sample(self, key: Key) -> Any:
        """One element of `space` per agent, drawn independently."""
        return jax.vmap(self.space.sample)(jax.random.split(key, self.num_agents))

    def contains(self, x: Any) -> Bool[Array, ""]:
        if isinstance(self.space, AbstractCompositeSpace):
            leaves = jax.tree.leaves(x)
            if self.space.entries_of(x) is None or not all(eqx.is_array_like(v) for v in leaves):
                return jnp.asarray(False)
            x = jax.tree.map(jnp.asarray, x)
        else:
            x = jnp.asarray(x)
        if not all(v.shape[:1] == (self.num_agents,) for v in jax.tree.leaves(x)):
            return jnp.asarray(False)
        return jnp.all(jax.vmap(self.space.contains)(x))


class AbstractMultiAgentEnv(AbstractEnv):
    """A team of agents stepping together (see the module's description of the protocol).

    Implementations give `agents` (the fixed order of the agent axis) and one agent's
    spaces; `reset` and `step` return team `TimeStep`s with `info["agent_rewards"]`.
    """

    @property
    @abc.abstractmethod
    def agents(self) -> tuple[str, ...]:
        """The agents' names, in the order of the agent axis."""

    @property
    @abc.abstractmethod
    def agent_observation_space(self) -> AbstractSpace:
        """The space of one agent's observation (every agent's)."""

    @property
    @abc.abstractmethod
    def agent_action_space(self) -> AbstractSpace:
        """The space of one agent's action (every agent's)."""

    @property
    def num_agents(self) -> int:
        return len(self.agents)

    @property
    def observation_space(self) -> MultiAgentSpace:
        return MultiAgentSpace(self.agent_observation_space, self.num_agents)

    @property
    def action_space(self) -> MultiAgentSpace:
        return MultiAgentSpace(self.agent_action_space, self.num_agents)


def is_multi_agent(env: Any) -> bool:
    """Whether `env` (perhaps wrapped) follows the multi-agent protocol: both of its spaces are
    `MultiAgentSpace`s of the same number of agents."""
    if not isinstance(env, AbstractEnv):
        return False
    obs, act = env.observation_space, env.action_space
    return isinstance(obs, MultiAgentSpace) and isinstance(act, MultiAgentSpace) and obs.num_agents == act.num_agents


def agent_names(env: AbstractEnv) -> tuple[str, ...]:
    """The agents of a multi-agent `env`, perhaps wrapped: the innermost env's `agents`, or
    `agent_0, agent_1, ...` when it names none."""
    inner = env.unwrapped
    if isinstance(inner, AbstractMultiAgentEnv):
        return tuple(inner.agents)
    if not is_multi_agent(env):
        raise ValueError(f"agent_names(env) needs a multi-agent env (MultiAgentSpace spaces), got {env.name!r}")
    return tuple(f"agent_{i}" for i in range(env.action_space.num_agents))


def agent_rewards(ts: TimeStep) -> Float[Array, "*batch agents"]:
    """**Returns:** the agents' rewards of a team timestep, `info["agent_rewards"]` with any
    change a wrapper made to the team `reward` split equally between the agents (so they
    always sum to `ts.reward`)."""
    if "agent_rewards" not in ts.info:
        raise ValueError("agent_rewards(ts): a multi-agent timestep has info['agent_rewards'], this one has none")
    rewards = ts.info["agent_rewards"]
    n = rewards.shape[-1]
    change = ts.reward - jnp.sum(rewards, axis=-1)
    return rewards + (change / jnp.float32(n))[..., None]
