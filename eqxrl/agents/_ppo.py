"""Proximal Policy Optimisation (Schulman et al. 2017), discrete and continuous."""

from dataclasses import InitVar
from functools import partial
from typing import Any, ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Bool, Float, Int, PyTree

from ..core import EnvState, Key, Metrics, check_hyperparameter, check_positive_int, hyperparameter, is_positive_int
from ..components import (
    AbstractDistribution, AbstractLossTerm, AbstractOptimizer, AbstractRecurrentTorso, AbstractTorso, CategoricalHead,
    Encoder, GaussianHead, IdentityTorso, MultiCategoricalHead, Noise, OptState, RecurrentEncoder, RunningMeanStd,
    ValueHead, add_loss_terms, as_torso, check_loss_terms, check_optimizer, check_torso, gae, get_activation,
    is_recurrent, loss_terms, normalize_advantages, optimizer_slot, ppo_policy_loss, torso_or_auto, value_loss,
)
from ..envs import AbstractEnv, ClipAction
from ._base import AbstractRolloutAgent, Clock, as_env, with_mask
from ._keywords import LearningRate, default_adam, module_from_keywords
from ._noise import policy_noise_spec
from ._ppo_split import check_separate, init_opt_state, separate_iteration
from ._ppo_recurrent import check_feed_forward, check_recurrent, recurrent_preset, sequence_loss, sequence_minibatches
from ._ppo_update import _Rollout, check_action_space, iteration_metrics, minibatch_step, policy_head, shuffled_minibatches


class PPOState(eqx.Module):
    """Everything PPO's training changes: networks, optimizer and env state, statistics, key."""

    actor: CategoricalHead | MultiCategoricalHead | GaussianHead
    critic: ValueHead
    opt_state: OptState
    env_state: EnvState
    obs: PyTree  # the env's current observations (arrays, or dicts of them)
    obs_stats: RunningMeanStd | None
    key: Key
    env_steps: Int[Array, ""]
    iteration: Int[Array, ""]
    torso: Encoder | RecurrentEncoder | None = None
    """The torso both heads share (`PPO(shared_torso=True)`), else None."""
    hidden: PyTree | None = None
    """A recurrent PPO's hidden state of each training env, else None."""
    episode_start: Bool[Array, " num_envs"] | None = None
    """A recurrent PPO's flags: each env's observation is an episode's first (zero the hidden state)."""


class PPO(AbstractRolloutAgent):
    """PPO with clipped surrogate, optional clipped value loss, entropy bonus,
    advantage normalisation, learning-rate annealing and KL early stopping.

    `Discrete` action spaces get a categorical policy, `MultiDiscrete` ones a factorised
    categorical (one categorical per entry), both masked by the env's action masks;
    `Box` action spaces a Gaussian policy whose samples are clipped into the bounds by
    the env wrapper (log-probabilities are of the unclipped sample).

    Networks: `actor_torso` and `critic_torso` (None: the MLP of `hidden_sizes`
    and `activation`; or `MLPTorso`, `CNNTorso.minatar()`, a user's Equinox module
    class ...) under a policy head and a value head; with `shared_torso=True` both
    heads sit on one torso (`actor_torso`; a recurrent `GRUTorso` or `LSTMTorso` needs
    `shared_torso=True`, see `_ppo_recurrent`). Both are trained by one optimizer:
    `optimizer` (an eqxrl optimizer or any optax transformation; not given, Adam built from
    the init-only keywords `learning_rate`, a number or a schedule, annealed linearly to 0
    with `anneal_lr` when a number, clipped at `max_grad_norm` by `grad_clip`: their numbers
    live in it, `optimizer.learning_rate`, which `aliases` maps the keywords to). `policy_loss_terms` and
    `critic_loss_terms` add extra loss terms (`eqxrl.components.AbstractLossTerm`).

    Separate updates (`separate_updates`, separate torsos only): with `actor_epochs`,
    `critic_epochs` (each None: `num_epochs`) or `critic_optimizer` set, the actor's
    epochs and the critic's are separate passes over the rollout, each network with its
    own optimizer state (the critic's: `critic_optimizer`, else the same kind as the
    actor's, `optimizer`), and `target_kl_epoch` (default inf: never) skips the actor's
    remaining epochs after one whose mean approximate KL exceeds it, the critic's
    epochs unaffected (see `_ppo_split`). `vector_env`: a batched env to collect from instead of
    `num_envs` copies of `env` (IPPO's shared seats; `info` with `final_obs`, `episode_return`, `episode_length`).
    """

    env: AbstractEnv = eqx.field(converter=as_env)
    aliases: ClassVar[dict[str, str]] = {k: f"optimizer.{v}" for k, v in (("learning_rate",) * 2, ("max_grad_norm",) * 2, ("anneal_lr", "anneal"), ("grad_clip", "clip"))}
    presets: ClassVar[dict] = {"recurrent": recurrent_preset}  # docs/agents/ppo.md, "The recurrent preset"
    num_envs: int = eqx.field(static=True, default=4)
    rollout_length: int = eqx.field(static=True, default=128)
    num_epochs: int = eqx.field(static=True, default=4)
    num_minibatches: int = eqx.field(static=True, default=4)
    actor_epochs: int | None = eqx.field(static=True, default=None)
    critic_epochs: int | None = eqx.field(static=True, default=None)
    hidden_sizes: tuple[int, ...] = eqx.field(static=True, default=(64, 64), converter=tuple)
    activation: str = eqx.field(static=True, default="tanh")
    actor_torso: AbstractTorso | AbstractRecurrentTorso | None = eqx.field(static=True, default=None, converter=as_torso)
    critic_torso: AbstractTorso | None = eqx.field(static=True, default=None, converter=as_torso)
    shared_torso: bool = eqx.field(static=True, default=False)
    anneal_lr: InitVar[bool] = True
    clip_value_loss: bool = eqx.field(static=True, default=True)
    normalize_advantages: bool = eqx.field(static=True, default=True)
    normalize_observations: bool = eqx.field(static=True, default=False)
    state_dependent_std: bool = eqx.field(static=True, default=False)
    grad_clip: InitVar[str] = "global_norm"
    optimizer: AbstractOptimizer | None = optimizer_slot()
    critic_optimizer: AbstractOptimizer | None = optimizer_slot()
    policy_loss_terms: tuple[AbstractLossTerm, ...] = loss_terms()
    critic_loss_terms: tuple[AbstractLossTerm, ...] = loss_terms()
    learning_rate: InitVar[LearningRate] = 2.5e-4
    gamma: Float[Array, ""] = hyperparameter(0.99)
    gae_lambda: Float[Array, ""] = hyperparameter(0.95)
    clip_eps: Float[Array, ""] = hyperparameter(0.2)
    ent_coef: Float[Array, ""] = hyperparameter(0.01)
    vf_coef: Float[Array, ""] = hyperparameter(0.5)
    max_grad_norm: InitVar[float | Array] = 0.5
    target_kl: Float[Array, ""] = hyperparameter(float("inf"))
    target_kl_epoch: Float[Array, ""] = hyperparameter(float("inf"))
    init_std: Float[Array, ""] = hyperparameter(1.0)
    vector_env: AbstractEnv | None = None

    def __post_init__(self, anneal_lr: bool, grad_clip: str, learning_rate: Any, max_grad_norm: Any):  # `optimizer` from its keywords
        keywords = dict(anneal_lr=anneal_lr, grad_clip=grad_clip, learning_rate=learning_rate, max_grad_norm=max_grad_norm)
        self.optimizer = module_from_keywords(self, "optimizer", keywords, "the networks' optimizer", lambda: default_adam("PPO", **keywords))

    def __check_init__(self):
        if not isinstance(self.env, AbstractEnv):
            raise ValueError(f"PPO(env) must be an eqxrl AbstractEnv or an env name for eqxrl.envs.make, got {self.env!r}")
        if not isinstance(self.vector_env, (AbstractEnv, type(None))):
            raise ValueError(f"PPO(vector_env) must be a batched eqxrl AbstractEnv or None, got {self.vector_env!r}")
        for name in ("num_envs", "rollout_length", "num_epochs", "num_minibatches"):
            check_positive_int("PPO", name, getattr(self, name))
        batch = self.num_envs * self.rollout_length
        if batch % self.num_minibatches:
            raise ValueError(
                f"PPO(num_minibatches={self.num_minibatches}) must divide "
                f"num_envs * rollout_length = {batch}"
            )
        if not self.hidden_sizes or not all(is_positive_int(h) for h in self.hidden_sizes):
            raise ValueError(f"PPO(hidden_sizes) must be a non-empty tuple of positive ints, got {self.hidden_sizes!r}")
        get_activation(self.activation, "PPO")  # an unknown name fails here, not in init
        check = lambda name, ok, expected: check_hyperparameter(  # noqa: E731
            "PPO", name, getattr(self, name), ok, expected
        )
        check_torso("PPO", "actor_torso", self.actor_torso, recurrent=True)
        check_torso("PPO", "critic_torso", self.critic_torso)
        if self.shared_torso and self.critic_torso is not None:
            raise ValueError("PPO(shared_torso=True) puts both heads on actor_torso; critic_torso must be None")
        check_separate(self)
        if self.recurrent:
            check_recurrent(self)
            if isinstance(self.env, AbstractEnv) and self.layout.mask_size:
                raise ValueError(
                    f"PPO: a recurrent PPO does not take action masks yet, and env {self.env.name!r} has them "
                    "(its observations' 'action_mask' entry); use a feed-forward torso"
                )
        check_optimizer("PPO", "optimizer", self.optimizer)
        check_loss_terms("PPO", "policy_loss_terms", self.policy_loss_terms)
        check_loss_terms("PPO", "critic_loss_terms", self.critic_loss_terms)
        check("gamma", lambda v: 0 <= v <= 1, "in [0, 1]")
        check("gae_lambda", lambda v: 0 <= v <= 1, "in [0, 1]")
        check("clip_eps", lambda v: 0 < v < 1, "in (0, 1)")
        check("ent_coef", lambda v: v >= 0, ">= 0")
        check("vf_coef", lambda v: v >= 0, ">= 0")
        check("target_kl", lambda v: v > 0, "> 0 (inf disables early stopping)")
        check("init_std", lambda v: v > 0, "> 0")
        check_action_space("PPO", self.env.action_space)

    # ----------------------------------------------------------------- structure
    @property
    def recurrent(self) -> bool:
        """Whether the policy is recurrent (`actor_torso` is a `GRUTorso`, `LSTMTorso`, ...)."""
        return is_recurrent(self.actor_torso)

    @property
    def eval_env(self) -> AbstractEnv:
        return self.env if self.discrete else ClipAction(self.env)

    @property
    def train_env(self) -> AbstractEnv:
        return super().train_env if self.vector_env is None else self.vector_env

    @property
    def separate_updates(self) -> bool:
        """Whether the actor and the critic are updated in separate passes, each with its own
        optimizer state (`actor_epochs`, `critic_epochs` or `critic_optimizer` set)."""
        return self.actor_epochs is not None or self.critic_epochs is not None or self.critic_optimizer is not None

    @property
    def minibatch_group(self) -> int:
        """How many adjacent samples (envs) the update's shuffle keeps together: the training env's
        `minibatch_group` where it has one (MAPPO's seats: a team env step's), else 1."""
        return getattr(self.train_env, "minibatch_group", 1)

    @property
    def network_optimizer(self) -> AbstractOptimizer:
        """The optimizer of the networks: `optimizer` (given, or built from `learning_rate`,
        `max_grad_norm`, `grad_clip` and `anneal_lr`)."""
        return self.optimizer

    @staticmethod
    def policy(state: PPOState, x: Array) -> AbstractDistribution:
        """**Returns:** the policy's distribution at flat (normalised) observations `x`
        (a feed-forward PPO's; a recurrent one acts with `act_with_carry`)."""
        check_feed_forward(state, "policy")
        return state.actor(x if state.torso is None else state.torso(x))

    @staticmethod
    def value(state: PPOState, x: Array) -> Array:
        """**Returns:** the value estimates at flat (normalised) observations `x` (a feed-forward PPO's)."""
        check_feed_forward(state, "value")
        return state.critic(x if state.torso is None else state.torso(x))

    def _dist(self, state: PPOState, x: Array) -> AbstractDistribution:
        """The policy at stored (normalised) observations `x`, masked by their action masks."""
        features, mask = self.layout.split(x)
        return with_mask(self.policy(state, features), mask)

    # ----------------------------------------------------------------- API
    def init(self, key: Key) -> PPOState:
        actor_key, critic_key, env_key, key = jax.random.split(key, 4)
        space = self.env.action_space
        actor_torso = torso_or_auto(self.actor_torso, self)
        critic_torso = torso_or_auto(self.critic_torso, self)
        in_size, in_shape, shared = self.obs_size, self.obs_shape, None
        if self.shared_torso:
            torso_key, actor_key = jax.random.split(actor_key)
            shared = actor_torso.make(in_shape, key=torso_key)
            actor_torso = critic_torso = IdentityTorso()
            in_size, in_shape = shared.features, (shared.features,)
        actor = policy_head(space, in_size, actor_key, actor_torso, in_shape, self.state_dependent_std, self.init_std)
        critic = ValueHead(in_size, key=critic_key, torso=critic_torso, obs_shape=in_shape)
        env_state, ts = self.train_env.reset(env_key)
        stats = None
        if self.normalize_observations:
            stats = RunningMeanStd((self.obs_size,)).update(self.layout.split(self.flatten(ts.obs))[0])
        return PPOState(
            actor=actor,
            critic=critic,
            opt_state=init_opt_state(self, actor, critic) if self.separate_updates else self.network_optimizer.init((shared, actor, critic)),
            env_state=env_state,
            obs=ts.obs,
            obs_stats=stats,
            key=key,
            env_steps=jnp.zeros((), jnp.int32),
            iteration=jnp.zeros((), jnp.int32),
            torso=shared,
            hidden=shared.initial_state((self.num_envs,)) if self.recurrent else None,
            episode_start=jnp.ones((self.num_envs,), bool) if self.recurrent else None,
        )

    def act(self, state: PPOState, obs: PyTree, key: Key | None = None, deterministic: bool = False) -> Array:
        if self.recurrent:
            raise ValueError("PPO.act: a recurrent PPO acts with act_with_carry(state, obs, carry, reset, key)")
        return self._act(self._policy_at(state, obs)[0], key, deterministic)

    def initial_carry(self, state: PPOState, batch_shape: tuple[int, ...] = ()) -> PyTree:
        """**Returns:** a recurrent PPO's hidden state of fresh episodes of batch shape `batch_shape`, else None."""
        return state.torso.initial_state(batch_shape) if self.recurrent else None

    def act_with_carry(
        self, state: PPOState, obs: PyTree, carry: PyTree, reset: Array, key: Key | None = None, deterministic: bool = False
    ) -> tuple[Array, PyTree]:
        """**Returns:** `(actions, new carry)`, the carry zeroed first where `reset` (an episode's first step)."""
        if not self.recurrent:
            return self.act(state, obs, key, deterministic), carry
        dist, carry = self._policy_at(state, obs, carry, reset)
        return self._act(dist, key, deterministic), carry

    def _policy_at(self, state: PPOState, obs: PyTree, carry: PyTree = None, reset: Any = None) -> tuple[AbstractDistribution, PyTree]:
        """The policy at raw observations `obs`, and a recurrent policy's new carry (zeroed first where `reset`)."""
        x = self.normalize(state.obs_stats, self.flatten(obs))
        if not self.recurrent:
            return self._dist(state, x), carry
        features, carry = state.torso(x, carry, jnp.asarray(reset, bool))
        return state.actor(features), carry

    def noise_spec(self, state: PPOState, batch_shape: tuple[int, ...] = ()) -> Noise:
        """The policy distribution's noise (`noise_spec` of a `Categorical`: Gumbel `(*batch, n)`;
        `MultiCategorical`: Gumbel `(*batch, len(nvec), max(nvec))`; `Normal`: standard normal `(*batch, d)`)."""
        return policy_noise_spec(self.env.action_space, batch_shape, "PPO.noise_spec")

    def act_from_noise(self, state: PPOState, obs: PyTree, noise: Array) -> Array:
        """The policy's sample from `noise` (`sample_from_noise`): `act`'s distribution, reparameterised."""
        if self.recurrent:
            raise ValueError("PPO.act_from_noise: a recurrent PPO acts with act_with_carry_from_noise(state, obs, carry, reset, noise)")
        return self._policy_at(state, obs)[0].sample_from_noise(noise)

    def act_with_carry_from_noise(
        self, state: PPOState, obs: PyTree, carry: PyTree, reset: Array, noise: Array
    ) -> tuple[Array, PyTree]:
        if not self.recurrent:
            return self.act_from_noise(state, obs, noise), carry
        dist, carry = self._policy_at(state, obs, carry, reset)
        return dist.sample_from_noise(noise), carry

    @staticmethod
    def _act(dist: AbstractDistribution, key: Key | None, deterministic: bool) -> Array:
        if deterministic:
            return dist.mode()
        if key is None:
            raise ValueError("PPO.act(key) is required unless deterministic=True")
        return dist.sample(key)

    def _collect(self, state: PPOState) -> tuple[PPOState, _Rollout, tuple[Array, Array, Array | None]]:
        """Run `rollout_length` steps of every training env on the policy (and the observation
        statistics) of the rollout's start; a recurrent policy carries each env's hidden state,
        zeroed at episode starts, and values each step as it goes. **Returns:** the new state, the
        rollout (observations normalised) and `(values, next values, episode starts)`, each
        `(T, num_envs)` (the starts None for a feed-forward policy, which needs none)."""
        env, stats, torso, recurrent = self.train_env, state.obs_stats, state.torso, self.recurrent

        def step(carry, _):
            env_state, obs, hidden, start, key = carry
            key, act_key, env_key = jax.random.split(key, 3)
            x = self.flatten(obs)
            if recurrent:
                features, hidden = torso(self.normalize(stats, x), hidden, start)
                dist = state.actor(features)
            else:
                dist = self._dist(state, self.normalize(stats, x))
            action, log_prob = dist.sample_and_log_prob(act_key)
            env_state, ts = env.step(env_key, env_state, action)
            out = _Rollout.of_step(x, action, log_prob, ts, self.flatten(ts.info["final_obs"]))
            if not recurrent:
                return (env_state, ts.obs, hidden, start, key), out
            # The value of the step's true next observation, from the hidden state the step left
            # (bootstraps truncated episodes; equals the next step's value when none ended).
            next_features, _ = torso(self.normalize(stats, out.final_obs), hidden, jnp.zeros_like(start))
            return (env_state, ts.obs, hidden, ts.done, key), (out, (state.critic(features), state.critic(next_features), start))

        init = (state.env_state, state.obs, state.hidden, state.episode_start, state.key)
        (env_state, obs, hidden, start, key), rollout = jax.lax.scan(step, init, length=self.rollout_length)
        rollout, values = rollout if recurrent else (rollout, None)
        if stats is not None:
            # The statistics stay fixed within a rollout, so normalising the
            # stored raw observations now reproduces what the policy saw.
            raw_obs = rollout.obs
            rollout = eqx.tree_at(
                lambda r: (r.obs, r.final_obs),
                rollout,
                (self.normalize(stats, raw_obs), self.normalize(stats, rollout.final_obs)),
            )
            stats = stats.update(self.layout.split(raw_obs)[0])
        state = eqx.tree_at(
            lambda s: (s.env_state, s.obs, s.hidden, s.episode_start, s.key, s.obs_stats),
            state,
            (env_state, obs, hidden, start, key, stats),
            is_leaf=lambda x: x is None,
        )
        if values is None:  # a feed-forward policy values the whole rollout at once
            values = (self.value(state, self.layout.split(rollout.obs)[0]), self.value(state, self.layout.split(rollout.final_obs)[0]), None)
        return state, rollout, values

    def loss(self, params: tuple, batch: tuple, progress: Float[Array, ""] | float) -> tuple[Float[Array, ""], Metrics]:
        """PPO's loss on a minibatch, the extra loss terms included: `params = (shared torso or None,
        actor, critic)`, `batch = (obs, action, old_log_prob, old_value, advantages, targets)` (flat,
        normalised observations), the run's `progress`. **Returns:** `(loss, metrics)`."""
        torso, x = params[0], self.layout.split(batch[0])[0]
        return self.loss_from_features(params, x if torso is None else torso(x), batch)

    def loss_from_features(self, params: tuple, features: Array, batch: tuple) -> tuple[Float[Array, ""], Metrics]:
        """PPO's loss (as `loss`) given the torso's `features` of the batch's observations."""
        torso, actor, critic = params
        x, action, old_log_prob, old_value, advantages, targets = batch
        dist = with_mask(actor(features), self.layout.split(x)[1])  # the batch's own masks
        if self.normalize_advantages:
            advantages = normalize_advantages(advantages)
        log_prob = dist.log_prob(action)
        pg_loss, aux = ppo_policy_loss(log_prob, old_log_prob, advantages, self.clip_eps)
        value = critic(features)
        v_loss = value_loss(value, old_value, targets, self.clip_eps if self.clip_value_loss else None)
        entropy = jnp.mean(dist.entropy())
        policy_net = actor if torso is None else (torso, actor)
        critic_net = critic if torso is None else (torso, critic)
        policy_outputs = {"obs": x, "dist": dist, "action": action, "log_prob": log_prob, "old_log_prob": old_log_prob}
        policy_extra, policy_metrics = add_loss_terms(self.policy_loss_terms, "policy_loss_terms", policy_net, batch, policy_outputs)
        critic_outputs = {"obs": x, "value": value, "targets": targets}
        critic_extra, critic_metrics = add_loss_terms(self.critic_loss_terms, "critic_loss_terms", critic_net, batch, critic_outputs)
        loss = pg_loss + self.vf_coef * v_loss - self.ent_coef * entropy + policy_extra + critic_extra
        metrics = {"loss": loss, "policy_loss": pg_loss, "value_loss": v_loss, "entropy": entropy, **aux}
        return loss, {**metrics, **policy_metrics, **critic_metrics}

    def train_iteration(self, state: PPOState, clock: Clock) -> tuple[PPOState, Metrics]:
        """One iteration: the rollout, GAE, then `num_epochs` epochs of minibatch updates; the
        minibatches are shuffled steps, or for a recurrent policy shuffled whole env sequences
        (the torso re-run from the rollout's initial hidden state, `_ppo_recurrent`)."""
        progress, initial_hidden = clock.progress, state.hidden
        state, ro, (values, next_values, starts) = self._collect(state)
        advantages = gae(ro.reward, values, next_values, ro.terminated, ro.truncated, self.gamma, self.gae_lambda)
        batch = (ro.obs, ro.action, ro.log_prob, values, advantages, advantages + values)
        if self.recurrent:
            loss, minibatches = partial(sequence_loss, self), sequence_minibatches(batch + (starts,), initial_hidden, self.num_minibatches)
        else:
            batch = jax.tree.map(lambda x: x.reshape((self.steps_per_iteration,) + x.shape[2:]), batch)
            if self.separate_updates:
                return separate_iteration(self, state, ro, batch, progress)
            loss, minibatches = self.loss, shuffled_minibatches(batch, self.num_minibatches, self.minibatch_group)
        optimizer = self.network_optimizer
        minibatch = minibatch_step(eqx.filter_value_and_grad(loss, has_aux=True), optimizer, self.target_kl, progress)

        def epoch(carry, key):
            return jax.lax.scan(minibatch, carry, minibatches(key))

        key, epoch_key = jax.random.split(state.key)
        carry = ((state.torso, state.actor, state.critic), state.opt_state, jnp.zeros((), bool))
        ((torso, actor, critic), opt_state, _), aux = jax.lax.scan(
            epoch, carry, jax.random.split(epoch_key, self.num_epochs)
        )
        env_steps = state.env_steps + self.steps_per_iteration
        state = eqx.tree_at(
            lambda s: (s.torso, s.actor, s.critic, s.opt_state, s.key, s.env_steps, s.iteration),
            state,
            (torso, actor, critic, opt_state, key, env_steps, state.iteration + 1),
            is_leaf=lambda x: x is None,
        )
        return state, iteration_metrics(ro, aux, env_steps, optimizer, progress)
