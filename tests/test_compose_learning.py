"""Learning with composed agents: a CNN torso (PPO, MinAtar), torsos of different widths and
schedules (SAC), and a user-written replay buffer (DQN). Short single-seed runs that fail if the
composed agent does not learn at all (benchmarks/ppo_minatar_cnn.py has the longer comparison)."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jaxtyping import Array, Int

import eqxrl
from eqxrl.agents import DQN, PPO, SAC
from eqxrl.components import (
    BufferState,
    CNNTorso,
    CosineSchedule,
    MLPTorso,
    ReplayBuffer,
)


# ----------------------------------------------------------------------- PPO with a CNN torso
def _uniform(state):
    """The state with the policy's output layer zeroed: uniform action probabilities (a random policy)."""
    return eqx.tree_at(lambda s: (s.actor.out.weight, s.actor.out.bias), state,
                       (jnp.zeros_like(state.actor.out.weight), jnp.zeros_like(state.actor.out.bias)))  # fmt: skip


@pytest.mark.slow
@pytest.mark.learning
def test_cnn_ppo_beats_random_on_breakout_minatar():
    agent = PPO(
        "Breakout-MinAtar", num_envs=32, rollout_length=64, num_epochs=4, num_minibatches=4, learning_rate=1e-3,
        ent_coef=0.01, actor_torso=CNNTorso.minatar(), critic_torso=CNNTorso.minatar(),
    )  # fmt: skip
    state, _ = eqxrl.train(agent, jax.random.key(0), 48 * 2048, progress=False)
    # The MinAtar network under the policy head: conv 16x3x3 over 10x10x4, dense 128, 3 actions.
    assert sum(x.size for x in jax.tree_util.tree_leaves(eqx.filter(state.actor, eqx.is_inexact_array))) == 132_179
    # The same evaluation (sampled actions, 64 episodes) of the trained policy and of a uniform one.
    evaluate = lambda s: float(np.mean(eqxrl.evaluate(agent, s, jax.random.key(100), 64, deterministic=False)))
    trained, random = evaluate(state), evaluate(_uniform(state))
    assert random < 1.0, random  # about 0.5
    # Seeds 0, 1, 2 (evaluation keys 100, 101, 102) gave 4.20, 5.00, 5.25 against 0.47, 0.45, 0.44; about
    # 20 CPU-s of training plus 20 of compilation on 2 CPU cores.
    assert trained > random + 2.0, (trained, random)


# ----------------------------------------------------------------------- SAC: torsos and schedules
def _widths(encoder) -> list[int]:
    return [int(layer.weight.shape[-1]) for layer in encoder.net.layers]  # weight: (in, out)


@pytest.mark.slow
@pytest.mark.learning
def test_sac_with_torsos_of_different_widths_and_cosine_rates_learns_pendulum():
    agent = SAC(
        "Pendulum-v1", actor_torso=MLPTorso((32, 32)), critic_torso=MLPTorso((64, 64)), learning_starts=1000,
        actor_learning_rate=CosineSchedule(1e-3), critic_learning_rate=CosineSchedule(1e-3),
    )  # fmt: skip
    key = jax.random.key(0)
    learner = eqx.filter_eval_shape(agent.init, key).learner
    assert _widths(learner.actor.torso) == [32, 32]
    assert _widths(learner.critic.members.torso) == [64, 64]  # one leading axis: the ensemble
    assert learner.critic.members.torso.net.layers[0].weight.shape[0] == agent.num_critics
    untrained = float(np.mean(eqxrl.evaluate(agent, eqx.filter_jit(agent.init)(key), jax.random.key(1), num_episodes=8)))
    state, _ = eqxrl.train(agent, key, 10_000, progress=False)
    trained = float(np.mean(eqxrl.evaluate(agent, state, jax.random.key(1), num_episodes=8)))
    assert untrained < -900
    # Seeds 0-3 (train keys 0-3, evaluation key 1) reach -180, -171, -168, -173 at this budget (10,000
    # steps, torsos 32x32 and 64x64); an untrained policy scores about -1200. About 10 CPU-s of training
    # plus 20 of compilation (it was 15,000 steps with 64x64 and 128x128 torsos: 78 CPU-s for the test).
    assert trained > -600, (untrained, trained)


# ----------------------------------------------------------------------- DQN: a user's buffer
class CountingState(BufferState):
    """The uniform buffer's state plus the number of transitions `add` was given."""

    added: Int[Array, ""]


class CountingReplayBuffer(ReplayBuffer):
    """A uniform replay buffer that also counts every transition written into it."""

    def init(self, example) -> CountingState:
        s = super().init(example)
        return CountingState(s.data, s.position, s.size, s.tree, s.max_priority, jnp.zeros((), jnp.int32))

    def add(self, state: CountingState, batch) -> CountingState:
        s = super().add(state, batch)
        size = jax.tree.leaves(batch)[0].shape[0]
        return CountingState(s.data, s.position, s.size, s.tree, s.max_priority, state.added + size)


@pytest.mark.slow
@pytest.mark.learning
def test_dqn_with_a_user_buffer_learns_cartpole():
    buffer = CountingReplayBuffer(50_000)
    agent = DQN("CartPole-v1", buffer=buffer)  # double DQN (the default): the suite's DQN learning test
    assert agent.replay_buffer is buffer
    state, _ = eqxrl.train(agent, jax.random.key(0), 100_000, progress=False)
    assert isinstance(state.buffer, CountingState)
    assert int(state.buffer.added) == int(state.env_steps) == 100_000  # every env step's transition went in
    assert int(state.buffer.size) == 50_000  # full: the oldest were overwritten
    returns = float(np.mean(eqxrl.evaluate(agent, state, jax.random.key(1), num_episodes=16)))
    assert returns >= 150, returns  # an untrained greedy policy scores about 10
