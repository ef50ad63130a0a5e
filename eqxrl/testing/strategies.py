"""hypothesis strategies for eqxrl's objects: spaces, their elements and batches, batch
shapes, transitions and trajectories with random episode ends, and agents' hyperparameters.

Needs hypothesis, an optional dependency: `pip install eqxrl[testing]`.

```python
from hypothesis import given
from eqxrl.testing import strategies as st

@given(st.spaces().flatmap(lambda space: st.batches(space)))
def test_my_torso(obs): ...
```
"""

try:
    import hypothesis.strategies as hs
    from hypothesis.extra import numpy as hnp
except ImportError:  # (one line, no chained traceback: the remedy is all there is to say)
    raise ImportError("eqxrl.testing.strategies needs hypothesis: pip install eqxrl[testing]") from None

import functools
import random
from typing import Any

import equinox as eqx
import jax
import numpy as np
import jax.numpy as jnp

from ..agents import AbstractAgent
from ..components import Transition
from ..core import set_paths
from ..envs import AbstractCompositeSpace, AbstractSpace, Box, Dict, Discrete, MultiBinary, MultiDiscrete, Tuple, flatten_space

# Unbounded sides of a Box are drawn within this (elements far out are no better a test).
_FAR = 1e3


def _build(cls, *args, **kwargs):
    """`cls(*args, **kwargs)` with Python's `random` state left as it was: a runtime type
    checker (beartype, as the suite runs it under jaxtyping's hook) draws from it to sample
    the items of containers it checks, and hypothesis refuses strategies that move it."""
    state = random.getstate()
    try:
        return cls(*args, **kwargs)
    finally:
        random.setstate(state)


@hs.composite
def _kept(draw, strategy):
    return _build(draw, strategy)


def _random_kept(make_strategy):
    """A strategy-making function whose calls and draws leave `random` as it was (`_build`)."""

    @functools.wraps(make_strategy)
    def wrapper(*args, **kwargs):
        return _kept(_build(make_strategy, *args, **kwargs))

    return wrapper


@_random_kept
def batch_shapes(
    *, max_dims: int = 2, max_side: int = 4, choices: "list[tuple[int, ...]] | None" = None
) -> hs.SearchStrategy[tuple[int, ...]]:
    """Batch shapes `()`, `(3,)`, `(2, 4)`, ...: up to `max_dims` axes of 1 to `max_side`; or,
    with `choices`, one of those shapes (each new shape is a new compilation of a jitted
    function: a few fixed ones keep a suite's time bounded while still covering no batch axis,
    one and several)."""
    if choices is None:
        return hnp.array_shapes(min_dims=0, max_dims=max_dims, min_side=1, max_side=max_side)
    shapes = [tuple(c) if isinstance(c, (tuple, list)) else c for c in choices] if isinstance(choices, (tuple, list)) else None
    if not shapes or not all(isinstance(c, tuple) and all(isinstance(n, int) and not isinstance(n, bool) and n > 0 for n in c) for c in shapes):
        raise ValueError(f"batch_shapes(choices) must be a non-empty list of shapes (tuples of positive ints), got {choices!r}")
    return hs.sampled_from(shapes)


@_random_kept
@hs.composite
def boxes(draw, *, shape: tuple[int, ...] | None = None, max_dims: int = 2, bounded: bool | None = None) -> Box:
    """`Box` spaces: `shape` (default: drawn, up to `max_dims` axes of 1 to 4), bounds with
    `low <= high` (`bounded=True`: finite; False: some infinite; None: either)."""
    if shape is None:
        shape = draw(hnp.array_shapes(min_dims=1, max_dims=max_dims, min_side=1, max_side=4))
    finite = hs.floats(-10.0, 10.0, width=32)
    low = draw(hnp.arrays(np.float32, shape, elements=finite))
    width = draw(hnp.arrays(np.float32, shape, elements=hs.floats(0.0, 10.0, width=32)))
    high = (low + width).astype(np.float32)
    if bounded is False or (bounded is None and draw(hs.booleans())):
        low = np.where(draw(hnp.arrays(np.bool_, shape)), -np.inf, low).astype(np.float32)
        high = np.where(draw(hnp.arrays(np.bool_, shape)), np.inf, high).astype(np.float32)
    return _build(Box, low, high, tuple(shape))


@_random_kept
def discretes(*, max_n: int = 8) -> hs.SearchStrategy[Discrete]:
    """`Discrete(n)` spaces, `1 <= n <= max_n`."""
    return hs.integers(1, max_n).map(lambda n: _build(Discrete, n))


@_random_kept
def multi_discretes(*, max_size: int = 4, max_n: int = 5) -> hs.SearchStrategy[MultiDiscrete]:
    """`MultiDiscrete(nvec)` spaces: 1 to `max_size` entries of 1 to `max_n` choices each."""
    nvecs = hs.lists(hs.integers(1, max_n), min_size=1, max_size=max_size)
    return nvecs.map(lambda nvec: _build(MultiDiscrete, tuple(nvec)))


@_random_kept
def multi_binaries(*, max_dims: int = 2) -> hs.SearchStrategy[MultiBinary]:
    """`MultiBinary(n)` spaces: `n` an int (1 to 4) or a shape of 1 to `max_dims` axes of 1 to 4."""
    shapes = hnp.array_shapes(min_dims=1, max_dims=max_dims, min_side=1, max_side=4)
    return hs.one_of(hs.integers(1, 4), shapes).map(lambda n: _build(MultiBinary, n))


@_random_kept
@hs.composite
def dicts(draw, *, max_entries: int = 3, max_depth: int = 2) -> Dict:
    """`Dict` spaces of 1 to `max_entries` entries (short lowercase keys), each an array
    space of `spaces()` or, up to `max_depth` levels deep, another `Dict` or a `Tuple`."""
    entry = _entries(max_entries, max_depth)
    names = draw(hs.lists(hs.text("abcdefgh", min_size=1, max_size=3), min_size=1, max_size=max_entries, unique=True))
    return _build(Dict, {name: draw(entry) for name in names})


@_random_kept
@hs.composite
def tuples(draw, *, max_entries: int = 3, max_depth: int = 2) -> Tuple:
    """`Tuple` spaces of 1 to `max_entries` entries, each an array space of `spaces()` or, up
    to `max_depth` levels deep, another `Tuple` or a `Dict`."""
    entry = _entries(max_entries, max_depth)
    return _build(Tuple, draw(hs.lists(entry, min_size=1, max_size=max_entries)))


def _entries(max_entries: int, max_depth: int) -> hs.SearchStrategy[AbstractSpace]:
    if max_depth <= 1:
        return spaces()
    inner = dict(max_entries=max_entries, max_depth=max_depth - 1)
    return hs.one_of(spaces(), dicts(**inner), tuples(**inner))


@_random_kept
def spaces(*, structured: bool = False) -> hs.SearchStrategy[AbstractSpace]:
    """Spaces whose elements are one array: `Box` (bounded or not), `Discrete`, `MultiDiscrete`
    and `MultiBinary`; with `structured=True`, `Dict`s and `Tuple`s of them (nested) too,
    whose elements are dicts and tuples. (`hs.one_of(boxes(), discretes())` draws the spaces every built-in agent acts in.)"""
    flat = hs.one_of(boxes(), discretes(), multi_discretes(), multi_binaries())
    return hs.one_of(flat, dicts(), tuples()) if structured else flat


@_random_kept
def batches(space: AbstractSpace, batch_shape: tuple[int, ...] | None = None) -> hs.SearchStrategy[Any]:
    """Batches of elements of `space` with leading axes `batch_shape` (default: drawn by
    `batch_shapes()`): arrays of shape `(*batch_shape, *space.shape)` and the space's dtype;
    for a `Dict` (`Tuple`), a dict (tuple) of such arrays, one per leaf space (same batch shape)."""
    if batch_shape is None:
        return batch_shapes().flatmap(lambda shape: batches(space, shape))
    if isinstance(space, AbstractCompositeSpace):
        leaves, treedef = flatten_space(space)
        return hs.tuples(*(batches(leaf, batch_shape) for leaf in leaves)).map(treedef.unflatten)
    shape = tuple(batch_shape) + tuple(space.shape)
    if isinstance(space, Discrete):
        return hnp.arrays(np.int32, shape, elements=hs.integers(0, space.n - 1))
    if isinstance(space, MultiDiscrete):
        nvec = np.asarray(space.nvec, np.int32)
        return hnp.arrays(np.int32, shape, elements=hs.integers(0, 2**16)).map(lambda a: (a % nvec).astype(np.int32))
    if isinstance(space, MultiBinary):
        return hnp.arrays(np.int32, shape, elements=hs.integers(0, 1))
    if isinstance(space, Box):
        low = np.broadcast_to(np.maximum(np.asarray(space.low, np.float32), -_FAR), shape)
        high = np.broadcast_to(np.minimum(np.asarray(space.high, np.float32), _FAR), shape)
        unit = hnp.arrays(np.float32, shape, elements=hs.floats(0.0, 1.0, width=32))
        return unit.map(lambda u: np.clip(low + u * (high - low), low, high).astype(np.float32))
    raise ValueError(
        f"batches(space) must be a Box, Discrete, MultiDiscrete, MultiBinary, Dict or Tuple space, got {space!r}"
    )


@_random_kept
def elements(space: AbstractSpace) -> hs.SearchStrategy[Any]:
    """One element of `space` (shape `space.shape`; a dict (tuple) of arrays for a `Dict` (`Tuple`))."""
    return batches(space, ())


class Trajectory(eqx.Module):
    """`length` steps of `num_envs` envs, time first: `obs[t]` is where step `t` was taken,
    `next_obs[t]` its true next observation (`info["final_obs"]`), `terminated[t]` and
    `truncated[t]` never both true. NumPy arrays, as hypothesis draws them (`obs`, `next_obs`
    and `action` dicts of them for a `Dict` space)."""

    obs: np.ndarray | dict[str, Any]
    action: np.ndarray | dict[str, Any]
    reward: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    next_obs: np.ndarray | dict[str, Any]


@_random_kept
@hs.composite
def trajectories(
    draw, obs_space: AbstractSpace, action_space: AbstractSpace, *, length: int | None = None, num_envs: int | None = None
) -> Trajectory:
    """`Trajectory`s of `length` steps (default 1-8) of `num_envs` envs (default 1-3) with
    finite float32 rewards and random episode ends: each step terminates, truncates or
    goes on. Observations after an end are a new episode's (unrelated to `next_obs`)."""
    length = draw(hs.integers(1, 8)) if length is None else length
    num_envs = draw(hs.integers(1, 3)) if num_envs is None else num_envs
    obs = draw(batches(obs_space, (length + 1, num_envs)))
    ends = draw(hnp.arrays(np.int8, (length, num_envs), elements=hs.sampled_from([0, 0, 1, 2])))
    final = draw(batches(obs_space, (length, num_envs)))
    terminated, truncated = ends == 1, ends == 2

    def next_of(final: np.ndarray, obs: np.ndarray) -> np.ndarray:
        # Where an episode goes on, the next observation is the next step's; where it ends, another.
        done = (terminated | truncated).reshape(ends.shape + (1,) * (final.ndim - 2))
        return np.where(done, final, obs[1:]).astype(obs.dtype)

    next_obs = jax.tree.map(next_of, final, obs)
    rewards = draw(hnp.arrays(np.float32, (length, num_envs), elements=hs.floats(-10.0, 10.0, width=32)))
    action = draw(batches(action_space, (length, num_envs)))
    return _build(Trajectory, jax.tree.map(lambda o: o[:-1], obs), action, rewards, terminated, truncated, next_obs)


@hs.composite
def _transitions(
    draw, obs_space: AbstractSpace, action_space: AbstractSpace, batch_shape: tuple[int, ...] | None, gamma: float
) -> Transition:
    batch_shape = draw(batch_shapes(max_dims=1)) if batch_shape is None else tuple(batch_shape)
    terminated = draw(hnp.arrays(np.bool_, batch_shape))
    return _build(
        Transition,
        obs=jnp.asarray(draw(batches(obs_space, batch_shape))),
        action=jnp.asarray(draw(batches(action_space, batch_shape))),
        reward=jnp.asarray(draw(hnp.arrays(np.float32, batch_shape, elements=hs.floats(-10.0, 10.0, width=32)))),
        discount=jnp.asarray(np.where(terminated, 0.0, gamma).astype(np.float32)),
        next_obs=jnp.asarray(draw(batches(obs_space, batch_shape))),
    )


@_random_kept
def transitions(
    obs_space: AbstractSpace, action_space: AbstractSpace, *, batch_shape: tuple[int, ...] | None = None,
    gamma: float = 0.99,
) -> hs.SearchStrategy[Transition]:
    """One-step `Transition`s (the off-policy agents' update batch) of batch shape
    `batch_shape` (default: drawn): `discount` is `gamma`, or 0 where the step terminated
    (at random). Spaces of one array only (a `Transition` holds arrays)."""
    for name, space in (("obs_space", obs_space), ("action_space", action_space)):
        if isinstance(space, AbstractCompositeSpace):
            raise ValueError(f"transitions({name}) must be a space of one array (Transition holds arrays), got {space!r}")
    return _transitions(obs_space, action_space, batch_shape, gamma)


@_random_kept
def _values_near(default: float) -> hs.SearchStrategy[float]:
    """Candidates for one hyperparameter: [0, 1] for a default in it, 0.1x to 10x a positive
    default, else within 10 of it (the agent's own checks then keep the valid ones)."""
    if 0.0 <= default <= 1.0:
        return hs.floats(0.0, 1.0, width=32)
    if default > 0.0 and np.isfinite(default):
        return hs.floats(-1.0, 1.0).map(lambda e: float(np.float32(default * 10.0**e)))
    if not np.isfinite(default):
        return hs.just(default)
    return hs.floats(default - 10.0, default + 10.0, width=32)


@_random_kept
@hs.composite
def hyperparameters(draw, agent: AbstractAgent, paths: tuple[str, ...] | None = None) -> dict[str, float]:
    """Values for the agent's hyperparameters (`agent.hyperparameters()`, or only `paths`)
    within their documented ranges: drawn around each default and kept when the agent,
    rebuilt with them (`eqxrl.core.set_paths`, which runs its checks), accepts them.
    Apply them with `eqxrl.core.set_paths(agent, values)` (or draw `agents(agent)`)."""
    current = agent.hyperparameters()
    names = tuple(current) if paths is None else tuple(paths)
    values: dict[str, float] = {}
    for name in names:
        if np.ndim(current[name]) != 0:
            continue  # (a stacked population's vector: set it through its members)
        candidates = _values_near(float(current[name]))

        def valid(value: float, name: str = name) -> bool:
            try:
                _build(set_paths, agent, {**values, name: value})
            except ValueError:
                return False
            return True

        values[name] = draw(candidates.filter(valid))
    return values


@_random_kept
def agents(agent: AbstractAgent, paths: tuple[str, ...] | None = None) -> hs.SearchStrategy[AbstractAgent]:
    """`agent` with hyperparameters drawn by `hyperparameters(agent, paths)`."""
    return hyperparameters(agent, paths).map(lambda values: _build(set_paths, agent, values))
