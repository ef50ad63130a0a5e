"""What an agent's `init` costs: compiled with one random kernel per layer or per batch, and eager.

Each agent (default sizes: PPO and DQN on CartPole-v1, SAC, TD3 and MPO on
Pendulum-v1, DADS on Point2D-v0) is initialised in a fresh process per cell
(nothing cached, the persistent compilation cache off), the cells interleaved:

- `eager, op by op`: the agent's own `init` (`type(agent).init.__wrapped__`)
  called without `jit`, as `agent.init(key)` ran before it was compiled: every
  operation dispatched and compiled on its own;
- `compiled, a draw per layer`: the same function under `eqx.filter_jit`: one
  program with one orthogonal draw (a threefry kernel for XLA) per layer, as
  `train` compiled it before (ensembles excepted: they batch their members' draws);
- `compiled, batched draws`: `agent.init(key)` as it is: one program, the
  orthogonal weights of all layers drawn together (`batched_orthogonal`).

Reported: wall seconds of the first call (tracing, compiling and running) and its
process CPU seconds, medians over `--runs` processes; the two compiled cells are
checked to give the same weights. Run ``python benchmarks/init_compile.py``
(about 5 minutes on 2 cores); writes ``benchmarks/results/init_compile.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

from _report import Report, median, parser, table

AGENTS = ("ppo", "dqn", "sac", "td3", "mpo", "dads")
MODES = ("eager, op by op", "compiled, a draw per layer", "compiled, batched draws")


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def child(name: str, mode: str) -> None:
    """One cell in this (fresh) process: prints `{"wall": s, "cpu": s, "digest": float}`."""
    import equinox as eqx
    import jax
    import numpy as np

    from eqxrl.agents import DADS, DQN, MPO, PPO, SAC, TD3

    make = {
        "ppo": lambda: PPO("CartPole-v1"),
        "dqn": lambda: DQN("CartPole-v1"),
        "sac": lambda: SAC("Pendulum-v1"),
        "td3": lambda: TD3("Pendulum-v1"),
        "mpo": lambda: MPO("Pendulum-v1"),
        "dads": lambda: DADS("Point2D-v0"),
    }
    agent = make[name]()
    key = jax.random.key(0)
    unwrapped = type(agent).init.__wrapped__
    init = {
        MODES[0]: lambda: unwrapped(agent, key),
        MODES[1]: lambda: eqx.filter_jit(unwrapped)(agent, key),
        MODES[2]: lambda: agent.init(key),
    }[mode]
    t, c = time.perf_counter(), _cpu()
    state = jax.block_until_ready(init())
    wall, cpu = time.perf_counter() - t, _cpu() - c
    floats = [np.asarray(x, np.float64) for x in jax.tree.leaves(eqx.filter(state, eqx.is_inexact_array))]
    digest = float(sum(np.sum(x * (1 + np.arange(x.size).reshape(x.shape) % 7)) for x in floats))
    print(json.dumps({"wall": wall, "cpu": cpu, "digest": digest}))


def cell(name: str, mode: str) -> dict:
    env = dict(os.environ, EQXRL_COMPILE_CACHE="off", JAX_ENABLE_COMPILATION_CACHE="false")
    out = subprocess.run(
        [sys.executable, __file__, "--child", name, mode], env=env, capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv=None) -> None:
    p = parser(__doc__, "init_compile", runs=3)
    p.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.child:
        child(*a.child)
        return
    report = Report(__file__, argv)
    results: dict[tuple[str, str], list[dict]] = {(n, m): [] for n in AGENTS for m in MODES}
    for r in range(a.runs):
        for n in AGENTS:
            for m in MODES:
                res = cell(n, m)
                results[n, m].append(res)
                print(f"run {r + 1}/{a.runs} {n} {m}: {res['wall']:.2f} s, {res['cpu']:.2f} CPU-s", flush=True)
    rows = []
    for n in AGENTS:
        per_layer, batched = results[n, MODES[1]], results[n, MODES[2]]
        same = all(x["digest"] == y["digest"] for x, y in zip(per_layer, batched, strict=True))
        cells = []
        for m in MODES:
            cells += [f"{median(x['wall'] for x in results[n, m]):.2f}", f"{median(x['cpu'] for x in results[n, m]):.2f}"]
        ratio = median(x["cpu"] for x in batched) / median(x["cpu"] for x in per_layer)
        rows.append([n, *cells, f"{ratio:.2f}", "yes" if same else "NO"])
    columns = ["agent"]
    for m in MODES:
        columns += [f"{m}: s", "CPU-s"]
    lines = report.header("Agent init: eager, compiled with a draw per layer, compiled with batched draws")
    lines += [
        f"- First call of each agent's init in a fresh process (trace + compile + run), medians of {a.runs} "
        "processes per cell, cells interleaved; default agent sizes",
        "",
        *table([*columns, "batched / per layer (CPU)", "same weights"], rows),
    ]
    report.emit("\n".join(lines) + "\n", a.out)


if __name__ == "__main__":
    main()
