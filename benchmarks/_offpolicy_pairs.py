"""The four pairs of ``offpolicy_throughput.py`` (and ``_offpolicy_breakdown.py``): each peer's
configuration in the peer's own terms (`CONFIGS`), its translation into eqxrl's agent (`make_eqxrl`)
and the check that both sides build networks of the same size (`check_same_networks`). The docstring
of ``offpolicy_throughput.py`` explains the translation.
"""

from __future__ import annotations

import equinox as eqx
import jax
import numpy as np

import eqxrl
from _common import num_params
from eqxrl.agents import DQN, SAC, TD3

EVAL_EPISODES = 16

# ============================================================================ configurations
# The peer's configuration, in the peer's terms; `make_eqxrl_*` translates it.
CONFIGS = {
    # rejax configs/gymnax/pendulum.yaml, `sac`
    "sac": dict(
        env="Pendulum-v1", num_envs=1, buffer_size=10_000, fill_buffer=256, batch_size=256, learning_rate=0.01,
        num_epochs=1, gamma=0.99, polyak=0.98, normalize_observations=True, hidden=(64, 64), activation="swish",
    ),
    # rejax configs/gymnax/pendulum.yaml, `td3`
    "td3": dict(
        env="Pendulum-v1", num_envs=1, buffer_size=10_000, fill_buffer=1_000, batch_size=100, learning_rate=1e-3,
        num_epochs=1, gamma=0.99, polyak=0.95, max_grad_norm=100.0, exploration_noise=0.3, target_noise=0.2,
        target_noise_clip=0.5, policy_delay=2, normalize_observations=True, hidden=(64, 64), activation="swish",
    ),
    # rejax configs/gymnax/cartpole.yaml, `dqn` (but rejax's plain QNetwork, see the docstring)
    "dqn": dict(
        env="CartPole-v1", num_envs=10, buffer_size=50_000, fill_buffer=5_000, batch_size=100, max_grad_norm=10.0,
        learning_rate=1e-3, num_epochs=5, polyak=0.98, eps_start=1.0, eps_end=0.05, exploration_fraction=0.5,
        gamma=0.99, ddqn=True, normalize_observations=False, hidden=(64, 64), activation="swish",
    ),
    # brax.training.agents.sac.train keywords; network: brax's default (256, 256) relu
    "brax": dict(
        env="inverted_pendulum", episode_length=1000, num_envs=64, grad_updates_per_step=16, batch_size=256,
        learning_rate=1e-3, discounting=0.99, reward_scaling=1.0, tau=0.005, min_replay_size=1024,
        max_replay_size=100_000, normalize_observations=True, hidden=(256, 256), activation="relu",
    ),
    # brax's published SAC settings for ant (brax training colab), at GPU scale: `gpu_scale.py`
    "ant": dict(
        env="ant", episode_length=1000, num_envs=128, grad_updates_per_step=64, batch_size=512,
        learning_rate=3e-4, discounting=0.97, reward_scaling=10.0, tau=0.005, min_replay_size=8192,
        max_replay_size=1_048_576, normalize_observations=True, hidden=(256, 256), activation="relu",
    ),
}

# Pairs whose peer is brax's own SAC trainer.
BRAX_PAIRS = ("brax", "ant")

PAIR_NAMES = {
    "sac": ("SAC", "Pendulum-v1", "rejax"),
    "td3": ("TD3", "Pendulum-v1", "rejax"),
    "dqn": ("DQN", "CartPole-v1", "rejax"),
    "brax": ("SAC", "brax/inverted_pendulum", "brax"),
    "ant": ("SAC", "brax/ant", "brax"),
}

# Env-step budgets per run: (default, --quick). rejax's configs train SAC and
# TD3 on Pendulum for 10k steps and DQN on CartPole for 100k.
BUDGETS = {
    "sac": (10_000, 2_000),
    "td3": (10_000, 2_000),
    "dqn": (100_000, 10_000),
    "brax": (32_768, 4_096),
    "ant": (131_072, 16_384),
}


def iteration_steps(pair: str) -> int:
    """Env steps of one iteration, a common multiple of both libraries' iterations."""
    c = CONFIGS[pair]
    if pair == "td3":
        return c["num_envs"] * c["policy_delay"]
    return c["num_envs"]


# ============================================================================ eqxrl side
def make_eqxrl(pair: str, brax_backend: str = "generalized"):
    c = CONFIGS[pair]
    if pair == "sac":
        return SAC(
            c["env"], num_envs=c["num_envs"], rollout_length=1,
            updates_per_step=c["num_epochs"] / c["num_envs"], batch_size=c["batch_size"],
            buffer_size=c["buffer_size"], learning_starts=c["fill_buffer"],
            hidden_sizes=c["hidden"], activation=c["activation"],
            actor_learning_rate=c["learning_rate"], critic_learning_rate=c["learning_rate"],
            alpha_learning_rate=c["learning_rate"], gamma=c["gamma"], tau=1.0 - c["polyak"],
            init_alpha=1.0, target_entropy_scale=1.0, normalize_observations=c["normalize_observations"],
        )
    if pair == "td3":
        env = eqxrl.envs.make(c["env"])
        half_range = float(np.max(np.asarray(env.action_space.high) - np.asarray(env.action_space.low))) / 2.0
        return TD3(
            env, num_envs=c["num_envs"], rollout_length=1,
            updates_per_step=c["num_epochs"] / c["num_envs"], batch_size=c["batch_size"],
            buffer_size=c["buffer_size"], learning_starts=c["fill_buffer"] + c["num_envs"],
            policy_delay=c["policy_delay"], hidden_sizes=c["hidden"], activation=c["activation"],
            actor_learning_rate=c["learning_rate"], critic_learning_rate=c["learning_rate"],
            gamma=c["gamma"], tau=1.0 - c["polyak"], max_grad_norm=c["max_grad_norm"],
            exploration_noise=c["exploration_noise"] / half_range, target_noise=c["target_noise"] / half_range,
            target_noise_clip=c["target_noise_clip"] / half_range,
            normalize_observations=c["normalize_observations"],
        )
    if pair == "dqn":
        return DQN(
            c["env"], num_envs=c["num_envs"], rollout_length=1,
            updates_per_step=c["num_epochs"] / c["num_envs"], batch_size=c["batch_size"],
            buffer_size=c["buffer_size"], learning_starts=c["fill_buffer"] + c["num_envs"],
            double=c["ddqn"], loss="mse", target_update_period=c["num_epochs"], tau=1.0 - c["polyak"],
            hidden_sizes=c["hidden"], activation=c["activation"], learning_rate=c["learning_rate"],
            gamma=c["gamma"], eps_start=c["eps_start"], eps_end=c["eps_end"],
            exploration_fraction=c["exploration_fraction"], max_grad_norm=c["max_grad_norm"],
            normalize_observations=c["normalize_observations"],
        )
    if pair in BRAX_PAIRS:
        env = eqxrl.envs.make("brax/" + c["env"], backend=brax_backend, episode_length=c["episode_length"])
        return SAC(
            env, num_envs=c["num_envs"], rollout_length=1,
            updates_per_step=c["grad_updates_per_step"] / c["num_envs"], batch_size=c["batch_size"],
            buffer_size=c["max_replay_size"], learning_starts=c["min_replay_size"],
            hidden_sizes=c["hidden"], activation=c["activation"],
            actor_learning_rate=c["learning_rate"], critic_learning_rate=c["learning_rate"],
            alpha_learning_rate=3e-4, gamma=c["discounting"], tau=c["tau"], reward_scale=c["reward_scaling"],
            init_alpha=1.0, target_entropy_scale=0.5, normalize_observations=c["normalize_observations"],
        )
    raise ValueError(pair)


def peer(pair: str) -> str:
    """The peer's trainer, for the record."""
    return "`brax.training.agents.sac.train`" if pair in BRAX_PAIRS else f"`rejax.{PAIR_NAMES[pair][0]}`"


def config_line(pair: str, steps: int, brax_backend: str) -> str:
    c = dict(CONFIGS[pair])
    env = c.pop("env")
    if pair in BRAX_PAIRS:
        env = f"brax {env}, backend {brax_backend!r}"
    fields = ", ".join(f"{k}={v}" for k, v in c.items())
    return f"- **{pair}** ({PAIR_NAMES[pair][0]}, {env}; eqxrl vs {peer(pair)}; {steps:,} env steps per run): {fields}"


def _eqxrl_counts(agent, pair: str) -> tuple[int, int]:
    learner = eqx.filter_eval_shape(agent.init_learner, jax.random.key(0))
    if pair == "dqn":
        return num_params(learner.q), 0
    return num_params(learner.actor), num_params(learner.critic)


def check_same_networks(pairs, brax_backend: str) -> dict[str, str]:
    """Equal parameter counts of actor and critic (DQN: the Q-network) on both sides; per pair, a line
    for the record."""
    out = {}
    for pair in pairs:
        agent = make_eqxrl(pair, brax_backend)
        counts = _eqxrl_counts(agent, pair)
        if pair in BRAX_PAIRS:
            from peers import brax_sac

            peer_counts = brax_sac.param_counts(CONFIGS[pair], agent.obs_size, agent.action_size)
        else:
            from peers import rejax_adapter

            peer_counts = rejax_adapter.offpolicy_param_counts(pair, CONFIGS[pair])
        assert counts == peer_counts, (pair, counts, peer_counts)
        c = CONFIGS[pair]
        nets = f"{c['hidden']} {c['activation']}"
        if pair == "dqn":
            out[pair] = f"Q-network {counts[0]:,} parameters on both sides, {nets}"
        else:
            out[pair] = f"actor {counts[0]:,} / critics {counts[1]:,} parameters on both sides, {nets}"
    return out
