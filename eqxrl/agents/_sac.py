"""Soft Actor-Critic (Haarnoja et al. 2018) with automatic entropy tuning."""

from typing import ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, Int

from ..core import Key, Metrics, check_hyperparameter, check_positive_int, hyperparameter
from ..components import (
    AbstractOptimizer,
    AbstractSchedule,
    ContinuousQHead,
    Ensemble,
    OptState,
    add_loss_terms,
    check_learning_rate,
    check_optimizer,
    learning_rate,
    optimizer_slot,
    Sample,
    TanhGaussianHead,
    clipped_double_q_target,
    polyak,
    sac_actor_loss,
    sac_alpha_loss,
)
from ._actor_critic import AbstractActorCriticAgent, update_critics
from ._off_policy import check_continuous


class SACLearner(eqx.Module):
    """SAC's networks, temperature and optimizer states."""

    actor: TanhGaussianHead
    critic: Ensemble[ContinuousQHead]
    target_critic: Ensemble[ContinuousQHead]
    log_alpha: Float[Array, ""]
    actor_opt: OptState
    critic_opt: OptState
    alpha_opt: OptState


class SAC(AbstractActorCriticAgent):
    """SAC for continuous actions: an ensemble of `num_critics` Q-networks (clipped
    double Q with the default 2), a tanh-Gaussian policy acting in [-1, 1]
    (rescaled onto the env's bounds), target critics updated by polyak averaging,
    and a temperature tuned toward `target_entropy = -target_entropy_scale *
    action_size` (`autotune=True`) or fixed at `init_alpha`.
    """

    default_env: ClassVar[str] = "Pendulum-v1"
    replaced_by: ClassVar[dict[str, tuple[str, ...]]] = {
        "buffer": ("per_alpha",),
        "actor_optimizer": ("actor_learning_rate",),
        "critic_optimizer": ("critic_learning_rate",),
        "alpha_optimizer": ("alpha_learning_rate",),
    }
    autotune: bool = eqx.field(static=True, default=True)
    alpha_optimizer: AbstractOptimizer | None = optimizer_slot()
    num_critics: int = eqx.field(static=True, default=2)
    actor_learning_rate: Float[Array, ""] | AbstractSchedule = learning_rate(3e-4)
    critic_learning_rate: Float[Array, ""] | AbstractSchedule = learning_rate(3e-4)
    alpha_learning_rate: Float[Array, ""] | AbstractSchedule = learning_rate(3e-4)
    init_alpha: Float[Array, ""] = hyperparameter(1.0)
    target_entropy_scale: Float[Array, ""] = hyperparameter(1.0)

    def __check_init__(self):
        check_continuous(self, "SAC")
        check_positive_int("SAC", "num_critics", self.num_critics)
        check_optimizer("SAC", "alpha_optimizer", self.alpha_optimizer)
        for name in ("actor_learning_rate", "critic_learning_rate", "alpha_learning_rate"):
            check_learning_rate("SAC", name, getattr(self, name))
        check_hyperparameter("SAC", "init_alpha", self.init_alpha, lambda v: v > 0, "> 0")

    def optimizers(self) -> tuple[AbstractOptimizer, AbstractOptimizer, AbstractOptimizer]:
        """**Returns:** the actor's, the critics' and the temperature's optimizers (the
        slots, or Adam with the matching learning rate and `max_grad_norm`)."""
        return (
            self.optimizer(self.actor_optimizer, self.actor_learning_rate),
            self.optimizer(self.critic_optimizer, self.critic_learning_rate),
            self.optimizer(self.alpha_optimizer, self.alpha_learning_rate),
        )

    @property
    def target_entropy(self) -> Float[Array, ""]:
        return -self.target_entropy_scale * self.action_size

    def init_learner(self, key: Key) -> SACLearner:
        actor_key, critic_key = jax.random.split(key)
        actor = TanhGaussianHead(
            self.obs_size, self.action_size, key=actor_key, torso=self.torso(self.actor_torso), obs_shape=self.obs_shape
        )
        critic_torso = self.torso(self.critic_torso)
        critic = Ensemble(
            lambda k: ContinuousQHead(self.obs_size, self.action_size, key=k, torso=critic_torso),
            self.num_critics,
            key=critic_key,
        )
        log_alpha = jnp.log(self.init_alpha)
        actor_opt, critic_opt, alpha_opt = self.optimizers()
        return SACLearner(
            actor=actor,
            critic=critic,
            target_critic=critic,
            log_alpha=log_alpha,
            actor_opt=actor_opt.init(actor),
            critic_opt=critic_opt.init(critic),
            alpha_opt=alpha_opt.init(log_alpha),
        )

    def greedy(self, learner: SACLearner, obs: Array) -> Float[Array, "*batch action"]:
        return learner.actor(obs).mode()

    def explore(self, learner: SACLearner, obs: Array, key: Key, progress: Float[Array, ""]) -> Float[Array, "*batch action"]:
        return learner.actor(obs).sample(key)

    def update(
        self, learner: SACLearner, batch: Sample, key: Key, updates: Int[Array, ""], progress: Float[Array, ""]
    ) -> tuple[SACLearner, Float[Array, " batch"], Metrics]:
        data = batch.data
        next_key, actor_key = jax.random.split(key)
        alpha = jnp.exp(learner.log_alpha)

        next_action, next_log_prob = learner.actor(data.next_obs).sample_and_log_prob(next_key)
        next_qs = learner.target_critic(data.next_obs, next_action)
        target = jax.lax.stop_gradient(
            clipped_double_q_target(data.reward, data.discount, next_qs, next_log_prob, alpha)
        )

        actor_optimizer, critic_optimizer, alpha_optimizer = self.optimizers()

        critic, critic_opt, critic_loss, td, critic_metrics = update_critics(
            learner.critic, learner.critic_opt, critic_optimizer, batch, target, self.critic_loss_terms, progress
        )

        def actor_loss_fn(actor):
            dist = actor(data.obs)
            action, log_prob = dist.sample_and_log_prob(actor_key)
            loss = sac_actor_loss(critic(data.obs, action), log_prob, alpha)
            outputs = {"obs": data.obs, "dist": dist, "action": action, "log_prob": log_prob}
            extra, extra_metrics = add_loss_terms(self.policy_loss_terms, "policy_loss_terms", actor, batch, outputs)
            return loss + extra, (loss, log_prob, extra_metrics)

        (_, (actor_loss, log_prob, actor_metrics)), grads = eqx.filter_value_and_grad(actor_loss_fn, has_aux=True)(
            learner.actor
        )
        actor, actor_opt = actor_optimizer.update(grads, learner.actor_opt, learner.actor, progress)

        log_alpha, alpha_opt = learner.log_alpha, learner.alpha_opt
        if self.autotune:
            alpha_grad = jax.grad(sac_alpha_loss)(learner.log_alpha, log_prob, self.target_entropy)
            log_alpha, alpha_opt = alpha_optimizer.update(alpha_grad, alpha_opt, log_alpha, progress)

        new = SACLearner(
            actor=actor,
            critic=critic,
            target_critic=polyak(critic, learner.target_critic, self.tau),
            log_alpha=log_alpha,
            actor_opt=actor_opt,
            critic_opt=critic_opt,
            alpha_opt=alpha_opt,
        )
        metrics = {
            "critic_loss": critic_loss,
            "actor_loss": actor_loss,
            "alpha": alpha,
            "entropy": -jnp.mean(log_prob),
            "q_mean": jnp.mean(target),
            **critic_metrics,
            **actor_metrics,
        }
        return new, td, metrics
