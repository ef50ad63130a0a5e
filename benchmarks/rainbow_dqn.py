"""Rainbow against DQN, both eqxrl's `DQN`, on gymnax Breakout-MinAtar with the MinAtar CNN: final greedy
returns of 5 seeds at equal env steps, wall and CPU time.

Arms (every field not named is DQN's default; `TORSO` is ``CNNTorso.minatar()``, conv 16x3x3 and dense
128, Young & Tian 2019):

- **dqn**: ``DQN(ENV, critic_torso=TORSO)``: DQN's defaults (double Q-learning, 10 envs, 0.5 updates per
  env step of batch 256, buffer 50,000, 5,000 random steps first, epsilon 1 -> 0.05 over half the run);
- **rainbow**: the same plus docs/agents/dqn.md's Rainbow composition, ``head="dueling_categorical",
  noisy=True, double=True, prioritized=True, n_step=3, eps_start=0, eps_end=0`` (C51's support at DQN's
  default ``[v_min, v_max] = [-10, 10]``, 51 atoms; noisy nets explore, not epsilon).

Each arm trains the 5 seeds ``jax.random.split(jax.random.key(--seed), 5)`` in one program
(``eqxrl.train``; ``TrainInfo``'s compile and run, process CPU over the same spans), JAX's caches
cleared before it; arms alternate (``--runs`` > 1 repeats them in the other order; returns from the
first run, times medians). Evaluation: ``eqxrl.evaluate(deterministic=True)``, 32 episodes per seed
(Breakout's 1,000-step limit), the same key for both arms.

**Budget.** MinAtar agents are normally trained for 5-10M env steps; on 2 shared CPU cores (load
~6) the CNN DQN makes about 100 env steps/s for its 5 seeds once updates start (0.5 updates of batch
256 per env step; measured: 10,000 steps per seed in 253 s), so ``--steps`` (default 15,000 per seed,
5,000 of them the random warm-up) is a tiny fraction of that: the comparison is of early learning,
stated in the record. On a GPU machine pass a larger ``--steps``.

**Target** (issue 33): Rainbow's median final return >= DQN's median - 5% of the task's return range;
Breakout-MinAtar has no fixed maximum, so the range is [uniform-random policy's mean return, best
per-seed return of this run] (the random policy through ``pqn_rejax.py``'s evaluation loop).

Run ``python benchmarks/rainbow_dqn.py`` (``--steps``, ``--env``).
"""

from __future__ import annotations

import sys

import eqxrl  # noqa: F401  (first, so that it chooses its CPU devices, one per core: its default)
import jax
import numpy as np

from _common import fresh_caches, time_train, turn_order
from _report import Report, agent_fields, median, parser, table

SEEDS = 5
EVAL_EPISODES = 32
RAINBOW = dict(head="dueling_categorical", noisy=True, double=True, prioritized=True, n_step=3, eps_start=0.0, eps_end=0.0)


def make(arm: str, env_id: str):
    from eqxrl.agents import DQN
    from eqxrl.components import CNNTorso

    extra = RAINBOW if arm == "rainbow" else {}
    return DQN(env_id, critic_torso=CNNTorso.minatar(), **extra)


def run_arm(arm: str, env_id: str, steps: int, keys, eval_every: int | None = None) -> tuple[object, object, dict]:
    agent = make(arm, env_id)
    extra = {}
    if eval_every:  # an in-training greedy evaluation curve, printed as it comes (a long GPU run's progress)
        from eqxrl.loop import EvalLogger

        extra = dict(eval_every=eval_every, eval_episodes=EVAL_EPISODES, callback=EvalLogger())
    state, info, out = time_train(agent, keys, steps, **extra)
    out["steps"] = int(np.sum(np.asarray(state.env_steps)))
    return agent, state, out


def main(argv=None) -> None:
    report = Report(__file__, argv)
    p = parser(__doc__, "rainbow_dqn", runs=1)
    p.add_argument("--steps", type=int, default=15_000, help="env steps per seed (default 15,000)")
    p.add_argument("--env", default="Breakout-MinAtar")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--seeds", type=int, default=SEEDS, help=f"seeds per arm, trained in one program (default {SEEDS})")
    p.add_argument("--arms", default="dqn,rainbow", help="comma-separated among dqn, rainbow (one arm: no target line)")
    p.add_argument("--eval-every", type=int, default=None, help="env steps per seed between in-training evaluations")
    args = p.parse_args(argv)
    keys = jax.random.split(jax.random.key(args.seed), args.seeds)
    eval_key = jax.random.key(args.seed + 1)

    arms = args.arms.split(",")
    assert arms and set(arms) <= {"dqn", "rainbow"}, arms
    runs = {a: [] for a in arms}
    per_seed = {}
    for run in range(args.runs):
        for arm in turn_order(run, arms):
            fresh_caches()
            agent, state, out = run_arm(arm, args.env, args.steps, keys, args.eval_every)
            runs[arm].append(out)
            print(
                f"run {run} {arm}: compile {out['compile']:.1f} s, train {out['run']:.1f} s (cpu {out['compile_cpu']:.1f} "
                f"+ {out['run_cpu']:.1f} s), {out['steps'] / out['run']:,.0f} env steps/s", flush=True,
            )  # fmt: skip
            if run == 0:
                r = np.asarray(eqxrl.evaluate(agent, state, eval_key, num_episodes=EVAL_EPISODES, deterministic=True))
                per_seed[arm] = r.mean(axis=1)
                print(f"  {arm} greedy returns per seed: {np.round(per_seed[arm], 2)}", flush=True)
            del state

    from pqn_rejax import random_return

    rand = random_return(args.env, jax.random.key(args.seed + 2000))
    lo, hi = rand, float(max(np.max(v) for v in per_seed.values()))
    margin = 0.05 * (hi - lo)
    m = {a: float(np.median(per_seed[a])) for a in arms}
    both = len(arms) == 2
    n = args.steps * args.seeds

    lines = report.header(f"Rainbow vs DQN (eqxrl) on {args.env} with the MinAtar CNN")
    lines += [
        f"- budget: {args.steps:,} env steps per seed, {args.seeds} seeds (`jax.random.split(jax.random.key({args.seed}), "
        f"{args.seeds})`) in one program per arm. MinAtar runs are normally 5-10M env steps; below that this "
        "compares early learning",
        f"- evaluation: `eqxrl.evaluate(deterministic=True)`, {EVAL_EPISODES} episodes per seed, key "
        f"`jax.random.key({args.seed + 1})` for both arms",
        f"- runs: {args.runs} per arm, arms alternated, JAX caches cleared before each (cold compiles)",
        *(f"- **{a}**, every field: `DQN(ENV, {agent_fields(make(a, args.env))})`" for a in arms),
        "",
        *table(
            ["arm", "greedy return per seed", "median", "mean", "compile (s)", "train (s)", "total (s)", "compile CPU (s)",
             "train CPU (s)", "env steps/s (train)", "env steps/s (incl. compile)", "env steps / CPU s (incl. compile)"],
            [[a, ", ".join(f"{x:.2f}" for x in per_seed[a]), f"**{m[a]:.2f}**", f"{np.mean(per_seed[a]):.2f}",
              *(f"{median(r[k] for r in runs[a]):.1f}" for k in ("compile", "run", "total", "compile_cpu", "run_cpu")),
              f"{median(n / r['run'] for r in runs[a]):,.0f}", f"{median(n / r['total'] for r in runs[a]):,.0f}",
              f"{median(n / r['total_cpu'] for r in runs[a]):,.0f}"] for a in arms],
        ),  # fmt: skip
        "",
        f"- uniform-random policy: mean return {rand:.2f} (`pqn_rejax.py`'s loop, 128 episodes)",
    ]
    if both:
        ok = m["rainbow"] >= m["dqn"] - margin
        total = {k: median(r[k] for r in runs["rainbow"]) / median(r[k] for r in runs["dqn"]) for k in ("total", "total_cpu")}
        lines += [
            f"- target: Rainbow's median >= DQN's median {m['dqn']:.2f} - 5% of [{lo:.2f}, {hi:.2f}] ({margin:.2f}) = "
            f"{m['dqn'] - margin:.2f}: Rainbow {m['rainbow']:.2f}, **{'met' if ok else 'not met'}**",
            f"- wall time incl. compile, Rainbow / DQN: {total['total']:.2f}; CPU: {total['total_cpu']:.2f}",
        ]
    lines.append("")
    report.emit("\n".join(lines), args.out)


if __name__ == "__main__":
    sys.exit(main())
