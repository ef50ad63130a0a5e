"""Discrete SAC (SAC on a Discrete action space): its losses, the agent, bad input, learning."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from learning import most_above, per_seed_returns, train_seeds
from hypothesis import given, settings
from hypothesis import strategies as st
from probe_envs import ObservationActionReward
from typecheck import no_runtime_typecheck
from update_batches import same_leaves, update_batch

import eqxrl
from eqxrl.agents import SAC
from eqxrl.envs import Box
from eqxrl.components import (
    CategoricalHead,
    DiscreteQHead,
    discrete_sac_actor_loss,
    discrete_sac_alpha_loss,
    discrete_sac_target,
    sac_actor_loss,
    sac_alpha_loss,
)

SETTINGS = settings(max_examples=15, deadline=None)
SMALL = dict(hidden_sizes=(16, 16), batch_size=32, buffer_size=1024, learning_starts=64)


def _arrays(seed: int, *shapes):
    # NumPy's generator: jax.random compiles its sampler again for every new shape.
    rng = np.random.default_rng(seed)
    return [jnp.asarray(rng.standard_normal(s), jnp.float32) for s in shapes]


# ----------------------------------------------------------------------- losses
# The shapes are drawn from the smallest and a larger size of each axis: every new shape
# compiles every op again (about 1 CPU-s an example); the values vary in every example.
@SETTINGS
@given(
    seed=st.integers(0, 2**16),
    n=st.sampled_from([1, 3]),
    b=st.sampled_from([1, 5]),
    a=st.sampled_from([2, 4]),
    alpha=st.floats(0.01, 2.0),
)
@pytest.mark.slow
def test_discrete_target_is_the_expectation_over_next_actions(seed, n, b, a, alpha):
    next_qs, logits, reward, discount = _arrays(seed, (n, b, a), (b, a), (b,), (b,))
    got = discrete_sac_target(reward, discount, next_qs, logits, alpha)
    q, l, r, d = (np.asarray(x, np.float64) for x in (next_qs, logits, reward, discount))
    pi = np.exp(l - l.max(-1, keepdims=True))
    pi /= pi.sum(-1, keepdims=True)
    want = r + d * np.sum(pi * (q.min(0) - alpha * np.log(pi)), axis=-1)
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-4, atol=1e-4)


@SETTINGS
@given(seed=st.integers(0, 2**16), b=st.sampled_from([1, 5]), a=st.sampled_from([2, 5]), alpha=st.floats(0.5, 2.0), shift=st.floats(-3, 3))
@pytest.mark.slow
def test_discrete_actor_loss_is_stationary_at_the_soft_greedy_policy(seed, b, a, alpha, shift):
    (qs,) = _arrays(seed, (2, b, a))
    optimal = jnp.min(qs, axis=0) / alpha + shift  # pi ∝ exp(min_i Q / alpha); logits up to a constant
    grad = jax.grad(discrete_sac_actor_loss, argnums=1)(qs, optimal, alpha)
    np.testing.assert_allclose(np.asarray(grad), 0.0, atol=1e-4)
    (other,) = _arrays(seed + 1, (b, a))
    assert float(discrete_sac_actor_loss(qs, optimal, alpha)) <= float(discrete_sac_actor_loss(qs, optimal + other, alpha)) + 1e-5
    assert float(jnp.max(jnp.abs(jax.grad(discrete_sac_actor_loss, argnums=1)(qs, optimal + other, alpha)))) > 0


@SETTINGS
@given(seed=st.integers(0, 2**16), a=st.integers(2, 6), ratio=st.floats(0.05, 0.95), log_alpha=st.floats(-3, 1))
def test_discrete_alpha_loss_raises_alpha_below_the_target_entropy(seed, a, ratio, log_alpha):
    target = ratio * np.log(a)
    (logits,) = _arrays(seed, (4, a))
    uniform = jnp.zeros((4, a))  # entropy log(a), above the target
    peaked = jnp.zeros((4, a)).at[:, 0].set(50.0)  # entropy ~0, below it
    g = jax.grad(discrete_sac_alpha_loss)
    assert float(g(jnp.asarray(log_alpha), uniform, target)) > 0  # gradient descent lowers alpha
    assert float(g(jnp.asarray(log_alpha), peaked, target)) < 0  # ... raises it
    # The gradient is target - entropy, exactly; the logits get none.
    logp = jax.nn.log_softmax(logits)
    entropy = -jnp.sum(jnp.exp(logp) * logp, axis=-1)
    np.testing.assert_allclose(float(g(jnp.asarray(log_alpha), logits, target)), float(jnp.mean(entropy)) - target, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(np.asarray(jax.grad(discrete_sac_alpha_loss, argnums=1)(jnp.asarray(log_alpha), logits, target)), 0.0)


@SETTINGS
@given(seed=st.integers(0, 2**16), b=st.sampled_from([2, 6]), drop=st.integers(0, 5))
@pytest.mark.slow
def test_importance_weights_scale_each_samples_term(seed, b, drop):
    drop = drop % b
    qs, logits, w, log_prob, qs_c = _arrays(seed, (2, b, 3), (b, 3), (b,), (b,), (2, b))
    w = jnp.abs(w).at[drop].set(0.0)
    log_alpha = jnp.asarray(0.3)
    # A zero weight removes that sample's gradient contribution to the logits...
    g = jax.grad(discrete_sac_actor_loss, argnums=1)(qs, logits, 0.5, w)
    np.testing.assert_allclose(np.asarray(g[drop]), 0.0)
    # ...and every loss equals the hand-weighted mean of its per-sample terms.
    logp = jax.nn.log_softmax(logits)
    pi = jnp.exp(logp)
    per_state = jnp.sum(pi * (0.5 * logp - jnp.min(qs, axis=0)), axis=-1)
    np.testing.assert_allclose(float(discrete_sac_actor_loss(qs, logits, 0.5, w)), float(jnp.mean(w * per_state)), rtol=1e-5, atol=1e-6)
    neg_h = jnp.sum(pi * logp, axis=-1)
    np.testing.assert_allclose(
        float(discrete_sac_alpha_loss(log_alpha, logits, 0.4, w)), float(-log_alpha * jnp.mean(w * (neg_h + 0.4))), rtol=1e-5, atol=1e-6
    )
    np.testing.assert_allclose(
        float(sac_actor_loss(qs_c, log_prob, 0.5, w)), float(jnp.mean(w * (0.5 * log_prob - jnp.min(qs_c, axis=0)))), rtol=1e-5, atol=1e-6
    )
    np.testing.assert_allclose(
        float(sac_alpha_loss(log_alpha, log_prob, -1.0, w)), float(-log_alpha * jnp.mean(w * (log_prob - 1.0))), rtol=1e-5, atol=1e-6
    )
    # Unit weights are the unweighted loss.
    ones = jnp.ones((b,))
    np.testing.assert_allclose(float(discrete_sac_actor_loss(qs, logits, 0.5, ones)), float(discrete_sac_actor_loss(qs, logits, 0.5)), rtol=1e-6)
    np.testing.assert_allclose(float(sac_actor_loss(qs_c, log_prob, 0.5, ones)), float(sac_actor_loss(qs_c, log_prob, 0.5)), rtol=1e-6)


@no_runtime_typecheck()  # as a user calls them: our own ValueErrors, not the test run's type checks
def test_discrete_losses_refuse_bad_shapes():
    qs, logits, r = jnp.zeros((2, 4, 3)), jnp.zeros((4, 3)), jnp.zeros((4,))
    with pytest.raises(ValueError, match=r"discrete_sac_target\(next_qs\) must have shape \(num_critics, batch, num_actions\), got \(4, 3\)"):
        discrete_sac_target(r, r, logits, logits, 0.1)
    with pytest.raises(ValueError, match=r"discrete_sac_target\(logits\) must have shape \(4, 3\).*got \(4, 2\)"):
        discrete_sac_target(r, r, qs, jnp.zeros((4, 2)), 0.1)
    with pytest.raises(ValueError, match=r"discrete_sac_target\(reward\) must have shape \(4,\)"):
        discrete_sac_target(jnp.zeros((4, 1)), r, qs, logits, 0.1)
    with pytest.raises(ValueError, match=r"discrete_sac_actor_loss\(logits\) must have shape \(4, 3\)"):
        discrete_sac_actor_loss(qs, jnp.zeros((3, 3)), 0.1)
    with pytest.raises(ValueError, match=r"discrete_sac_actor_loss\(weights\) must have shape \(4,\)"):
        discrete_sac_actor_loss(qs, logits, 0.1, jnp.ones((4, 1)))
    with pytest.raises(ValueError, match=r"discrete_sac_alpha_loss\(logits\) must have shape \(batch, num_actions\), got \(4,\)"):
        discrete_sac_alpha_loss(jnp.zeros(()), r, 0.5)
    with pytest.raises(ValueError, match=r"sac_actor_loss\(weights\) must have shape \(2,\)"):
        sac_actor_loss(jnp.zeros((2, 2)), jnp.zeros((2,)), 0.1, jnp.ones((3,)))


# ----------------------------------------------------------------------- the agent
@pytest.mark.slow
def test_sac_takes_a_discrete_action_space(getkey):
    agent = SAC("CartPole-v1", **SMALL)
    assert agent.discrete
    np.testing.assert_allclose(float(agent.target_entropy), 0.5 * np.log(2), rtol=1e-6)
    np.testing.assert_allclose(float(SAC("CartPole-v1", **SMALL, target_entropy_ratio=0.8).target_entropy), 0.8 * np.log(2), rtol=1e-6)
    state = agent.init(getkey())
    learner = state.learner
    assert isinstance(learner.actor, CategoricalHead)
    assert isinstance(learner.critic.members, DiscreteQHead)
    obs = jax.random.normal(getkey(), (5, 4))
    assert learner.critic(obs).shape == (2, 5, 2)
    greedy = agent.act(state, obs, deterministic=True)
    assert greedy.shape == (5,) and greedy.dtype == jnp.int32
    np.testing.assert_array_equal(greedy, jnp.argmax(learner.actor(obs).logits, axis=-1))
    sampled = agent.act(state, obs, getkey())
    assert sampled.shape == (5,) and sampled.dtype == jnp.int32 and bool(jnp.all((sampled >= 0) & (sampled < 2)))
    # The eval env is the env itself (no action rescaling for discrete actions).
    assert agent.eval_env is agent.env


@pytest.mark.slow
def test_discrete_sac_trains_and_evaluates(getkey):
    agent = SAC("CartPole-v1", **SMALL, normalize_observations=True)
    state, metrics = eqxrl.train(agent, getkey(), 128, progress=False)
    for name in ("critic_loss", "actor_loss", "alpha", "alpha_loss", "entropy", "q_mean", "obs_mean", "obs_std"):
        assert np.isfinite(metrics[name][-1]), name
    assert 0 < metrics["entropy"][-1] <= np.log(2) + 1e-6
    returns = eqxrl.evaluate(agent, state, getkey(), num_episodes=2, max_steps=50)
    assert returns.shape == (2,) and bool(jnp.all(returns >= 1))


_init_learner = eqx.filter_jit(lambda agent, key: agent.init_learner(key))
_update = eqx.filter_jit(lambda agent, learner, batch, key: agent.update(learner, batch, key, jnp.zeros((), jnp.int32), jnp.zeros(())))


@pytest.mark.parametrize("env", ["CartPole-v1", "Pendulum-v1"])
@pytest.mark.slow
def test_importance_weight_actor(env, getkey):
    """With `importance_weight_actor=True`, samples of weight 0 leave actor and temperature alone
    (Adam's step from a zero gradient is zero); without it they train both as before."""
    # One learner and one batch for both agents (the option does not change the learner's
    # structure); init and update compiled (on these cores, far cheaper than op by op).
    learner = _init_learner(SAC(env, **SMALL, init_alpha=0.5), getkey())
    batch = update_batch(SAC(env, **SMALL), getkey(), weights=jnp.zeros((8,)))
    key = getkey()
    for weighted in (True, False):
        agent = SAC(env, **SMALL, importance_weight_actor=weighted, init_alpha=0.5)
        new, _, metrics = _update(agent, learner, batch, key)
        assert same_leaves(new.actor, learner.actor) == weighted
        assert bool(new.log_alpha == learner.log_alpha) == weighted
        assert (float(metrics["alpha_loss"]) == 0.0) == weighted


def test_bad_discrete_sac_config():
    with pytest.raises(ValueError, match=r"SAC\(target_entropy_ratio\) must be in \[0, 1\], got 1.5"):
        SAC("CartPole-v1", target_entropy_ratio=1.5)
    with no_runtime_typecheck(), pytest.raises(ValueError, match=r"SAC\(importance_weight_actor\) must be True or False, got 'yes'"):
        SAC("CartPole-v1", importance_weight_actor="yes")
    with pytest.raises(ValueError, match=r"SAC\(target_update_interval\) must be a positive int, got 0"):
        SAC("CartPole-v1", target_update_interval=0)


# ----------------------------------------------------------------------- learning
@pytest.mark.slow
def test_discrete_sac_probe_picks_the_rewarded_action(getkey):
    agent = SAC(
        ObservationActionReward(), num_envs=8, rollout_length=2, updates_per_step=0.25, **SMALL,
        actor_learning_rate=3e-3, critic_learning_rate=3e-3, target_entropy_ratio=0.1,
    )  # fmt: skip
    state, _ = eqxrl.train(agent, getkey(), 16 * 300, progress=False)
    np.testing.assert_array_equal(agent.act(state, jnp.asarray([[1.0], [-1.0]]), deterministic=True), [1, 0])
    q = state.learner.critic(jnp.asarray([[1.0]]))  # (critics, 1, actions): reward 1 for action 1, 0 else
    np.testing.assert_allclose(np.asarray(q[:, 0, 1]), 1.0, atol=0.2)
    np.testing.assert_allclose(np.asarray(q[:, 0, 0]), 0.0, atol=0.2)


class _MatrixActions(ObservationActionReward):
    @property
    def action_space(self):
        return Box(-1.0, 1.0, (2, 2))

    def step(self, key, state, action):
        return super().step(key, state, (action[0, 0] > 0).astype(jnp.int32))


def test_sac_refuses_other_action_spaces():
    with pytest.raises(ValueError, match=r"SAC needs a Discrete or a 1-D Box action space, got Box"):
        SAC(_MatrixActions(discrete_actions=False))


# The full criterion (4 seeds, >= 475 on 3 at 1e5 steps) is benchmarks/defaults.py (task sac_discrete);
# this short run of the same defaults fails if discrete SAC does not learn.
@pytest.mark.slow
@pytest.mark.learning
def test_discrete_sac_learns_cartpole_with_its_discrete_defaults():
    agent = SAC("CartPole-v1")  # the Discrete defaults: 8 envs, 64x64, learning rates 1e-3
    assert (agent.num_envs, agent.hidden_sizes, float(agent.actor_learning_rate)) == (8, (64, 64), pytest.approx(1e-3))
    returns = per_seed_returns(agent, train_seeds(agent, 30_000)[0])
    # Bound: 2 of 3 seeds >= 120 (native, 3 seeds: 183, 180, 165; over 4, natively and with AVX2: 186, 208, 158,
    # 163); a uniformly random policy scores about 22.
    assert most_above(returns, 120), returns


def test_sac_defaults_adapt_to_the_action_space_and_keep_given_values():
    from eqxrl.agents._sac import ACTION_SPACE_DEFAULTS  # (private: the table of action-space defaults the test reads SAC's fields against)

    discrete, continuous = SAC("CartPole-v1"), SAC("Pendulum-v1")
    for name, (box_value, discrete_value) in ACTION_SPACE_DEFAULTS.items():
        assert getattr(discrete, name) == pytest.approx(discrete_value), name
        assert getattr(continuous, name) == pytest.approx(box_value), name
    assert (discrete.num_envs, discrete.hidden_sizes, discrete.batch_size) == (8, (64, 64), 128)
    assert (continuous.num_envs, continuous.hidden_sizes, continuous.batch_size) == (1, (256, 256), 256)
    given = SAC("CartPole-v1", hidden_sizes=(32,), num_envs=2, actor_learning_rate=3e-4)
    assert (given.hidden_sizes, given.num_envs, float(given.actor_learning_rate)) == ((32,), 2, pytest.approx(3e-4))
    assert float(given.critic_learning_rate) == pytest.approx(1e-3)  # not given: the discrete value
    # The learning rates are leaves as before (PBT and sweeps tune them), and a built agent holds
    # concrete values, so rebuilding it from its fields (a run directory's config) changes nothing.
    assert {"actor.optimizer.learning_rate", "critic.optimizer.learning_rate"} <= set(discrete.hyperparameters())
    import dataclasses

    rebuilt = SAC(**{f.name: getattr(discrete, f.name) for f in dataclasses.fields(discrete)})
    assert eqx.tree_equal(rebuilt, discrete)


@pytest.mark.slow  # (5 s: a CLI training run)
def test_sac_none_defaults_on_the_command_line(tmp_path):
    from cli_calls import main_output

    run = tmp_path / "run"
    code, _ = main_output(["train", "sac", "--env", "CartPole-v1", "--total-steps", "64", "--learning-starts", "16",
                           "--batch-size", "16", "--run-dir", str(run), "--quiet", "--eval-episodes", "1"])  # fmt: skip
    assert code == 0
    import json

    fields = json.loads((run / "config.json").read_text())["agent_config"]
    assert fields["loop"]["num_envs"] == 8 and fields["critic"]["hidden_sizes"] == [64, 64] and fields["loop"]["batch_size"] == 16
