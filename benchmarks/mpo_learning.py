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

import sys

import numpy as np

from _common import learning_run, verdict_line
from _report import Report, agent_fields, parser, table
from eqxrl.agents import MPO

ENV = "Pendulum-v1"
CONFIG: dict = dict(hidden_sizes=(64, 64))
TOTAL_STEPS = 100_000
THRESHOLD = -250.0
EVAL_EPISODES = 16


def _curve(metrics: dict, key: str, points: int = 10) -> list[list[float]]:
    """Per seed, the mean of `key` over `points` equal slices of training (NaN-aware)."""
    x = np.asarray(metrics[key], np.float64)
    out = []
    for row in x:
        chunks = np.array_split(row, points)
        out.append([float(np.nanmean(c)) if np.isfinite(c).any() else float("nan") for c in chunks])
    return out


def main(argv=None) -> None:
    p = parser(__doc__, "mpo_learning")
    p.add_argument("--seeds", type=int, default=4, help="seeds, trained in one program")
    p.add_argument("--seed", type=int, default=0, help="base seed (keys are split from jax.random.key(seed))")
    p.add_argument("--steps", type=int, default=TOTAL_STEPS, help="env steps per seed")
    a = p.parse_args(argv)
    if a.seeds < 1:
        p.error("--seeds must be >= 1")
    report = Report(__file__, argv)

    agent = MPO(ENV, **CONFIG)
    print(f"MPO({ENV!r}, {CONFIG}), {a.steps:,} steps x {a.seeds} seeds", flush=True)
    r = learning_run(agent, a.steps, a.seeds, a.seed, EVAL_EPISODES, THRESHOLD)
    print(verdict_line(r, THRESHOLD), flush=True)

    curves = {k: _curve(r["metrics"], k) for k in ("episode_return", "temperature", "kl_mean", "policy_std")}
    lines = report.header(
        "MPO: learning criterion on Pendulum-v1",
        wall=f" (compile {r['compile']:.1f} s, train {r['run']:.1f} s, {r['sps']:,.0f} env steps/s over all seeds)",
    )
    lines += [
        f"- seeds: `jax.random.split(jax.random.key({a.seed}), {a.seeds})`, trained in one program; evaluation: "
        f"`eqxrl.evaluate(agent, states, jax.random.key({a.seed + 1}), num_episodes={EVAL_EPISODES})`, "
        "deterministic policy (the Gaussian's mean)",
        f"- criterion: mean deterministic return over {EVAL_EPISODES} episodes >= {THRESHOLD:g} after "
        f"{a.steps:,} env steps, on at least 3 of 4 seeds (here {r['required']} of {a.seeds})",
        "",
        *table(
            ["seed", "eval return", "pass"],
            [[i, f"{x:.1f}", "yes" if x >= THRESHOLD else "no"] for i, x in enumerate(r["per_seed"])],
            "rrl",
        ),
        "",
        f"**Result: {'PASS' if r['passed'] else 'FAIL'}** ({r['passes']}/{a.seeds} seeds >= {THRESHOLD:g}, "
        f"need {r['required']}; {r['steps_per_seed']:,} env steps per seed; mean over seeds {r['per_seed'].mean():.1f})",
        "",
        "## Config",
        "",
        f"`MPO(\"{ENV}\", {', '.join(f'{k}={v!r}' for k, v in CONFIG.items())})`; every other hyperparameter "
        "is the default:",
        "",
        f"- {agent_fields(agent)}",
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
    report.emit("\n".join(lines) + "\n", a.out)
    if not r["passed"]:
        sys.exit(1)


if __name__ == "__main__":
    main()
