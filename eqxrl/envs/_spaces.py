"""Action and observation spaces."""

import abc

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Bool

from ..core import Key, is_positive_int


class AbstractSpace(eqx.Module):
    """A set of valid observations or actions."""

    @property
    @abc.abstractmethod
    def shape(self) -> tuple[int, ...]:
        """Shape of one element."""

    @abc.abstractmethod
    def sample(self, key: Key) -> Array:
        """Draw one element uniformly (for bounded spaces)."""

    @abc.abstractmethod
    def contains(self, x: Array) -> Bool[Array, ""]:
        """Whether `x` is an element of the space."""


class Discrete(AbstractSpace):
    """The integers `0, ..., n - 1`."""

    n: int = eqx.field(static=True)

    def __check_init__(self):
        if not is_positive_int(self.n):
            raise ValueError(f"Discrete(n) must be a positive int, got n={self.n!r}")

    @property
    def shape(self) -> tuple[int, ...]:
        return ()

    @property
    def dtype(self):
        return jnp.int32

    def sample(self, key: Key) -> Array:
        return jax.random.randint(key, (), 0, self.n, dtype=jnp.int32)

    def contains(self, x: Array) -> Bool[Array, ""]:
        x = jnp.asarray(x)
        return jnp.all((x >= 0) & (x < self.n) & (x == jnp.round(x)))


def _bound(value, shape):
    # Concrete bounds stay NumPy so that Python code (validation, rescaling
    # decisions) can read them; traced bounds (a user vmapping env params) stay traced.
    if isinstance(value, jax.core.Tracer):
        return jnp.broadcast_to(jnp.asarray(value, jnp.float32), shape)
    return np.broadcast_to(np.asarray(value, dtype=np.float32), shape).copy()


class Box(AbstractSpace):
    """A box `low <= x <= high` of real vectors (bounds may be infinite)."""

    low: Array
    high: Array
    _shape: tuple[int, ...] = eqx.field(static=True)

    def __init__(self, low, high, shape: tuple[int, ...] | None = None):
        """**Arguments:**

        - `low`, `high`: bounds, scalars or arrays broadcastable to `shape`.
        - `shape`: the element shape; inferred from the bounds when omitted.
        """
        if shape is None:
            shape = tuple(np.broadcast_shapes(np.shape(low), np.shape(high)))
        self._shape = tuple(int(s) for s in shape)
        self.low = _bound(low, self._shape)
        self.high = _bound(high, self._shape)
        if isinstance(self.low, np.ndarray) and isinstance(self.high, np.ndarray):
            if np.any(self.low > self.high):
                raise ValueError(
                    f"Box(low, high) needs low <= high everywhere, got low={self.low}, high={self.high}"
                )

    @property
    def shape(self) -> tuple[int, ...]:
        return self._shape

    @property
    def dtype(self):
        return jnp.float32

    def __repr__(self) -> str:
        def fmt(b):
            if isinstance(b, np.ndarray) and b.size and np.all(b == b.flat[0]):
                return f"{float(b.flat[0]):g}"  # a uniform bound reads as one number
            return np.array2string(np.asarray(b), precision=3) if isinstance(b, np.ndarray) else "traced"
        return f"Box(low={fmt(self.low)}, high={fmt(self.high)}, shape={self._shape})"

    @property
    def bounded(self) -> bool:
        """True when every bound is finite (needs concrete bounds)."""
        return bool(np.all(np.isfinite(self.low)) and np.all(np.isfinite(self.high)))

    def sample(self, key: Key) -> Array:
        """Uniform on a bounded box; an infinite side is replaced by a finite one
        2 beyond the other bound (`[-1, 1]` when both are infinite), so that every
        sample lies inside the box."""
        low, high = jnp.asarray(self.low), jnp.asarray(self.high)
        low_ok, high_ok = jnp.isfinite(low), jnp.isfinite(high)
        low = jnp.where(low_ok, low, jnp.where(high_ok, high - 2.0, -1.0))
        high = jnp.where(high_ok, high, low + 2.0)
        return jax.random.uniform(key, self._shape, minval=low, maxval=high)

    def contains(self, x: Array) -> Bool[Array, ""]:
        x = jnp.asarray(x)
        return jnp.all((x >= self.low) & (x <= self.high))
