"""The compiled programs of a run: `init` and the training *chunk* (a `lax.scan` over
a fixed number of iterations, with the optional non-finite guard).

Both are traceable functions (`init_state`, `chunk`) with `eqx.filter_jit`
versions (`run_init`, `run_chunk`); PBT traces the same `chunk` into its generation.
"""

import concurrent.futures
import functools
from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P
from jaxtyping import Array, Int, PyTree

from ..agents import Batch, Clock
from ..components import BufferState
from ._evaluate import episode_returns
from ._keys import eval_key_at

__all__ = ["MEMBER_AXIS", "REQUIRED_METRICS", "Chunk", "FlatChunk", "check_metrics", "chunk", "compile_train", "guarded_leaves", "init_state", "devices_padding", "member_sharding", "pad_members", "padded_batch", "placeholder", "run_chunk", "run_init", "shard_state", "unpad_members"]


class Chunk(eqx.Module):
    """One compiled chunk's configuration: what runs, from which iteration, for how long.

    - `batch`: the agent(s) and how the state is batched.
    - `start`: the first iteration of the chunk; `num_iterations`: the run's total
      (iterations at or past it are skipped, so the last chunk is the same program).
    - `length`: iterations per chunk (static: a new length compiles a new program).
    - `guard`: stop at the first non-finite state or metric (see `train(nan_guard=)`).
    - `eval_every`: iterations between deterministic evaluations (0: none; see
      `train(eval_every=)`), each of `eval_episodes` episodes cut at `eval_max_steps`
      steps, keyed by `eval_key_at(eval_keys, iteration)` (`eval_keys`: the run's key,
      or one per member).
    - `sharding`: the member axis's sharding over devices (`member_sharding`), or None
      (one device); the state keeps it through every iteration.
    """

    batch: Batch
    start: Int[Array | np.ndarray, ""]  # NumPy from `train` (nothing dispatched per chunk)
    num_iterations: Int[Array | np.ndarray, ""]
    length: int = eqx.field(static=True)
    guard: bool = eqx.field(static=True, default=False)
    eval_every: int = eqx.field(static=True, default=0)
    eval_episodes: int = eqx.field(static=True, default=10)
    eval_max_steps: int = eqx.field(static=True, default=10_000)
    eval_keys: Any = None
    sharding: Any = eqx.field(static=True, default=None)


MEMBER_AXIS = "members"
"""The mesh axis name of `member_sharding` (seeds or sweep members)."""


def member_sharding(batch: Batch, shard: Any = None, owner: str = "train") -> NamedSharding | None:
    """The sharding of a batch's member axis over all devices (`jax.devices()`), as PBT
    shards its population.

    - `shard=None` (automatic) or True: shard a batch of seeds or a sweep whose size is a
      multiple of the device count, when there is more than one device (`train` pads a
      batch to a multiple first: `devices_padding`).
    - `shard=False`, one device, or an unbatched run: None (one device).
    """
    if shard is not None and not isinstance(shard, (bool, np.bool_)):
        raise ValueError(f"{owner}(shard) must be None (automatic), True or False, got {shard!r}")
    devices = jax.devices()
    if shard is False or len(devices) == 1 or not batch.batched or batch.size % len(devices):
        return None
    return NamedSharding(Mesh(np.array(devices), (MEMBER_AXIS,)), P(MEMBER_AXIS))


def devices_padding(batch: Batch, shard: Any = None) -> int:
    """Members to add to a batch so that its size is a multiple of the device count (0 for
    one device, one run, `shard=False` or a batch that divides already)."""
    count = len(jax.devices())
    return 0 if shard is False or count == 1 or not batch.batched else -batch.size % count


def pad_members(tree: PyTree, pad: int) -> PyTree:
    """`tree` with its member axis (every array leaf with a leading axis) extended by `pad`
    copies of member 0; scalars (shared by every member) as they are."""
    if not pad:
        return tree
    grow = lambda x: jnp.concatenate([x, jnp.repeat(x[:1], pad, axis=0)]) if eqx.is_array(x) and x.ndim else x  # noqa: E731
    return jax.tree.map(grow, tree)


def unpad_members(tree: PyTree, size: int, axis: int = 0) -> PyTree:
    """`tree` with its member axis (at `axis` of every array leaf that has it) cut to `size`."""
    cut = lambda x: jax.lax.slice_in_dim(x, 0, size, axis=axis) if eqx.is_array(x) and x.ndim > axis else x  # noqa: E731
    return jax.tree.map(cut, tree)


def padded_batch(batch: Batch, keys: Array, pad: int) -> tuple[Batch, Array]:
    """The batch and its keys with `pad` more members, copies of member 0 (their results are
    dropped: members never interact, so the others' numbers are those of the batch alone)."""
    if not pad:
        return batch, keys
    agent = pad_members(batch.agent, pad) if batch.stacked else batch.agent
    return Batch(agent, batch.size + pad, batch.stacked), pad_members(keys, pad)


def _replicated(sharding: NamedSharding) -> NamedSharding:
    return NamedSharding(sharding.mesh, P())


def shard_state(state: PyTree, sharding: NamedSharding | None) -> PyTree:
    """`state` (every array leaf member-leading) placed with `sharding` (None: as it is)."""
    if sharding is None:
        return state
    return jax.tree.map(lambda x: jax.device_put(x, sharding if x.ndim else _replicated(sharding)) if eqx.is_array(x) else x, state)


def _shard_config(config: "Chunk") -> "Chunk":
    """The chunk configuration's arrays placed for `config.sharding`: a sweep's stacked
    hyperparameters and per-member evaluation keys along the member axis, the rest
    replicated."""
    sharding = config.sharding
    if sharding is None:
        return config
    rep = _replicated(sharding)
    put = lambda tree, members: jax.tree.map(  # noqa: E731
        lambda x: jax.device_put(x, sharding if members and x.ndim else rep) if eqx.is_array(x) else x, tree
    )
    batch = eqx.tree_at(lambda b: b.agent, config.batch, put(config.batch.agent, config.batch.stacked))
    keys = config.eval_keys
    return eqx.tree_at(
        lambda c: (c.batch, c.eval_keys), config, (batch, put(keys, True)), is_leaf=lambda x: x is None
    )


def _constrain(state: PyTree, sharding: NamedSharding | None) -> PyTree:
    if sharding is None:
        return state
    return jax.tree.map(lambda x: jax.lax.with_sharding_constraint(x, sharding) if eqx.is_array(x) and x.ndim else x, state)


def _is_buffer(x: Any) -> bool:
    return isinstance(x, BufferState)


def guarded_leaves(state: PyTree) -> list[tuple[Any, Array, bool]]:
    """`(path, leaf, inf_allowed)` for every floating leaf the non-finite guard checks.

    Replay buffers are skipped (scanning them every iteration would cost more than
    the iteration); an optimizer's injected hyperparameters may be infinite
    (`max_grad_norm=inf` disables clipping), so only NaN counts there.
    """
    pruned = jax.tree.map(lambda x: None if _is_buffer(x) else x, state, is_leaf=_is_buffer)
    out = []
    for path, leaf in jax.tree_util.tree_flatten_with_path(pruned)[0]:
        if eqx.is_inexact_array(leaf):
            inf_allowed = any(getattr(k, "name", getattr(k, "key", None)) == "hyperparams" for k in path)
            out.append((path, leaf, inf_allowed))
    return out


def _all_finite(state: PyTree) -> Array:
    """Whether the guarded leaves of `state` hold no NaN (and no Inf where Inf is not allowed)."""
    checks = [jnp.all(~jnp.isnan(x) if inf_ok else jnp.isfinite(x)) for _, x, inf_ok in guarded_leaves(state)]
    return jnp.all(jnp.stack(checks)) if checks else jnp.asarray(True)


REQUIRED_METRICS = ("env_steps", "episode_return")
"""Metrics every `train_iteration` returns: the loop, the progress bar, run directories
and PBT read them."""


def check_metrics(batch: Batch, metrics: Any) -> None:
    """The metrics contract, checked once when an iteration is traced (for `train`,
    `make_train` and PBT alike): a dict of scalars (one per member of a batch) that
    includes `env_steps` and `episode_return`. Raises a `ValueError` naming the metric."""
    owner = f"{batch.name}.train_iteration"
    if not isinstance(metrics, dict):
        raise ValueError(f"{owner} must return (state, metrics) with metrics a dict of scalars, got {type(metrics).__name__}")
    missing = [k for k in REQUIRED_METRICS if k not in metrics]
    if missing:
        raise ValueError(
            f"{owner} must return the metrics {list(REQUIRED_METRICS)} (episode_return: mean return of the episodes "
            f"finished in the iteration, NaN if none); missing {missing}, got {sorted(metrics)}"
        )
    shape = (batch.size,) if batch.batched else ()
    for name, value in metrics.items():
        if not isinstance(name, str) or not hasattr(value, "shape") or tuple(value.shape) != shape:
            got = tuple(value.shape) if hasattr(value, "shape") else type(value).__name__
            raise ValueError(f"{owner}: metric {name!r} must be a scalar per run, got shape {got}")


def chunk(config: Chunk, state: PyTree) -> tuple[PyTree, dict[str, Array]]:
    """Run `config.length` training iterations (traceable).

    **Returns:** `(state, metrics)`, metrics with a leading iteration axis
    (skipped iterations are NaN, or 0 for integer metrics), plus `nonfinite`
    per iteration when guarded, and `eval_return` with `config.eval_every`: the mean
    deterministic evaluation return after each `eval_every`-th iteration of the run,
    NaN on the other rows. The evaluation only reads the state (its keys are not the
    state's), so the training numbers are those of the same chunk without it.
    """
    iteration = config.batch.vmap(lambda a, s, clock: a.train_iteration(s, clock))
    evaluation = config.batch.vmap(
        lambda a, s, k, _: jnp.mean(episode_returns(a, s, k, config.eval_episodes, True, config.eval_max_steps))
    )
    eval_shape = (config.batch.size,) if config.batch.batched else ()

    def body(carry, i):
        state, stopped = carry
        state = _constrain(state, config.sharding)  # members stay on their devices
        clock = Clock(jnp.asarray(config.start) + i, jnp.asarray(config.num_iterations))
        # A nested jit: `eval_shape` traces it once and `cond` reuses that trace
        # (tracing a whole iteration twice was a third of the compile time).
        run = jax.jit(lambda s: iteration(s, shared=clock))
        metrics_shape = jax.eval_shape(run, state)[1]
        check_metrics(config.batch, metrics_shape)

        def skip(s):
            blank = lambda m: jnp.full(m.shape, jnp.nan if jnp.issubdtype(m.dtype, jnp.floating) else 0, m.dtype)  # noqa: E731
            return s, jax.tree.map(blank, metrics_shape)

        # The last chunk may run past the budget: those iterations are skipped
        # (and, with the non-finite guard, every iteration after a non-finite one).
        # The predicate is unbatched, so this is a real branch even for seeds.
        active = (clock.iteration < config.num_iterations) & ~stopped
        state, metrics = jax.lax.cond(active, run, skip, state)
        if config.guard:
            inf_metric = jnp.any(jnp.stack([jnp.any(jnp.isinf(m)) for m in jax.tree.leaves(metrics) if eqx.is_inexact_array(m)]))
            bad = active & (~_all_finite(state) | inf_metric)
            metrics = dict(metrics, nonfinite=bad)
            stopped = stopped | bad
        if config.eval_every:
            done = clock.iteration + 1
            due = active & (done % config.eval_every == 0) & ~stopped
            returns = jax.lax.cond(
                due,
                lambda s: evaluation(s, eval_key_at(config.eval_keys, done)).astype(jnp.float32),
                lambda s: jnp.full(eval_shape, jnp.nan, jnp.float32),
                state,
            )
            metrics = dict(metrics, eval_return=returns)
        return (_constrain(state, config.sharding), stopped), metrics

    steps = jnp.arange(config.length, dtype=jnp.int32)
    (state, _), metrics = jax.lax.scan(body, (state, jnp.asarray(False)), steps)
    return state, metrics


run_chunk = eqx.filter_jit(chunk, donate="all-except-first")
"""`chunk`, compiled; the state is donated (no copy per chunk)."""


def init_state(batch: Batch, keys: Array) -> PyTree:
    """The batch's initial training state (traceable): `agent.init(key)` per member.

    Members are initialised one after the other (`lax.map`), not vmapped: a
    vmapped MPO init (batched partitionable-threefry draws next to each other)
    deadlocked XLA's CPU runtime at jax 0.10.2, and init is cheap anyway.
    """
    if not batch.batched:
        state = batch.agent.init(keys)
    else:
        arrays, static = eqx.partition(batch.agent, eqx.is_array)

        def one(xs):
            member_arrays, key = xs
            member = eqx.combine(member_arrays, static) if batch.stacked else batch.agent
            return eqx.filter(member.init(key), eqx.is_array)

        shape = eqx.filter_eval_shape(batch.member(0).init, keys[0])
        data = jax.lax.map(one, (arrays if batch.stacked else None, keys))
        state = eqx.combine(data, eqx.filter(shape, eqx.is_array, inverse=True))
    # Strong dtypes only (gymnax's step counter starts as a weak int): the
    # chunk is compiled ahead of time from these shapes and must accept them.
    return jax.tree.map(lambda x: jnp.asarray(x, x.dtype) if eqx.is_array(x) else x, state)


run_init = eqx.filter_jit(init_state)
"""`init_state`, compiled."""


def placeholder(shapes: PyTree, key: Array) -> PyTree:
    """Zeros with the shapes and dtypes of `shapes` (PRNG keys of `key`'s implementation)."""
    impl = jax.random.key_impl(key)
    key_data = jax.random.key_data(key).shape[key.ndim :]

    def make(s):
        # NumPy zeros: `jnp.zeros` would compile a small program per shape.
        if not isinstance(s, jax.ShapeDtypeStruct):
            return s
        if jax.dtypes.issubdtype(s.dtype, jax.dtypes.prng_key):
            return jax.random.wrap_key_data(np.zeros(s.shape + key_data, np.uint32), impl=impl)
        return np.zeros(s.shape, s.dtype)

    return jax.tree.map(make, shapes)


class _Hashed:
    """A static argument whose hash is computed once (jit hashes its static arguments per call)."""

    __slots__ = ("value", "hash")

    def __init__(self, value: Any):
        self.value = value
        self.hash = hash(value)

    def __hash__(self) -> int:
        return self.hash

    def __eq__(self, other: Any) -> bool:
        return self is other or (isinstance(other, _Hashed) and self.hash == other.hash and self.value == other.value)


def _merge(static: tuple, dynamic: list) -> list:
    arrays = iter(dynamic)
    return [next(arrays) if leaf is None else leaf for leaf in static]


@functools.partial(jax.jit, static_argnums=0, donate_argnums=2)
def _flat_chunk(static: _Hashed, config_leaves: list, state_leaves: list) -> tuple[list, dict[str, Array]]:
    fn, config_def, config_static, state_def, state_static = static.value
    config = jax.tree.unflatten(config_def, _merge(config_static, config_leaves))
    state = jax.tree.unflatten(state_def, _merge(state_static, state_leaves))
    state, metrics = fn(config, state)  # `run_chunk`: a nested jit, inlined
    return [x for x in jax.tree.leaves(state) if eqx.is_array(x)], metrics


class FlatChunk:
    """`run_chunk` for one run's chunk configuration and state structure, called with the
    state's array leaves (`train`'s loop between chunks).

    `eqx.filter_jit` partitions its whole argument (agent included) on every call,
    a few ms of host time per chunk; here that is done once: the configuration's
    leaves are kept, only `start` changes, and the program is a plain `jax.jit`
    whose static part (the trees' structure and non-array leaves, hashed once) is
    one argument. Same program, same numbers as `run_chunk`.

    **Arguments:** a `Chunk` (any `start`), the state (or a `placeholder` of it), and
    `fn`, the chunk function to trace (default `run_chunk`).
    """

    def __init__(self, config: Chunk, state: PyTree, fn: Callable | None = None):
        config = _shard_config(config)
        self.sharding = config.sharding
        config_leaves, config_def = jax.tree.flatten(config)
        paths = [path for path, _ in jax.tree_util.tree_flatten_with_path(config)[0]]
        dynamic = [i for i, leaf in enumerate(config_leaves) if eqx.is_array(leaf)]
        self.start_index = [paths[i] for i in dynamic].index((jax.tree_util.GetAttrKey("start"),))
        self.config_leaves = [config_leaves[i] for i in dynamic]
        state_leaves, self.state_def = jax.tree.flatten(state)
        self.state_static = tuple(None if eqx.is_array(leaf) else leaf for leaf in state_leaves)
        config_static = tuple(None if eqx.is_array(leaf) else leaf for leaf in config_leaves)
        self.static = _Hashed((run_chunk if fn is None else fn, config_def, config_static, self.state_def, self.state_static))

    def leaves(self, state: PyTree) -> list:
        """The array leaves of `state` (what a call takes and returns)."""
        return [x for x in jax.tree.leaves(state) if eqx.is_array(x)]

    def state(self, leaves: list) -> PyTree:
        """The state whose array leaves are `leaves`."""
        return jax.tree.unflatten(self.state_def, _merge(self.state_static, leaves))

    def _config(self, start: int) -> list:
        leaves = list(self.config_leaves)
        leaves[self.start_index] = np.asarray(start, np.int32)
        return leaves

    def lower(self, state_leaves: list, start: int = 0) -> Any:
        """The chunk lowered for these leaves (`.compile()` puts it in JAX's cache); with a
        member sharding, for the leaves placed that way."""
        if self.sharding is not None:
            rep = _replicated(self.sharding)
            state_leaves = [
                jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=self.sharding if x.ndim else rep) for x in state_leaves
            ]
        return _flat_chunk.lower(self.static, self._config(start), state_leaves)

    def __call__(self, start: int, state_leaves: list) -> tuple[list, dict[str, Array]]:
        """Run the chunk from iteration `start`; the leaves are donated. **Returns:** `(leaves, metrics)`."""
        return _flat_chunk(self.static, self._config(start), state_leaves)


def compile_chunk(config: Chunk, state: PyTree, fn: Callable | None = None) -> FlatChunk:
    """**Returns:** the `FlatChunk` of `config` for `state`, compiled (a resumed run's chunk)."""
    program = FlatChunk(config, state, fn)
    program.lower(program.leaves(state)).compile()
    return program


def compile_train(batch: Batch, keys: Array, config: Chunk, fn: Callable | None = None) -> FlatChunk:
    """Compile `init` and the training chunk concurrently (XLA releases the GIL).

    The chunk is lowered against a placeholder of the state's shapes, so it need
    not wait for `init` to run. Both executables land in JAX's cache; the calls
    that follow are ordinary jitted calls, so a shape mismatch could only cost a
    recompile, never a wrong result.

    **Returns:** the chunk as a `FlatChunk` (`fn`: the chunk function, default `run_chunk`).
    """
    shapes = eqx.filter_eval_shape(init_state, batch, keys)
    like = placeholder(shapes, keys)
    program = FlatChunk(config, like, fn)
    lowered_chunk = program.lower(program.leaves(like))
    lowered_init = run_init.lower(batch, keys)
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        init_done = pool.submit(lowered_init.compile)
        lowered_chunk.compile()
        init_done.result()
    return program
