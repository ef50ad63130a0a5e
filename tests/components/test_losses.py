"""Tests for `eqxrl.components` losses: normalize_advantages, ppo_policy_loss, value_loss."""

import hypothesis.extra.numpy as hnp
import hypothesis.strategies as st
import jax
import jax.numpy as jnp
import numpy as np
from hypothesis import given, settings

from eqxrl.components import normalize_advantages, ppo_policy_loss, value_loss

batch_sizes = st.sampled_from([1, 4, 16])


def _vec(n, lo, hi):
    return hnp.arrays(np.float32, (n,), elements=st.floats(lo, hi, width=32))


@settings(max_examples=20, deadline=None)
@given(data=st.data(), shape=st.sampled_from([(8,), (4, 4), (2, 3, 2)]))
def test_normalize_advantages(data, shape):
    adv = data.draw(hnp.arrays(np.float32, shape, elements=st.floats(-100, 100, width=32)))
    out = normalize_advantages(jnp.asarray(adv))
    assert out.shape == shape
    assert np.isfinite(np.asarray(out)).all()
    a = adv.astype(np.float64)
    # float32 cannot resolve a spread much below 1e-7 of the values' magnitude.
    if a.std() > 1e-3 * max(1.0, np.abs(a).max()):
        np.testing.assert_allclose(out, (a - a.mean()) / (a.std() + 1e-8), rtol=1e-3, atol=1e-3)
        np.testing.assert_allclose(float(out.mean()), 0.0, atol=1e-4)
        np.testing.assert_allclose(float(out.std()), 1.0, rtol=1e-3)


def test_normalize_advantages_constant_input():
    # An exactly representable constant: mean is exact, every advantage maps to 0.
    np.testing.assert_array_equal(normalize_advantages(jnp.full((5,), 3.0)), 0.0)
    # A constant like 0.1 is not: float32 rounding of the mean leaves a spread of one
    # ulp, which the division scales to +-1 (a float32 limit of the usual
    # (adv - mean) / (std + eps) formula). The result is at least finite.
    assert np.isfinite(np.asarray(normalize_advantages(jnp.full((5,), 0.1)))).all()


def _ppo_reference(logp, old_logp, adv, eps):
    logp, old_logp, adv = (np.asarray(x, np.float64) for x in (logp, old_logp, adv))
    ratio = np.exp(logp - old_logp)
    loss = -np.mean(np.minimum(ratio * adv, np.clip(ratio, 1 - eps, 1 + eps) * adv))
    kl = np.mean((ratio - 1) - np.log(ratio))
    frac = np.mean(np.abs(ratio - 1) > eps)
    return loss, kl, frac


@settings(max_examples=25, deadline=None)
@given(data=st.data(), n=batch_sizes, eps=st.sampled_from([0.1, 0.2, 0.3]), traced_eps=st.booleans())
def test_ppo_policy_loss_against_numpy(data, n, eps, traced_eps):
    old = data.draw(_vec(n, -3, 0))
    logp = old + data.draw(_vec(n, -0.5, 0.5))
    adv = data.draw(_vec(n, -5, 5))
    clip = jnp.float32(eps) if traced_eps else eps
    loss, aux = ppo_policy_loss(jnp.asarray(logp), jnp.asarray(old), jnp.asarray(adv), clip)
    ref_loss, ref_kl, ref_frac = _ppo_reference(logp, old, adv, np.float32(eps))
    assert loss.shape == () and aux["approx_kl"].shape == () and aux["clip_fraction"].shape == ()
    np.testing.assert_allclose(loss, ref_loss, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(aux["approx_kl"], ref_kl, rtol=1e-3, atol=1e-6)
    assert float(aux["approx_kl"]) >= -1e-7
    np.testing.assert_allclose(aux["clip_fraction"], ref_frac, atol=1e-6)


def test_ppo_policy_loss_on_policy():
    # ratio = 1: the loss is -mean(adv), nothing is clipped, the KL estimate is 0.
    logp = jnp.array([-1.0, -2.0, -0.5])
    adv = jnp.array([1.0, -2.0, 4.0])
    loss, aux = ppo_policy_loss(logp, logp, adv, 0.2)
    np.testing.assert_allclose(loss, -1.0)
    assert float(aux["approx_kl"]) == 0.0 and float(aux["clip_fraction"]) == 0.0


def test_ppo_policy_loss_gradient_is_clipped():
    # Positive advantage with the ratio already above 1 + eps: no gradient pushes it further.
    old = jnp.zeros(2)
    adv = jnp.array([1.0, 1.0])
    grad = jax.grad(lambda lp: ppo_policy_loss(lp, old, adv, 0.2)[0])(jnp.array([0.5, 0.0]))
    assert float(grad[0]) == 0.0  # ratio e^0.5 > 1.2: clipped
    assert float(grad[1]) < 0.0  # ratio 1: increasing log_prob lowers the loss


@settings(max_examples=25, deadline=None)
@given(data=st.data(), n=batch_sizes, eps=st.sampled_from([None, 0.1, 0.5]))
def test_value_loss_against_numpy(data, n, eps):
    v, old, tgt = (data.draw(_vec(n, -10, 10)) for _ in range(3))
    loss = value_loss(jnp.asarray(v), jnp.asarray(old), jnp.asarray(tgt), eps)
    v64, old64, tgt64 = (x.astype(np.float64) for x in (v, old, tgt))
    err = (v64 - tgt64) ** 2
    if eps is None:
        expected = 0.5 * err.mean()
    else:
        clipped = old64 + np.clip(v64 - old64, -eps, eps)
        expected = 0.5 * np.maximum(err, (clipped - tgt64) ** 2).mean()
        assert float(loss) >= 0.5 * err.mean() * (1 - 1e-5) - 1e-6  # the pessimistic maximum
    assert loss.shape == ()
    np.testing.assert_allclose(loss, expected, rtol=1e-4, atol=1e-4)


def test_value_loss_clipping_hand_example():
    v, old, tgt = jnp.array([3.0]), jnp.array([0.0]), jnp.array([3.0])
    # Unclipped: perfect prediction. Clipped to old + 0.5 = 0.5: error 2.5^2.
    np.testing.assert_allclose(value_loss(v, old, tgt), 0.0)
    np.testing.assert_allclose(value_loss(v, old, tgt, 0.5), 0.5 * 2.5**2)
    np.testing.assert_allclose(value_loss(v, old, tgt, jnp.float32(0.5)), 0.5 * 2.5**2)
