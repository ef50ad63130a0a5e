"""PRNG keys and budget of a run, and the batch (one run, seeds, or stacked members) they imply."""

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array

from ..agents import Batch
from ..core import check_positive_int

__all__ = ["EVAL_STREAM", "MAX_EVAL_EPISODES", "MAX_TOTAL_STEPS", "as_keys", "check_eval_episodes", "batch_and_keys", "eval_iterations_for", "eval_key_at", "num_iterations_for"]

MAX_TOTAL_STEPS = 2**31 - 1
"""The largest env-step budget per member: env steps and iterations are counted in int32."""

MAX_EVAL_EPISODES = 100_000
"""The most evaluation episodes per member (they run in parallel, one env each)."""


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
    per member (or one key, split); one agent is one run (key `()`) or `n` seeds (keys `(n,)`).

    Raises a `ValueError` naming `key` when its shape does not match a stack, or when it
    holds no key at all (shape `(0,)`)."""
    batch = Batch.of(agent)
    if batch.stacked:
        if key.ndim == 0:
            key = jax.random.split(key, batch.size)
        elif key.shape[0] != batch.size:
            raise ValueError(
                f"key must have shape () or ({batch.size},) to match the {batch.size} stacked agents, got {key.shape}"
            )
        return batch, key
    if key.ndim == 1 and key.shape[0] == 0:
        # Named here: a batch of no seeds would otherwise fail deep inside, as an index
        # out of range for member 0 of 0.
        raise ValueError(
            "key must hold at least one key: shape () for one run or (n,) with n >= 1 for n seeds "
            f"(jax.random.split(key, n)), got shape {key.shape}"
        )
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


EVAL_STREAM = 0x65766131
"""The constant `eval_key_at` folds into a run's key first (ASCII "eva1"): evaluation
keys are a stream of their own, never drawn from (or split off) the training state."""


def eval_key_at(key: Any, iteration: Any) -> Array:
    """The key of the periodic evaluation after `iteration` iterations (`train(eval_every=...)`).

    `fold_in(fold_in(key, EVAL_STREAM), iteration)`, per member for keys of shape `(n,)`.
    `key` is the run's key as `train` uses it: `jax.random.key(seed)` for one run,
    the `(n,)` seed keys for a batch, or a stack's member keys (a single key given to
    `train` with a stack is first split, `jax.random.split(key, size)`).
    Training never draws from these keys, so evaluating changes no training number, and

    ```python
    eqxrl.evaluate(agent, checkpoint.state, eval_key_at(key, checkpoint.iteration),
                   num_episodes=eval_episodes).mean()
    ```

    reproduces `metrics["eval_return"][checkpoint.iteration - 1]` of one run (for a
    batch, evaluate member `i`'s state with `eval_key_at(key, iteration)[i]`).

    **Returns:** keys of `key`'s shape. Traceable (`iteration` may be a traced int).
    """
    key = as_keys(key, "eval_key_at(key)")
    one = lambda k: jax.random.fold_in(jax.random.fold_in(k, EVAL_STREAM), iteration)  # noqa: E731
    return one(key) if key.ndim == 0 else jax.vmap(one)(key)


def check_eval_episodes(owner: str, name: str, value: Any) -> int:
    """`value` as evaluation episodes per member: a positive int of at most
    `MAX_EVAL_EPISODES`; a `ValueError` naming `owner(name)` otherwise."""
    check_positive_int(owner, name, value)
    if value > MAX_EVAL_EPISODES:
        raise ValueError(f"{owner}({name}) must be at most {MAX_EVAL_EPISODES:,} (the episodes run in parallel), got {value:,}")
    return int(value)


def eval_iterations_for(owner: str, agent: Any, total_steps: int, eval_every: Any, eval_episodes: Any) -> int:
    """`eval_every` env steps (per member) as whole iterations, 0 for `None` (no evaluation).

    Raises a `ValueError` naming `owner` when `eval_every` is not an int between one
    iteration's env steps and `total_steps`, or `eval_episodes` is not a positive int of
    at most `MAX_EVAL_EPISODES`.
    """
    if eval_every is None:
        return 0
    per_iteration = Batch.of(agent, owner=f"{owner}(agent)").agent.steps_per_iteration
    if isinstance(eval_every, bool) or not isinstance(eval_every, (int, np.integer)) or eval_every < per_iteration:
        raise ValueError(
            f"{owner}(eval_every) must be None or an int of at least one iteration ({per_iteration} env steps "
            f"per member), got {eval_every!r}"
        )
    if eval_every > total_steps:
        raise ValueError(
            f"{owner}(eval_every={eval_every}) must be at most total_steps={total_steps} (no evaluation would run)"
        )
    check_eval_episodes(owner, "eval_episodes", eval_episodes)
    return int(eval_every) // per_iteration
