"""The agents every export test covers (tests/runs/test_export.py, tests/components/test_noise_sampling.py): one small
configuration of each kind, discrete and continuous, recurrent, with normalised observations."""

from eqxrl.agents import DADS, DDPG, DQN, IPPO, MAPPO, MPO, PPO, PQN, SAC, TD3, CrossQ

ON = dict(num_envs=2, rollout_length=4, num_minibatches=2, num_epochs=1, hidden_sizes=(8,))
OFF = dict(num_envs=2, learning_starts=2, batch_size=4, buffer_size=32, hidden_sizes=(8,))
CASES = {
    "ppo": lambda: PPO("CartPole-v1", **ON, normalize_observations=True),
    "ppo_box": lambda: PPO("Pendulum-v1", **ON, normalize_observations=True),
    "ppo_recurrent": lambda: PPO.from_preset("recurrent", "CartPoleNoVel-v1", num_envs=2, rollout_length=4, num_minibatches=2, num_epochs=1),
    "dqn": lambda: DQN("CartPole-v1", **OFF),
    # Rainbow's heads: dueling C51 with a noisy output layer (its noise an input of the sampling policy).
    "dqn_rainbow": lambda: DQN("CartPole-v1", **OFF, head="dueling_categorical", num_atoms=11, v_min=0.0, v_max=100.0, noisy=True),
    "pqn": lambda: PQN("CartPole-v1", **ON),
    "sac": lambda: SAC("Pendulum-v1", **OFF, normalize_observations=True),
    "sac_discrete": lambda: SAC("CartPole-v1", **OFF),
    "td3": lambda: TD3("Pendulum-v1", **OFF),
    "crossq": lambda: CrossQ("Pendulum-v1", **OFF, critic_hidden_sizes=(8,), normalize_observations=True),
    # (its actor batch-renormalised, as sbx's: eval mode on the actor's running statistics)
    "crossq_bn": lambda: CrossQ("Pendulum-v1", **OFF, critic_hidden_sizes=(8,), actor_batch_norm=True),
    "ddpg": lambda: DDPG("Pendulum-v1", **OFF),
    "mpo": lambda: MPO("Pendulum-v1", **OFF, num_action_samples=4),
    "mpo_discrete": lambda: MPO("CartPole-v1", **OFF, num_action_samples=4),
    "dads": lambda: DADS("Point2D-v0", num_skills=2, **OFF),
    "ippo": lambda: IPPO("jaxmarl/MPE_simple_spread_v3", **ON),
    "mappo": lambda: MAPPO("jaxmarl/MPE_simple_spread_v3", **ON),
}
ENV_NAMES = {"ppo_recurrent": "CartPoleNoVel-v1"}
"""Env names `agent.env.name` does not give (CartPoleNoVel-v1's env is named CartPole-v1)."""
