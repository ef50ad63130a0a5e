"""Soft Actor-Critic (Haarnoja et al. 2018) with automatic entropy tuning."""

from typing import ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, Int

from ..core import Key, Metrics, check_hyperparameter, check_positive_int, hyperparameter
from ..components import (
    ContinuousQHead,
    Ensemble,
    Optimizer,
    OptState,
    Sample,
    TanhGaussianHead,
    clipped_double_q_target,
    polyak,
    sac_actor_loss,
    sac_alpha_loss,
)
from ..envs import AbstractEnv
from ._base import as_env
from ._off_policy import AbstractOffPolicyAgent, check_continuous


class SACLearner(eqx.Module):
    """SAC's networks, temperature and optimizer states."""

    actor: TanhGaussianHead
    critic: Ensemble[ContinuousQHead]
    target_critic: Ensemble[ContinuousQHead]
    log_alpha: Float[Array, ""]
    actor_opt: OptState
    critic_opt: OptState
    alpha_opt: OptState


class SAC(AbstractOffPolicyAgent):
    """SAC for continuous actions: an ensemble of `num_critics` Q-networks (clipped
    double Q with the default 2), a tanh-Gaussian policy acting in [-1, 1]
    (rescaled onto the env's bounds), target critics updated by polyak averaging,
    and a temperature tuned toward `target_entropy = -target_entropy_scale *
    action_size` (`autotune=True`) or fixed at `init_alpha`.
    """

    env: AbstractEnv = eqx.field(converter=as_env)
    default_env: ClassVar[str] = "Pendulum-v1"
    num_envs: int = eqx.field(static=True, default=1)
    rollout_length: int = eqx.field(static=True, default=1)
    updates_per_step: float = eqx.field(static=True, default=1.0)
    batch_size: int = eqx.field(static=True, default=256)
    buffer_size: int = eqx.field(static=True, default=100_000)
    learning_starts: int = eqx.field(static=True, default=1_000)
    n_step: int = eqx.field(static=True, default=1)
    prioritized: bool = eqx.field(static=True, default=False)
    autotune: bool = eqx.field(static=True, default=True)
    num_critics: int = eqx.field(static=True, default=2)
    normalize_observations: bool = eqx.field(static=True, default=False)
    hidden_sizes: tuple[int, ...] = eqx.field(static=True, default=(256, 256), converter=tuple)
    activation: str = eqx.field(static=True, default="relu")
    actor_learning_rate: Float[Array, ""] = hyperparameter(3e-4)
    critic_learning_rate: Float[Array, ""] = hyperparameter(3e-4)
    alpha_learning_rate: Float[Array, ""] = hyperparameter(3e-4)
    gamma: Float[Array, ""] = hyperparameter(0.99)
    tau: Float[Array, ""] = hyperparameter(0.005)
    init_alpha: Float[Array, ""] = hyperparameter(1.0)
    target_entropy_scale: Float[Array, ""] = hyperparameter(1.0)
    max_grad_norm: Float[Array, ""] = hyperparameter(float("inf"))
    reward_scale: Float[Array, ""] = hyperparameter(1.0)
    per_alpha: Float[Array, ""] = hyperparameter(0.6)
    per_beta: Float[Array, ""] = hyperparameter(0.4)

    def __check_init__(self):
        self.check_off_policy_config("SAC")
        check_continuous(self, "SAC")
        check_positive_int("SAC", "num_critics", self.num_critics)
        check = lambda name, ok, expected: check_hyperparameter("SAC", name, getattr(self, name), ok, expected)  # noqa: E731
        for name in ("actor_learning_rate", "critic_learning_rate", "alpha_learning_rate", "init_alpha"):
            check(name, lambda v: v > 0, "> 0")
        check("tau", lambda v: 0 < v <= 1, "in (0, 1]")
        check("max_grad_norm", lambda v: v > 0, "> 0 (inf disables clipping)")

    def _opt(self, lr: Float[Array, ""]) -> Optimizer:
        return Optimizer(lr, self.max_grad_norm)

    @property
    def target_entropy(self) -> Float[Array, ""]:
        return -self.target_entropy_scale * self.action_size

    def init_learner(self, key: Key) -> SACLearner:
        actor_key, critic_key = jax.random.split(key)
        actor = TanhGaussianHead(self.obs_size, self.action_size, self.hidden_sizes, self.activation, key=actor_key)
        critic = Ensemble(
            lambda k: ContinuousQHead(self.obs_size, self.action_size, self.hidden_sizes, self.activation, key=k),
            self.num_critics,
            key=critic_key,
        )
        log_alpha = jnp.log(self.init_alpha)
        return SACLearner(
            actor=actor,
            critic=critic,
            target_critic=critic,
            log_alpha=log_alpha,
            actor_opt=self._opt(self.actor_learning_rate).init(actor),
            critic_opt=self._opt(self.critic_learning_rate).init(critic),
            alpha_opt=self._opt(self.alpha_learning_rate).init(log_alpha),
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

        def critic_loss_fn(critic):
            qs = critic(data.obs, data.action)
            td = qs - target
            return jnp.mean(batch.weights * 0.5 * jnp.sum(jnp.square(td), axis=0)), jnp.mean(td, axis=0)

        (critic_loss, td), grads = eqx.filter_value_and_grad(critic_loss_fn, has_aux=True)(learner.critic)
        critic, critic_opt = self._opt(self.critic_learning_rate).update(grads, learner.critic_opt, learner.critic)

        def actor_loss_fn(actor):
            action, log_prob = actor(data.obs).sample_and_log_prob(actor_key)
            return sac_actor_loss(critic(data.obs, action), log_prob, alpha), log_prob

        (actor_loss, log_prob), grads = eqx.filter_value_and_grad(actor_loss_fn, has_aux=True)(learner.actor)
        actor, actor_opt = self._opt(self.actor_learning_rate).update(grads, learner.actor_opt, learner.actor)

        log_alpha, alpha_opt = learner.log_alpha, learner.alpha_opt
        if self.autotune:
            alpha_grad = jax.grad(sac_alpha_loss)(learner.log_alpha, log_prob, self.target_entropy)
            log_alpha, alpha_opt = self._opt(self.alpha_learning_rate).update(alpha_grad, alpha_opt, log_alpha)

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
        }
        return new, td, metrics
