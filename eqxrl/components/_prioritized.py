"""Proportional prioritised replay (PER, Schaul et al. 2016) over a sum tree.

The buffer shares `BufferState`, `Sample` and the storage helpers of the
uniform buffer (`_buffers.py`); its state also holds the sum tree of the
priorities and the largest priority seen so far.

The tree is `fanout`-ary (8 by default) rather than binary: a draw reads one
contiguous row of sibling sums per level, so at 1e6 slots it makes 7 dependent
reads instead of 20 and runs 7 levels' worth of small fused loops instead of 20
(on XLA:CPU each level's fixed cost dominates the sampling time; rows wider than
8 cost more per level than they save in levels). `benchmarks/per_sampling.py`
measures it against flashbax's binary sum tree and sweeps the fan-out.
"""

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, Int, PyTree

from ..core import Key, check_hyperparameter, check_positive_int, hyperparameter, is_positive_int
from ._buffers import AbstractReplayBuffer, BufferState, Sample, _advance, _empty_state, _gather, _write


# The default fan-out: 4 and 8 were the fastest for sampling at 1e4, 1e5 and 1e6 on CPU among
# 2, 4, 8, 16 and 32, close to each other; 8 is the shallower (see benchmarks/results/per_sampling.md).
FANOUT = 8


def _level_widths(capacity: int, fanout: int) -> tuple[int, ...]:
    """The number of nodes stored for each level of the tree, leaves first, root (1) last.

    Every level but the root is padded with zero nodes to a multiple of `fanout`, so
    that it reshapes into rows of `fanout` siblings: row `i` of a level holds the
    children of node `i` of the level above, and the level below the root is one row.
    """
    widths = [-(-capacity // fanout) * fanout]
    while widths[-1] > fanout:
        parents = widths[-1] // fanout
        widths.append(-(-parents // fanout) * fanout)
    widths.append(1)
    return tuple(widths)


class PrioritizedReplayBuffer(AbstractReplayBuffer):
    """Proportional prioritised replay (Schaul et al. 2016) over a sum tree.

    Item `i` is sampled with probability `P(i) = p_i^alpha / sum_j p_j^alpha`,
    where `p_i = |td_i| + eps` is its raw priority (new items get the largest
    raw priority seen so far). Sampling is stratified (one uniform draw in
    each of `batch_size` equal slices of the total mass) and descends a sum
    tree in which every node has `fanout` children: `ceil(log_fanout(capacity))`
    vectorised steps (7 at 1e6 for the default 8), each reading one contiguous
    row of `fanout` sibling sums per draw. Updates recompute the ancestors of
    each changed leaf from the same rows. `alpha = 0` is uniform sampling over
    the written slots.
    """

    capacity: int = eqx.field(static=True)
    alpha: Float[Array, ""] = hyperparameter()
    eps: Float[Array, ""] = hyperparameter()
    fanout: int = eqx.field(static=True)

    def __init__(
        self,
        capacity: int = 100_000,
        alpha: float | Float[Array, ""] = 0.6,
        eps: float | Float[Array, ""] = 1e-6,
        fanout: int = FANOUT,
    ):
        """**Arguments:**

        - `capacity`: the number of items kept; the oldest are overwritten first.
        - `alpha`: the prioritisation exponent, `>= 0` (0 is uniform).
        - `eps`: added to `|td error|` so that no written item has zero
          probability, `>= 0`.
        - `fanout`: the number of children of each node of the sum tree, an int
          `>= 2`. A wider tree is shallower (fewer, wider steps per draw and per
          update); every fan-out samples the same distribution. The default, 8
          (a 32-byte row of sibling sums), was with 4 the fastest measured on
          CPU from 1e4 to 1e6 (`benchmarks/per_sampling.py`).
        """
        self.capacity = capacity
        self.alpha = alpha
        self.eps = eps
        self.fanout = fanout

    def __check_init__(self):
        check_positive_int("PrioritizedReplayBuffer", "capacity", self.capacity)
        if not is_positive_int(self.fanout) or self.fanout < 2:
            raise ValueError(f"PrioritizedReplayBuffer(fanout) must be an int >= 2, got {self.fanout!r}")
        for name in ("alpha", "eps"):
            # `v >= 0` also rejects NaN; traced and stacked values were checked where they were made.
            check_hyperparameter("PrioritizedReplayBuffer", name, getattr(self, name), lambda v: v >= 0, ">= 0")

    # Layout: one flat float32 array holding the levels leaves first, root last (widths from
    # `_level_widths`): slot `j` is element `j`, the total mass is the last element. Every
    # level but the root has a multiple of `fanout` nodes, so each row of siblings starts at
    # a multiple of `fanout` and is one contiguous read (for fanout 8, half a cache line).
    # Lookups gather rows from a static slice of one level rather than from the whole array:
    # XLA:CPU's cost model charges a gather fusion for the full size of its operand and
    # splits gathers from multi-megabyte operands across threads, which costs more than the
    # gather; a slice is charged for its own size only.

    @property
    def _widths(self) -> tuple[int, ...]:
        return _level_widths(self.capacity, self.fanout)

    @property
    def _nodes(self) -> int:
        """The length of the tree array."""
        return sum(self._widths)

    def _offset(self, level: int) -> int:
        """Where level `level` (0: the leaves) starts in the tree array."""
        return sum(self._widths[:level])

    def _rows(self, tree: Float[Array, " nodes"], level: int) -> Float[Array, "rows fanout"]:
        """Level `level` (0: the leaves; not the root) as rows of `fanout` siblings."""
        start = self._offset(level)
        return jax.lax.slice_in_dim(tree, start, start + self._widths[level]).reshape(-1, self.fanout)

    def _propagate(self, tree: Float[Array, " nodes"], slots: Int[Array, " k"]) -> Float[Array, " nodes"]:
        """Recompute every ancestor of the leaves of `slots`, one level at a time.

        Each parent is recomputed as the sum of its row of children, so repeated
        slots (and repeated ancestors, which are the rule near the root) write the
        same value and the tree stays consistent.
        """
        node = slots  # index within the current level
        for level in range(len(self._widths) - 1):
            node = node // self.fanout
            total = jnp.sum(self._rows(tree, level).at[node].get(mode="promise_in_bounds"), axis=1)
            tree = tree.at[self._offset(level + 1) + node].set(total, mode="promise_in_bounds")
        return tree

    def _find(self, tree: Float[Array, " nodes"], target: Float[Array, " k"]) -> Int[Array, " k"]:
        """**Returns:** the slot in which each cumulative mass `target` falls."""
        return self._descend(tree, target)[0]

    def _descend(
        self, tree: Float[Array, " nodes"], target: Float[Array, " k"]
    ) -> tuple[Int[Array, " k"], Float[Array, " k"]]:
        """**Returns:** the slot in which each cumulative mass `target` falls, and its mass.

        One vectorised step per level below the root: each reads the row of `fanout`
        children of the current node (one contiguous row per target), takes their
        running sums, and moves to the child whose interval of mass holds the target.
        """
        node = jnp.zeros(target.shape, jnp.int32)  # index within the current level
        column = jnp.arange(self.fanout, dtype=jnp.int32)
        mass = jnp.zeros(target.shape + (self.fanout,), jnp.float32)
        child = node
        for level in range(len(self._widths) - 2, -1, -1):
            mass = self._rows(tree, level).at[node].get(mode="promise_in_bounds")  # (k, fanout)
            # The running sums by a log-depth scan (elementwise adds of shifted rows):
            # on XLA:CPU it fuses with the gather into cheap loops, where `jnp.cumsum`
            # (a reduce-window, O(fanout^2)) is costed as heavy and split across threads.
            inclusive = jax.lax.associative_scan(jnp.add, mass, axis=1)
            before = jnp.concatenate([jnp.zeros_like(mass[:, :1]), inclusive[:, :-1]], axis=1)
            # The last child of positive mass whose interval starts at or below the target.
            # A target pushed past the end by float round-off (or into an empty child) stops
            # at the last child with mass, so the descent only enters nodes of positive mass,
            # and when the root is positive it ends on a positive leaf: a written slot of
            # nonzero priority. `before` is nondecreasing along a row, so the chosen child's
            # `before` is the largest among the candidates, and `target - before >= 0`.
            ok = (mass > 0) & (before <= target[:, None])
            child = jnp.max(jnp.where(ok, column, 0), axis=1)
            target = target - jnp.max(jnp.where(ok, before, 0.0), axis=1)
            node = node * self.fanout + child
        # The leaf's mass from the last row read, rather than a gather from the leaf level.
        leaf_mass = jnp.sum(jnp.where(column == child[:, None], mass, 0.0), axis=1)
        return node, leaf_mass

    def init(self, example: PyTree) -> BufferState:
        return _empty_state(self.capacity, example, jnp.zeros((self._nodes,), jnp.float32))

    def add(self, state: BufferState, batch: PyTree) -> BufferState:
        size = self._check_batch(state, batch)
        if state.tree is None or state.tree.shape != (self._nodes,):
            raise ValueError(
                f"add(state) needs a PrioritizedReplayBuffer state with a sum tree of {self._nodes} nodes, "
                f"got tree={None if state.tree is None else state.tree.shape}"
            )
        data, slots = _write(self.capacity, state, batch, size)
        priority = jnp.power(state.max_priority, self.alpha)
        tree = state.tree.at[slots].set(priority, unique_indices=True, mode="promise_in_bounds")
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
        total = tree[-1]
        # Stratified: one uniform draw in each of batch_size equal slices of the mass.
        offsets = jnp.arange(batch_size, dtype=jnp.float32) + jax.random.uniform(key, (batch_size,), jnp.float32)
        indices, mass = self._descend(tree, offsets * (total / batch_size))
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
        # Out of bounds targets are dropped by the scatters: unwritten slots keep priority 0.
        targets = jnp.where(written, indices, self._nodes)
        tree = state.tree.at[targets].set(0.0, mode="drop")
        tree = tree.at[targets].max(jnp.power(raw, self.alpha), mode="drop")
        # Recomputing the ancestors of an unchanged leaf is harmless.
        tree = self._propagate(tree, indices)
        max_priority = jnp.maximum(state.max_priority, jnp.max(jnp.where(written, raw, 0.0)))
        return BufferState(state.data, state.position, state.size, tree, max_priority)
