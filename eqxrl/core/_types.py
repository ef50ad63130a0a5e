"""Type aliases and the hyperparameter field shared across eqxrl."""

from typing import Any, TypeAlias

import equinox as eqx
import jax.numpy as jnp
from jaxtyping import Array, Bool, Float, Int, PRNGKeyArray, PyTree

Key: TypeAlias = PRNGKeyArray
"""A single PRNG key: `jax.random.key(seed)` (or a legacy `uint32[2]` key)."""

Obs: TypeAlias = Float[Array, "*batch obs"]
Action: TypeAlias = Array
Scalar: TypeAlias = Float[Array, ""]
Metrics: TypeAlias = dict[str, Array]
EnvState: TypeAlias = PyTree

__all__ = [
    "Action",
    "Any",
    "Array",
    "Bool",
    "EnvState",
    "Float",
    "Int",
    "Key",
    "Metrics",
    "Obs",
    "PyTree",
    "Scalar",
    "float_leaf",
    "as_float",
]


def as_float(x: Any) -> Array:
    """Convert a hyperparameter to a strongly typed float32 array leaf."""
    return jnp.asarray(x, dtype=jnp.float32)


def float_leaf(**kwargs: Any) -> Any:
    """A dataclass field for a numeric hyperparameter: always a float32 array leaf.

    Array leaves are traced (a new value does not recompile) and are batched by
    `filter_vmap` (each member of a sweep or PBT population has its own value).
    """
    return eqx.field(converter=as_float, **kwargs)
