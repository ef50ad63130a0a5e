"""eqxrl's default of one CPU device per core (issue 35) against one device, and the scaling curve.

Each configuration runs in its own process (the device count is fixed when JAX's backend starts):
`EQXRL_CPU_DEVICES=1` (JAX's own default of one CPU device), eqxrl's default (`auto`: one per
available core) and, for the curve, forced counts (`EQXRL_CPU_DEVICES=N`). The arms are
interleaved run by run (1, auto, 1, auto, ...) so that load on the machine hits them alike, and
each figure is the median over `--runs`. Measured per process through `eqxrl.train`:

- PPO CartPole at PureJaxRL's configuration (`ppo_cartpole.py`'s `make_eqxrl("purejaxrl")`):
  1 seed x `--steps` (single runs must not get slower) and `--seeds` seeds x `--seed-steps`;
- SAC Pendulum (defaults): 1 seed and 8 seeds x `--sac-steps` (0: skipped).

Figures: training env steps per second (compile excluded), compile seconds, the whole call's
wall seconds, and the process's CPU seconds for the call (user + system, all threads).

Run `python benchmarks/cpu_devices.py` (about 15 minutes on 2 cores; `--quick`: a smoke test).
Writes `benchmarks/results/cpu_devices.md`.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _report import Report  # noqa: E402


def worker(agent: str, seeds: int, steps: int) -> dict:
    """One timed `eqxrl.train` in this process; its figures as a dict."""
    import jax

    import eqxrl

    if agent == "ppo":
        from ppo_cartpole import make_eqxrl

        made = make_eqxrl("purejaxrl")
    else:
        made = eqxrl.agents.SAC("Pendulum-v1")
    key = jax.random.key(0) if seeds == 1 else jax.random.split(jax.random.key(0), seeds)
    usage = lambda: sum(resource.getrusage(resource.RUSAGE_SELF)[:2])  # noqa: E731
    cpu0, t0 = usage(), time.perf_counter()
    state, _, info = eqxrl.train(made, key, steps, progress=False, return_info=True)
    jax.block_until_ready(state)
    wall, cpu = time.perf_counter() - t0, usage() - cpu0
    return dict(devices=jax.device_count(), sps=info.steps_per_second, compile=info.compile_seconds,
                run=info.run_seconds, wall=wall, cpu=cpu)  # fmt: skip


def run_one(devices: str, agent: str, seeds: int, steps: int) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS" or "device_count" not in v}
    env["EQXRL_CPU_DEVICES"] = devices
    out = subprocess.run(
        [sys.executable, __file__, "--worker", agent, str(seeds), str(steps)], env=env, capture_output=True, text=True,
        timeout=1800,
    )  # fmt: skip
    if out.returncode != 0:
        raise RuntimeError(out.stderr[-3000:])
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--steps", type=int, default=2**19, help="PPO env steps of one seed")
    p.add_argument("--seeds", type=int, default=32)
    p.add_argument("--seed-steps", type=int, default=2**16, help="PPO env steps per seed of the batch")
    p.add_argument("--sac-steps", type=int, default=4_000, help="SAC env steps per seed (0: no SAC rows)")
    p.add_argument("--curve", default="1,2,4,8", help="forced device counts for the scaling curve (PPO batch)")
    p.add_argument("--quick", action="store_true")
    p.add_argument("--out", default=str(HERE / "results" / "cpu_devices.md"))
    a = p.parse_args(argv)
    if a.quick:
        a.runs, a.steps, a.seeds, a.seed_steps, a.sac_steps, a.curve = 1, 2**14, 4, 2**13, 2_000, "1,2"
    report = Report(__file__, sys.argv[1:] if argv is None else argv)
    cases = [("ppo", 1, a.steps), ("ppo", a.seeds, a.seed_steps)]
    if a.sac_steps:  # (0: PPO only; SAC's default run is update-bound: 10,000 steps of 1 seed take ~55 s here)
        cases += [("sac", 1, a.sac_steps), ("sac", 8, a.sac_steps)]
    rows = []
    for agent, seeds, steps in cases:
        got: dict[str, list[dict]] = {"1": [], "auto": []}
        for _ in range(a.runs):
            for devices in got:
                got[devices].append(run_one(devices, agent, seeds, steps))
                print(agent, seeds, devices, got[devices][-1], flush=True)
        rows.append((agent, seeds, steps, got))
    curve = []
    for n in [c.strip() for c in a.curve.split(",") if c.strip()]:
        runs = [run_one(n, "ppo", a.seeds, a.seed_steps) for _ in range(a.runs)]
        print("curve", n, runs, flush=True)
        curve.append((n, runs))

    med = lambda runs, k: statistics.median(r[k] for r in runs)  # noqa: E731
    lines = report.header("One CPU device per core (eqxrl's default) against one device")
    lines += [
        "",
        f"Medians of {a.runs} runs per arm, arms interleaved, each run its own process (`EQXRL_CPU_DEVICES`).",
        "sps: training env steps per wall second, compile excluded; wall: the whole `eqxrl.train` call;",
        "CPU: the process's user + system seconds for that call.",
        "",
        "| run | devices | sps | compile (s) | wall (s) | CPU (s) | sps ratio (auto / 1) | wall ratio (1 / auto) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for agent, seeds, steps, got in rows:
        one, auto = got["1"], got["auto"]
        label = f"{agent.upper()} {seeds} seed{'s' if seeds > 1 else ''} x {steps:,}"
        for name, runs in (("1", one), ("auto", auto)):
            ratio = (f"{med(auto, 'sps') / med(one, 'sps'):.2f}", f"{med(one, 'wall') / med(auto, 'wall'):.2f}") if name == "auto" else ("", "")
            lines.append(
                f"| {label} | {runs[0]['devices']} ({name}) | {med(runs, 'sps'):,.0f} | {med(runs, 'compile'):.1f} | "
                f"{med(runs, 'wall'):.1f} | {med(runs, 'cpu'):.1f} | {ratio[0]} | {ratio[1]} |"
            )
    lines += [
        "",
        f"Scaling curve: PPO, {a.seeds} seeds x {a.seed_steps:,} steps, forced device counts (this machine has "
        f"{os.cpu_count()} cores: counts above it only split the work finer).",
        "",
        "| devices | sps | compile (s) | wall (s) | CPU (s) |",
        "|---:|---:|---:|---:|---:|",
    ]
    for n, runs in curve:
        lines.append(f"| {n} | {med(runs, 'sps'):,.0f} | {med(runs, 'compile'):.1f} | {med(runs, 'wall'):.1f} | {med(runs, 'cpu'):.1f} |")
    report.emit("\n".join(lines) + "\n", "-" if a.quick else a.out)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        print(json.dumps(worker(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))))
    else:
        main()
