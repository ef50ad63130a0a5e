"""Replay buffers for off-policy agents: uniform and proportional prioritised (PER).

A buffer is configuration (an immutable module: the capacity, PER's `alpha`
and `eps`); everything that changes lives in a separate `BufferState`, so a
buffer state is an ordinary pytree that sits in an agent's state, is carried by
`lax.scan`, batched by `vmap` (seeds, sweeps, PBT members) and copied whole by
PBT's exploit step.

Storage is preallocated: `init(example)` makes one zero array of shape
`(capacity, *leaf.shape)` per leaf of one example transition, and `add` writes
a batch into it in place (a scatter at `(position + arange(B)) % capacity`,
which XLA performs in the donated or loop-carried buffer, without a copy).
"""

import abc
import math

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Bool, Float, Int, PyTree

from ..core import Key, float_leaf


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
    - `tree`: the PER sum tree (flat, `2 * P` nodes for `P` the smallest power
      of two >= capacity; node 1 is the root, node `i` has children `2i` and
      `2i + 1`, slot `j` is leaf `P + j`, node 0 is unused); `None` for the
      uniform buffer.
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


def _next_pow2(n: int) -> int:
    return 1 << max(n - 1, 0).bit_length()


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
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"{method}(batch_size) must be a positive int, got {batch_size!r}")
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


def _check_capacity(owner: str, capacity: int) -> None:
    if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 1:
        raise ValueError(f"{owner}(capacity) must be a positive int, got {capacity!r}")


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
        _check_capacity("ReplayBuffer", self.capacity)

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


class PrioritizedReplayBuffer(AbstractReplayBuffer):
    """Proportional prioritised replay (Schaul et al. 2016) over a sum tree.

    Item `i` is sampled with probability `P(i) = p_i^alpha / sum_j p_j^alpha`,
    where `p_i = |td_i| + eps` is its raw priority (new items get the largest
    raw priority seen so far). Sampling is stratified (one uniform draw in
    each of `batch_size` equal slices of the total mass) and descends the sum
    tree in `log2(capacity)` vectorised steps; updates recompute the
    `log2(capacity)` ancestors of each changed leaf. `alpha = 0` is uniform
    sampling over the written slots.
    """

    capacity: int = eqx.field(static=True)
    alpha: Float[Array, ""] = float_leaf()
    eps: Float[Array, ""] = float_leaf()

    def __init__(
        self,
        capacity: int = 100_000,
        alpha: float | Float[Array, ""] = 0.6,
        eps: float | Float[Array, ""] = 1e-6,
    ):
        """**Arguments:**

        - `capacity`: the number of items kept; the oldest are overwritten first.
        - `alpha`: the prioritisation exponent, `>= 0` (0 is uniform).
        - `eps`: added to `|td error|` so that no written item has zero
          probability, `>= 0`.
        """
        self.capacity = capacity
        self.alpha = alpha
        self.eps = eps

    def __check_init__(self):
        _check_capacity("PrioritizedReplayBuffer", self.capacity)
        for name in ("alpha", "eps"):
            value = getattr(self, name)
            # Inside a trace or a stacked population the value is checked where it was made.
            if isinstance(value, jax.core.Tracer) or jnp.ndim(value) != 0:
                continue
            v = float(value)
            if not v >= 0:  # also rejects NaN
                raise ValueError(f"PrioritizedReplayBuffer({name}) must be >= 0, got {v:.6g}")

    @property
    def _leaves(self) -> int:
        """The number of tree leaves: capacity padded to a power of two."""
        return _next_pow2(self.capacity)

    @property
    def _depth(self) -> int:
        return int(math.log2(self._leaves))

    def init(self, example: PyTree) -> BufferState:
        return _empty_state(self.capacity, example, jnp.zeros((2 * self._leaves,), jnp.float32))

    # Tree levels: level l holds nodes 2**l .. 2**(l+1) - 1 of the flat array (level 0 is the
    # root, level depth the leaves). Lookups gather from a static slice of one level rather
    # than from the whole array: XLA:CPU's cost model charges a gather fusion for the full
    # size of its operand, and splits every 256-element gather from a multi-megabyte tree
    # across threads (`outer_dimension_partitions`), which costs more than the gather. A
    # slice is charged for its own size only, so the upper levels stay single-threaded.

    @staticmethod
    def _level(tree: Float[Array, " nodes"], level: int) -> Float[Array, " width"]:
        return jax.lax.slice_in_dim(tree, 1 << level, 2 << level)

    def _propagate(self, tree: Float[Array, " nodes"], slots: Int[Array, " k"]) -> Float[Array, " nodes"]:
        """Recompute every ancestor of the leaves of `slots`, one level at a time.

        Each parent is recomputed from its two children, so repeated slots (and
        repeated ancestors, which are the rule near the root) write the same
        value and the tree stays consistent.
        """
        node = slots  # index within the current level
        for level in range(self._depth - 1, -1, -1):
            node = node // 2
            children = self._level(tree, level + 1)
            left = children.at[2 * node].get(mode="promise_in_bounds")
            right = children.at[2 * node + 1].get(mode="promise_in_bounds")
            tree = tree.at[(1 << level) + node].set(left + right, mode="promise_in_bounds")
        return tree

    def _find(self, tree: Float[Array, " nodes"], target: Float[Array, " k"]) -> Int[Array, " k"]:
        """**Returns:** the slot in which each cumulative mass `target` falls.

        One vectorised step per tree level: O(log capacity) per target.
        """
        node = jnp.zeros(target.shape, jnp.int32)  # index within the current level
        for level in range(1, self._depth + 1):
            nodes = self._level(tree, level)
            left = 2 * node
            left_mass = nodes.at[left].get(mode="promise_in_bounds")
            right_mass = nodes.at[left + 1].get(mode="promise_in_bounds")
            # Going right needs mass there: a target pushed past the end by float
            # round-off (or landing on an empty right subtree) goes left instead. So the
            # descent only enters nodes of positive mass, and when the root is positive it
            # ends on a positive leaf, i.e. a written slot of nonzero priority.
            go_right = (target >= left_mass) & (right_mass > 0)
            target = jnp.where(go_right, target - left_mass, target)
            node = jnp.where(go_right, left + 1, left)
        return node

    def add(self, state: BufferState, batch: PyTree) -> BufferState:
        size = self._check_batch(state, batch)
        if state.tree is None or state.tree.shape != (2 * self._leaves,):
            raise ValueError(
                f"add(state) needs a PrioritizedReplayBuffer state with a sum tree of {2 * self._leaves} nodes, "
                f"got tree={None if state.tree is None else state.tree.shape}"
            )
        data, slots = _write(self.capacity, state, batch, size)
        priority = jnp.power(state.max_priority, self.alpha)
        tree = state.tree.at[self._leaves + slots].set(priority, unique_indices=True, mode="promise_in_bounds")
        tree = self._propagate(tree, slots)
        position, filled = _advance(self.capacity, state, size)
        return BufferState(data, position, filled, tree, state.max_priority)

    def sample(
        self, state: BufferState, key: Key, batch_size: int, beta: float | Float[Array, ""] = 1.0
    ) -> Sample:
        """See `AbstractReplayBuffer.sample`.

        The importance-sampling weights are `w_i = (size * P(i))^(-beta)`
        divided by their maximum over the batch, so `max(w) == 1` and every
        `w <= 1` (`size` and the total mass cancel in the ratio).
        """
        self._check_batch_size(batch_size, "sample")
        self._check_state(state, "sample")
        if state.tree is None:
            raise ValueError("sample(state) needs a PrioritizedReplayBuffer state with a sum tree, got tree=None")
        tree = state.tree
        total = tree[1]
        # Stratified: one uniform draw in each of batch_size equal slices of the mass.
        offsets = jnp.arange(batch_size, dtype=jnp.float32) + jax.random.uniform(key, (batch_size,), jnp.float32)
        indices = self._find(tree, offsets * (total / batch_size))
        mass = self._level(tree, self._depth).at[indices].get(mode="promise_in_bounds")
        beta = jnp.asarray(beta, jnp.float32)
        # log-space: w ∝ mass^(-beta); exp(0) = 1 exactly at the smallest mass.
        log_w = -beta * jnp.log(jnp.maximum(mass, jnp.finfo(jnp.float32).tiny))
        weights = jnp.exp(log_w - jnp.max(log_w))
        return Sample(_gather(state.data, indices), indices, weights)

    def update_priorities(
        self, state: BufferState, indices: Int[Array, " batch"], td_errors: Float[Array, " _batch"]
    ) -> BufferState:
        """Set raw priorities `|td_errors| + eps` (leaf value `priority ** alpha`).

        **Arguments:**

        - `state`: the buffer state.
        - `indices`: slots, as returned in `Sample.indices`; must lie in
          `[0, capacity)` (checked with `eqx.error_if`). Slots not yet written
          (`>= size`) are ignored, so the sample of an empty buffer drawn in
          the untaken branch of a vmapped `lax.cond` changes nothing.
        - `td_errors`: one TD error per index. A slot that appears more than
          once keeps the largest of its priorities. A non-finite TD error (a
          diverged network) counts as the current `max_priority`, so the tree
          stays finite; divergence is for the agent to report.

        **Returns:** the new state, with `max_priority` raised to the largest
        new raw priority.
        """
        if jnp.ndim(indices) != 1 or jnp.shape(td_errors) != jnp.shape(indices):
            raise ValueError(
                "update_priorities(indices, td_errors) must be two arrays of shape (batch,), got shapes "
                f"{jnp.shape(indices)} and {jnp.shape(td_errors)}"
            )
        self._check_state(state, "update_priorities")
        if state.tree is None:
            raise ValueError("update_priorities(state) needs a PrioritizedReplayBuffer state, got tree=None")
        indices = indices.astype(jnp.int32)
        indices = eqx.error_if(
            indices,
            (indices < 0) | (indices >= self.capacity),
            f"update_priorities(indices) must lie in [0, {self.capacity})",
        )
        td = jnp.abs(td_errors.astype(jnp.float32))
        raw = jnp.where(jnp.isfinite(td), td + self.eps, state.max_priority)
        written = indices < state.size
        leaves = self._leaves + indices
        # Out of bounds targets are dropped by the scatters: unwritten slots keep priority 0.
        targets = jnp.where(written, leaves, 2 * self._leaves)
        tree = state.tree.at[targets].set(0.0, mode="drop")
        tree = tree.at[targets].max(jnp.power(raw, self.alpha), mode="drop")
        # Recomputing the ancestors of an unchanged leaf is harmless.
        tree = self._propagate(tree, indices)
        max_priority = jnp.maximum(state.max_priority, jnp.max(jnp.where(written, raw, 0.0)))
        return BufferState(state.data, state.position, state.size, tree, max_priority)
