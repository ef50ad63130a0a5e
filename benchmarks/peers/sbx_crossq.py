"""sbx's CrossQ (stable-baselines3 in JAX) on gymnasium Pendulum-v1, for ``crossq_sbx.py``.

Run by the sbx virtual environment (see benchmarks/README.md, "sbx"), never by eqxrl's: it imports
neither eqxrl nor the benchmarks' modules. For each seed it trains
``CrossQ("MlpPolicy", "Pendulum-v1", seed=s)`` with sbx's defaults for ``--steps`` env steps, then
evaluates the deterministic policy over ``--episodes`` episodes (stable-baselines3's
``evaluate_policy`` on a fresh ``Pendulum-v1``), and prints one JSON object on its last stdout line:

- ``per_seed``: the mean evaluation return of each seed, ``episodes``: every episode's return;
- ``wall`` / ``cpu`` per seed: seconds of wall clock and process CPU (``time.process_time``) of
  construction plus ``learn`` (evaluation excluded, timed apart as ``eval_wall``);
- ``steps_per_s``: env steps over that wall time;
- ``wall_includes``: what those seconds hold. sbx steps the gymnasium env (Python, NumPy) one step
  at a time from Python, stores transitions in stable-baselines3's NumPy replay buffer, and calls
  its jitted update (``jax.jit`` of actor and critic steps, compiled on the first call: the compile
  is inside the first seed's wall time; later seeds in the same process reuse the jit cache, as
  its ``first_seed_note`` says).

``python benchmarks/peers/sbx_crossq.py --steps 2000 --seeds 1`` (``--qf-width W``: critics [W, W] instead of
sbx's [1024, 1024]). Cost at sbx's defaults on 2 shared CPU cores (load 5-9): 2,000 steps of one seed
took 300 s wall, 167 s CPU (7 env steps/s; about 150 s per 1,000 env steps): the two 1024x1024
critics on a joint batch of 512 dominate. With ``--qf-width 256``: 36 s wall, 34 s CPU (load ~3).
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from importlib.metadata import version


def defaults() -> dict:
    """sbx's CrossQ defaults that matter here, read from its constructors' signatures."""
    import inspect

    from sbx import CrossQ
    from sbx.crossq.policies import CrossQPolicy

    out = {}
    for fn in (CrossQ.__init__, CrossQPolicy.__init__):
        for name, p in inspect.signature(fn).parameters.items():
            skip = name.startswith("_") or name in ("verbose", "seed", "device", "tensorboard_log", "stats_window_size")
            if not skip and p.default is not inspect.Parameter.empty and isinstance(p.default, (int, float, str, bool, type(None))):
                out[name] = p.default
    return out


def run_seed(seed: int, steps: int, episodes: int, qf_width: int | None = None) -> dict:
    import gymnasium as gym
    import numpy as np
    from sbx import CrossQ
    from stable_baselines3.common.evaluation import evaluate_policy

    t0, c0 = time.perf_counter(), time.process_time()
    kw = {} if qf_width is None else {"policy_kwargs": {"net_arch": {"pi": [256, 256], "qf": [qf_width, qf_width]}}}
    model = CrossQ("MlpPolicy", "Pendulum-v1", seed=seed, verbose=0, **kw)
    model.learn(total_timesteps=steps)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    assert model.num_timesteps == steps, (model.num_timesteps, steps)

    t1 = time.perf_counter()
    env = gym.make("Pendulum-v1")
    env.reset(seed=10_000 + seed)
    returns, _ = evaluate_policy(model, env, n_eval_episodes=episodes, deterministic=True, return_episode_rewards=True)
    return dict(
        seed=seed, mean=float(np.mean(returns)), episodes=[float(r) for r in returns], wall=wall, cpu=cpu,
        steps_per_s=steps / wall, eval_wall=time.perf_counter() - t1,
        net_arch=dict(pi=list(model.policy.net_arch_pi), qf=list(model.policy.net_arch_qf)),
    )  # fmt: skip


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=20_000, help="env steps per seed")
    p.add_argument("--seeds", type=int, default=5, help="seeds 0 .. N-1, one after the other")
    p.add_argument("--first-seed", type=int, default=0)
    p.add_argument("--episodes", type=int, default=16, help="deterministic evaluation episodes per seed")
    p.add_argument("--qf-width", type=int, help="critic widths (qf net_arch [W, W]; default sbx's [1024, 1024])")
    args = p.parse_args(argv)

    runs = []
    for seed in range(args.first_seed, args.first_seed + args.seeds):
        r = run_seed(seed, args.steps, args.episodes, args.qf_width)
        runs.append(r)
        print(
            f"sbx CrossQ seed {seed}: return {r['mean']:.1f}, {r['wall']:.1f} s wall, {r['cpu']:.1f} s CPU, "
            f"{r['steps_per_s']:.0f} env steps/s", file=sys.stderr, flush=True,
        )  # fmt: skip
    out = dict(
        steps=args.steps, episodes_per_seed=args.episodes, qf_width=args.qf_width, runs=runs,
        per_seed=[r["mean"] for r in runs], wall=[r["wall"] for r in runs], cpu=[r["cpu"] for r in runs],
        steps_per_s=[r["steps_per_s"] for r in runs], defaults=defaults(),
        versions={p: version(p) for p in ("sbx-rl", "stable_baselines3", "jax", "jaxlib", "flax", "optax", "gymnasium", "torch")}
        | {"python": platform.python_version()},
        wall_includes=(
            "construction of CrossQ (gymnasium env, flax networks, SB3 NumPy replay buffer) and model.learn: "
            "gymnasium Pendulum-v1 stepped one env step at a time from Python, transitions stored in the NumPy "
            "buffer, one jitted gradient step per env step after learning_starts (host-device copies of each "
            "batch), and the jit compiles of its update functions"
        ),
        first_seed_note="seeds run one after another in one process: the first seed's wall time holds the jit "
        "compiles, the later seeds reuse jax's in-memory cache",
    )  # fmt: skip
    print(json.dumps(out))


if __name__ == "__main__":
    main()
