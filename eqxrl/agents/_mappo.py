"""Multi-agent PPO (Yu et al. 2022, "The Surprising Effectiveness of PPO in Cooperative
Multi-Agent Games"): IPPO's decentralised actors with a centralised critic on the team's
global state.

MAPPO composes IPPO rather than subclassing it: its `ippo` is an IPPO over `GlobalState(team)`
(every agent's observation with the global state and its one-hot id), whose actor torso
(`SelectTorso`) sees only the agent's own entries and whose critic torso sees only the global
state and the id. Training is that IPPO's (PPO over every agent's seat); acting fills the
global-state entry the actor never reads with zeros, so MAPPO acts on the team env's own
observations.
"""

import dataclasses
from typing import Any, ClassVar

import equinox as eqx
import jax.numpy as jnp
from jaxtyping import Array, Float

from ..components import (
    AbstractLossTerm,
    AbstractOptimizer,
    AbstractRecurrentTorso,
    AbstractSchedule,
    AbstractTorso,
    MLPTorso,
    as_torso,
    is_recurrent,
    learning_rate,
    loss_terms,
    optimizer_slot,
)
from ..core import Key, Metrics, hyperparameter
from ..envs import ACTION_MASK, AbstractEnv, Box, ObservationLayout
from ._base import AbstractRolloutAgent, Clock
from ._ippo import IPPO, as_seat
from ._ippo_envs import AGENT_ID, AgentSeat, ClipAgentActions
from ._mappo_parts import GLOBAL_STATE, GLOBAL_STATE_MODES, GlobalState, SelectTorso, _own_entries, global_state_kind
from ._ppo import PPOState


class MAPPO(AbstractRolloutAgent):
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
    agent's one-hot id to the actor's input. Every other field means what it means for IPPO
    and PPO (`num_envs` counts team envs); the metrics are IPPO's.
    """

    default_env: ClassVar[str] = "jaxmarl/MPE_simple_spread_v3"
    replaced_by: ClassVar[dict[str, tuple[str, ...]]] = {"optimizer": ("learning_rate", "max_grad_norm")}
    env: AbstractEnv = eqx.field(converter=as_seat)
    num_envs: int = eqx.field(static=True, default=4)
    rollout_length: int = eqx.field(static=True, default=128)
    num_epochs: int = eqx.field(static=True, default=4)
    num_minibatches: int = eqx.field(static=True, default=4)
    hidden_sizes: tuple[int, ...] = eqx.field(static=True, default=(64, 64), converter=tuple)
    activation: str = eqx.field(static=True, default="tanh")
    actor_torso: AbstractTorso | AbstractRecurrentTorso | None = eqx.field(static=True, default=None, converter=as_torso)
    critic_torso: AbstractTorso | None = eqx.field(static=True, default=None, converter=as_torso)
    shared_torso: bool = eqx.field(static=True, default=False)
    anneal_lr: bool = eqx.field(static=True, default=True)
    clip_value_loss: bool = eqx.field(static=True, default=True)
    normalize_advantages: bool = eqx.field(static=True, default=True)
    normalize_observations: bool = eqx.field(static=True, default=False)
    state_dependent_std: bool = eqx.field(static=True, default=False)
    grad_clip: str = eqx.field(static=True, default="global_norm")
    optimizer: AbstractOptimizer | None = optimizer_slot()
    policy_loss_terms: tuple[AbstractLossTerm, ...] = loss_terms()
    critic_loss_terms: tuple[AbstractLossTerm, ...] = loss_terms()
    learning_rate: Float[Array, ""] | AbstractSchedule = learning_rate(2.5e-4)
    gamma: Float[Array, ""] = hyperparameter(0.99)
    gae_lambda: Float[Array, ""] = hyperparameter(0.95)
    clip_eps: Float[Array, ""] = hyperparameter(0.2)
    ent_coef: Float[Array, ""] = hyperparameter(0.01)
    vf_coef: Float[Array, ""] = hyperparameter(0.5)
    max_grad_norm: Float[Array, ""] = hyperparameter(0.5)
    target_kl: Float[Array, ""] = hyperparameter(float("inf"))
    init_std: Float[Array, ""] = hyperparameter(1.0)
    share_parameters: bool = eqx.field(static=True, default=True)
    agent_ids: bool = eqx.field(static=True, default=True)
    global_state: str = eqx.field(static=True, default="auto")

    def __check_init__(self):
        if not isinstance(self.env, AgentSeat):
            raise ValueError(
                "MAPPO(env) must be a multi-agent env (an eqxrl.envs.AbstractMultiAgentEnv, e.g. "
                f"'jaxmarl/MPE_simple_spread_v3', whose spaces are MultiAgentSpaces), got {self.env!r}"
            )
        if not isinstance(self.agent_ids, bool):
            raise ValueError(f"MAPPO(agent_ids) must be True or False, got {self.agent_ids!r}")
        if self.global_state not in GLOBAL_STATE_MODES:
            raise ValueError(f"MAPPO(global_state) must be 'auto', 'world_state' or 'observations', got {self.global_state!r}")
        if self.shared_torso is not False:
            raise ValueError(
                "MAPPO(shared_torso) must be False (the critic sees the global state, the actor only its own "
                f"observation), got {self.shared_torso!r}"
            )
        if is_recurrent(self.actor_torso):
            raise ValueError(
                "MAPPO(actor_torso) must be a feed-forward torso (a recurrent one needs shared_torso=True), "
                f"got {type(self.actor_torso).__name__}"
            )
        global_state_kind(self.env.team, self.global_state)
        try:  # IPPO's and PPO's checks of the same fields, named as MAPPO's
            self.ippo
        except ValueError as e:
            message = str(e)
            if message.startswith("IPPO"):
                raise ValueError("MA" + message[1:]) from None
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
        return self.ippo.agents

    @property
    def recurrent(self) -> bool:
        return False

    @property
    def eval_env(self) -> AbstractEnv:
        """The team env (every agent's continuous actions clipped into their Box)."""
        team = self.team_env
        return ClipAgentActions(team) if isinstance(team.action_space.space, Box) else team

    @property
    def global_state_kind(self) -> str:
        """What the critic sees: `"world_state"` (the env's) or `"observations"` (every agent's, concatenated)."""
        return global_state_kind(self.team_env, self.global_state)

    @property
    def central_team(self) -> GlobalState:
        """The team env with the global state in every agent's observation (what `ippo` trains on)."""
        return GlobalState(self.team_env, self.global_state_kind)

    @property
    def actor_entries(self) -> tuple[str, ...]:
        """The entries of a seat's observation the actor sees: the agent's own (and its id with `agent_ids`)."""
        own = tuple(_own_entries(self.team_env.observation_space.space))
        return own + ((AGENT_ID,) if self.agent_ids else ())

    @property
    def ippo(self) -> IPPO:
        """The IPPO that trains and acts: over `central_team`, every seat with its id, the actor
        and critic torsos seeing their own entries (see the module's description)."""
        skip = ("env", "actor_torso", "critic_torso", "agent_ids", "global_state")
        fields = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.init and f.name not in skip}
        mlp = MLPTorso(self.hidden_sizes, self.activation)
        actor = SelectTorso(self.actor_entries, mlp if self.actor_torso is None else self.actor_torso)
        critic = SelectTorso((GLOBAL_STATE, AGENT_ID), mlp if self.critic_torso is None else self.critic_torso)
        return IPPO(self.central_team, actor_torso=actor, critic_torso=critic, agent_ids=True, **fields)

    @property
    def learner(self) -> Any:
        """`ippo`'s learner: the PPO that trains (over every agent's seat with shared parameters)."""
        return self.ippo.learner

    def _central_obs(self, obs: Any) -> dict[str, Array]:
        """Team observations `(*batch, num_agents, ...)` as `ippo` takes them: the global state
        entry (which the actor never reads) filled with zeros."""
        n, layout = self.num_agents, ObservationLayout.of(self.team_env.observation_space.space)
        entries = tuple((name, (n, *shape)) for name, shape in layout.entries)
        if layout.mask_size:
            entries += ((ACTION_MASK, (n, layout.mask_size)),)
        batch = ObservationLayout(entries).flatten(obs, "MAPPO").shape[:-1]
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
