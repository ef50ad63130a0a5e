"""MPO: E-step / M-step / dual losses on hand-built batches, the KL constraints,
probes, seeds and sweeps, compile-once, bad input, learning."""

import importlib

import equinox as eqx
import hypothesis.strategies as st
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from learning import most_above, per_seed_returns, train_seeds, untrained_returns
from hypothesis import given, settings
from probe_envs import ConstantReward, ObservationActionReward, TwoStepDiscounting

import eqxrl
from typecheck import no_runtime_typecheck
from eqxrl.envs import ACTION_MASK, innermost_state
from eqxrl.testing.probes import MaskedActions
from eqxrl.agents import MPO, MPODuals, MPOLearner
from eqxrl.components import (
    Adam,
    Sample,
    Transition,
    categorical_kl,
    mpo_categorical_loss,
    mpo_e_step,
    mpo_gaussian_loss,
    mpo_kl_penalty,
    mpo_scaled_multiplier_update,
    mpo_weighted_log_likelihood,
    normal_kl,
    softplus_inverse,
)

train_module = importlib.import_module("eqxrl.loop._train")  # (private: a test replaces a name where `train` looks up `run_chunk`)

f32 = lambda x: jnp.asarray(x, jnp.float32)  # noqa: E731

# The loop-mechanics tests (seeds, sweeps, compile-once) check shapes and traces, not values:
# one hidden layer of 8 (a (32, 32) network's programs cost about a third more to compile).
LOOP = dict(
    num_envs=8,
    rollout_length=2,
    updates_per_step=0.25,
    batch_size=32,
    buffer_size=1024,
    learning_starts=64,
    hidden_sizes=(8,),
    num_action_samples=8,
)
# Probes are short (1,600 updates): targets follow by polyak averaging, and the
# mean's KL bound is loose enough for the policy to move within that budget.
PROBE = dict(
    LOOP,
    hidden_sizes=(32, 32),
    target_update_period=1,
    tau=0.05,
    kl_mean=0.05,
    kl_std=1e-3,
    kl_categorical=0.05,
    policy_learning_rate=3e-3,
    critic_learning_rate=3e-3,
)
PROBE_STEPS = 16 * 400


def _uniform_log_prior(n: int, b: int):
    return jnp.full((n, b), -jnp.log(f32(n)))


def _sgd_step(loss_fn, raw, lr=0.1):
    """One plain gradient-descent step on a raw (pre-softplus) dual parameter."""
    return raw - lr * jax.grad(loss_fn)(raw)


# ----------------------------------------------------------------------- pure functions
def test_softplus_inverse_round_trips():
    x = f32([1e-3, 0.5, 1.0, 10.0, 100.0])
    np.testing.assert_allclose(jax.nn.softplus(softplus_inverse(x)), x, rtol=1e-5)


@pytest.mark.slow
def test_e_step_weights_are_a_tempered_softmax_and_the_dual_gradient_is_the_kl_gap():
    q = f32([[1.0, 0.0], [2.0, 0.0], [4.0, 3.0]])  # 3 samples, 2 states
    temperature, epsilon = f32(2.0), 0.1
    log_prior = _uniform_log_prior(3, 2)
    weights, loss, kl = mpo_e_step(q, log_prior, temperature, epsilon)
    np.testing.assert_allclose(weights, jax.nn.softmax(q / 2.0, axis=0), rtol=1e-6)
    np.testing.assert_allclose(jnp.sum(weights, axis=0), [1.0, 1.0], rtol=1e-6)
    # the dual eta * epsilon + eta * mean_s logmeanexp(Q / eta)
    logmeanexp = jax.nn.logsumexp(q / 2.0, axis=0) - jnp.log(3.0)
    assert float(loss) == pytest.approx(float(2.0 * (epsilon + jnp.mean(logmeanexp))), rel=1e-6)
    # KL(weights || uniform) per state, and d loss / d eta = epsilon - mean KL
    np.testing.assert_allclose(kl, jnp.sum(weights * jnp.log(3.0 * weights), axis=0), rtol=1e-5)
    grad = jax.grad(lambda t: mpo_e_step(q, log_prior, t, epsilon)[1])(temperature)
    assert float(grad) == pytest.approx(epsilon - float(jnp.mean(kl)), rel=1e-4)
    # the weights carry no gradient into the Q-values (they are targets)
    assert float(jnp.sum(jnp.abs(jax.grad(lambda q: jnp.sum(mpo_e_step(q, log_prior, temperature, epsilon)[0] * q))(q) - weights))) < 1e-6


def test_e_step_with_an_explicit_prior_weights_every_action():
    q = f32([[0.0], [1.0]])
    prior = f32([[0.9], [0.1]])
    weights, _, kl = mpo_e_step(q, jnp.log(prior), f32(1.0), 0.1)
    expected = prior * jnp.exp(q) / jnp.sum(prior * jnp.exp(q))
    np.testing.assert_allclose(weights, expected, rtol=1e-6)
    np.testing.assert_allclose(kl, jnp.sum(expected * jnp.log(expected / prior), axis=0), rtol=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("temperature, grows", [(0.05, True), (50.0, False)])
def test_temperature_moves_toward_the_kl_bound(temperature, grows):
    # Sharp Q-values: a cold temperature puts all weight on one sample (KL = log 8 > epsilon),
    # a hot one keeps the weights nearly uniform (KL ~ 0 < epsilon).
    q = jnp.tile(f32([0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0])[:, None], (1, 4))
    log_prior, epsilon = _uniform_log_prior(8, 4), 0.1
    raw = softplus_inverse(f32(temperature))
    _, _, kl = mpo_e_step(q, log_prior, f32(temperature), epsilon)
    assert (float(jnp.mean(kl)) > epsilon) == grows
    loss_fn = lambda r: mpo_e_step(q, log_prior, jax.nn.softplus(r), epsilon)[1]  # noqa: E731
    new = jax.nn.softplus(_sgd_step(loss_fn, raw))
    assert (float(new) > temperature) == grows, (float(new), temperature)


def test_kl_penalty_and_multiplier_loss():
    kl = f32([0.1, 0.3])
    penalty, alpha_loss = mpo_kl_penalty(kl, f32(2.0), 0.05)
    assert float(penalty) == pytest.approx(0.4)
    assert float(alpha_loss) == pytest.approx(2.0 * (0.05 - 0.2))
    # the penalty pushes the KL down with weight alpha; the multiplier's loss does not touch the KL
    np.testing.assert_allclose(jax.grad(lambda k: mpo_kl_penalty(k, f32(2.0), 0.05)[0])(kl), [1.0, 1.0])
    np.testing.assert_allclose(jax.grad(lambda k: mpo_kl_penalty(k, f32(2.0), 0.05)[1])(kl), [0.0, 0.0])
    np.testing.assert_allclose(jax.grad(lambda a: mpo_kl_penalty(kl, a, 0.05)[0])(f32(2.0)), 0.0)
    assert float(jax.grad(lambda a: mpo_kl_penalty(kl, a, 0.05)[1])(f32(2.0))) == pytest.approx(0.05 - 0.2)


@pytest.mark.parametrize("bound, grows", [(1e-3, True), (10.0, False)])
def test_multiplier_moves_toward_the_kl_bound(bound, grows):
    kl = f32([0.1, 0.3])  # mean 0.2
    raw = softplus_inverse(f32(1.0))
    new = jax.nn.softplus(_sgd_step(lambda r: mpo_kl_penalty(kl, jax.nn.softplus(r), bound)[1], raw))
    assert (float(new) > 1.0) == grows


def test_weighted_log_likelihood():
    log_prob = f32([[-1.0, -2.0], [-3.0, -4.0]])
    weights = f32([[0.25, 1.0], [0.75, 0.0]])
    # state 0: 0.25 * -1 + 0.75 * -3 = -2.5; state 1: -2; loss = 2.25
    assert float(mpo_weighted_log_likelihood(log_prob, weights)) == pytest.approx(2.25)
    # the gradient raises the log-likelihood of heavily weighted actions
    np.testing.assert_allclose(jax.grad(mpo_weighted_log_likelihood)(log_prob, weights), -weights / 2.0)


def test_normal_and_categorical_kl(getkey):
    loc_p, scale_p = f32([[0.0, 1.0]]), f32([[1.0, 0.5]])
    loc_q, scale_q = f32([[0.5, 1.0]]), f32([[2.0, 0.5]])
    # closed form per dimension: log(s_q / s_p) + (s_p^2 + (m_p - m_q)^2) / (2 s_q^2) - 1/2
    dim0 = np.log(2.0) + (1.0 + 0.25) / 8.0 - 0.5
    np.testing.assert_allclose(normal_kl(loc_p, scale_p, loc_q, scale_q), [dim0], rtol=1e-5)
    np.testing.assert_allclose(normal_kl(loc_p, scale_p, loc_p, scale_p), [0.0], atol=1e-7)
    # Monte Carlo check of the categorical KL on random logits
    p, q = jax.random.normal(getkey(), (5,)), jax.random.normal(getkey(), (5,))
    pp, qq = jax.nn.softmax(p), jax.nn.softmax(q)
    assert float(categorical_kl(p, q)) == pytest.approx(float(jnp.sum(pp * jnp.log(pp / qq))), rel=1e-5)
    assert float(categorical_kl(p, p)) == pytest.approx(0.0, abs=1e-6)


def _gaussian_loss_args(online_loc, online_scale, q=None):
    target_loc, target_scale = jnp.zeros((4, 1)), jnp.ones((4, 1))
    actions = jnp.linspace(-2.0, 2.0, 6)[:, None, None] * jnp.ones((6, 4, 1))
    q = actions[..., 0] if q is None else q
    return online_loc, online_scale, target_loc, target_scale, actions, q


@pytest.mark.slow
def test_gaussian_loss_decouples_mean_and_std():
    args = _gaussian_loss_args(jnp.full((4, 1), 0.3), jnp.full((4, 1), 1.2))
    duals = (f32(1.0), f32(1.0), f32(1.0))
    loss, stats = mpo_gaussian_loss(*args, *duals, 0.1, 1e-3, 1e-4)
    assert jnp.isfinite(loss)
    # kl_mean only sees the mean's move (target std), kl_std only the std's (target mean)
    assert float(stats["kl_mean"]) == pytest.approx(0.3**2 / 2.0, rel=1e-5)
    assert float(stats["kl_std"]) == pytest.approx(float(normal_kl(f32([0.0]), f32([1.0]), f32([0.0]), f32([1.2]))), rel=1e-5)
    # Q increases with the action: the mean's gradient pushes it up; the std has its own gradient
    grad_loc = jax.grad(lambda m: mpo_gaussian_loss(*_gaussian_loss_args(m, args[1]), *duals, 0.1, 1.0, 1.0)[0])(args[0])
    assert np.all(np.asarray(grad_loc) < 0)


@pytest.mark.parametrize("which", ["mean", "std"])
@pytest.mark.parametrize("violated", [True, False])
def test_gaussian_loss_multipliers_move_toward_their_bounds(which, violated):
    # online == target except for the part under test, which moved by a KL of about 0.045 or 0
    online_loc = jnp.full((4, 1), 0.3 if (which == "mean" and violated) else 0.0)
    online_scale = jnp.full((4, 1), 1.35 if (which == "std" and violated) else 1.0)
    args = _gaussian_loss_args(online_loc, online_scale)
    raw = softplus_inverse(f32([1.0, 1.0]))

    def dual_loss(raw):
        alpha = jax.nn.softplus(raw)
        return mpo_gaussian_loss(*args, f32(1.0), alpha[0], alpha[1], 0.1, 1e-2, 1e-2)[0]

    new = jax.nn.softplus(_sgd_step(dual_loss, raw))
    i = 0 if which == "mean" else 1
    assert (float(new[i]) > 1.0) == violated
    assert float(new[1 - i]) < 1.0  # the other part sits at KL 0, below its bound


@pytest.mark.slow
def test_kl_constraints_hold_after_m_step_updates():
    """Fit the policy to one batch for 1,000 M-steps against a fixed target policy
    (one target period). The Q-values want the mean far from the target's and a
    small std: with the bounds enforced, both decoupled KLs settle at their bounds
    (within 25 %); with the same batch and the bounds lifted (1e6), both end more
    than 10x above them."""
    agent = MPO("Pendulum-v1", hidden_sizes=(32,))
    learner = agent.init_learner(jax.random.key(0))
    obs = jax.random.normal(jax.random.key(1), (64, 3))
    target = agent.policy_distribution(learner.target_policy, obs)
    actions = target.loc + target.scale * jax.random.normal(jax.random.key(2), (20, 64, 1))
    q = -10.0 * jnp.square(jnp.clip(actions, -1.0, 1.0)[..., 0] - 0.9)
    eps_mean, eps_std = 2.5e-3, 1e-4

    @jax.jit  # the bounds are arrays: both runs are one program
    def fit(bound_mean, bound_std):
        duals = MPODuals(softplus_inverse(f32(1.0)), softplus_inverse(f32([1.0, 1.0])))
        policy_opt, dual_opt = Adam(1e-3), Adam(0.1)

        def loss_fn(params):
            policy, duals = params
            online = agent.policy_distribution(policy, obs)
            return mpo_gaussian_loss(
                online.loc, online.scale, target.loc, target.scale, actions, q,
                duals.temperature, duals.alpha[0], duals.alpha[1], 0.1, bound_mean, bound_std,
            )

        def step(carry, _):
            policy, duals, ps, ds = carry
            (_, stats), (gp, gd) = eqx.filter_value_and_grad(loss_fn, has_aux=True)((policy, duals))
            policy, ps = policy_opt.update(gp, ps, policy)
            duals, ds = dual_opt.update(gd, ds, duals)
            return (policy, duals.project(), ps, ds), jnp.stack([stats["kl_mean"], stats["kl_std"]])

        init = (learner.policy, duals, policy_opt.init(learner.policy), dual_opt.init(duals))
        _, kls = jax.lax.scan(step, init, length=1000)
        return kls

    constrained = np.asarray(fit(f32(eps_mean), f32(eps_std)))
    assert constrained[-200:, 0].max() <= 1.25 * eps_mean, constrained[-200:, 0].max()
    assert constrained[-200:, 1].max() <= 1.25 * eps_std, constrained[-200:, 1].max()
    free = np.asarray(fit(f32(1e6), f32(1e6)))
    assert free[-1, 0] > 10 * eps_mean, free[-1]
    assert free[-1, 1] > 10 * eps_std, free[-1]


@pytest.mark.slow
def test_categorical_loss_moves_toward_the_e_step():
    online = jnp.zeros((3, 2))
    q = jnp.tile(f32([[0.0, 1.0]]), (3, 1))
    args = (online, online, q, f32(0.5), f32(1.0), 0.1, 0.01)
    loss, stats = mpo_categorical_loss(*args)
    assert jnp.isfinite(loss)
    assert float(stats["kl"]) == pytest.approx(0.0, abs=1e-7)
    # the E-step favours action 1: the logits' gradient raises it
    grad = jax.grad(lambda logits: mpo_categorical_loss(logits, *args[1:])[0])(online)
    assert np.all(np.asarray(grad[:, 1]) < 0) and np.all(np.asarray(grad[:, 0]) > 0)
    # with a moved online policy the KL is measured and the multiplier's gradient is the gap
    moved = jnp.tile(f32([[0.0, 2.0]]), (3, 1))
    _, stats = mpo_categorical_loss(moved, online, q, f32(0.5), f32(1.0), 0.1, 0.01)
    assert float(stats["kl"]) == pytest.approx(float(categorical_kl(online[0], moved[0])), rel=1e-5)
    grad_alpha = jax.grad(lambda a: mpo_categorical_loss(moved, online, q, f32(0.5), a, 0.1, 0.01)[0])(f32(1.0))
    assert float(grad_alpha) == pytest.approx(0.01 - float(stats["kl"]), rel=1e-4)


def test_masked_categorical_loss_is_over_the_legal_actions():
    """With a mask, an illegal action has no E-step weight, no gradient and no part in the KL
    (exactly the loss over the legal actions alone), whatever its logits and Q say; an
    all-legal mask is the unmasked loss."""
    online, target = f32([[0.3, -1.0, 2.0, 0.5]]), f32([[0.0, 4.0, -0.5, 0.2]])
    q = f32([[1.0, 1e30, -2.0, 0.5]])  # the illegal action 1 looks best by far
    mask = jnp.asarray([[True, False, True, True]])
    duals = (f32(0.7), f32(1.3), 0.1, 0.01)
    loss_fn = lambda logits, m=mask: mpo_categorical_loss(logits, target, q, *duals, None, m)  # noqa: E731
    (loss, stats), grad = jax.value_and_grad(loss_fn, has_aux=True)(online)
    legal = np.asarray([0, 2, 3])
    (want, want_stats), want_grad = jax.value_and_grad(
        lambda logits: mpo_categorical_loss(logits, target[:, legal], q[:, legal], *duals), has_aux=True
    )(online[:, legal])
    assert float(loss) == pytest.approx(float(want), rel=1e-5)
    for name in want_stats:
        assert float(stats[name]) == pytest.approx(float(want_stats[name]), rel=1e-4, abs=1e-7), name
    assert float(grad[0, 1]) == 0.0
    np.testing.assert_allclose(grad[:, legal], want_grad, rtol=1e-4, atol=1e-7)
    everything = jnp.ones_like(mask)
    unmasked = mpo_categorical_loss(online, target, q.at[0, 1].set(3.0), *duals)[0]
    assert float(mpo_categorical_loss(online, target, q.at[0, 1].set(3.0), *duals, None, everything)[0]) == pytest.approx(float(unmasked), rel=1e-6)


@pytest.mark.slow
@settings(deadline=None, max_examples=6)
@given(n=st.integers(1, 6), b=st.integers(1, 5), d=st.integers(1, 3), seed=st.integers(0, 2**16))
def test_gaussian_loss_shapes(n, b, d, seed):
    rng = np.random.default_rng(seed)  # (jax.random compiles its sampler again for every new shape)
    normal = lambda *shape: jnp.asarray(rng.standard_normal(shape), jnp.float32)  # noqa: E731
    loc = normal(b, d)
    scale = jnp.exp(normal(b, d))
    actions = normal(n, b, d)
    q = normal(n, b)
    weights, loss, kl = jax.jit(mpo_e_step)(q, _uniform_log_prior(n, b), f32(1.0), f32(0.1))
    assert weights.shape == (n, b) and loss.shape == () and kl.shape == (b,)
    np.testing.assert_allclose(jnp.sum(weights, axis=0), np.ones(b), rtol=1e-5)
    assert np.all(np.asarray(kl) >= -1e-6) and np.all(np.asarray(kl) <= np.log(n) + 1e-5)
    loss, stats = jax.jit(mpo_gaussian_loss)(loc, scale, loc, scale, actions, q, *(f32(v) for v in (1.0, 1.0, 1.0, 0.1, 0.01, 0.01)))
    assert loss.shape == () and jnp.isfinite(loss)
    assert float(stats["kl_mean"]) == pytest.approx(0.0, abs=1e-6)
    assert float(stats["kl_std"]) == pytest.approx(0.0, abs=1e-6)


@pytest.mark.slow
@settings(deadline=None, max_examples=6)
@given(b=st.integers(1, 5), a=st.integers(1, 6), seed=st.integers(0, 2**16))
def test_categorical_loss_shapes(b, a, seed):
    rng = np.random.default_rng(seed)  # (jax.random compiles its sampler again for every new shape)
    online, target, q = (jnp.asarray(rng.standard_normal((b, a)), jnp.float32) for _ in range(3))
    loss, stats = jax.jit(mpo_categorical_loss)(online, target, q, *(f32(v) for v in (1.0, 1.0, 0.1, 0.01)))
    assert loss.shape == () and jnp.isfinite(loss)
    assert all(v.shape == () for v in stats.values())


# ----------------------------------------------------------------------- the agent
def test_duals_are_positive_and_projected():
    duals = MPODuals(f32(-50.0), f32([-50.0, 3.0]))
    assert float(duals.temperature) > 0 and np.all(np.asarray(duals.alpha) > 0)
    projected = duals.project()
    assert float(projected.raw_temperature) == -18.0
    np.testing.assert_array_equal(projected.raw_alpha, [-18.0, 3.0])
    np.testing.assert_allclose(projected.alpha[1], jax.nn.softplus(3.0) + 1e-8, rtol=1e-6)


def _batch(agent, b, key):
    ks = jax.random.split(key, 4)
    obs = jax.random.normal(ks[0], (b, agent.obs_size))
    if agent.discrete:
        action = jax.random.randint(ks[1], (b,), 0, agent.action_size, dtype=jnp.int32)
    else:
        action = jax.random.uniform(ks[1], (b, agent.action_size), minval=-1.0, maxval=1.0)
    data = Transition(obs, action, jax.random.normal(ks[2], (b,)), jnp.full((b,), 0.99), jax.random.normal(ks[3], (b, agent.obs_size)))
    return Sample(data=data, indices=jnp.arange(b, dtype=jnp.int32), weights=jnp.ones((b,)))


@pytest.mark.slow
@pytest.mark.parametrize("env", ["Pendulum-v1", "CartPole-v1"])
@pytest.mark.parametrize("init_temperature, grows", [(1e-3, True), (1e3, False)])
def test_agent_update_moves_the_temperature_toward_its_bound(env, init_temperature, grows, getkey):
    agent = MPO(env, hidden_sizes=(16,), num_action_samples=16, init_temperature=init_temperature)
    learner = agent.init_learner(getkey())
    # A cold temperature on an untrained critic's Q-values (spread ~ 0.1) gives a near-greedy
    # E-step (KL >> epsilon); a hot one a near-prior E-step (KL ~ 0).
    update = eqx.filter_jit(agent.update)
    new, td, metrics = update(learner, _batch(agent, 32, getkey()), getkey(), jnp.zeros((), jnp.int32), f32(0.0))
    assert isinstance(new, MPOLearner) and td.shape == (32,)
    assert (float(metrics["kl_nonparametric"]) > 0.1) == grows
    assert (float(new.duals.temperature) > init_temperature) == grows
    assert all(np.isfinite(np.asarray(v)) for v in metrics.values())


@pytest.mark.slow
def test_e_step_temperature_fixes_the_weights_but_not_the_temperature_loss():
    # The loss at temperature t1 with the E-step's weights from t0: the policy sees t0's weights
    # (same gradient and kl_nonparametric as a plain call at t0), the temperature its own loss at t1.
    args = _gaussian_loss_args(jnp.full((4, 1), 0.1), jnp.full((4, 1), 0.9), q=3.0 * jnp.linspace(-1.0, 1.0, 6)[:, None] * jnp.ones((6, 4)))
    t0, t1 = f32(0.5), f32(2.0)
    loss = lambda loc, t, e=None: mpo_gaussian_loss(loc, *args[1:], t, f32(1.0), f32(1.0), 0.1, 1e-2, 1e-2, e)  # noqa: E731
    _, fixed = loss(args[0], t1, t0)
    _, at_t0 = loss(args[0], t0)
    _, at_t1 = loss(args[0], t1)
    assert float(fixed["kl_nonparametric"]) == pytest.approx(float(at_t0["kl_nonparametric"]), rel=1e-6)
    assert float(fixed["kl_nonparametric"]) != pytest.approx(float(at_t1["kl_nonparametric"]), rel=1e-2)
    assert float(fixed["temperature_loss"]) == pytest.approx(float(at_t1["temperature_loss"]), rel=1e-6)
    grad = lambda t, e=None: jax.grad(lambda loc: loss(loc, t, e)[0])(args[0])  # noqa: E731
    np.testing.assert_allclose(grad(t1, t0), grad(t0), rtol=1e-5)
    assert not np.allclose(grad(t1), grad(t0), rtol=1e-2)
    # the E-step temperature is a constant: the temperature's gradient is its own dual's
    dt = lambda e: jax.grad(lambda t: loss(args[0], t, e)[0])(t1)  # noqa: E731
    assert float(dt(t0)) == pytest.approx(float(dt(None)), rel=1e-5)
    # categorical
    logits, q = jnp.zeros((3, 2)), jnp.tile(f32([[0.0, 1.0]]), (3, 1))
    cat = lambda t, e=None: mpo_categorical_loss(logits, logits, q, t, f32(1.0), 0.1, 0.01, e)[1]  # noqa: E731
    assert float(cat(t1, t0)["kl_nonparametric"]) == pytest.approx(float(cat(t0)["kl_nonparametric"]), rel=1e-6)
    assert float(cat(t1, t0)["temperature_loss"]) == pytest.approx(float(cat(t1)["temperature_loss"]), rel=1e-6)


def _leaves(m):
    return jax.tree.leaves(eqx.filter(m, eqx.is_array))


@pytest.mark.slow
@pytest.mark.parametrize("env", ["Pendulum-v1", "CartPole-v1"])
def test_mstep_iterations_are_steps_on_one_batch(env, getkey):
    # With the temperature frozen (so the E-step weights cannot move) and targets fixed, one update
    # with mstep_iterations=3 steps the policy and the multipliers exactly as three updates with 1
    # on the same batch and key (the critic between them does not enter the policy's loss).
    kw = dict(hidden_sizes=(16,), num_action_samples=8, target_update_period=1000, temperature_lr_scale=0.0)
    batch, key = _batch(MPO(env), 16, getkey()), getkey()
    update = eqx.filter_jit(lambda agent, learner, i: agent.update(learner, batch, key, i, f32(0.0)))
    one = MPO(env, **kw)
    learner = one.init_learner(getkey())
    stepped = learner
    for i in range(3):
        stepped, _, _ = update(one, stepped, jnp.asarray(i, jnp.int32))
    three, _, metrics = update(MPO(env, **kw, mstep_iterations=3), learner, jnp.zeros((), jnp.int32))
    for a, b in zip(_leaves((three.policy, three.duals)), _leaves((stepped.policy, stepped.duals))):
        np.testing.assert_allclose(a, b, rtol=2e-5, atol=1e-6)
    assert float(three.duals.temperature) == pytest.approx(float(learner.duals.temperature), rel=1e-6)
    once, _, _ = update(one, learner, jnp.zeros((), jnp.int32))
    assert not np.allclose(once.duals.alpha, three.duals.alpha, rtol=1e-4)
    assert all(np.isfinite(np.asarray(v)) for v in metrics.values())


@pytest.mark.slow
def test_kl_bounds_hold_with_mstep_iterations():
    """Five M-step iterations per update for 200 updates, on fresh batches, against a target
    policy that never moves. After each update the policy's decoupled KLs from the target are
    measured on the batch's states: over the last 100 updates their means are within 1.25x the
    bounds (measured: 1.00x for the mean's, 1.09x for the std's; single batches reach about 3x);
    with the bounds lifted (1e6), the same run ends more than 10x above them (19x, 177x)."""
    eps_mean, eps_std = 2.5e-3, 1e-4

    @eqx.filter_jit  # the bounds are the agent's array fields: both runs are one program
    def updates(agent, learner):
        def step(learner, i):
            batch = _batch(agent, 32, jax.random.fold_in(jax.random.key(1), i))
            learner, _, _ = agent.update(learner, batch, jax.random.fold_in(jax.random.key(2), i), i, f32(0.0))
            obs = batch.data.next_obs
            online = agent.policy_distribution(learner.policy, obs)
            target = agent.policy_distribution(learner.target_policy, obs)
            kl_mean = normal_kl(target.loc, target.scale, online.loc, target.scale)
            kl_std = normal_kl(target.loc, target.scale, target.loc, online.scale)
            return learner, jnp.stack([jnp.mean(kl_mean), jnp.mean(kl_std)])

        return jax.lax.scan(step, learner, jnp.arange(200, dtype=jnp.int32))[1]

    def run(bound_mean, bound_std):
        agent = MPO(
            "Pendulum-v1", hidden_sizes=(16,), num_action_samples=8, mstep_iterations=5,
            target_update_period=10**6, kl_mean=bound_mean, kl_std=bound_std, dual_learning_rate=0.05,
            policy_learning_rate=1e-3,
        )
        return np.asarray(updates(agent, agent.init_learner(jax.random.key(0))))

    constrained = run(eps_mean, eps_std).astype(np.float64)
    assert constrained[-100:, 0].mean() <= 1.25 * eps_mean, constrained[-100:, 0].mean()
    assert constrained[-100:, 1].mean() <= 1.25 * eps_std, constrained[-100:, 1].mean()
    free = run(1e6, 1e6)
    assert free[-1, 0] > 10 * eps_mean, free[-1]
    assert free[-1, 1] > 10 * eps_std, free[-1]


_dual_updates = eqx.filter_jit(
    lambda agent, learner: jax.lax.scan(
        lambda l, i: (lambda new: (new[0], (new[0].duals.alpha, new[2])))(
            agent.update(l, _batch(agent, 16, jax.random.fold_in(jax.random.key(1), i)), jax.random.key(2), i, f32(0.0))
        ),
        learner,
        jnp.arange(20, dtype=jnp.int32),
    )
)


@pytest.mark.slow
@settings(deadline=None, max_examples=8)
@given(mean_max=st.floats(1e-6, 2.0), std_max=st.floats(1e-6, 20.0), cat_max=st.floats(1e-6, 2.0))
def test_multipliers_never_exceed_their_maxima(mean_max, std_max, cat_max):
    # Tiny KL bounds and a fast dual optimizer push the multipliers up every step (alpha_std starts
    # at 10): after every update (and as used in it: the metrics) each stays at or below its maximum.
    # Two M-step iterations per update: the bounds hold after every step, not only the last.
    kw = dict(hidden_sizes=(8,), num_action_samples=4, mstep_iterations=2, kl_mean=1e-8, kl_std=1e-8,
              kl_categorical=1e-8, dual_learning_rate=0.5, policy_learning_rate=1e-2)
    for env, maxima in [("Pendulum-v1", [mean_max, std_max]), ("CartPole-v1", [cat_max])]:
        agent = MPO(env, **kw, alpha_mean_max=mean_max, alpha_std_max=std_max, alpha_max=cat_max)
        learner = agent.init_learner(jax.random.key(0))
        assert np.all(np.asarray(learner.duals.alpha) <= np.float32(maxima))
        _, (alphas, metrics) = _dual_updates(agent, learner)
        assert np.all(np.asarray(alphas) <= np.float32(maxima)[None]), (np.asarray(alphas).max(axis=0), maxima)
        used = [metrics["alpha_mean"], metrics["alpha_std"]] if env == "Pendulum-v1" else [metrics["alpha"]]
        assert np.all(np.asarray(jnp.stack(used, axis=-1)) <= np.float32(maxima))
        # the bound binds: a maximum below where the multiplier would go is reached
        free, _ = _dual_updates(MPO(env, **kw), agent.init_learner(jax.random.key(0)))
        reached = np.asarray(alphas[-1]) >= 0.99 * np.float32(maxima)
        assert np.all(reached | (np.asarray(free.duals.alpha) < np.float32(maxima))), (alphas[-1], free.duals.alpha, maxima)


@pytest.mark.slow
@pytest.mark.parametrize("env", ["Pendulum-v1", "CartPole-v1"])
def test_dual_lr_scales_multiply_each_duals_step(env, getkey):
    batch, key = _batch(MPO(env), 16, getkey()), getkey()
    update = eqx.filter_jit(lambda agent, learner: agent.update(learner, batch, key, jnp.zeros((), jnp.int32), f32(0.0))[0])
    base = MPO(env, hidden_sizes=(16,), num_action_samples=8)
    learner = base.init_learner(getkey())
    raw = lambda d: np.concatenate([np.atleast_1d(np.asarray(d.raw_temperature)), np.asarray(d.raw_alpha)])  # noqa: E731
    plain = raw(update(base, learner).duals) - raw(learner.duals)
    scaled_agent = MPO(env, hidden_sizes=(16,), num_action_samples=8, temperature_lr_scale=0.5,
                       alpha_mean_lr_scale=0.0, alpha_std_lr_scale=3.0, alpha_lr_scale=0.0)
    scaled = raw(update(scaled_agent, learner).duals) - raw(learner.duals)
    factors = [0.5, 0.0, 3.0] if env == "Pendulum-v1" else [0.5, 0.0]
    assert np.all(np.abs(plain) > 1e-4)
    np.testing.assert_allclose(scaled, np.float32(factors) * plain, rtol=1e-4, atol=1e-7)


@pytest.mark.slow
def test_agent_targets_follow_every_period(getkey):
    agent = MPO("Pendulum-v1", hidden_sizes=(16,), target_update_period=2, tau=1.0)
    learner = agent.init_learner(getkey())
    batch = _batch(agent, 16, getkey())
    update = eqx.filter_jit(agent.update)
    first, _, _ = update(learner, batch, getkey(), jnp.zeros((), jnp.int32), f32(0.0))
    leaves = lambda m: jax.tree.leaves(eqx.filter(m, eqx.is_array))  # noqa: E731
    # after update 1 of 2 the targets still hold the initial networks; after update 2 they are copies
    for a, b in zip(leaves(first.target_policy), leaves(learner.policy)):
        np.testing.assert_array_equal(a, b)
    second, _, _ = update(first, batch, getkey(), jnp.ones((), jnp.int32), f32(0.0))
    for a, b in zip(leaves(second.target_policy), leaves(second.policy)):
        np.testing.assert_array_equal(a, b)
    for a, b in zip(leaves(second.target_critic), leaves(second.critic)):
        np.testing.assert_array_equal(a, b)


@pytest.mark.slow
@settings(deadline=None, max_examples=6)
@given(batch=st.integers(1, 6), num_critics=st.sampled_from([1, 2]), samples=st.integers(1, 5))
def test_actions_are_in_bounds_and_shaped(batch, num_critics, samples):
    agent = MPO("Pendulum-v1", hidden_sizes=(8,), num_critics=num_critics, num_action_samples=samples, init_std=5.0)
    learner = agent.init_learner(jax.random.key(batch))
    obs = 10.0 * jax.random.normal(jax.random.key(1), (batch, 3))

    @eqx.filter_jit
    def run(learner, obs, batch_data):
        explore = agent.explore(learner, obs, jax.random.key(2), f32(0.0))
        _, td, _ = agent.update(learner, batch_data, jax.random.key(4), jnp.zeros((), jnp.int32), f32(0.0))
        return explore, agent.greedy(learner, obs), td

    explore, greedy, td = run(learner, obs, _batch(agent, batch, jax.random.key(3)))
    for action in (explore, greedy):
        assert action.shape == (batch, 1)
        assert np.all(np.abs(np.asarray(action)) <= 1.0)
    assert td.shape == (batch,)


@pytest.mark.slow
def test_discrete_actions(getkey):
    agent = MPO("CartPole-v1", hidden_sizes=(8,))
    state = agent.init(getkey())
    obs = jnp.zeros((5, 4))
    for action in (agent.act(state, obs, getkey()), agent.act(state, obs, deterministic=True)):
        assert action.shape == (5,) and action.dtype == jnp.int32
        assert np.all((np.asarray(action) >= 0) & (np.asarray(action) < 2))


@pytest.mark.slow
def test_discrete_mode_honours_action_masks(getkey):
    """On `MaskedActions` (an illegal action pays 2, more than any legal one): no illegal action
    in warm-up or training, none from `act` (sampled or greedy), and finite losses.
    (`check_action_masks` runs the full contract: tests/testing/test_testing_mutations.py.)"""
    agent = MPO(MaskedActions(), **dict(LOOP, learning_starts=16, batch_size=16))
    assert agent.layout.mask_size == 4 and agent.obs_size == 4
    state, metrics = eqxrl.train(agent, getkey(), 256, progress=False)
    assert int(jnp.sum(innermost_state(state.env_state).illegal)) == 0
    for name in ("critic_loss", "policy_loss", "kl", "kl_nonparametric", "temperature_loss", "alpha_loss"):
        assert np.isfinite(float(metrics[name][-1])), name
    masks = jax.random.bernoulli(getkey(), 0.5, (200, 4)).at[:, 0].set(True).astype(jnp.int32)
    obs = {ACTION_MASK: masks, "legal": masks.astype(jnp.float32)}
    for action in (agent.act(state, obs, getkey()), agent.act(state, obs, deterministic=True)):
        assert np.all(np.take_along_axis(np.asarray(masks), np.asarray(action)[:, None], axis=1) == 1)


# ----------------------------------------------------------------------- probes
def _q(agent, state, obs, action):
    critic = state.learner.critic
    o = jnp.asarray([[obs]], jnp.float32)
    if agent.discrete:
        return float(jnp.mean(critic(o)[:, 0, action]))
    return float(jnp.mean(critic(o, jnp.asarray([[action]], jnp.float32))))


# The continuous probes (twin critics, the default): check_learns_probes in tests/testing/test_testing_agents.py;
# a single critic on the discrete ones here.
@pytest.mark.slow
def test_discrete_probes(getkey, num_critics=1):
    kw = dict(PROBE, num_critics=num_critics)
    agent = MPO(TwoStepDiscounting(), **kw, gamma=0.5)
    state, _ = eqxrl.train(agent, getkey(), PROBE_STEPS, progress=False)
    assert _q(agent, state, 0.0, 0) == pytest.approx(0.5, abs=0.15)
    assert _q(agent, state, 1.0, 1) == pytest.approx(1.0, abs=0.15)

    agent = MPO(ObservationActionReward(), **kw)
    state, _ = eqxrl.train(agent, getkey(), PROBE_STEPS, progress=False)
    np.testing.assert_array_equal(agent.act(state, jnp.asarray([[1.0], [-1.0]]), deterministic=True), [1, 0])
    assert _q(agent, state, 1.0, 1) == pytest.approx(1.0, abs=0.15)


# ----------------------------------------------------------------------- seeds, sweeps, compile once
@pytest.mark.slow
@pytest.mark.parametrize("discrete", [False, pytest.param(True, marks=pytest.mark.exhaustive)])  # (tests/tiers.py)
def test_seeds_and_sweeps(discrete, getkey):
    env = ConstantReward(discrete_actions=discrete)
    agents = [MPO(env, **{**LOOP, "policy_learning_rate": lr}) for lr in (1e-3, 3e-3)]
    stacked = eqxrl.stack(agents)
    states, metrics = eqxrl.train(stacked, getkey(), 16 * 6, progress=False)
    assert metrics["temperature"].shape == (2, 6)
    assert eqxrl.evaluate(stacked, states, getkey(), num_episodes=3).shape == (2, 3)
    states, metrics = eqxrl.train(agents[0], jax.random.split(getkey(), 2), 16 * 6, progress=False)
    assert metrics["updates"].shape == (2, 6)
    assert np.all(np.isfinite(metrics["critic_loss"][:, -1]))
    assert eqxrl.evaluate(agents[0], states, getkey(), num_episodes=3).shape == (2, 3)


@pytest.mark.slow
def test_chunk_compiles_once(getkey, monkeypatch):
    counted = eqx.filter_jit(
        eqx.debug.assert_max_traces(eqxrl.loop.chunk, max_traces=1), donate="all-except-first"
    )
    monkeypatch.setattr(train_module, "run_chunk", counted)
    env = ConstantReward(discrete_actions=False)
    for change in (dict(epsilon=0.2, kl_mean=1e-2, tau=0.5), dict(kl_std=1e-3, dual_learning_rate=1e-3, gamma=0.5)):
        eqxrl.train(MPO(env, **{**LOOP, **change}), getkey(), 16 * 6, progress=False, chunk_iterations=3)


# ----------------------------------------------------------------------- bad input
@pytest.mark.slow
@pytest.mark.parametrize(
    "env, kwargs, message",
    [
        ("Pendulum-v1", dict(epsilon=0.0), r"MPO\(epsilon\) must be > 0, got 0"),
        ("Pendulum-v1", dict(kl_mean=-1.0), r"MPO\(kl_mean\) must be > 0, got -1"),
        ("Pendulum-v1", dict(kl_std=0.0), r"MPO\(kl_std\) must be > 0, got 0"),
        ("CartPole-v1", dict(kl_categorical=-0.1), r"MPO\(kl_categorical\) must be > 0, got -0.1"),
        ("Pendulum-v1", dict(num_action_samples=0), r"MPO\(num_action_samples\) must be a positive int, got 0"),
        ("Pendulum-v1", dict(num_critics=0), r"MPO\(num_critics\) must be a positive int, got 0"),
        ("Pendulum-v1", dict(target_update_period=0), r"MPO\(target_update_period\) must be a positive int, got 0"),
        ("Pendulum-v1", dict(dual_learning_rate=0.0), r"MPO\(dual_learning_rate\) must be > 0, got 0"),
        ("Pendulum-v1", dict(policy_learning_rate=-1e-3), r"MPO\(policy_learning_rate\) must be > 0, got -0.001"),
        ("Pendulum-v1", dict(init_temperature=0.0), r"MPO\(init_temperature\) must be > 0, got 0"),
        ("Pendulum-v1", dict(init_alpha_std=-1.0), r"MPO\(init_alpha_std\) must be > 0, got -1"),
        ("Pendulum-v1", dict(init_std=0.0), r"MPO\(init_std\) must be > 0, got 0"),
        ("Pendulum-v1", dict(min_std=-1.0), r"MPO\(min_std\) must be >= 0, got -1"),
        ("Pendulum-v1", dict(tau=1.5), r"MPO\(tau\) must be in \(0, 1\], got 1.5"),
        ("Pendulum-v1", dict(mstep_iterations=0), r"MPO\(mstep_iterations\) must be a positive int, got 0"),
        ("Pendulum-v1", dict(alpha_mean_max=0.0), r"MPO\(alpha_mean_max\) must be >= 1e-06 \(inf: unbounded\), got 0"),
        ("Pendulum-v1", dict(alpha_std_max=1e-9), r"MPO\(alpha_std_max\) must be >= 1e-06 \(inf: unbounded\), got 1e-09"),
        ("CartPole-v1", dict(alpha_max=-1.0), r"MPO\(alpha_max\) must be >= 1e-06 \(inf: unbounded\), got -1"),
        ("Pendulum-v1", dict(temperature_lr_scale=-1.0), r"MPO\(temperature_lr_scale\) must be a finite number >= 0 \(0 freezes the dual\), got -1"),
        ("Pendulum-v1", dict(alpha_std_lr_scale=float("inf")), r"MPO\(alpha_std_lr_scale\) must be a finite number >= 0 \(0 freezes the dual\), got inf"),
        ("Pendulum-v1", dict(max_grad_norm=0.0), r"MPO\(max_grad_norm\) must be > 0"),
        ("Pendulum-v1", dict(gamma=1.5), r"MPO\(gamma\) must be in \[0, 1\], got 1.5"),
        ("Pendulum-v1", dict(batch_size=64, buffer_size=32), r"MPO\(batch_size=64\) must not exceed buffer_size=32"),
        ("Pendulum-v1", dict(learning_starts=-1), r"MPO\(learning_starts\) must be an int >= 0, got -1"),
        ("Pendulum-v1", dict(updates_per_step=0.0), r"MPO\(updates_per_step\) must be > 0, got 0.0"),
        (None, {}, r"MPO\(env\) must be an eqxrl AbstractEnv or an env name, got None"),
    ],
)
def test_bad_config(env, kwargs, message):
    with pytest.raises(ValueError, match=message):
        MPO(env, **kwargs)


@pytest.mark.slow
def test_act_needs_a_key_unless_deterministic(getkey):
    agent = MPO("Pendulum-v1", hidden_sizes=(8,))
    state = agent.init(getkey())
    with pytest.raises(ValueError, match=r"MPO.act\(key\) is required unless deterministic=True"):
        agent.act(state, jnp.zeros((5, 3)))
    with pytest.raises(ValueError, match=r"MPO: obs must have shape \(\*batch, 3\), got \(5, 4\)"):
        agent.act(state, jnp.zeros((5, 4)), getkey())


# ----------------------------------------------------------------------- learning (short CI versions)
# The full criterion (4 seeds, 1e5 steps, >= -250) is benchmarks/mpo_learning.py;
# this short run over 3 seeds fails if MPO does not learn at all. (Discrete MPO: test_discrete_probes.)
@pytest.mark.slow
@pytest.mark.learning
def test_mpo_learns_pendulum():
    # Batches of 128 (the default 256 doubled the training's CPU time); 10,000 steps (at 8,000 one
    # seed of four had not learned yet; at 15,000, as this test ran before, the same bound held by more).
    agent = MPO("Pendulum-v1", hidden_sizes=(64, 64), batch_size=128)
    untrained = untrained_returns(agent)
    trained = per_seed_returns(agent, train_seeds(agent, 10_000)[0], num_episodes=8)
    assert np.all(untrained < -900), untrained
    # Bound: 2 of 3 seeds above -600 (native, 3 seeds: -154, -143, -215; the fourth of 4 seeds -166; at 15,000
    # steps -151, -93, -226, the same natively and with AVX2); an untrained policy scores about -1200.
    assert most_above(trained, -600), (untrained, trained)


# ------------------------------------------------- dual_update="scaled": pytorchrl's multiplier rule
# `alpha <- clip(alpha + scale * (kl - bound), 0, alpha_max)` with `alpha_scale`, `alpha_mean_scale`,
# `alpha_var_scale`; the default ("gradient") is unchanged (tests/agents/test_regression.py holds its numbers).

def test_scaled_update_by_hand():
    alpha = f32([1.0, 0.2, 4.0, 0.5])
    kl = f32([0.03, 0.0, 0.5, 0.01])
    # 1 + 2 * (0.03 - 0.01) = 1.04; 0.2 - 30 * 0.01 -> clipped at 0; 4 + 10 * 0.49 -> clipped at 5; unchanged at the bound
    new = mpo_scaled_multiplier_update(alpha, kl, 0.01, f32([2.0, 30.0, 10.0, 7.0]), 5.0)
    np.testing.assert_allclose(new, [1.04, 0.0, 5.0, 0.5], rtol=1e-6)
    grad = jax.grad(lambda a: jnp.sum(mpo_scaled_multiplier_update(a, kl, 0.01, 1.0, 5.0)))(alpha)
    np.testing.assert_array_equal(grad, 0.0)  # a constant: no gradient flows into the multipliers


@pytest.mark.slow  # (over 2 s in the fast tier: tests/tiers.py)
@pytest.mark.parametrize("env", ["Pendulum-v1", "CartPole-v1"])
def test_agent_multipliers_follow_the_rule_by_hand(env):
    # Two M-step iterations: the first starts at the target policy (KL 0), so the multipliers
    # drop by scale * bound; the second moves them by scale * (its measured KL - bound), the
    # KL that the update's metrics report (the last iteration's).
    kw = dict(hidden_sizes=(16,), num_action_samples=8, mstep_iterations=2, dual_update="scaled", policy_learning_rate=3e-2,
              init_alpha_mean=0.5, init_alpha_std=2.0, alpha_mean_scale=3.0, alpha_var_scale=50.0, alpha_scale=4.0,
              kl_mean=1e-3, kl_std=1e-4, kl_categorical=1e-3, alpha_std_max=5.0)  # fmt: skip
    agent = MPO(env, **kw)
    learner = agent.init_learner(jax.random.key(0))
    update = eqx.filter_jit(agent.update)
    new, _, metrics = update(learner, _batch(agent, 32, jax.random.key(1)), jax.random.key(2), jnp.zeros((), jnp.int32), f32(0.0))
    if agent.discrete:
        alpha0, scale, bound, kl, top = [0.5], [4.0], [1e-3], [metrics["kl"]], [np.inf]
    else:
        alpha0, scale, bound, kl, top = [0.5, 2.0], [3.0, 50.0], [1e-3, 1e-4], [metrics["kl_mean"], metrics["kl_std"]], [np.inf, 5.0]
    alpha0, scale, bound, kl = (np.asarray(x, np.float64) for x in (alpha0, scale, bound, kl))
    assert np.all(kl > 0)  # the policy moved in the first iteration
    first = np.clip(alpha0 - scale * bound, 0.0, top)
    expected = np.clip(first + scale * (kl - bound), 0.0, top)
    np.testing.assert_allclose(np.asarray(new.duals.alpha, np.float64), expected, rtol=1e-5)
    assert np.any(np.abs(expected - alpha0) > 1e-3)  # a visible move: the check above can fail
    # the temperature still takes its optimizer step
    assert float(new.duals.temperature) != pytest.approx(float(learner.duals.temperature), rel=1e-7)


@pytest.mark.slow  # (over 2 s in the fast tier: tests/tiers.py)
def test_a_short_scaled_run_stays_finite():
    agent = MPO("Pendulum-v1", num_envs=8, rollout_length=2, updates_per_step=0.25, batch_size=32, buffer_size=1024,
                learning_starts=64, hidden_sizes=(8,), num_action_samples=8, dual_update="scaled", alpha_mean_max=0.1,
                alpha_std_max=10.0)  # fmt: skip
    states, metrics = eqxrl.train(agent, jax.random.split(jax.random.key(0), 2), 16 * 20, progress=False)
    assert metrics["alpha_mean"].shape == (2, 20)
    for name in ("critic_loss", "policy_loss", "temperature", "alpha_mean", "alpha_std"):
        assert np.all(np.isfinite(np.asarray(metrics[name])[:, -10:])), name
    alpha = np.asarray(jax.nn.softplus(states.learner.duals.raw_alpha) + 1e-8)
    assert np.all(alpha >= 0) and np.all(alpha[:, 0] <= 0.1) and np.all(alpha[:, 1] <= 10.0)


def test_default_is_the_gradient_rule_and_bad_input():
    agent = MPO("Pendulum-v1")
    assert agent.dual_update == "gradient"
    names = agent.hyperparameters()
    assert float(names["alpha_mean_scale"]) == 1.0 and float(names["alpha_var_scale"]) == 100.0 and float(names["alpha_scale"]) == 10.0
    with no_runtime_typecheck():
        with pytest.raises(ValueError, match=r"MPO\(dual_update\) must be one of \['gradient', 'scaled'\], got 'adam'"):
            MPO("Pendulum-v1", dual_update="adam")
        with pytest.raises(ValueError, match=r"MPO\(alpha_var_scale\) must be a finite number >= 0 \(0 freezes the multiplier\), got -1"):
            MPO("Pendulum-v1", alpha_var_scale=-1.0)
        with pytest.raises(ValueError, match=r"MPO\(alpha_scale\) must be a finite number >= 0 .*got inf"):
            MPO("CartPole-v1", alpha_scale=float("inf"))
