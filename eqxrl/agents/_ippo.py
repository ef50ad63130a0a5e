"""Independent PPO (de Witt et al. 2020) on multi-agent envs: every agent learns PPO's
objective from its own observations and rewards."""

import dataclasses
import re
from typing import Any, ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array

from ..core import Key, Metrics
from ..envs import ACTION_MASK, AbstractEnv, Box, ObservationLayout, agent_names, is_multi_agent, make
from ._base import Clock
from ._noise import policy_noise_spec
from ._ippo_envs import AGENT_AXIS, AgentSeat, ClipAgentActions, SharedSeats, with_agent_ids
from ._ppo import PPO, PPOState


def as_seat(env: Any) -> Any:
    """Converter of `IPPO.env`: a multi-agent env (or its `make` name) becomes its `AgentSeat`;
    anything else is left for `IPPO.__check_init__` to name."""
    if isinstance(env, str):
        env = make(env)
    if isinstance(env, AbstractEnv) and not isinstance(env, AgentSeat) and is_multi_agent(env):
        return AgentSeat(env)
    return env


class _SharedPPO(PPO):
    """PPO over `SharedSeats`: every agent of `num_envs / num_agents` team envs is one of its envs."""

    team: AbstractEnv | None = None
    agent_ids: bool = eqx.field(static=True, default=True)

    @property
    def train_env(self) -> SharedSeats:  # type: ignore[override]
        n = self.team.action_space.num_agents
        return SharedSeats(self.team, self.num_envs // n, self.agent_ids)


def _metric_name(agent: str) -> str:
    return "episode_return_" + re.sub(r"\W", "_", agent)


class IPPO(PPO):
    """Independent PPO: each agent of a multi-agent env (`eqxrl.envs.AbstractMultiAgentEnv`,
    e.g. `"jaxmarl/MPE_simple_spread_v3"`) maximises its own reward with PPO's objective,
    from its own observations.

    Every PPO field means what it means for PPO (`num_envs` counts team envs); with
    `share_parameters=True` one network serves every agent (a PPO whose batch holds every
    agent's experience), else each agent has its own networks and optimizer state (PPO
    vmapped over the agents). `agent_ids` appends each agent's one-hot id to its
    observation. Metrics: `episode_return` is the team return (the sum of the agents'),
    `episode_return_<agent>` each agent's; `env_steps` counts team env steps.
    """

    default_env: ClassVar[str] = "jaxmarl/MPE_simple_spread_v3"
    presets: ClassVar[dict] = {}  # PPO's "recurrent" preset was tuned on single-agent CartPoleNoVel-v1
    env: AbstractEnv = eqx.field(converter=as_seat)
    share_parameters: bool = eqx.field(static=True, default=True)
    agent_ids: bool = eqx.field(static=True, default=True)

    def __check_init__(self):
        if not isinstance(self.env, AgentSeat):
            raise ValueError(
                "IPPO(env) must be a multi-agent env (an eqxrl.envs.AbstractMultiAgentEnv, e.g. "
                f"'jaxmarl/MPE_simple_spread_v3', whose spaces are MultiAgentSpaces), got {self.env!r}"
            )
        for name in ("share_parameters", "agent_ids"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"IPPO({name}) must be True or False, got {getattr(self, name)!r}")
        try:  # PPO's own checks, named as IPPO's (they run before PPO's __check_init__)
            self._ppo(PPO, self.num_envs)
        except ValueError as e:
            message = str(e)
            if message.startswith("PPO"):
                raise ValueError("I" + message) from None
            raise

    # ----------------------------------------------------------------- structure
    @property
    def team_env(self) -> AbstractEnv:
        """The multi-agent env (`env` is one agent's seat in it)."""
        return self.env.team

    @property
    def num_agents(self) -> int:
        return self.env.num_agents

    @property
    def agents(self) -> tuple[str, ...]:
        return agent_names(self.team_env)

    @property
    def eval_env(self) -> AbstractEnv:
        """The team env (every agent's continuous actions clipped into their Box)."""
        team = self.team_env
        return ClipAgentActions(team) if isinstance(team.action_space.space, Box) else team

    def _ppo(self, cls: type[PPO], num_envs: int, **extra: Any) -> PPO:
        fields = {
            f.name: getattr(self, f.name)
            for f in dataclasses.fields(PPO)
            if f.init and f.name not in ("env", "num_envs")
        }
        return cls(AgentSeat(self.team_env, self.agent_ids), num_envs=num_envs, **fields, **extra)

    @property
    def learner(self) -> PPO:
        """The PPO that trains: over every agent's seat at once (shared parameters), or one
        agent's seat (separate parameters: vmapped over the agents)."""
        if self.share_parameters:
            return self._ppo(_SharedPPO, self.num_envs * self.num_agents, team=self.eval_env, agent_ids=self.agent_ids)
        return self._ppo(PPO, self.num_envs)

    # ----------------------------------------------------------------- API
    def init(self, key: Key) -> PPOState:
        if self.share_parameters:
            return self.learner.init(key)
        keys = jax.random.split(key, self.num_agents)
        return jax.vmap(self.learner.init, axis_name=AGENT_AXIS)(keys)

    def act(self, state: PPOState, obs: Any, key: Key | None = None, deterministic: bool = False) -> Array:
        """**Returns:** every agent's action for team observations `(*batch, num_agents, *obs_shape)`
        (or a dict of such entries, an agent's action mask among them): shape
        `(*batch, num_agents, *action_shape)`, each agent's action legal under its own mask."""
        return self._team_act(state, obs, key, deterministic)[0]

    def initial_carry(self, state: PPOState, batch_shape: tuple[int, ...] = ()) -> Any:
        """A recurrent IPPO's hidden states of fresh episodes for every agent (None when feed-forward)."""
        if not self.recurrent:
            return None
        if self.share_parameters:
            return self.learner.initial_carry(state, (*batch_shape, self.num_agents))
        return jax.vmap(lambda s: self.learner.initial_carry(s, batch_shape))(state)

    def act_with_carry(
        self, state: PPOState, obs: Any, carry: Any, reset: Array, key: Key | None = None, deterministic: bool = False
    ) -> tuple[Array, Any]:
        """`act` carrying every agent's memory: `reset` (shape `batch`) marks the team's episode starts."""
        if not self.recurrent:
            return self.act(state, obs, key, deterministic), carry
        return self._team_act(state, obs, key, deterministic, carry, jnp.asarray(reset, bool))

    def noise_spec(self, state: PPOState, batch_shape: tuple[int, ...] = ()) -> Any:
        """Every agent's policy noise for team observations of batch shape `batch_shape`: PPO's
        `noise_spec` with the agent axis after the batch (`(*batch, num_agents, ...)`)."""
        return policy_noise_spec(self.team_env.action_space.space, (*batch_shape, self.num_agents), "IPPO.noise_spec")

    def act_from_noise(self, state: PPOState, obs: Any, noise: Array) -> Array:
        """`act` sampling every agent's action from `noise` (`noise_spec`; agent `i`'s is `noise[..., i, ...]`)."""
        return self._team_act(state, obs, None, False, noise=noise)[0]

    def act_with_carry_from_noise(
        self, state: PPOState, obs: Any, carry: Any, reset: Array, noise: Array
    ) -> tuple[Array, Any]:
        """`act_with_carry` sampling every agent's action from `noise`."""
        if not self.recurrent:
            return self.act_from_noise(state, obs, noise), carry
        return self._team_act(state, obs, None, False, carry, jnp.asarray(reset, bool), noise)

    def _team_batch_shape(self, obs: Any) -> tuple[Any, ...]:  # (a symbolic dimension under jax.export)
        """The batch axes of team observations `obs` (`(*batch, num_agents, *obs_shape)`, or a dict
        of such entries), checked against the team's observation space as PPO checks its own."""
        n, layout = self.num_agents, ObservationLayout.of(self.team_env.observation_space.space)
        entries = tuple((name, (n, *shape)) for name, shape in layout.entries)
        if layout.mask_size:
            entries += ((ACTION_MASK, (n, layout.mask_size)),)
        team = ObservationLayout(entries)
        return tuple(team.flatten(obs, "IPPO").shape[:-1])  # (unused under jit: traced away)

    def _team_act(
        self, state: PPOState, obs: Any, key: Any, deterministic: bool, carry: Any = None, reset: Any = None, noise: Any = None
    ):  # fmt: skip
        """Every agent's actions; sampled from `key`, or from `noise` where it is given."""
        n = self.num_agents
        batch = self._team_batch_shape(obs)
        if key is None and noise is None and not deterministic:
            raise ValueError("IPPO.act(key) is required unless deterministic=True")
        learner = self.learner
        ids = jnp.arange(n)

        def act(s, o, k, c, r, z):  # (one learner's act: from its key, or from its noise z)
            if c is None:
                return learner.act(s, o, k, deterministic) if z is None else learner.act_from_noise(s, o, z), None
            if z is None:
                return learner.act_with_carry(s, o, c, r, k, deterministic)
            return learner.act_with_carry_from_noise(s, o, c, r, z)

        if self.share_parameters:
            if self.agent_ids:
                obs = with_agent_ids(obs, ids, n, (*batch, n))
            resets = None if carry is None else jnp.broadcast_to(reset[..., None], reset.shape + (n,))  # every seat of a team env
            return act(state, obs, key, carry, resets, noise)
        obs = jax.tree.map(lambda x: jnp.moveaxis(jnp.asarray(x), len(batch), 0), obs)
        keys = jax.random.split(key, n) if key is not None else None
        if noise is not None:
            spec = policy_noise_spec(self.team_env.action_space.space, (*batch, n), "IPPO.act_from_noise")
            spec.check(noise, "IPPO.act_from_noise(noise)")  # (batch may be symbolic: no noise_spec)
            noise = jnp.moveaxis(jnp.asarray(noise), len(batch), 0)

        def one(s, o, k, i, c, z):
            if self.agent_ids:
                o = with_agent_ids(o, i, n, batch)
            return act(s, o, k, c, reset, z)

        in_axes = (0, 0, None if keys is None else 0, 0, None if carry is None else 0, None if noise is None else 0)
        actions, carry = jax.vmap(one, in_axes=in_axes)(state, obs, keys, ids, carry, noise)
        return jnp.moveaxis(actions, 0, len(batch)), carry

    def train_iteration(self, state: PPOState, clock: Clock) -> tuple[PPOState, Metrics]:
        names = [_metric_name(a) for a in self.agents]
        if self.share_parameters:
            state = eqx.tree_at(lambda s: s.env_state, state, state.env_state.clear())
            state, metrics = self.learner.train_iteration(state, clock)
            finished = state.env_state.finished
            per_agent = jnp.where(finished > 0, state.env_state.finished_return / jnp.maximum(finished, 1.0), jnp.nan)
            metrics.update(
                env_steps=state.env_steps // self.num_agents,
                num_episodes=finished.astype(jnp.int32),
            )
        else:
            state, metrics = jax.vmap(self.learner.train_iteration, in_axes=(0, None), axis_name=AGENT_AXIS)(state, clock)
            per_agent = metrics["episode_return"]  # every agent's episodes end together
            counts = {k: metrics[k][0] for k in ("env_steps", "num_episodes")}
            metrics = {k: jnp.mean(v) for k, v in metrics.items()}
            metrics.update(counts)
        metrics["episode_return"] = jnp.sum(per_agent)
        metrics.update({name: per_agent[i] for i, name in enumerate(names)})
        return state, metrics
