"""What checkpoints and evaluation cost a run: PPO on CartPole-v1, 300,000 env steps.

Arms (each a run directory written by `eqxrl.runs.train_run`, progress bar off):

- `none`: one checkpoint, at the end (the least a run directory writes);
- `every 10,000`: a checkpoint every 10,000 env steps;
- `every 512`: a checkpoint every iteration (4 envs x 128 steps): the chunk is one
  iteration, so every chunk is a host round trip and a checkpoint is due at each;
  checkpoints are written on a background thread and one due while the previous is
  still being written is skipped (the count written is reported);
- `eval every 10,000`: `eval_every=10_000` (32 deterministic episodes inside the
  compiled program at each), checkpoints as in `every 10,000`.

Reported: median training seconds (`TrainInfo.run_seconds`, compile excluded) over
`--runs` runs (arms interleaved so load hits them alike), the ratio of each arm's
training time to `none`'s, the compile seconds of the arm's first run (later runs
reuse the process's compiled programs), and the checkpoints written. The issue's
target: `every 512` at most 1.2x `none`. A run directory's chunk is at least 1/200 of
the run (3 iterations here), so `every 512` checkpoints at most every 3 iterations,
and no faster than the disk writes them.

Run ``python benchmarks/checkpoint_overhead.py`` (about 5 minutes on 2 shared cores)
or ``--quick``; writes ``benchmarks/results/checkpoint_overhead.md``.
"""

from __future__ import annotations

import _report  # noqa: F401  (eqxrl's persistent compilation cache off: cold compiles)

import argparse
import os
import pathlib
import shutil
import statistics
import tempfile
import time

from eqxrl.agents import PPO
from eqxrl.runs import load_config, train_run

RESULTS = pathlib.Path(__file__).parent / "results" / "checkpoint_overhead.md"


def arms(total: int) -> dict[str, dict]:
    return {
        "none": dict(checkpoint_every=total),
        "every 10,000": dict(checkpoint_every=10_000),
        "every 512": dict(checkpoint_every=512),
        "eval every 10,000": dict(checkpoint_every=10_000, eval_every=10_000),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--total-steps", type=int, default=300_000)
    parser.add_argument("--quick", action="store_true", help="one run of 30,000 steps")
    args = parser.parse_args()
    runs, total = (1, 30_000) if args.quick else (args.runs, args.total_steps)
    agent = PPO("CartPole-v1", anneal_lr=False)
    times: dict[str, list[float]] = {name: [] for name in arms(total)}
    compiles: dict[str, list[float]] = {name: [] for name in arms(total)}
    written: dict[str, list[int]] = {name: [] for name in arms(total)}
    root = pathlib.Path(tempfile.mkdtemp(prefix="eqxrl-ckpt-bench-"))
    load = os.getloadavg()[0]
    try:
        for r in range(runs):
            for name, options in arms(total).items():
                run_dir = root / f"{name.replace(' ', '_').replace(',', '')}-{r}"
                _, _, info, _ = train_run(run_dir, agent, total_steps=total, progress=False, eval_episodes=4, **options)
                times[name].append(info.run_seconds)
                compiles[name].append(info.compile_seconds)
                written[name].append(load_config(run_dir)["checkpoints"]["written"])
                shutil.rmtree(run_dir)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    base = statistics.median(times["none"])
    lines = [
        "# Checkpoint and evaluation overhead (PPO CartPole-v1)",
        "",
        f"{total:,} env steps, {runs} run(s) per arm, medians; load average {load:.1f} at the start, "
        f"{os.getloadavg()[0]:.1f} at the end ({os.cpu_count()} cores); {time.strftime('%Y-%m-%d')}.",
        "",
        "| arm | training s | ratio to none | compile s (first run) | checkpoints written |",
        "|---|---:|---:|---:|---:|",
    ]
    for name in times:
        t = statistics.median(times[name])
        lines.append(
            f"| {name} | {t:.2f} | {t / base:.2f}x | {compiles[name][0]:.1f} | {statistics.median(written[name]):.0f} |"
        )
    text = "\n".join(lines) + "\n"
    print(text)
    if not args.quick:
        RESULTS.parent.mkdir(exist_ok=True)
        RESULTS.write_text(text)


if __name__ == "__main__":
    main()
