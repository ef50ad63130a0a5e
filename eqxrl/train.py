"""`train` and `evaluate`: the loops shared by every agent.

A run is a sequence of compiled *chunks*: one `lax.scan` over a fixed number
of iterations, compiled once (hyperparameters are traced leaves, so changing
their values never recompiles). Between chunks the host updates the progress
bar; nothing sits on the per-step path. Seeds (a batch of keys) and sweeps
(`eqxrl.stack`) are a `filter_vmap` inside the same program.
"""

import concurrent.futures
import dataclasses
import math
import time
from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, PyTree

from .agents import Stacked
from .core import Key
from .agents import AbstractAgent, Clock
from .envs import VectorEnv

AgentLike = AbstractAgent | Stacked


# --------------------------------------------------------------------- keys and layout
def _as_keys(key: Any, name: str = "key") -> Array:
    """Typed keys of shape `()` or `(n,)`; legacy `uint32[..., 2]` keys are wrapped."""
    if not isinstance(key, jax.Array):
        raise ValueError(
            f"{name} must be a PRNG key from jax.random.key(seed), got {type(key).__name__} {key!r}"
        )
    if not jnp.issubdtype(key.dtype, jax.dtypes.prng_key):
        if key.dtype == jnp.uint32 and key.ndim >= 1 and key.shape[-1] == 2:
            key = jax.random.wrap_key_data(key)
        else:
            raise ValueError(
                f"{name} must be a PRNG key from jax.random.key(seed) (shape () or (n,)), "
                f"got an array of dtype {key.dtype} and shape {key.shape}"
            )
    if key.ndim > 1:
        raise ValueError(f"{name} must have shape () (one run) or (n,) (n seeds), got shape {key.shape}")
    return key


class _Layout(eqx.Module):
    """How a run is batched: over nothing, over seeds, or over stacked members."""

    members: bool = eqx.field(static=True)  # agent is Stacked: vmap over agent and state
    seeds: bool = eqx.field(static=True)  # state has a leading axis

    def vmap(self, fn: Callable, agent: Any) -> Callable:
        """`fn(agent, *batched, shared)` mapped over the leading axis of each positional
        argument; the keyword `shared` reaches every member unbatched."""
        if self.members:
            inner = agent.agent
            return lambda *args, shared=None: eqx.filter_vmap(lambda a, *xs: fn(a, *xs, shared))(inner, *args)
        if self.seeds:
            return lambda *args, shared=None: eqx.filter_vmap(lambda *xs: fn(agent, *xs, shared))(*args)
        return lambda *args, shared=None: fn(agent, *args, shared)


def _layout_and_keys(agent: AgentLike, key: Array) -> tuple[_Layout, Array]:
    if isinstance(agent, Stacked):
        if key.ndim == 0:
            key = jax.random.split(key, agent.size)
        elif key.shape[0] != agent.size:
            raise ValueError(
                f"key must have shape () or ({agent.size},) to match the {agent.size} stacked agents, got {key.shape}"
            )
        return _Layout(members=True, seeds=True), key
    if not isinstance(agent, AbstractAgent):
        raise ValueError(f"agent must be an eqxrl agent or eqxrl.stack([...]), got {type(agent).__name__}")
    return _Layout(members=False, seeds=key.ndim == 1), key


def _base_agent(agent: AgentLike) -> AbstractAgent:
    return agent.agent if isinstance(agent, Stacked) else agent


# --------------------------------------------------------------------- the compiled chunk
def _is_buffer(x: Any) -> bool:
    from .components import BufferState

    return isinstance(x, BufferState)


def _guarded_leaves(state: PyTree) -> list[tuple[Any, Array, bool]]:
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
    checks = [jnp.all(~jnp.isnan(x) if inf_ok else jnp.isfinite(x)) for _, x, inf_ok in _guarded_leaves(state)]
    return jnp.all(jnp.stack(checks)) if checks else jnp.asarray(True)


def _chunk_impl(config, state):
    # Everything but the state comes first so that only the state is donated.
    agent, start, num_iterations, layout, chunk_len, *rest = config
    guard = bool(rest and rest[0])
    iteration = layout.vmap(lambda a, s, clock: a.train_iteration(s, clock), agent)

    def body(carry, i):
        state, stopped = carry
        clock = Clock(start + i, num_iterations)
        # A nested jit: `eval_shape` traces it once and `cond` reuses that trace
        # (tracing a whole iteration twice was a third of the compile time).
        run = jax.jit(lambda s: iteration(s, shared=clock))
        metrics_shape = jax.eval_shape(run, state)[1]

        def skip(s):
            blank = lambda m: jnp.full(m.shape, jnp.nan if jnp.issubdtype(m.dtype, jnp.floating) else 0, m.dtype)  # noqa: E731
            return s, jax.tree.map(blank, metrics_shape)

        # The last chunk may run past the budget: those iterations are skipped
        # (and, with the non-finite guard, every iteration after a non-finite one).
        # The predicate is unbatched, so this is a real branch even for seeds.
        active = (clock.iteration < num_iterations) & ~stopped
        state, metrics = jax.lax.cond(active, run, skip, state)
        if guard:
            inf_metric = jnp.any(jnp.stack([jnp.any(jnp.isinf(m)) for m in jax.tree.leaves(metrics) if eqx.is_inexact_array(m)]))
            bad = active & (~_all_finite(state) | inf_metric)
            metrics = dict(metrics, nonfinite=bad)
            stopped = stopped | bad
        return (state, stopped), metrics

    (state, _), metrics = jax.lax.scan(body, (state, jnp.asarray(False)), jnp.arange(chunk_len, dtype=jnp.int32))
    return state, metrics


_run_chunk = eqx.filter_jit(_chunk_impl, donate="all-except-first")


def _init_impl(agent, keys, layout: _Layout):
    if not layout.seeds:
        state = agent.init(keys)
    else:
        # Members are initialised one after the other (`lax.map`), not vmapped: a
        # vmapped MPO init (batched partitionable-threefry draws next to each other)
        # deadlocked XLA's CPU runtime at jax 0.10.2, and init is cheap anyway.
        inner = agent.agent if layout.members else agent
        arrays, static = eqx.partition(inner, eqx.is_array)
        per_member = arrays if layout.members else None

        def one(xs):
            member_arrays, key = xs
            member = eqx.combine(member_arrays, static) if layout.members else inner
            out = member.init(key)
            return eqx.filter(out, eqx.is_array)

        first = eqx.combine(jax.tree.map(lambda x: x[0], arrays), static) if layout.members else inner
        shape = eqx.filter_eval_shape(first.init, keys[0])
        data = jax.lax.map(one, (per_member, keys))
        state = eqx.combine(data, eqx.filter(shape, eqx.is_array, inverse=True))
    # Strong dtypes only (gymnax's step counter starts as a weak int): the
    # chunk is compiled ahead of time from these shapes and must accept them.
    return jax.tree.map(lambda x: jnp.asarray(x, x.dtype) if eqx.is_array(x) else x, state)


def _placeholder(shapes: PyTree, key: Array) -> PyTree:
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


def _compile(agent, key, layout: _Layout, chunk_config) -> None:
    """Compile `init` and the training chunk concurrently (XLA releases the GIL).

    The chunk is lowered against a placeholder of the state's shapes, so it need
    not wait for `init` to run. Both executables land in JAX's cache; the calls
    that follow are ordinary jitted calls, so a shape mismatch could only cost a
    recompile, never a wrong result.
    """
    shapes = eqx.filter_eval_shape(_init_impl, agent, key, layout)
    lowered_chunk = _run_chunk.lower(chunk_config, _placeholder(shapes, key))
    lowered_init = _init.lower(agent, key, layout)
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        init_done = pool.submit(lowered_init.compile)
        lowered_chunk.compile()
        init_done.result()


_init = eqx.filter_jit(_init_impl)


# --------------------------------------------------------------------- progress display
class _Progress:
    def __init__(self, total: int, enabled: bool, desc: str):
        self.bar = None
        if enabled:
            from tqdm.auto import tqdm

            self.bar = tqdm(total=total, desc=desc, unit="step", unit_scale=True, dynamic_ncols=True)
        self.start = time.perf_counter()
        self.steps = 0

    def update(self, steps: int, last_return: float) -> None:
        if self.bar is None:
            return
        self.bar.update(steps - self.steps)
        self.steps = steps
        elapsed = max(time.perf_counter() - self.start, 1e-9)
        self.bar.set_postfix(sps=f"{steps / elapsed:,.0f}", ret=f"{last_return:.1f}", refresh=False)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def _nanmean(x) -> float:
    x = np.asarray(x, dtype=np.float64)
    x = x[np.isfinite(x)]
    return float(x.mean()) if x.size else float("nan")


# --------------------------------------------------------------------- public API
class TrainInfo(eqx.Module):
    """Timings of a `train` call, returned by `train(..., return_info=True)`.

    `compile_seconds` covers tracing, lowering and compiling both programs
    (`init` and the training chunk); `run_seconds` everything after.
    """

    compile_seconds: float
    run_seconds: float
    env_steps: int
    steps_per_second: float
    num_iterations: int


@dataclasses.dataclass(frozen=True)
class Checkpoint:
    """Where a `train` call stands after a chunk: enough to continue it exactly.

    - `state`: the training state after `iteration` iterations (device arrays).
    - `iteration`: iterations done; `num_iterations`: the run's total.
    - `chunk_iterations`: the chunk length (a resumed run must use the same one).
    - `metrics`: host NumPy arrays of the iterations so far, laid out as `train` returns them.
    """

    state: PyTree
    iteration: int
    num_iterations: int
    chunk_iterations: int
    metrics: dict[str, np.ndarray]

    def copy(self) -> "Checkpoint":
        """**Returns:** a checkpoint with its own copy of the state (a callback's
        checkpoint shares its state with the next chunk, which consumes it)."""
        state = jax.tree.map(lambda x: x.copy() if isinstance(x, jax.Array) else x, self.state)
        return dataclasses.replace(self, state=state)


class NonFiniteError(ValueError):
    """Training produced NaN or Inf (raised by `train(..., nan_guard=True)`).

    Attributes: `iteration` (1-based), `env_steps` (per member, at the end of
    that iteration), `quantities` (names of the non-finite parameters, state
    leaves and metrics), and `checkpoint` (the last finite chunk boundary, to
    inspect or to continue from with other settings).
    """

    def __init__(self, message: str, iteration: int, env_steps: int, quantities: list[str], checkpoint: Checkpoint | None):
        super().__init__(message)
        self.iteration = iteration
        self.env_steps = env_steps
        self.quantities = quantities
        self.checkpoint = checkpoint


def _host_metrics(chunks: list[dict[str, Any]], num_iterations: int, seeds: bool) -> dict[str, np.ndarray]:
    if not chunks:
        return {}
    out = {k: np.concatenate([np.asarray(m[k]) for m in chunks], axis=0)[:num_iterations] for k in chunks[0]}
    out.pop("nonfinite", None)
    if seeds:
        out = {k: np.moveaxis(v, 0, 1) for k, v in out.items()}
    return out


def _join_metrics(before: dict[str, np.ndarray], after: dict[str, np.ndarray], seeds: bool) -> dict[str, np.ndarray]:
    if not before or not after:
        return after or before
    axis = 1 if seeds else 0
    return {k: np.concatenate([before[k], after[k]], axis=axis) for k in after}


def _nonfinite_report(state: PyTree, metrics: dict[str, np.ndarray], row: int, seeds: bool) -> list[str]:
    """Names of the non-finite quantities: state leaves (with the member) and metrics of `row`."""
    found = []
    for path, leaf, inf_ok in _guarded_leaves(state):
        x = np.asarray(leaf)
        bad = np.isnan(x) if inf_ok else ~np.isfinite(x)
        if bad.any():
            name = jax.tree_util.keystr(path).lstrip(".")
            if seeds and x.ndim:
                members = np.nonzero(bad.reshape(x.shape[0], -1).any(axis=1))[0].tolist()
                name += f" (member{'s' if len(members) > 1 else ''} {', '.join(map(str, members[:8]))})"
            found.append(name)
    for k, v in metrics.items():
        value = np.asarray(v)[row]
        if np.issubdtype(value.dtype, np.floating) and np.isinf(value).any():
            found.append(f"metric {k} (Inf)")
        elif np.issubdtype(value.dtype, np.floating) and np.isnan(value).any() and k not in ("episode_return", "episode_length"):
            found.append(f"metric {k} (NaN)")
    return found


def _listing(names: list[str], limit: int = 6) -> str:
    # Metrics first: the loss that went wrong is the most telling name.
    names = [n for n in names if n.startswith("metric")] + [n for n in names if not n.startswith("metric")]
    if not names:
        return "unknown"
    more = f" and {len(names) - limit} more" if len(names) > limit else ""
    return ", ".join(names[:limit]) + more


def train(
    agent: AgentLike,
    key: Key | Array | int,
    total_steps: int,
    *,
    progress: bool = True,
    chunk_iterations: int | None = None,
    return_info: bool = False,
    desc: str | None = None,
    nan_guard: bool = False,
    callback: Callable[[Checkpoint], None] | None = None,
    resume: Any = None,
) -> tuple[PyTree, dict[str, np.ndarray]] | tuple[PyTree, dict[str, np.ndarray], TrainInfo]:
    """Train an agent, a batch of seeds, or a stacked sweep.

    **Arguments:**

    - `agent`: an eqxrl agent, or `eqxrl.stack([...])` of agents (a sweep).
    - `key`: `jax.random.key(seed)` for one run; `jax.random.split(key, n)` for
      n seeds in one program (with a stack: one key per member, or one key split).
    - `total_steps`: environment-step budget; rounded down to whole iterations.
    - `progress`: show a progress bar (steps, steps/s, mean return).
    - `chunk_iterations`: iterations per compiled chunk (default: about 50 chunks
      with a progress bar or a callback, one chunk otherwise).
    - `return_info`: also return a `TrainInfo` with compile time and throughput.
    - `nan_guard`: stop at the first iteration that leaves a NaN/Inf in the state
      (parameters, optimizer state, statistics; replay buffers are not scanned)
      or an Inf in a metric, and raise `NonFiniteError` naming the quantities and
      the iteration. Later iterations of the chunk are skipped in the program.
    - `callback`: called with a `Checkpoint` after every chunk (e.g. to save it).
      Its state is donated to the next chunk: save it, or keep `checkpoint.copy()`.
    - `resume`: a `Checkpoint` of an earlier call with the same agent, key and
      budget; training continues from it exactly as the uninterrupted call would.

    **Returns:** `(state, metrics)` (and `info`): the final training state and a
    dict of per-iteration NumPy arrays (`env_steps`, `episode_return`, losses,
    `approx_kl`, `entropy`, ...), shape `(num_iterations,)` or
    `(batch, num_iterations)` for seeds and sweeps.
    """
    key = _as_keys(key)
    layout, key = _layout_and_keys(agent, key)
    base = _base_agent(agent)
    per_iter = base.steps_per_iteration
    if isinstance(total_steps, bool) or not isinstance(total_steps, (int, np.integer)):
        raise ValueError(f"train(total_steps) must be an int, got {total_steps!r}")
    num_iterations = int(total_steps) // per_iter
    if num_iterations < 1:
        raise ValueError(
            f"train(total_steps={total_steps}) must cover at least one iteration of "
            f"{type(base).__name__} ({per_iter} env steps)"
        )
    if resume is not None:
        if not isinstance(resume, Checkpoint):
            raise ValueError(f"train(resume) must be a Checkpoint, got {type(resume).__name__}")
        if resume.num_iterations != num_iterations:
            raise ValueError(
                f"train(resume): the checkpoint is of a run of {resume.num_iterations} iterations, "
                f"this call has {num_iterations} (total_steps={total_steps})"
            )
        if chunk_iterations is not None and chunk_iterations != resume.chunk_iterations:
            raise ValueError(
                f"train(chunk_iterations={chunk_iterations}) must equal the checkpoint's {resume.chunk_iterations}"
            )
        chunk_iterations = resume.chunk_iterations
    if chunk_iterations is None:
        # Each chunk costs a host round trip (a few ms); without a progress bar
        # or a callback to serve, one chunk is fastest.
        many = progress or callback is not None
        chunk_iterations = max(1, math.ceil(num_iterations / 50)) if many else num_iterations
    elif isinstance(chunk_iterations, bool) or not isinstance(chunk_iterations, int) or chunk_iterations < 1:
        raise ValueError(f"train(chunk_iterations) must be a positive int, got {chunk_iterations!r}")
    chunk_len = min(chunk_iterations, num_iterations)
    num_chunks = math.ceil(num_iterations / chunk_len)
    first_chunk = 0
    if resume is not None:
        if resume.iteration % chunk_len and resume.iteration != num_iterations:
            raise ValueError(f"train(resume): iteration {resume.iteration} is not a chunk boundary of {chunk_len}")
        first_chunk = math.ceil(resume.iteration / chunk_len)

    total_arr = jnp.asarray(num_iterations, jnp.int32)
    guard = bool(nan_guard)
    chunk_config = lambda c: (agent, jnp.asarray(c * chunk_len, jnp.int32), total_arr, layout, chunk_len, guard)  # noqa: E731
    t0 = time.perf_counter()
    if resume is None:
        _compile(agent, key, layout, chunk_config(0))
        compile_seconds = time.perf_counter() - t0
        state = _init(agent, key, layout)
        before: dict[str, np.ndarray] = {}
    else:
        state = jax.tree.map(lambda x: jnp.asarray(x).copy() if eqx.is_array(x) else x, resume.state)  # (donated below)
        _run_chunk.lower(chunk_config(first_chunk), state).compile()
        compile_seconds = time.perf_counter() - t0
        before = dict(resume.metrics)

    bar = _Progress(num_iterations * per_iter, progress, desc or f"{type(base).__name__} {base.env.name}")
    if first_chunk:
        bar.update(min(first_chunk * chunk_len, num_iterations) * per_iter, float("nan"))
    chunks: list[dict[str, Array]] = []
    t0 = time.perf_counter()
    bar.start = t0
    last_good: Checkpoint | None = resume
    try:
        for c in range(first_chunk, num_chunks):
            state, metrics = _run_chunk(chunk_config(c), state)
            chunks.append(metrics)
            done_iters = min((c + 1) * chunk_len, num_iterations)
            if guard and bool(np.asarray(metrics["nonfinite"]).any()):
                host = jax.device_get(chunks)
                so_far = _join_metrics(before, _host_metrics(host, done_iters - first_chunk * chunk_len, layout.seeds), layout.seeds)
                row = int(np.argmax(np.asarray(metrics["nonfinite"])))
                it = c * chunk_len + row  # 0-based
                steps_at = (it + 1) * per_iter
                by_iteration = {k: np.moveaxis(v, 1, 0) if layout.seeds else v for k, v in so_far.items()}
                quantities = _nonfinite_report(state, by_iteration, it, layout.seeds)
                raise NonFiniteError(
                    f"training stopped: non-finite values after iteration {it + 1} of {num_iterations} "
                    f"(env step {steps_at:,} per member): {_listing(quantities)}",
                    it + 1, steps_at, quantities, last_good,
                )
            if progress:  # only the bar's numbers come to the host between chunks
                recent = np.asarray(metrics["episode_return"])[: done_iters - c * chunk_len]
                bar.update(done_iters * per_iter, _nanmean(recent))
            if callback is not None:
                so_far = _join_metrics(before, _host_metrics(jax.device_get(chunks), done_iters - first_chunk * chunk_len, layout.seeds), layout.seeds)
                last_good = Checkpoint(state, done_iters, num_iterations, chunk_len, so_far)
                callback(last_good)
        chunks = jax.device_get(chunks)
    finally:
        bar.close()
    run_seconds = time.perf_counter() - t0

    out = _join_metrics(before, _host_metrics(chunks, num_iterations - first_chunk * chunk_len, layout.seeds), layout.seeds)
    if not return_info:
        return state, out
    batch = key.shape[0] if key.ndim else 1
    env_steps = (num_iterations - first_chunk * chunk_len) * per_iter * batch
    info = TrainInfo(
        compile_seconds=compile_seconds,
        run_seconds=run_seconds,
        env_steps=env_steps,
        steps_per_second=env_steps / max(run_seconds, 1e-9),
        num_iterations=num_iterations,
    )
    return state, out, info


def episode_returns(
    agent: AbstractAgent, state: PyTree, key: Key, num_episodes: int, deterministic: bool, max_steps: int
) -> Array:
    """One member's evaluation, traceable inside a larger program (as PBT's fitness does).

    **Returns:** the undiscounted returns of `num_episodes` episodes run in parallel
    in `agent.eval_env`, each cut at `max_steps` steps.
    """
    env = VectorEnv(agent.eval_env, num_episodes)
    reset_key, key = jax.random.split(key)
    env_state, ts = env.reset(reset_key)
    zeros = jnp.zeros((num_episodes,), jnp.float32)
    carry = (env_state, ts.obs, zeros, jnp.zeros((num_episodes,), bool), key, jnp.zeros((), jnp.int32))

    def cond(c):
        return (~jnp.all(c[3])) & (c[5] < max_steps)

    def body(c):
        env_state, obs, returns, done, key, t = c
        key, act_key, env_key = jax.random.split(key, 3)
        action = agent.act(state, obs, act_key, deterministic=deterministic)
        env_state, ts = env.step(env_key, env_state, action)
        returns = returns + jnp.where(done, 0.0, ts.reward)
        return env_state, ts.obs, returns, done | ts.done, key, t + 1

    return jax.lax.while_loop(cond, body, carry)[2]


def _evaluate_impl(agent, state, key, layout: _Layout, num_episodes: int, deterministic: bool, max_steps: int):
    def single(agent: AbstractAgent, state, key, _):
        return episode_returns(agent, state, key, num_episodes, deterministic, max_steps)

    return layout.vmap(single, agent)(state, key)


_evaluate = eqx.filter_jit(_evaluate_impl)


def _state_layout(agent: AgentLike, state: PyTree) -> _Layout:
    """Infer whether `state` is one run's or a batch's by comparing with `agent.init`'s shapes."""
    # One member's shapes: a stack's own leaves carry the member axis.
    base = agent.member(0) if isinstance(agent, Stacked) else agent
    expected = eqx.filter_eval_shape(base.init, jax.random.key(0))
    exp_leaves = jax.tree.leaves(expected)
    got_leaves = jax.tree.leaves(state)
    if len(exp_leaves) != len(got_leaves):
        raise ValueError(
            f"evaluate(state) does not match the agent: expected a {type(expected).__name__} "
            f"with {len(exp_leaves)} array leaves, got {type(state).__name__} with {len(got_leaves)}"
        )
    e0, g0 = exp_leaves[0], got_leaves[0]
    if tuple(g0.shape) == tuple(e0.shape):
        batched = False
    elif tuple(g0.shape[1:]) == tuple(e0.shape):
        batched = True
    else:
        raise ValueError(f"evaluate(state) has leaf shape {g0.shape}, expected {e0.shape} or (batch, *{e0.shape})")
    if isinstance(agent, Stacked):
        if not batched or g0.shape[0] != agent.size:
            raise ValueError(f"evaluate(state) must have a leading axis of {agent.size} for the stacked agents")
        return _Layout(members=True, seeds=True)
    return _Layout(members=False, seeds=batched)


def evaluate(
    agent: AgentLike,
    state: PyTree,
    key: Key | Array | int,
    num_episodes: int = 10,
    deterministic: bool = True,
    max_steps: int | None = None,
) -> Array:
    """Run complete evaluation episodes with a trained policy.

    **Arguments:**

    - `agent`, `state`: as returned by `train` (a batched state is evaluated per member).
    - `key`: a PRNG key (split per member when the state is batched).
    - `num_episodes`: episodes per member, run in parallel.
    - `deterministic`: act with the policy's mode (True) or sample (False).
    - `max_steps`: cap on episode length (defaults to the env's time limit, or 10,000).

    **Returns:** the undiscounted return of each episode, shape `(num_episodes,)`
    or `(batch, num_episodes)`.
    """
    key = _as_keys(key)
    if key.ndim != 0:
        raise ValueError(f"evaluate(key) must be a single key of shape (), got shape {key.shape}")
    if isinstance(num_episodes, bool) or not isinstance(num_episodes, int) or num_episodes < 1:
        raise ValueError(f"evaluate(num_episodes) must be a positive int, got {num_episodes!r}")
    layout = _state_layout(agent, state)
    base = _base_agent(agent)
    if max_steps is None:
        max_steps = base.eval_env.max_episode_steps or 10_000
    if layout.seeds:
        key = jax.random.split(key, jax.tree.leaves(state)[0].shape[0])
    return _evaluate(agent, state, key, layout, num_episodes, bool(deterministic), int(max_steps))


def _rollout_impl(agent, state, key, layout: _Layout, num_envs: int, num_steps: int, deterministic: bool):
    def single(agent: AbstractAgent, state, key, _):
        from .envs import AutoReset

        env = VectorEnv(AutoReset(agent.eval_env), num_envs)
        reset_key, key = jax.random.split(key)
        env_state, ts = env.reset(reset_key)

        def step(carry, k):
            env_state, obs = carry
            act_key, env_key = jax.random.split(k)
            action = agent.act(state, obs, act_key, deterministic=deterministic)
            env_state, ts = env.step(env_key, env_state, action)
            out = dict(obs=obs, action=action, reward=ts.reward, terminated=ts.terminated, truncated=ts.truncated)
            return (env_state, ts.obs), out

        return jax.lax.scan(step, (env_state, ts.obs), jax.random.split(key, num_steps))[1]

    return layout.vmap(single, agent)(state, key)


_rollout = eqx.filter_jit(_rollout_impl)


def rollout(
    agent: AgentLike,
    state: PyTree,
    key: Key | Array | int,
    num_steps: int,
    *,
    num_envs: int = 1,
    member: int | None = None,
    deterministic: bool = True,
) -> dict[str, np.ndarray]:
    """Run a trained policy for `num_steps` steps in `num_envs` parallel envs (episodes
    restart automatically) and return the trajectory.

    **Arguments:** `agent` and `state` as returned by `train` (a seed batch or a
    sweep: every member, or only `member`), a PRNG `key`, `num_steps`,
    `num_envs`, and `deterministic` (the policy's mode, or sampled actions).

    **Returns:** NumPy arrays `obs`, `action`, `reward`, `terminated`, `truncated`
    of shape `(num_steps, num_envs, ...)`, with a leading member axis when the
    state is batched and `member` is None.
    """
    key = _as_keys(key)
    if key.ndim != 0:
        raise ValueError(f"rollout(key) must be a single key of shape (), got shape {key.shape}")
    for name, value in (("num_steps", num_steps), ("num_envs", num_envs)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"rollout({name}) must be a positive int, got {value!r}")
    layout = _state_layout(agent, state)
    if member is not None:
        size = jax.tree.leaves(state)[0].shape[0] if layout.seeds else 1
        if not layout.seeds or not -size <= member < size:
            raise ValueError(f"rollout(member) must be in [-{size}, {size}) for a batch of {size}, got {member}"
                             if layout.seeds else "rollout(member) needs a batched state (seeds or a sweep)")
        state = jax.tree.map(lambda x: x[member], state)
        agent = agent.member(member) if isinstance(agent, Stacked) else agent
        layout = _Layout(members=False, seeds=False)
    if layout.seeds:
        key = jax.random.split(key, jax.tree.leaves(state)[0].shape[0])
    return jax.device_get(_rollout(agent, state, key, layout, num_envs, num_steps, bool(deterministic)))
