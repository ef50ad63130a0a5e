"""The off-policy agents with a policy network besides their critics."""

from collections.abc import Callable
from dataclasses import KW_ONLY, InitVar
from typing import Any, ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, Int, PyTree

from ..core import Metrics
from ..components import (
    AbstractLossTerm,
    AbstractOptimizer,
    AbstractTorso,
    OptState,
    Sample,
    add_loss_terms,
)
from ._network_spec import NETWORK_KEYWORDS, NetworkSpec
from ._off_policy import AbstractOffPolicyAgent


class AbstractActorCriticAgent(AbstractOffPolicyAgent):
    """Off-policy agents with a policy network besides their critics (DDPG, TD3, SAC, CrossQ, MPO, DADS):
    `actor`, a `NetworkSpec` (not given: built from the init-only keywords `actor_torso` (None: the MLP of
    `hidden_sizes` and `activation`), `actor_optimizer` (None: Adam with the agent's actor learning
    rate) and `policy_loss_terms`)."""

    _: KW_ONLY
    actor_torso: InitVar[AbstractTorso | Any] = None  # (`| Any`: as the critic's keywords)
    actor_optimizer: InitVar[AbstractOptimizer | Any] = None
    policy_loss_terms: InitVar[tuple[AbstractLossTerm, ...] | Any] = ()
    actor: eqx.AbstractVar[NetworkSpec | None]  # (None until `__post_init__` builds it from its keywords)
    networks: ClassVar[tuple[str, ...]] = ("critic", "actor")
    rates: ClassVar[dict[str, str]] = {"critic.optimizer": "critic_learning_rate", "actor.optimizer": "actor_learning_rate"}
    aliases: ClassVar[dict[str, str]] = {
        **AbstractOffPolicyAgent.aliases,
        **{keyword: f"actor.{field}" for keyword, field in NETWORK_KEYWORDS["actor"].items() if keyword.startswith(("actor", "policy"))},
    }


def critic_td_loss(
    qs: Float[Array, "members batch"], target: Float[Array, " batch"], weights: Float[Array, " batch"]
) -> tuple[Float[Array, ""], Float[Array, " batch"]]:
    """The critics' TD loss (DDPG, TD3, SAC, MPO, CrossQ): the `weights`-weighted (PER's importance
    weights) mean over the batch of `0.5 * sum_members (qs - target) ** 2`.

    **Returns:** `(loss, td)`, `td` the members' mean TD error `(batch,)` (PER's new priorities)."""
    td = qs - target
    loss = jnp.mean(weights * 0.5 * jnp.sum(jnp.square(td), axis=0))
    return loss, jnp.mean(td, axis=0)


def update_critics(
    critic: PyTree,
    opt_state: OptState,
    optimizer: AbstractOptimizer,
    batch: Sample,
    target: Float[Array, " batch"],
    terms: tuple[AbstractLossTerm, ...],
    progress: Float[Array, ""],
    q_values: Callable[[PyTree, Any], tuple[Array, Array]] | None = None,
) -> tuple[PyTree, OptState, Float[Array, ""], Float[Array, " batch"], Metrics]:
    """One step of an ensemble of Q-critics (DDPG, TD3, SAC, MPO) toward `target`:
    the importance-weighted squared TD error summed over members (`critic_td_loss`), plus the extra
    critic loss `terms`.

    **Arguments:** the `critic` ensemble, its optimizer state and `optimizer`, the
    sampled `batch`, the TD `target`, the loss `terms`, the run's `progress`, and
    `q_values(critic, data) -> (outputs, qs)` (default: the ensemble at the batch's
    `(obs, action)`, both): `qs` `(members, batch)` enter the TD error, `outputs`
    are what the terms see as `"q"`.

    **Returns:** `(critic, opt_state, loss, td, term_metrics)`, `td` the members' mean TD error.
    """
    data = batch.data

    def loss_fn(critic):
        outputs, qs = q_values(critic, data) if q_values is not None else (critic(data.obs, data.action),) * 2
        loss, td = critic_td_loss(qs, target, batch.weights)
        extra, metrics = add_loss_terms(terms, "critic_loss_terms", critic, batch, {"obs": data.obs, "q": outputs})
        return loss + extra, (loss, td, metrics)

    (_, (loss, td, metrics)), grads = eqx.filter_value_and_grad(loss_fn, has_aux=True)(critic)
    critic, opt_state = optimizer.update(grads, opt_state, critic, progress)
    return critic, opt_state, loss, td, metrics


def every_nth_update(n: int, updates: Int[Array, ""], step: Callable[[Any], tuple[Any, Any]], operand: Any) -> tuple[Any, Any]:
    """A delayed update (TD3's and CrossQ's `policy_delay`): `step(operand) -> (operand, metrics)`
    on every `n`-th update (`(updates + 1) % n == 0`; with `n == 1` on every one, without a
    `cond`), else `operand` unchanged and `step`'s metrics (any arrays) as NaN (a real
    `lax.cond`: a skipped update costs nothing)."""
    if n == 1:
        return step(operand)

    def hold(operand):
        shapes = jax.eval_shape(step, operand)[1]
        return operand, jax.tree.map(lambda m: jnp.full(m.shape, jnp.nan, m.dtype), shapes)

    return jax.lax.cond((updates + 1) % n == 0, step, hold, operand)
