"""`check_buffer`: a replay buffer's add/sample contracts and its sampling distribution."""

from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import scipy.stats

from ..components import AbstractReplayBuffer
from ._common import as_key, fail

_SHAPES = "add and sample keep the example's shapes and dtypes"
_WRAP = "the buffer keeps the newest `capacity` items (circular, oldest overwritten first)"
_DIST = "sampling follows the buffer's distribution"
MAX_CAPACITY = 4096


def _items(example: Any, ids: np.ndarray) -> Any:
    """A batch whose item `k` has every leaf filled with `ids[k]` (booleans: its parity)."""

    def fill(leaf):
        leaf = jnp.asarray(leaf)
        value = jnp.asarray(ids % 2 == 1) if leaf.dtype == jnp.bool_ else jnp.asarray(ids)
        return jnp.broadcast_to(value.reshape((-1,) + (1,) * leaf.ndim), (len(ids), *leaf.shape)).astype(leaf.dtype)

    return jax.tree.map(fill, example)


def _ids(data: Any) -> np.ndarray:
    """The item ids of a batch or of the storage (from the first numeric leaf)."""
    for leaf in jax.tree.leaves(data):
        leaf = np.asarray(leaf)
        if leaf.dtype != np.bool_:
            return leaf.reshape(leaf.shape[0], -1)[:, 0].astype(np.int64)
    raise ValueError("check_buffer(example) needs a numeric (not bool) leaf to tell the items apart")


def _proportional(buffer: Any) -> Callable[[np.ndarray], np.ndarray] | None:
    """P(i) proportional to (|td_i| + eps)^alpha for a buffer with `alpha` and `eps` (PER)."""
    if not (hasattr(buffer, "alpha") and hasattr(buffer, "eps")):
        return None
    alpha, eps = float(buffer.alpha), float(buffer.eps)
    return lambda td: (np.abs(td) + eps) ** alpha


def check_buffer(
    buffer: Any,
    *,
    key: Any = None,
    example: Any = None,
    priorities: Callable[[np.ndarray], np.ndarray] | None = None,
    false_alarm_rate: float = 1e-3,
    beta: float = 0.5,
) -> None:
    """Check a replay buffer's contracts:

    - `init(example)` preallocates `(capacity, *leaf.shape)` per leaf; `add` and `sample`
      keep the example's structure, shapes and dtypes; `Sample.indices` are int32 slots
      among those written and `Sample.data` is what they hold; `Sample.weights` are
      float32 in `(0, 1]`;
    - capacity and wrap-around: after `capacity + k` items, `size == capacity`, `position
      == k % capacity` and slot `s` holds the newest item written to it;
    - the sampling distribution, by a chi-square test with false-alarm rate
      `false_alarm_rate` (the probability that a correct buffer fails, for a random key):
      after `update_priorities` with distinct TD errors, a uniform buffer samples every
      slot alike; a prioritized one (a buffer with `alpha` and `eps`, or when `priorities`
      is given) samples slot `i` with probability proportional to `priorities(td_i)`
      (default `(|td_i| + eps)^alpha`), and its importance weights are proportional to
      `P(i)^(-beta)`.

    **Arguments:** `buffer` (capacity at most 4096: the test draws about 100 samples per
    slot); `key` (a PRNG key or an int seed; default seed 0); `example`, one item (default
    `{"obs": float32[3], "action": int32[], "id": int32[]}`); `priorities`;
    `false_alarm_rate`; `beta`.

    **Raises:** `eqxrl.testing.ContractError` naming the contract and the first failing item.
    """
    if not isinstance(buffer, AbstractReplayBuffer):
        raise ValueError(f"check_buffer(buffer) must be an eqxrl AbstractReplayBuffer, got {type(buffer).__name__}")
    capacity = buffer.capacity
    if capacity > MAX_CAPACITY:
        raise ValueError(f"check_buffer(buffer) needs capacity <= {MAX_CAPACITY} (a small buffer), got {capacity}")
    if not 0.0 < false_alarm_rate < 1.0:
        raise ValueError(f"check_buffer(false_alarm_rate) must be in (0, 1), got {false_alarm_rate!r}")
    key = as_key(key)
    name = type(buffer).__name__
    if example is None:
        example = {"obs": jnp.zeros((3,), jnp.float32), "action": jnp.zeros((), jnp.int32), "id": jnp.zeros((), jnp.int32)}
    state = buffer.init(example)
    for path, leaf in jax.tree_util.tree_leaves_with_path(state.data):
        if jnp.shape(leaf)[:1] != (capacity,):
            raise fail(_SHAPES, f"{name}.init(example) leaf {jax.tree_util.keystr(path)} has shape "
                       f"{jnp.shape(leaf)}, expected leading axis capacity={capacity}")  # fmt: skip

    add = eqx.filter_jit(buffer.add)
    batch = max(1, capacity // 3)
    written = 0
    sample = eqx.filter_jit(buffer.sample)
    while written < capacity + batch + 1:
        state = add(state, _items(example, np.arange(written, written + batch)))
        written += batch
        size, position = int(state.size), int(state.position)
        if size != min(written, capacity) or position != written % capacity:
            raise fail(_WRAP, f"{name}(capacity={capacity}) after {written} items added {batch} at a time has "
                       f"size={size}, position={position}; expected {min(written, capacity)}, {written % capacity}")  # fmt: skip
        key, sub = jax.random.split(key)
        drawn = sample(state, sub, min(capacity, 8), beta)
        _check_sample(name, drawn, state, min(capacity, 8), example)
    stored = _ids(state.data)
    expected = np.array([max(i for i in range(written) if i % capacity == s) for s in range(capacity)])
    if not np.array_equal(stored, expected):
        slot = int(np.argmax(stored != expected))
        raise fail(_WRAP, f"{name}(capacity={capacity}) after {written} items added {batch} at a time holds item "
                   f"{stored[slot]} in slot {slot}, expected item {expected[slot]}")  # fmt: skip
    _check_distribution(buffer, state, key, priorities, false_alarm_rate, beta)


def _check_sample(name: str, drawn: Any, state: Any, batch_size: int, example: Any) -> None:
    call = f"{name}.sample(state of size {int(state.size)}, batch_size={batch_size})"
    for (path, leaf), item in zip(jax.tree_util.tree_leaves_with_path(drawn.data), jax.tree.leaves(example)):
        want = (batch_size, *jnp.shape(item))
        if jnp.shape(leaf) != want or jnp.result_type(leaf) != jnp.result_type(item):
            raise fail(_SHAPES, f"{call} leaf {jax.tree_util.keystr(path)} is {jnp.result_type(leaf)}"
                       f"{list(jnp.shape(leaf))}, expected {jnp.result_type(item)}{list(want)}")  # fmt: skip
    for field, dtype in (("indices", jnp.int32), ("weights", jnp.float32)):
        value = getattr(drawn, field)
        if jnp.shape(value) != (batch_size,) or jnp.result_type(value) != dtype:
            raise fail(_SHAPES, f"{call}.{field} is {jnp.result_type(value)}{list(jnp.shape(value))}, "
                       f"expected {jnp.dtype(dtype)}[{batch_size}]")  # fmt: skip
    indices, weights = np.asarray(drawn.indices), np.asarray(drawn.weights)
    if (indices < 0).any() or (indices >= int(state.size)).any():
        raise fail(_SHAPES, f"{call} drew slot {int(indices[(indices < 0) | (indices >= int(state.size))][0])}, "
                   "which was never written")  # fmt: skip
    if not (np.isfinite(weights).all() and (weights > 0).all() and (weights <= 1 + 1e-6).all()):
        raise fail(_SHAPES, f"{call}.weights must lie in (0, 1], got {weights.tolist()}")
    held = _ids(state.data)[indices]
    got = _ids(drawn.data)
    if not np.array_equal(held, got):
        k = int(np.argmax(held != got))
        raise fail(_SHAPES, f"{call}: draw {k} is item {got[k]}, but its index {indices[k]} holds item {held[k]}")


def _check_distribution(buffer, state, key, priorities, false_alarm_rate, beta) -> None:
    name, capacity = type(buffer).__name__, buffer.capacity
    td = np.linspace(0.5, 2.0, capacity).astype(np.float32)
    state = buffer.update_priorities(state, jnp.arange(capacity, dtype=jnp.int32), jnp.asarray(td))
    rule = priorities if priorities is not None else _proportional(buffer)
    p = np.ones(capacity) if rule is None else np.asarray(rule(td), np.float64)
    p = p / p.sum()
    batch_size = min(capacity, 64)
    draws = int(np.ceil(100 / p.min()))
    calls = -(-draws // batch_size)
    keys = jax.random.split(key, calls)
    drawn = eqx.filter_jit(jax.vmap(lambda k: buffer.sample(state, k, batch_size, beta)))(keys)
    indices = np.asarray(drawn.indices).reshape(-1)
    counts = np.bincount(indices, minlength=capacity)
    expected = p * indices.size
    statistic = float(np.sum((counts - expected) ** 2 / expected))
    p_value = float(scipy.stats.chi2.sf(statistic, capacity - 1))
    what = "uniformly" if rule is None else "in proportion to its priority"
    if p_value < false_alarm_rate:
        slot = int(np.argmax(np.abs(counts - expected) / np.sqrt(expected)))
        raise fail(_DIST, f"{name}(capacity={capacity}) should draw every slot {what}; in {indices.size} draws slot "
                   f"{slot} came {counts[slot]} times, expected {expected[slot]:.0f} (chi-square p = {p_value:.2g} < "
                   f"{false_alarm_rate:g})")  # fmt: skip
    if rule is None:
        if not np.all(np.asarray(drawn.weights) == 1.0):
            raise fail(_DIST, f"{name}: a uniform buffer's importance weights must all be 1, got "
                       f"{np.asarray(drawn.weights).reshape(-1)[:4].tolist()}...")  # fmt: skip
        return
    weights, first = np.asarray(drawn.weights[0]), np.asarray(drawn.indices[0])
    want = p[first] ** -beta
    want = want / want.max()
    if not np.allclose(weights, want, rtol=1e-3, atol=1e-6):
        k = int(np.argmax(np.abs(weights - want)))
        raise fail(_DIST, f"{name}: importance weights must be proportional to P(i)^(-beta) (beta={beta}); draw {k} "
                   f"(slot {first[k]}, P = {p[first[k]]:.3g}) has weight {weights[k]:.4g}, expected {want[k]:.4g}")  # fmt: skip
