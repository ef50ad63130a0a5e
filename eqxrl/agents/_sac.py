"""Soft Actor-Critic (Haarnoja et al. 2018) with automatic entropy tuning; on a Discrete
action space, discrete SAC (Christodoulou 2019)."""

from dataclasses import KW_ONLY, InitVar
from typing import Any, ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, Int

from ..core import Key, Metrics, check_hyperparameter, check_positive_int, hyperparameter, tree_select
from ..components import (
    AbstractOptimizer,
    CategoricalHead,
    ContinuousQHead,
    DiscreteQHead,
    Ensemble,
    Noise,
    OptState,
    add_loss_terms,
    check_optimizer,
    optimizer_slot,
    Sample,
    TanhGaussianHead,
    Categorical,
    clipped_double_q_target,
    discrete_sac_actor_loss,
    discrete_sac_alpha_loss,
    discrete_sac_target,
    polyak,
    sac_actor_loss,
    sac_alpha_loss,
    select_q,
)
from ..envs import AbstractEnv, Box, Discrete
from ._actor_critic import AbstractActorCriticAgent, update_critics
from ._keywords import LearningRate
from ._base import Clock, as_env
from ._noise import policy_noise_spec
from ._off_policy import OffPolicyState, check_continuous
from ._network_spec import NetworkSpec
from ._off_policy_loop import OffPolicyLoop


DISCRETE_TARGET_ENTROPY_RATIO = 0.5
"""The default `target_entropy_ratio`: the fraction of the maximum entropy `log(num_actions)`
discrete SAC's temperature aims at (see docs/agents/sac.md for why not Christodoulou's 0.98)."""

ACTION_SPACE_DEFAULTS: dict[str, tuple[object, object]] = {
    # field: (continuous, Discrete). One setting cannot serve both: with the continuous values (Haarnoja
    # et al.'s 256x256 networks, one update per env step) 4 seeds of CartPole at 1e5 steps ran over 13
    # minutes of 2 CPU cores without finishing, and 64x64 networks at their 3e-4 learning rates plateaued
    # near 250; these discrete values solve it in about 2 minutes (docs/agents/sac.md).
    "num_envs": (1, 8),
    "updates_per_step": (1.0, 0.5),
    "batch_size": (256, 128),
    "learning_starts": (1_000, 2_000),
    "hidden_sizes": ((256, 256), (64, 64)),
    "actor_learning_rate": (3e-4, 1e-3),
    "critic_learning_rate": (3e-4, 1e-3),
}
"""The fields whose default (None) depends on the action space: `(continuous value, Discrete value)`."""


SAC_RATES = {**AbstractActorCriticAgent.rates, "alpha_optimizer": "alpha_learning_rate"}
"""The optimizers SAC builds from its learning-rate keywords (`AbstractOffPolicyAgent.rates`): the
actor's, the critics' and the temperature's (CrossQ's and DADS's too)."""


class SACLearner(eqx.Module):
    """SAC's networks, temperature and optimizer states."""

    actor: TanhGaussianHead | CategoricalHead
    critic: Ensemble[ContinuousQHead] | Ensemble[DiscreteQHead]
    target_critic: Ensemble[ContinuousQHead] | Ensemble[DiscreteQHead]
    log_alpha: Float[Array, ""]
    actor_opt: OptState
    critic_opt: OptState
    alpha_opt: OptState


class SAC(AbstractActorCriticAgent):
    """SAC for continuous actions: an ensemble of `num_critics` Q-networks (clipped
    double Q with the default 2), a tanh-Gaussian policy acting in [-1, 1]
    (rescaled onto the env's bounds), target critics updated by polyak averaging
    (every `target_update_interval` updates), and a temperature tuned toward
    `target_entropy = -target_entropy_scale * action_size` (`autotune=True`) or
    fixed at `init_alpha`.

    On a `Discrete` action space, discrete SAC (Christodoulou 2019): a categorical
    policy, critics giving `Q(s, .)` for every action, exact expectations over the
    actions in the target and the actor loss, and the target entropy
    `target_entropy_ratio * log(num_actions)`.
    """

    default_env: ClassVar[str] = "Pendulum-v1"
    default_total_steps: ClassVar[int] = 50_000
    takes_action_masks: ClassVar[bool] = True  # (discrete SAC; masks on Box actions are refused)
    rates: ClassVar[dict[str, str]] = SAC_RATES
    env: AbstractEnv = eqx.field(converter=as_env)
    _: KW_ONLY
    # None: the value for the env's action space (`ACTION_SPACE_DEFAULTS`, set in `__post_init__`).
    loop: OffPolicyLoop | None = None
    critic: NetworkSpec | None = None
    actor: NetworkSpec | None = None
    num_envs: InitVar[int | None] = None
    updates_per_step: InitVar[float | None] = None
    batch_size: InitVar[int | None] = None
    learning_starts: InitVar[int | None] = None
    hidden_sizes: InitVar[tuple[int, ...] | None] = None
    autotune: bool = eqx.field(static=True, default=True)
    alpha_optimizer: AbstractOptimizer | None = optimizer_slot()
    num_critics: int = eqx.field(static=True, default=2)
    target_update_interval: int = eqx.field(static=True, default=1)
    importance_weight_actor: bool = eqx.field(static=True, default=False)
    actor_learning_rate: InitVar[LearningRate | None] = None
    critic_learning_rate: InitVar[LearningRate | None] = None
    alpha_learning_rate: InitVar[LearningRate] = 3e-4
    init_alpha: Float[Array, ""] = hyperparameter(1.0)
    target_entropy_scale: Float[Array, ""] = hyperparameter(1.0)
    target_entropy_ratio: Float[Array, ""] = hyperparameter(DISCRETE_TARGET_ENTROPY_RATIO)
    tau: Float[Array, ""] = hyperparameter(0.005)

    def __post_init__(self, *keywords):
        # Fields and keywords left at None take the value for the action space; converters run after
        # this, so `env` may still be a name here. Then the shared part (`loop`, from the keywords).
        self.env = as_env(self.env)  # not an env: the shared check names it
        for name, value in self._action_space_defaults().items():
            if name in self.__dataclass_fields__ and not isinstance(self.__dataclass_fields__[name].type, InitVar) and getattr(self, name) is None:
                setattr(self, name, value)
        super().__post_init__(*keywords)

    def _action_space_defaults(self) -> dict[str, object]:
        discrete = isinstance(self.env, AbstractEnv) and isinstance(self.env.action_space, Discrete)
        return {name: values[discrete] for name, values in ACTION_SPACE_DEFAULTS.items()}

    def resolve_keywords(self, keywords: dict[str, Any]) -> dict[str, Any]:
        defaults = self._action_space_defaults()
        return {k: defaults[k] if v is None and k in defaults else v for k, v in keywords.items()}

    def __check_init__(self):
        if isinstance(self.env, AbstractEnv) and not self.discrete:
            space = self.env.action_space
            if not isinstance(space, Box) or len(space.shape) != 1:
                raise ValueError(
                    f"SAC needs a Discrete or a 1-D Box action space, got {space!r} from env {self.env.name!r}"
                )
            check_continuous(self, "SAC")  # finite bounds
        check_positive_int("SAC", "num_critics", self.num_critics)
        check_positive_int("SAC", "target_update_interval", self.target_update_interval)
        if not isinstance(self.importance_weight_actor, bool):
            raise ValueError(f"SAC(importance_weight_actor) must be True or False, got {self.importance_weight_actor!r}")
        check_optimizer("SAC", "alpha_optimizer", self.alpha_optimizer)
        check_hyperparameter("SAC", "init_alpha", self.init_alpha, lambda v: v > 0, "> 0")
        check_hyperparameter("SAC", "target_entropy_ratio", self.target_entropy_ratio, lambda v: 0 <= v <= 1, "in [0, 1]")

    def default_budget(self) -> int:
        """`default_total_steps` (50,000: Pendulum-v1) on a continuous action space; 100,000
        with the Discrete defaults (CartPole-v1)."""
        return 100_000 if self.discrete else self.default_total_steps

    def optimizers(self) -> tuple[AbstractOptimizer, AbstractOptimizer, AbstractOptimizer]:
        """**Returns:** the actor's, the critics' and the temperature's optimizers (the
        slots, or Adam with the matching learning rate and `max_grad_norm`)."""
        return self.actor.optimizer, self.critic.optimizer, self.alpha_optimizer

    @property
    def target_entropy(self) -> Float[Array, ""]:
        """`-target_entropy_scale * action_size`; discrete: `target_entropy_ratio * log(num_actions)`."""
        if self.discrete:
            return self.target_entropy_ratio * jnp.log(jnp.asarray(self.action_size, jnp.float32))
        return -self.target_entropy_scale * self.action_size

    def init_learner(self, key: Key) -> SACLearner:
        actor_key, critic_key = jax.random.split(key)
        n, a, actor_torso = self.obs_size, self.action_size, self.actor.torso_for(self)
        critic_torso = self.critic.torso_for(self)
        if self.discrete:
            actor = CategoricalHead(n, a, key=actor_key, torso=actor_torso, obs_shape=self.obs_shape)
            make_q = lambda k: DiscreteQHead(n, a, key=k, torso=critic_torso, obs_shape=self.obs_shape)  # noqa: E731
        else:
            actor = TanhGaussianHead(n, a, key=actor_key, torso=actor_torso, obs_shape=self.obs_shape)
            make_q = lambda k: ContinuousQHead(n, a, key=k, torso=critic_torso)  # noqa: E731
        parts = init_sac_parts(self, actor, make_q, critic_key)
        return SACLearner(target_critic=parts["critic"], **parts)

    def policy(self, actor: Any, obs: Array) -> Any:
        """The policy at stored observations `obs` (their features to `actor`). Where the env has
        action masks, an illegal action's logit is -1e9: its probability is exactly 0 and every
        term of discrete SAC's losses stays finite (`0 * log pi`, not `0 * -inf`)."""
        features, mask = self.layout.split(obs)
        dist = actor(features)
        return dist if mask is None else Categorical(jnp.where(mask, dist.logits, -1e9))

    def greedy(self, learner: SACLearner, obs: Array) -> Array:
        return self.policy(learner.actor, obs).mode()

    def explore(self, learner: SACLearner, obs: Array, key: Key, progress: Float[Array, ""]) -> Array:
        return self.policy(learner.actor, obs).sample(key)

    def noise_spec(self, state: Any, batch_shape: tuple[int, ...] = ()) -> Noise:
        """The policy's noise: standard normal `(*batch, d)` (`TanhNormal`), Gumbel `(*batch, n)` (`Categorical`)."""
        return policy_noise_spec(self.env.action_space, batch_shape, "SAC.noise_spec")

    def explore_from_noise(self, learner: SACLearner, obs: Array, noise: Array, progress: Float[Array, ""]) -> Array:
        return self.policy(learner.actor, obs).sample_from_noise(noise)

    def train_iteration(self, state: OffPolicyState, clock: Clock) -> tuple[OffPolicyState, Metrics]:
        state, metrics = super().train_iteration(state, clock)
        if state.obs_stats is not None:
            # The running observation statistics, averaged over the observation's dimensions.
            metrics = {
                **metrics,
                "obs_mean": jnp.mean(state.obs_stats.mean),
                "obs_std": jnp.mean(jnp.sqrt(state.obs_stats.var)),
            }
        return state, metrics

    def update(
        self, learner: SACLearner, batch: Sample, key: Key, updates: Int[Array, ""], progress: Float[Array, ""]
    ) -> tuple[SACLearner, Float[Array, " batch"], Metrics]:
        data = batch.data
        next_key, actor_key = jax.random.split(key)
        alpha = jnp.exp(learner.log_alpha)
        if self.discrete:
            next_logits = self.policy(learner.actor, data.next_obs).logits
            next_qs = learner.target_critic(self.layout.split(data.next_obs)[0])
            target = discrete_sac_target(data.reward, data.discount, next_qs, next_logits, alpha)

            def q_values(critic, data):
                q_all = critic(self.layout.split(data.obs)[0])  # (members, batch, actions)
                return q_all, jax.vmap(lambda q: select_q(q, data.action))(q_all)
        else:
            q_values = None  # (update_critics' default: the critic's own Q(obs, action))
            next_action, next_log_prob = learner.actor(data.next_obs).sample_and_log_prob(next_key)
            next_qs = learner.target_critic(data.next_obs, next_action)
            target = clipped_double_q_target(data.reward, data.discount, next_qs, next_log_prob, alpha)
        target = jax.lax.stop_gradient(target)

        actor_optimizer, critic_optimizer, alpha_optimizer = self.optimizers()

        critic, critic_opt, critic_loss, td, critic_metrics = update_critics(
            learner.critic, learner.critic_opt, critic_optimizer, batch, target, self.critic_loss_terms, progress, q_values
        )

        actor, actor_opt, log_alpha, alpha_opt, policy_metrics = sac_policy_update(
            self, learner.actor, learner.actor_opt, learner.log_alpha, learner.alpha_opt, critic, batch, actor_key,
            progress, actor_optimizer, alpha_optimizer,
        )

        target_critic = polyak(critic, learner.target_critic, self.tau)
        if self.target_update_interval > 1:
            sync = (updates + 1) % self.target_update_interval == 0
            target_critic = tree_select(sync, target_critic, learner.target_critic)
        new = SACLearner(
            actor=actor,
            critic=critic,
            target_critic=target_critic,
            log_alpha=log_alpha,
            actor_opt=actor_opt,
            critic_opt=critic_opt,
            alpha_opt=alpha_opt,
        )
        metrics = {
            "critic_loss": critic_loss,
            "alpha": alpha,
            "q_mean": jnp.mean(target),
            **critic_metrics,
            **policy_metrics,
        }
        return new, td, metrics


def init_sac_parts(agent: Any, actor: Any, make_q: Any, critic_key: Key) -> dict[str, Any]:
    """The learner's parts SAC and CrossQ share: `actor`, an ensemble of `agent.num_critics`
    critics (`make_q(key)` each) from `critic_key`, `log_alpha` at `agent.init_alpha`, and the
    three optimizer states of `agent.optimizers()` (the actor's, the critics', the temperature's),
    as the learner's keyword arguments."""
    critic = Ensemble(make_q, agent.num_critics, key=critic_key)
    log_alpha = jnp.log(agent.init_alpha)
    actor_opt, critic_opt, alpha_opt = agent.optimizers()
    return dict(
        actor=actor,
        critic=critic,
        log_alpha=log_alpha,
        actor_opt=actor_opt.init(actor),
        critic_opt=critic_opt.init(critic),
        alpha_opt=alpha_opt.init(log_alpha),
    )


def sac_policy_update(
    agent: Any,
    actor: Any,
    actor_opt: OptState,
    log_alpha: Float[Array, ""],
    alpha_opt: OptState,
    q_fn: Any,
    batch: Sample,
    key: Key,
    progress: Float[Array, ""],
    actor_optimizer: AbstractOptimizer,
    alpha_optimizer: AbstractOptimizer,
    *,
    policy: Any = None,
) -> tuple[Any, ...]:
    """SAC's actor and temperature step (SAC, discrete SAC, CrossQ): the actor's loss
    (`sac_actor_loss`, or `discrete_sac_actor_loss` where `agent.discrete`) plus `agent`'s
    `policy_loss_terms`, one `actor_optimizer` step, then (with `agent.autotune`) one
    `alpha_optimizer` step of the temperature's loss toward `agent.target_entropy`.

    **Arguments:** `agent` (a `SAC`, or an agent with its `policy`, `layout`, `discrete`,
    `importance_weight_actor`, `policy_loss_terms`, `autotune` and `target_entropy`), the actor, its
    optimizer state, `log_alpha` and its optimizer state, `q_fn` (the critics' Q-values with a
    leading member axis: `q_fn(obs, action)`, discrete `q_fn(features)` for every action), the
    `batch`, the key of the policy's sample, `progress` and the two optimizers; `policy`: None
    (the policy is `agent.policy(actor, obs)`), or a policy with state, `policy(actor, obs) ->
    (dist, state)` (CrossQ's batch-renormalised actor in train mode: its new statistics).

    **Returns:** `(actor, actor_opt, log_alpha, alpha_opt, metrics)`, metrics `actor_loss`,
    `alpha_loss`, `entropy` and the policy terms'; with `policy`, `(actor, actor_opt, log_alpha,
    alpha_opt, state, metrics)`, `state` the one `policy` returned (from the actor before its step).
    """
    data = batch.data
    alpha = jnp.exp(log_alpha)
    weights = batch.weights if agent.importance_weight_actor else None

    def actor_loss_fn(actor):
        dist, state = (agent.policy(actor, data.obs), None) if policy is None else policy(actor, data.obs)
        if agent.discrete:
            loss = discrete_sac_actor_loss(q_fn(agent.layout.split(data.obs)[0]), dist.logits, alpha, weights)
            outputs = {"obs": data.obs, "dist": dist}
            entropy_stat = dist.logits  # what the temperature's loss reads
        else:
            action, log_prob = dist.sample_and_log_prob(key)
            loss = sac_actor_loss(q_fn(data.obs, action), log_prob, alpha, weights)
            outputs = {"obs": data.obs, "dist": dist, "action": action, "log_prob": log_prob}
            entropy_stat = log_prob
        extra, extra_metrics = add_loss_terms(agent.policy_loss_terms, "policy_loss_terms", actor, batch, outputs)
        return loss + extra, (loss, entropy_stat, extra_metrics, state)

    (_, (actor_loss, entropy_stat, actor_metrics, state)), grads = eqx.filter_value_and_grad(actor_loss_fn, has_aux=True)(actor)
    actor, actor_opt = actor_optimizer.update(grads, actor_opt, actor, progress)

    alpha_loss_fn = discrete_sac_alpha_loss if agent.discrete else sac_alpha_loss
    alpha_loss, alpha_grad = jax.value_and_grad(alpha_loss_fn)(log_alpha, entropy_stat, agent.target_entropy, weights)
    if agent.autotune:
        log_alpha, alpha_opt = alpha_optimizer.update(alpha_grad, alpha_opt, log_alpha, progress)
    if agent.discrete:
        entropy = jnp.mean(Categorical(entropy_stat).entropy())
    else:
        entropy = -jnp.mean(entropy_stat)
    metrics = {"actor_loss": actor_loss, "alpha_loss": alpha_loss, "entropy": entropy, **actor_metrics}
    return (actor, actor_opt, log_alpha, alpha_opt, metrics) if policy is None else (actor, actor_opt, log_alpha, alpha_opt, state, metrics)
