"""Recurrent torsos (GRUTorso, LSTMTorso) and recurrent PPO: shapes, the reset property,
init/act/evaluate/train, run directories and resume, seeds, bad input, and learning a
memory task a feed-forward policy cannot solve."""

import importlib

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import eqxrl
from eqxrl import cli
from eqxrl.agents import PPO, Clock
from eqxrl.components import GRUTorso, LSTMTorso, RecurrentEncoder, as_torso, check_torso, is_recurrent

SMALL = dict(num_envs=4, rollout_length=8, num_epochs=2, num_minibatches=2, hidden_sizes=(8,))
ENV = "MemoryChain-bsuite"


def _agent(torso=None, **kwargs):
    torso = GRUTorso(8, (8,)) if torso is None else torso
    return PPO(ENV, **{**SMALL, "actor_torso": torso, "shared_torso": True, **kwargs})


def _leaves(tree):
    return [np.asarray(x) for x in jax.tree.leaves(eqx.filter(tree, eqx.is_inexact_array))]


# ----------------------------------------------------------------- the torsos
@pytest.mark.parametrize("spec", [GRUTorso(6, (5,)), LSTMTorso(6, ()), GRUTorso(3, (4, 4), "relu")])
@pytest.mark.slow
def test_recurrent_torso_shapes(spec):
    enc = spec.make((2, 3), key=jax.random.key(0))
    assert isinstance(enc, RecurrentEncoder) and enc.features == spec.hidden_size and enc.obs_size == 6
    hidden = enc.initial_state((4, 2))
    assert all(h.shape == (4, 2, spec.hidden_size) for h in jax.tree.leaves(hidden))
    assert len(jax.tree.leaves(hidden)) == (2 if isinstance(spec, LSTMTorso) else 1)
    x = jax.random.normal(jax.random.key(1), (4, 2, 6))
    features, new = enc(x, hidden, jnp.zeros((4, 2), bool))
    assert features.shape == (4, 2, spec.hidden_size)
    assert jax.tree.structure(new) == jax.tree.structure(hidden)
    seq, last = enc.scan(jnp.stack([x] * 5), hidden, jnp.zeros((5, 4, 2), bool))
    assert seq.shape == (5, 4, 2, spec.hidden_size)
    np.testing.assert_allclose(np.asarray(seq[-1]), np.asarray(spec.output(last)), rtol=1e-6)
    # The hidden state carries information: a different history gives different features.
    other, _ = enc.scan(jnp.stack([-x] * 4 + [x]), hidden, jnp.zeros((5, 4, 2), bool))
    assert not np.allclose(np.asarray(other[-1]), np.asarray(seq[-1]))


@eqx.filter_jit
def _scan_and_restart(enc, xs, start, resets, t):
    """The features of `xs` from `start` with `resets`, and those of a fresh sequence (zero state,
    no reset flag at its start) begun at step `t` (rolled to the front, so the shapes stay fixed;
    `t` is an array, so every start step runs the same compiled program)."""
    features, _ = enc.scan(xs, start, resets)
    shifted = jnp.roll(resets, -t, axis=0).at[0].set(False)
    fresh, _ = enc.scan(jnp.roll(xs, -t, axis=0), enc.initial_state(resets.shape[1:]), shifted)
    return features, fresh


@settings(max_examples=20, deadline=None)
@given(
    resets=st.lists(st.lists(st.booleans(), min_size=3, max_size=3), min_size=8, max_size=8),
    lstm=st.booleans(),
    seed=st.integers(0, 2**16),
)
@pytest.mark.slow
def test_the_output_after_a_reset_equals_a_fresh_sequence_started_there(resets, lstm, seed):
    spec = LSTMTorso(5, (4,)) if lstm else GRUTorso(5, (4,))
    enc = spec.make((3,), key=jax.random.key(seed))
    resets = np.array(resets)  # (T, batch)
    T = len(resets)
    xs = jax.random.normal(jax.random.key(seed + 1), (*resets.shape, 3))
    # A non-zero starting state, so a missed reset shows.
    start = jax.tree.map(lambda h: h + 0.5, enc.initial_state((3,)))
    for t in sorted({int(t) for t in np.flatnonzero(resets.any(axis=1))} | {0}):
        features, fresh = _scan_and_restart(enc, xs, start, jnp.asarray(resets), jnp.asarray(t, jnp.int32))
        for b in range(resets.shape[1]):
            if resets[t, b]:  # reset at t: from there on, as if the sequence began at t
                np.testing.assert_allclose(np.asarray(features[t:, b]), np.asarray(fresh[: T - t, b]), rtol=1e-5, atol=1e-6)
            elif t == 0 and not resets[:, b].any():  # never reset: the (non-zero) start state shows
                assert not np.allclose(np.asarray(features[:, b]), np.asarray(fresh[:, b]))


def test_recurrent_torso_bad_input():
    with pytest.raises(ValueError, match=r"GRUTorso\(hidden_size\) must be a positive int, got 0"):
        GRUTorso(0)
    with pytest.raises(ValueError, match=r"LSTMTorso\(encoder_sizes\) must be a tuple of positive ints"):
        LSTMTorso(8, (0,))
    with pytest.raises(ValueError, match=r"GRUTorso\(activation\) must be one of"):
        GRUTorso(8, (8,), "nope")
    enc = GRUTorso(4, ()).make((3,), key=jax.random.key(0))
    with pytest.raises(ValueError, match=r"reset must have the batch shape of x, \(2,\), got \(3,\)"):
        enc(jnp.zeros((2, 3)), enc.initial_state((2,)), jnp.zeros((3,), bool))
    with pytest.raises(ValueError, match="RecurrentEncoder"):
        enc(jnp.zeros((2, 4)), enc.initial_state((2,)), jnp.zeros((2,), bool))


def test_recurrent_torso_specs_as_fields():
    assert as_torso(GRUTorso) == GRUTorso() and as_torso(LSTMTorso) == LSTMTorso()
    assert is_recurrent(GRUTorso()) and not is_recurrent(eqxrl.components.MLPTorso())
    check_torso("X", "torso", LSTMTorso(), recurrent=True)
    with pytest.raises(ValueError, match=r"SAC\(actor_torso\) is a recurrent torso \(GRUTorso\); only PPO takes one"):
        eqxrl.agents.SAC("Pendulum-v1", actor_torso=GRUTorso())


# ----------------------------------------------------------------- recurrent PPO
def test_recurrent_ppo_bad_configurations():
    with pytest.raises(ValueError, match=r"PPO\(actor_torso=GRUTorso\(...\)\) is recurrent: set shared_torso=True"):
        PPO(ENV, **SMALL, actor_torso=GRUTorso(8))
    with pytest.raises(ValueError, match=r"PPO\(num_minibatches=3\) must divide num_envs=4 for a recurrent torso"):
        _agent(num_minibatches=3, rollout_length=12)
    with pytest.raises(ValueError, match=r"PPO\(critic_torso\) is a recurrent torso"):
        PPO(ENV, **SMALL, critic_torso=LSTMTorso(8))


@pytest.mark.parametrize("torso", [GRUTorso(8, (8,)), LSTMTorso(8, ())])
@pytest.mark.slow
def test_recurrent_ppo_init_act_train_evaluate(torso):
    agent = _agent(torso, normalize_observations=True)
    assert agent.recurrent and not PPO(ENV, **SMALL).recurrent
    state = agent.init(jax.random.key(0))
    assert isinstance(state.torso, RecurrentEncoder)
    assert all(h.shape == (4, 8) for h in jax.tree.leaves(state.hidden))
    assert state.episode_start.dtype == bool and bool(state.episode_start.all())
    obs = jnp.zeros((3,) + agent.obs_shape)
    with pytest.raises(ValueError, match=r"PPO.act: a recurrent PPO acts with act_with_carry"):
        agent.act(state, obs, deterministic=True)
    with pytest.raises(ValueError, match=r"PPO.policy\(state\) maps observations without a hidden state"):
        PPO.policy(state, jnp.zeros((3, 3)))
    carry = agent.initial_carry(state, (3,))
    action, carry2 = agent.act_with_carry(state, obs, carry, jnp.ones(3, bool), jax.random.key(1))
    assert action.shape == (3,) and jax.tree.structure(carry2) == jax.tree.structure(carry)
    # A reset carry is a fresh one: acting from any memory with reset=True equals acting from zeros.
    junk = jax.tree.map(lambda h: h + 3.0, carry2)
    _, a = agent.act_with_carry(state, obs, junk, jnp.ones(3, bool), deterministic=True)
    _, b = agent.act_with_carry(state, obs, carry, jnp.zeros(3, bool), deterministic=True)
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))

    step = eqx.filter_jit(agent.train_iteration)
    new, metrics = step(state, Clock(jnp.int32(0), jnp.int32(4)))
    assert int(metrics["env_steps"]) == 32 and np.isfinite(float(metrics["loss"]))
    assert float(metrics["updates_applied"]) == 4  # 2 epochs x 2 minibatches of whole envs
    assert any(not np.array_equal(a, b) for a, b in zip(_leaves(state.torso), _leaves(new.torso)))
    # The hidden state carried on: one that stepped 8 times is no longer zero (6-step episodes).
    assert float(jnp.abs(jax.tree.leaves(new.hidden)[0]).sum()) > 0
    # MemoryChain's episodes last 6 steps: after 8 steps every env is 2 steps into its second.
    assert not bool(new.episode_start.any())

    returns = eqxrl.evaluate(agent, new, jax.random.key(2), num_episodes=4)
    assert returns.shape == (4,) and set(np.asarray(returns).tolist()) <= {-1.0, 1.0}
    traj = eqxrl.rollout(agent, new, jax.random.key(3), 13, num_envs=2, deterministic=False)
    assert traj["action"].shape == (13, 2) and traj["terminated"].sum() == 4  # episodes end at steps 6 and 12


def test_a_feed_forward_agent_keeps_its_act_with_a_none_carry():
    agent = PPO(ENV, **SMALL)
    state = agent.init(jax.random.key(0))
    assert agent.initial_carry(state, (2,)) is None
    obs = jnp.zeros((2,) + agent.obs_shape)
    action, carry = agent.act_with_carry(state, obs, None, jnp.ones(2, bool), deterministic=True)
    assert carry is None
    np.testing.assert_array_equal(np.asarray(action), np.asarray(agent.act(state, obs, deterministic=True)))
    assert state.hidden is None and state.episode_start is None


@pytest.mark.slow
def test_recurrent_ppo_seeds_are_independent_and_reproducible():
    agent = _agent()
    keys = jax.random.split(jax.random.key(0), 2)
    a, ma = eqxrl.train(agent, keys, 64, progress=False)
    b, _ = eqxrl.train(agent, keys, 64, progress=False)
    for x, y in zip(_leaves(a), _leaves(b)):
        np.testing.assert_array_equal(x, y)
    assert ma["episode_return"].shape[-1] == 2
    first = _leaves(a.torso)[0]
    assert not np.array_equal(first[0], first[1])  # two seeds, two networks


@pytest.mark.slow
def test_recurrent_run_directory_resume_and_policy(tmp_path, monkeypatch, capsys):
    agent = _agent()
    full = tmp_path / "full"
    state = eqxrl.runs.train_run(full, agent, total_steps=128, progress=False, eval_episodes=2)[0]
    loaded = eqxrl.runs.load_state(full, agent)
    for x, y in zip(jax.tree.leaves(state.hidden), jax.tree.leaves(loaded.hidden)):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    assert cli.main(["evaluate", str(full), "--episodes", "2"]) == 0
    assert f"PPO on {ENV}" in capsys.readouterr().out

    policy = eqxrl.runs.load_policy(full)
    carry = policy.initial_carry((2,))
    obs = jnp.zeros((2,) + agent.obs_shape)
    action, carry = policy.step(obs, carry, jnp.ones(2, bool))
    assert action.shape == (2,) and all(h.shape == (2, 8) for h in jax.tree.leaves(carry))
    with pytest.raises(ValueError, match="act_with_carry"):
        policy(obs)

    # Interrupted right after its first checkpoint and resumed: the same final state,
    # hidden state and episode-start flags included.
    train_run_module = importlib.import_module("eqxrl.runs._train_run")  # (private: a crash is injected where train_run looks up CheckpointWriter)

    class CrashAfterTheFirst(eqxrl.runs.CheckpointWriter):
        def submit(self, checkpoint, *, wait=False):
            super().submit(checkpoint, wait=True)
            self.wait()
            raise KeyboardInterrupt

    cut = tmp_path / "cut"
    monkeypatch.setattr(train_run_module, "CheckpointWriter", CrashAfterTheFirst)
    with pytest.raises(KeyboardInterrupt):
        eqxrl.runs.train_run(cut, agent, total_steps=128, progress=False, checkpoint_every=64, eval_episodes=2)
    monkeypatch.undo()
    resumed = eqxrl.runs.resume_run(cut, progress=False)[0]
    for x, y in zip(jax.tree.leaves(state), jax.tree.leaves(resumed)):
        if eqx.is_array(x) and not jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
            np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


@pytest.mark.slow
def test_the_command_line_builds_a_recurrent_torso(tmp_path, capsys):
    from eqxrl.cli._specs import parse_torso  # (private: the command line's parser of --actor-torso values)

    assert parse_torso("gru") == GRUTorso(64, (64,))
    assert parse_torso("lstm:32:none") == LSTMTorso(32, ())
    assert parse_torso("gru:16:8,8") == GRUTorso(16, (8, 8))
    run = tmp_path / "run"
    argv = ["train", "ppo", "--env", ENV, "--actor-torso", "lstm:8:8", "--shared-torso", "true", "--num-envs", "4",
            "--rollout-length", "8", "--num-minibatches", "2", "--total-steps", "64", "--run-dir", str(run), "--quiet"]  # fmt: skip
    assert cli.main(argv) == 0
    assert eqxrl.runs.load_agent(run).actor_torso == LSTMTorso(8, (8,))


# ----------------------------------------------------------------- learning
@pytest.mark.learning
def test_recurrent_ppo_solves_memory_chain_where_feed_forward_cannot():
    # MemoryChain-bsuite: the context bit is shown at the first step only and must be
    # recalled 5 steps later (return +1 or -1). Without memory the best policy guesses (0).
    env = eqxrl.envs.make(ENV, memory_length=5)
    common = dict(num_envs=16, rollout_length=32, num_minibatches=4, learning_rate=1e-3, hidden_sizes=(32, 32))
    keys = jax.random.split(jax.random.key(0), 4)
    means = {}
    for name, extra in [("ff", {}), ("gru", dict(actor_torso=GRUTorso(32, (32,)), shared_torso=True))]:
        agent = PPO(env, **common, **extra)
        state, _ = eqxrl.train(agent, keys, 10_240, progress=False)
        means[name] = np.asarray(eqxrl.evaluate(agent, state, jax.random.key(1), num_episodes=64)).mean(-1)
    # Bound: 3 of 4 GRU seeds above 0.8 (2 seeds of key 0 gave 1.0 each; `pytest -rP` prints all four),
    # every feed-forward seed below 0.5 (it can only guess: about 0.1).
    print(f"per seed: gru {means['gru'].round(3).tolist()}, feed-forward {means['ff'].round(3).tolist()}")
    assert np.sum(means["gru"] > 0.8) >= 3, means
    assert np.all(means["ff"] < 0.5), means


@pytest.mark.slow  # (4-5 s: a CLI training run)
def test_the_recurrent_preset_in_python_and_on_the_command_line(tmp_path, capsys):
    from cli_calls import usage_error

    agent = PPO.from_preset("recurrent", "CartPoleNoVel-v1", num_envs=4)
    assert agent.actor_torso == GRUTorso(64, (64,)) and agent.shared_torso and agent.normalize_observations
    assert (agent.num_envs, agent.rollout_length, agent.num_epochs, agent.num_minibatches) == (4, 32, 20, 1)
    assert float(agent.gamma) == pytest.approx(0.98) and float(agent.gae_lambda) == pytest.approx(0.8)
    assert float(agent.ent_coef) == 0.0 and float(agent.learning_rate) == pytest.approx(5e-4) and agent.anneal_lr
    assert float(agent.vf_coef) == pytest.approx(0.1) and not agent.clip_value_loss
    with pytest.raises(ValueError, match=r"^PPO\.from_preset\(name\) must be one of its presets \('recurrent'\), got 'lstm'$"):
        PPO.from_preset("lstm", "CartPole-v1")
    run = tmp_path / "run"
    argv = ["train", "ppo", "--preset", "recurrent", "--env", "CartPoleNoVel-v1", "--num-envs", "2",
            "--total-steps", "64", "--run-dir", str(run), "--quiet", "--eval-episodes", "1"]  # fmt: skip
    assert cli.main(argv) == 0
    loaded = eqxrl.runs.load_agent(run)  # the preset's fields, the flag's override, all in config.json
    assert loaded.actor_torso == GRUTorso(64, (64,)) and loaded.num_envs == 2 and loaded.num_epochs == 20
    assert "invalid choice: 'lstm'" in usage_error(["train", "ppo", "--preset", "lstm"], capsys)
    assert "give no --config, --preset, --best or agent fields" in usage_error(
        ["train", "ppo", "--resume", str(run), "--preset", "recurrent"], capsys
    )
