"""Learning on the JAX env suites eqxrl adapts: one record per arm, against a uniform random policy.

Arms (each ``--seeds`` seeds trained in one program through ``eqxrl.train``, keys split from
``jax.random.key(--seed)``; the budget per seed is the arm's, or ``--steps``):

- ``snake``: PPO on ``jumanji/Snake-v1`` (a Dict observation: a 12x12x5 grid, the step count and
  an action mask) with its default (automatic) torso, a CNN on the grid, normalised observations,
  masks honoured; ``snake-mlp``: the same with one MLP over the concatenated entries (the first record);
- ``navix``: PPO on ``navix/Navix-Empty-5x5-v0`` (a 5x5x3 uint8 grid as floats);
- ``xminigrid``: PPO on ``xminigrid/MiniGrid-Empty-5x5`` (a 7x7x2 symbolic view);
- ``craftax``: PPO on ``craftax/Craftax-Classic-Symbolic-v1`` (1,345 features, 17 actions): a short
  budget on CPU; on a GPU run it with ``--steps 1000000000`` and ``--seeds 1`` (the script is the same);
- ``2048``: DQN with action masks on ``pgx/2048`` (illegal moves masked out of the greedy action,
  exploration and the target's max);
- ``cartpole``: PPO on MuJoCo Playground's ``playground/CartpoleBalance`` (MJX physics on CPU).

Per arm: the final policy's evaluation return per seed (``eqxrl.evaluate``, mean over ``--episodes``
episodes, the greedy policy and the sampling one: a greedy policy can loop forever in a grid world), the same for a uniform random policy (random among the legal actions where
the env has masks) run through the same episode runner, compile time and env steps/s
(``TrainInfo``, all seeds together).

Run ``python benchmarks/suites_learning.py`` (every arm at its default budget), ``--arms snake,2048``
for some, ``--quick`` for a smoke test. The table is printed and written to
``benchmarks/results/suites_learning.md``.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from _common import fresh_caches
from _report import Report, parser, table

import eqxrl
from eqxrl.agents import DQN, PPO
from eqxrl.components import Categorical, MLPTorso
from eqxrl.loop import episode_returns

# The first snake records and the 2048 one were taken with the agents' default torso of the time: one MLP
# over the Dict's entries concatenated. The default for a Dict with image-like entries is now a CNN per such
# entry (`eqxrl.components.auto_torso`): the `snake` arm trains with it, `snake-mlp` and `2048` name the MLP
# so that they reproduce their records.
MLP_PPO = dict(actor_torso=MLPTorso((64, 64), "tanh"), critic_torso=MLPTorso((64, 64), "tanh"))
PPO_GRID = dict(num_envs=32, rollout_length=64, num_epochs=4, num_minibatches=4, learning_rate=3e-4, ent_coef=0.01)
ARMS = {
    # arm: (agent class, env name, env steps per seed, agent kwargs)
    # Snake's `step_count` entry runs to 4000: normalised observations (an MLP over the raw count did not learn).
    "snake": (PPO, "jumanji/Snake-v1", 1_000_000, dict(PPO_GRID, normalize_observations=True)),
    "snake-mlp": (PPO, "jumanji/Snake-v1", 1_000_000, dict(PPO_GRID, normalize_observations=True, **MLP_PPO)),
    "navix": (PPO, "navix/Navix-Empty-5x5-v0", 200_000, PPO_GRID),
    "xminigrid": (PPO, "xminigrid/MiniGrid-Empty-5x5", 200_000, PPO_GRID),
    "craftax": (PPO, "craftax/Craftax-Classic-Symbolic-v1", 1_000_000, dict(PPO_GRID, hidden_sizes=(256, 256))),
    "2048": (DQN, "pgx/2048", 300_000, dict(
        num_envs=16, rollout_length=4, learning_starts=10_000, batch_size=128, critic_torso=MLPTorso((64, 64), "relu"))),  # fmt: skip
    # Playground's own brax PPO settings in part (normalised observations, gamma 0.995, lr 1e-3): PPO with
    # PureJaxRL-style defaults at 300k steps stayed below a random policy (287 against 366). SAC, one MJX
    # step per update, ran at 65 env steps/s per seed on these 2 cores: too slow for a CPU record.
    "cartpole": (PPO, "playground/CartpoleBalance", 2_000_000, dict(
        num_envs=64, rollout_length=32, num_epochs=4, num_minibatches=8, learning_rate=1e-3, gamma=0.995,
        ent_coef=0.01, normalize_observations=True)),  # fmt: skip
}


class RandomPolicy(eqx.Module):
    """Uniform random actions (among the legal ones where the env has masks), for the episode runner."""

    agent: eqx.Module

    @property
    def eval_env(self):
        return self.agent.eval_env

    def initial_carry(self, state, batch_shape=()):
        return None

    def act_with_carry(self, state, obs, carry, reset, key=None, deterministic=False):
        return self.act(state, obs, key), carry

    def act(self, state, obs, key=None, deterministic=False):
        layout = self.agent.layout
        x = layout.flatten(obs, "RandomPolicy")
        space = self.agent.env.action_space
        if hasattr(space, "n"):
            return Categorical(jnp.zeros(x.shape[:-1] + (space.n,)), layout.split(x)[1]).sample(key)
        return jax.random.uniform(key, x.shape[:-1] + space.shape, minval=-1.0, maxval=1.0)


def random_returns(agent, key, episodes: int) -> np.ndarray:
    cap = agent.eval_env.max_episode_steps or 1000
    run = eqx.filter_jit(lambda k: episode_returns(RandomPolicy(agent), None, k, episodes, False, cap))
    return np.asarray(run(key))


def run_arm(arm: str, steps: int, seeds: int, seed: int, episodes: int) -> dict:
    cls, env_name, default_steps, kwargs = ARMS[arm]
    agent = cls(eqxrl.envs.make(env_name), **kwargs)
    steps = steps or default_steps
    baseline = random_returns(agent, jax.random.key(seed + 2), episodes * seeds)
    keys = jax.random.split(jax.random.key(seed), seeds)
    state, metrics, info = eqxrl.train(agent, keys, steps, progress=False, return_info=True)
    cap = agent.eval_env.max_episode_steps or 1000
    returns = np.asarray(eqxrl.evaluate(agent, state, jax.random.key(seed + 1), num_episodes=episodes, max_steps=cap))
    sampled = np.asarray(eqxrl.evaluate(agent, state, jax.random.key(seed + 3), num_episodes=episodes,
                                        deterministic=False, max_steps=cap))  # fmt: skip
    train_return = np.asarray(metrics["episode_return"])[:, -max(1, metrics["episode_return"].shape[1] // 10):]
    return dict(
        agent=cls.__name__, env=env_name, per_seed=returns.mean(axis=1), sampled=sampled.mean(axis=1), random=baseline,
        compile=info.compile_seconds, run=info.run_seconds, sps=info.steps_per_second,
        steps=int(np.asarray(state.env_steps).reshape(-1)[0]), train_return=np.nanmean(train_return, axis=1),
    )  # fmt: skip


def main(argv=None) -> None:
    p = parser(__doc__, "suites_learning", quick="smoke test: a few thousand steps per seed, 2 seeds")
    p.add_argument("--steps", type=int, default=0, help="env steps per seed (0: each arm's own budget)")
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--episodes", type=int, default=16, help="evaluation episodes per seed")
    p.add_argument("--arms", default=",".join(ARMS), help="comma-separated subset of " + ",".join(ARMS))
    a = p.parse_args(argv)
    report = Report(__file__, argv)
    if a.quick:
        a.steps, a.seeds, a.episodes = 8192, 2, 4
    results = {}
    for arm in [x for x in a.arms.split(",") if x]:
        fresh_caches()
        r = results[arm] = run_arm(arm, a.steps, a.seeds, a.seed, a.episodes)
        per = ", ".join(f"{x:.2f}" for x in r["per_seed"])
        print(
            f"{arm}: {r['agent']} on {r['env']}, {r['steps']:,} steps per seed; eval per seed [{per}], mean "
            f"{r['per_seed'].mean():.2f} (random {r['random'].mean():.2f}); compile {r['compile']:.1f} s, "
            f"train {r['run']:.1f} s, {r['sps']:,.0f} env steps/s",
            flush=True,
        )
    report.emit(render(report, a, results), a.out)


def render(report, a, results) -> str:
    lines = report.header("Learning on the JAX env suites (eqxrl's adapters)")
    lines += [
        f"- {a.seeds} seeds per arm in one program (keys split from `jax.random.key({a.seed})`); evaluation: "
        f"deterministic policy, {a.episodes} episodes per seed; random: uniform among the legal actions, "
        f"{a.episodes * a.seeds} episodes, same runner",
        f"- PPO's settings on the grid arms: {PPO_GRID} (every other field PPO's default)",
        "",
    ]
    rows = []
    for arm, r in results.items():
        rows.append([
            arm, f"{r['agent']} on `{r['env']}`", f"{r['steps']:,}", ", ".join(f"{x:.2f}" for x in r["per_seed"]),
            f"**{r['per_seed'].mean():.2f}**", ", ".join(f"{x:.2f}" for x in r["sampled"]),
            f"{r['random'].mean():.2f}", f"{np.nanmean(r['train_return']):.2f}",
            f"{r['compile']:.1f}", f"{r['run']:.0f}", f"{r['sps']:,.0f}",
        ])  # fmt: skip
    lines += table(
        ["arm", "agent on env", "env steps per seed", "eval return per seed (greedy)", "mean",
         "eval per seed (sampled)", "random policy",
         "training return, last 10%", "compile (s)", "train (s)", "env steps/s (all seeds)"],
        rows, "llrrrrrrrrr",
    )  # fmt: skip
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
