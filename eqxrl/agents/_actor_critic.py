"""The off-policy agents with a policy network besides their critics."""

import equinox as eqx

from ..components import (
    AbstractLossTerm,
    AbstractOptimizer,
    AbstractTorso,
    as_torso,
    check_loss_terms,
    check_optimizer,
    check_torso,
    loss_terms,
    optimizer_slot,
)
from ._off_policy import AbstractOffPolicyAgent


class AbstractActorCriticAgent(AbstractOffPolicyAgent):
    """Off-policy agents with a policy network besides their critics (DDPG, TD3, SAC, MPO, DADS):
    `actor_torso` (None: the MLP of `hidden_sizes` and `activation`), `actor_optimizer`
    (None: Adam with the agent's actor learning rate) and `policy_loss_terms`."""

    actor_torso: AbstractTorso | None = eqx.field(static=True, default=None, converter=as_torso)
    actor_optimizer: AbstractOptimizer | None = optimizer_slot()
    policy_loss_terms: tuple[AbstractLossTerm, ...] = loss_terms()

    def __check_init__(self):
        owner = type(self).__name__
        check_torso(owner, "actor_torso", self.actor_torso)
        check_optimizer(owner, "actor_optimizer", self.actor_optimizer)
        check_loss_terms(owner, "policy_loss_terms", self.policy_loss_terms)
