"""PPO's separate actor and critic updates (`PPO(actor_epochs=..., critic_epochs=...,
critic_optimizer=..., target_kl_epoch=...)`): the actor's epochs and the critic's are
separate passes over the rollout, each network with its own optimizer state, and the
actor's remaining epochs can stop on the epoch's mean KL (the critic's go on)."""

from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp

from ..components import add_loss_terms, check_optimizer, normalize_advantages, ppo_policy_loss, value_loss
from ..core import Metrics, check_hyperparameter, check_positive_int, concrete_scalar
from ._base import with_mask
from ._ppo_update import _Packed, iteration_metrics, minibatch_step, shuffled_minibatches

SEPARATE_FIELDS = ("actor_epochs", "critic_epochs", "critic_optimizer")
"""The fields whose setting trains the actor and the critic in separate passes."""


def check_separate(agent: Any) -> None:
    """Raise a ValueError (one line, naming the fields) for separate updates PPO cannot run."""
    for name in ("actor_epochs", "critic_epochs"):
        if getattr(agent, name) is not None:
            check_positive_int("PPO", name, getattr(agent, name))
    check_optimizer("PPO", "critic_optimizer", agent.critic_optimizer)
    given = [name for name in SEPARATE_FIELDS if getattr(agent, name) is not None]
    if given and agent.shared_torso:
        names = ", ".join(given)
        raise ValueError(
            f"PPO({names}) trains the actor and the critic in separate passes, each on its own torso: "
            f"shared_torso=True (and so a recurrent torso) cannot take {names}; leave it None or set shared_torso=False"
        )
    check_hyperparameter("PPO", "target_kl_epoch", agent.target_kl_epoch, lambda v: v > 0, "> 0 (inf disables the per-epoch stop)")
    v = concrete_scalar(agent.target_kl_epoch)
    if v is not None and v != float("inf") and not given:
        raise ValueError(
            f"PPO(target_kl_epoch={v:g}) stops the actor's remaining epochs only, which needs separate actor and "
            "critic passes: set actor_epochs (and critic_epochs; None is num_epochs) with shared_torso=False"
        )


def init_opt_state(agent: Any, actor: Any, critic: Any) -> tuple[Any, Any]:
    """**Returns:** `(actor's optimizer state, critic's)` for separate updates."""
    return agent.network_optimizer.init(actor), critic_optimizer(agent).init(critic)


def critic_optimizer(agent: Any) -> Any:
    """The critic's optimizer: `critic_optimizer`, else the same as the actor's (`network_optimizer`)."""
    return agent.network_optimizer if agent.critic_optimizer is None else agent.critic_optimizer


def actor_loss(agent: Any, actor: Any, batch: tuple, progress: Any) -> tuple[Any, Metrics]:
    """The actor's part of PPO's loss (clipped surrogate, entropy bonus, `policy_loss_terms`) on a minibatch."""
    x, action, old_log_prob, _, advantages, _ = batch
    features, mask = agent.layout.split(x)
    dist = with_mask(actor(features), mask)
    if agent.normalize_advantages:
        advantages = normalize_advantages(advantages)
    log_prob = dist.log_prob(action)
    pg_loss, aux = ppo_policy_loss(log_prob, old_log_prob, advantages, agent.clip_eps)
    entropy = jnp.mean(dist.entropy())
    outputs = {"obs": x, "dist": dist, "action": action, "log_prob": log_prob, "old_log_prob": old_log_prob}
    extra, metrics = add_loss_terms(agent.policy_loss_terms, "policy_loss_terms", actor, batch, outputs)
    loss = pg_loss - agent.ent_coef * entropy + extra
    return loss, {"actor_loss": loss, "policy_loss": pg_loss, "entropy": entropy, **aux, **metrics}


def critic_loss(agent: Any, critic: Any, batch: tuple, progress: Any) -> tuple[Any, Metrics]:
    """The critic's part of PPO's loss (`vf_coef` times the value loss, `critic_loss_terms`) on a minibatch."""
    x, _, _, old_value, _, targets = batch
    value = critic(agent.layout.split(x)[0])
    v_loss = value_loss(value, old_value, targets, agent.clip_eps if agent.clip_value_loss else None)
    outputs = {"obs": x, "value": value, "targets": targets}
    extra, metrics = add_loss_terms(agent.critic_loss_terms, "critic_loss_terms", critic, batch, outputs)
    loss = agent.vf_coef * v_loss + extra
    return loss, {"critic_loss": loss, "value_loss": v_loss, **metrics}


def separate_iteration(agent: Any, state: Any, ro: Any, batch: tuple, progress: Any) -> tuple[Any, Metrics]:
    """The update of `train_iteration` with separate passes: `actor_epochs` epochs of the
    actor (minibatch KL stop at `target_kl`, and after each epoch whose mean approximate KL
    exceeds `target_kl_epoch` its remaining epochs are masked out), then `critic_epochs`
    epochs of the critic; each epoch a new shuffle into `num_minibatches` minibatches.

    **Returns:** the new state and the iteration's metrics."""
    shuffle = shuffled_minibatches(batch, agent.num_minibatches, agent.minibatch_group)
    actor_opt, critic_opt = agent.network_optimizer, critic_optimizer(agent)
    actor_grad = eqx.filter_value_and_grad(lambda a, mb, p: actor_loss(agent, a, mb, p), has_aux=True)
    actor_step = minibatch_step(actor_grad, actor_opt, agent.target_kl, progress)

    def actor_epoch(carry, key):
        carry, packed = jax.lax.scan(actor_step, carry, shuffle(key))
        # KL early stopping per epoch: past the limit, the later epochs leave the actor alone.
        actor, opt_state, stopped = carry
        return (actor, opt_state, stopped | (jnp.mean(packed.unpack()["approx_kl"]) > agent.target_kl_epoch)), packed

    critic_grad = eqx.filter_value_and_grad(lambda c, mb, p: critic_loss(agent, c, mb, p), has_aux=True)

    def critic_step(carry, mb):
        critic, opt_state = carry
        (_, aux), grads = critic_grad(critic, mb, progress)
        return critic_opt.update(grads, opt_state, critic, progress), _Packed.of(aux)

    def critic_epoch(carry, key):
        return jax.lax.scan(critic_step, carry, shuffle(key))

    key, actor_key, critic_key = jax.random.split(state.key, 3)
    actor_state, critic_state = state.opt_state
    epochs = lambda n: agent.num_epochs if n is None else n  # noqa: E731
    (actor, actor_state, _), actor_aux = jax.lax.scan(
        actor_epoch, (state.actor, actor_state, jnp.zeros((), bool)), jax.random.split(actor_key, epochs(agent.actor_epochs))
    )
    (critic, critic_state), critic_aux = jax.lax.scan(
        critic_epoch, (state.critic, critic_state), jax.random.split(critic_key, epochs(agent.critic_epochs))
    )
    env_steps = state.env_steps + agent.steps_per_iteration
    state = eqx.tree_at(
        lambda s: (s.actor, s.critic, s.opt_state, s.key, s.env_steps, s.iteration),
        state,
        (actor, critic, (actor_state, critic_state), key, env_steps, state.iteration + 1),
    )
    metrics = iteration_metrics(ro, actor_aux, env_steps, actor_opt, progress)
    metrics.update({k: jnp.mean(v) for k, v in critic_aux.unpack().items()})
    metrics["loss"] = metrics["actor_loss"] + metrics["critic_loss"]
    if agent.critic_optimizer is not None and critic_opt.current_learning_rate(progress) is not None:
        metrics["critic_learning_rate"] = critic_opt.current_learning_rate(progress)
    return state, metrics
