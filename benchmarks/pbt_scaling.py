"""PBT population scaling on CPU, the cost of exploit/explore, and PBT against fixed hyperparameters.

1. **Scaling**: wall time per member per env step for populations of 1, 4, 16
   and 64 (PPO on CartPole-v1, SAC on Pendulum-v1 with 64x64 networks). A
   population of 1 is `eqxrl.train` of one agent (PBT needs two members); the
   others time one compiled PBT generation (train `ready` steps, evaluate,
   exploit, explore), after a first generation that compiled it and filled the
   replay buffers. Median of ``--runs`` generations.
2. **Exploit/explore share**: the jitted `eqxrl.pbt.exploit_and_explore` on the
   same population (every leaf of every member gathered: parameters, optimizer
   state, replay buffer), as a fraction of a generation's time.
3. **PBT vs fixed** (``--learning``): TD3 on Pendulum-v1 with learning rates
   log-uniform in [1e-5, 1e-1] (bad values at both ends), population 8: the
   best PBT member against the median member of the same initial population
   trained with its sampled hyperparameters fixed, at the same budget per member.

Run ``python benchmarks/pbt_scaling.py`` (about 10 minutes on 2 CPU cores;
``--quick`` for a smoke test, ``--learning`` adds part 3). Writes
``benchmarks/results/pbt_scaling.md``.
"""

from __future__ import annotations

import statistics
import time

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

import eqxrl
from _report import Report, parser, table
from eqxrl.agents import PPO, SAC, TD3
from eqxrl.pbt import PBT, LogUniform, Truncation, exploit_and_explore


def make(name: str):
    if name == "ppo":
        return PPO("CartPole-v1"), {"learning_rate": LogUniform(1e-4, 1e-2)}, 20 * 512
    agent = SAC("Pendulum-v1", hidden_sizes=(64, 64), learning_starts=256)
    return agent, {"actor_learning_rate": LogUniform(1e-4, 1e-2), "critic_learning_rate": LogUniform(1e-4, 1e-2)}, 512


def time_single(name: str, runs: int) -> float:
    agent, _, ready = make(name)
    times = []
    for r in range(runs):
        _, _, info = eqxrl.train(agent, jax.random.key(r), 2 * ready, progress=False, return_info=True)
        times.append(info.run_seconds / (2 * ready))
    return statistics.median(times)


def time_population(name: str, size: int, runs: int) -> tuple[float, float, float]:
    agent, space, ready = make(name)
    pbt = PBT(agent, space, population_size=size, ready=ready, exploit=Truncation(max(1, size // 4), max(1, size // 4)),
              eval_episodes=2)  # fmt: skip
    total = (runs + 2) * pbt.steps_per_generation
    population = pbt.init(jax.random.key(0))
    t0 = time.perf_counter()
    population, _ = pbt.step(population, total)  # compiles
    compile_and_first = time.perf_counter() - t0
    gen_times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        population, _ = pbt.step(population, total)
        gen_times.append(time.perf_counter() - t0)
    generation = statistics.median(gen_times)

    explore = eqx.filter_jit(exploit_and_explore)
    fitness = jnp.arange(size, dtype=jnp.float32)
    out = explore(pbt, jax.random.key(1), population.agent, population.state, fitness)
    jax.block_until_ready(out)
    ex_times = []
    for r in range(max(3, runs)):
        t0 = time.perf_counter()
        jax.block_until_ready(explore(pbt, jax.random.key(r), population.agent, population.state, fitness))
        ex_times.append(time.perf_counter() - t0)
    per_member_step = generation / (size * pbt.steps_per_generation)
    return per_member_step, statistics.median(ex_times) / generation, compile_and_first


def pbt_vs_fixed(seeds: int) -> list[tuple[float, float, list[float]]]:
    rows = []
    for seed in range(seeds):
        agent = TD3("Pendulum-v1", hidden_sizes=(64, 64), learning_starts=1_000, num_envs=2, rollout_length=1)
        space = {"actor_learning_rate": LogUniform(1e-5, 1e-1), "critic_learning_rate": LogUniform(1e-5, 1e-1)}
        pbt = PBT(agent, space, population_size=8, ready=2_000, exploit=Truncation(2, 2), eval_episodes=4)
        budget = 16_000
        key = jax.random.key(seed)
        fixed_agents = pbt.init(key).agent
        fixed_state, _ = eqxrl.train(fixed_agents, jax.random.fold_in(key, 1), budget, progress=False)
        fixed = np.asarray(eqxrl.evaluate(fixed_agents, fixed_state, jax.random.key(99), num_episodes=16)).mean(axis=1)
        population, history = pbt.run(key, budget, progress=False)
        member_agent, member_state = population.member(history.best()[0])
        best = float(np.mean(np.asarray(eqxrl.evaluate(member_agent, member_state, jax.random.key(99), num_episodes=16))))
        rows.append((best, float(np.median(fixed)), fixed.tolist()))
        print(f"seed {seed}: PBT best {best:.1f}, fixed median {np.median(fixed):.1f}, fixed {np.round(fixed, 1)}", flush=True)
    return rows


def main(argv=None) -> None:
    p = parser(__doc__, "pbt_scaling", runs=3, quick="smoke test: 1 run, populations 1 and 4")
    p.add_argument("--sizes", default="1,4,16,64", help="population sizes")
    p.add_argument("--agents", default="ppo,sac", help="comma-separated subset of ppo,sac")
    p.add_argument("--learning", action="store_true", help="also PBT vs fixed hyperparameters (TD3)")
    a = p.parse_args(argv)
    report = Report(__file__, argv)
    if a.quick:
        a.runs, a.sizes = 1, "1,4"
    sizes = [int(s) for s in a.sizes.split(",")]
    figures = {}
    for name in a.agents.split(","):
        for size in sizes:
            if size == 1:
                figures[name, size] = (time_single(name, a.runs), None, None)
            else:
                figures[name, size] = time_population(name, size, a.runs)
            per, share, first = figures[name, size]
            print(f"{name} population {size}: {1e6 * per:.2f} us per member per env step"
                  + (f", exploit/explore {100 * share:.3f}% of a generation" if share is not None else ""), flush=True)  # fmt: skip
    learning = pbt_vs_fixed(4 if not a.quick else 1) if a.learning else None

    lines = report.header("PBT population scaling on CPU", wall=f"; medians of {a.runs} generation(s)")
    lines += [
        "- PPO: default `PPO('CartPole-v1')` (4 envs x 128 steps), ready = 10,240 env steps per member; "
        "SAC: `SAC('Pendulum-v1', hidden_sizes=(64, 64), learning_starts=256)` (1 env, 1 update per step), ready = 512;"
        " truncation of a quarter, 2 evaluation episodes per member per generation",
        "",
    ]
    rows = []
    for name in a.agents.split(","):
        base = figures[name, sizes[0]][0]
        for size in sizes:
            per, share, first = figures[name, size]
            rows.append([
                name.upper(), size, f"{1e6 * per:.2f}", f"{per / base:.2f}",
                f"{100 * share:.3f}%" if share is not None else "(no PBT)", f"{first:.1f}" if first is not None else "",
            ])  # fmt: skip
    columns = ["agent", "population", "us per member per env step", "vs population 1",
               "exploit/explore share of a generation", "first generation (compile + run), s"]  # fmt: skip
    lines += table(columns, rows)
    lines += [
        "",
        "Population 1 is `eqxrl.train` of one agent (no evaluation, no exploit). The exploit/explore share is the "
        "jitted `exploit_and_explore` alone (a gather of every member's whole state, replay buffers included) over "
        "the median generation time.",
    ]
    if learning is not None:
        lines += [
            "",
            "## PBT vs fixed hyperparameters (TD3, Pendulum-v1, learning rates log-uniform in [1e-5, 1e-1])",
            "",
            "Population 8, ready 2,000 env steps, 16,000 env steps per member, truncation 2/2; the fixed population is "
            "PBT's own initial population trained with its sampled hyperparameters unchanged. Deterministic evaluation, 16 episodes.",
            "",
            *table(
                ["seed", "PBT best member", "fixed: median member", "fixed: all members"],
                [[i, f"{b:.1f}", f"{m:.1f}", ", ".join(f"{x:.0f}" for x in f)] for i, (b, m, f) in enumerate(learning)],
                "rrrl",
            ),
        ]
        wins = sum(best > median for best, median, _ in learning)
        lines += ["", f"PBT's best member beats the fixed population's median member on {wins} of {len(learning)} seeds."]
    report.emit("\n".join(lines) + "\n", a.out)


if __name__ == "__main__":
    main()
