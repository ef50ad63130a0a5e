"""Agents of multi-agent envs composed of a PPO on one agent's seat of the team env (IPPO, MAPPO):
what they share, once. Their keyword arguments are PPO's fields (less those they build or do not
take) and their own; `config.json` lists them flat, as the keywords; `hyperparameters()` gives
PPO's as `ppo.<name>`, which the flat names resolve to (`--set learning_rate=...`, sweeps, PBT)."""

import dataclasses
from typing import Any, ClassVar

import equinox as eqx
from jaxtyping import Array

from ..core import to_spec
from ..envs import ACTION_MASK, AbstractEnv, Box, ObservationLayout, agent_names, is_multi_agent, make
from ._base import AbstractAgent
from ._ippo_envs import AgentSeat, ClipAgentActions
from ._ppo import PPO


def as_seat(env: Any) -> Any:
    """A multi-agent env (or its `make` name) as its `AgentSeat`; anything else is left for the
    agent's check to name."""
    if isinstance(env, str):
        env = make(env)
    if isinstance(env, AbstractEnv) and not isinstance(env, AgentSeat) and is_multi_agent(env):
        return AgentSeat(env)
    return env


def team_ppo(owner: str, env: Any, agent_ids: Any, ppo: Any, fields: dict[str, Any], keywords: Any) -> PPO:
    """The PPO an `owner` (IPPO, MAPPO) over the multi-agent `env` is composed of: `ppo` when given
    (on the seat `AgentSeat(team, agent_ids)`), else `PPO(AgentSeat(team, agent_ids), **fields)`,
    PPO's errors named as `owner`'s. Raises a one-line error for an env that is no multi-agent env,
    a keyword not in `keywords`, or `ppo` given together with PPO's fields."""
    seat = as_seat(env)
    if not isinstance(seat, AgentSeat):
        raise ValueError(
            f"{owner}(env) must be a multi-agent env (an eqxrl.envs.AbstractMultiAgentEnv, e.g. "
            f"'jaxmarl/MPE_simple_spread_v3', whose spaces are MultiAgentSpaces), got {env!r}"
        )
    if not isinstance(agent_ids, bool):
        raise ValueError(f"{owner}(agent_ids) must be True or False, got {agent_ids!r}")
    if ppo is not None:
        if fields:
            raise ValueError(f"{owner}(ppo) is the PPO every agent learns with: give it, or PPO's fields ({sorted(fields)}), not both")
        if not (isinstance(ppo, PPO) and isinstance(ppo.env, AgentSeat) and ppo.env.team == seat.team and ppo.env.agent_ids == agent_ids):
            raise ValueError(f"{owner}(ppo) must be a PPO on a seat of the team env (AgentSeat(team, agent_ids={agent_ids})), got {ppo!r}")
        return ppo
    unknown = sorted(set(fields) - set(keywords))
    if unknown:
        raise TypeError(f"{owner} got unexpected keyword argument(s) {unknown}")
    try:
        return PPO(AgentSeat(seat.team, agent_ids), **fields)
    except ValueError as e:  # PPO's checks, named as the owner's
        message = str(e)
        raise ValueError(owner + message[3:] if message.startswith("PPO") else message) from None


class AbstractTeamAgent(AbstractAgent):
    """A multi-agent agent composed of `ppo`, a PPO on one agent's seat of the team env, plus fields
    of its own: the env-facing structure (the team env, its agents, the evaluation env), the
    keywords, the config and the hyperparameters, once for IPPO and MAPPO."""

    ppo: eqx.AbstractVar[PPO]
    excluded: ClassVar[tuple[str, ...]] = ("vector_env",)
    """PPO's fields the agent does not take as keywords (it builds them, or does not support them)."""

    @classmethod
    def keywords(cls) -> dict[str, dataclasses.Field]:
        """PPO's fields (less `excluded`), then the agent's own."""
        own = {f.name: f for f in dataclasses.fields(cls) if f.init and f.name != "ppo"}
        return {**{k: f for k, f in PPO.keywords().items() if k not in cls.excluded}, **own}

    def config(self) -> dict[str, Any]:
        """As the keywords: PPO's fields (those of `ppo`), then the agent's own."""
        inner = {k: v for k, v in self.ppo.config().items() if k in type(self).keywords()}
        own = {f.name: to_spec(getattr(self, f.name)) for f in dataclasses.fields(self) if f.name != "ppo"}
        return {"agent": type(self).__name__, "env": self.env.name, **inner, **own}

    def hyperparameters(self) -> dict[str, Array]:
        return {f"ppo.{k}": v for k, v in self.ppo.hyperparameters().items()}

    @property
    def env(self) -> AgentSeat:
        """One agent's seat in the team env (`team_env`)."""
        return AgentSeat(self.ppo.env.team)

    @property
    def team_env(self) -> AbstractEnv:
        """The multi-agent env (`env` is one agent's seat in it)."""
        return self.ppo.env.team

    @property
    def num_agents(self) -> int:
        return self.env.num_agents

    @property
    def agents(self) -> tuple[str, ...]:
        return agent_names(self.team_env)

    @property
    def steps_per_iteration(self) -> int:
        return self.ppo.steps_per_iteration

    @property
    def eval_env(self) -> AbstractEnv:
        """The team env (every agent's continuous actions clipped into their Box)."""
        team = self.team_env
        return ClipAgentActions(team) if isinstance(team.action_space.space, Box) else team

    def _team_batch_shape(self, obs: Any) -> tuple[Any, ...]:  # (a symbolic dimension under jax.export)
        """The batch axes of team observations `obs` (`(*batch, num_agents, *obs_shape)`, or a dict
        of such entries), checked against the team's observation space as PPO checks its own."""
        n, layout = self.num_agents, ObservationLayout.of(self.team_env.observation_space.space)
        entries = tuple((name, (n, *shape)) for name, shape in layout.entries)
        if layout.mask_size:
            entries += ((ACTION_MASK, (n, layout.mask_size)),)
        team = ObservationLayout(entries)
        return tuple(team.flatten(obs, type(self).__name__).shape[:-1])  # (unused under jit: traced away)
