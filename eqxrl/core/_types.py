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
    "is_float_converter",
    "named_field",
    "is_hyperparameter_field",
]


def as_float(x: Any) -> Array:
    """Convert a hyperparameter to a strongly typed float32 array leaf."""
    return jnp.asarray(x, dtype=jnp.float32)


class NamedConverter:
    """A field's converter that refuses a value it cannot convert in one line naming the field
    (`gamma must be a number (or an array of numbers), got 'x'`), where the conversion alone
    would say only "could not convert string to float". `field` is set once the field exists
    (`named_field`); its name once its class does."""

    def __init__(self, convert: Any, expected: str) -> None:
        self.convert, self.expected = convert, expected
        self.field: dataclasses.Field | None = None

    def __call__(self, x: Any) -> Any:
        try:
            return self.convert(x)
        except (TypeError, ValueError):
            name = getattr(self.field, "name", None) or "the field"
            raise ValueError(f"{name} must be {self.expected}, got {x!r}") from None


def named_field(convert: Any, expected: str, **kwargs: Any) -> Any:
    """`eqx.field(converter=convert, **kwargs)` whose bad values are refused naming the field (`NamedConverter`)."""
    converter = NamedConverter(convert, expected)
    converter.field = eqx.field(converter=converter, **kwargs)
    return converter.field


def is_float_converter(converter: Any) -> bool:
    """Whether `converter` makes a float32 leaf: `as_float`, or a `hyperparameter` field's."""
    return converter is as_float or (isinstance(converter, NamedConverter) and converter.convert is as_float)


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
    return named_field(as_float, "a number (or an array of numbers)", **kwargs)


def is_hyperparameter_field(field: dataclasses.Field) -> bool:
    """Whether a dataclass field holds a hyperparameter: declared with `hyperparameter`
    (or another field marked `metadata={"hyperparameter": True}`, like learning rates
    that also take a schedule)."""
    return bool(field.metadata.get("hyperparameter")) or is_float_converter(field.metadata.get("converter"))
