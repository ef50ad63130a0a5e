"""A state or a run that does not fit the agent given: the message names the first
differing leaf or field, with both values."""

import jax
import pytest

import eqxrl
from eqxrl.agents import DQN, PPO

SMALL = dict(num_envs=2, rollout_length=16, num_epochs=1, num_minibatches=1)


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("runs") / "ppo"
    eqxrl.runs.train_run(path, PPO("CartPole-v1", **SMALL, hidden_sizes=(8,)), total_steps=32, progress=False,
                         eval_episodes=1)  # fmt: skip
    return path


@pytest.mark.slow
def test_evaluate_names_the_first_differing_leaf():
    small = PPO("CartPole-v1", **SMALL, hidden_sizes=(8, 8))
    wide = PPO("CartPole-v1", **SMALL, hidden_sizes=(16,))
    state = small.init(jax.random.key(0))
    with pytest.raises(
        ValueError,
        match=r"evaluate\(state\) does not match PPO \(PPOState, one run\) at actor\.torso\.net\.layers\[0\]\.weight: "
        r"shape \(4, 16\) expected, got \(4, 8\)",
    ):
        eqxrl.evaluate(wide, state, jax.random.key(1))
    seeds = jax.vmap(small.init)(jax.random.split(jax.random.key(0), 3))
    with pytest.raises(ValueError, match=r"evaluate\(state\) does not match PPO \(PPOState, a batch of 3\) at actor"):
        eqxrl.evaluate(wide, seeds, jax.random.key(1))
    dqn = DQN("CartPole-v1", hidden_sizes=(8,))
    with pytest.raises(ValueError, match=r"evaluate\(state\) does not match DQN \(OffPolicyState, one run\) at .*: expected, missing"):
        eqxrl.evaluate(dqn, state, jax.random.key(1))


@pytest.mark.slow
def test_load_state_names_the_agent_or_field_that_differs(run_dir):
    with pytest.raises(ValueError, match=r"does not hold a state of the agent given: the run was written for agent 'ppo', got 'dqn'"):
        eqxrl.runs.load_state(run_dir, DQN("CartPole-v1", hidden_sizes=(8,)))
    with pytest.raises(ValueError, match=r"optimizer.learning_rate=0.00025 in the run, optimizer.learning_rate=0.001 in the agent given"):
        eqxrl.runs.load_state(run_dir, PPO("CartPole-v1", **SMALL, hidden_sizes=(8,), learning_rate=1e-3))
    with pytest.raises(ValueError, match=r"hidden_sizes=\[8\] in the run, hidden_sizes=\[16\] in the agent given"):
        eqxrl.runs.load_state(run_dir, PPO("CartPole-v1", **SMALL, hidden_sizes=(16,)))
    state = eqxrl.runs.load_state(run_dir, PPO("CartPole-v1", **SMALL, hidden_sizes=(8,)))
    assert int(state.env_steps) == 32
