"""Every built-in agent's numbers after a short run of its default configuration, recorded, so
that a change of structure (fields moved into modules, an algorithm shared between agents) can
be shown to leave every number unchanged.

    python tests/regression_runs.py --check   # bit for bit against tests/data/regression.json
    python tests/regression_runs.py --write   # record again (only for a change meant to move numbers)

Runs compile as the test suite's do (XLA optimisations off, XLA:CPU's older fusion emitters, strict
dtype promotion), so `--check` on the machine that wrote the record compares bit for bit;
`tests/agents/test_regression.py` compares within a tolerance, for other CPUs. A run's fingerprint does
not depend on where a number is stored: it is the sorted list of the final state's float leaves,
each as `(shape, sum, sum of absolute values)` in float64, and the last iteration's metrics by
name, so moving a hyperparameter or a network into another module keeps the record.
"""

import os
import sys

if __name__ == "__main__":  # the suite's compile settings (tests/conftest.py), before JAX starts
    os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} --xla_cpu_use_fusion_emitters=false".strip()
    os.environ["JAX_DISABLE_MOST_OPTIMIZATIONS"] = "1"
    os.environ.setdefault("JAX_PLATFORMS", "cpu")

import argparse
import functools
import json
import math
import pathlib
from collections.abc import Callable

import equinox as eqx
import jax
import numpy as np

import eqxrl
from eqxrl.agents import AGENTS, DQN, IPPO, PPO, SAC, AbstractAgent

RECORD = pathlib.Path(__file__).with_name("data") / "regression.json"


def _budget(agent: AbstractAgent, updates: int) -> int:
    """Env steps that reach `updates` iterations past the agent's warm-up (`learning_starts`)."""
    spi = agent.steps_per_iteration
    starts = int(getattr(agent, "learning_starts", 0))
    return (-(-starts // spi) + updates) * spi


def _recorded_agents() -> dict[str, Callable[[], AbstractAgent]]:
    builders = {name: functools.partial(cls, cls.default_env) for name, cls in AGENTS.items()}
    builders["ppo_recurrent"] = lambda: PPO.from_preset("recurrent", "CartPoleNoVel-v1")
    builders["sac_discrete"] = lambda: SAC("CartPole-v1")
    builders["dqn_per_nstep"] = lambda: DQN("CartPole-v1", prioritized=True, n_step=3)
    return builders


RUNS = _recorded_agents()
"""name -> a function building the agent in its default configuration: every built-in agent, and
the variants whose code paths the defaults leave out (recurrent PPO, discrete SAC, prioritized
n-step DQN)."""


def agent_and_budget(name: str) -> tuple[AbstractAgent, int]:
    """The agent of run `name` and its env steps: two iterations of PPO (and of IPPO, composed of
    one), eight past the others' warm-up."""
    agent = RUNS[name]()
    return agent, _budget(agent, 2 if isinstance(agent, (PPO, IPPO)) else 8)


def fingerprint(state, metrics) -> dict:
    leaves = [np.asarray(x, np.float64) for x in jax.tree.leaves(state) if eqx.is_inexact_array(x)]
    prints = sorted((list(x.shape), float(x.sum()), float(np.abs(x).sum())) for x in leaves)
    last = {k: float(np.asarray(v)[-1]) for k, v in sorted(metrics.items())}
    return {"leaves": prints, "metrics": last}


def run(name: str) -> dict:
    agent, budget = agent_and_budget(name)
    state, metrics = eqxrl.train(agent, jax.random.key(0), budget, progress=False)
    return {"env_steps": budget, **fingerprint(state, metrics)}


def same(a: float, b: float, rtol: float, atol: float) -> bool:
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return a == b or abs(a - b) <= atol + rtol * abs(b)  # (== first: infinities)


def differences(got: dict, want: dict, rtol: float = 0.0, atol: float = 0.0) -> list[str]:
    """What differs between two fingerprints (empty: the same within the tolerance)."""
    out = []
    if got["env_steps"] != want["env_steps"]:
        out.append(f"env steps {got['env_steps']} != {want['env_steps']}")
    shapes = lambda p: sorted(tuple(s) for s, _, _ in p["leaves"])  # noqa: E731
    if shapes(got) != shapes(want):
        out.append(f"float leaves' shapes differ: {shapes(got)} vs {shapes(want)}")
    else:
        for (shape, *g), (_, *w) in zip(got["leaves"], want["leaves"]):
            if not all(same(x, y, rtol, atol * max(1, math.prod(shape))) for x, y in zip(g, w)):
                out.append(f"a leaf of shape {tuple(shape)}: (sum, sum |x|) {tuple(g)} vs {tuple(w)}")
    if set(got["metrics"]) != set(want["metrics"]):
        out.append(f"metric names {sorted(got['metrics'])} vs {sorted(want['metrics'])}")
    for k in sorted(set(got["metrics"]) & set(want["metrics"])):
        if not same(got["metrics"][k], want["metrics"][k], rtol, atol):
            out.append(f"metric {k!r}: {got['metrics'][k]!r} vs {want['metrics'][k]!r}")
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--write", action="store_true")
    mode.add_argument("--check", action="store_true")
    parser.add_argument("names", nargs="*", help="runs to record or check (default: all)")
    args = parser.parse_args(argv)
    jax.config.update("jax_numpy_dtype_promotion", "strict")
    record = json.loads(RECORD.read_text()) if RECORD.exists() else {}
    failed = 0
    for name in args.names or list(RUNS):
        got = run(name)
        if args.write:
            record[name] = got
            print(f"{name}: recorded ({len(got['leaves'])} float leaves, {got['env_steps']} env steps)", flush=True)
            continue
        gaps = differences(got, record[name])
        failed += bool(gaps)
        print(f"{name}: {'bit-identical' if not gaps else 'DIFFERS: ' + '; '.join(gaps[:5])}", flush=True)
    if args.write:
        RECORD.parent.mkdir(exist_ok=True)
        RECORD.write_text(json.dumps(record, indent=1) + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
