"""The deterministic actor-critic (TD3, Fujimoto et al. 2018) of which DDPG (Lillicrap et al. 2016)
is one configuration: one critic, no policy delay, no target smoothing."""

from typing import Any, ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, Int

from ..core import Key, Metrics, check_hyperparameter, check_positive_int, tree_select
from ..components import (
    AbstractLossTerm,
    AbstractOptimizer,
    ContinuousQHead,
    DeterministicHead,
    Ensemble,
    Noise,
    OptState,
    add_loss_terms,
    Sample,
    clipped_double_q_target,
    polyak,
    smoothed_target_action,
)
from ._actor_critic import AbstractActorCriticAgent, every_nth_update, update_critics
from ._off_policy import check_continuous


class DeterministicLearner(eqx.Module):
    """Actor, critics, their targets and optimizer states (DDPG, TD3)."""

    actor: DeterministicHead
    target_actor: DeterministicHead
    critic: Ensemble[ContinuousQHead]
    target_critic: Ensemble[ContinuousQHead]
    actor_opt: OptState
    critic_opt: OptState


class AbstractDeterministicAgent(AbstractActorCriticAgent):
    """A deterministic actor, `num_critics` Q-critics with clipped double-Q targets, the actor
    and targets updated every `policy_delay` critic updates, target actions smoothed with
    clipped Gaussian noise unless `target_noise` is None, and Gaussian exploration noise.
    TD3 and DDPG are its two configurations."""

    default_env: ClassVar[str] = "Pendulum-v1"
    default_total_steps: ClassVar[int] = 50_000

    num_critics: eqx.AbstractVar[int]
    policy_delay: eqx.AbstractVar[int]
    target_update_interval: eqx.AbstractVar[int]
    exploration_noise: eqx.AbstractVar[Float[Array, ""]]
    target_noise: eqx.AbstractVar[Float[Array, ""] | None]
    target_noise_clip: eqx.AbstractVar[Float[Array, ""] | None]

    def __check_init__(self):
        owner = type(self).__name__
        check_continuous(self, owner)
        for name in ("target_update_interval", "policy_delay", "num_critics"):
            check_positive_int(owner, name, getattr(self, name))
        for name in ("exploration_noise", "target_noise", "target_noise_clip"):
            if getattr(self, name) is not None:
                check_hyperparameter(owner, name, getattr(self, name), lambda v: v >= 0, ">= 0")

    def optimizers(self) -> tuple[AbstractOptimizer, AbstractOptimizer]:
        """**Returns:** the actor's and the critic's optimizers (given, or Adam with the agent's
        learning rates and shared clipping threshold)."""
        return self.actor.optimizer, self.critic.optimizer

    def init_learner(self, key: Key) -> DeterministicLearner:
        actor_key, critic_key = jax.random.split(key)
        obs_size, action_size = self.obs_size, self.action_size
        actor = DeterministicHead(
            obs_size, action_size, key=actor_key, torso=self.actor.torso_for(self), obs_shape=self.obs_shape
        )
        critic_torso = self.critic.torso_for(self)
        critic = Ensemble(
            lambda k: ContinuousQHead(obs_size, action_size, key=k, torso=critic_torso), self.num_critics, key=critic_key
        )
        actor_opt, critic_opt = self.optimizers()
        return DeterministicLearner(
            actor=actor,
            target_actor=actor,
            critic=critic,
            target_critic=critic,
            actor_opt=actor_opt.init(actor),
            critic_opt=critic_opt.init(critic),
        )

    def greedy(self, learner: DeterministicLearner, obs: Array) -> Float[Array, "*batch action"]:
        return learner.actor(obs)

    def explore(
        self, learner: DeterministicLearner, obs: Array, key: Key, progress: Float[Array, ""]
    ) -> Float[Array, "*batch action"]:
        """Gaussian exploration noise around the deterministic action, clipped to [-1, 1]."""
        action = learner.actor(obs)
        return jnp.clip(action + self.exploration_noise * jax.random.normal(key, action.shape), -1.0, 1.0)

    def noise_spec(self, state: Any, batch_shape: tuple[int, ...] = ()) -> Noise:
        """The exploration noise: standard normal `(*batch, action_size)`."""
        return Noise((*batch_shape, self.action_size), "normal")

    def explore_from_noise(
        self, learner: DeterministicLearner, obs: Array, noise: Array, progress: Float[Array, ""]
    ) -> Float[Array, "*batch action"]:
        """`clip(actor(obs) + exploration_noise * noise, -1, 1)`."""
        action = learner.actor(obs)
        Noise(action.shape, "normal").check(noise, f"{type(self).__name__}.act_from_noise(noise)")  # (a symbolic batch: no noise_spec)
        return jnp.clip(action + self.exploration_noise * noise, -1.0, 1.0)

    def update(
        self, learner: DeterministicLearner, batch: Sample, key: Key, updates: Int[Array, ""], progress: Float[Array, ""]
    ) -> tuple[DeterministicLearner, Float[Array, " batch"], Metrics]:
        actor_opt, critic_opt = self.optimizers()
        return deterministic_update(
            learner, batch, key, updates,
            actor_opt=actor_opt, critic_opt=critic_opt, progress=progress,
            policy_loss_terms=self.policy_loss_terms, critic_loss_terms=self.critic_loss_terms, tau=self.tau,
            policy_delay=self.policy_delay, target_noise=self.target_noise, target_noise_clip=self.target_noise_clip,
            target_update_interval=self.target_update_interval,
        )  # fmt: skip


def deterministic_update(
    learner: DeterministicLearner,
    batch: Sample,
    key: Key,
    updates: Int[Array, ""],
    *,
    actor_opt: AbstractOptimizer,
    critic_opt: AbstractOptimizer,
    progress: Float[Array, ""],
    policy_loss_terms: tuple[AbstractLossTerm, ...],
    critic_loss_terms: tuple[AbstractLossTerm, ...],
    tau: Float[Array, ""],
    policy_delay: int,
    target_noise: Float[Array, ""] | None,
    target_noise_clip: Float[Array, ""] | None,
    target_update_interval: int = 1,
) -> tuple[DeterministicLearner, Float[Array, " batch"], Metrics]:
    """One critic update and, every `policy_delay` updates, an actor update; the targets are
    averaged toward the online networks on every `target_update_interval`-th actor update
    (every `policy_delay * target_update_interval` updates).

    With `target_noise=None` (DDPG) the target action is the target actor's
    own; otherwise it is smoothed with clipped Gaussian noise (TD3).
    """
    data = batch.data
    next_action = learner.target_actor(data.next_obs)
    if target_noise is not None:
        next_action = smoothed_target_action(next_action, key, target_noise, target_noise_clip)
    next_qs = learner.target_critic(data.next_obs, next_action)
    target = jax.lax.stop_gradient(clipped_double_q_target(data.reward, data.discount, next_qs))

    critic, critic_state, critic_loss, td, critic_metrics = update_critics(
        learner.critic, learner.critic_opt, critic_opt, batch, target, critic_loss_terms, progress
    )

    def actor_step(operand):
        actor, actor_state, target_actor, target_critic = operand

        def actor_loss_fn(actor):
            action = actor(data.obs)
            # The first critic drives the policy (Fujimoto et al. 2018).
            loss = -jnp.mean(critic(data.obs, action)[0])
            extra, extra_metrics = add_loss_terms(
                policy_loss_terms, "policy_loss_terms", actor, batch, {"obs": data.obs, "action": action}
            )
            return loss + extra, (loss, extra_metrics)

        (_, aux), grads = eqx.filter_value_and_grad(actor_loss_fn, has_aux=True)(actor)
        actor, actor_state = actor_opt.update(grads, actor_state, actor, progress)
        targets = (polyak(actor, target_actor, tau), polyak(critic, target_critic, tau))
        if target_update_interval > 1:
            sync = (updates + 1) % (policy_delay * target_update_interval) == 0
            targets = tree_select(sync, targets, (target_actor, target_critic))
        return (actor, actor_state, *targets), aux

    operand = (learner.actor, learner.actor_opt, learner.target_actor, learner.target_critic)
    (actor, actor_state, target_actor, target_critic), (actor_loss, actor_metrics) = every_nth_update(
        policy_delay, updates, actor_step, operand
    )
    new = DeterministicLearner(
        actor=actor,
        target_actor=target_actor,
        critic=critic,
        target_critic=target_critic,
        actor_opt=actor_state,
        critic_opt=critic_state,
    )
    metrics = {"critic_loss": critic_loss, "actor_loss": actor_loss, "q_mean": jnp.mean(target)}
    return new, td, {**metrics, **critic_metrics, **actor_metrics}
