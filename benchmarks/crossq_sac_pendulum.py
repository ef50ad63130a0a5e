"""CrossQ against SAC on gymnax Pendulum-v1 at an equal, small budget.

Both agents at their defaults but for the network widths (``--width``: SAC's ``hidden_sizes``, and
CrossQ's ``hidden_sizes`` and ``critic_hidden_sizes``), ``--seeds`` seeds trained in one program per
agent from ``jax.random.split(jax.random.key(0), seeds)``, ``--steps`` env steps per seed. Printed
per agent: the deterministic evaluation return per seed (16 episodes, key 1), the mean training
episode return over the 1,000 env steps before 3k, 5k, 10k and the end (how fast each learns), and
the wall and process-CPU seconds of training (compile included). On a shared machine the CPU
seconds are the steadier figure.

Run ``python benchmarks/crossq_sac_pendulum.py --width 64,64`` (about 3 CPU-minutes on 2 cores).
"""

import resource
import sys
import time

import jax
import numpy as np

import eqxrl
from _report import Report, parser, table
from eqxrl.agents import SAC, CrossQ


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def main(argv=None) -> None:
    p = parser(__doc__, "crossq_sac_pendulum")
    p.add_argument("--width", default="64,64", help="hidden widths of every network (default 64,64)")
    p.add_argument("--steps", type=int, default=15_000, help="env steps per seed (default 15,000)")
    p.add_argument("--seeds", type=int, default=4, help="seeds, trained in one program per agent")
    p.add_argument("agents", nargs="*", default=["crossq", "sac"])
    a = p.parse_args(argv)
    report = Report(__file__, argv)
    rows = []
    width = tuple(int(w) for w in a.width.split(","))
    make = {
        "crossq": lambda: CrossQ("Pendulum-v1", hidden_sizes=width, critic_hidden_sizes=width),
        "sac": lambda: SAC("Pendulum-v1", hidden_sizes=width),
    }
    for name in a.agents:
        agent = make[name]()
        keys = jax.random.split(jax.random.key(0), a.seeds)
        cpu, wall = cpu_seconds(), time.time()
        states, metrics = eqxrl.train(agent, keys, a.steps, progress=False)
        jax.block_until_ready(states)
        cpu, wall = cpu_seconds() - cpu, time.time() - wall
        returns = np.asarray(eqxrl.evaluate(agent, states, jax.random.key(1), num_episodes=16)).mean(axis=-1)
        episodes = np.asarray(metrics["episode_return"], np.float64)  # (seeds, iterations)
        per_step = a.steps / episodes.shape[1]
        curve = {}
        for at in (3_000, 5_000, 10_000, a.steps):
            end = int(at / per_step)
            window = episodes[:, max(0, end - int(1_000 / per_step)):end]
            curve[at] = np.round(np.nanmean(window, axis=1), 0).tolist()
        print(f"{name}: eval {np.round(returns, 1).tolist()}, training return by env step {curve}, {cpu:.1f} CPU-s", flush=True)
        rows.append([name, ", ".join(f"{r:.1f}" for r in returns), f"{returns.mean():.1f}",
                     *(", ".join(f"{v:.0f}" for v in curve[at]) for at in curve), f"{wall:.1f}", f"{cpu:.1f}"])  # fmt: skip
    lines = report.header(f"CrossQ vs SAC on Pendulum-v1, {a.steps:,} env steps, networks {a.width}")
    lines += [f"- {a.seeds} seeds per agent in one program; evaluation: 16 deterministic episodes, key 1", ""]
    columns = ["agent", "eval return per seed", "mean", *(f"train return by {at:,}" for at in curve), "wall s", "CPU-s"]
    lines += table(columns, rows)
    report.emit("\n".join(lines) + "\n", a.out)


if __name__ == "__main__":
    sys.exit(main())
