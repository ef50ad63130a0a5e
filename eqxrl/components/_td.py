"""Temporal-difference targets and losses of the value-based and actor-critic agents.

Every target takes a transition's `discount`, which already folds in
termination: `discount = gamma**m * (1 - terminated)` for an m-step
transition (see `eqxrl.components.Transition`). A terminated transition
therefore bootstraps nothing; a truncated one bootstraps with `gamma**m`.
"""

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, Int, PyTree


def _check_batch(owner: str, what: str, b: int, **arrays: Array | None) -> None:
    """Per-transition arrays must be `(b,)` (or scalars): a `(b, 1)` column would silently
    broadcast a `(b,)` target to `(b, b)`."""
    for name, x in arrays.items():
        if x is not None and tuple(jnp.shape(x)) not in ((b,), ()):
            raise ValueError(f"{owner}({name}) must have shape {(b,)} ({what}), got {tuple(jnp.shape(x))}")


def _check_ndim(owner: str, name: str, x: Array, axes: str) -> None:
    if jnp.ndim(x) != 2:
        raise ValueError(f"{owner}({name}) must have shape ({axes}), got {tuple(jnp.shape(x))}")


def huber(x: Float[Array, "*b"], delta: float = 1.0) -> Float[Array, "*b"]:
    """Huber loss: quadratic within `delta` of zero, linear beyond."""
    abs_x = jnp.abs(x)
    return jnp.where(abs_x <= delta, 0.5 * jnp.square(x), delta * (abs_x - 0.5 * delta))


def q_learning_target(
    reward: Float[Array, " b"],
    discount: Float[Array, " b"],
    next_q_target: Float[Array, "b a"],
    next_q_online: Float[Array, "b a"] | None = None,
) -> Float[Array, " b"]:
    """DQN's target `r + discount * max_a Q_target(s', a)`.

    With `next_q_online` (double DQN) the action is the online network's
    argmax, evaluated by the target network: `Q_target(s', argmax_a Q_online(s', a))`.
    """
    _check_ndim("q_learning_target", "next_q_target", next_q_target, "batch, num_actions")
    b = next_q_target.shape[0]
    _check_batch("q_learning_target", "one per row of next_q_target", b, reward=reward, discount=discount)
    if next_q_online is not None and next_q_online.shape != next_q_target.shape:
        raise ValueError(
            f"q_learning_target(next_q_online) must have the shape of next_q_target {tuple(next_q_target.shape)}, "
            f"got {tuple(next_q_online.shape)}"
        )
    if next_q_online is None:
        value = jnp.max(next_q_target, axis=-1)
    else:
        best = jnp.argmax(next_q_online, axis=-1)
        value = jnp.take_along_axis(next_q_target, best[:, None], axis=-1)[:, 0]
    return reward + discount * value


def select_q(q: Float[Array, "b a"], action: Int[Array, " b"]) -> Float[Array, " b"]:
    """**Returns:** `q[i, action[i]]` for each row."""
    _check_ndim("select_q", "q", q, "batch, num_actions")
    if tuple(jnp.shape(action)) != q.shape[:1]:
        raise ValueError(
            f"select_q(action) must have shape {tuple(q.shape[:1])} (one per row of q), got {tuple(jnp.shape(action))}"
        )
    return jnp.take_along_axis(q, action.astype(jnp.int32)[:, None], axis=-1)[:, 0]


def smoothed_target_action(
    target_action: Float[Array, "b d"],
    key: Array,
    noise: Float[Array, ""] | float,
    noise_clip: Float[Array, ""] | float,
    low: float = -1.0,
    high: float = 1.0,
) -> Float[Array, "b d"]:
    """TD3's target policy smoothing: `clip(a' + clip(noise * N(0, 1), -c, c), low, high)`."""
    eps = jnp.clip(noise * jax.random.normal(key, target_action.shape), -noise_clip, noise_clip)
    return jnp.clip(target_action + eps, low, high)


def clipped_double_q_target(
    reward: Float[Array, " b"],
    discount: Float[Array, " b"],
    next_qs: Float[Array, "n b"],
    next_log_prob: Float[Array, " b"] | None = None,
    alpha: Float[Array, ""] | float = 0.0,
) -> Float[Array, " b"]:
    """`r + discount * (min_i Q_i(s', a') - alpha * log pi(a'|s'))` (TD3; SAC with the entropy term).

    With a single critic (`n = 1`, DDPG) the minimum is that critic's value.
    """
    _check_ndim("clipped_double_q_target", "next_qs", next_qs, "num_critics, batch")
    b = next_qs.shape[1]
    _check_batch(
        "clipped_double_q_target", "one per column of next_qs, (num_critics, batch)", b, reward=reward, discount=discount, next_log_prob=next_log_prob
    )
    value = jnp.min(next_qs, axis=0)
    if next_log_prob is not None:
        value = value - alpha * next_log_prob
    return reward + discount * value


def _weighted_mean(owner: str, per_sample: Float[Array, " b"], weights: Float[Array, " b"] | None) -> Float[Array, ""]:
    """`mean(weights * per_sample)` (PER's importance weights), or the plain mean without `weights`."""
    if weights is None:
        return jnp.mean(per_sample)
    _check_batch(owner, "one importance weight per sample", per_sample.shape[0], weights=weights)
    return jnp.mean(weights * per_sample)


def sac_actor_loss(
    qs: Float[Array, "n b"],
    log_prob: Float[Array, " b"],
    alpha: Float[Array, ""] | float,
    weights: Float[Array, " b"] | None = None,
) -> Float[Array, ""]:
    """SAC's policy loss `E[alpha * log pi(a|s) - min_i Q_i(s, a)]`, `a ~ pi(.|s)` reparameterised.

    With `weights` (PER's importance weights, one per sample) each sample's term is
    weighted as the critic's squared TD error is.
    """
    _check_ndim("sac_actor_loss", "qs", qs, "num_critics, batch")
    _check_batch("sac_actor_loss", "one per column of qs, (num_critics, batch)", qs.shape[1], log_prob=log_prob)
    return _weighted_mean("sac_actor_loss", alpha * log_prob - jnp.min(qs, axis=0), weights)


def sac_alpha_loss(
    log_alpha: Float[Array, ""],
    log_prob: Float[Array, " b"],
    target_entropy: Float[Array, ""] | float,
    weights: Float[Array, " b"] | None = None,
) -> Float[Array, ""]:
    """Temperature loss `-log_alpha * E[log pi + target_entropy]` (weighted by `weights`, if given).

    Its gradient raises alpha when the policy's entropy `-E[log pi]` is below
    the target and lowers it when above (`log_prob` is treated as a constant).
    """
    per_sample = jax.lax.stop_gradient(log_prob) + target_entropy
    return -log_alpha * _weighted_mean("sac_alpha_loss", jnp.reshape(per_sample, (-1,)), weights)


def _check_discrete(owner: str, qs: Array, logits: Array, qs_name: str) -> None:
    if jnp.ndim(qs) != 3:
        raise ValueError(f"{owner}({qs_name}) must have shape (num_critics, batch, num_actions), got {tuple(jnp.shape(qs))}")
    if tuple(jnp.shape(logits)) != tuple(qs.shape[1:]):
        raise ValueError(
            f"{owner}(logits) must have shape {tuple(qs.shape[1:])} (batch, num_actions of {qs_name}), "
            f"got {tuple(jnp.shape(logits))}"
        )


def discrete_sac_target(
    reward: Float[Array, " b"],
    discount: Float[Array, " b"],
    next_qs: Float[Array, "n b a"],
    next_logits: Float[Array, "b a"],
    alpha: Float[Array, ""] | float,
) -> Float[Array, " b"]:
    """Discrete SAC's target (Christodoulou 2019): the exact expectation over the next actions,
    `r + discount * sum_a pi(a|s') (min_i Q_i(s', a) - alpha * log pi(a|s'))`,
    with `pi = softmax(next_logits)`."""
    _check_discrete("discrete_sac_target", next_qs, next_logits, "next_qs")
    b = next_qs.shape[1]
    _check_batch("discrete_sac_target", "one per row of next_logits", b, reward=reward, discount=discount)
    log_pi = jax.nn.log_softmax(next_logits, axis=-1)
    value = jnp.sum(jnp.exp(log_pi) * (jnp.min(next_qs, axis=0) - alpha * log_pi), axis=-1)
    return reward + discount * value


def discrete_sac_actor_loss(
    qs: Float[Array, "n b a"],
    logits: Float[Array, "b a"],
    alpha: Float[Array, ""] | float,
    weights: Float[Array, " b"] | None = None,
) -> Float[Array, ""]:
    """Discrete SAC's policy loss `E_s[sum_a pi(a|s) (alpha * log pi(a|s) - min_i Q_i(s, a))]`
    (the exact expectation over actions; no reparameterisation), `pi = softmax(logits)`,
    each state weighted by `weights` if given. Its minimum over `pi` is `softmax(min_i Q / alpha)`.
    """
    _check_discrete("discrete_sac_actor_loss", qs, logits, "qs")
    log_pi = jax.nn.log_softmax(logits, axis=-1)
    per_state = jnp.sum(jnp.exp(log_pi) * (alpha * log_pi - jnp.min(qs, axis=0)), axis=-1)
    return _weighted_mean("discrete_sac_actor_loss", per_state, weights)


def discrete_sac_alpha_loss(
    log_alpha: Float[Array, ""],
    logits: Float[Array, "b a"],
    target_entropy: Float[Array, ""] | float,
    weights: Float[Array, " b"] | None = None,
) -> Float[Array, ""]:
    """Discrete SAC's temperature loss `-log_alpha * E_s[target_entropy - H(pi(.|s))]`, the
    entropy `H` exact (`pi = softmax(logits)`, a constant here), each state weighted by
    `weights` if given: alpha rises while the entropy is below `target_entropy`."""
    if jnp.ndim(logits) != 2:
        raise ValueError(f"discrete_sac_alpha_loss(logits) must have shape (batch, num_actions), got {tuple(jnp.shape(logits))}")
    log_pi = jax.nn.log_softmax(jax.lax.stop_gradient(logits), axis=-1)
    neg_entropy = jnp.sum(jnp.exp(log_pi) * log_pi, axis=-1)
    return -log_alpha * _weighted_mean("discrete_sac_alpha_loss", neg_entropy + target_entropy, weights)


def polyak(online: PyTree, target: PyTree, tau: Float[Array, ""] | float) -> PyTree:
    """**Returns:** `tau * online + (1 - tau) * target` leafwise (tau = 1 copies)."""
    return jax.tree.map(lambda o, t: tau * o + (1.0 - tau) * t, online, target)
