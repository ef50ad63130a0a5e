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
from ._base import Clock
from ._noise import policy_noise_spec
from ._ippo_envs import AGENT_AXIS, SharedSeats, with_agent_ids
from ._ppo import PPO, PPOState
from ._team import AbstractTeamAgent, team_ppo


def _metric_name(agent: str) -> str:
    return "episode_return_" + re.sub(r"\W", "_", agent)


class IPPO(AbstractTeamAgent):
    """Independent PPO: each agent of a multi-agent env (`eqxrl.envs.AbstractMultiAgentEnv`,
    e.g. `"jaxmarl/MPE_simple_spread_v3"`) maximises its own reward with PPO's objective,
    from its own observations.

    IPPO is composed of a `PPO` (`ppo`), the one every agent learns with: its keyword
    arguments are PPO's fields and mean what they mean for PPO (`num_envs` counts team envs),
    or give `ppo=PPO(...)` itself (on a seat of the team env). With `share_parameters=True`
    one network serves every agent (the PPO collects from every agent's seat of the team
    envs at once), else each agent has its own networks and optimizer state (the PPO
    vmapped over the agents). `agent_ids` appends each agent's one-hot id to its
    observation. Metrics: `episode_return` is the team return (the sum of the agents'),
    `episode_return_<agent>` each agent's; `env_steps` counts team env steps.
    """

    default_env: ClassVar[str] = "jaxmarl/MPE_simple_spread_v3"
    ppo: PPO
    share_parameters: bool = eqx.field(static=True, default=True)
    agent_ids: bool = eqx.field(static=True, default=True)

    def __init__(self, env: Any, *, share_parameters: bool = True, agent_ids: bool = True, ppo: PPO | None = None, **fields: Any):
        if not isinstance(share_parameters, bool):
            raise ValueError(f"IPPO(share_parameters) must be True or False, got {share_parameters!r}")
        self.ppo = team_ppo("IPPO", env, agent_ids, ppo, fields, type(self).keywords())
        self.share_parameters, self.agent_ids = share_parameters, agent_ids

    @property
    def recurrent(self) -> bool:
        return self.ppo.recurrent

    @property
    def learner(self) -> PPO:
        """The PPO that trains: over every agent's seat at once (shared parameters: `ppo` collecting
        from the shared seats of `num_envs` team envs), or one agent's seat (separate parameters:
        `ppo`, vmapped over the agents)."""
        if not self.share_parameters:
            return self.ppo
        whole_teams = getattr(self.ppo.critic_torso, "whole_teams", False)  # (MAPPO's TeamCriticTorso)
        shared = SharedSeats(self.eval_env, self.ppo.num_envs, self.agent_ids, whole_teams)
        return dataclasses.replace(self.ppo, num_envs=self.ppo.num_envs * self.num_agents, vector_env=shared)

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
