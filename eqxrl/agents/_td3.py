"""TD3 (Fujimoto et al. 2018): twin critics, delayed policy updates, target policy smoothing."""

from typing import ClassVar

import equinox as eqx
from jaxtyping import Array, Float, Int

from ..core import Key, Metrics, check_hyperparameter, check_positive_int, hyperparameter
from ..components import AbstractSchedule, Sample, check_learning_rate, learning_rate
from ._deterministic import (
    DeterministicLearner,
    actor_critic_optimizers,
    deterministic_update,
    init_deterministic,
    noisy_action,
)
from ._actor_critic import AbstractActorCriticAgent
from ._off_policy import check_continuous


class TD3(AbstractActorCriticAgent):
    """TD3 for continuous actions: `num_critics` (2) critics with clipped double-Q
    targets, the actor and targets updated every `policy_delay` critic updates,
    target actions smoothed by clipped Gaussian noise, Gaussian exploration noise."""

    default_env: ClassVar[str] = "Pendulum-v1"
    default_total_steps: ClassVar[int] = 50_000
    replaced_by: ClassVar[dict[str, tuple[str, ...]]] = {
        "buffer": ("per_alpha",), "actor_optimizer": ("actor_learning_rate",), "critic_optimizer": ("critic_learning_rate",)
    }
    policy_delay: int = eqx.field(static=True, default=2)
    num_critics: int = eqx.field(static=True, default=2)
    target_update_interval: int = eqx.field(static=True, default=1)
    actor_learning_rate: Float[Array, ""] | AbstractSchedule = learning_rate(3e-4)
    critic_learning_rate: Float[Array, ""] | AbstractSchedule = learning_rate(3e-4)
    exploration_noise: Float[Array, ""] = hyperparameter(0.1)
    target_noise: Float[Array, ""] = hyperparameter(0.2)
    target_noise_clip: Float[Array, ""] = hyperparameter(0.5)

    def __check_init__(self):
        check_continuous(self, "TD3")
        check_positive_int("TD3", "target_update_interval", self.target_update_interval)
        check_positive_int("TD3", "policy_delay", self.policy_delay)
        check_positive_int("TD3", "num_critics", self.num_critics)
        check = lambda name, ok, expected: check_hyperparameter("TD3", name, getattr(self, name), ok, expected)  # noqa: E731
        for name in ("actor_learning_rate", "critic_learning_rate"):
            check_learning_rate("TD3", name, getattr(self, name))
        for name in ("exploration_noise", "target_noise", "target_noise_clip"):
            check(name, lambda v: v >= 0, ">= 0")

    def init_learner(self, key: Key) -> DeterministicLearner:
        return init_deterministic(self, self.num_critics, key)

    def greedy(self, learner: DeterministicLearner, obs: Array) -> Float[Array, "*batch action"]:
        return learner.actor(obs)

    def explore(self, learner: DeterministicLearner, obs: Array, key: Key, progress: Float[Array, ""]) -> Float[Array, "*batch action"]:
        return noisy_action(learner, obs, key, self.exploration_noise)

    def update(
        self, learner: DeterministicLearner, batch: Sample, key: Key, updates: Int[Array, ""], progress: Float[Array, ""]
    ) -> tuple[DeterministicLearner, Float[Array, " batch"], Metrics]:
        actor_opt, critic_opt = actor_critic_optimizers(self)
        return deterministic_update(
            learner, batch, key, updates,
            actor_opt=actor_opt, critic_opt=critic_opt, progress=progress,
            policy_loss_terms=self.policy_loss_terms, critic_loss_terms=self.critic_loss_terms, tau=self.tau,
            policy_delay=self.policy_delay,
            target_noise=self.target_noise,
            target_noise_clip=self.target_noise_clip,
            target_update_interval=self.target_update_interval,
        )
