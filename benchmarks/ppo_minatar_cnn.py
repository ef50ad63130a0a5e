"""PPO on gymnax Breakout-MinAtar: a CNN torso against the default MLP, at the same budget.

Arms (each ``--seeds`` seeds trained in one program, keys split from ``jax.random.key(--seed)``):

- ``cnn``: ``PPO(actor_torso=CNNTorso.minatar(), critic_torso=CNNTorso.minatar())``, the MinAtar
  network (conv 16x3x3 VALID, dense 128, relu) under each head;
- ``mlp``: the default PPO networks, (64, 64) tanh MLPs over the flat 10x10x4 observation.

Every other hyperparameter is shared (PureJaxRL's MinAtar PPO): 64 envs x 128 steps, 4 epochs x 8
minibatches, Adam lr 5e-4 annealed linearly to 0, gamma 0.99, GAE 0.95, clip 0.2, entropy 0.01, value
0.5, global-norm clip 0.5. Per arm: the final deterministic evaluation return of each seed (mean of
``--episodes`` episodes, at most 1000 steps), the mean over seeds, compile time and env steps/s
(``TrainInfo``, all seeds together). A uniform-random policy, run through the same episode runner
(``eqxrl.loop.episode_returns``), is the baseline.

``CNNTorso`` computes its convolutions as strided slices and one matrix product (on XLA's CPU backend the
gradient of ``lax.conv`` inside PPO's scans ran about 14x slower).

Run ``python benchmarks/ppo_minatar_cnn.py`` (131,072 env steps per seed: about 11 minutes on 2 busy CPU
cores) or ``--quick`` (a smoke test). The table is printed and written to ``benchmarks/results/ppo_minatar_cnn.md``.
"""

from __future__ import annotations

import equinox as eqx
import jax
import numpy as np
from _common import fresh_caches, num_params
from _report import Report, parser, table

import eqxrl
from eqxrl.agents import PPO
from eqxrl.components import CNNTorso
from eqxrl.loop import episode_returns

ENV_ID = "Breakout-MinAtar"
HYPERS = dict(
    num_envs=64, rollout_length=128, num_epochs=4, num_minibatches=8, learning_rate=5e-4, anneal_lr=True,
    gamma=0.99, gae_lambda=0.95, clip_eps=0.2, ent_coef=0.01, vf_coef=0.5, max_grad_norm=0.5,
)  # fmt: skip
ARMS = ("cnn", "mlp")


def make(arm: str) -> PPO:
    torsos = {
        "cnn": dict(actor_torso=CNNTorso.minatar(), critic_torso=CNNTorso.minatar()),
        "mlp": {},
    }[arm]
    return PPO(eqxrl.envs.make(ENV_ID), **HYPERS, **torsos)


class RandomPolicy(eqx.Module):
    """Uniform random actions, for the episode runner (it needs only ``eval_env`` and ``act``)."""

    eval_env: object

    def act(self, state, obs, key=None, deterministic=False):
        return jax.random.randint(key, obs.shape[:1], 0, self.eval_env.action_space.n)


def random_returns(agent: PPO, key, episodes: int) -> np.ndarray:
    env = agent.eval_env
    run = eqx.filter_jit(lambda k: episode_returns(RandomPolicy(env), None, k, episodes, False, env.max_episode_steps))
    return np.asarray(run(key))


def run_arm(arm: str, steps: int, seeds: int, seed: int, episodes: int) -> dict:
    agent = make(arm)
    shapes = eqx.filter_eval_shape(agent.init, jax.random.key(0))
    keys = jax.random.split(jax.random.key(seed), seeds)
    state, metrics, info = eqxrl.train(agent, keys, steps, progress=False, return_info=True)
    returns = np.asarray(eqxrl.evaluate(agent, state, jax.random.key(seed + 1), num_episodes=episodes))
    train_return = np.asarray(metrics["episode_return"])[:, -max(1, metrics["episode_return"].shape[1] // 10):]
    return dict(
        per_seed=returns.mean(axis=1), compile=info.compile_seconds, run=info.run_seconds,
        sps=info.steps_per_second, steps=int(np.asarray(state.env_steps).reshape(-1)[0]),
        params=(num_params(shapes.actor), num_params(shapes.critic)),
        train_return=np.nanmean(train_return, axis=1),
    )  # fmt: skip


def main(argv=None) -> None:
    p = parser(__doc__, "ppo_minatar_cnn", quick="smoke test: 2 iterations per seed, 2 seeds")
    p.add_argument("--steps", type=int, default=2**17, help="env steps per seed (rounded down to x8192)")
    p.add_argument("--seeds", type=int, default=4)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--episodes", type=int, default=32, help="evaluation episodes per seed")
    p.add_argument("--arms", default=",".join(ARMS), help="comma-separated subset of " + ",".join(ARMS))
    a = p.parse_args(argv)
    report = Report(__file__, argv)
    if a.quick:
        a.steps, a.seeds, a.episodes = 2 * 8192, 2, 8
    arms = [x for x in a.arms.split(",") if x]

    baseline = random_returns(make("mlp"), jax.random.key(a.seed + 2), a.episodes * a.seeds)
    print(f"random policy: mean {baseline.mean():.2f} over {baseline.size} episodes", flush=True)
    results = {}
    for arm in arms:
        fresh_caches()
        r = results[arm] = run_arm(arm, a.steps, a.seeds, a.seed, a.episodes)
        per = ", ".join(f"{x:.2f}" for x in r["per_seed"])
        print(
            f"{arm}: {r['steps']:,} steps per seed; eval per seed [{per}], mean {r['per_seed'].mean():.2f}; "
            f"compile {r['compile']:.1f} s, train {r['run']:.1f} s, {r['sps']:,.0f} env steps/s",
            flush=True,
        )
    report.emit(render(report, a, results, baseline), a.out)


def render(report, a, results, baseline) -> str:
    lines = report.header(f"PPO on gymnax {ENV_ID}: CNN torso vs MLP")
    hypers = ", ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in HYPERS.items())
    lines += [
        f"- shared config: {hypers} (every other field PPO's default); {a.seeds} seeds per arm in one program "
        f"(keys split from `jax.random.key({a.seed})`); evaluation: deterministic policy (argmax), "
        f"{a.episodes} episodes per seed, at most 1000 steps",
        "- arms: **cnn** `actor_torso=critic_torso=CNNTorso.minatar()`; **mlp** the default (64, 64) tanh "
        "MLPs",
        f"- random policy (uniform actions, same episode runner): mean return **{baseline.mean():.2f}** over "
        f"{baseline.size} episodes (std {baseline.std():.2f})",
        "",
    ]
    rows = []
    for arm, r in results.items():
        rows.append([
            arm, f"{r['params'][0]:,} / {r['params'][1]:,}", f"{r['steps']:,}",
            ", ".join(f"{x:.2f}" for x in r["per_seed"]), f"**{r['per_seed'].mean():.2f}**",
            f"{np.nanmean(r['train_return']):.2f}", f"{r['compile']:.1f}", f"{r['run']:.0f}", f"{r['sps']:,.0f}",
        ])  # fmt: skip
    lines += table(
        ["arm", "params actor / critic", "env steps per seed", "eval return per seed", "mean",
         "training return, last 10%", "compile (s)", "train (s)", "env steps/s (all seeds)"],
        rows, "lrrrrrrrr",
    )  # fmt: skip
    lines += [
        "",
        "- **eval return**: `eqxrl.evaluate(deterministic=True)` after training, mean over the episodes of each seed.",
        "- **training return, last 10%**: mean over seeds of the episode returns finished in the last tenth "
        "of the iterations (stochastic policy).",
        "- **compile**: `TrainInfo.compile_seconds`; **env steps/s**: `TrainInfo.steps_per_second`, all seeds' "
        "steps over the execution time.",
    ]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
