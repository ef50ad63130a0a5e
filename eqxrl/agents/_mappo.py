"""Multi-agent PPO (Yu et al. 2022, "The Surprising Effectiveness of PPO in Cooperative
Multi-Agent Games"): IPPO's decentralised actors with a centralised critic on the team's
global state.

MAPPO is composed of a PPO as IPPO is (`eqxrl.agents._team`); its `ippo` is an IPPO over `GlobalState(team)`
(every agent's observation with the global state and its one-hot id), whose actor torso
(`SelectTorso`) sees only the agent's own entries and whose critic torso sees only the global
state and the id. Training is that IPPO's (PPO over every agent's seat); acting fills the
global-state entry the actor never reads with zeros, so MAPPO acts on the team env's own
observations. With shared parameters (and no observation normalisation: `whole_teams`) the
seats hold the state once per team, not once per agent, and the critic (`TeamCriticTorso`)
computes its part of the state once per team step, PPO's minibatches keeping teams whole.
"""

import dataclasses
from typing import Any, ClassVar

import equinox as eqx
import jax.numpy as jnp
from jaxtyping import Array

from ..components import MLPTorso, is_recurrent
from ..core import Key, Metrics
from ._base import Clock
from ._ippo import IPPO
from ._ippo_envs import AGENT_ID, AgentSeat
from ._mappo_parts import GLOBAL_STATE, GLOBAL_STATE_MODES, GlobalState, SelectTorso, TeamCriticTorso, _own_entries, global_state_kind
from ._ppo import PPO, PPOState
from ._team import AbstractTeamAgent, team_ppo


class MAPPO(AbstractTeamAgent):
    """MAPPO: every agent acts from its own observation (IPPO's actor: one network for every
    agent with `share_parameters=True`, else one per agent) and learns from the advantages and
    value targets of a centralised critic, which sees the team's global state and the agent's
    one-hot id (so each agent has its own value). GAE runs per agent, on the agent's own
    reward and the critic's value of that agent; the critic is shared as the actor is.

    `global_state` chooses the critic's input: `"auto"` (default) the JaxMARL env's world state
    where the env has one (`get_world_state`: SMAX, JaxNav, the FACMAC MPE scenarios), else
    every agent's observation concatenated (the other MPE scenarios, e.g. simple_spread, as
    JaxMARL's own MAPPO does on MPE); `"world_state"` demands the world state, `"observations"`
    always concatenates. `actor_torso` and `critic_torso` (None: the MLP of `hidden_sizes` and
    `activation`) are built on the actor's and the critic's inputs; the two cannot share a
    torso (`shared_torso` must be False), so the actor is feed-forward. `agent_ids` appends the
    agent's one-hot id to the actor's input. MAPPO is composed of a `PPO` (`ppo`, on one
    agent's seat of the team env) as IPPO is: its other keyword arguments are PPO's fields (but
    the separate updates') and mean what they mean for IPPO and PPO (`num_envs` counts team
    envs); the metrics are IPPO's.
    """

    default_env: ClassVar[str] = "jaxmarl/MPE_simple_spread_v3"
    excluded: ClassVar[tuple[str, ...]] = ("vector_env", "actor_epochs", "critic_epochs", "critic_optimizer", "target_kl_epoch")
    ppo: PPO
    share_parameters: bool = eqx.field(static=True, default=True)
    agent_ids: bool = eqx.field(static=True, default=True)
    global_state: str = eqx.field(static=True, default="auto")

    def __init__(
        self, env: Any, *, share_parameters: bool = True, agent_ids: bool = True, global_state: str = "auto", ppo: PPO | None = None,
        **fields: Any,
    ):  # fmt: skip
        shared, actor = (fields.get("shared_torso", False), fields.get("actor_torso")) if ppo is None else (ppo.shared_torso, ppo.actor_torso)
        if shared is not False:
            raise ValueError(
                f"MAPPO(shared_torso) must be False (the critic sees the global state, the actor only its own observation), got {shared!r}"
            )
        if is_recurrent(actor):
            raise ValueError(f"MAPPO(actor_torso) must be a feed-forward torso (a recurrent one needs shared_torso=True), got {type(actor).__name__}")
        self.ppo = team_ppo("MAPPO", env, False, ppo, fields, type(self).keywords())  # (a plain seat: its PPO holds the settings; ids go on the central seat)
        self.share_parameters, self.agent_ids, self.global_state = share_parameters, agent_ids, global_state

    def __check_init__(self):
        if not isinstance(self.agent_ids, bool):
            raise ValueError(f"MAPPO(agent_ids) must be True or False, got {self.agent_ids!r}")
        if self.global_state not in GLOBAL_STATE_MODES:
            raise ValueError(f"MAPPO(global_state) must be 'auto', 'world_state' or 'observations', got {self.global_state!r}")
        global_state_kind(self.team_env, self.global_state)
        try:  # IPPO's and PPO's checks of the same fields on the central seat, named as MAPPO's
            self.ippo
        except ValueError as e:
            message = str(e)
            if message.startswith("IPPO"):
                raise ValueError("MA" + message[1:]) from None
            raise

    # ----------------------------------------------------------------- structure
    @property
    def recurrent(self) -> bool:
        return False

    @property
    def global_state_kind(self) -> str:
        """What the critic sees: `"world_state"` (the env's) or `"observations"` (every agent's, concatenated)."""
        return global_state_kind(self.team_env, self.global_state)

    @property
    def whole_teams(self) -> bool:
        """Whether the critic reads whole teams (`TeamCriticTorso`: shared parameters, no observation
        normalisation): each seat then stores a slice of the global state, not all of it."""
        return self.share_parameters and not self.ppo.normalize_observations

    @property
    def central_team(self) -> GlobalState:
        """The team env with the global state in every agent's observation (what `ippo` trains on;
        with `whole_teams`, agent `i`'s observation holds the `i`-th slice of it)."""
        return GlobalState(self.team_env, self.global_state_kind, self.whole_teams)

    @property
    def actor_entries(self) -> tuple[str, ...]:
        """The entries of a seat's observation the actor sees: the agent's own (and its id with `agent_ids`)."""
        own = tuple(_own_entries(self.team_env.observation_space.space))
        return own + ((AGENT_ID,) if self.agent_ids else ())

    @property
    def ippo(self) -> IPPO:
        """The IPPO that trains and acts: over `central_team`, every seat with its id, the actor
        and critic torsos seeing their own entries (see the module's description)."""
        ppo = self.ppo
        mlp = MLPTorso(ppo.hidden_sizes, ppo.activation)
        actor = SelectTorso(self.actor_entries, mlp if ppo.actor_torso is None else ppo.actor_torso)
        inner = mlp if ppo.critic_torso is None else ppo.critic_torso
        if self.whole_teams:  # (a seat's slice of the state: its GLOBAL_STATE entry, or its own observation)
            team = self.central_team
            slices = (GLOBAL_STATE,) if team.stores_state else tuple(_own_entries(self.team_env.observation_space.space))
            critic = TeamCriticTorso(self.num_agents, team.state_size, inner, slices)
        else:
            critic = SelectTorso((GLOBAL_STATE, AGENT_ID), inner)
        central = dataclasses.replace(ppo, env=AgentSeat(self.central_team, True), actor_torso=actor, critic_torso=critic)
        return IPPO(self.central_team, ppo=central, agent_ids=True, share_parameters=self.share_parameters)

    @property
    def learner(self) -> Any:
        """`ippo`'s learner: the PPO that trains (over every agent's seat with shared parameters)."""
        return self.ippo.learner

    def _central_obs(self, obs: Any) -> dict[str, Array]:
        """Team observations `(*batch, num_agents, ...)` as `ippo` takes them: the global state
        entry (which the actor never reads) filled with zeros."""
        batch = self._team_batch_shape(obs)
        central = self.central_team
        return central.with_state(obs, jnp.zeros((*batch, central.state_size), jnp.float32))

    # ----------------------------------------------------------------- API
    def init(self, key: Key) -> PPOState:
        return self.ippo.init(key)

    def act(self, state: PPOState, obs: Any, key: Key | None = None, deterministic: bool = False) -> Array:
        """**Returns:** every agent's action for team observations `(*batch, num_agents, *obs_shape)`
        (or a dict of such entries, an agent's action mask among them): `(*batch, num_agents, *action_shape)`."""
        if key is None and not deterministic:
            raise ValueError("MAPPO.act(key) is required unless deterministic=True")
        return self.ippo.act(state, self._central_obs(obs), key, deterministic)

    def noise_spec(self, state: PPOState, batch_shape: tuple[int, ...] = ()) -> Any:
        """Every agent's policy noise (IPPO's `noise_spec`: the agent axis after the batch)."""
        return self.ippo.noise_spec(state, batch_shape)

    def act_from_noise(self, state: PPOState, obs: Any, noise: Array) -> Array:
        """`act` sampling every agent's action from `noise` (`noise_spec`)."""
        return self.ippo.act_from_noise(state, self._central_obs(obs), noise)

    def train_iteration(self, state: PPOState, clock: Clock) -> tuple[PPOState, Metrics]:
        return self.ippo.train_iteration(state, clock)
