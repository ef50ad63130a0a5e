"""What recording videos costs a run: `eqxrl train` of PPO on CartPole-v1 (its default budget,
500,000 env steps, one seed) with and without `--record-every` at its default interval (a video of
one deterministic episode at each quarter of the run, drawn on a background thread).

Each arm is the whole command in a fresh process (`python -m eqxrl train ... --quiet`, its own run
directory, the compilation cache off so that both arms compile alike), the arms interleaved so that
load hits them alike. Reported: the medians over `--runs` of the command's wall time and CPU time
(user + system of the process and its children, ffmpeg included), and of the training time
`config.json` records (`TrainInfo.run_seconds`, compile excluded), with the ratio of each to the
arm without recording. The issue's target: under 5% at the default interval.

Run ``python benchmarks/record_overhead.py`` (about 4 minutes on 2 shared cores) or ``--quick``;
writes ``benchmarks/results/record_overhead.md``. The machine may be shared: the load average at
the start and at the end is in the record.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

RESULTS = pathlib.Path(__file__).parent / "results" / "record_overhead.md"
ROOT = pathlib.Path(__file__).resolve().parent.parent
ARMS = {"no recording": [], "--record-every (default)": ["--record-every"]}


def run(run_dir: pathlib.Path, flags: list[str], total: int) -> tuple[float, float, float, dict]:
    argv = [sys.executable, "-m", "eqxrl", "train", "ppo", "--env", "CartPole-v1", "--total-steps", str(total),
            "--run-dir", str(run_dir), "--quiet", "--no-compile-cache", *flags]  # fmt: skip
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(argv, check=True, cwd=ROOT, capture_output=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    config = json.loads((run_dir / "config.json").read_text())
    return wall, cpu, config["timings"]["run_seconds"], config.get("videos", {})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--total-steps", type=int, default=500_000)
    parser.add_argument("--quick", action="store_true", help="one run of 100,000 steps")
    args = parser.parse_args()
    runs, total = (1, 100_000) if args.quick else (args.runs, args.total_steps)
    rows: dict[str, list[tuple[float, float, float, dict]]] = {name: [] for name in ARMS}
    root = pathlib.Path(tempfile.mkdtemp(prefix="eqxrl-record-bench-"))
    load = os.getloadavg()
    try:
        for r in range(runs):
            for name, flags in ARMS.items():
                rows[name].append(run(root / f"{len(flags)}-{r}", flags, total))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    med = {name: [statistics.median(x[i] for x in rows[name]) for i in range(3)] for name in ARMS}
    base = med["no recording"]
    lines = [
        "# Recording overhead (PPO CartPole-v1, `eqxrl train --record-every`)",
        "",
        f"{total:,} env steps, 1 seed, {runs} run(s) per arm (interleaved), medians; each run the whole command in a "
        f"fresh process, compilation cache off. Load average {load[0]:.2f} at the start, {os.getloadavg()[0]:.2f} "
        f"at the end ({os.cpu_count()} cores, shared with another user's jobs); {time.strftime('%Y-%m-%d')}.",
        "",
        "| arm | wall s | ratio | CPU s | ratio | training s | ratio | videos written / skipped |",
        "|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for name in ARMS:
        m = med[name]
        videos = rows[name][-1][3]
        written = f"{videos['written']} / {videos['skipped']}" if videos else "-"
        lines.append(
            f"| {name} | {m[0]:.1f} | {m[0] / base[0]:.3f}x | {m[1]:.1f} | {m[1] / base[1]:.3f}x | "
            f"{m[2]:.2f} | {m[2] / base[2]:.3f}x | {written} |"
        )
    lines += ["", "Each run (wall s, CPU s, training s):", ""]
    for name in ARMS:
        lines.append(f"- {name}: " + "; ".join(f"{w:.1f}, {c:.1f}, {t:.2f}" for w, c, t, _ in rows[name]))
    text = "\n".join(lines) + "\n"
    print(text)
    if not args.quick:
        RESULTS.parent.mkdir(exist_ok=True)
        RESULTS.write_text(text)


if __name__ == "__main__":
    main()
