"""The deterministic actor-critic update shared by DDPG and TD3 (a function, not a base class)."""

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, Int

from ..core import Key, Metrics
from ..components import (
    ContinuousQHead,
    DeterministicHead,
    Ensemble,
    Optimizer,
    OptState,
    Sample,
    clipped_double_q_target,
    polyak,
    smoothed_target_action,
)


class DeterministicLearner(eqx.Module):
    """Actor, critics, their targets and optimizer states (DDPG, TD3)."""

    actor: DeterministicHead
    target_actor: DeterministicHead
    critic: Ensemble[ContinuousQHead]
    target_critic: Ensemble[ContinuousQHead]
    actor_opt: OptState
    critic_opt: OptState


def actor_critic_optimizers(
    actor_learning_rate: Float[Array, ""], critic_learning_rate: Float[Array, ""], max_grad_norm: Float[Array, ""]
) -> tuple[Optimizer, Optimizer]:
    """**Returns:** the actor's and the critic's optimizers (Adam, shared clipping threshold)."""
    return Optimizer(actor_learning_rate, max_grad_norm), Optimizer(critic_learning_rate, max_grad_norm)


def init_deterministic(
    obs_size: int,
    action_size: int,
    hidden_sizes: tuple[int, ...],
    activation: str,
    num_critics: int,
    actor_opt: Optimizer,
    critic_opt: Optimizer,
    key: Key,
) -> DeterministicLearner:
    actor_key, critic_key = jax.random.split(key)
    actor = DeterministicHead(obs_size, action_size, hidden_sizes, activation, key=actor_key)
    critic = Ensemble(
        lambda k: ContinuousQHead(obs_size, action_size, hidden_sizes, activation, key=k), num_critics, key=critic_key
    )
    return DeterministicLearner(
        actor=actor,
        target_actor=actor,
        critic=critic,
        target_critic=critic,
        actor_opt=actor_opt.init(actor),
        critic_opt=critic_opt.init(critic),
    )


def noisy_action(
    learner: DeterministicLearner, obs: Array, key: Key, noise: Float[Array, ""]
) -> Float[Array, "*batch action"]:
    """Gaussian exploration noise around the deterministic action, clipped to [-1, 1]."""
    action = learner.actor(obs)
    return jnp.clip(action + noise * jax.random.normal(key, action.shape), -1.0, 1.0)


def deterministic_update(
    learner: DeterministicLearner,
    batch: Sample,
    key: Key,
    updates: Int[Array, ""],
    *,
    actor_opt: Optimizer,
    critic_opt: Optimizer,
    tau: Float[Array, ""],
    policy_delay: int,
    target_noise: Float[Array, ""] | None,
    target_noise_clip: Float[Array, ""] | None,
) -> tuple[DeterministicLearner, Float[Array, " batch"], Metrics]:
    """One critic update and, every `policy_delay` updates, an actor update and target sync.

    With `target_noise=None` (DDPG) the target action is the target actor's
    own; otherwise it is smoothed with clipped Gaussian noise (TD3).
    """
    data = batch.data
    next_action = learner.target_actor(data.next_obs)
    if target_noise is not None:
        next_action = smoothed_target_action(next_action, key, target_noise, target_noise_clip)
    next_qs = learner.target_critic(data.next_obs, next_action)
    target = jax.lax.stop_gradient(clipped_double_q_target(data.reward, data.discount, next_qs))

    def critic_loss_fn(critic):
        td = critic(data.obs, data.action) - target
        return jnp.mean(batch.weights * 0.5 * jnp.sum(jnp.square(td), axis=0)), jnp.mean(td, axis=0)

    (critic_loss, td), grads = eqx.filter_value_and_grad(critic_loss_fn, has_aux=True)(learner.critic)
    critic, critic_state = critic_opt.update(grads, learner.critic_opt, learner.critic)

    def actor_step(operand):
        actor, actor_state, target_actor, target_critic = operand

        def actor_loss_fn(actor):
            # The first critic drives the policy (Fujimoto et al. 2018).
            return -jnp.mean(critic(data.obs, actor(data.obs))[0])

        actor_loss, grads = eqx.filter_value_and_grad(actor_loss_fn)(actor)
        actor, actor_state = actor_opt.update(grads, actor_state, actor)
        targets = (polyak(actor, target_actor, tau), polyak(critic, target_critic, tau))
        return (actor, actor_state, *targets), actor_loss

    def hold(operand):
        return operand, jnp.full((), jnp.nan, jnp.float32)

    operand = (learner.actor, learner.actor_opt, learner.target_actor, learner.target_critic)
    if policy_delay == 1:
        (actor, actor_state, target_actor, target_critic), actor_loss = actor_step(operand)
    else:
        delayed = (updates + 1) % policy_delay == 0
        (actor, actor_state, target_actor, target_critic), actor_loss = jax.lax.cond(
            delayed, actor_step, hold, operand
        )
    new = DeterministicLearner(
        actor=actor,
        target_actor=target_actor,
        critic=critic,
        target_critic=target_critic,
        actor_opt=actor_state,
        critic_opt=critic_state,
    )
    return new, td, {"critic_loss": critic_loss, "actor_loss": actor_loss, "q_mean": jnp.mean(target)}
