"""Tests for `eqxrl.components` return estimators: gae, lambda_returns, n_step_returns.

Each estimator is checked against a plain Python loop over a rollout in which
episodes end both by termination (no bootstrap) and by truncation (bootstrap
from `next_values[t]`, the value of the true next observation).
"""

import hypothesis.strategies as st
import jax
import jax.numpy as jnp
import jaxtyping
import numpy as np
import pytest
from hypothesis import given, settings

from eqxrl.components import gae, lambda_returns, n_step_returns
from eqxrl.testing import strategies as kit
from typecheck import no_runtime_typecheck

# The property tests call jitted versions: one compilation per shape instead of one
# per call (eager `lax.scan` re-traces its fresh inner function every time).
# Eager calls are covered by the hand-written examples below.
gae_jit = jax.jit(gae)
lambda_returns_jit = jax.jit(lambda_returns)
n_step_returns_jit = jax.jit(n_step_returns, static_argnames="n")

SETTINGS = settings(max_examples=25, deadline=None)
# Few distinct shapes: each is a new compilation of the scans.
Ts = st.sampled_from([1, 2, 7])
# The kit's strategy, on three shapes (each shape compiles anew): none, one and two batch axes.
batches = kit.batch_shapes(choices=[(), (3,), (2, 2)])
gammas = st.sampled_from([0.0, 0.5, 0.9, 0.99, 1.0])
lambdas = st.sampled_from([0.0, 0.3, 0.95, 1.0])


def _rollout(seed: int, T: int, batch: tuple[int, ...], p_term: float, p_trunc: float, consistent: bool):
    """A random rollout. With `consistent`, next_values[t] == values[t + 1] inside an episode
    (the same observation is valued twice), as in a real rollout."""
    rng = np.random.default_rng(seed)
    shape = (T, *batch)
    rewards = rng.normal(size=shape).astype(np.float32)
    values = rng.normal(size=shape).astype(np.float32)
    next_values = rng.normal(size=shape).astype(np.float32)
    terminated = rng.random(shape) < p_term
    truncated = (rng.random(shape) < p_trunc) & ~terminated
    if consistent:
        done = terminated | truncated
        for t in range(T - 1):
            next_values[t] = np.where(done[t], next_values[t], values[t + 1])
    return rewards, values, next_values, terminated, truncated


def _flat(*arrays):
    """(T, *batch) -> (T, B) views, to loop over independent columns."""
    return [a.reshape(a.shape[0], -1) for a in arrays]


def gae_reference(rewards, values, next_values, terminated, truncated, gamma, lam):
    r, v, nv, term, trunc = _flat(rewards, values, next_values, terminated, truncated)
    T, B = r.shape
    adv = np.zeros((T, B))
    for b in range(B):
        running = 0.0
        for t in reversed(range(T)):
            bootstrap = 0.0 if term[t, b] else nv[t, b]
            delta = r[t, b] + gamma * bootstrap - v[t, b]
            # An episode boundary (either kind) or the end of the rollout stops accumulation.
            if term[t, b] or trunc[t, b] or t == T - 1:
                running = delta
            else:
                running = delta + gamma * lam * running
            adv[t, b] = running
    return adv.reshape(rewards.shape)


def lambda_returns_reference(rewards, next_values, terminated, truncated, gamma, lam):
    r, nv, term, trunc = _flat(rewards, next_values, terminated, truncated)
    T, B = r.shape
    out = np.zeros((T, B))
    for b in range(B):
        following = 0.0
        for t in reversed(range(T)):
            if term[t, b]:
                g = r[t, b]
            elif trunc[t, b] or t == T - 1:
                g = r[t, b] + gamma * nv[t, b]
            else:
                g = r[t, b] + gamma * ((1 - lam) * nv[t, b] + lam * following)
            out[t, b] = following = g
    return out.reshape(rewards.shape)


def n_step_reference(rewards, next_values, terminated, truncated, gamma, n):
    r, nv, term, trunc = _flat(rewards, next_values, terminated, truncated)
    T, B = r.shape
    out = np.zeros((T, B))
    for b in range(B):
        for t in range(T):
            g = 0.0
            for k in range(n):
                j = t + k
                g += gamma**k * r[j, b]
                if term[j, b]:
                    break
                if trunc[j, b] or k == n - 1 or j == T - 1:
                    g += gamma ** (k + 1) * nv[j, b]
                    break
            out[t, b] = g
    return out.reshape(rewards.shape)


def _jnp(rewards, values, next_values, terminated, truncated):
    return tuple(jnp.asarray(x) for x in (rewards, values, next_values, terminated, truncated))


rollout_kwargs = dict(
    seed=st.integers(0, 2**16),
    T=Ts,
    batch=batches,
    p_term=st.sampled_from([0.0, 0.2, 0.5]),
    p_trunc=st.sampled_from([0.0, 0.2, 0.5]),
)


@SETTINGS
@given(**rollout_kwargs, gamma=gammas, lam=lambdas)
def test_gae_matches_python_loop(seed, T, batch, p_term, p_trunc, gamma, lam):
    data = _rollout(seed, T, batch, p_term, p_trunc, consistent=False)
    r, v, nv, term, trunc = _jnp(*data)
    adv = gae_jit(r, v, nv, term, trunc, gamma, lam)
    assert adv.shape == (T, *batch) and adv.dtype == jnp.float32
    np.testing.assert_allclose(adv, gae_reference(*data, gamma, lam), rtol=1e-5, atol=1e-5)


@SETTINGS
@given(**rollout_kwargs, gamma=gammas, lam=lambdas)
def test_lambda_returns_match_python_loop(seed, T, batch, p_term, p_trunc, gamma, lam):
    rewards, _, next_values, terminated, truncated = _rollout(seed, T, batch, p_term, p_trunc, consistent=False)
    out = lambda_returns_jit(
        jnp.asarray(rewards), jnp.asarray(next_values), jnp.asarray(terminated), jnp.asarray(truncated), gamma, lam
    )
    assert out.shape == (T, *batch)
    expected = lambda_returns_reference(rewards, next_values, terminated, truncated, gamma, lam)
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)


@SETTINGS
@given(**rollout_kwargs, gamma=gammas, n=st.sampled_from([1, 2, 3, 10]))
def test_n_step_returns_match_python_loop(seed, T, batch, p_term, p_trunc, gamma, n):
    rewards, _, next_values, terminated, truncated = _rollout(seed, T, batch, p_term, p_trunc, consistent=False)
    out = n_step_returns_jit(
        jnp.asarray(rewards), jnp.asarray(next_values), jnp.asarray(terminated), jnp.asarray(truncated), gamma, n
    )
    assert out.shape == (T, *batch)
    expected = n_step_reference(rewards, next_values, terminated, truncated, gamma, n)
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)


@SETTINGS
@given(**rollout_kwargs, gamma=gammas, lam=lambdas)
def test_lambda_returns_equal_gae_plus_values(seed, T, batch, p_term, p_trunc, gamma, lam):
    # Holds whenever next_values[t] is values[t + 1] inside an episode, as in a real rollout.
    r, v, nv, term, trunc = _jnp(*_rollout(seed, T, batch, p_term, p_trunc, consistent=True))
    np.testing.assert_allclose(
        lambda_returns_jit(r, nv, term, trunc, gamma, lam),
        gae_jit(r, v, nv, term, trunc, gamma, lam) + v,
        rtol=1e-5,
        atol=1e-5,
    )


@settings(max_examples=15, deadline=None)
@given(**rollout_kwargs, gamma=gammas)
def test_lambda_extremes_are_n_step_returns(seed, T, batch, p_term, p_trunc, gamma):
    r, _, nv, term, trunc = _jnp(*_rollout(seed, T, batch, p_term, p_trunc, consistent=False))
    # lambda = 0 is the one-step TD target; lambda = 1 is the Monte Carlo return
    # bootstrapped where the episode or the rollout is cut.
    np.testing.assert_allclose(
        lambda_returns_jit(r, nv, term, trunc, gamma, 0.0),
        n_step_returns_jit(r, nv, term, trunc, gamma, n=1),
        rtol=1e-5,
        atol=1e-5,
    )
    np.testing.assert_allclose(
        lambda_returns_jit(r, nv, term, trunc, gamma, 1.0),
        n_step_returns_jit(r, nv, term, trunc, gamma, n=T),
        rtol=1e-5,
        atol=1e-5,
    )


def test_termination_and_truncation_hand_example():
    # One episode terminates at t=1; the next is truncated at t=3; the rollout ends at t=4.
    r = jnp.array([1.0, 2.0, 3.0, 4.0, 5.0])
    nv = jnp.array([10.0, 20.0, 30.0, 40.0, 50.0])
    term = jnp.array([False, True, False, False, False])
    trunc = jnp.array([False, False, False, True, False])
    g = 0.5
    expected_two_step = [
        1 + g * 2,  # stops at the termination: no bootstrap from 20
        2,  # terminal step: reward only
        3 + g * 4 + g**2 * 40,  # truncation: bootstrap from the final observation's value
        4 + g * 40,
        5 + g * 50,  # rollout end: bootstrap
    ]
    np.testing.assert_allclose(n_step_returns(r, nv, term, trunc, g, 2), expected_two_step, rtol=1e-6)
    one_step = [1 + g * 10, 2, 3 + g * 30, 4 + g * 40, 5 + g * 50]
    np.testing.assert_allclose(lambda_returns(r, nv, term, trunc, g, 0.0), one_step, rtol=1e-6)
    np.testing.assert_allclose(gae(r, jnp.zeros(5), nv, term, trunc, g, 0.0), one_step, rtol=1e-6)
    monte_carlo = [1 + g * 2, 2, 3 + g * 4 + g**2 * 40, 4 + g * 40, 5 + g * 50]
    np.testing.assert_allclose(lambda_returns(r, nv, term, trunc, g, 1.0), monte_carlo, rtol=1e-6)


def test_traced_hyperparameters_do_not_recompile():
    r, v, nv, term, trunc = _jnp(*_rollout(0, 5, (2,), 0.2, 0.2, consistent=True))

    @jax.jit
    def f(gamma, lam):
        return gae(r, v, nv, term, trunc, gamma, lam), lambda_returns(r, nv, term, trunc, gamma, lam)

    for gamma, lam in [(0.9, 0.95), (0.5, 0.0)]:
        adv, ret = f(jnp.float32(gamma), jnp.float32(lam))
        np.testing.assert_allclose(adv, gae_reference(*map(np.asarray, (r, v, nv, term, trunc)), gamma, lam), atol=1e-5)
        np.testing.assert_allclose(ret, adv + v, atol=1e-5)
    assert f._cache_size() == 1


# ----------------------------------------------------------------------------- bad inputs


@pytest.mark.parametrize("n", [0, -2])
def test_n_step_returns_rejects_non_positive_n(n):
    x = jnp.zeros((4, 2))
    b = jnp.zeros((4, 2), bool)
    with pytest.raises(ValueError, match=rf"n_step_returns\(n\) must be a positive int, got {n}"):
        n_step_returns(x, x, b, b, 0.9, n)


def test_gae_rejects_mismatched_shapes():
    r = jnp.zeros((4, 2))
    b = jnp.zeros((4, 2), bool)
    bad = jnp.zeros((4, 3))
    # With the jaxtyping test hook, the shared "T *batch" annotation catches it first...
    with pytest.raises(jaxtyping.TypeCheckError, match=r"values"):
        gae(r, bad, r, b, b, 0.9, 0.95)
    # ...and a user without the hook gets eqxrl's own message naming the argument.
    with no_runtime_typecheck():
        match = r"gae\(values\) must have the \(T, \*batch\) shape of the rewards \(4, 2\), got \(4, 3\)"
        with pytest.raises(ValueError, match=match):
            gae(r, bad, r, b, b, 0.9, 0.95)
        with pytest.raises(ValueError, match=r"gae\(truncated\) must have the .* \(4, 2\), got \(5, 2\)"):
            gae(r, r, r, b, jnp.zeros((5, 2), bool), 0.9, 0.95)
        with pytest.raises(ValueError, match=r"lambda_returns\(next_values\) must have the \(T, \*batch\) shape"):
            lambda_returns(r, jnp.zeros((4,)), b, b, 0.9, 0.95)
        with pytest.raises(ValueError, match=r"n_step_returns\(terminated\) must have the \(T, \*batch\) shape"):
            n_step_returns(r, r, jnp.zeros((3, 2), bool), b, 0.9, 2)
        with pytest.raises(ValueError, match=r"gae\(rewards\) needs a leading time axis"):
            gae(*(jnp.zeros(()),) * 3, jnp.zeros((), bool), jnp.zeros((), bool), 0.9, 0.95)
