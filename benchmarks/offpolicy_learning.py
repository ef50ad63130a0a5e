"""Learning criterion of the off-policy agents (DQN, double DQN, SAC, TD3, DDPG).

The criterion (per agent, seeds trained together in one program from
``jax.random.split(jax.random.key(--seed), --seeds)``):

- DQN and double DQN on gymnax CartPole-v1: the mean return of deterministic
  (greedy) evaluation over 32 episodes reaches >= 475 on at least 3 of 4 seeds;
- SAC, TD3 and DDPG on Pendulum-v1: the mean return of deterministic
  evaluation over 16 episodes reaches >= -250 within 5e4 env steps per seed
  (the policy is evaluated after training for exactly 50,000 steps) on at least
  3 of 4 seeds.

With ``--seeds N`` other than 4, ``ceil(3 N / 4)`` seeds must pass.

Each agent runs the config in ``CONFIGS`` below (the 256x256 default networks
of SAC/TD3/DDPG are ~10x slower on CPU, so the criterion configs use 64x64).
Per agent the script prints the per-seed returns, pass/fail, compile time,
training wall time and env steps/s, and writes a Markdown table with the exact
configs to ``benchmarks/results/offpolicy_learning.md``.

Run ``python benchmarks/offpolicy_learning.py`` (all five agents; about
15-20 minutes on 2 busy CPU cores) or pick agents with
``--agents dqn,sac``.
"""

from __future__ import annotations

import dataclasses
import sys

import numpy as np

from _common import learning_run, required_passes, verdict_line
from _report import Report, agent_fields, fmt_value, parser, table
from eqxrl.agents import DDPG, DQN, SAC, TD3


@dataclasses.dataclass(frozen=True)
class Config:
    cls: type
    env: str
    kwargs: dict
    total_steps: int  # env steps per seed
    threshold: float  # a seed passes when its mean evaluation return is >= this
    eval_episodes: int
    note: str = ""


# The criterion configs. Every hyperparameter not named here is the agent's default.
CARTPOLE = dict(env="CartPole-v1", total_steps=150_000, threshold=475.0, eval_episodes=32)
PENDULUM = dict(env="Pendulum-v1", total_steps=50_000, threshold=-250.0, eval_episodes=16)
CONFIGS: dict[str, Config] = {
    "dqn": Config(
        DQN, kwargs=dict(double=False, batch_size=256), **CARTPOLE,
        note="vanilla DQN (double=False) with batch 256 (default 128), which steadies the late-training "
        "collapses that the default batch shows on some seeds",
    ),
    "double_dqn": Config(
        DQN, kwargs=dict(double=True, batch_size=256), **CARTPOLE, note="double DQN, same config as vanilla DQN"
    ),
    **{
        name: Config(cls, kwargs=dict(hidden_sizes=(64, 64)), **PENDULUM, note="64x64 networks; otherwise defaults")
        for name, cls in (("sac", SAC), ("td3", TD3), ("ddpg", DDPG))
    },
}  # fmt: skip


def make_agent(cfg: Config):
    return cfg.cls(cfg.env, **cfg.kwargs)


def run_one(name: str, cfg: Config, num_seeds: int, seed: int) -> dict:
    r = learning_run(make_agent(cfg), cfg.total_steps, num_seeds, seed, cfg.eval_episodes, cfg.threshold)
    # Training episode returns (exploratory policy): the mean over the last 10% of
    # iterations, and the best mean of 20 consecutive finished episodes.
    ep = np.asarray(r["metrics"]["episode_return"], np.float64)
    tail = ep[:, -max(1, ep.shape[1] // 10) :]
    r["train_tail"] = [float(np.nanmean(x)) if np.isfinite(x).any() else float("nan") for x in tail]
    r["train_best"] = [_best_window(x) for x in ep]
    r["name"] = name
    return r


def _best_window(returns: np.ndarray, window: int = 20) -> float:
    """The best mean of `window` consecutive finished training episodes (per-iteration means)."""
    x = returns[np.isfinite(returns)]
    if x.size < window:
        return float("nan")
    return float(np.convolve(x, np.ones(window) / window, mode="valid").max())


def _kwargs_str(cfg: Config) -> str:
    return ", ".join(f"{k}={fmt_value(v)}" for k, v in cfg.kwargs.items())


def render(report: Report, results: list[dict], a) -> str:
    lines = report.header("Off-policy agents: learning criterion")
    lines += [
        f"- seeds: `jax.random.split(jax.random.key({a.seed}), {a.seeds})`, all seeds of an agent trained in one "
        f"program; evaluation: `eqxrl.evaluate(agent, states, jax.random.key({a.seed + 1}), num_episodes=...)`, "
        "deterministic policy (greedy / mode)",
        "- criterion: CartPole-v1 (DQN, double DQN): mean greedy return over 32 episodes >= 475; Pendulum-v1 "
        "(SAC, TD3, DDPG): mean deterministic return over 16 episodes >= -250 after 5e4 env steps; "
        f"on at least {required_passes(a.seeds)} of {a.seeds} seeds",
        "",
    ]
    rows = []
    for r in results:
        cfg = CONFIGS[r["name"]]
        rows.append([
            r["name"], cfg.env, f"{r['steps_per_seed']:,}", ", ".join(f"{x:.1f}" for x in r["per_seed"]),
            f"{r['per_seed'].mean():.1f}", f"{cfg.threshold:g}",
            f"{r['passes']}/{len(r['per_seed'])} (need {r['required']})", "**pass**" if r["passed"] else "**FAIL**",
            f"{r['compile']:.1f}", f"{r['run']:.1f}", f"{r['sps']:,.0f}",
        ])  # fmt: skip
    columns = ["agent", "env", "env steps / seed", "per-seed eval return", "mean", "threshold", "seeds passing",
               "result", "compile (s)", "train wall (s)", "env steps/s (all seeds)"]  # fmt: skip
    lines += table(columns, rows, "llrlrrrlrrr")
    lines += [
        "",
        "- **train wall**: `TrainInfo.run_seconds` (all seeds, after compilation); "
        "**env steps/s**: env steps of all seeds / train wall.",
        "",
        "## Configs",
        "",
        "Every hyperparameter not listed under *set* is the agent's default.",
        "",
    ]
    for r in results:
        cfg = CONFIGS[r["name"]]
        lines += [
            f"- **{r['name']}**: `{cfg.cls.__name__}(\"{cfg.env}\", {_kwargs_str(cfg)})`, "
            f"{cfg.total_steps:,} env steps per seed. {cfg.note}",
            f"  - all: {agent_fields(r['agent'])}",
        ]
    lines += [
        "",
        "Training episode return (exploratory policy), per seed: mean over the last 10% of iterations "
        "/ best mean of 20 consecutive episodes (each point a per-iteration mean of the episodes that ended then):",
        "",
    ]
    for r in results:
        lines.append(
            f"- {r['name']}: " + ", ".join(f"{t:.1f} / {b:.1f}" for t, b in zip(r["train_tail"], r["train_best"]))
        )
    return "\n".join(lines) + "\n"


def main(argv=None) -> None:
    p = parser(__doc__, "offpolicy_learning")
    p.add_argument("--agents", default=",".join(CONFIGS), help=f"comma-separated subset of {','.join(CONFIGS)} (default: all)")
    p.add_argument("--seeds", type=int, default=4, help="seeds per agent, trained in one program")
    p.add_argument("--seed", type=int, default=0, help="base seed (keys are split from jax.random.key(seed))")
    a = p.parse_args(argv)
    names = [n.strip() for n in a.agents.split(",") if n.strip()]
    unknown = [n for n in names if n not in CONFIGS]
    if unknown or not names:
        p.error(f"--agents must be a comma-separated subset of {','.join(CONFIGS)}, got {a.agents!r}")
    if a.seeds < 1:
        p.error("--seeds must be >= 1")
    report = Report(__file__, argv)

    results = []
    for name in names:
        cfg = CONFIGS[name]
        print(f"{name}: {cfg.cls.__name__}({cfg.env!r}, {_kwargs_str(cfg)}), {cfg.total_steps:,} steps x {a.seeds} seeds", flush=True)
        results.append(run_one(name, cfg, a.seeds, a.seed))
        print("  " + verdict_line(results[-1], cfg.threshold), flush=True)
    report.emit(render(report, results, a), a.out)
    if not all(r["passed"] for r in results):
        sys.exit(1)


if __name__ == "__main__":
    main()
