"""Type aliases and the hyperparameter field shared across eqxrl."""

import dataclasses
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
    "hyperparameter",
    "as_float",
    "is_hyperparameter_field",
]


def as_float(x: Any) -> Array:
    """Convert a hyperparameter to a strongly typed float32 array leaf."""
    return jnp.asarray(x, dtype=jnp.float32)


def hyperparameter(default: Any = dataclasses.MISSING, **kwargs: Any) -> Any:
    """Declare a tunable numeric field of an agent (or any Equinox module):

    ```python
    class Reinforce(eqxrl.agents.AbstractAgent):
        learning_rate: jax.Array = eqxrl.hyperparameter(1e-3)
    ```

    The value is stored as a float32 array leaf: it is traced (a new value does
    not recompile), batched by `filter_vmap` (each member of a sweep or PBT
    population has its own value), listed by `agent.hyperparameters()`, tunable
    by PBT and `--tune`, and a command-line flag. A plain `float` field is static
    instead: every member of a stack would have to share it.

    **Arguments:** `default` (omit it for a required field) and any other
    `eqx.field` keyword (e.g. `static` is not allowed: a hyperparameter is a leaf).
    """
    if kwargs.get("static"):
        raise ValueError("hyperparameter(static=True): a hyperparameter is an array leaf, never static")
    if default is not dataclasses.MISSING:
        kwargs["default"] = default
    kwargs["metadata"] = {**kwargs.get("metadata", {}), "hyperparameter": True}
    return eqx.field(converter=as_float, **kwargs)


def is_hyperparameter_field(field: dataclasses.Field) -> bool:
    """Whether a dataclass field holds a hyperparameter: declared with `hyperparameter`
    (or another field marked `metadata={"hyperparameter": True}`, like learning rates
    that also take a schedule)."""
    return bool(field.metadata.get("hyperparameter")) or field.metadata.get("converter") is as_float
