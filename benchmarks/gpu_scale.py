"""The PPO and SAC comparisons at GPU scale: runnable as is on a GPU machine, same tables as on CPU.

Two parts, each written by the script that owns the comparison, with GPU-scale settings:

- ``ppo``: ``ppo_cartpole.py`` (eqxrl's PPO vs ``rejax.PPO`` on gymnax CartPole-v1, PureJaxRL's
  hyperparameters) at 2048 envs x 128 steps per rollout and 32 minibatches per epoch: 1 seed, and a
  batch of seeds in one program; compile time, env steps/s, final returns. Record:
  ``benchmarks/results/gpu_ppo_cartpole.md``.
- ``sac``: ``offpolicy_throughput.py --pairs ant`` (eqxrl's SAC vs brax's own SAC trainer on brax
  ant, brax's published ant settings: 128 envs, 64 gradient updates of 512 samples per env step of
  all envs, 2^20 replay). Record: ``benchmarks/results/gpu_sac_ant.md``.

    python benchmarks/gpu_scale.py                 # both parts (~15 min on one H100)
    python benchmarks/gpu_scale.py --part ppo      # one part
    python benchmarks/gpu_scale.py --quick         # smoke test, a few minutes
    python benchmarks/gpu_scale.py --part ppo --purejaxrl DIR   # PPO, PureJaxRL too (a checkout of it)

On a CPU the script runs too (slowly; ``--quick`` to check it); the records say which device ran.
Each record's header gives the jax backend and device (``Report.header``).
"""

from __future__ import annotations

import _report  # noqa: F401  (eqxrl's persistent compilation cache off: cold compiles)

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import offpolicy_throughput  # noqa: E402
import ppo_cartpole  # noqa: E402

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")


def ppo_args(a) -> list[str]:
    if a.quick:
        steps, seeds, seed_steps, runs = 2**20, 2, 2**19, 1
    else:
        steps, seeds, seed_steps, runs = 2**26, 8, 2**23, a.runs
    return [
        "--num-envs", "2048", "--num-minibatches", "32", "--runs", str(runs), "--steps", str(steps),
        "--seeds", str(seeds), "--seed-steps", str(seed_steps), "--return-seeds", str(min(seeds, 4)),
        "--return-steps", str(seed_steps), "--out", a.ppo_out,
    ] + (["--purejaxrl", a.purejaxrl] if a.purejaxrl else [])  # fmt: skip


def sac_args(a) -> list[str]:
    steps = 16_384 if a.quick else a.ant_steps
    return [
        "--pairs", "ant", "--ant-steps", str(steps), "--runs", str(1 if a.quick else a.runs),
        "--brax-backend", a.brax_backend, "--out", a.sac_out,
    ]  # fmt: skip


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--part", choices=("ppo", "sac", "both"), default="both")
    p.add_argument("--runs", type=int, default=3, help="timed runs per cell (medians)")
    p.add_argument("--quick", action="store_true", help="smoke test: 1 run, small budgets")
    p.add_argument("--ant-steps", type=int, default=131_072, help="env steps per SAC ant run")
    p.add_argument("--brax-backend", default="generalized", help="brax physics backend for both SAC sides")
    p.add_argument("--purejaxrl", metavar="DIR", default=None, help="ppo part: also PureJaxRL (ppo_cartpole.py's option)")
    p.add_argument("--ppo-out", default=os.path.join(RESULTS, "gpu_ppo_cartpole.md"))
    p.add_argument("--sac-out", default=os.path.join(RESULTS, "gpu_sac_ant.md"))
    a = p.parse_args(argv)
    if a.runs < 1:
        p.error("--runs must be >= 1")
    if a.part in ("ppo", "both"):
        ppo_cartpole.main(ppo_args(a))
    if a.part in ("sac", "both"):
        offpolicy_throughput.main(sac_args(a))


if __name__ == "__main__":
    main()
