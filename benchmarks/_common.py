"""Measurement helpers the benchmark scripts share: timing (wall and process CPU), fresh JAX caches,
parameter counts, the order of interleaved runs and the seeds-pass learning criterion.

The report (header, tables, ``--out``) is ``_report.py``. Nothing here imports eqxrl at module level:
the QDax side of ``pbt_qdax.py`` runs in a virtual environment without it.
"""

from __future__ import annotations

import gc
import math
import threading
import time
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np

import _report  # noqa: F401  (its import keeps eqxrl's persistent compilation cache off: cold compiles)


def fresh_caches() -> None:
    """Clear JAX's in-memory caches (and collect), so that the next run compiles from scratch."""
    jax.clear_caches()
    gc.collect()


def turn_order(run: int, sides: Sequence[str]) -> Sequence[str]:
    """The sides in the order run `run` takes them: alternating, so that load hits all alike."""
    return sides if run % 2 == 0 else sides[::-1]


def timed(fn, *args):
    """``(fn(*args), wall seconds, process-CPU seconds)``, waiting for the result."""
    t0, c0 = time.perf_counter(), time.process_time()
    out = fn(*args)
    jax.block_until_ready(out)
    return out, time.perf_counter() - t0, time.process_time() - c0


def compile_and_run(fn, *args) -> tuple[object, dict]:
    """``jax.jit(fn).lower(*args).compile()`` (timed), then one timed call: ``(output, timings)`` with
    the keys compile, run, total and their ``_cpu`` counterparts."""
    compiled, compile_s, compile_cpu = timed(lambda: jax.jit(fn).lower(*args).compile())
    out, run, run_cpu = timed(compiled, *args)
    return out, dict(
        compile=compile_s, run=run, total=compile_s + run, compile_cpu=compile_cpu, run_cpu=run_cpu,
        total_cpu=compile_cpu + run_cpu,
    )  # fmt: skip


class CpuSampler:
    """Samples (wall clock, process CPU time) every few ms in a background thread.

    `eqxrl.train` reports wall-clock phase durations only; with these samples the process CPU time
    spent in each phase can be read off afterwards. CPU time (all threads of this process) is far less
    sensitive than wall time to other work on a shared machine.
    """

    def __init__(self, period: float = 0.005):
        self.period = period
        self.samples: list[tuple[float, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.samples.append((time.perf_counter(), time.process_time()))
            self._stop.wait(self.period)

    def __enter__(self):
        self.samples.append((time.perf_counter(), time.process_time()))
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.samples.append((time.perf_counter(), time.process_time()))

    def cpu_between(self, t0: float, t1: float) -> float:
        wall, cpu = np.asarray(self.samples).T
        return float(np.interp(t1, wall, cpu) - np.interp(t0, wall, cpu))


def time_train(agent, key, total_steps: int, **train_kwargs) -> tuple[object, object, dict]:
    """``eqxrl.train`` with its own timings: ``(state, info, timings)``. compile and run are
    ``TrainInfo``'s; their CPU seconds come from a `CpuSampler` (the run is the last `run_seconds`
    before `train` returned, only trivial host work follows it; the compile the `compile_seconds`
    before that)."""
    import eqxrl

    with CpuSampler() as cpu:
        t0 = time.perf_counter()
        state, _, info = eqxrl.train(agent, key, total_steps, progress=False, return_info=True, **train_kwargs)
        jax.block_until_ready(state)
        t3 = time.perf_counter()
    t2 = t3 - info.run_seconds
    t1 = t2 - info.compile_seconds
    return state, info, dict(
        compile=info.compile_seconds, run=info.run_seconds, total=t3 - t0, compile_cpu=cpu.cpu_between(t1, t2),
        run_cpu=cpu.cpu_between(t2, t3), total_cpu=cpu.cpu_between(t0, t3),
    )  # fmt: skip


def num_params(tree) -> int:
    """Number of floating-point parameters among the array leaves of `tree` (shapes suffice)."""
    leaves = jax.tree.leaves(tree)
    return int(sum(np.size(x) for x in leaves if hasattr(x, "dtype") and jnp.issubdtype(x.dtype, jnp.inexact)))


# ============================================================================ learning criterion
def required_passes(num_seeds: int) -> int:
    """Seeds that must pass: 3 of 4, ``ceil(3 N / 4)`` of N."""
    return math.ceil(3 * num_seeds / 4)


def learning_run(agent, total_steps: int, num_seeds: int, seed: int, eval_episodes: int, threshold: float) -> dict:
    """Train `num_seeds` seeds of `agent` in one program (keys split from ``jax.random.key(seed)``),
    evaluate each deterministically (key ``seed + 1``) and count the seeds whose mean return reaches
    `threshold`."""
    import eqxrl

    keys = jax.random.split(jax.random.key(seed), num_seeds)
    t0 = time.perf_counter()
    state, metrics, info = eqxrl.train(agent, keys, total_steps, progress=False, return_info=True)
    jax.block_until_ready(state)
    total = time.perf_counter() - t0
    returns = np.asarray(eqxrl.evaluate(agent, state, jax.random.key(seed + 1), num_episodes=eval_episodes))
    per_seed = returns.mean(axis=1)
    passes, required = int(np.sum(per_seed >= threshold)), required_passes(num_seeds)
    return dict(
        per_seed=per_seed, passes=passes, required=required, passed=passes >= required,
        steps_per_seed=int(np.asarray(state.env_steps).reshape(-1)[0]), compile=info.compile_seconds,
        run=info.run_seconds, total=total, sps=info.steps_per_second, metrics=metrics, agent=agent,
    )  # fmt: skip


def verdict_line(r: dict, threshold: float) -> str:
    """The progress line of a `learning_run`."""
    per = ", ".join(f"{x:.1f}" for x in r["per_seed"])
    return (
        f"eval per seed: [{per}] (threshold {threshold:g}): {r['passes']}/{len(r['per_seed'])} seeds pass, "
        f"need {r['required']} -> {'PASS' if r['passed'] else 'FAIL'}; compile {r['compile']:.1f} s, "
        f"train {r['run']:.1f} s, {r['sps']:,.0f} env steps/s"
    )


# ============================================================================ PBT generations
def generation_summary(
    population_size: int, total_steps: int, fitness_last, gens: list[dict], compile_s: float, exploit_s: float,
    eval_s: float,
) -> dict:
    """Per-member-step timings of a PBT run from its generations' ``{"wall", "cpu"}`` seconds, the
    shares of exploit/explore and evaluation (`exploit_s`, `eval_s`: their seconds in all) and the final
    fitness (best, median, all)."""
    f = np.asarray(fitness_last, np.float64)
    steps = population_size * total_steps
    run, run_cpu = sum(g["wall"] for g in gens), sum(g["cpu"] for g in gens)
    return dict(
        compile=compile_s, run=run, run_cpu=run_cpu, us_per_member_step=run / steps * 1e6,
        cpu_us_per_member_step=run_cpu / steps * 1e6, generation_median=float(np.median([g["wall"] for g in gens])),
        first_generation=gens[0]["wall"], exploit_s=exploit_s, eval_s=eval_s, exploit_share=exploit_s / run,
        eval_share=eval_s / run, best=float(np.nanmax(f)), median=float(np.nanmedian(f)), fitness=[float(x) for x in f],
        generations=len(gens),
    )  # fmt: skip
