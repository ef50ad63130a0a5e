"""Replay buffers for off-policy agents: the shared interface and the uniform buffer.

A buffer is configuration (an immutable module: the capacity, PER's `alpha`
and `eps`); everything that changes lives in a separate `BufferState`, so a
buffer state is an ordinary pytree that sits in an agent's state, is carried by
`lax.scan`, batched by `vmap` (seeds, sweeps, PBT members) and copied whole by
PBT's exploit step.

Storage is preallocated: `init(example)` makes one zero array of shape
`(capacity, *leaf.shape)` per leaf of one example transition, and `add` writes
a batch into it in place (a scatter at `(position + arange(B)) % capacity`,
which XLA performs in the donated or loop-carried buffer, without a copy).
Proportional prioritised replay (PER) is in `_prioritized.py`.
"""

import abc

from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Bool, Float, Int, PyTree

from ..core import Key, check_positive_int


class Transition(eqx.Module):
    """One (possibly n-step) transition, as the off-policy agents store it.

    The TD target is `reward + discount * Q(next_obs, ...)`: for an `m`-step
    transition `reward = sum_{k<m} gamma^k r_k` and
    `discount = gamma^m * (1 - terminated)`, so a terminal transition
    bootstraps nothing and a truncated one bootstraps from the true next
    observation.
    """

    obs: Array
    action: Array
    reward: Float[Array, "*b"]
    discount: Float[Array, "*b"]
    next_obs: Array


class BufferState(eqx.Module):
    """The contents of a replay buffer: preallocated storage and write position.

    - `data`: the stored pytree; every leaf has leading axis `capacity`.
    - `position`: the next slot to write.
    - `size`: the number of slots written so far (at most `capacity`).
    - `tree`: the PER sum tree, one flat float32 array holding its levels
      leaves first (slot `j` is element `j`) and the root (the total mass)
      last; each level but the root is padded to whole rows of `fanout`
      siblings (see `PrioritizedReplayBuffer`); `None` for the uniform buffer.
    - `max_priority`: the largest raw priority `|td| + eps` seen so far (1.0
      initially); new transitions get `max_priority ** alpha`.
    """

    data: PyTree
    position: Int[Array, ""]
    size: Int[Array, ""]
    tree: Float[Array, " nodes"] | None
    max_priority: Float[Array, ""]


class Sample(eqx.Module):
    """A batch drawn from a replay buffer.

    - `data`: the sampled items; every leaf has leading axis `batch_size`.
    - `indices`: their slots, for `update_priorities`.
    - `weights`: importance-sampling weights (all ones for the uniform buffer).
    """

    data: PyTree
    indices: Int[Array, " batch"]
    weights: Float[Array, " batch"]


def _shape_dtype(x) -> tuple[tuple[int, ...], np.dtype]:
    if not hasattr(x, "shape") or not hasattr(x, "dtype"):
        x = jnp.asarray(x)
    return tuple(x.shape), np.dtype(x.dtype)


def _batched_shape(item_shape: tuple[int, ...]) -> str:
    return "(" + ", ".join(["B", *map(str, item_shape)]) + ("," if not item_shape else "") + ")"


class AbstractReplayBuffer(eqx.Module):
    """A fixed-capacity circular replay buffer with a functional state.

    `init(example) -> state`, then `add(state, batch) -> state`,
    `sample(state, key, batch_size, beta) -> Sample` and
    `update_priorities(state, indices, td_errors) -> state`. Every method is
    pure and traceable: use it inside `jit`, `lax.scan` and `vmap` (a batch of
    states, one per seed or population member). `capacity` is static.
    """

    capacity: eqx.AbstractVar[int]

    @abc.abstractmethod
    def init(self, example: PyTree) -> BufferState:
        """**Arguments:**

        - `example`: ONE item (no batch axis), e.g. a `Transition` of single
          arrays. Only its structure, shapes and dtypes are used.

        **Returns:** an empty state whose storage holds zeros of shape
        `(capacity, *leaf.shape)` for every leaf of `example`.
        """

    @abc.abstractmethod
    def add(self, state: BufferState, batch: PyTree) -> BufferState:
        """Write a batch at the current position, overwriting the oldest items when full.

        **Arguments:**

        - `state`: the buffer state.
        - `batch`: a pytree with the structure of `init`'s example whose leaves
          have one leading axis `B <= capacity` (static).

        **Returns:** the new state. Item `k` of the batch goes to slot
        `(position + k) % capacity`.
        """

    @abc.abstractmethod
    def sample(
        self, state: BufferState, key: Key, batch_size: int, beta: float | Float[Array, ""] = 1.0
    ) -> Sample:
        """Draw `batch_size` items (with replacement) from the written slots.

        **Arguments:**

        - `state`: the buffer state; it must not be empty (see `can_sample`).
        - `key`: a PRNG key.
        - `batch_size`: a static int, `1 <= batch_size <= capacity`.
        - `beta`: the importance-sampling exponent (ignored by the uniform buffer).

        **Returns:** a `Sample`. On an empty buffer the result is meaningless
        (slot 0 of zero storage) but well defined, so that an untaken branch of
        a vmapped `lax.cond` does no harm.
        """

    @abc.abstractmethod
    def update_priorities(
        self, state: BufferState, indices: Int[Array, " batch"], td_errors: Float[Array, " _batch"]
    ) -> BufferState:
        """Set the priorities of sampled items from their TD errors.

        **Returns:** the new state.
        """

    def can_sample(self, state: BufferState, batch_size: int) -> Bool[Array, ""]:
        """**Returns:** whether at least `batch_size` items have been written.

        (Sampling is with replacement, so one item would do; requiring
        `batch_size` items is the usual "learning starts" condition.)
        """
        self._check_batch_size(batch_size, "can_sample")
        return state.size >= batch_size

    def _check_batch_size(self, batch_size: int, method: str) -> None:
        check_positive_int(method, "batch_size", batch_size)
        if batch_size > self.capacity:
            raise ValueError(
                f"{method}(batch_size={batch_size}) exceeds {type(self).__name__}(capacity={self.capacity})"
            )

    def _check_state(self, state: BufferState, method: str) -> None:
        if jnp.ndim(state.position) != 0:
            raise ValueError(
                f"{method}(state) must be one buffer state with scalar position, got position of shape "
                f"{jnp.shape(state.position)} (a stacked state needs jax.vmap)"
            )
        for path, leaf in jax.tree_util.tree_leaves_with_path(state.data):
            if jnp.shape(leaf)[:1] != (self.capacity,):
                raise ValueError(
                    f"{method}(state) leaf {jax.tree_util.keystr(path) or '<root>'} must have leading axis "
                    f"capacity={self.capacity}, got shape {jnp.shape(leaf)}"
                )

    def _check_batch(self, state: BufferState, batch: PyTree) -> int:
        """Validate `batch` against the storage. **Returns:** its leading size `B`."""
        self._check_state(state, "add")
        stored_def = jax.tree_util.tree_structure(state.data)
        batch_def = jax.tree_util.tree_structure(batch)
        if stored_def != batch_def:
            raise ValueError(f"add(batch) must have the structure of init(example) {stored_def}, got {batch_def}")
        sizes = set()
        for (path, stored), leaf in zip(
            jax.tree_util.tree_leaves_with_path(state.data), jax.tree_util.tree_leaves(batch), strict=True
        ):
            name = jax.tree_util.keystr(path) or "<root>"
            shape, dtype = _shape_dtype(leaf)
            item_shape = tuple(stored.shape[1:])
            if len(shape) != len(item_shape) + 1 or shape[1:] != item_shape:
                raise ValueError(
                    f"add(batch) leaf {name} must have shape {_batched_shape(item_shape)} "
                    f"like init(example) plus a leading batch axis, got {shape}"
                )
            if dtype != stored.dtype:
                raise ValueError(
                    f"add(batch) leaf {name} must have dtype {stored.dtype} like init(example), got {dtype}"
                )
            sizes.add(shape[0])
        if len(sizes) != 1:
            raise ValueError(f"add(batch) leaves must share one leading batch size B, got sizes {sorted(sizes)}")
        (size,) = sizes
        if size > self.capacity:
            raise ValueError(
                f"add(batch) has B={size} items, more than {type(self).__name__}(capacity={self.capacity})"
            )
        return size


def _empty_state(capacity: int, example: PyTree, tree: Array | None) -> BufferState:
    def zeros(x):
        shape, dtype = _shape_dtype(x)
        return jnp.zeros((capacity, *shape), dtype)

    return BufferState(
        data=jax.tree.map(zeros, example),
        position=jnp.zeros((), jnp.int32),
        size=jnp.zeros((), jnp.int32),
        tree=tree,
        max_priority=jnp.ones((), jnp.float32),
    )


def _write(capacity: int, state: BufferState, batch: PyTree, size: int) -> tuple[PyTree, Int[Array, " B"]]:
    """Scatter `batch` into the storage at the next `size` slots. **Returns:** (data, slots)."""
    slots = (state.position + jnp.arange(size, dtype=jnp.int32)) % capacity
    # B <= capacity, so the slots are distinct: a plain in-place scatter (no wrap special case).
    data = jax.tree.map(
        lambda store, x: store.at[slots].set(x, unique_indices=True, mode="promise_in_bounds"), state.data, batch
    )
    return data, slots


def _gather(data: PyTree, indices: Int[Array, " batch"]) -> PyTree:
    return jax.tree.map(lambda store: store.at[indices].get(mode="promise_in_bounds"), data)


def _advance(capacity: int, state: BufferState, size: int) -> tuple[Int[Array, ""], Int[Array, ""]]:
    position = (state.position + size) % capacity
    filled = jnp.minimum(state.size + size, capacity).astype(jnp.int32)
    return position.astype(jnp.int32), filled


class ReplayBuffer(AbstractReplayBuffer):
    """A circular buffer sampled uniformly (with replacement) among the written slots."""

    capacity: int = eqx.field(static=True)

    def __init__(self, capacity: int = 100_000):
        """**Arguments:**

        - `capacity`: the number of items kept; the oldest are overwritten first.
        """
        self.capacity = capacity

    def __check_init__(self):
        check_positive_int("ReplayBuffer", "capacity", self.capacity)

    def init(self, example: PyTree) -> BufferState:
        return _empty_state(self.capacity, example, None)

    def add(self, state: BufferState, batch: PyTree) -> BufferState:
        size = self._check_batch(state, batch)
        data, _ = _write(self.capacity, state, batch, size)
        position, filled = _advance(self.capacity, state, size)
        return BufferState(data, position, filled, state.tree, state.max_priority)

    def sample(
        self, state: BufferState, key: Key, batch_size: int, beta: float | Float[Array, ""] = 1.0
    ) -> Sample:
        self._check_batch_size(batch_size, "sample")
        self._check_state(state, "sample")
        high = jnp.maximum(state.size, 1)
        indices = jax.random.randint(key, (batch_size,), 0, high, dtype=jnp.int32)
        return Sample(_gather(state.data, indices), indices, jnp.ones((batch_size,), jnp.float32))

    def update_priorities(
        self, state: BufferState, indices: Int[Array, " batch"], td_errors: Float[Array, " _batch"]
    ) -> BufferState:
        """Uniform sampling has no priorities: **returns** `state` unchanged.

        Provided so that an agent can call it whichever buffer it holds.
        """
        return state


def as_buffer(value: Any) -> Any:
    """Converter for agents' `buffer` field: the value as given (a converter, so that a
    wrong value reaches the agent's own check, which names the field and what it takes)."""
    return value
