"""DDPG (Lillicrap et al. 2016): the deterministic actor-critic with one critic, the actor and
targets updated every step and no target smoothing (TD3 without its three fixes)."""

from dataclasses import KW_ONLY, InitVar
from typing import ClassVar

import equinox as eqx
from jaxtyping import Array, Float

from ..core import hyperparameter
from ..envs import AbstractEnv
from ._base import as_env
from ._keywords import LearningRate
from ._deterministic import AbstractDeterministicAgent
from ._network_spec import NetworkSpec
from ._off_policy_loop import OffPolicyLoop


class DDPG(AbstractDeterministicAgent):
    """DDPG for continuous actions: one critic, actor and targets updated every
    step, Gaussian exploration noise (TD3 without its three fixes)."""

    num_critics: ClassVar[int] = 1
    policy_delay: ClassVar[int] = 1
    target_noise: ClassVar[None] = None
    target_noise_clip: ClassVar[None] = None
    env: AbstractEnv = eqx.field(converter=as_env)
    _: KW_ONLY
    loop: OffPolicyLoop | None = None
    critic: NetworkSpec | None = None
    actor: NetworkSpec | None = None
    target_update_interval: int = eqx.field(static=True, default=1)
    actor_learning_rate: InitVar[LearningRate] = 3e-4
    critic_learning_rate: InitVar[LearningRate] = 3e-4
    exploration_noise: Float[Array, ""] = hyperparameter(0.1)
    tau: Float[Array, ""] = hyperparameter(0.005)
