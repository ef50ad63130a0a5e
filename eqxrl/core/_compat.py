"""Glue for third-party code."""

import contextlib
from collections.abc import Iterator

import jax


@contextlib.contextmanager
def foreign_promotion() -> Iterator[None]:
    """Run third-party code under JAX's standard dtype promotion.

    gymnax, brax and optax mix Python floats, ints and bools freely; eqxrl's own code is
    tested under strict promotion, which must not leak into theirs.
    """
    with jax.numpy_dtype_promotion("standard"):
        yield
