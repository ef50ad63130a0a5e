"""What the progress bar costs a run: PPO on CartPole-v1 (PureJaxRL's configuration).

Arms, interleaved in one process so load hits them alike (each arm's program is
compiled on its first run; later runs reuse it, and only training time is compared):

- `no bar, one chunk`: `eqxrl.train(progress=False)`, the whole run one compiled
  program (`train`'s default without a bar or a callback);
- `no bar, 50 chunks`: `progress=False, chunk_iterations=` the bar's chunk length:
  the host round trips between chunks without drawing anything;
- `bar`: `progress=True` (the default, ~50 chunks, redrawn at most every 0.1 s,
  drawn to a discarded stream);
- `command line`: what `eqxrl train ppo` runs: `eqxrl.runs.train_run` with its
  bar, into a run directory (config, metrics, final checkpoint).

Also measured: the fixed cost of one chunk call, i.e. the compiled chunk called with every
iteration past the budget (each skipped by its `cond`): what each of the bar's ~50 host
round trips adds to the run, whatever the load (process CPU and wall, min and median of
200 calls).

Reported: the median training seconds (`TrainInfo.run_seconds`: compile excluded),
each arm's ratio to `no bar, one chunk`, env steps per second, and the process CPU
seconds of the training (medians of `--runs`). The issue's target: the bar under 5%
of the run.

Run ``python benchmarks/progress_overhead.py`` (about 4 minutes on 2 cores) or
``--quick``; writes ``benchmarks/results/progress_overhead.md``.
"""

from __future__ import annotations

import contextlib
import io
import math
import resource
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import jax

import eqxrl
from _report import Report, parser, table
from eqxrl.agents import PPO
from eqxrl.runs import train_run


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def agent() -> PPO:
    # PureJaxRL's CartPole configuration (as benchmarks/ppo_cartpole.py).
    return PPO("CartPole-v1", anneal_lr=False, grad_clip="value")


def run_arm(name: str, total: int, seed: int, root: Path) -> tuple[float, float]:
    """One run of an arm: `(training seconds, process CPU seconds of the whole call)`."""
    a, key = agent(), jax.random.key(seed)
    bar_chunk = math.ceil(total // a.steps_per_iteration / 50)
    sink = io.StringIO()  # the bar is drawn (tqdm writes to stderr), then thrown away
    c0 = _cpu()
    with contextlib.redirect_stderr(sink):
        if name == "no bar, one chunk":
            info = eqxrl.train(a, key, total, progress=False, return_info=True)[2]
        elif name == "no bar, 50 chunks":
            info = eqxrl.train(a, key, total, progress=False, chunk_iterations=bar_chunk, return_info=True)[2]
        elif name == "bar":
            info = eqxrl.train(a, key, total, progress=True, return_info=True)[2]
        else:
            run_dir = root / f"run-{seed}"
            info = train_run(run_dir, a, total_steps=total, seed=seed, progress=True)[2]
            shutil.rmtree(run_dir)
    return info.run_seconds, _cpu() - c0


def chunk_call_cost(total: int, calls: int = 200) -> dict[str, float]:
    """Seconds of one call of a run's chunk program whose iterations are all skipped (start past
    the budget): dispatch, the launch of the executable and its `cond`s, the state's buffers."""
    from eqxrl.loop._chunk import compile_chunk, run_init  # the loop's internals, for this figure only
    from eqxrl.loop._keys import as_keys, batch_and_keys
    from eqxrl.loop._pure import TrainFunction

    a = agent()
    batch, key = batch_and_keys(a, as_keys(jax.random.key(0)))
    pure = TrainFunction(a, total // a.steps_per_iteration, 0, 10)
    length = math.ceil(pure.num_iterations / 50)
    state = run_init(batch, key)
    program = compile_chunk(pure.chunk_config(key, 0, length, False, None), state)
    leaves = program.leaves(state)
    walls, cpus = [], []
    for _ in range(calls):
        t, c = time.perf_counter(), _cpu()
        leaves, _ = program(pure.num_iterations, leaves)
        jax.block_until_ready(leaves)
        walls.append(time.perf_counter() - t)
        cpus.append(_cpu() - c)
    return {"wall min": min(walls), "wall median": statistics.median(walls), "cpu min": min(cpus), "cpu median": statistics.median(cpus)}


ARMS = ("no bar, one chunk", "no bar, 50 chunks", "bar", "command line")


def main(argv=None) -> None:
    p = parser(__doc__, "progress_overhead", runs=5, quick="2 runs of 65,536 steps (a smoke test)")
    p.add_argument("--total-steps", type=int, default=524_288)
    a = p.parse_args(argv)
    report = Report(__file__, argv)
    runs, total = (2, 65_536) if a.quick else (a.runs, a.total_steps)
    seconds = {arm: [] for arm in ARMS}
    cpu = {arm: [] for arm in ARMS}
    root = Path(tempfile.mkdtemp(prefix="eqxrl-progress-bench-"))
    try:
        for arm in ARMS:  # compile every arm once, untimed
            run_arm(arm, total, 0, root)
        for r in range(runs):
            for arm in ARMS:
                s, c = run_arm(arm, total, r + 1, root)
                seconds[arm].append(s)
                cpu[arm].append(c)
                print(f"run {r + 1}/{runs} {arm}: {s:.2f} s, {c:.2f} CPU-s", flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    fixed = chunk_call_cost(total)
    base = statistics.median(seconds[ARMS[0]])
    rows = []
    for arm in ARMS:
        t = statistics.median(seconds[arm])
        rows.append([arm, f"{t:.2f}", f"{t / base:.3f}", f"{total / t:,.0f}", f"{statistics.median(cpu[arm]):.2f}"])
    lines = report.header("Progress bar overhead (PPO CartPole-v1, PureJaxRL's configuration)")
    lines += [
        f"- {total:,} env steps per run (4 envs x 128 steps per iteration), {runs} timed runs per arm, arms "
        "interleaved, medians; each arm compiled once before (untimed)",
        "",
        *table(["arm", "training s", "ratio to one chunk", "env steps/s", "process CPU-s"], rows),
        "",
        f"One chunk call with every iteration skipped (the fixed cost of a host round trip): wall "
        f"{1e3 * fixed['wall min']:.2f} ms min, {1e3 * fixed['wall median']:.2f} ms median; process CPU "
        f"{1e3 * fixed['cpu min']:.2f} ms min, {1e3 * fixed['cpu median']:.2f} ms median. The bar's ~50 round trips "
        f"so add about {50 * fixed['wall median']:.2f} s to a run of {base:.2f} s without a bar "
        f"({50 * fixed['wall median'] / base:.1%}).",
        "",
        "Per-run training seconds: " + "; ".join(f"{arm}: " + ", ".join(f"{s:.2f}" for s in seconds[arm]) for arm in ARMS),
    ]
    report.emit("\n".join(lines) + "\n", a.out)


if __name__ == "__main__":
    main()
