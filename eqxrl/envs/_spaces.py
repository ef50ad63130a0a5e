"""Action and observation spaces: one-array spaces (`Discrete`, `Box`, `MultiDiscrete`,
`MultiBinary`) and the composite `Dict` and `Tuple`, whose elements are dicts and tuples of
their entries' elements (pytrees)."""

import abc
import math
from collections.abc import Mapping, Sequence
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax.tree_util import PyTreeDef
from jaxtyping import Array, ArrayLike, Bool

from ..core import Key, is_positive_int


class AbstractSpace(eqx.Module):
    """A set of valid observations or actions."""

    @property
    @abc.abstractmethod
    def shape(self) -> Any:
        """Shape of one element (a `Dict`'s: a dict of its entries' shapes)."""

    @abc.abstractmethod
    def sample(self, key: Key) -> Any:
        """Draw one element uniformly (for bounded spaces)."""

    @abc.abstractmethod
    def contains(self, x: Any) -> Bool[Array, ""]:
        """Whether `x` is an element of the space."""

    def element_tree(self) -> Any:
        """`self` as a pytree of leaf spaces (spaces of one array) with the structure of its
        elements (`flatten_space`): `self` for a space of one array."""
        return self


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


def _positive_ints(value: Any) -> tuple[int, ...] | None:
    """`value` (a sequence or 1-D array of positive ints) as a non-empty tuple of Python ints; else None."""
    if isinstance(value, jax.core.Tracer) or isinstance(value, (str, bytes)):
        return None
    if isinstance(value, (np.ndarray, jax.Array)):
        value = np.asarray(value)
        if value.ndim != 1:
            return None
        value = value.tolist()
    if not isinstance(value, Sequence) or not value or not all(is_positive_int(v) for v in value):
        return None
    return tuple(int(v) for v in value)


class MultiDiscrete(AbstractSpace):
    """Independent discrete choices: entry `i` is one of `0, ..., nvec[i] - 1`.

    Elements are int32 vectors of shape `(len(nvec),)`. `nvec` is kept as a tuple of
    Python ints in a static field, so the space is hashable and can sit in a static
    field itself.
    """

    nvec: tuple[int, ...] = eqx.field(static=True)

    def __init__(self, nvec: Any):
        """**Arguments:** `nvec`: the number of choices of each entry, a non-empty sequence
        (or 1-D array) of positive ints."""
        checked = _positive_ints(nvec)
        if checked is None:
            raise ValueError(f"MultiDiscrete(nvec) must be a non-empty sequence of positive ints, got nvec={nvec!r}")
        self.nvec = checked

    @property
    def shape(self) -> tuple[int, ...]:
        return (len(self.nvec),)

    @property
    def dtype(self):
        return jnp.int32

    def __repr__(self) -> str:
        return f"MultiDiscrete(nvec={self.nvec})"

    def sample(self, key: Key) -> Array:
        """Each entry uniform on its own range."""
        return jax.random.randint(key, self.shape, 0, jnp.asarray(self.nvec, jnp.int32), dtype=jnp.int32)

    def contains(self, x: ArrayLike) -> Bool[Array, ""]:
        """Whether `x` has shape `(len(nvec),)` and integral entries `0 <= x[i] < nvec[i]`
        (an integral float counts, as for `Discrete`)."""
        x = jnp.asarray(x)
        if x.shape != self.shape:
            return jnp.asarray(False)
        if jnp.issubdtype(x.dtype, jnp.floating):
            nvec = jnp.asarray(self.nvec).astype(x.dtype)  # (one dtype: no implicit promotion)
        else:
            x, nvec = x.astype(jnp.int32), jnp.asarray(self.nvec, jnp.int32)
        return jnp.all((x >= 0) & (x < nvec) & (x == jnp.round(x)))


class MultiBinary(AbstractSpace):
    """Arrays of 0s and 1s: `MultiBinary(4)` has elements of shape `(4,)`,
    `MultiBinary((2, 3))` of shape `(2, 3)`.

    The dtype is int32, not gymnasium's int8: it is the dtype of `Discrete` and
    `MultiDiscrete` elements, so a `Dict` of them (or an agent's one-hot encoding, sum or
    comparison) stays in one integer type (with JAX's strict dtype promotion, as eqxrl's
    tests run, an int8 would need a cast at each of those); the memory int8 saves matters
    only in a replay buffer, which can narrow what it stores itself.
    """

    n: int | tuple[int, ...] = eqx.field(static=True)

    def __init__(self, n: Any):
        """**Arguments:** `n`: the number of bits, a positive int, or the shape of an element,
        a non-empty tuple (or list) of positive ints."""
        if is_positive_int(n):
            self.n = int(n)
        elif (shape := _positive_ints(n)) is not None:  # (a list or 1-D array too)
            self.n = shape
        else:
            raise ValueError(f"MultiBinary(n) must be a positive int or a non-empty tuple of positive ints, got n={n!r}")

    @property
    def shape(self) -> tuple[int, ...]:
        return (self.n,) if isinstance(self.n, int) else self.n

    @property
    def dtype(self):
        return jnp.int32

    def __repr__(self) -> str:
        return f"MultiBinary(n={self.n})"

    def sample(self, key: Key) -> Array:
        """Each entry 0 or 1 with probability 1/2, independently."""
        return jax.random.randint(key, self.shape, 0, 2, dtype=jnp.int32)

    def contains(self, x: ArrayLike) -> Bool[Array, ""]:
        """Whether `x` has the element shape and every entry is 0 or 1."""
        x = jnp.asarray(x)
        if x.shape != self.shape:
            return jnp.asarray(False)
        return jnp.all((x == 0) | (x == 1))


class AbstractCompositeSpace(AbstractSpace):
    """A space made of entry spaces (`Dict`, `Tuple`): an element is a container (a dict, a
    tuple) holding one element of each entry's space. Entries are named by strings, in the
    order `jax.tree.leaves` visits an element's entries (a `Dict`'s sorted keys, a `Tuple`'s
    positions `"0"`, `"1"`, ...): the names `ObservationLayout` and the automatic torsos give
    entries (`"outer.inner"` in a nested space)."""

    @abc.abstractmethod
    def named_spaces(self) -> dict[str, AbstractSpace]:
        """The entries' spaces by name, in element order."""

    @abc.abstractmethod
    def from_entries(self, values: list[Any]) -> Any:
        """An element (a dict, a tuple) holding `values`, one per entry in element order."""

    @abc.abstractmethod
    def entries_of(self, x: Any) -> list[Any] | None:
        """`x`'s entries in element order when `x` is a container of this space's kind with
        exactly its entries; None otherwise."""

    @property
    def shape(self) -> Any:
        return self.from_entries([space.shape for space in self.named_spaces().values()])

    @property
    def dtype(self) -> Any:
        return self.from_entries([space.dtype for space in self.named_spaces().values()])

    def element_tree(self) -> Any:
        return self.from_entries([space.element_tree() for space in self.named_spaces().values()])

    def sample(self, key: Key) -> Any:
        """One sub-key per entry (in element order): samples are deterministic per key and the
        entries independent."""
        spaces = list(self.named_spaces().values())
        keys = jax.random.split(key, len(spaces))
        return self.from_entries([space.sample(k) for space, k in zip(spaces, keys)])

    def contains(self, x: Any) -> Bool[Array, ""]:
        """False (not an error) when `x` is not a container of exactly these entries, or an
        entry is not an array of its space's shape (a traced element is checked by its
        structure, which is static)."""
        values = self.entries_of(x)
        if values is None:
            return jnp.asarray(False)
        inside = []
        for space, value in zip(self.named_spaces().values(), values):
            if not isinstance(space, AbstractCompositeSpace):  # (a nested one checks its own entries)
                if not (eqx.is_array_like(value) and jnp.shape(value) == tuple(space.shape)):
                    return jnp.asarray(False)
                value = jnp.asarray(value)
            inside.append(jnp.asarray(space.contains(value)))
        return jnp.all(jnp.stack(inside))


def _check_entry(owner: str, where: str, space: Any) -> None:
    if not isinstance(space, AbstractSpace):
        raise ValueError(f"{owner}{where} must be an eqxrl space (such as Box or Discrete), got {space!r}")


class Dict(AbstractCompositeSpace):
    """A dict of spaces: elements are dicts with the same keys, each entry an element of
    its space (`Dict` and `Tuple` spaces nest).

    Keys are strings and are kept **sorted** (`Dict({"b": ..., "a": ...}).spaces` iterates
    `"a"` first), because JAX flattens a dict in sorted key order: an element's leaves
    (`jax.tree.leaves(x)`), a jitted function's dict output and `flatten_space(space)`'s
    leaf spaces all come in that order whatever order the dict was written in.

    `shape` and `dtype` are dicts of the entries' shapes and dtypes (a shape is a tuple,
    itself a pytree: use `flatten_space` to walk the leaf spaces). `sample(key)` draws entry
    `i` (in sorted key order) with sub-key `i`; `contains(x)` is False (not an error) when `x`
    is not a dict of exactly these keys or an entry is not an array of its space's shape.
    """

    _names: tuple[str, ...] = eqx.field(static=True)
    _spaces: tuple[AbstractSpace, ...]

    def __init__(self, spaces: Any):
        """**Arguments:** `spaces`: a non-empty mapping from str keys to eqxrl spaces
        (`Box`, `Discrete`, `MultiDiscrete`, `MultiBinary`, `Dict`, `Tuple`, ...)."""
        if not isinstance(spaces, Mapping) or not spaces:
            raise ValueError(f"Dict(spaces) must be a non-empty mapping from str keys to eqxrl spaces, got {spaces!r}")
        for name, space in spaces.items():
            if not isinstance(name, str):
                raise ValueError(f"Dict(spaces) must have str keys, got the key {name!r}")
            _check_entry("Dict(spaces)", f"[{name!r}]", space)
        # Keys (static) and spaces (pytree children) in two tuples, not one dict: a dict field
        # would make the space unhashable, and `jax.jit(space.contains)` hashes it.
        self._names = tuple(sorted(spaces))
        self._spaces = tuple(spaces[name] for name in self._names)

    @property
    def spaces(self) -> dict[str, AbstractSpace]:
        """The entries' spaces, by key (in sorted key order)."""
        return dict(zip(self._names, self._spaces))

    def named_spaces(self) -> dict[str, AbstractSpace]:
        return self.spaces

    def from_entries(self, values: list[Any]) -> dict[str, Any]:
        return dict(zip(self._names, values))

    def entries_of(self, x: Any) -> list[Any] | None:
        if not isinstance(x, Mapping) or set(x) != set(self._names):
            return None
        return [x[name] for name in self._names]

    def __repr__(self) -> str:
        return f"Dict({{{', '.join(f'{name!r}: {space!r}' for name, space in self.spaces.items())}}})"


class Tuple(AbstractCompositeSpace):
    """A tuple of spaces: elements are tuples of the same length, entry `i` an element of
    `spaces[i]` (`Tuple` and `Dict` spaces nest). Its entries are named `"0"`, `"1"`, ... where
    a name is needed (`ObservationLayout`, `MultiInputTorso`'s keys, `flatten_space`'s order is
    the positions'). `shape` and `dtype` are tuples of the entries' shapes and dtypes (use
    `flatten_space` to walk the leaf spaces). `contains(x)` is False (not an error) when `x`
    is not a tuple (or list) of the right length."""

    spaces: tuple[AbstractSpace, ...]

    def __init__(self, spaces: Any):
        """**Arguments:** `spaces`: a non-empty sequence (tuple or list) of eqxrl spaces."""
        if not isinstance(spaces, (tuple, list)) or not spaces:
            raise ValueError(f"Tuple(spaces) must be a non-empty tuple or list of eqxrl spaces, got {spaces!r}")
        for i, space in enumerate(spaces):
            _check_entry("Tuple(spaces)", f"[{i}]", space)
        self.spaces = tuple(spaces)

    def named_spaces(self) -> dict[str, AbstractSpace]:
        return {str(i): space for i, space in enumerate(self.spaces)}

    def from_entries(self, values: list[Any]) -> tuple[Any, ...]:
        return tuple(values)

    def entries_of(self, x: Any) -> list[Any] | None:
        if not isinstance(x, (tuple, list)) or len(x) != len(self.spaces):
            return None
        return list(x)

    def __repr__(self) -> str:
        return f"Tuple(({', '.join(map(repr, self.spaces))}{',' if len(self.spaces) == 1 else ''}))"


def as_element(space: AbstractSpace, x: Any) -> Any:
    """`x` (an observation from a foreign suite) in the container types of `space`'s elements:
    a list where a `Tuple` is becomes a tuple, a mapping where a `Dict` is a dict, recursively;
    the leaves as they are."""
    if isinstance(space, AbstractCompositeSpace):
        entries = space.entries_of(x)
        if entries is None:
            raise ValueError(f"as_element: an observation of {space!r} must have its entries, got {type(x).__name__} {x!r}")
        return space.from_entries([as_element(sub, v) for sub, v in zip(space.named_spaces().values(), entries)])
    return x


def flatten_space(space: AbstractSpace) -> tuple[list[AbstractSpace], PyTreeDef]:
    """**Returns:** `(leaves, treedef)`: the leaf spaces of `space` (`space.element_tree()`'s
    leaves: every space but a `Dict` or `Tuple`, or a `MultiAgentSpace` of one, is one leaf) in the order `jax.tree.leaves` gives the leaves of an element, and the
    tree structure of an element, so that `treedef.unflatten([f(leaf) for leaf in leaves])`
    builds a tree shaped like an element (`[space]` and a bare leaf for a flat space).
    """
    if not isinstance(space, AbstractSpace):
        raise ValueError(f"flatten_space(space) must be an eqxrl space, got {space!r}")
    return jax.tree.flatten(space.element_tree(), is_leaf=lambda s: isinstance(s, AbstractSpace))


def sample_batch(space: AbstractSpace, key: Key, batch_shape: tuple[int, ...] = ()) -> Any:
    """**Returns:** independent samples of `space` with leading axes `batch_shape`: every leaf
    of shape `(*batch_shape, *leaf_space.shape)`; `space.sample(key)` for `batch_shape=()`."""
    if not isinstance(space, AbstractSpace):
        raise ValueError(f"sample_batch(space) must be an eqxrl space, got {space!r}")
    is_size = lambda d: isinstance(d, (int, np.integer)) and not isinstance(d, bool) and d >= 0  # noqa: E731
    if not (isinstance(batch_shape, tuple) and all(is_size(d) for d in batch_shape)):
        raise ValueError(f"sample_batch(batch_shape) must be a tuple of non-negative ints, got {batch_shape!r}")
    if batch_shape == ():
        return space.sample(key)
    batch_shape = tuple(int(d) for d in batch_shape)
    samples = jax.vmap(space.sample)(jax.random.split(key, math.prod(batch_shape)))
    return jax.tree.map(lambda x: x.reshape(batch_shape + x.shape[1:]), samples)
