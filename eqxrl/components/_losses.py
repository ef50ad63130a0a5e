"""Loss functions shared by the agents."""

import jax.numpy as jnp
from jaxtyping import Array, Float


def _check_alike(owner: str, **arrays: Array) -> None:
    """Per-sample arrays of one shape: `(b,)` beside `(b, 1)` would silently broadcast to `(b, b)`."""
    (first_name, first), *rest = ((name, tuple(jnp.shape(x))) for name, x in arrays.items())
    for name, shape in rest:
        if shape != first:
            raise ValueError(f"{owner}({name}) must have the shape of {first_name}, {first}, got {shape}")


def normalize_advantages(advantages: Float[Array, "*batch"], eps: float = 1e-8) -> Float[Array, "*batch"]:
    """**Returns:** advantages shifted to mean 0 and scaled to std 1 over the whole array."""
    return (advantages - advantages.mean()) / (advantages.std() + eps)


def ppo_policy_loss(
    log_prob: Float[Array, " batch"],
    old_log_prob: Float[Array, " batch"],
    advantages: Float[Array, " batch"],
    clip_eps: Float[Array, ""] | float,
) -> tuple[Float[Array, ""], dict[str, Float[Array, ""]]]:
    """PPO's clipped surrogate objective, as a loss to minimise.

    **Returns:** `(loss, aux)` with `aux["approx_kl"]` (the `(r - 1) - log r`
    estimator of KL(old || new)) and `aux["clip_fraction"]`.
    """
    _check_alike("ppo_policy_loss", log_prob=log_prob, old_log_prob=old_log_prob, advantages=advantages)
    log_ratio = log_prob - old_log_prob
    ratio = jnp.exp(log_ratio)
    unclipped = ratio * advantages
    clipped = jnp.clip(ratio, 1.0 - clip_eps, 1.0 + clip_eps) * advantages
    loss = -jnp.mean(jnp.minimum(unclipped, clipped))
    aux = {
        "approx_kl": jnp.mean((ratio - 1.0) - log_ratio),
        "clip_fraction": jnp.mean((jnp.abs(ratio - 1.0) > clip_eps).astype(jnp.float32)),
    }
    return loss, aux


def value_loss(
    values: Float[Array, " batch"],
    old_values: Float[Array, " batch"],
    targets: Float[Array, " batch"],
    clip_eps: Float[Array, ""] | float | None = None,
) -> Float[Array, ""]:
    """Half mean squared error to `targets`, optionally PPO-clipped around `old_values`.

    With `clip_eps`, the prediction may move at most `clip_eps` from the rollout's
    value before the error stops shrinking (the pessimistic maximum of both errors).
    """
    old = {} if clip_eps is None else {"old_values": old_values}  # only read when clipping
    _check_alike("value_loss", values=values, targets=targets, **old)
    error = jnp.square(values - targets)
    if clip_eps is None:
        return 0.5 * jnp.mean(error)
    clipped = old_values + jnp.clip(values - old_values, -clip_eps, clip_eps)
    return 0.5 * jnp.mean(jnp.maximum(error, jnp.square(clipped - targets)))
