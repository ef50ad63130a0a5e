"""Compile time of PPO's programs, MLP (CartPole), CNN (Breakout-MinAtar) and recurrent (GRU,
CartPoleNoVel), cold (compilation cache off), and whether XLA's one switch that trims its LLVM work
(`--xla_llvm_disable_expensive_passes=true`) changes it.

Each run is a fresh process that builds the agent with its defaults (the CNN arm:
`actor_torso=critic_torso=CNNTorso.minatar()`; the recurrent arm: `PPO.from_preset("recurrent")`)
and calls `eqxrl.train` for a few iterations, printing `TrainInfo.compile_seconds` (the `init` and
chunk programs, compiled concurrently) and the env steps/s after compile. Runs are interleaved
(arm by arm, flag off then on) and medians reported. Where the time goes inside XLA, for one run:
`TF_CPP_MIN_LOG_LEVEL=0 TF_CPP_VMODULE=cpu_compiler=1,hlo_pass_pipeline=1` prints its timers.

    python benchmarks/compile_profile.py               # 3 runs per cell, about 2 minutes on 2 cores
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

from _report import Report, median, parser, table

FLAG = "--xla_llvm_disable_expensive_passes=true"
SCRIPT = """
import sys, jax, eqxrl
from eqxrl.agents import PPO
from eqxrl.components import CNNTorso
arm = sys.argv[1]
if arm == "cnn":
    agent = PPO("Breakout-MinAtar", actor_torso=CNNTorso.minatar(), critic_torso=CNNTorso.minatar())
elif arm == "recurrent":
    agent = PPO.from_preset("recurrent", "CartPoleNoVel-v1")
else:
    agent = PPO("CartPole-v1")
_, _, info = eqxrl.train(agent, jax.random.key(0), agent.steps_per_iteration * 16, progress=False, return_info=True)
print(f"compile {info.compile_seconds:.3f} sps {info.steps_per_second:.1f}")
"""
ARMS = {"mlp": "PPO MLP, CartPole-v1", "cnn": "PPO CNN (CNNTorso.minatar), Breakout-MinAtar", "recurrent": "PPO GRU, CartPoleNoVel-v1"}


def run(arm: str, flag: bool) -> tuple[float, float]:
    env = {**os.environ, "EQXRL_COMPILE_CACHE": "off", "XLA_FLAGS": (os.environ.get("XLA_FLAGS", "") + (" " + FLAG if flag else "")).strip()}
    out = subprocess.run([sys.executable, "-c", SCRIPT, arm], env=env, capture_output=True, text=True, check=True).stdout
    m = re.search(r"compile ([\d.]+) sps ([\d.]+)", out)
    assert m, out
    return float(m.group(1)), float(m.group(2))


def main() -> None:
    args = parser(__doc__, "compile_profile", runs=3).parse_args()
    report = Report(__file__)
    results: dict[tuple[str, bool], list[tuple[float, float]]] = {}
    for _ in range(args.runs):
        for arm in ARMS:
            for flag in (False, True):
                results.setdefault((arm, flag), []).append(run(arm, flag))
                print(arm, "flag" if flag else "default", results[arm, flag][-1], flush=True)
    rows = []
    for arm, label in ARMS.items():
        base, trimmed = results[arm, False], results[arm, True]
        c0, c1 = median(c for c, _ in base), median(c for c, _ in trimmed)
        s0, s1 = median(s for _, s in base), median(s for _, s in trimmed)
        runs = "; ".join(f"{c:.2f}" for c, _ in base) + " / " + "; ".join(f"{c:.2f}" for c, _ in trimmed)
        rows.append([label, f"{c0:.2f}", f"{c1:.2f}", f"{c1 / c0:.2f}", f"{s0:,.0f}", f"{s1:,.0f}", f"{s1 / s0:.2f}", runs])
    lines = report.header("Compile time of PPO's programs (cache off), and XLA's LLVM switch")
    lines += ["", f"Medians of {args.runs} interleaved runs, each a fresh process; 16 iterations of each agent's defaults.", ""]
    lines += table(
        ["arm", "compile (s)", f"with `{FLAG}`", "ratio", "env steps/s", "with the flag", "ratio", "compile per run (default / flag)"],
        rows,
        "lrrrrrrl",
    )
    report.emit("\n".join(lines) + "\n", args.out)


if __name__ == "__main__":
    main()
