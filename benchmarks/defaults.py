"""Every agent's defaults on its reference task: does `eqxrl train AGENT` learn as shipped?

Each task trains one agent built with nothing but its env (`PPO("CartPole-v1")`, ...), or with a
named preset, at the command line's default budget (`agent.default_budget()`, what `eqxrl train
AGENT` runs without `--total-steps`), over 4 seeds trained in one program (keys split from
``jax.random.key(--seed)``), then evaluates every seed deterministically (greedy / the mean
action; evaluation key ``--seed + 1``) and compares it with the task's threshold. A task passes
when at least `need` seeds reach the threshold (its row says how many). So a regression of any
default is one table away.

Tasks (`--tasks`, default all):

- ``ppo``: PPO on CartPole-v1, greedy return >= 475, 3 of 4 seeds.
- ``dqn``: DQN on CartPole-v1, >= 475, 3 of 4; ``dqn_1m``: the same at 1e6 steps (no late collapse).
- ``pqn``: PQN on CartPole-v1, >= 475, 3 of 4.
- ``sac_discrete``: SAC on CartPole-v1 (its Discrete defaults), >= 475, 3 of 4.
- ``sac``, ``td3``, ``ddpg``, ``crossq``: on Pendulum-v1, >= -250 on every seed; ``mpo`` likewise (its budget 1e5).
- ``dads``: DADS on Point2D-v0: the mean distance between the skills' final positions >= 10 on
  every seed (an untrained policy's skills end about 0.1 apart).
- ``ippo``: IPPO on MPE simple_spread: the greedy team return above the untrained (random
  initial) policy's sampled return by >= 15% of its size, on every seed.
- ``ppo_recurrent``: PPO's ``"recurrent"`` preset on CartPoleNoVel-v1 (velocities hidden), mean
  over seeds >= 450 at 3e5 steps; ``ppo_novel_ff``: PPO's defaults there, for contrast (a
  feed-forward policy cannot solve it; the row passes when the mean stays below 100).
- ``memory_chain_<N>``: the recurrent preset on MemoryChain-bsuite with an N-step memory
  (N = 10, 30), greedy return (+1 right, -1 wrong) >= 0.9 on 3 of 4 seeds.

Run ``python benchmarks/defaults.py`` (all tasks, over an hour on 2 CPU cores) or a subset with
``--tasks dqn,sac_discrete``; ``--json PATH`` also writes the raw per-seed results, and
``--from-json A.json B.json`` renders one record from several such files (tasks run in parallel
processes).
"""

from __future__ import annotations

import dataclasses
import json
import sys
from collections.abc import Callable

import jax
import numpy as np

from _report import Report, agent_fields, cpu_model, nproc, parser, table


@dataclasses.dataclass(frozen=True)
class Task:
    build: Callable[[], object]  # the agent, as a user gets it
    spelled: str  # how a user spells it in Python
    threshold: float
    need: int | str  # seeds that must reach the threshold, or "mean" (the mean over seeds must) / "below"
    score: str = "greedy return"  # what is compared with the threshold
    total_steps: int | None = None  # None: the agent's default_budget()
    eval_episodes: int = 32


def _agents():
    from eqxrl.agents import DADS, DDPG, DQN, IPPO, MPO, PPO, PQN, SAC, TD3, CrossQ

    return DADS, DDPG, DQN, IPPO, MPO, PPO, PQN, SAC, TD3, CrossQ


def tasks() -> dict[str, Task]:
    DADS, DDPG, DQN, IPPO, MPO, PPO, PQN, SAC, TD3, CrossQ = _agents()
    out = {
        "ppo": Task(lambda: PPO("CartPole-v1"), 'PPO("CartPole-v1")', 475.0, 3),
        "pqn": Task(lambda: PQN("CartPole-v1"), 'PQN("CartPole-v1")', 475.0, 3),
        "dqn": Task(lambda: DQN("CartPole-v1"), 'DQN("CartPole-v1")', 475.0, 3),
        "dqn_1m": Task(lambda: DQN("CartPole-v1"), 'DQN("CartPole-v1")', 475.0, 3, total_steps=1_000_000),
        "sac_discrete": Task(lambda: SAC("CartPole-v1"), 'SAC("CartPole-v1")', 475.0, 3),
        "sac": Task(lambda: SAC("Pendulum-v1"), 'SAC("Pendulum-v1")', -250.0, 4, eval_episodes=16),
        "td3": Task(lambda: TD3("Pendulum-v1"), 'TD3("Pendulum-v1")', -250.0, 4, eval_episodes=16),
        "ddpg": Task(lambda: DDPG("Pendulum-v1"), 'DDPG("Pendulum-v1")', -250.0, 4, eval_episodes=16),
        "crossq": Task(lambda: CrossQ("Pendulum-v1"), 'CrossQ("Pendulum-v1")', -250.0, 4, eval_episodes=16),
        "mpo": Task(lambda: MPO("Pendulum-v1"), 'MPO("Pendulum-v1")', -250.0, 4, eval_episodes=16),
        "dads": Task(lambda: DADS("Point2D-v0"), 'DADS("Point2D-v0")', 10.0, 4, score="skill spread"),
        "ippo": Task(
            lambda: IPPO("jaxmarl/MPE_simple_spread_v3"), 'IPPO("jaxmarl/MPE_simple_spread_v3")', 0.15, 4,
            score="gain over untrained",
        ),
        "ppo_recurrent": Task(
            lambda: PPO.from_preset("recurrent", "CartPoleNoVel-v1"), 'PPO.from_preset("recurrent", "CartPoleNoVel-v1")',
            450.0, "mean", total_steps=300_000,
        ),
        "ppo_novel_ff": Task(
            lambda: PPO("CartPoleNoVel-v1"), 'PPO("CartPoleNoVel-v1")', 100.0, "below", total_steps=300_000
        ),
    }  # fmt: skip
    for n, steps in ((10, 100_000), (30, 300_000)):
        out[f"memory_chain_{n}"] = Task(
            lambda n=n: PPO.from_preset("recurrent", _memory_chain(n)),
            f'PPO.from_preset("recurrent", make("MemoryChain-bsuite", memory_length={n}))', 0.9, 3,
            total_steps=steps, eval_episodes=64,
        )  # fmt: skip
    return out


def _memory_chain(n: int):
    import eqxrl

    return eqxrl.envs.make("MemoryChain-bsuite", memory_length=n)


def scores(name: str, task: Task, agent, states, key) -> tuple[np.ndarray, dict]:
    """Per-seed scores of trained `states`, and anything else worth recording."""
    import eqxrl

    if task.score == "skill spread":
        report = agent.evaluate_skills(states, key)
        return np.asarray(report.mean_pairwise_distance()), {}
    if task.score == "gain over untrained":
        seeds = jax.tree.leaves(states.env_steps)[0].shape[0]
        untrained_states = jax.vmap(agent.init)(jax.random.split(jax.random.key(12345), seeds))
        untrained = np.asarray(
            eqxrl.evaluate(agent, untrained_states, key, num_episodes=task.eval_episodes, deterministic=False)
        ).mean(-1)
        trained = np.asarray(eqxrl.evaluate(agent, states, key, num_episodes=task.eval_episodes)).mean(-1)
        # Team returns are negative distances: closer to 0 is better.
        gain = (trained - untrained) / np.abs(untrained)
        return gain, {"trained return": trained.tolist(), "untrained return": untrained.tolist()}
    returns = np.asarray(eqxrl.evaluate(agent, states, key, num_episodes=task.eval_episodes)).mean(-1)
    return returns, {}


def verdict(task: Task, per_seed: np.ndarray) -> tuple[bool, str]:
    if task.need == "mean":
        return bool(per_seed.mean() >= task.threshold), f"mean >= {task.threshold:g}"
    if task.need == "below":
        return bool(per_seed.mean() < task.threshold), f"mean < {task.threshold:g}"
    passes = int(np.sum(per_seed >= task.threshold))
    return passes >= task.need, f"{passes}/{per_seed.size} >= {task.threshold:g} (need {task.need})"


def run_task(name: str, task: Task, num_seeds: int, seed: int, total_steps: int | None = None) -> dict:
    import eqxrl

    agent = task.build()
    total_steps = total_steps or task.total_steps or agent.default_budget()
    keys = jax.random.split(jax.random.key(seed), num_seeds)
    states, _, info = eqxrl.train(agent, keys, total_steps, progress=False, return_info=True)
    jax.block_until_ready(states)
    per_seed, extra = scores(name, task, agent, states, jax.random.key(seed + 1))
    passed, rule = verdict(task, per_seed)
    return dict(
        name=name, spelled=task.spelled, total_steps=total_steps, per_seed=[float(x) for x in per_seed],
        mean=float(per_seed.mean()), threshold=task.threshold, rule=rule, passed=passed, score=task.score,
        compile=info.compile_seconds, run=info.run_seconds, fields=agent_fields(agent), extra=extra,
        backend=f"{jax.default_backend()} ({jax.devices()[0].device_kind})",
        machine=f"{jax.default_backend()} ({jax.devices()[0].device_kind}), {nproc()} cores ({cpu_model()}), jax {jax.__version__}",
    )  # fmt: skip


def render(report: Report, results: list[dict], a) -> str:
    lines = report.header("Every agent's defaults on its reference task")
    if a.from_json:
        lines += [
            "- merged by `--from-json` from runs in separate processes (and machines: the `where` column); the wall time "
            "above is the merge's, each task's own is its compile + train"
        ]
    lines += [
        f"- seeds: `jax.random.split(jax.random.key({a.seed}), {a.seeds})`, trained in one program per task; "
        f"evaluation: deterministic policy, key {a.seed + 1}, 32 episodes per seed (16 on Pendulum, 64 on MemoryChain)",
        "- budget: the command line's default (`agent.default_budget()`, what `eqxrl train AGENT` runs without "
        "`--total-steps`) unless the task names one",
        "",
    ]
    rows = [
        [r["name"], f"`{r['spelled']}`", f"{r['total_steps']:,}", r["score"], ", ".join(f"{x:.4g}" for x in r["per_seed"]),
         f"{r['mean']:.4g}", r["rule"], "**pass**" if r["passed"] else "**FAIL**", f"{r['compile']:.1f}", f"{r['run']:.1f}",
         r.get("machine", r["backend"])]
        for r in results
    ]  # fmt: skip
    lines += table(
        ["task", "agent", "env steps / seed", "score", "per seed", "mean", "rule", "result", "compile (s)", "train (s)",
         "where"],
        rows, "lllllrllrrl",
    )  # fmt: skip
    lines += ["", "- compile and train: `TrainInfo.compile_seconds` and `run_seconds`, all seeds together.", ""]
    lines += ["## Every field, per task", ""]
    for r in results:
        lines.append(f"- **{r['name']}**: {r['fields']}")
        for k, v in r["extra"].items():
            lines.append(f"  - {k}: {', '.join(f'{x:.4g}' for x in v)}")
    return "\n".join(lines) + "\n"


def main(argv=None) -> None:
    p = parser(__doc__, "defaults")
    names = list(tasks())
    p.add_argument("--tasks", default=",".join(names), help=f"comma-separated subset of {','.join(names)}")
    p.add_argument("--seeds", type=int, default=4, help="seeds per task, trained in one program (default 4)")
    p.add_argument("--seed", type=int, default=0, help="base seed (default 0)")
    p.add_argument("--total-steps", type=int, default=None, help="override every task's budget (smoke tests)")
    p.add_argument("--json", default=None, help="also write the raw results to this JSON file")
    p.add_argument("--from-json", nargs="+", default=None, help="render one record from earlier --json files")
    a = p.parse_args(argv)
    report = Report(__file__, argv)
    if a.from_json:
        results = [r for path in a.from_json for r in json.loads(open(path).read())]
    else:
        chosen = [n.strip() for n in a.tasks.split(",") if n.strip()]
        unknown = [n for n in chosen if n not in names]
        if unknown or not chosen:
            p.error(f"--tasks must be a comma-separated subset of {','.join(names)}, got {a.tasks!r}")
        if a.seeds < 1:
            p.error(f"--seeds must be >= 1, got {a.seeds}")
        all_tasks, results = tasks(), []
        for name in chosen:
            print(f"{name}: {all_tasks[name].spelled}", flush=True)
            r = run_task(name, all_tasks[name], a.seeds, a.seed, a.total_steps)
            print(f"  {r['per_seed']} -> {r['rule']}: {'PASS' if r['passed'] else 'FAIL'} "
                  f"(compile {r['compile']:.1f} s, train {r['run']:.1f} s)", flush=True)  # fmt: skip
            results.append(r)
            if a.json:
                with open(a.json, "w") as f:
                    json.dump(results, f)
    report.emit(render(report, results, a), a.out)
    if not all(r["passed"] for r in results):
        sys.exit(1)


if __name__ == "__main__":
    main()
