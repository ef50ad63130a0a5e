"""Tests for the replay buffers of `eqxrl.components`: ReplayBuffer and PrioritizedReplayBuffer."""

import math
import re

import equinox as eqx
import hypothesis.strategies as st
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.stats
from hypothesis import given, settings

from eqxrl.components import (
    BufferState,
    PrioritizedReplayBuffer,
    ReplayBuffer,
    Sample,
    Transition,
)

SETTINGS = settings(max_examples=15, deadline=None)
KINDS = ["uniform", "per"]
# Few distinct shapes: every (kind, capacity, batch size) is a new compilation.
capacities = st.sampled_from([4, 7])


def make_buffer(kind: str, capacity: int, **kwargs):
    if kind == "uniform":
        return ReplayBuffer(capacity)
    return PrioritizedReplayBuffer(capacity, **kwargs)


EXAMPLE = Transition(
    obs=jnp.zeros((2,), jnp.float32),
    action=jnp.zeros((), jnp.int32),
    reward=jnp.zeros((), jnp.float32),
    discount=jnp.zeros((), jnp.float32),
    next_obs=jnp.zeros((2,), jnp.float32),
)


def items(first: int, count: int) -> Transition:
    """`count` transitions with ids `first, first + 1, ...` (ids >= 1, so 0 means unwritten)."""
    ids = first + jnp.arange(count, dtype=jnp.int32)
    f = ids.astype(jnp.float32)
    return Transition(
        obs=jnp.stack([f, -f], axis=-1),
        action=ids,
        reward=f,
        discount=jnp.ones_like(f),
        next_obs=jnp.stack([f + 0.5, -f], axis=-1),
    )


@eqx.filter_jit
def _add(buffer, state, batch):
    return buffer.add(state, batch)


@eqx.filter_jit
def _update(buffer, state, indices, td_errors):
    return buffer.update_priorities(state, indices, td_errors)


@eqx.filter_jit
def _sample_batches(buffer, state, keys, batch_size: int, beta):
    return jax.vmap(lambda k: buffer.sample(state, k, batch_size, beta))(keys)


def _sample_many(buffer, state, key, batch_size: int, num_batches: int, beta=1.0) -> Sample:
    """`num_batches` independent batches, leaves of shape (num_batches, batch_size, ...)."""
    return _sample_batches(buffer, state, jax.random.split(key, num_batches), batch_size, jnp.asarray(beta, jnp.float32))


def fill(buffer, state, total: int, batch: int, first: int = 1) -> BufferState:
    written = 0
    while written < total:
        b = min(batch, total - written)
        state = _add(buffer, state, items(first + written, b))
        written += b
    return state


def chi_square(counts: np.ndarray, probs: np.ndarray) -> tuple[float, float]:
    """**Returns:** the Pearson statistic of `counts` against `probs` and its critical value at p = 1e-6."""
    n = counts.sum()
    expected = n * probs
    stat = float(np.sum((counts - expected) ** 2 / expected))
    return stat, float(scipy.stats.chi2.ppf(1 - 1e-6, df=len(probs) - 1))


# ----------------------------------------------------------------------------- storage


@pytest.mark.slow
@pytest.mark.parametrize("kind", KINDS)
@SETTINGS
@given(capacity=capacities, batch=st.sampled_from([1, 3, 4]), num_adds=st.integers(1, 6))
def test_circular_overwrite_order(kind, capacity, batch, num_adds):
    buffer = make_buffer(kind, capacity)
    state = buffer.init(EXAMPLE)
    for k in range(num_adds):
        state = _add(buffer, state, items(1 + k * batch, batch))
    total = num_adds * batch
    assert int(state.position) == total % capacity
    assert int(state.size) == min(total, capacity)
    # Item i (0-based) went to slot i % capacity; each slot holds its last writer.
    expected = np.zeros(capacity, np.int32)
    for i in range(total):
        expected[i % capacity] = i + 1
    np.testing.assert_array_equal(state.data.action, expected)
    np.testing.assert_array_equal(state.data.obs[:, 0], expected.astype(np.float32))
    np.testing.assert_array_equal(state.data.next_obs[:, 1], -expected.astype(np.float32))


@pytest.mark.parametrize("kind", KINDS)
def test_init_preallocates_zeros(kind):
    buffer = make_buffer(kind, 5)
    state = buffer.init(EXAMPLE)
    assert state.data.obs.shape == (5, 2) and state.data.obs.dtype == jnp.float32
    assert state.data.action.shape == (5,) and state.data.action.dtype == jnp.int32
    assert all(not np.any(leaf) for leaf in jax.tree.leaves(state.data))
    assert int(state.position) == 0 and int(state.size) == 0 and float(state.max_priority) == 1.0
    assert state.position.dtype == jnp.int32 and state.size.dtype == jnp.int32
    if kind == "uniform":
        assert state.tree is None
    else:
        assert state.tree.shape == (9,) and not np.any(state.tree)  # 5 slots padded to one row of 8 leaves, and the root


@pytest.mark.slow
@pytest.mark.parametrize("kind", KINDS)
@SETTINGS
@given(
    capacity=capacities,
    total=st.integers(1, 12),
    batch_size=st.sampled_from([1, 4]),
    seed=st.integers(0, 2**16),
)
def test_never_samples_unwritten_slot(kind, capacity, total, batch_size, seed):
    buffer = make_buffer(kind, capacity)
    state = fill(buffer, buffer.init(EXAMPLE), total, batch=3)
    key = jax.random.key(seed)
    if kind == "per":
        # Priorities of widely different magnitude, some exactly zero-td, to stress round-off.
        slots = jnp.arange(capacity, dtype=jnp.int32) % state.size
        td = jnp.asarray(10.0 ** np.random.default_rng(seed).uniform(-6, 6, capacity), jnp.float32)
        td = jnp.where(jnp.arange(capacity) % 3 != 0, td, 0.0)
        state = _update(buffer, state, slots, td)
    sample = _sample_many(buffer, state, key, batch_size, num_batches=50, beta=0.5)
    size = int(state.size)
    idx = np.asarray(sample.indices)
    assert idx.min() >= 0 and idx.max() < size
    # The data is what was stored at those slots, never the zeros of an unwritten one.
    np.testing.assert_array_equal(sample.data.action, np.asarray(state.data.action)[idx])
    assert np.all(np.asarray(sample.data.action) >= 1)
    assert np.all(np.asarray(sample.weights) <= 1.0) and np.all(np.asarray(sample.weights) > 0.0)


@pytest.mark.slow  # (over 2 s in the fast tier: tests/tiers.py)
@pytest.mark.parametrize("kind", KINDS)
def test_sample_shapes_and_dtypes_for_nested_pytree(kind, getkey):
    example = {
        "t": Transition(
            obs=jnp.zeros((2, 3), jnp.float32),
            action=jnp.zeros((2,), jnp.float32),
            reward=jnp.zeros((), jnp.float32),
            discount=jnp.zeros((), jnp.float32),
            next_obs=jnp.zeros((2, 3), jnp.float32),
        ),
        "aux": (jnp.zeros((4,), bool), jnp.zeros((), jnp.uint8)),
    }
    buffer = make_buffer(kind, 6)
    state = buffer.init(example)
    batch = jax.tree.map(lambda x: jnp.ones((5, *x.shape), x.dtype), example)
    state = buffer.add(state, batch)
    sample = buffer.sample(state, getkey(), 3)
    for got, ref in zip(jax.tree.leaves(sample.data), jax.tree.leaves(example), strict=True):
        assert got.shape == (3, *ref.shape) and got.dtype == ref.dtype
    assert jax.tree.structure(sample.data) == jax.tree.structure(example)
    assert sample.indices.shape == (3,) and sample.indices.dtype == jnp.int32
    assert sample.weights.shape == (3,) and sample.weights.dtype == jnp.float32


@pytest.mark.parametrize("kind", KINDS)
def test_can_sample(kind):
    buffer = make_buffer(kind, 8)
    state = buffer.init(EXAMPLE)
    assert not bool(buffer.can_sample(state, 1))
    state = buffer.add(state, items(1, 3))
    assert bool(buffer.can_sample(state, 3)) and not bool(buffer.can_sample(state, 4))


def test_uniform_samples_written_slots_uniformly(getkey):
    buffer = ReplayBuffer(8)
    state = fill(buffer, buffer.init(EXAMPLE), 5, batch=5)  # slots 5..7 unwritten
    sample = _sample_many(buffer, state, getkey(), 8, 2000)
    counts = np.bincount(np.asarray(sample.indices).ravel(), minlength=8)
    assert np.all(counts[5:] == 0)
    stat, critical = chi_square(counts[:5], np.full(5, 0.2))
    assert stat < critical
    np.testing.assert_array_equal(sample.weights, 1.0)


def test_uniform_update_priorities_is_identity():
    buffer = ReplayBuffer(4)
    state = buffer.add(buffer.init(EXAMPLE), items(1, 2))
    out = buffer.update_priorities(state, jnp.array([0, 1], jnp.int32), jnp.array([5.0, 0.0]))
    assert out is state


# ----------------------------------------------------------------------------- prioritised


def set_priorities(buffer, priorities) -> BufferState:
    """A full buffer whose raw priorities are `priorities` (td = p - eps)."""
    capacity = len(priorities)
    state = fill(buffer, buffer.init(EXAMPLE), capacity, batch=capacity)
    td = jnp.asarray(priorities, jnp.float32) - buffer.eps
    return buffer.update_priorities(state, jnp.arange(capacity, dtype=jnp.int32), td)


@pytest.mark.slow
def test_per_frequencies_are_proportional_to_priority_power_alpha(getkey):
    alpha = 0.6
    priorities = np.array([0.5, 1.0, 2.0, 3.0, 4.0, 8.0])  # capacity 6: tree padded to 8 leaves
    buffer = PrioritizedReplayBuffer(6, alpha=alpha)
    state = set_priorities(buffer, priorities)
    key = getkey()
    sample = _sample_many(buffer, state, key, 6, 4000)  # 24000 draws
    counts = np.bincount(np.asarray(sample.indices).ravel(), minlength=6)
    target = priorities**alpha / np.sum(priorities**alpha)
    # Stratified draws within a batch are negatively correlated, which only lowers the
    # statistic relative to i.i.d. draws: a correct sampler fails with probability < 1e-6.
    stat, critical = chi_square(counts, target)
    assert stat < critical, (stat, critical, counts)
    # The test has power: a uniform sampler, or one that ignores alpha, fails it.
    uniform = ReplayBuffer(6)
    uniform_counts = np.bincount(
        np.asarray(_sample_many(uniform, state, key, 6, 4000).indices).ravel(), minlength=6
    )
    assert chi_square(uniform_counts, target)[0] > 10 * critical
    assert chi_square(counts, priorities / priorities.sum())[0] > 10 * critical
    # Per-bin: within 5 binomial standard deviations.
    n = counts.sum()
    assert np.all(np.abs(counts / n - target) < 5 * np.sqrt(target * (1 - target) / n))


def test_per_alpha_zero_is_uniform(getkey):
    buffer = PrioritizedReplayBuffer(8, alpha=0.0)
    state = fill(buffer, buffer.init(EXAMPLE), 6, batch=3)  # slots 6, 7 unwritten
    state = buffer.update_priorities(
        state, jnp.arange(6, dtype=jnp.int32), jnp.array([0.0, 1.0, 10.0, 100.0, 0.1, 5.0])
    )
    np.testing.assert_array_equal(state.tree[:6], 1.0)  # the leaves come first in the tree array
    np.testing.assert_array_equal(state.tree[6:8], 0.0)
    sample = _sample_many(buffer, state, getkey(), 8, 2000, beta=1.0)
    counts = np.bincount(np.asarray(sample.indices).ravel(), minlength=8)
    assert np.all(counts[6:] == 0)
    stat, critical = chi_square(counts[:6], np.full(6, 1 / 6))
    assert stat < critical
    np.testing.assert_array_equal(sample.weights, 1.0)


@pytest.mark.slow  # (over 2 s in the fast tier: tests/tiers.py)
@pytest.mark.parametrize("beta", [0.0, 0.4, 1.0])
def test_per_importance_weights(beta, getkey):
    priorities = np.array([0.1, 1.0, 2.0, 5.0, 0.5])
    buffer = PrioritizedReplayBuffer(5, alpha=0.7)
    state = set_priorities(buffer, priorities)
    sample = buffer.sample(state, getkey(), 5, beta)
    w = np.asarray(sample.weights)
    assert np.max(w) == 1.0 and np.all(w <= 1.0) and np.all(w > 0.0)
    probs = priorities**0.7 / np.sum(priorities**0.7)
    p = probs[np.asarray(sample.indices)]
    raw = (len(priorities) * p) ** (-beta)
    np.testing.assert_allclose(w, raw / raw.max(), rtol=1e-5)
    # Stratified: one draw per fifth of the mass, so the rare and the common item are both drawn.
    assert len(set(np.asarray(sample.indices).tolist())) >= 2


def test_per_priority_updates_take_effect(getkey):
    # eps = 0 and td = 0: priority exactly zero, never sampled.
    buffer = PrioritizedReplayBuffer(6, alpha=1.0, eps=0.0)
    state = set_priorities(buffer, np.ones(6))
    state = buffer.update_priorities(state, jnp.array([2], jnp.int32), jnp.array([0.0]))
    counts = np.bincount(np.asarray(_sample_many(buffer, state, getkey(), 6, 4000).indices).ravel(), minlength=6)
    assert counts[2] == 0 and np.all(np.delete(counts, 2) > 0)

    # Near zero (default eps): P = 1e-6 / 5 -> expected 0.005 draws in 24000.
    buffer = PrioritizedReplayBuffer(6, alpha=1.0)
    state = set_priorities(buffer, np.ones(6))
    state = buffer.update_priorities(state, jnp.array([4], jnp.int32), jnp.array([0.0]))
    counts = np.bincount(np.asarray(_sample_many(buffer, state, getkey(), 6, 4000).indices).ravel(), minlength=6)
    assert counts[4] <= 1

    # One huge priority dominates: P = 1e6 / (1e6 + 5).
    state = buffer.update_priorities(state, jnp.array([1], jnp.int32), jnp.array([1e6]))
    counts = np.bincount(np.asarray(_sample_many(buffer, state, getkey(), 6, 4000).indices).ravel(), minlength=6)
    assert counts[1] / counts.sum() > 0.999
    assert float(state.max_priority) == pytest.approx(1e6 + 1e-6)


def test_per_new_items_get_max_priority():
    buffer = PrioritizedReplayBuffer(8, alpha=0.5)
    state = buffer.add(buffer.init(EXAMPLE), items(1, 2))
    np.testing.assert_allclose(state.tree[:2], 1.0)  # max_priority starts at 1
    state = buffer.update_priorities(state, jnp.array([0, 1], jnp.int32), jnp.array([3.0, 8.0]))
    assert float(state.max_priority) == pytest.approx(8.0 + 1e-6)
    state = buffer.add(state, items(3, 1))
    np.testing.assert_allclose(state.tree[2], (8.0 + 1e-6) ** 0.5, rtol=1e-6)
    np.testing.assert_allclose(state.tree[:2], [(3.0 + 1e-6) ** 0.5, (8.0 + 1e-6) ** 0.5], rtol=1e-6)


def _assert_tree_consistent(buffer: PrioritizedReplayBuffer, tree) -> None:
    """Every internal node is the sum of its row of `fanout` children; padding nodes are 0."""
    tree = np.asarray(tree)
    widths = buffer._widths
    assert tree.shape == (sum(widths),) and widths[-1] == 1
    assert np.all(tree[buffer.capacity : widths[0]] == 0)  # padding leaves
    start = 0
    for level in range(len(widths) - 1):
        children = tree[start : start + widths[level]].reshape(-1, buffer.fanout)
        parents = tree[start + widths[level] : start + widths[level] + widths[level + 1]]
        # Each parent is recomputed from its final children (in XLA's summation order).
        np.testing.assert_allclose(parents[: len(children)], children.sum(axis=1, dtype=np.float64), rtol=1e-6)
        assert np.all(parents[len(children) :] == 0), level  # padding nodes of the parent level
        start += widths[level]
    np.testing.assert_allclose(tree[-1], tree[: buffer.capacity].sum(dtype=np.float64), rtol=1e-5)


@SETTINGS
@given(
    capacity=st.sampled_from([5, 8]),
    rounds=st.lists(
        st.lists(st.tuples(st.integers(0, 4), st.floats(-50.0, 50.0, width=32)), min_size=6, max_size=6),
        min_size=1,
        max_size=3,
    ),
)
def test_per_tree_consistent_after_updates_with_duplicates(capacity, rounds):
    alpha, eps = 0.6, 1e-3
    buffer = PrioritizedReplayBuffer(capacity, alpha=alpha, eps=eps)
    state = fill(buffer, buffer.init(EXAMPLE), capacity, batch=capacity)
    leaves = 8
    expected = np.zeros(leaves, np.float64)
    expected[:capacity] = 1.0
    max_priority = 1.0
    for pairs in rounds:
        indices = np.array([i for i, _ in pairs], np.int32)
        td = np.array([t for _, t in pairs], np.float32)
        state = _update(buffer, state, jnp.asarray(indices), jnp.asarray(td))
        raw = np.abs(td.astype(np.float64)) + eps
        for i in set(indices.tolist()):
            expected[i] = np.max(raw[indices == i]) ** alpha  # duplicates keep the largest
        max_priority = max(max_priority, raw.max())
    tree = np.asarray(state.tree)
    np.testing.assert_allclose(tree[:leaves], expected, rtol=1e-5)
    _assert_tree_consistent(buffer, tree)
    assert float(state.max_priority) == pytest.approx(max_priority, rel=1e-6)


def test_per_update_ignores_unwritten_slots_and_non_finite_errors():
    buffer = PrioritizedReplayBuffer(8, alpha=1.0, eps=0.0)
    state = buffer.add(buffer.init(EXAMPLE), items(1, 3))
    state = buffer.update_priorities(state, jnp.array([1, 5], jnp.int32), jnp.array([4.0, 100.0]))
    tree = np.asarray(state.tree)
    np.testing.assert_array_equal(tree[:8], [1.0, 4.0, 1.0, 0, 0, 0, 0, 0])
    assert float(state.max_priority) == 4.0  # the ignored 100 does not count
    state = buffer.update_priorities(state, jnp.array([0], jnp.int32), jnp.array([jnp.nan]))
    assert float(state.tree[0]) == 4.0 and np.all(np.isfinite(np.asarray(state.tree)))
    _assert_tree_consistent(buffer, state.tree)


def test_per_update_rejects_out_of_range_indices():
    buffer = PrioritizedReplayBuffer(8)
    state = buffer.add(buffer.init(EXAMPLE), items(1, 3))
    with pytest.raises(RuntimeError, match=r"update_priorities\(indices\) must lie in \[0, 8\)"):
        jax.block_until_ready(buffer.update_priorities(state, jnp.array([8], jnp.int32), jnp.array([1.0])))


@pytest.mark.slow  # (over 2 s in the fast tier: tests/tiers.py)
@pytest.mark.parametrize("fanout", [2, 3, 8])
def test_per_descent_guards_round_off_at_the_boundaries(fanout):
    buffer = PrioritizedReplayBuffer(5, alpha=1.0, eps=0.0, fanout=fanout)
    state = set_priorities(buffer, np.array([1.0, 3.0, 0.0, 2.0, 0.0]))
    tree = state.tree
    total = tree[-1]
    # Targets at and past the total mass (what float round-off in the strata can
    # produce) must land on the last slot of positive priority, never on the
    # zero-priority slot 4 or a padding leaf (5 and up).
    targets = jnp.array(
        [0.0, 1.0, 3.999, 4.0, 5.999, float(total), float(np.nextafter(np.float32(total), np.float32(np.inf))), 1e9],
        jnp.float32,
    )
    slots = np.asarray(buffer._find(tree, targets))
    np.testing.assert_array_equal(slots, [0, 1, 1, 3, 3, 3, 3, 3])
    # An empty buffer: a well-defined slot 0 and unit weights.
    empty = buffer.init(EXAMPLE)
    sample = buffer.sample(empty, jax.random.key(0), 4)
    np.testing.assert_array_equal(sample.indices, 0)
    np.testing.assert_array_equal(sample.weights, 1.0)


FANOUTS = [2, 3, 4, 8, 16]  # 3: a fan-out that is not a power of two


@pytest.mark.parametrize("fanout", FANOUTS)
def test_per_tree_layout(fanout):
    buffer = PrioritizedReplayBuffer(1000, fanout=fanout)
    widths = buffer._widths
    # Leaves first, root last; every level but the root is whole rows of `fanout`
    # siblings, one row per node of the level above, and the level below the root is one row.
    assert widths[0] == -(-1000 // fanout) * fanout and widths[-1] == 1 and widths[-2] == fanout
    for below, above in zip(widths[:-2], widths[1:-1], strict=True):
        assert below % fanout == 0 and above == -(-(below // fanout) // fanout) * fanout
    assert len(widths) - 1 == math.ceil(math.log(1000, fanout) - 1e-9)  # the number of descent steps
    assert buffer.init(EXAMPLE).tree.shape == (sum(widths),)
    # The default: fan-out 8, 7 steps at capacity 1e6 (a binary tree takes 20).
    assert PrioritizedReplayBuffer(10**6).fanout == 8 and len(PrioritizedReplayBuffer(10**6)._widths) - 1 == 7


@eqx.filter_jit
def _tree_and_descent(buffer, priorities, fractions):
    """A full buffer with raw priorities `priorities`, and the descent of `fractions` of its total mass."""
    capacity = priorities.shape[0]
    state = buffer.add(buffer.init(EXAMPLE), items(1, capacity))
    state = buffer.update_priorities(state, jnp.arange(capacity, dtype=jnp.int32), priorities - buffer.eps)
    return state.tree, buffer._descend(state.tree, fractions * state.tree[-1])


@SETTINGS
@given(
    fanout=st.sampled_from([2, 3, 8, 16]),
    priorities=st.lists(
        st.one_of(st.just(0.0), st.floats(2.0**-10, 2.0**10, width=32)), min_size=37, max_size=37
    ).filter(lambda p: any(x > 0 for x in p)),
    alpha=st.sampled_from([0.0, 0.6, 1.0]),
)
@pytest.mark.slow
def test_per_descent_inverts_the_cdf_of_p_alpha(fanout, priorities, alpha):
    """For every fan-out, the slot a cumulative mass falls in is that of `P(i) = p_i^alpha / sum p^alpha`:
    on a fine grid of targets over [0, total), the share of targets landing on slot `i` is `P(i)` up to
    the grid spacing, and no target lands on a zero-priority slot."""
    capacity = len(priorities)  # 37: padded to 38, 39, 40 or 48 leaves
    buffer = PrioritizedReplayBuffer(capacity, alpha=alpha, eps=0.0, fanout=fanout)
    p = np.asarray(priorities, np.float64)
    n = 4096
    tree, (slots, leaf_mass) = _tree_and_descent(
        buffer, jnp.asarray(p, jnp.float32), jnp.asarray((np.arange(n) + 0.5) / n, jnp.float32)
    )
    _assert_tree_consistent(buffer, tree)
    mass = p**alpha  # as the buffer's leaves: with alpha = 0 every written slot has mass 0 ** 0 = 1
    probs = mass / mass.sum()
    slots = np.asarray(slots)
    assert np.all(mass[slots] > 0)
    counts = np.bincount(slots, minlength=capacity)
    np.testing.assert_allclose(counts / n, probs, atol=1.5 / n + 1e-5)
    # The descent also returns each slot's own mass (the sampling weights use it).
    np.testing.assert_array_equal(leaf_mass, np.asarray(tree)[slots])
    # The inverse CDF is monotone: a larger target never lands on an earlier slot.
    assert np.all(np.diff(slots) >= 0)


@SETTINGS
@given(
    shape=st.sampled_from([(2, 19), (3, 19), (8, 5), (8, 19)]),  # (fanout, capacity); (8, 5): one row of leaves
    ops=st.lists(
        st.one_of(
            st.just(("add",)),
            st.tuples(
                st.just("update"),
                st.lists(st.integers(0, 18), min_size=4, max_size=4),
                st.lists(st.floats(-50.0, 50.0, width=32), min_size=4, max_size=4),
            ),
        ),
        min_size=1,
        max_size=8,
    ),
)
@pytest.mark.slow
def test_per_tree_sums_stay_consistent_under_adds_and_updates(shape, ops):
    """Random adds (wrapping around) and updates (duplicates, unwritten slots): every internal
    node stays the sum of its children, and the leaves match a model of the priorities."""
    alpha, eps = 0.6, 1e-3
    fanout, capacity = shape
    buffer = PrioritizedReplayBuffer(capacity, alpha=alpha, eps=eps, fanout=fanout)
    state = buffer.init(EXAMPLE)
    model = np.zeros(capacity, np.float64)  # raw priorities, 0 while unwritten
    max_priority, size, position, first = 1.0, 0, 0, 1
    for op in ops:
        if op[0] == "add":
            state = _add(buffer, state, items(first, 3))
            first += 3
            for k in range(3):
                model[(position + k) % capacity] = max_priority
            position, size = (position + 3) % capacity, min(size + 3, capacity)
        else:
            indices = np.array(op[1], np.int32) % capacity
            td = np.array(op[2], np.float32)
            state = _update(buffer, state, jnp.asarray(indices), jnp.asarray(td))
            raw = np.abs(td.astype(np.float64)) + eps
            written = indices < size
            for i in set(indices[written].tolist()):
                model[i] = np.max(raw[indices == i])  # duplicates keep the largest
            if written.any():
                max_priority = max(max_priority, raw[written].max())
        _assert_tree_consistent(buffer, state.tree)
    np.testing.assert_allclose(np.asarray(state.tree)[:capacity], np.where(model > 0, model**alpha, 0.0), rtol=1e-5)
    assert float(state.max_priority) == pytest.approx(max_priority, rel=1e-6)


# ----------------------------------------------------------------------------- transformations


def _pointers(tree) -> list[int]:
    return [x.unsafe_buffer_pointer() for x in jax.tree.leaves(tree)]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("start", [0, 998])  # 998 + 4 wraps around the end
def test_add_writes_in_place(kind, start):
    capacity = 1000
    buffer = make_buffer(kind, capacity)
    state = buffer.init(EXAMPLE)
    state = eqx.tree_at(lambda s: (s.position, s.size), state, (jnp.int32(start), jnp.int32(start)))
    batch = items(1, 4)
    add = jax.jit(lambda s, b: buffer.add(s, b), donate_argnums=0)
    assert kind == "uniform" or state.tree.shape == (1153,)  # 1000 + 128 + 16 + 8 + 1 nodes at fan-out 8
    hlo = add.lower(state, batch).compile().as_text()
    # No instruction copies a whole storage array (f32[1000,2], s32[1000], the tree f32[1153], ...).
    assert not re.search(r"= \w+\[(1000|1153)[,\]][^\n]*\bcopy\(", hlo), hlo
    before = _pointers((state.data, state.tree))
    out = add(state, batch)
    assert _pointers((out.data, out.tree)) == before
    expected = np.zeros(capacity, np.int32)
    expected[(start + np.arange(4)) % capacity] = np.arange(1, 5)
    np.testing.assert_array_equal(out.data.action, expected)
    # The check can fail: without donation the output is a new buffer.
    copied = jax.jit(lambda s, b: buffer.add(s, b))(out, batch)
    assert _pointers(copied.data) != _pointers(out.data)


@pytest.mark.slow
@pytest.mark.parametrize("kind", KINDS)
def test_vmap_over_buffer_states(kind, getkey):
    buffer = make_buffer(kind, 8, alpha=0.6)
    seeds = 3
    states = jax.vmap(lambda _: buffer.init(EXAMPLE))(jnp.arange(seeds))
    assert states.data.obs.shape == (seeds, 8, 2)
    batches = jax.vmap(lambda i: items(1, 5))(jnp.arange(seeds))
    batches = eqx.tree_at(lambda b: b.action, batches, batches.action + 100 * jnp.arange(seeds)[:, None])
    states = jax.vmap(buffer.add)(states, batches)
    keys = jax.random.split(getkey(), seeds)
    td = jax.random.normal(getkey(), (seeds, 4))

    @jax.jit
    def step(states, keys, td):
        samples = jax.vmap(lambda s, k: buffer.sample(s, k, 4, 0.5))(states, keys)
        states = jax.vmap(buffer.update_priorities)(states, samples.indices, td)
        return states, samples

    new_states, samples = step(states, keys, td)
    for i in range(seeds):
        member = jax.tree.map(lambda x: x[i], states)
        ref = buffer.sample(member, keys[i], 4, 0.5)
        ref_state = buffer.update_priorities(member, ref.indices, td[i])
        for got, want in zip(
            jax.tree.leaves((samples, new_states)), jax.tree.leaves((ref, ref_state)), strict=True
        ):
            np.testing.assert_allclose(got[i], want, rtol=1e-6)
        assert np.all(np.asarray(samples.data.action[i]) // 100 == i)


@pytest.mark.slow
def test_vmap_over_a_sweep_of_alphas(getkey):
    alphas = [0.0, 0.5, 1.0]
    buffers = [PrioritizedReplayBuffer(4, alpha=a) for a in alphas]
    stacked = jax.tree.map(lambda *xs: jnp.stack(xs), *buffers)
    state = fill(buffers[0], buffers[0].init(EXAMPLE), 4, batch=4)
    indices, td = jnp.arange(4, dtype=jnp.int32), jnp.array([1.0, 2.0, 4.0, 8.0])
    out = eqx.filter_vmap(lambda b: b.update_priorities(state, indices, td))(stacked)
    for i, b in enumerate(buffers):
        np.testing.assert_allclose(out.tree[i], b.update_priorities(state, indices, td).tree, rtol=1e-6)


@pytest.mark.parametrize("kind", KINDS)
def test_scan_loop_compiles_once(kind, getkey):
    buffer = make_buffer(kind, 16)

    @eqx.filter_jit
    @eqx.debug.assert_max_traces(max_traces=1)
    def run(buffer, state, key):
        def body(state, inputs):
            key, first = inputs
            state = buffer.add(state, items(first, 3))
            sample = buffer.sample(state, key, 4, 0.4)
            state = buffer.update_priorities(state, sample.indices, sample.data.reward)
            return state, sample.indices

        return jax.lax.scan(body, state, (jax.random.split(key, 10), 1 + 3 * jnp.arange(10, dtype=jnp.int32)))

    state = buffer.init(EXAMPLE)
    state, indices = run(buffer, state, getkey())
    state, _ = run(buffer, state, getkey())
    assert int(state.size) == 16 and int(state.position) == 60 % 16
    # Step t samples after 3 (t + 1) items were written.
    assert np.all(np.asarray(indices) < np.minimum(3 * (np.arange(10) + 1), 16)[:, None])


# ----------------------------------------------------------------------------- bad input


@pytest.mark.parametrize("cls", [ReplayBuffer, PrioritizedReplayBuffer])
@pytest.mark.parametrize("capacity", [0, -3])
def test_bad_capacity(cls, capacity):
    with pytest.raises(ValueError, match=rf"{cls.__name__}\(capacity\) must be a positive int, got {capacity}"):
        cls(capacity)


def test_bad_alpha_and_eps():
    with pytest.raises(ValueError, match=r"PrioritizedReplayBuffer\(alpha\) must be >= 0, got -0.5"):
        PrioritizedReplayBuffer(10, alpha=-0.5)
    with pytest.raises(ValueError, match=r"PrioritizedReplayBuffer\(alpha\) must be >= 0, got nan"):
        PrioritizedReplayBuffer(10, alpha=float("nan"))
    with pytest.raises(ValueError, match=r"PrioritizedReplayBuffer\(eps\) must be >= 0, got -1e-06"):
        PrioritizedReplayBuffer(10, eps=-1e-6)
    buffer = PrioritizedReplayBuffer(10, alpha=0.7, eps=0.01)
    assert buffer.alpha.dtype == jnp.float32 and buffer.eps.dtype == jnp.float32


@pytest.mark.parametrize("fanout", [1, 0, -4])
def test_bad_fanout(fanout):
    # (A fanout that is not an int fails the same check; under the tests' jaxtyping hook its
    # annotation rejects it first.)
    with pytest.raises(ValueError, match=rf"PrioritizedReplayBuffer\(fanout\) must be an int >= 2, got {re.escape(repr(fanout))}"):
        PrioritizedReplayBuffer(10, fanout=fanout)


@pytest.mark.slow
@pytest.mark.parametrize("kind", KINDS)
def test_bad_batch_sizes(kind, getkey):
    buffer = make_buffer(kind, 32)
    name = type(buffer).__name__
    state = buffer.add(buffer.init(EXAMPLE), items(1, 4))
    with pytest.raises(ValueError, match=rf"sample\(batch_size=64\) exceeds {name}\(capacity=32\)"):
        buffer.sample(state, getkey(), 64)
    with pytest.raises(ValueError, match=r"sample\(batch_size\) must be a positive int, got 0"):
        buffer.sample(state, getkey(), 0)
    with pytest.raises(ValueError, match=rf"can_sample\(batch_size=33\) exceeds {name}\(capacity=32\)"):
        buffer.can_sample(state, 33)
    with pytest.raises(ValueError, match=rf"add\(batch\) has B=40 items, more than {name}\(capacity=32\)"):
        buffer.add(state, items(1, 40))


@pytest.mark.parametrize("kind", KINDS)
def test_bad_add_batches(kind):
    buffer = make_buffer(kind, 8)
    state = buffer.init(EXAMPLE)
    good = items(1, 3)
    wrong_obs = eqx.tree_at(lambda b: b.obs, good, jnp.zeros((3, 5), jnp.float32))
    with pytest.raises(ValueError, match=r"add\(batch\) leaf \.obs must have shape \(B, 2\) .* got \(3, 5\)"):
        buffer.add(state, wrong_obs)
    unbatched = jax.tree.map(lambda x: x[0], good)
    with pytest.raises(ValueError, match=r"add\(batch\) leaf \.obs must have shape \(B, 2\) .* got \(2,\)"):
        buffer.add(state, unbatched)
    scalar_action = eqx.tree_at(lambda b: b.action, good, jnp.zeros((3, 1), jnp.int32))
    with pytest.raises(ValueError, match=r"add\(batch\) leaf \.action must have shape \(B,\) .* got \(3, 1\)"):
        buffer.add(state, scalar_action)
    ragged = eqx.tree_at(lambda b: b.action, good, jnp.zeros((2,), jnp.int32))
    with pytest.raises(ValueError, match=r"add\(batch\) leaves must share one leading batch size B, got sizes \[2, 3\]"):
        buffer.add(state, ragged)
    wrong_dtype = eqx.tree_at(lambda b: b.action, good, jnp.zeros((3,), jnp.float32))
    with pytest.raises(ValueError, match=r"add\(batch\) leaf \.action must have dtype int32 like init\(example\), got float32"):
        buffer.add(state, wrong_dtype)
    with pytest.raises(ValueError, match=r"add\(batch\) must have the structure of init\(example\)"):
        buffer.add(state, {"obs": good.obs})
    stacked = jax.vmap(lambda _: state)(jnp.arange(2))
    with pytest.raises(ValueError, match=r"sample\(state\) must be one buffer state .* needs jax.vmap"):
        buffer.sample(stacked, jax.random.key(0), 2)


def test_bad_update_priorities_shapes():
    buffer = PrioritizedReplayBuffer(8)
    state = buffer.add(buffer.init(EXAMPLE), items(1, 3))
    with pytest.raises(ValueError, match=r"update_priorities\(indices, td_errors\) must be two arrays of shape \(batch,\)"):
        buffer.update_priorities(state, jnp.array([0, 1], jnp.int32), jnp.array([1.0, 2.0, 3.0]))
    uniform_state = ReplayBuffer(8).init(EXAMPLE)
    with pytest.raises(ValueError, match=r"update_priorities\(state\) needs a PrioritizedReplayBuffer state"):
        buffer.update_priorities(uniform_state, jnp.array([0], jnp.int32), jnp.array([1.0]))


@pytest.mark.slow
def test_update_priorities_writes_tree_in_place():
    buffer = PrioritizedReplayBuffer(1000)
    state = buffer.add(buffer.init(EXAMPLE), items(1, 10))
    update = jax.jit(lambda s, i, td: buffer.update_priorities(s, i, td), donate_argnums=0)
    indices, td = jnp.array([3, 7, 3], jnp.int32), jnp.array([2.0, 5.0, 1.0])
    assert state.tree.shape == (1153,)
    hlo = update.lower(state, indices, td).compile().as_text()
    assert not re.search(r"= \w+\[(1000|1153)[,\]][^\n]*\bcopy\(", hlo), hlo
    before = _pointers(state.tree)
    out = update(state, indices, td)
    assert _pointers(out.tree) == before
    np.testing.assert_allclose(out.tree[3], (2.0 + 1e-6) ** 0.6, rtol=1e-6)
