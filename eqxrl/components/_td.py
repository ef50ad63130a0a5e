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


def sac_actor_loss(
    qs: Float[Array, "n b"], log_prob: Float[Array, " b"], alpha: Float[Array, ""] | float
) -> Float[Array, ""]:
    """SAC's policy loss `E[alpha * log pi(a|s) - min_i Q_i(s, a)]`, `a ~ pi(.|s)` reparameterised."""
    _check_ndim("sac_actor_loss", "qs", qs, "num_critics, batch")
    _check_batch("sac_actor_loss", "one per column of qs, (num_critics, batch)", qs.shape[1], log_prob=log_prob)
    return jnp.mean(alpha * log_prob - jnp.min(qs, axis=0))


def sac_alpha_loss(
    log_alpha: Float[Array, ""], log_prob: Float[Array, " b"], target_entropy: Float[Array, ""] | float
) -> Float[Array, ""]:
    """Temperature loss `-log_alpha * E[log pi + target_entropy]`.

    Its gradient raises alpha when the policy's entropy `-E[log pi]` is below
    the target and lowers it when above (`log_prob` is treated as a constant).
    """
    return -log_alpha * jnp.mean(jax.lax.stop_gradient(log_prob) + target_entropy)


def polyak(online: PyTree, target: PyTree, tau: Float[Array, ""] | float) -> PyTree:
    """**Returns:** `tau * online + (1 - tau) * target` leafwise (tau = 1 copies)."""
    return jax.tree.map(lambda o, t: tau * o + (1.0 - tau) * t, online, target)
