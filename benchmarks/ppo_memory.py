"""Recurrent PPO against feed-forward PPO on a memory task, gymnax ``MemoryChain-bsuite``.

The task (``memory_length=5``): the first observation shows a context bit, the last one a query; the
action at the sixth and last step earns +1 when it matches the remembered bit and -1 otherwise (every
other step earns 0). A policy without memory can only guess: its expected return is 0 (a random policy
too); a policy that remembers earns 1.

Arms (each ``--seeds`` seeds trained in one program, keys split from ``jax.random.key(--seed)``):

- ``ff``: the default PPO networks, separate (32, 32) tanh MLPs;
- ``gru``: ``PPO(actor_torso=GRUTorso(32, encoder_sizes=(32,)), shared_torso=True)``;
- ``lstm``: ``PPO(actor_torso=LSTMTorso(32, encoder_sizes=(32,)), shared_torso=True)``.

Every other hyperparameter is shared: 16 envs x 32 steps, 4 epochs x 4 minibatches (of envs for the
recurrent arms, of shuffled steps for ``ff``), Adam lr 1e-3 annealed linearly to 0, gamma 0.99, GAE
0.95, clip 0.2, entropy 0.01. Per arm: the final deterministic evaluation return of each seed (mean of
``--episodes`` episodes), the median and mean over seeds, the iteration at which the training return
first reached 0.9, compile time and env steps/s.

Run ``python benchmarks/ppo_memory.py`` (32,768 env steps per seed: a few minutes on 2 busy CPU cores)
or ``--quick``. The table is printed and written to ``benchmarks/results/ppo_memory.md``.
"""

from __future__ import annotations

import jax
import numpy as np
from _common import fresh_caches
from _report import Report, parser, table

import eqxrl
from eqxrl.agents import PPO
from eqxrl.components import GRUTorso, LSTMTorso

ENV_ID = "MemoryChain-bsuite"
MEMORY_LENGTH = 5
HYPERS = dict(
    num_envs=16, rollout_length=32, num_epochs=4, num_minibatches=4, learning_rate=1e-3, hidden_sizes=(32, 32),
)  # fmt: skip
ARMS = ("ff", "gru", "lstm")


def make(arm: str) -> PPO:
    torso = {
        "ff": {},
        "gru": dict(actor_torso=GRUTorso(32, (32,)), shared_torso=True),
        "lstm": dict(actor_torso=LSTMTorso(32, (32,)), shared_torso=True),
    }[arm]
    return PPO(eqxrl.envs.make(ENV_ID, memory_length=MEMORY_LENGTH), **HYPERS, **torso)


def run_arm(arm: str, steps: int, seeds: int, seed: int, episodes: int) -> dict:
    agent = make(arm)
    keys = jax.random.split(jax.random.key(seed), seeds)
    state, metrics, info = eqxrl.train(agent, keys, steps, progress=False, return_info=True)
    returns = np.asarray(eqxrl.evaluate(agent, state, jax.random.key(seed + 1), num_episodes=episodes))
    train = np.asarray(metrics["episode_return"])  # (seeds, iterations)
    reached = [int(np.argmax(r >= 0.9)) + 1 if np.any(r >= 0.9) else None for r in train]
    return dict(
        per_seed=returns.mean(axis=1), compile=info.compile_seconds, run=info.run_seconds,
        sps=info.steps_per_second, steps=int(np.asarray(state.env_steps).reshape(-1)[0]), reached=reached,
        iterations=train.shape[1],
    )  # fmt: skip


def main(argv=None) -> None:
    p = parser(__doc__, "ppo_memory", quick="smoke test: 4,096 steps, 2 seeds")
    p.add_argument("--steps", type=int, default=2**15, help="env steps per seed (rounded down to x512)")
    p.add_argument("--seeds", type=int, default=4)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--episodes", type=int, default=64, help="evaluation episodes per seed")
    p.add_argument("--arms", default=",".join(ARMS), help="comma-separated subset of " + ",".join(ARMS))
    a = p.parse_args(argv)
    report = Report(__file__, argv)
    if a.quick:
        a.steps, a.seeds, a.episodes = 4096, 2, 8
    results = {}
    for arm in [x for x in a.arms.split(",") if x]:
        fresh_caches()
        r = results[arm] = run_arm(arm, a.steps, a.seeds, a.seed, a.episodes)
        per = ", ".join(f"{x:.2f}" for x in r["per_seed"])
        print(
            f"{arm}: {r['steps']:,} steps per seed; eval per seed [{per}], median {np.median(r['per_seed']):.2f}; "
            f"compile {r['compile']:.1f} s, train {r['run']:.1f} s, {r['sps']:,.0f} env steps/s",
            flush=True,
        )
    report.emit(render(report, a, results), a.out)


def render(report, a, results) -> str:
    lines = report.header(f"PPO on gymnax {ENV_ID} (memory_length={MEMORY_LENGTH}): feed-forward vs recurrent")
    hypers = ", ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in HYPERS.items())
    lines += [
        f"- shared config: {hypers} (every other field PPO's default); {a.seeds} seeds per arm in one program "
        f"(keys split from `jax.random.key({a.seed})`); evaluation: deterministic policy (argmax), "
        f"{a.episodes} episodes per seed",
        "- arms: **ff** the default MLPs; **gru** `GRUTorso(32, (32,))`, **lstm** `LSTMTorso(32, (32,))`, "
        "each shared by both heads (`shared_torso=True`)",
        "- a policy without memory can only guess the remembered bit: expected return 0; the maximum is 1",
        "",
    ]
    rows = []
    for arm, r in results.items():
        reached = ", ".join("-" if x is None else str(x) for x in r["reached"])
        rows.append([
            arm, f"{r['steps']:,}", ", ".join(f"{x:.2f}" for x in r["per_seed"]),
            f"**{np.median(r['per_seed']):.2f}**", f"{r['per_seed'].mean():.2f}", f"{reached} (of {r['iterations']})",
            f"{r['compile']:.1f}", f"{r['run']:.0f}", f"{r['sps']:,.0f}",
        ])  # fmt: skip
    lines += table(
        ["arm", "env steps per seed", "eval return per seed", "median", "mean",
         "first iteration with training return >= 0.9, per seed", "compile (s)", "train (s)", "env steps/s (all seeds)"],
        rows, "lrrrrrrrr",
    )  # fmt: skip
    lines += [
        "",
        "- **eval return**: `eqxrl.evaluate(deterministic=True)` after training, mean over the episodes of each "
        "seed (a recurrent policy's hidden state is carried through each episode).",
        "- **compile**: `TrainInfo.compile_seconds`; **env steps/s**: `TrainInfo.steps_per_second`, all seeds' "
        "steps over the execution time (the machine was shared: compare arms, not absolute speed).",
    ]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
