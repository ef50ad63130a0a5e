"""MPO: Maximum a Posteriori Policy Optimisation (Abdolmaleki et al. 2018), with
the decoupled KL constraints of Abdolmaleki et al. 2018b (as acme's `mpo` loss)."""

from dataclasses import KW_ONLY, InitVar
from typing import Any, ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, Int

from ..core import Key, Metrics, check_hyperparameter, check_positive_int, hyperparameter
from ..components import (
    AbstractOptimizer,
    Categorical,
    CategoricalHead,
    ContinuousQHead,
    DiscreteQHead,
    Ensemble,
    GaussianHead,
    Noise,
    Normal,
    OptState,
    Sample,
    add_loss_terms,
    check_optimizer,
    mpo_categorical_loss,
    mpo_gaussian_loss,
    optimizer_slot,
    polyak,
    select_q,
    mpo_scaled_multiplier_update,
    softplus_inverse,
)
from ..envs import AbstractEnv, Box, Discrete
from ._actor_critic import AbstractActorCriticAgent, update_critics
from ._keywords import LearningRate
from ._network_spec import NetworkSpec
from ._off_policy_loop import OffPolicyLoop
from ._base import as_env, with_mask
from ._noise import policy_noise_spec

# Lower bound of the raw (pre-softplus) dual parameters: softplus(-18) ~ 1.5e-8 (acme's projection).
_MIN_RAW_DUAL = -18.0
# The smallest maximum a multiplier may be given (well above the floor of about 2.5e-8), as float32.
_MIN_DUAL_MAX = float(np.float32(1e-6))
DUAL_UPDATES = ("gradient", "scaled")  # MPO(dual_update): an optimizer step, or pytorchrl's `scale * (kl - bound)`


def _raw_upper_bound(maximum: Float[Array, "*s"]) -> Float[Array, "*s"]:
    """The raw parameter whose dual value `softplus(raw) + 1e-8` is just below `maximum`
    (a relative margin of 1e-6 absorbs float32 rounding; `inf` gives `inf`)."""
    return softplus_inverse(jnp.maximum(maximum * (1.0 - 1e-6) - 1e-8, 1e-12))


class MPODuals(eqx.Module):
    """MPO's dual variables, stored as raw parameters of `softplus` (positive by construction).

    `raw_alpha` holds the M-step multipliers: `(alpha_mean, alpha_std)` for a
    Gaussian policy, `(alpha,)` for a categorical one.
    """

    raw_temperature: Float[Array, ""]
    raw_alpha: Float[Array, " k"]

    @property
    def temperature(self) -> Float[Array, ""]:
        return jax.nn.softplus(self.raw_temperature) + 1e-8

    @property
    def alpha(self) -> Float[Array, " k"]:
        return jax.nn.softplus(self.raw_alpha) + 1e-8

    def project(self, alpha_max: Float[Array, " k"] | None = None) -> "MPODuals":
        """**Returns:** the duals with raw parameters clipped from below (after an
        optimizer step) and, given `alpha_max` (one maximum per multiplier, `inf`
        for none, each >= 1e-6), the multipliers clipped from above so that
        `alpha <= alpha_max`."""
        raw_alpha = jnp.maximum(self.raw_alpha, _MIN_RAW_DUAL)
        if alpha_max is not None:
            raw_alpha = jnp.minimum(raw_alpha, _raw_upper_bound(alpha_max))
        return MPODuals(jnp.maximum(self.raw_temperature, _MIN_RAW_DUAL), raw_alpha)


class MPOLearner(eqx.Module):
    """MPO's networks, target networks, dual variables and optimizer states."""

    policy: GaussianHead | CategoricalHead
    target_policy: GaussianHead | CategoricalHead
    critic: Ensemble
    target_critic: Ensemble
    duals: MPODuals
    policy_opt: OptState
    critic_opt: OptState
    dual_opt: OptState


class MPO(AbstractActorCriticAgent):
    """MPO for continuous (Box) or discrete actions.

    Each update, on a replay batch:

    - **critic**: an ensemble of `num_critics` Q-networks regresses on
      `r + discount * mean_j min_i Q_target_i(s', a_j)`, with
      `num_action_samples` actions `a_j` sampled from the *target* policy at
      `s'` (a discrete policy takes the exact expectation over all actions);
    - **E-step**: at the same states `s'`, the non-parametric policy
      `q(a|s) ∝ pi_target(a|s) exp(Q_target(s, a) / eta)` over the same actions;
      the temperature `eta` minimises its dual with KL bound `epsilon`;
    - **M-step**: the policy fits `q` by weighted maximum likelihood under a KL
      constraint to the target policy, held by learned Lagrange multipliers.
      Gaussian policies have decoupled constraints: `kl_mean` on the mean
      (`alpha_mean`) and `kl_std` on the standard deviation (`alpha_std`);
      categorical ones a single `kl_categorical` (`alpha`).

    Dual variables are softplus-parameterised (positive) and projected onto
    raw values >= -18 after each step. `mstep_iterations` gradient steps of the
    policy and the dual variables are taken per update, all on the batch's
    E-step weights (computed with the update's first temperature). The
    multipliers can be bounded above (`alpha_mean_max`, `alpha_std_max`,
    `alpha_max`; clipped after each step, which makes their KL bounds soft),
    and each dual's optimizer step is multiplied by its own `*_lr_scale` (a
    per-dual learning rate; 0 freezes it). `dual_update="scaled"` moves the multipliers by
    pytorchrl's rule instead: `alpha += alpha_*_scale * (kl - bound)` per M-step, clipped to
    `[0, alpha_*max]` (`mpo_scaled_multiplier_update`). Target networks (policy and critic) are
    updated every `target_update_period` updates by `target <- tau * online +
    (1 - tau) * target`: the default is acme's hard copy every 100 updates
    (`tau=1`), so the KL constraints are relative to a policy fixed for 100
    updates; `target_update_period=1, tau=0.005` gives polyak averaging.

    The continuous policy is a diagonal Gaussian with a `tanh`-bounded mean and
    a state-dependent std (`init_std * softplus(.) + min_std`); its samples are
    clipped to [-1, 1] (rescaled onto the env's bounds) before they reach the env
    or the critic, while the M-step's log-likelihoods use the unclipped samples.
    The deterministic action is the mean.

    The discrete mode honours action masks (`eqxrl.envs.ACTION_MASK`): its policy is a
    masked `Categorical` wherever it acts or is valued (sampled and greedy actions, the
    target's expectation, the E-step's prior and weights, the M-step's likelihood and KL),
    so an illegal action has probability exactly 0 and every term stays finite.
    """

    default_env: ClassVar[str] = "Pendulum-v1"
    default_total_steps: ClassVar[int] = 100_000
    rates: ClassVar[dict[str, str]] = {
        "critic.optimizer": "critic_learning_rate", "actor.optimizer": "policy_learning_rate", "dual_optimizer": "dual_learning_rate"
    }
    env: AbstractEnv = eqx.field(converter=as_env)
    _: KW_ONLY
    loop: OffPolicyLoop | None = None
    critic: NetworkSpec | None = None
    actor: NetworkSpec | None = None
    num_critics: int = eqx.field(static=True, default=2)
    num_action_samples: int = eqx.field(static=True, default=20)
    target_update_period: int = eqx.field(static=True, default=100)
    dual_optimizer: AbstractOptimizer | None = optimizer_slot()
    policy_learning_rate: InitVar[LearningRate] = 3e-4
    critic_learning_rate: InitVar[LearningRate] = 3e-4
    dual_learning_rate: InitVar[LearningRate] = 1e-2
    tau: Float[Array, ""] = hyperparameter(1.0)
    epsilon: Float[Array, ""] = hyperparameter(0.1)
    kl_mean: Float[Array, ""] = hyperparameter(2.5e-3)
    kl_std: Float[Array, ""] = hyperparameter(1e-5)
    kl_categorical: Float[Array, ""] = hyperparameter(1e-2)
    init_temperature: Float[Array, ""] = hyperparameter(1.0)
    init_alpha_mean: Float[Array, ""] = hyperparameter(1.0)
    init_alpha_std: Float[Array, ""] = hyperparameter(10.0)
    init_std: Float[Array, ""] = hyperparameter(0.5)
    min_std: Float[Array, ""] = hyperparameter(1e-3)
    max_grad_norm: InitVar[float | Array] = 40.0
    mstep_iterations: int = eqx.field(static=True, default=1)
    alpha_mean_max: Float[Array, ""] = hyperparameter(float("inf"))
    alpha_std_max: Float[Array, ""] = hyperparameter(float("inf"))
    alpha_max: Float[Array, ""] = hyperparameter(float("inf"))
    temperature_lr_scale: Float[Array, ""] = hyperparameter(1.0)
    alpha_mean_lr_scale: Float[Array, ""] = hyperparameter(1.0)
    alpha_std_lr_scale: Float[Array, ""] = hyperparameter(1.0)
    alpha_lr_scale: Float[Array, ""] = hyperparameter(1.0)
    dual_update: str = eqx.field(static=True, default="gradient")
    alpha_scale: Float[Array, ""] = hyperparameter(10.0)
    alpha_mean_scale: Float[Array, ""] = hyperparameter(1.0)
    alpha_var_scale: Float[Array, ""] = hyperparameter(100.0)
    takes_action_masks: ClassVar[bool] = True  # (discrete MPO; the layout refuses masks on Box actions)

    def __check_init__(self):
        check_optimizer("MPO", "dual_optimizer", self.dual_optimizer)
        if not isinstance(self.env, AbstractEnv):
            return  # the shared check names it
        space = self.env.action_space
        if not (isinstance(space, Discrete) or (isinstance(space, Box) and len(space.shape) == 1)):
            raise ValueError(
                f"MPO needs a Discrete or a 1-D Box action space, got {space!r} from env {self.env.name!r}"
            )
        if isinstance(space, Box) and not space.bounded:
            raise ValueError(f"MPO needs finite action bounds, got {space!r}")
        for name in ("num_critics", "num_action_samples", "target_update_period", "mstep_iterations"):
            check_positive_int("MPO", name, getattr(self, name))
        check = lambda name, ok, expected: check_hyperparameter("MPO", name, getattr(self, name), ok, expected)  # noqa: E731
        for name in ("epsilon", "kl_mean", "kl_std", "kl_categorical", "init_temperature", "init_alpha_mean", "init_alpha_std", "init_std"):
            check(name, lambda v: v > 0, "> 0")
        check("min_std", lambda v: v >= 0, ">= 0")
        for name in ("alpha_mean_max", "alpha_std_max", "alpha_max"):
            check(name, lambda v: v >= _MIN_DUAL_MAX, f">= {_MIN_DUAL_MAX:g} (inf: unbounded)")
        for name in ("temperature_lr_scale", "alpha_mean_lr_scale", "alpha_std_lr_scale", "alpha_lr_scale"):
            check(name, lambda v: 0 <= v < float("inf"), "a finite number >= 0 (0 freezes the dual)")
        if self.dual_update not in DUAL_UPDATES:
            raise ValueError(f"MPO(dual_update) must be one of {list(DUAL_UPDATES)}, got {self.dual_update!r}")
        for name in ("alpha_scale", "alpha_mean_scale", "alpha_var_scale"):
            check(name, lambda v: 0 <= v < float("inf"), "a finite number >= 0 (0 freezes the multiplier)")

    def alpha_maxima(self) -> Float[Array, " k"]:
        """**Returns:** the upper bounds of the multipliers, in `MPODuals.raw_alpha`'s order:
        `(alpha_mean_max, alpha_std_max)` for a Gaussian policy, `(alpha_max,)` for a categorical one."""
        if self.discrete:
            return self.alpha_max[None]
        return jnp.stack([self.alpha_mean_max, self.alpha_std_max])

    def dual_lr_scales(self) -> MPODuals:
        """**Returns:** the factor on each dual's optimizer step, shaped like `MPODuals`:
        `temperature_lr_scale`, and `(alpha_mean_lr_scale, alpha_std_lr_scale)` or `(alpha_lr_scale,)`."""
        if self.discrete:
            alpha = self.alpha_lr_scale[None]
        else:
            alpha = jnp.stack([self.alpha_mean_lr_scale, self.alpha_std_lr_scale])
        return MPODuals(self.temperature_lr_scale, alpha)

    def optimizers(self) -> tuple[AbstractOptimizer, AbstractOptimizer, AbstractOptimizer]:
        """**Returns:** the policy's, the critics' and the duals' optimizers: the slots
        (`actor_optimizer`, `critic_optimizer`, `dual_optimizer`), or Adam with the
        matching learning rate (clipped at `max_grad_norm`, except the duals: their
        gradients are KL gaps, small by construction)."""
        return self.actor.optimizer, self.critic.optimizer, self.dual_optimizer

    def adam_options(self, path: str, keywords: dict[str, Any]) -> dict[str, Any]:
        return {"max_grad_norm": float("inf")} if path == "dual_optimizer" else {}  # (the duals' steps are not clipped)

    def policy_distribution(self, policy: GaussianHead, obs: Float[Array, "*batch obs"]) -> Normal:
        """**Returns:** the Gaussian policy at `obs`: a `tanh`-bounded mean and
        `init_std * softplus(.) + min_std` as std (its samples still need clipping)."""
        d = policy(obs)
        return Normal(jnp.tanh(d.loc), self.init_std * d.scale + self.min_std)

    def init_learner(self, key: Key) -> MPOLearner:
        policy_key, critic_key = jax.random.split(key)
        n, a = self.obs_size, self.action_size
        actor_torso, critic_torso = self.actor.torso_for(self), self.critic.torso_for(self)
        if self.discrete:
            policy = CategoricalHead(n, a, key=policy_key, torso=actor_torso, obs_shape=self.obs_shape)
            make_q = lambda k: DiscreteQHead(n, a, key=k, torso=critic_torso, obs_shape=self.obs_shape)  # noqa: E731
            raw_alpha = softplus_inverse(self.init_alpha_mean[None])
        else:
            # init_std = 1, min_std = 0 here: `policy_distribution` scales and floors the std.
            policy = GaussianHead(
                n, a, key=policy_key, torso=actor_torso, obs_shape=self.obs_shape,
                state_dependent_std=True, init_std=1.0, min_std=0.0,
            )
            make_q = lambda k: ContinuousQHead(n, a, key=k, torso=critic_torso)  # noqa: E731
            raw_alpha = softplus_inverse(jnp.stack([self.init_alpha_mean, self.init_alpha_std]))
        critic = Ensemble(make_q, self.num_critics, key=critic_key)
        # an initial multiplier above its maximum starts at the maximum
        duals = MPODuals(softplus_inverse(self.init_temperature), raw_alpha).project(self.alpha_maxima())
        policy_opt, critic_opt, dual_opt = self.optimizers()
        return MPOLearner(
            policy=policy,
            target_policy=policy,
            critic=critic,
            target_critic=critic,
            duals=duals,
            policy_opt=policy_opt.init(policy),
            critic_opt=critic_opt.init(critic),
            dual_opt=dual_opt.init(duals),
        )

    def categorical(self, policy: CategoricalHead, obs: Float[Array, "*batch stored"]) -> Categorical:
        """**Returns:** the discrete policy at stored observations `obs`, restricted to the
        legal actions of their masks (when the env has them)."""
        features, mask = self.layout.split(obs)
        return with_mask(policy(features), mask)

    def greedy(self, learner: MPOLearner, obs: Array) -> Array:
        if self.discrete:
            return self.categorical(learner.policy, obs).mode()
        return jnp.clip(self.policy_distribution(learner.policy, obs).mode(), -1.0, 1.0)

    def explore(self, learner: MPOLearner, obs: Array, key: Key, progress: Float[Array, ""]) -> Array:
        if self.discrete:
            return self.categorical(learner.policy, obs).sample(key)
        return jnp.clip(self.policy_distribution(learner.policy, obs).sample(key), -1.0, 1.0)

    def noise_spec(self, state: Any, batch_shape: tuple[int, ...] = ()) -> Noise:
        """The policy's noise: Gumbel `(*batch, n)` (discrete), standard normal `(*batch, d)` (clipped after)."""
        return policy_noise_spec(self.env.action_space, batch_shape, "MPO.noise_spec")

    def explore_from_noise(self, learner: MPOLearner, obs: Array, noise: Array, progress: Float[Array, ""]) -> Array:
        if self.discrete:
            return self.categorical(learner.policy, obs).sample_from_noise(noise)
        return jnp.clip(self.policy_distribution(learner.policy, obs).sample_from_noise(noise), -1.0, 1.0)

    def update(
        self, learner: MPOLearner, batch: Sample, key: Key, updates: Int[Array, ""], progress: Float[Array, ""]
    ) -> tuple[MPOLearner, Float[Array, " batch"], Metrics]:
        data = batch.data
        next_obs = data.next_obs
        if self.discrete:
            # s' as the networks see it (its features) and its legal actions (None: no masks)
            next_obs, next_mask = self.layout.split(next_obs)
            target_policy = with_mask(learner.target_policy(next_obs), next_mask)
            target_logits = target_policy.logits
            # (batch, actions): every action of s', the minimum over critics
            next_q = jnp.min(learner.target_critic(next_obs), axis=0)
            next_value = jnp.sum(target_policy.probs * next_q, axis=-1)  # over the legal actions
        else:
            target_dist = self.policy_distribution(learner.target_policy, next_obs)
            noise = jax.random.normal(key, (self.num_action_samples,) + target_dist.loc.shape, jnp.float32)
            actions = target_dist.loc + target_dist.scale * noise  # (samples, batch, action)
            tiled = jnp.broadcast_to(next_obs, (self.num_action_samples,) + next_obs.shape)
            next_q = jnp.min(learner.target_critic(tiled, jnp.clip(actions, -1.0, 1.0)), axis=0)  # (samples, batch)
            next_value = jnp.mean(next_q, axis=0)
        next_q = jax.lax.stop_gradient(next_q)
        target = jax.lax.stop_gradient(data.reward + data.discount * next_value)

        policy_optimizer, critic_optimizer, dual_optimizer = self.optimizers()

        def q_values(critic, data):
            if not self.discrete:
                return (critic(data.obs, data.action),) * 2
            # (members, batch, actions) at the features: the loss terms see every action's value
            q_all = critic(self.layout.split(data.obs)[0])
            return q_all, jax.vmap(lambda q: select_q(q, data.action))(q_all)

        critic, critic_opt, critic_loss, td, critic_metrics = update_critics(
            learner.critic, learner.critic_opt, critic_optimizer, batch, target, self.critic_loss_terms, progress, q_values
        )

        # Every M-step iteration fits the same E-step weights: those of the update's first temperature.
        e_step_temperature = jax.lax.stop_gradient(learner.duals.temperature)

        def policy_loss_fn(params):
            policy, duals = params
            alpha = duals.alpha
            if self.discrete:
                online = with_mask(policy(next_obs), next_mask)
                loss, stats = mpo_categorical_loss(
                    online.logits, target_logits, next_q, duals.temperature, alpha[0],
                    self.epsilon, self.kl_categorical, e_step_temperature, next_mask,
                )
            else:
                online = self.policy_distribution(policy, next_obs)
                loss, stats = mpo_gaussian_loss(
                    online.loc, online.scale, target_dist.loc, target_dist.scale, actions, next_q,
                    duals.temperature, alpha[0], alpha[1], self.epsilon, self.kl_mean, self.kl_std,
                    e_step_temperature,
                )
            extra, extra_metrics = add_loss_terms(
                self.policy_loss_terms, "policy_loss_terms", policy, batch, {"obs": next_obs, "dist": online}
            )
            return loss + extra, {**stats, **extra_metrics}

        alpha_maxima, lr_scales = self.alpha_maxima(), self.dual_lr_scales()
        bounds, scales, kl_names = (self.kl_categorical[None], self.alpha_scale[None], ("kl",)) if self.discrete else (
            jnp.stack([self.kl_mean, self.kl_std]), jnp.stack([self.alpha_mean_scale, self.alpha_var_scale]), ("kl_mean", "kl_std"))

        def m_step(carry, _):
            policy, policy_opt, duals, dual_opt = carry
            (_, stats), (policy_grads, dual_grads) = eqx.filter_value_and_grad(policy_loss_fn, has_aux=True)(
                (policy, duals)
            )
            policy, policy_opt = policy_optimizer.update(policy_grads, policy_opt, policy, progress)
            new_duals, dual_opt = dual_optimizer.update(dual_grads, dual_opt, duals, progress)
            # each dual's step times its own scale, then the bounds
            new_duals = jax.tree.map(lambda new, old, scale: old + scale * (new - old), new_duals, duals, lr_scales)
            if self.dual_update == "scaled":  # pytorchrl's rule for the multipliers: alpha itself, by the KL gap
                kl = jnp.stack([stats[name] for name in kl_names])
                alpha = mpo_scaled_multiplier_update(duals.alpha, kl, bounds, scales, alpha_maxima)
                new_duals = MPODuals(new_duals.raw_temperature, softplus_inverse(jnp.maximum(alpha, 1e-12)))
            return (policy, policy_opt, new_duals.project(alpha_maxima), dual_opt), stats

        carry = (learner.policy, learner.policy_opt, learner.duals, learner.dual_opt)
        if self.mstep_iterations == 1:
            carry, stats = m_step(carry, None)
        else:
            carry, stats = jax.lax.scan(m_step, carry, length=self.mstep_iterations)
            stats = jax.tree.map(lambda x: x[-1], stats)  # the last iteration's
        policy, policy_opt, duals, dual_opt = carry

        sync = (updates + 1) % self.target_update_period == 0
        follow = lambda online, old: jax.tree.map(  # noqa: E731
            lambda new, prev: jnp.where(sync, new, prev), polyak(online, old, self.tau), old
        )
        new = MPOLearner(
            policy=policy,
            target_policy=follow(policy, learner.target_policy),
            critic=critic,
            target_critic=follow(critic, learner.target_critic),
            duals=duals,
            policy_opt=policy_opt,
            critic_opt=critic_opt,
            dual_opt=dual_opt,
        )
        metrics = {**stats, **critic_metrics}
        metrics.update(
            critic_loss=critic_loss,
            q_mean=jnp.mean(target),
            temperature=learner.duals.temperature,
        )
        if self.discrete:
            metrics["alpha"] = learner.duals.alpha[0]
        else:
            metrics.update(
                alpha_mean=learner.duals.alpha[0],
                alpha_std=learner.duals.alpha[1],
                policy_std=jnp.mean(target_dist.scale),
            )
        return new, td, metrics
