"""Proportional prioritised replay (PER, Schaul et al. 2016) over a sum tree.

The buffer shares `BufferState`, `Sample` and the storage helpers of the
uniform buffer (`_buffers.py`); its state also holds the sum tree of the
priorities and the largest priority seen so far.
"""

import math

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, Int, PyTree

from ..core import Key, check_hyperparameter, check_positive_int, hyperparameter
from ._buffers import AbstractReplayBuffer, BufferState, Sample, _advance, _empty_state, _gather, _write


def _next_pow2(n: int) -> int:
    return 1 << max(int(n) - 1, 0).bit_length()


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
    alpha: Float[Array, ""] = hyperparameter()
    eps: Float[Array, ""] = hyperparameter()

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
        check_positive_int("PrioritizedReplayBuffer", "capacity", self.capacity)
        for name in ("alpha", "eps"):
            # `v >= 0` also rejects NaN; traced and stacked values were checked where they were made.
            check_hyperparameter("PrioritizedReplayBuffer", name, getattr(self, name), lambda v: v >= 0, ">= 0")

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
