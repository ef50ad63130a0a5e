"""DDPG (Lillicrap et al. 2016): a deterministic actor and one critic, with target networks."""

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


class DDPG(AbstractActorCriticAgent):
    """DDPG for continuous actions: one critic, actor and targets updated every
    step, Gaussian exploration noise (TD3 without its three fixes)."""

    default_env: ClassVar[str] = "Pendulum-v1"
    default_total_steps: ClassVar[int] = 50_000
    replaced_by: ClassVar[dict[str, tuple[str, ...]]] = {
        "buffer": ("per_alpha",), "actor_optimizer": ("actor_learning_rate",), "critic_optimizer": ("critic_learning_rate",)
    }
    target_update_interval: int = eqx.field(static=True, default=1)
    actor_learning_rate: Float[Array, ""] | AbstractSchedule = learning_rate(3e-4)
    critic_learning_rate: Float[Array, ""] | AbstractSchedule = learning_rate(3e-4)
    exploration_noise: Float[Array, ""] = hyperparameter(0.1)

    def __check_init__(self):
        check_continuous(self, "DDPG")
        check_positive_int("DDPG", "target_update_interval", self.target_update_interval)
        check = lambda name, ok, expected: check_hyperparameter("DDPG", name, getattr(self, name), ok, expected)  # noqa: E731
        for name in ("actor_learning_rate", "critic_learning_rate"):
            check_learning_rate("DDPG", name, getattr(self, name))
        check("exploration_noise", lambda v: v >= 0, ">= 0")

    def init_learner(self, key: Key) -> DeterministicLearner:
        return init_deterministic(self, 1, key)

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
            policy_delay=1, target_noise=None, target_noise_clip=None,
            target_update_interval=self.target_update_interval,
        )
