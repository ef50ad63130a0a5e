"""PQN (parallelised Q-learning): its Q(lambda) targets, epsilon-greedy collection, masks, the
LayerNorm torso option, the kit's checks, the command line and a learning run."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from cli_calls import main_output
from typecheck import no_runtime_typecheck

import eqxrl
from eqxrl import runs
from eqxrl.agents import PQN
from eqxrl.components import LayerNorm, MLPTorso, lambda_returns
from eqxrl.envs import make
from eqxrl.testing import check_action_masks
from eqxrl.testing.probes import MaskedActions

TINY = dict(num_envs=4, rollout_length=8, num_epochs=2, num_minibatches=2, hidden_sizes=(16,))


# ----------------------------------------------------------------------- LayerNorm, MLPTorso(layer_norm=True)
def test_layer_norm_normalises_the_last_axis_over_any_batch():
    norm = LayerNorm(5)
    x = jax.random.normal(jax.random.key(0), (3, 2, 5)) * 4.0 + 7.0
    y = norm(x)
    assert y.shape == x.shape
    np.testing.assert_allclose(np.asarray(y).mean(-1), 0.0, atol=1e-5)
    np.testing.assert_allclose(np.asarray(y).std(-1), 1.0, atol=1e-3)
    assert [leaf.shape for leaf in jax.tree.leaves(norm)] == [(5,), (5,)]  # (weight and bias: learned)
    assert np.allclose(norm(x[0, 0]), y[0, 0])  # (one vector, no batch axes)


def test_mlp_torso_with_layer_norm_normalises_every_layer_before_its_activation():
    plain, normed = MLPTorso((8, 8), "relu"), MLPTorso((8, 8), "relu", layer_norm=True)
    enc = normed.make((3,), key=jax.random.key(0))
    assert len(enc.net.norms) == 2 and enc.features == 8
    assert plain.make((3,), key=jax.random.key(0)).net.norms is None  # (as before: no new leaves)
    x = jax.random.normal(jax.random.key(1), (4, 3)) * 100.0
    pre = enc.net.norms[0](enc.net.layers[0](x))  # the first layer's normalised pre-activation
    np.testing.assert_allclose(np.asarray(pre).mean(-1), 0.0, atol=1e-4)
    assert enc(x).shape == (4, 8) and bool(jnp.all(jnp.isfinite(enc(x))))


def test_layer_norm_bad_inputs_are_named():
    with no_runtime_typecheck():
        with pytest.raises(ValueError, match=r"^MLPTorso\(layer_norm\) must be True or False, got 1$"):
            MLPTorso((8,), layer_norm=1)
        with pytest.raises(ValueError, match=r"^LayerNorm\(size\) must be a positive int, got 0$"):
            LayerNorm(0)


# ----------------------------------------------------------------------- the agent
@pytest.mark.slow  # (over 2 s in the fast tier: tests/tiers.py)
def test_pqn_trains_and_its_targets_are_the_rollouts_q_lambda_returns():
    agent = PQN("CartPole-v1", **TINY)
    state = agent.init(jax.random.key(0))
    assert agent.q_torso() == MLPTorso((16,), "relu", layer_norm=True)
    step = jax.jit(lambda s: agent.train_iteration(s, eqxrl.agents.Clock(jnp.asarray(0), jnp.asarray(4))))
    new, metrics = step(state)
    assert int(new.env_steps) == 32 and int(new.iteration) == 1
    assert all(bool(jnp.isfinite(metrics[k])) for k in ("q_loss", "q_taken", "q_target", "epsilon"))
    assert float(metrics["epsilon"]) == pytest.approx(1.0)  # progress 0: eps_start
    # The targets: lambda_returns of the scaled rewards and the greedy values at the next observations.
    collected, ro = agent._collect(state, jnp.asarray(1.0))
    next_q = jnp.max(agent.q_values(state.q, ro.final_obs), axis=-1)
    want = lambda_returns(ro.reward * 0.1, next_q, ro.terminated, ro.truncated, 0.99, 0.95)
    assert want.shape == (8, 4) and float(jnp.mean(want)) == pytest.approx(float(metrics["q_target"]), rel=1e-5)
    assert float(agent.epsilon(0.1)) == pytest.approx(0.525) and float(agent.epsilon(0.5)) == pytest.approx(0.05)


def test_pqn_acts_greedily_or_epsilon_greedily():
    agent = PQN("CartPole-v1", **TINY, eps_end=1.0)
    state = agent.init(jax.random.key(0))
    obs = jax.vmap(agent.env.reset)(jax.random.split(jax.random.key(1), 64))[1].obs
    greedy = agent.act(state, obs, deterministic=True)
    assert greedy.shape == (64,) and greedy.dtype == jnp.int32
    np.testing.assert_array_equal(greedy, jnp.argmax(state.q(obs), axis=-1))
    random = agent.act(state, obs, jax.random.key(2))  # eps_end = 1: uniform
    assert 10 < int(jnp.sum(random)) < 54
    with no_runtime_typecheck(), pytest.raises(ValueError, match=r"^PQN.act\(key\) is required unless deterministic=True$"):
        agent.act(state, obs)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(env="Pendulum-v1"), r"^PQN needs a Discrete action space, got Box"),
        (dict(num_minibatches=3), r"^PQN\(num_minibatches=3\) must divide num_envs \* rollout_length = 2048$"),
        (dict(q_lambda=1.5), r"^PQN\(q_lambda\) must be in \[0, 1\], got 1.5$"),
        (dict(exploration_fraction=0.0), r"^PQN\(exploration_fraction\) must be in \(0, 1\], got 0$"),
        (dict(reward_scale=-1.0), r"^PQN\(reward_scale\) must be > 0, got -1$"),
        (dict(layer_norm="yes"), r"^PQN\(layer_norm\) must be True or False, got 'yes'$"),
        (dict(hidden_sizes=()), r"^PQN\(hidden_sizes\) must be a non-empty tuple of positive ints, got \(\)$"),
        (dict(env=3), r"^PQN\(env\) must be an eqxrl AbstractEnv or an env name"),
    ],
)
def test_pqn_bad_inputs_are_named(kwargs, message):
    kwargs = {"env": "CartPole-v1", **kwargs}
    with no_runtime_typecheck(), pytest.raises(ValueError, match=message):
        PQN(**kwargs)


@pytest.mark.slow
def test_pqn_never_takes_an_illegal_action_and_learns_the_best_legal_one():
    agent = PQN(MaskedActions(), num_envs=16, rollout_length=8, num_minibatches=4, hidden_sizes=(32,), learning_rate=3e-3)
    check_action_masks(agent, total_steps=8192)


@pytest.mark.slow
def test_pqn_on_the_command_line_writes_a_run_that_reloads(tmp_path):
    run_dir = tmp_path / "pqn"
    flags = ["--total-steps", "1024", "--num-envs", "4", "--rollout-length", "32", "--num-minibatches", "2",
             "--hidden-sizes", "8", "--q-lambda", "0.5", "--eval-episodes", "2", "--quiet"]  # fmt: skip
    code, _ = main_output(["train", "pqn", "--run-dir", str(run_dir), *flags])
    assert code == 0
    config = json.loads((run_dir / "config.json").read_text())
    assert config["agent"] == "pqn" and config["agent_config"]["q_lambda"] == 0.5
    agent, state, _ = runs.load_run(run_dir)
    assert isinstance(agent, PQN) and agent.num_envs == 4
    assert np.all(np.isfinite(eqxrl.evaluate(agent, state, jax.random.key(0), num_episodes=2)))


@pytest.mark.learning
def test_pqn_learns_cartpole_with_its_defaults():
    """PQN's defaults (PureJaxQL's CartPole settings) on 3 seeds: greedy returns well above a random
    policy's ~22: above 400 on at least 2 of 3 at 100k steps (seen: 499, 500, 468; docs/agents/pqn.md)."""
    agent = PQN(make("CartPole-v1"))
    states, _ = eqxrl.train(agent, jax.random.split(jax.random.key(0), 3), total_steps=100_000, progress=False)
    returns = np.asarray(eqxrl.evaluate(agent, states, jax.random.key(1), num_episodes=16)).mean(axis=-1)
    print(returns)
    assert np.sum(returns > 400) >= 2, returns


@pytest.mark.slow
def test_the_pqn_page_runs():
    """docs/agents/pqn.md's Python example."""
    import pathlib
    import re

    text = (pathlib.Path(__file__).resolve().parents[2] / "docs" / "agents" / "pqn.md").read_text()
    blocks = re.findall(r"^```python[ \t]*\n(.*?)^```[ \t]*$", text, re.DOTALL | re.MULTILINE)
    assert len(blocks) == 1
    namespace = {"__name__": "docs_agents_pqn"}
    exec(compile(blocks[0], "docs/agents/pqn.md [python block 1]", "exec"), namespace)
    assert namespace["metrics"]["q_loss"].shape == (2, 32)  # (4096 steps of 8 envs x 16)


def test_pqn_optimizer_keywords_build_the_optimizer_it_stores():
    """`learning_rate`, `max_grad_norm` and `anneal_lr` build PQN's `optimizer` (as PPO's do); the
    keywords read and set its numbers, and one that disagrees with a given optimizer is refused."""
    from eqxrl.agents import set_hyperparameter
    from eqxrl.components import Adam

    agent = PQN("CartPole-v1", learning_rate=3e-4, max_grad_norm=1.0, anneal_lr=False)
    assert agent.optimizer == Adam(3e-4, 1.0) and PQN("CartPole-v1").optimizer == Adam(1e-4, 10.0, anneal=True)
    assert (float(agent.learning_rate), float(agent.max_grad_norm), agent.anneal_lr) == (pytest.approx(3e-4), 1.0, False)
    assert float(set_hyperparameter(agent, "learning_rate", 1e-3).optimizer.learning_rate) == pytest.approx(1e-3)
    assert "optimizer.learning_rate" in agent.hyperparameters() and "learning_rate" not in agent.hyperparameters()
    with no_runtime_typecheck():
        with pytest.raises(ValueError, match=r"^PQN\(optimizer\) is the Q-network's optimizer itself: with it given, \['learning_rate'\] must stay unset \(or agree with it\)$"):
            PQN("CartPole-v1", optimizer=Adam(1e-3), learning_rate=5e-4)
        with pytest.raises(ValueError, match=r"^PQN\(anneal_lr\) must be True or False, got 1$"):
            PQN("CartPole-v1", anneal_lr=1)
