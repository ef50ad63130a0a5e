"""`train`: a run as a sequence of compiled chunks, with the host shell around them
(progress bar, callbacks, resume, the non-finite guard's report)."""

import math
import time
from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, PyTree

from ..core import Key, check_positive_int, nanmean
from ._chunk import compile_chunk, compile_train, member_sharding, run_chunk, run_init, shard_state
from ._padding import devices_padding, on_one_device, pad_members, padded_batch
from ._keys import as_keys, batch_and_keys, eval_iterations_for, num_iterations_for
from ._pure import TrainFunction
from ._progress import Progress
from ._results import Checkpoint, HostMetrics, LazyMetrics, NonFiniteError, TrainInfo, listing, nonfinite_report

__all__ = ["train"]


def _chunk_length(num_iterations: int, total_steps: int, chunk_iterations: Any, resume: Any, many: bool) -> int:
    if resume is not None:
        if not isinstance(resume, Checkpoint):
            raise ValueError(f"train(resume) must be a Checkpoint, got {type(resume).__name__}")
        if resume.iteration > num_iterations:
            raise ValueError(
                f"train(resume): the checkpoint is {resume.iteration} iterations into its run, past this call's "
                f"{num_iterations} (total_steps={total_steps}): give a budget of at least the checkpoint's"
            )
        if chunk_iterations is not None and chunk_iterations != resume.chunk_iterations:
            raise ValueError(
                f"train(chunk_iterations={chunk_iterations}) must equal the checkpoint's {resume.chunk_iterations}"
            )
        chunk_iterations = resume.chunk_iterations
    if chunk_iterations is None:
        # Each chunk costs a host round trip (a few ms); without a progress bar
        # or a callback to serve, one chunk is fastest.
        chunk_iterations = max(1, math.ceil(num_iterations / 50)) if many else num_iterations
    check_positive_int("train", "chunk_iterations", chunk_iterations)
    return min(chunk_iterations, num_iterations)


def train(
    agent: Any,
    key: Key | Array | int,
    total_steps: int,
    *,
    progress: bool = True,
    chunk_iterations: int | None = None,
    return_info: bool = False,
    desc: str | None = None,
    nan_guard: bool = False,
    callback: Any = None,
    resume: Any = None,
    eval_every: Any = None,
    eval_episodes: Any = 10,
    shard: Any = None,
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
    - `callback`: a function, or a list of them, called with a `Checkpoint` after
      every chunk (e.g. to save it; `StopAtReturn`, `EvalLogger`). Its state is
      donated to the next chunk: save it, or keep `checkpoint.copy()`. A callback
      that returns `True` stops training after that chunk (every callback of the
      list is still called for it): `train` returns the state and the metrics of
      the iterations done, and `TrainInfo.stopped_at` says how many.
    - `resume`: a `Checkpoint` of an earlier call with the same agent and key;
      training continues from it exactly as the uninterrupted call would. A larger
      `total_steps` than the checkpoint's run continues it to the new budget (a
      finished run too): the clock's `num_iterations` becomes the new total, so
      progress-based schedules (`LinearSchedule`, DQN's epsilon, PER's beta) go on
      from `iteration / new_total`, as if the run had been planned that long from
      the checkpoint on; with constant rates, N steps then M more equal N + M steps.
    - `eval_every`: env steps per member (rounded down to whole iterations) between
      deterministic evaluations inside the compiled program: after every such
      iteration, `eval_episodes` episodes of `agent.eval_env` (as `eqxrl.evaluate`,
      with the key `eqxrl.loop.eval_key_at(key, iteration)`), their mean logged as the
      metric `eval_return` (NaN on the other rows). Training is unchanged by it.
    - `shard`: spread a batch of seeds or a sweep over all devices (`jax.devices()`;
      eqxrl makes one CPU device per available core, `eqxrl.core.configure_cpu_devices`),
      members split along a one-axis mesh as PBT splits its population. None (default)
      or True: whenever there is more than one device (a batch that is not a multiple
      of their count is padded with copies of its first member, whose results are
      dropped); False: one device. The numbers are those of a one-device run up to
      float rounding (members never interact). One run is not split. The state
      returned is on one device (callbacks see it sharded): eager ops across CPU
      devices, a mean over the members leaf by leaf, can deadlock XLA:CPU.

    **Returns:** `(state, metrics)` (and `info`): the final training state and a
    dict of per-iteration NumPy arrays (`env_steps`, `episode_return`, losses,
    `approx_kl`, `entropy`, ..., and `eval_return` with `eval_every`), shape
    `(num_iterations,)` or `(batch, num_iterations)` for seeds and sweeps.
    """
    key = as_keys(key)
    batch, key = batch_and_keys(agent, key)
    # The numbers are make_train's: the same batch, budget and chunk program; this
    # function adds the host shell (compiling ahead, progress, callbacks, resume).
    num_iterations = num_iterations_for("train", agent, total_steps)
    every = eval_iterations_for("train", agent, total_steps, eval_every, eval_episodes)
    callbacks = _callbacks(callback)
    pure = TrainFunction(agent, num_iterations, every, int(eval_episodes))
    per_iter = batch.agent.steps_per_iteration
    num_iterations = pure.num_iterations
    length = _chunk_length(num_iterations, total_steps, chunk_iterations, resume, progress or bool(callbacks))
    done_before = 0 if resume is None else resume.iteration
    # Chunks start where the run stands (a continued run's need not fall on multiples of `length`).
    starts = list(range(done_before, num_iterations, length))

    guard = bool(nan_guard)
    # A batch that does not divide by the device count is padded with copies of member 0,
    # whose rows are dropped from everything the caller sees (state, metrics, callbacks).
    members = batch.num_members
    pad = devices_padding(batch, shard)
    kept = members if pad else None  # (the rows kept of what the program returns: None, all)
    batch, key = padded_batch(batch, key, pad)
    if pad and batch.stacked:
        pure = eqx.tree_at(lambda p: p.agent, pure, batch.unwrap())
    sharding = member_sharding(batch, shard)
    visible = (lambda state: on_one_device(state, kept)) if pad else (lambda state: state)  # noqa: E731
    config = lambda start: pure.chunk_config(key, start, length, guard, sharding)  # noqa: E731
    t0 = time.perf_counter()
    if resume is None:
        program = compile_train(batch, key, config(0), run_chunk)
        compile_seconds = time.perf_counter() - t0
        state = shard_state(run_init(batch, key), sharding)
        before: dict[str, np.ndarray] = {}
    else:
        state = jax.tree.map(lambda x: jnp.asarray(x).copy() if eqx.is_array(x) else x, resume.state)  # (donated below)
        state = shard_state(pad_members(state, pad), sharding)
        program = compile_chunk(config(starts[0] if starts else done_before), state, run_chunk)
        compile_seconds = time.perf_counter() - t0
        before = dict(resume.metrics)

    bar = Progress(num_iterations * per_iter, enabled=progress, desc=desc or f"{batch.name} {batch.agent.env.name}",
                   initial=done_before * per_iter)  # fmt: skip
    # Each chunk's metrics cross to the host once, into arrays of the run's length
    # (a callback's `Checkpoint.metrics` is a view of the rows done, not a copy).
    host = HostMetrics(num_iterations, before, done_before, batch.batched, kept)
    t0 = time.perf_counter()
    last_good: Checkpoint | None = resume
    last_eval = math.nan
    done_iters = done_before
    stopped_at: int | None = None

    bar_from, bar_time = done_before, -math.inf
    leaves = program.leaves(state)  # the loop passes array leaves (FlatChunk: no per-call partition)
    try:
        for start in starts:
            leaves, metrics = program(start, leaves)
            host.add(metrics, start)
            done_iters = min(start + length, num_iterations)
            if guard and bool(np.asarray(metrics["nonfinite"]).any()):
                by_iteration = host.iterations_first(done_iters)
                row = int(np.argmax(np.asarray(metrics["nonfinite"])))
                it = start + row  # 0-based
                steps_at = (it + 1) * per_iter
                quantities = nonfinite_report(on_one_device(program.state(leaves), kept), by_iteration, it, batch.batched)
                raise NonFiniteError(
                    f"training stopped: non-finite values after iteration {it + 1} of {num_iterations} "
                    f"(env step {steps_at:,} per member): {listing(quantities)}",
                    it + 1, steps_at, quantities, last_good,
                )
            # The bar is redrawn at most every 0.1 s (and at the end): a redraw brings the
            # metrics to the host, which waits for the chunk; between redraws chunks queue up.
            if progress and (time.perf_counter() - bar_time >= 0.1 or done_iters == num_iterations):
                rows = host.iterations_first(done_iters)
                recent = rows["episode_return"][bar_from:done_iters]
                shown = {"ret": f"{nanmean(recent):.1f}"}
                if every:
                    evals = rows["eval_return"][bar_from:done_iters]
                    evaluated = np.isfinite(evals).reshape(len(evals), -1).any(axis=1)
                    if evaluated.any():
                        last_eval = nanmean(evals[np.nonzero(evaluated)[0][-1]])
                    if not math.isnan(last_eval):
                        shown["eval"] = f"{last_eval:.1f}"  # the latest evaluation, beside the training return
                bar.update(done_iters * per_iter, show_rate=True, **shown)
                bar_from, bar_time = done_iters, time.perf_counter()
            if callbacks:
                # (the metrics come to the host only if a callback looks at them)
                last_good = Checkpoint(visible(program.state(leaves)), done_iters, num_iterations, length, LazyMetrics(host, done_iters))
                # Every callback sees every chunk; any of them returning True stops the run.
                stop = [_wants_stop(call(last_good)) for call in callbacks]
                if any(stop) and done_iters < num_iterations:
                    stopped_at = done_iters
                    break
        # The state handed back is on one device (eager ops across CPU devices can deadlock:
        # on_one_device); callbacks see a sharded run's state as it is, sharded.
        state = on_one_device(program.state(leaves), kept) if sharding is not None else program.state(leaves)
        out = host.view(done_iters)
    finally:
        bar.close()
    run_seconds = time.perf_counter() - t0

    if not return_info:
        return state, out
    env_steps = (done_iters - done_before) * per_iter * members
    info = TrainInfo(
        compile_seconds=compile_seconds,
        run_seconds=run_seconds,
        env_steps=env_steps,
        steps_per_second=env_steps / max(run_seconds, 1e-9),
        num_iterations=num_iterations,
        total_env_steps=done_iters * per_iter * members,
        stopped_at=stopped_at,
    )
    return state, out, info


def _callbacks(callback: Any) -> list[Callable[[Checkpoint], Any]]:
    """`train(callback)` as a list: None, one callable, or a list/tuple of callables."""
    if callback is None:
        return []
    calls = list(callback) if isinstance(callback, (list, tuple)) else [callback]
    for call in calls:
        if not callable(call):
            raise ValueError(
                "train(callback) must be a callable f(checkpoint) or a list of them (e.g. [StopAtReturn(475.0), "
                f"EvalLogger()]), got {type(call).__name__} {call!r}"
            )
    return calls


def _wants_stop(result: Any) -> bool:
    """A callback stops training by returning True (None or False: go on)."""
    return isinstance(result, (bool, np.bool_)) and bool(result)
