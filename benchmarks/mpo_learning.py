"""Learning criterion of MPO on Pendulum-v1.

The criterion: seeds trained together in one program from
``jax.random.split(jax.random.key(--seed), --seeds)`` for 1e5 env steps each;
the mean return of deterministic evaluation (the policy's mean action) over 16
episodes reaches >= -250 on at least 3 of 4 seeds (``ceil(3 N / 4)`` of N).

The config is ``CONFIG`` below (64x64 networks: the 256x256 default is about
10x slower on CPU; every other hyperparameter is MPO's default). The script
prints per-seed returns, pass/fail, compile time, training wall time and env
steps/s, and writes a Markdown record to ``benchmarks/results/mpo_learning.md``.

Run ``python benchmarks/mpo_learning.py`` (about 15 minutes on 2 busy CPU cores).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import math
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import jax
import numpy as np

import eqxrl
from _common import _git_rev, _nproc, _versions  # (benchmarks/ is the script's directory)
from eqxrl.agents import MPO

ENV = "Pendulum-v1"
CONFIG: dict = dict(hidden_sizes=(64, 64))
TOTAL_STEPS = 100_000
THRESHOLD = -250.0
EVAL_EPISODES = 16


def required_passes(num_seeds: int) -> int:
    return math.ceil(3 * num_seeds / 4)


def _all_fields(agent) -> str:
    """Every hyperparameter of the agent (defaults included), for the record."""
    out = []
    for f in dataclasses.fields(agent):
        if f.name == "env":
            continue
        v = getattr(agent, f.name)
        if getattr(v, "shape", None) == ():
            v = float(v)
        out.append(f"{f.name}={v:g}" if isinstance(v, float) else f"{f.name}={v!r}")
    return ", ".join(out)


def _curve(metrics: dict, key: str, points: int = 10) -> list[list[float]]:
    """Per seed, the mean of `key` over `points` equal slices of training (NaN-aware)."""
    x = np.asarray(metrics[key], np.float64)
    out = []
    for row in x:
        chunks = np.array_split(row, points)
        out.append([float(np.nanmean(c)) if np.isfinite(c).any() else float("nan") for c in chunks])
    return out


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", type=int, default=4, help="seeds, trained in one program")
    p.add_argument("--seed", type=int, default=0, help="base seed (keys are split from jax.random.key(seed))")
    p.add_argument("--steps", type=int, default=TOTAL_STEPS, help="env steps per seed")
    p.add_argument(
        "--out",
        type=Path,
        default=Path(__file__).resolve().parent / "results" / "mpo_learning.md",
        help="where to write the Markdown record ('-' for nowhere)",
    )
    a = p.parse_args(argv)
    if a.seeds < 1:
        p.error("--seeds must be >= 1")

    t_start = time.perf_counter()
    print(f"jax {jax.__version__} on {jax.default_backend()}, {os.cpu_count()} CPUs", flush=True)
    agent = MPO(ENV, **CONFIG)
    print(f"MPO({ENV!r}, {CONFIG}), {a.steps:,} steps x {a.seeds} seeds", flush=True)
    keys = jax.random.split(jax.random.key(a.seed), a.seeds)
    state, metrics, info = eqxrl.train(agent, keys, a.steps, progress=False, return_info=True)
    jax.block_until_ready(state)
    returns = np.asarray(eqxrl.evaluate(agent, state, jax.random.key(a.seed + 1), num_episodes=EVAL_EPISODES))
    per_seed = returns.mean(axis=1)
    steps_per_seed = int(np.asarray(state.env_steps).reshape(-1)[0])
    passes = int(np.sum(per_seed >= THRESHOLD))
    need = required_passes(a.seeds)
    passed = passes >= need
    elapsed = time.perf_counter() - t_start
    per = ", ".join(f"{x:.1f}" for x in per_seed)
    print(
        f"eval per seed: [{per}] (threshold {THRESHOLD:g}): {passes}/{a.seeds} seeds pass, need {need} -> "
        f"{'PASS' if passed else 'FAIL'}; compile {info.compile_seconds:.1f} s, train {info.run_seconds:.1f} s, "
        f"{info.steps_per_second:,.0f} env steps/s",
        flush=True,
    )

    curves = {k: _curve(metrics, k) for k in ("episode_return", "temperature", "kl_mean", "policy_std")}
    lines = [
        "# MPO: learning criterion on Pendulum-v1",
        "",
        f"- date: {datetime.date.today().isoformat()}",
        f"- versions: {_versions()}, Python {platform.python_version()}; eqxrl at {_git_rev()}",
        f"- machine: {jax.default_backend()} backend, nproc = {_nproc()}; shared machine, timings are noisy",
        f"- command: `{' '.join(['python', f'benchmarks/{Path(__file__).name}', *(sys.argv[1:] if argv is None else argv)])}`",
        f"- wall time of the whole benchmark: {elapsed / 60:.1f} min (compile {info.compile_seconds:.1f} s, "
        f"train {info.run_seconds:.1f} s, {info.steps_per_second:,.0f} env steps/s over all seeds)",
        f"- seeds: `jax.random.split(jax.random.key({a.seed}), {a.seeds})`, trained in one program; evaluation: "
        f"`eqxrl.evaluate(agent, states, jax.random.key({a.seed + 1}), num_episodes={EVAL_EPISODES})`, "
        "deterministic policy (the Gaussian's mean)",
        f"- criterion: mean deterministic return over {EVAL_EPISODES} episodes >= {THRESHOLD:g} after "
        f"{a.steps:,} env steps, on at least 3 of 4 seeds (here {need} of {a.seeds})",
        "",
        "| seed | eval return | pass |",
        "|---:|---:|---|",
    ]
    for i, r in enumerate(per_seed):
        lines.append(f"| {i} | {r:.1f} | {'yes' if r >= THRESHOLD else 'no'} |")
    lines += [
        "",
        f"**Result: {'PASS' if passed else 'FAIL'}** ({passes}/{a.seeds} seeds >= {THRESHOLD:g}, "
        f"need {need}; {steps_per_seed:,} env steps per seed; mean over seeds {per_seed.mean():.1f})",
        "",
        "## Config",
        "",
        f"`MPO(\"{ENV}\", {', '.join(f'{k}={v!r}' for k, v in CONFIG.items())})`; every other hyperparameter "
        "is the default:",
        "",
        f"- {_all_fields(agent)}",
        "",
        "## Training curves",
        "",
        "Per seed, means over 10 equal slices of training (episode return of the exploratory policy, "
        "temperature, measured KL of the mean, policy std):",
        "",
    ]
    for k, rows in curves.items():
        lines.append(f"- {k}:")
        for i, row in enumerate(rows):
            lines.append(f"  - seed {i}: " + ", ".join(f"{v:.4g}" for v in row))
    md = "\n".join(lines) + "\n"
    print()
    print(md)
    if str(a.out) != "-":
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(md)
        print(f"wrote {a.out}")
    if not passed:
        sys.exit(1)


if __name__ == "__main__":
    main()
