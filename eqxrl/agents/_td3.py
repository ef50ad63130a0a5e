"""TD3 (Fujimoto et al. 2018): twin critics, delayed policy updates, target policy smoothing."""

from dataclasses import KW_ONLY, InitVar

import equinox as eqx
from jaxtyping import Array, Float

from ..core import hyperparameter
from ..envs import AbstractEnv
from ._base import as_env
from ._keywords import LearningRate
from ._deterministic import AbstractDeterministicAgent
from ._network_spec import NetworkSpec
from ._off_policy_loop import OffPolicyLoop


class TD3(AbstractDeterministicAgent):
    """TD3 for continuous actions: `num_critics` (2) critics with clipped double-Q
    targets, the actor and targets updated every `policy_delay` critic updates,
    target actions smoothed by clipped Gaussian noise, Gaussian exploration noise."""

    env: AbstractEnv = eqx.field(converter=as_env)
    _: KW_ONLY
    loop: OffPolicyLoop | None = None
    critic: NetworkSpec | None = None
    actor: NetworkSpec | None = None
    policy_delay: int = eqx.field(static=True, default=2)
    num_critics: int = eqx.field(static=True, default=2)
    target_update_interval: int = eqx.field(static=True, default=1)
    actor_learning_rate: InitVar[LearningRate] = 3e-4
    critic_learning_rate: InitVar[LearningRate] = 3e-4
    exploration_noise: Float[Array, ""] = hyperparameter(0.1)
    target_noise: Float[Array, ""] = hyperparameter(0.2)
    target_noise_clip: Float[Array, ""] = hyperparameter(0.5)
    tau: Float[Array, ""] = hyperparameter(0.005)
