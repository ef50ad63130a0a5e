"""eqxrl.train / eqxrl.evaluate / eqxrl.stack: layouts, equivalences and bad input."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from probe_envs import ObservationActionReward

import eqxrl
from eqxrl.agents import PPO

SMALL = dict(num_envs=4, rollout_length=8, num_epochs=2, num_minibatches=2, hidden_sizes=(8,))
PER_ITER = 32
# Runs of 3 iterations or chunks of 3 throughout (a run of 3 iterations is one chunk of 3): one
# compiled program per layout (one run, 4 seeds, a stack of 3), shared by the tests here and by
# tests/loop/test_pure.py's (same agent, same chunks), through the run's compilation cache.
CHUNK = 3


@pytest.fixture(scope="module")
def env():
    return ObservationActionReward()


@pytest.fixture(scope="module")
def agent(env):
    return PPO(env, **SMALL)


@pytest.mark.slow
def test_single_run_layout(agent, getkey):
    state, metrics, info = eqxrl.train(agent, getkey(), 5 * PER_ITER + 7, progress=False, return_info=True,
                                       chunk_iterations=CHUNK)  # fmt: skip
    assert all(v.shape == (5,) for v in metrics.values())
    np.testing.assert_array_equal(metrics["env_steps"], PER_ITER * np.arange(1, 6))
    assert int(state.env_steps) == 5 * PER_ITER and int(state.iteration) == 5
    assert info.num_iterations == 5 and info.env_steps == 5 * PER_ITER
    assert info.compile_seconds > 0 and info.steps_per_second > 0
    assert eqxrl.evaluate(agent, state, getkey(), num_episodes=3).shape == (3,)


@pytest.mark.slow
def test_last_chunk_skips_iterations_past_the_budget(agent, getkey):
    # 7 iterations in chunks of 3: the third chunk runs 1 iteration and skips 2.
    state, metrics = eqxrl.train(agent, getkey(), 7 * PER_ITER, progress=False, chunk_iterations=CHUNK)
    assert metrics["loss"].shape == (7,)
    assert int(state.iteration) == 7 and int(state.env_steps) == 7 * PER_ITER


@pytest.mark.slow
def test_seed_batch_matches_single_runs(agent):
    keys = jax.random.split(jax.random.key(0), 4)
    states, metrics = eqxrl.train(agent, keys, 3 * PER_ITER, progress=False)
    assert metrics["loss"].shape == (4, 3)
    assert jax.tree.leaves(states)[0].shape[0] == 4
    for i in range(4):
        _, single = eqxrl.train(agent, keys[i], 3 * PER_ITER, progress=False)
        np.testing.assert_allclose(metrics["loss"][i], single["loss"], rtol=1e-4, atol=1e-6)
    returns = eqxrl.evaluate(agent, states, jax.random.key(1), num_episodes=5)
    assert returns.shape == (4, 5)


@pytest.mark.slow
def test_sweep_matches_individual_agents(env):
    lrs = (1e-4, 1e-3, 1e-2)
    agents = [PPO(env, **SMALL, learning_rate=lr, clip_eps=c) for lr, c in zip(lrs, (0.1, 0.2, 0.3))]
    stacked = eqxrl.stack(agents)
    assert stacked.size == 3 and stacked.agent.learning_rate.shape == (3,)
    keys = jax.random.split(jax.random.key(0), 3)
    states, metrics = eqxrl.train(stacked, keys, 3 * PER_ITER, progress=False)
    np.testing.assert_allclose(metrics["learning_rate"][:, 0], np.array(lrs) * 1.0, rtol=1e-6)
    for i, single_agent in enumerate(agents):
        _, single = eqxrl.train(single_agent, keys[i], 3 * PER_ITER, progress=False)
        np.testing.assert_allclose(metrics["loss"][i], single["loss"], rtol=1e-4, atol=1e-6)
    assert eqxrl.evaluate(stacked, states, jax.random.key(1), num_episodes=2).shape == (3, 2)
    member = stacked.member(1)
    assert float(member.learning_rate) == pytest.approx(1e-3) and float(member.clip_eps) == pytest.approx(0.2)
    # One key for a stack is split into one per member (the same program as above).
    _, metrics = eqxrl.train(stacked, jax.random.key(0), 3 * PER_ITER, progress=False)
    assert metrics["loss"].shape == (3, 3)


@pytest.mark.slow
def test_legacy_uint32_keys_are_accepted(agent):
    _, m_new = eqxrl.train(agent, jax.random.key(5), 3 * PER_ITER, progress=False)
    _, m_old = eqxrl.train(agent, jax.random.PRNGKey(5), 3 * PER_ITER, progress=False)
    np.testing.assert_array_equal(m_new["loss"], m_old["loss"])


@pytest.mark.slow
def test_progress_bar_shows_steps_and_return(agent, getkey, capsys):
    eqxrl.train(agent, getkey(), 4 * PER_ITER, progress=True, desc="probe-run", chunk_iterations=CHUNK)
    err = capsys.readouterr().err
    assert "probe-run" in err and "sps=" in err and "ret=" in err


def test_hyperparameters_and_config(agent):
    hp = agent.hyperparameters()
    assert set(hp) >= {"optimizer.learning_rate", "gamma", "gae_lambda", "clip_eps", "ent_coef", "vf_coef"}  # (the rate lives in the optimizer)
    assert float(agent.learning_rate) == float(hp["optimizer.learning_rate"])  # (its keyword reads it there)
    assert all(v.dtype == jnp.float32 and v.shape == () for v in hp.values())
    cfg = agent.config()
    assert cfg["agent"] == "PPO" and cfg["num_envs"] == 4 and cfg["hidden_sizes"] == [8]
    assert cfg["target_kl"] == "inf" and float(cfg["target_kl"]) == float("inf")
    json.dumps(cfg)


# ----------------------------------------------------------------------- bad input
def test_bad_total_steps(agent, getkey):
    with pytest.raises(ValueError, match=r"train\(total_steps=10\) must cover at least one iteration of PPO \(32 env steps\)"):
        eqxrl.train(agent, getkey(), 10)


def test_bad_key(agent):
    with pytest.raises(ValueError, match=r"key must be a PRNG key from jax.random.key\(seed\)"):
        eqxrl.train(agent, 0, PER_ITER)
    with pytest.raises(ValueError, match=r"got an array of dtype float32"):
        eqxrl.train(agent, jnp.zeros(3), PER_ITER)
    with pytest.raises(ValueError, match=r"key must have shape \(\) \(one run\) or \(n,\) \(n seeds\), got shape \(2, 2\)"):
        eqxrl.train(agent, jax.random.split(jax.random.key(0), (2, 2)), PER_ITER)


def test_bad_chunk_iterations(agent, getkey):
    with pytest.raises(ValueError, match=r"train\(chunk_iterations\) must be a positive int, got 0"):
        eqxrl.train(agent, getkey(), PER_ITER, chunk_iterations=0)


def test_stack_errors(env, getkey):
    with pytest.raises(ValueError, match=r"stack\(agents\) needs at least one agent"):
        eqxrl.stack([])
    with pytest.raises(ValueError, match=r"agents\[1\] differs from agents\[0\] in structure at 'num_envs'"):
        eqxrl.stack([PPO(env, **SMALL), PPO(env, **{**SMALL, "num_envs": 8})])
    stacked = eqxrl.stack([PPO(env, **SMALL), PPO(env, **SMALL)])
    with pytest.raises(ValueError, match=r"key must have shape \(\) or \(2,\) to match the 2 stacked agents"):
        eqxrl.train(stacked, jax.random.split(getkey(), 3), PER_ITER)
    with pytest.raises(ValueError, match=r"Stacked.member\(i\) needs -2 <= i < 2, got 2"):
        stacked.member(2)


def test_evaluate_errors(agent, getkey):
    state = agent.init(getkey())
    with pytest.raises(ValueError, match=r"evaluate\(num_episodes\) must be a positive int, got 0"):
        eqxrl.evaluate(agent, state, getkey(), num_episodes=0)
    with pytest.raises(ValueError, match=r"evaluate\(key\) must be a single key"):
        eqxrl.evaluate(agent, state, jax.random.split(getkey(), 2))
    other = PPO(eqxrl.envs.make("CartPole-v1"), **SMALL)
    with pytest.raises(ValueError, match=r"evaluate\(state\)"):
        eqxrl.evaluate(other, state, getkey())


def test_runs_without_evaluation_share_one_program_whatever_eval_episodes():
    # eval_episodes is static in the compiled chunk; with no eval_every it is not used, so
    # train() (10) and train_run / the command line (their own) compile the same program.
    from eqxrl.loop._pure import TrainFunction  # (private: the compiled chunk's static arguments are internal)

    agent = PPO("CartPole-v1", num_envs=2, rollout_length=8, num_minibatches=1, hidden_sizes=(8,))
    key = jax.random.key(0)
    configs = [TrainFunction(agent, 4, 0, episodes).chunk_config(key, 0, 4) for episodes in (1, 10, 32)]
    assert len({jax.tree.structure(c) for c in configs}) == 1
    # With evaluation the number of episodes still makes its own program.
    with_eval = [TrainFunction(agent, 4, 2, episodes).chunk_config(key, 0, 4) for episodes in (1, 10)]
    assert jax.tree.structure(with_eval[0]) != jax.tree.structure(with_eval[1])
