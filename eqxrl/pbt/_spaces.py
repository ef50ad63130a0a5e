"""Search spaces: how PBT samples a hyperparameter and how it perturbs one.

Each domain is a small Equinox module with static bounds and two pure,
vectorised methods used inside the compiled PBT program:

- `sample(key, shape)`: fresh values, float32 (every hyperparameter leaf of an
  eqxrl agent is float32; integer domains give whole numbers);
- `perturb(key, value)`: each value multiplied by one of `factors` drawn
  uniformly (0.8 or 1.2 by default), then clamped to the bounds (a `Choice`
  moves to a neighbouring value instead).
"""

import abc
import math
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float

from ..core import Key

DEFAULT_FACTORS = (0.8, 1.2)


def _check_factors(owner: str, factors: Any) -> tuple[float, ...]:
    factors = tuple(float(f) for f in factors)
    if not factors or any(not math.isfinite(f) or f <= 0 for f in factors):
        raise ValueError(f"{owner}(factors) must be a non-empty sequence of finite numbers > 0, got {factors}")
    return factors


def _check_bounds(owner: str, low: Any, high: Any, positive: bool = False) -> tuple[float, float]:
    for name, v in (("low", low), ("high", high)):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise ValueError(f"{owner}({name}) must be a finite number, got {v!r}")
    if positive and low <= 0:
        raise ValueError(f"{owner}(low) must be > 0 (a log scale), got {low!r}")
    if not low < high:
        raise ValueError(f"{owner} needs low < high, got low={low!r}, high={high!r}")
    return float(low), float(high)


class AbstractDomain(eqx.Module):
    """A hyperparameter's search domain (abstract)."""

    @abc.abstractmethod
    def sample(self, key: Key, shape: tuple[int, ...] = ()) -> Float[Array, "..."]:
        """**Returns:** fresh float32 values of `shape`, drawn from the domain."""

    @abc.abstractmethod
    def perturb(self, key: Key, value: Float[Array, "*shape"]) -> Float[Array, "*shape"]:
        """**Returns:** each value perturbed (a random factor, clamped to the bounds)."""

    @abc.abstractmethod
    def contains(self, value: Float[Array, "*shape"]) -> Array:
        """**Returns:** a bool array: whether each value lies in the domain."""

    def _scaled(self, key: Key, value: Array, factors: tuple[float, ...], low: Any, high: Any) -> Array:
        choice = jax.random.randint(key, jnp.shape(value), 0, len(factors))
        factor = jnp.asarray(factors, jnp.float32)[choice]
        return jnp.clip(jnp.asarray(value, jnp.float32) * factor, low, high)


class Uniform(AbstractDomain):
    """Uniform on `[low, high]`; perturbed multiplicatively, clamped to the bounds."""

    low: float | int = eqx.field(static=True)
    high: float | int = eqx.field(static=True)
    factors: Any = eqx.field(static=True, default=DEFAULT_FACTORS)

    def __post_init__(self):
        self.low, self.high = _check_bounds("Uniform", self.low, self.high)
        self.factors = _check_factors("Uniform", self.factors)

    def sample(self, key: Key, shape: tuple[int, ...] = ()) -> Float[Array, "..."]:
        return jax.random.uniform(key, shape, jnp.float32, self.low, self.high)

    def perturb(self, key: Key, value: Float[Array, "*shape"]) -> Float[Array, "*shape"]:
        return self._scaled(key, value, self.factors, self.low, self.high)

    def contains(self, value: Float[Array, "*shape"]) -> Array:
        return (value >= jnp.float32(self.low)) & (value <= jnp.float32(self.high))


class LogUniform(AbstractDomain):
    """Log-uniform on `[low, high]` (`low > 0`): learning rates, noise scales."""

    low: float | int = eqx.field(static=True)
    high: float | int = eqx.field(static=True)
    factors: Any = eqx.field(static=True, default=DEFAULT_FACTORS)

    def __post_init__(self):
        self.low, self.high = _check_bounds("LogUniform", self.low, self.high, positive=True)
        self.factors = _check_factors("LogUniform", self.factors)

    def sample(self, key: Key, shape: tuple[int, ...] = ()) -> Float[Array, "..."]:
        u = jax.random.uniform(key, shape, jnp.float32, math.log(self.low), math.log(self.high))
        return jnp.clip(jnp.exp(u), self.low, self.high)

    def perturb(self, key: Key, value: Float[Array, "*shape"]) -> Float[Array, "*shape"]:
        return self._scaled(key, value, self.factors, self.low, self.high)

    def contains(self, value: Float[Array, "*shape"]) -> Array:
        return (value >= jnp.float32(self.low)) & (value <= jnp.float32(self.high))


class IntUniform(AbstractDomain):
    """Whole numbers uniform in `[low, high]` (inclusive); perturbed by a factor, rounded, clamped."""

    low: Any = eqx.field(static=True)
    high: Any = eqx.field(static=True)
    factors: Any = eqx.field(static=True, default=DEFAULT_FACTORS)

    def __post_init__(self):
        for name in ("low", "high"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int):
                raise ValueError(f"IntUniform({name}) must be an int, got {v!r}")
        _check_bounds("IntUniform", self.low, self.high)
        self.factors = _check_factors("IntUniform", self.factors)

    def sample(self, key: Key, shape: tuple[int, ...] = ()) -> Float[Array, "..."]:
        return jax.random.randint(key, shape, self.low, self.high + 1).astype(jnp.float32)

    def perturb(self, key: Key, value: Float[Array, "*shape"]) -> Float[Array, "*shape"]:
        scaled = self._scaled(key, value, self.factors, self.low, self.high)
        # A factor that rounds back to the same integer moves one step instead.
        up = scaled >= value
        moved = jnp.where(jnp.round(scaled) == value, value + jnp.where(up, 1.0, -1.0), jnp.round(scaled))
        return jnp.clip(moved, self.low, self.high)

    def contains(self, value: Float[Array, "*shape"]) -> Array:
        return (value >= self.low) & (value <= self.high) & (jnp.round(value) == value)


class IntLogUniform(IntUniform):
    """Whole numbers in `[low, high]` (`low >= 1`), log-uniformly distributed."""

    def __post_init__(self):
        super().__post_init__()
        if self.low < 1:
            raise ValueError(f"IntLogUniform(low) must be >= 1 (a log scale), got {self.low!r}")

    def sample(self, key: Key, shape: tuple[int, ...] = ()) -> Float[Array, "..."]:
        u = jax.random.uniform(key, shape, jnp.float32, math.log(self.low), math.log(self.high + 1))
        return jnp.clip(jnp.floor(jnp.exp(u)), self.low, self.high)


class Choice(AbstractDomain):
    """One of a finite list of numbers; perturbed to a neighbouring value in the list."""

    values: Any = eqx.field(static=True)

    def __post_init__(self):
        values = tuple(self.values) if isinstance(self.values, (list, tuple)) else None
        if not values or any(isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) for v in values):
            raise ValueError(f"Choice(values) must be a non-empty sequence of finite numbers, got {self.values!r}")
        self.values = tuple(float(v) for v in values)

    def _index(self, value: Array) -> Array:
        table = jnp.asarray(self.values, jnp.float32)
        return jnp.argmin(jnp.abs(jnp.asarray(value, jnp.float32)[..., None] - table), axis=-1)

    def sample(self, key: Key, shape: tuple[int, ...] = ()) -> Float[Array, "..."]:
        return jnp.asarray(self.values, jnp.float32)[jax.random.randint(key, shape, 0, len(self.values))]

    def perturb(self, key: Key, value: Float[Array, "*shape"]) -> Float[Array, "*shape"]:
        step = jnp.where(jax.random.bernoulli(key, 0.5, jnp.shape(value)), 1, -1)
        index = jnp.clip(self._index(value) + step, 0, len(self.values) - 1)
        return jnp.asarray(self.values, jnp.float32)[index]

    def contains(self, value: Float[Array, "*shape"]) -> Array:
        table = jnp.asarray(self.values, jnp.float32)
        return jnp.any(jnp.asarray(value, jnp.float32)[..., None] == table, axis=-1)
