"""CrossQ (Bhatt et al. 2024, "CrossQ: Batch Normalization in Deep Reinforcement Learning for Greater
Sample Efficiency and Simplicity"): SAC without target networks, its critics batch-renormalised, the
current and next (observation, action) pairs through the critics in one call."""

from dataclasses import KW_ONLY, InitVar
from typing import Any, ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, Int

from ..core import Key, Metrics, check_hyperparameter, check_positive_int, hyperparameter, is_positive_int
from ..components import (
    AbstractOptimizer,
    BatchRenorm,
    BatchRenormPolicy,
    BatchRenormQHead,
    BatchRenormStats,
    Ensemble,
    Noise,
    OptState,
    Sample,
    TanhGaussianHead,
    add_loss_terms,
    check_optimizer,
    clipped_double_q_target,
    ensemble_apply,
    ensemble_stats,
    optimizer_slot,
)
from ..envs import AbstractEnv
from ._actor_critic import AbstractActorCriticAgent, critic_td_loss, every_nth_update
from ._keywords import LearningRate
from ._base import as_env
from ._noise import policy_noise_spec
from ._off_policy import check_continuous
from ._network_spec import NetworkSpec
from ._off_policy_loop import OffPolicyLoop
from ._sac import SAC_RATES, init_sac_parts, sac_policy_update


class CrossQLearner(eqx.Module):
    """CrossQ's networks, the critics' batch-renormalisation statistics (state, beside the
    parameters: no optimizer sees them), the temperature and the optimizer states."""

    actor: TanhGaussianHead | BatchRenormPolicy
    critic: Ensemble[BatchRenormQHead]
    critic_stats: tuple[BatchRenormStats, ...]  # (each with a leading member axis)
    log_alpha: Float[Array, ""]
    actor_opt: OptState
    critic_opt: OptState
    alpha_opt: OptState
    actor_stats: tuple[BatchRenormStats, ...] | None = None
    """The actor's batch-renormalisation statistics (`CrossQ(actor_batch_norm=True)`), else None."""


class CrossQ(AbstractActorCriticAgent):
    """CrossQ for continuous actions: SAC's tanh-Gaussian policy, temperature and clipped double-Q
    soft target, with no target networks. The `num_critics` critics are `BatchRenormQHead`s of
    `critic_hidden_sizes`; each update passes the batch's `(obs, action)` and `(next_obs, a')`,
    `a' ~ pi(.|next_obs)`, through them in ONE train-mode call, so both halves share the batch
    statistics, and splits the Q-values into the current ones and the target's (gradient stopped).
    The actor and the temperature are updated every `policy_delay` critic updates, the actor's
    loss reading the critics in eval mode (their running statistics), as sbx does. With
    `actor_batch_norm=True` (sbx's default) the actor is batch-renormalised too (a `BatchRenormPolicy`
    of the actor's `hidden_sizes` and `activation`; `actor_torso` must be None): train mode in its
    own update, eval mode (its running statistics, `CrossQLearner.actor_stats`) to act and to sample
    the critics' next actions.

    Defaults are sbx's CrossQ (actor 256x256, critics 1024x1024, learning rates 1e-3, Adam with
    `b1=0.5`, `policy_delay=3`, `learning_starts=100`, batch renormalisation with momentum 0.99 and
    100,000 steps of batch-norm warm-up); the paper's critics are 2048 wide.
    """

    default_env: ClassVar[str] = "Pendulum-v1"
    default_total_steps: ClassVar[int] = 20_000
    rates: ClassVar[dict[str, str]] = SAC_RATES
    retired: ClassVar[frozenset[str]] = frozenset({"tau"})  # (eqxrl 0.2 took it and read nothing: no target network)
    env: AbstractEnv = eqx.field(converter=as_env)
    _: KW_ONLY
    loop: OffPolicyLoop | None = None
    critic: NetworkSpec | None = None
    actor: NetworkSpec | None = None
    learning_starts: InitVar[int] = 100
    critic_hidden_sizes: tuple[int, ...] = eqx.field(static=True, default=(1024, 1024), converter=tuple)
    policy_delay: int = eqx.field(static=True, default=3)
    actor_batch_norm: bool = eqx.field(static=True, default=False)
    batch_norm_momentum: float = eqx.field(static=True, default=0.99)
    renorm_eps: float = eqx.field(static=True, default=1e-3)
    renorm_r_max: float = eqx.field(static=True, default=3.0)
    renorm_d_max: float = eqx.field(static=True, default=5.0)
    renorm_warmup_steps: int = eqx.field(static=True, default=100_000)
    renorm_relax_steps: int = eqx.field(static=True, default=0)
    adam_b1: InitVar[float] = 0.5
    autotune: bool = eqx.field(static=True, default=True)
    alpha_optimizer: AbstractOptimizer | None = optimizer_slot()
    num_critics: int = eqx.field(static=True, default=2)
    importance_weight_actor: bool = eqx.field(static=True, default=False)
    actor_learning_rate: InitVar[LearningRate] = 1e-3
    critic_learning_rate: InitVar[LearningRate] = 1e-3
    alpha_learning_rate: InitVar[LearningRate] = 1e-3
    init_alpha: Float[Array, ""] = hyperparameter(1.0)
    target_entropy_scale: Float[Array, ""] = hyperparameter(1.0)

    def __check_init__(self):
        check_continuous(self, "CrossQ")  # a Discrete action space: one line naming the env
        if self.critic_torso is not None:
            raise ValueError(
                f"CrossQ(critic_torso) must be None: its critics are BatchRenormQHeads of critic_hidden_sizes "
                f"(their batch statistics are learner state), got {self.critic_torso!r}"
            )
        sizes = self.critic_hidden_sizes
        if not sizes or not all(is_positive_int(h) for h in sizes):
            raise ValueError(f"CrossQ(critic_hidden_sizes) must be a non-empty tuple of positive ints, got {sizes!r}")
        for name in ("num_critics", "policy_delay"):
            check_positive_int("CrossQ", name, getattr(self, name))
        self.renorm()  # BatchRenorm names a bad renorm_* value
        if self.actor_batch_norm is True and self.actor.torso is not None:
            raise ValueError(
                f"CrossQ(actor_torso) must be None with actor_batch_norm=True: the actor is then a BatchRenormPolicy "
                f"of the actor's hidden_sizes (its batch statistics are learner state), got {self.actor.torso!r}"
            )
        for name in ("autotune", "importance_weight_actor", "actor_batch_norm"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"CrossQ({name}) must be True or False, got {getattr(self, name)!r}")
        check_optimizer("CrossQ", "alpha_optimizer", self.alpha_optimizer)
        check_hyperparameter("CrossQ", "init_alpha", self.init_alpha, lambda v: v > 0, "> 0")

    def renorm(self) -> dict[str, Any]:
        """**Returns:** the critics' `BatchRenorm` keyword arguments from `batch_norm_momentum` and the `renorm_*` fields
        (a ValueError naming the field for a bad one)."""
        kw = dict(
            momentum=self.batch_norm_momentum, eps=self.renorm_eps, r_max=self.renorm_r_max, d_max=self.renorm_d_max,
            warmup_steps=self.renorm_warmup_steps, relax_steps=self.renorm_relax_steps,
        )
        for name, value in kw.items():
            try:
                BatchRenorm(1, **{name: value})
            except ValueError as e:
                field = "batch_norm_momentum" if name == "momentum" else f"renorm_{name}"  # (sbx's name)
                raise ValueError(str(e).replace(f"BatchRenorm({name})", f"CrossQ({field})")) from None
        return kw

    def optimizers(self) -> tuple[AbstractOptimizer, AbstractOptimizer, AbstractOptimizer]:
        """**Returns:** the actor's, the critics' and the temperature's optimizers (the slots, or
        Adam with `b1=adam_b1`, the matching learning rate and `max_grad_norm`)."""
        return self.actor.optimizer, self.critic.optimizer, self.alpha_optimizer

    def adam_options(self, path: str, keywords: dict[str, Any]) -> dict[str, Any]:
        b1 = keywords["adam_b1"]
        if isinstance(b1, bool) or not isinstance(b1, (int, float)) or not 0 <= b1 < 1:
            raise ValueError(f"CrossQ(adam_b1) must be a number in [0, 1), got {b1!r}")
        return {"b1": b1}

    @property
    def target_entropy(self) -> Float[Array, ""]:
        """`-target_entropy_scale * action_size`."""
        return -self.target_entropy_scale * self.action_size

    def init_learner(self, key: Key) -> CrossQLearner:
        actor_key, critic_key = jax.random.split(key)
        n, a = self.obs_size, self.action_size
        renorm = self.renorm()
        if self.actor_batch_norm:
            actor = BatchRenormPolicy(n, a, self.actor.hidden_sizes, self.actor.activation, key=actor_key, **renorm)
        else:
            actor = TanhGaussianHead(n, a, key=actor_key, torso=self.actor.torso_for(self), obs_shape=self.obs_shape)
        make_q = lambda k: BatchRenormQHead(n, a, self.critic_hidden_sizes, self.activation, key=k, **renorm)  # noqa: E731
        parts = init_sac_parts(self, actor, make_q, critic_key)
        actor_stats = actor.init_stats() if self.actor_batch_norm else None
        return CrossQLearner(critic_stats=ensemble_stats(parts["critic"]), actor_stats=actor_stats, **parts)

    def policy(self, actor: Any, obs: Array, stats: Any = None) -> Any:
        """The policy (a `TanhNormal` in [-1, 1]) at stored observations `obs` (a batch-renormalised
        actor's in eval mode, on its statistics `stats`)."""
        return actor(obs) if stats is None else actor(obs, stats, train=False)[0]

    def greedy(self, learner: CrossQLearner, obs: Array) -> Array:
        return self.policy(learner.actor, obs, learner.actor_stats).mode()

    def explore(self, learner: CrossQLearner, obs: Array, key: Key, progress: Float[Array, ""]) -> Array:
        return self.policy(learner.actor, obs, learner.actor_stats).sample(key)

    def noise_spec(self, state: Any, batch_shape: tuple[int, ...] = ()) -> Noise:
        """The policy's noise: standard normal `(*batch, action_size)` (`TanhNormal`)."""
        return policy_noise_spec(self.env.action_space, batch_shape, "CrossQ.noise_spec")

    def explore_from_noise(self, learner: CrossQLearner, obs: Array, noise: Array, progress: Float[Array, ""]) -> Array:
        return self.policy(learner.actor, obs, learner.actor_stats).sample_from_noise(noise)

    def update(
        self, learner: CrossQLearner, batch: Sample, key: Key, updates: Int[Array, ""], progress: Float[Array, ""]
    ) -> tuple[CrossQLearner, Float[Array, " batch"], Metrics]:
        data = batch.data
        next_key, actor_key = jax.random.split(key)
        alpha = jnp.exp(learner.log_alpha)
        next_action, next_log_prob = self.policy(learner.actor, data.next_obs, learner.actor_stats).sample_and_log_prob(next_key)
        next_action, next_log_prob = jax.lax.stop_gradient((next_action, next_log_prob))
        size = data.obs.shape[0]
        # The current and next pairs in one train-mode call: both halves share the batch statistics.
        joint_obs = jnp.concatenate([data.obs, data.next_obs], axis=0)
        joint_action = jnp.concatenate([data.action, next_action], axis=0)
        actor_optimizer, critic_optimizer, alpha_optimizer = self.optimizers()

        def critic_loss_fn(critic):
            q_all, stats = ensemble_apply(critic, learner.critic_stats, joint_obs, joint_action, train=True)
            qs, next_qs = q_all[:, :size], q_all[:, size:]
            target = jax.lax.stop_gradient(clipped_double_q_target(data.reward, data.discount, next_qs, next_log_prob, alpha))
            loss, td = critic_td_loss(qs, target, batch.weights)
            extra, metrics = add_loss_terms(self.critic_loss_terms, "critic_loss_terms", critic, batch, {"obs": data.obs, "q": qs})
            return loss + extra, (loss, td, target, stats, metrics)

        (_, (critic_loss, td, target, critic_stats, critic_metrics)), grads = eqx.filter_value_and_grad(
            critic_loss_fn, has_aux=True
        )(learner.critic)
        critic, critic_opt = critic_optimizer.update(grads, learner.critic_opt, learner.critic, progress)

        def eval_q(obs, action):  # the updated critics on their running statistics
            return ensemble_apply(critic, critic_stats, obs, action, train=False)[0]

        def policy_step(operand):
            *parts, actor_stats = operand
            if actor_stats is None:
                *new, metrics = sac_policy_update(self, *parts, eval_q, batch, actor_key, progress, actor_optimizer, alpha_optimizer)
                return (*new, None), metrics
            # A batch-renormalised actor: train mode in its own loss, its statistics moved by that pass.
            train_policy = lambda actor, obs: actor(obs, actor_stats, train=True)  # noqa: E731
            *new, metrics = sac_policy_update(
                self, *parts, eval_q, batch, actor_key, progress, actor_optimizer, alpha_optimizer, policy=train_policy
            )
            return tuple(new), metrics

        operand = (learner.actor, learner.actor_opt, learner.log_alpha, learner.alpha_opt, learner.actor_stats)
        (actor, actor_opt, log_alpha, alpha_opt, actor_stats), policy_metrics = every_nth_update(
            self.policy_delay, updates, policy_step, operand
        )
        new = CrossQLearner(
            actor=actor,
            critic=critic,
            critic_stats=critic_stats,
            log_alpha=log_alpha,
            actor_opt=actor_opt,
            critic_opt=critic_opt,
            alpha_opt=alpha_opt,
            actor_stats=actor_stats,
        )
        metrics = {"critic_loss": critic_loss, "alpha": alpha, "q_mean": jnp.mean(target), **critic_metrics, **policy_metrics}
        return new, td, metrics
