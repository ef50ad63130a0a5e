"""TD3 (Fujimoto et al. 2018): twin critics, delayed policy updates, target policy smoothing."""

from typing import ClassVar

import equinox as eqx
from jaxtyping import Array, Float, Int

from ..core import Key, Metrics, check_hyperparameter, check_positive_int, hyperparameter
from ..components import Optimizer, Sample
from ..envs import AbstractEnv
from ._base import as_env
from ._deterministic import (
    DeterministicLearner,
    actor_critic_optimizers,
    deterministic_update,
    init_deterministic,
    noisy_action,
)
from ._off_policy import AbstractOffPolicyAgent, check_continuous


class TD3(AbstractOffPolicyAgent):
    """TD3 for continuous actions: `num_critics` (2) critics with clipped double-Q
    targets, the actor and targets updated every `policy_delay` critic updates,
    target actions smoothed by clipped Gaussian noise, Gaussian exploration noise."""

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
    policy_delay: int = eqx.field(static=True, default=2)
    num_critics: int = eqx.field(static=True, default=2)
    normalize_observations: bool = eqx.field(static=True, default=False)
    hidden_sizes: tuple[int, ...] = eqx.field(static=True, default=(256, 256), converter=tuple)
    activation: str = eqx.field(static=True, default="relu")
    actor_learning_rate: Float[Array, ""] = hyperparameter(3e-4)
    critic_learning_rate: Float[Array, ""] = hyperparameter(3e-4)
    gamma: Float[Array, ""] = hyperparameter(0.99)
    tau: Float[Array, ""] = hyperparameter(0.005)
    exploration_noise: Float[Array, ""] = hyperparameter(0.1)
    target_noise: Float[Array, ""] = hyperparameter(0.2)
    target_noise_clip: Float[Array, ""] = hyperparameter(0.5)
    max_grad_norm: Float[Array, ""] = hyperparameter(float("inf"))
    reward_scale: Float[Array, ""] = hyperparameter(1.0)
    per_alpha: Float[Array, ""] = hyperparameter(0.6)
    per_beta: Float[Array, ""] = hyperparameter(0.4)

    def __check_init__(self):
        self.check_off_policy_config("TD3")
        check_continuous(self, "TD3")
        check_positive_int("TD3", "policy_delay", self.policy_delay)
        check_positive_int("TD3", "num_critics", self.num_critics)
        check = lambda name, ok, expected: check_hyperparameter("TD3", name, getattr(self, name), ok, expected)  # noqa: E731
        for name in ("actor_learning_rate", "critic_learning_rate"):
            check(name, lambda v: v > 0, "> 0")
        for name in ("exploration_noise", "target_noise", "target_noise_clip"):
            check(name, lambda v: v >= 0, ">= 0")
        check("tau", lambda v: 0 < v <= 1, "in (0, 1]")
        check("max_grad_norm", lambda v: v > 0, "> 0 (inf disables clipping)")

    def _optimizers(self) -> tuple[Optimizer, Optimizer]:
        return actor_critic_optimizers(self.actor_learning_rate, self.critic_learning_rate, self.max_grad_norm)

    def init_learner(self, key: Key) -> DeterministicLearner:
        return init_deterministic(
            self.obs_size, self.action_size, self.hidden_sizes, self.activation, self.num_critics,
            *self._optimizers(), key,
        )

    def greedy(self, learner: DeterministicLearner, obs: Array) -> Float[Array, "*batch action"]:
        return learner.actor(obs)

    def explore(self, learner: DeterministicLearner, obs: Array, key: Key, progress: Float[Array, ""]) -> Float[Array, "*batch action"]:
        return noisy_action(learner, obs, key, self.exploration_noise)

    def update(
        self, learner: DeterministicLearner, batch: Sample, key: Key, updates: Int[Array, ""], progress: Float[Array, ""]
    ) -> tuple[DeterministicLearner, Float[Array, " batch"], Metrics]:
        actor_opt, critic_opt = self._optimizers()
        return deterministic_update(
            learner, batch, key, updates,
            actor_opt=actor_opt, critic_opt=critic_opt, tau=self.tau,
            policy_delay=self.policy_delay,
            target_noise=self.target_noise,
            target_noise_clip=self.target_noise_clip,
        )
