"""Advantage and return estimators over time-major rollouts.

Every function takes arrays of shape `(T, *batch)` and distinguishes the two
ways an episode ends:

- `terminated[t]`: the transition reached a terminal state; nothing is
  bootstrapped past it.
- `truncated[t]`: the episode was cut off (time limit); accumulation stops but
  the target still bootstraps from `next_values[t]`, the value of the true
  next observation (`info["final_obs"]` under auto-reset).

`next_values[t]` is always the value of the observation that followed step
`t` in the same episode, so the estimators need no special cases at rollout
boundaries.
"""

import jax
import jax.numpy as jnp
from jaxtyping import Array, Bool, Float

from ..core import check_positive_int


def _check_rollout(owner: str, terminated: Array, truncated: Array, **floats: Array) -> None:
    """Shapes `(T, *batch)` alike (the rewards' among `floats`), floating values and bool
    episode-end flags (trace-time checks)."""
    flags = {"terminated": terminated, "truncated": truncated}
    shapes = {name: tuple(jnp.shape(a)) for name, a in {**floats, **flags}.items()}
    first = shapes["rewards"]
    if len(first) < 1:
        raise ValueError(f"{owner}(rewards) needs a leading time axis, shape (T, *batch), got {first}")
    for name, shape in shapes.items():
        if shape != first:
            raise ValueError(f"{owner}({name}) must have the (T, *batch) shape of the rewards {first}, got {shape}")
    for name, x in floats.items():
        if not jnp.issubdtype(jnp.result_type(x), jnp.floating):
            raise ValueError(f"{owner}({name}) must have a floating dtype, got {jnp.result_type(x)}")
    for name, x in flags.items():
        if jnp.result_type(x) != jnp.bool_:
            raise ValueError(
                f"{owner}({name}) must have dtype bool (an episode-end flag), got {jnp.result_type(x)}; "
                "cast it with .astype(bool)"
            )


def gae(
    rewards: Float[Array, "T *batch"],
    values: Float[Array, "T *batch"],
    next_values: Float[Array, "T *batch"],
    terminated: Bool[Array, "T *batch"],
    truncated: Bool[Array, "T *batch"],
    gamma: Float[Array, ""] | float,
    gae_lambda: Float[Array, ""] | float,
) -> Float[Array, "T *batch"]:
    """Generalised advantage estimation (Schulman et al. 2016).

    `delta[t] = r[t] + gamma * (1 - terminated[t]) * next_values[t] - values[t]` and
    `A[t] = delta[t] + gamma * lambda * (1 - done[t]) * A[t + 1]`.

    **Returns:** the advantages, shape `(T, *batch)`.
    """
    _check_rollout("gae", terminated, truncated, rewards=rewards, values=values, next_values=next_values)
    not_term = 1.0 - terminated.astype(rewards.dtype)
    not_done = 1.0 - (terminated | truncated).astype(rewards.dtype)
    deltas = rewards + gamma * not_term * next_values - values
    decay = gamma * gae_lambda * not_done

    def step(carry, x):
        delta, d = x
        adv = delta + d * carry
        return adv, adv

    _, adv = jax.lax.scan(step, jnp.zeros_like(rewards[0]), (deltas, decay), reverse=True)
    return adv


def lambda_returns(
    rewards: Float[Array, "T *batch"],
    next_values: Float[Array, "T *batch"],
    terminated: Bool[Array, "T *batch"],
    truncated: Bool[Array, "T *batch"],
    gamma: Float[Array, ""] | float,
    gae_lambda: Float[Array, ""] | float,
) -> Float[Array, "T *batch"]:
    """TD(lambda) returns.

    `G[t] = r[t] + gamma * (1 - terminated[t]) * ((1 - l[t]) * next_values[t] + l[t] * G[t + 1])`
    with `l[t] = lambda`, except `l[t] = 0` when the episode ends at `t` and at
    the last step of the rollout. Equals `gae(...) + values` for the same inputs.

    **Returns:** the returns, shape `(T, *batch)`.
    """
    _check_rollout("lambda_returns", terminated, truncated, rewards=rewards, next_values=next_values)
    not_term = 1.0 - terminated.astype(rewards.dtype)
    mix = gae_lambda * (1.0 - (terminated | truncated).astype(rewards.dtype))
    mix = mix.at[-1].set(0.0)

    def step(carry, x):
        r, nt, nv, m = x
        g = r + gamma * nt * ((1.0 - m) * nv + m * carry)
        return g, g

    _, out = jax.lax.scan(step, jnp.zeros_like(rewards[0]), (rewards, not_term, next_values, mix), reverse=True)
    return out


def n_step_returns(
    rewards: Float[Array, "T *batch"],
    next_values: Float[Array, "T *batch"],
    terminated: Bool[Array, "T *batch"],
    truncated: Bool[Array, "T *batch"],
    gamma: Float[Array, ""] | float,
    n: int,
) -> Float[Array, "T *batch"]:
    """n-step bootstrapped returns.

    `G[t] = sum_{k<m} gamma^k r[t+k] + gamma^m (1 - terminated[t+m-1]) next_values[t+m-1]`
    where `m <= n` is cut short by the end of the episode (termination or
    truncation) or of the rollout. A terminated window bootstraps nothing; a
    truncated one bootstraps from the value of the final observation.

    **Returns:** the returns, shape `(T, *batch)`.
    """
    _check_rollout("n_step_returns", terminated, truncated, rewards=rewards, next_values=next_values)
    n = check_positive_int("n_step_returns", "n", n)
    T = rewards.shape[0]
    done = terminated | truncated
    idx = jnp.arange(T)
    g = jnp.zeros_like(rewards)
    alive = jnp.ones(rewards.shape, bool)  # window still accumulating
    discount = jnp.ones_like(rewards)
    for k in range(n):
        j = jnp.minimum(idx + k, T - 1)
        inside = (idx + k) < T
        inside = inside.reshape((T,) + (1,) * (rewards.ndim - 1))
        take = alive & inside
        g = g + jnp.where(take, discount * rewards[j], 0.0)
        closes = take & (done[j] | (k == n - 1) | ((idx + k) == T - 1).reshape(inside.shape))
        boot = (1.0 - terminated[j].astype(rewards.dtype)) * next_values[j]
        g = g + jnp.where(closes, discount * gamma * boot, 0.0)
        alive = take & ~closes
        discount = discount * gamma
    return g
