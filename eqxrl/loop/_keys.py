"""PRNG keys and budget of a run, and the batch (one run, seeds, or stacked members) they imply."""

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array

from ..agents import Batch

__all__ = ["MAX_TOTAL_STEPS", "as_keys", "batch_and_keys", "num_iterations_for"]

MAX_TOTAL_STEPS = 2**31 - 1
"""The largest env-step budget per member: env steps and iterations are counted in int32."""


def as_keys(key: Any, name: str = "key") -> Array:
    """Typed keys of shape `()` or `(n,)`; legacy `uint32[..., 2]` keys are wrapped.

    Raises a `ValueError` naming `name` for anything else.
    """
    if not isinstance(key, jax.Array):
        raise ValueError(f"{name} must be a PRNG key from jax.random.key(seed), got {type(key).__name__} {key!r}")
    if not jnp.issubdtype(key.dtype, jax.dtypes.prng_key):
        if key.dtype == jnp.uint32 and key.ndim >= 1 and key.shape[-1] == 2:
            key = jax.random.wrap_key_data(key)
        else:
            raise ValueError(
                f"{name} must be a PRNG key from jax.random.key(seed) (shape () or (n,)), "
                f"got an array of dtype {key.dtype} and shape {key.shape}"
            )
    if key.ndim > 1:
        raise ValueError(f"{name} must have shape () (one run) or (n,) (n seeds), got shape {key.shape}")
    return key


def batch_and_keys(agent: Any, key: Array) -> tuple[Batch, Array]:
    """The `Batch` a call of `train` runs, and one key per member: a stack takes one key
    per member (or one key, split); one agent is one run (key `()`) or `n` seeds (keys `(n,)`)."""
    batch = Batch.of(agent)
    if batch.stacked:
        if key.ndim == 0:
            key = jax.random.split(key, batch.size)
        elif key.shape[0] != batch.size:
            raise ValueError(
                f"key must have shape () or ({batch.size},) to match the {batch.size} stacked agents, got {key.shape}"
            )
        return batch, key
    return Batch.of(agent, key.shape[0] if key.ndim == 1 else None), key


def num_iterations_for(owner: str, agent: Any, total_steps: Any) -> int:
    """Whole iterations of `agent` (one agent or a stack) in `total_steps` env steps.

    Raises a `ValueError` naming `owner` when `total_steps` is not an int or covers no iteration.
    """
    if isinstance(total_steps, bool) or not isinstance(total_steps, (int, np.integer)):
        raise ValueError(f"{owner}(total_steps) must be an int, got {total_steps!r}")
    if total_steps > MAX_TOTAL_STEPS:
        raise ValueError(
            f"{owner}(total_steps) must be at most {MAX_TOTAL_STEPS:,} (env steps are counted in int32), got {total_steps:,}"
        )
    batch = Batch.of(agent, owner=f"{owner}(agent)")
    per_iteration = batch.agent.steps_per_iteration
    num_iterations = int(total_steps) // per_iteration
    if num_iterations < 1:
        raise ValueError(
            f"{owner}(total_steps={total_steps}) must cover at least one iteration of "
            f"{batch.name} ({per_iteration} env steps)"
        )
    return num_iterations
