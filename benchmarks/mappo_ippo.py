"""MAPPO against IPPO on MPE simple_spread: equal team env steps, the same configuration, 5 seeds.

Measures, per seed and side (the sides interleaved: MAPPO, IPPO, IPPO, MAPPO, ...), the final team
return (the mean over ``--episodes`` evaluation episodes of the deterministic policy, the sum of the
agents' returns) and the team env steps per second after compilation; reports the medians over the
seeds. The issue's targets: MAPPO's median final return at least IPPO's minus 5% of the task's return
range, and its throughput at least IPPO's (reported both as wall-clock steps per second and as process
CPU time per team env step, which other work on a shared machine disturbs less).

Configuration (both sides): JaxMARL's ``config/ippo_ff_mpe.yaml`` as in ``benchmarks/ippo_mpe.py``
(16 envs x 128 steps, 4 epochs x 4 minibatches, Adam 2.5e-4 annealed, gamma 0.99, GAE 0.95, clip 0.2,
entropy 0.01, value 0.5, global-norm clipping 0.5, (64, 64) tanh actor and critic), parameters shared
by the agents, with one-hot agent ids (MAPPO's critic always has them). MAPPO's critic sees the three
agents' observations concatenated (simple_spread has no world state), IPPO's the agent's own.

The task's return range, for the 5% margin: from the untrained policies' median team return (sampled,
measured here with the same keys; narrower than the untrained deterministic policies' range) to 0 (every landmark covered, no collision: the best a team return can be).
"""

from __future__ import annotations

import jax
import numpy as np

from _common import fresh_caches, time_train, turn_order
from _report import Metric, Report, compare, parser, table
from eqxrl import evaluate
from eqxrl.agents import IPPO, MAPPO

ENV = "jaxmarl/MPE_simple_spread_v3"
DEFAULT_STEPS = 200 * 16 * 128
CONFIG = dict(
    num_envs=16, rollout_length=128, num_epochs=4, num_minibatches=4, hidden_sizes=(64, 64), activation="tanh",
    learning_rate=2.5e-4, anneal_lr=True, gamma=0.99, gae_lambda=0.95, clip_eps=0.2, ent_coef=0.01, vf_coef=0.5,
    max_grad_norm=0.5, share_parameters=True, agent_ids=True,
)  # fmt: skip
SIDES = {"MAPPO": MAPPO, "IPPO": IPPO}


def run(side: str, seed: int, steps: int, episodes: int) -> dict:
    agent = SIDES[side](ENV, **CONFIG)
    state, info, out = time_train(agent, jax.random.key(seed), steps)
    out["steps"] = info.env_steps
    out["sps"] = info.steps_per_second
    returns = evaluate(agent, state, jax.random.key(1000 + seed), num_episodes=episodes, deterministic=True)
    out["team_return"] = float(np.mean(np.asarray(returns)))
    return out


def untrained(seeds: int, episodes: int) -> float:
    """The median over seeds of the untrained (initial, sampled) policies' mean team return."""
    agent = IPPO(ENV, **CONFIG)
    means = []
    for seed in range(seeds):
        state = agent.init(jax.random.key(seed))
        returns = evaluate(agent, state, jax.random.key(1000 + seed), num_episodes=episodes, deterministic=False)
        means.append(float(np.mean(np.asarray(returns))))
    return float(np.median(means))


def main() -> None:
    p = parser(__doc__, "mappo_ippo", runs=5, quick="a smoke test: 10 updates, 1 seed")
    p.add_argument("--steps", type=int, default=DEFAULT_STEPS, help=f"team env steps per run (default {DEFAULT_STEPS:,})")
    p.add_argument("--episodes", type=int, default=32, help="evaluation episodes per run (default 32)")
    args = p.parse_args()
    if args.quick:
        args.steps, args.runs, args.episodes = 10 * 16 * 128, 1, 4
    report = Report(__file__)
    runs = {"MAPPO": [], "IPPO": []}
    for r in range(args.runs):
        for side in turn_order(r, list(runs)):
            fresh_caches()
            out = run(side, r, args.steps, args.episodes)
            print(side, r, {k: round(v, 2) for k, v in out.items() if isinstance(v, (int, float))}, flush=True)
            runs[side].append(out)
    start = untrained(args.runs, args.episodes)
    margin = 0.05 * abs(start)
    mappo, ippo = (float(np.median([o["team_return"] for o in runs[s]])) for s in ("MAPPO", "IPPO"))
    sps = [float(np.median([o["sps"] for o in runs[s]])) for s in ("MAPPO", "IPPO")]
    cpu = [float(np.median([1e6 * o["run_cpu"] / o["steps"] for o in runs[s]])) for s in ("MAPPO", "IPPO")]
    metrics = [
        Metric("compile (s)", lambda o: o["compile"], "{:.1f}", higher=False),
        Metric("team env steps / s (after compile)", lambda o: o["sps"], "{:.0f}", bold=True),
        Metric("process CPU us / team env step (after compile)", lambda o: 1e6 * o["run_cpu"] / o["steps"], "{:.2f}", higher=False, bold=True),
        Metric("final team return", lambda o: o["team_return"], "{:.1f}", higher=None, bold=True),
    ]
    per_seed = [
        [side, *(f"{o['team_return']:.1f}" for o in runs[side]), *(f"{o['sps']:.0f}" for o in runs[side])] for side in runs
    ]
    lines = report.header("MAPPO vs IPPO on MPE simple_spread (eqxrl, equal env steps)", packages=("jaxmarl",))
    lines += [
        f"- {args.steps:,} team env steps per run, {args.runs} seeds per side (interleaved), medians over the seeds",
        f"- final team return: mean of {args.episodes} deterministic evaluation episodes per run",
        f"- task return range: untrained median {start:.1f} to 0, so 5% of it is {margin:.1f}",
        "",
        *table(["metric", "MAPPO", "IPPO", "MAPPO / IPPO"], compare(metrics, runs["MAPPO"], runs["IPPO"])),
        "",
        "Per seed (returns, then steps/s):",
        "",
        *table(["side", *(f"return {i}" for i in range(args.runs)), *(f"steps/s {i}" for i in range(args.runs))], per_seed),
        "",
        f"- return target (MAPPO's median >= IPPO's - {margin:.1f}): {'met' if mappo >= ippo - margin else 'NOT met'} "
        f"({mappo:.1f} vs {ippo:.1f})",
        f"- throughput target (MAPPO's median steps/s >= IPPO's): {'met' if sps[0] >= sps[1] else 'NOT met'} "
        f"({sps[0]:.0f} vs {sps[1]:.0f}, {sps[0] / sps[1]:.2f}x); by process CPU time per team env step "
        f"(steadier on a shared machine): {'met' if cpu[0] <= cpu[1] else 'NOT met'} ({cpu[0]:.2f} vs {cpu[1]:.2f} us, "
        f"MAPPO's throughput {cpu[1] / cpu[0]:.2f}x IPPO's)",
    ]
    report.emit("\n".join(lines) + "\n", args.out)


if __name__ == "__main__":
    main()
