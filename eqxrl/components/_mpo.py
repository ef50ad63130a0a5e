"""MPO's losses (Abdolmaleki et al. 2018): the E-step temperature dual, the
M-step weighted maximum likelihood, and KL penalties with Lagrange duals.

Conventions (as in acme's `mpo` loss): action samples (or, for a discrete
policy, the actions themselves) are on axis 0 and states on axis 1, so
`q_values` is `(n, batch)`. Every KL is `KL(target || online)`, the target
(old) policy first. A dual variable's loss is written so that one gradient
*descent* step moves it the right way: the temperature and the multipliers
grow when their KL exceeds its bound and shrink when it is below.
"""

import jax
import jax.numpy as jnp
from jaxtyping import Array, Bool, Float

from .distributions import Categorical, kl_divergence


def softplus_inverse(x: Float[Array, "*s"]) -> Float[Array, "*s"]:
    """**Returns:** `y` with `softplus(y) = x` (for `x > 0`): the raw parameter of a positive dual variable."""
    # log(expm1(x)) = x + log(1 - exp(-x)), stable for large x
    return x + jnp.log(-jnp.expm1(-x))


def mpo_e_step(
    q_values: Float[Array, "n batch"],
    log_prior: Float[Array, "n batch"],
    temperature: Float[Array, ""],
    epsilon: Float[Array, ""] | float,
) -> tuple[Float[Array, "n batch"], Float[Array, ""], Float[Array, " batch"]]:
    """MPO's E-step: the non-parametric policy `q(a|s) ∝ prior(a|s) exp(Q(s, a) / eta)`
    and the loss of its temperature `eta`.

    **Arguments:**

    - `q_values`: `Q(s, a)` for `n` actions per state (treated as constants).
    - `log_prior`: the log-weight of each action under the old policy: `-log n`
      for `n` actions sampled from it (the expectation becomes a mean over
      samples), or `log pi_old(a|s)` when `a` runs over every discrete action.
    - `temperature`: `eta > 0` (differentiable).
    - `epsilon`: the bound on `KL(q || prior)` per state.

    **Returns:** `(weights, temperature_loss, kl)`: the normalised weights
    `q(a|s)` (summing to 1 over axis 0, no gradient), the dual loss
    `eta * epsilon + eta * mean_s log sum_a prior(a|s) exp(Q(s, a) / eta)`
    (with samples: `eta * mean_s logmeanexp(Q / eta)`), whose derivative in
    `eta` is `epsilon - mean_s KL(q || prior)`, and that KL per state.
    """
    q = jax.lax.stop_gradient(q_values)
    logits = q / temperature + log_prior
    log_z = jax.nn.logsumexp(logits, axis=0)
    loss = temperature * (epsilon + jnp.mean(log_z))
    log_weights = jax.lax.stop_gradient(logits - log_z)
    weights = jnp.exp(log_weights)
    kl = jnp.sum(weights * (log_weights - log_prior), axis=0)
    return weights, loss, kl


def _e_step(q_values, log_prior, temperature, epsilon, e_step_temperature):
    """`mpo_e_step`, with the weights and their KL from `e_step_temperature` (a constant) when given."""
    weights, loss, kl = mpo_e_step(q_values, log_prior, temperature, epsilon)
    if e_step_temperature is None:
        return weights, loss, kl
    weights, _, kl = mpo_e_step(q_values, log_prior, jax.lax.stop_gradient(e_step_temperature), epsilon)
    return weights, loss, kl


def mpo_weighted_log_likelihood(
    log_prob: Float[Array, "n batch"], weights: Float[Array, "n batch"]
) -> Float[Array, ""]:
    """MPO's M-step objective as a loss: `-mean_s sum_a q(a|s) log pi(a|s)`, the
    cross-entropy of the parametric policy `pi` (through `log_prob`) against
    the E-step's weights (constants)."""
    return -jnp.mean(jnp.sum(jax.lax.stop_gradient(weights) * log_prob, axis=0))


def mpo_kl_penalty(
    kl: Float[Array, " batch"], alpha: Float[Array, ""], epsilon: Float[Array, ""] | float
) -> tuple[Float[Array, ""], Float[Array, ""]]:
    """The KL penalty of the policy and the loss of its Lagrange multiplier.

    **Arguments:** the per-state `kl` of the new policy from the old one
    (differentiable in the policy), the multiplier `alpha > 0`
    (differentiable) and the bound `epsilon`.

    **Returns:** `(penalty, alpha_loss)`: `alpha * mean(kl)` with `alpha` held
    constant (the policy's part), and `alpha * (epsilon - mean(kl))` with the
    KL held constant (the multiplier's part: its gradient `epsilon - mean(kl)`
    makes a descent step raise `alpha` while the bound is violated).
    """
    mean_kl = jnp.mean(kl)
    penalty = jax.lax.stop_gradient(alpha) * mean_kl
    alpha_loss = alpha * (epsilon - jax.lax.stop_gradient(mean_kl))
    return penalty, alpha_loss


def mpo_scaled_multiplier_update(
    alpha: Float[Array, "*k"],
    kl: Float[Array, "*k"],
    epsilon: Float[Array, "*k"] | float,
    scale: Float[Array, "*k"] | float,
    alpha_max: Float[Array, "*k"] | float,
) -> Float[Array, "*k"]:
    """pytorchrl's MPO update of a KL constraint's Lagrange multiplier: a step of
    `scale` times the constraint's violation, clipped to `[0, alpha_max]`:
    `clip(alpha + scale * (kl - epsilon), 0, alpha_max)` (no optimizer; MPO's
    default instead takes an optimizer step on `mpo_kl_penalty`'s multiplier loss).

    **Arguments:** the multiplier(s) `alpha`, the measured mean `kl`, its bound
    `epsilon`, the step size `scale` and the maximum `alpha_max` (elementwise).

    **Returns:** the new multiplier(s), no gradient.
    """
    step = jax.lax.stop_gradient(alpha + scale * (kl - epsilon))
    return jnp.clip(step, 0.0, alpha_max)


def normal_kl(
    loc_p: Float[Array, "*batch d"],
    scale_p: Float[Array, "*batch d"],
    loc_q: Float[Array, "*batch d"],
    scale_q: Float[Array, "*batch d"],
) -> Float[Array, "*batch"]:
    """**Returns:** `KL(p || q)` of two diagonal Gaussians, summed over the last axis."""
    var_ratio = jnp.square(scale_p / scale_q)
    mahalanobis = jnp.square((loc_p - loc_q) / scale_q)
    return jnp.sum(0.5 * (var_ratio + mahalanobis - 1.0 - jnp.log(var_ratio)), axis=-1)


def categorical_kl(logits_p: Float[Array, "*batch n"], logits_q: Float[Array, "*batch n"]) -> Float[Array, "*batch"]:
    """**Returns:** `KL(p || q)` of two categorical distributions given by logits."""
    log_p = jax.nn.log_softmax(logits_p, axis=-1)
    log_q = jax.nn.log_softmax(logits_q, axis=-1)
    return jnp.sum(jnp.exp(log_p) * (log_p - log_q), axis=-1)


def _normal_log_prob(x: Array, loc: Array, scale: Array) -> Array:
    z = (x - loc) / scale
    return jnp.sum(-0.5 * jnp.square(z) - jnp.log(scale) - 0.5 * jnp.log(2.0 * jnp.pi), axis=-1)


def mpo_gaussian_loss(
    online_loc: Float[Array, "batch d"],
    online_scale: Float[Array, "batch d"],
    target_loc: Float[Array, "batch d"],
    target_scale: Float[Array, "batch d"],
    actions: Float[Array, "n batch d"],
    q_values: Float[Array, "n batch"],
    temperature: Float[Array, ""],
    alpha_mean: Float[Array, ""],
    alpha_std: Float[Array, ""],
    epsilon: Float[Array, ""] | float,
    epsilon_mean: Float[Array, ""] | float,
    epsilon_std: Float[Array, ""] | float,
    e_step_temperature: Float[Array, ""] | None = None,
) -> tuple[Float[Array, ""], dict[str, Float[Array, ""]]]:
    """MPO's policy and dual loss for a diagonal Gaussian policy, with decoupled
    KL constraints on the mean and the standard deviation.

    The online policy is split into a "fixed-std" Gaussian (online mean, target
    std) and a "fixed-mean" one (target mean, online std); each is fitted to
    the E-step's weights and held within its own bound of the target policy by
    its own multiplier (`alpha_mean` for the mean, `alpha_std` for the std).

    **Arguments:** the online and target Gaussians per state; `actions`
    sampled from the target policy (`n` per state); their `q_values`; the dual
    variables `temperature`, `alpha_mean`, `alpha_std` (positive,
    differentiable); the bounds `epsilon` (E-step), `epsilon_mean`,
    `epsilon_std` (M-step, KL summed over action dimensions);
    `e_step_temperature`: the temperature the E-step's weights (and
    `kl_nonparametric`) are computed with, held constant (default:
    `temperature`). The temperature's own loss always uses `temperature`; MPO's
    M-step iterations pass the update's first temperature so every iteration
    fits the same weights.

    **Returns:** `(loss, stats)`: the sum of the policy losses, KL penalties
    and dual losses (differentiate it in the online parameters and the dual
    variables together), and scalar diagnostics (`kl_mean`, `kl_std`: the
    measured decoupled KLs; `kl_nonparametric`; the dual losses).
    """
    n = q_values.shape[0]
    log_prior = jnp.full(q_values.shape, -jnp.log(jnp.asarray(n, jnp.float32)))
    weights, temperature_loss, kl_q = _e_step(q_values, log_prior, temperature, epsilon, e_step_temperature)

    actions = jax.lax.stop_gradient(actions)
    target_loc = jax.lax.stop_gradient(target_loc)
    target_scale = jax.lax.stop_gradient(target_scale)
    # fixed std: the online mean with the target std; fixed mean: the target mean with the online std
    log_prob_mean = _normal_log_prob(actions, online_loc, target_scale)
    log_prob_std = _normal_log_prob(actions, target_loc, online_scale)
    loss_mean = mpo_weighted_log_likelihood(log_prob_mean, weights)
    loss_std = mpo_weighted_log_likelihood(log_prob_std, weights)

    kl_mean = normal_kl(target_loc, target_scale, online_loc, target_scale)
    kl_std = normal_kl(target_loc, target_scale, target_loc, online_scale)
    penalty_mean, alpha_mean_loss = mpo_kl_penalty(kl_mean, alpha_mean, epsilon_mean)
    penalty_std, alpha_std_loss = mpo_kl_penalty(kl_std, alpha_std, epsilon_std)

    loss = loss_mean + loss_std + penalty_mean + penalty_std + temperature_loss + alpha_mean_loss + alpha_std_loss
    stats = {
        "policy_loss": loss_mean + loss_std,
        "temperature_loss": temperature_loss,
        "alpha_mean_loss": alpha_mean_loss,
        "alpha_std_loss": alpha_std_loss,
        "kl_nonparametric": jnp.mean(kl_q),
        "kl_mean": jnp.mean(kl_mean),
        "kl_std": jnp.mean(kl_std),
    }
    return loss, stats


def mpo_categorical_loss(
    online_logits: Float[Array, "batch a"],
    target_logits: Float[Array, "batch a"],
    q_values: Float[Array, "batch a"],
    temperature: Float[Array, ""],
    alpha: Float[Array, ""],
    epsilon: Float[Array, ""] | float,
    epsilon_policy: Float[Array, ""] | float,
    e_step_temperature: Float[Array, ""] | None = None,
    mask: Bool[Array, "batch a"] | None = None,
) -> tuple[Float[Array, ""], dict[str, Float[Array, ""]]]:
    """MPO's policy and dual loss for a categorical policy: the E-step is exact
    (an expectation over every action, weighted by the target policy), and
    the M-step has one KL constraint.

    **Arguments:** the online and target `logits` per state, `Q(s, a)` for
    every action, the dual variables `temperature` and `alpha` (positive,
    differentiable), and the bounds `epsilon` (E-step) and `epsilon_policy`
    (`KL(target || online)`); `e_step_temperature` as in `mpo_gaussian_loss`;
    `mask` (True = legal; None: every action): both policies are restricted to
    the legal actions (masked `Categorical`s), so an illegal action has no prior
    mass and no E-step weight, its `Q` is never read, and the log-likelihood and
    the KL are over the legal actions (finite, no gradient to an illegal logit).

    **Returns:** `(loss, stats)` as `mpo_gaussian_loss` (`kl` is the measured
    policy KL).
    """
    target_logits = jax.lax.stop_gradient(target_logits)
    if mask is None:
        log_prior = jax.nn.log_softmax(target_logits, axis=-1).T
        log_prob = jax.nn.log_softmax(online_logits, axis=-1).T
        kl = categorical_kl(target_logits, online_logits)
    else:
        # the lowest float on an illegal logit: exp gives exactly 0, and no inf - inf = NaN anywhere
        lowest = lambda logits: jnp.where(mask, logits, jnp.finfo(logits.dtype).min)  # noqa: E731
        log_prior = jax.nn.log_softmax(lowest(target_logits), axis=-1).T
        log_prob = jnp.where(mask, jax.nn.log_softmax(lowest(online_logits), axis=-1), 0.0).T
        q_values = jnp.where(mask, q_values, 0.0)
        kl = kl_divergence(Categorical(target_logits, mask), Categorical(online_logits, mask))
    weights, temperature_loss, kl_q = _e_step(q_values.T, log_prior, temperature, epsilon, e_step_temperature)
    policy_loss = mpo_weighted_log_likelihood(log_prob, weights)
    penalty, alpha_loss = mpo_kl_penalty(kl, alpha, epsilon_policy)
    loss = policy_loss + penalty + temperature_loss + alpha_loss
    stats = {
        "policy_loss": policy_loss,
        "temperature_loss": temperature_loss,
        "alpha_loss": alpha_loss,
        "kl_nonparametric": jnp.mean(kl_q),
        "kl": jnp.mean(kl),
    }
    return loss, stats
