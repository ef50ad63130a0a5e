"""Tests for `eqxrl.components` distributions: Categorical, Normal, TanhNormal."""

import equinox as eqx
import hypothesis.extra.numpy as hnp
import hypothesis.strategies as st
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.special
import scipy.stats
from hypothesis import given, settings
from typecheck import no_runtime_typecheck

from eqxrl.components import AbstractDistribution, Categorical, MultiCategorical, Normal, TanhNormal, kl_divergence
from eqxrl.testing import strategies as kit

# The kit's strategy, on three shapes (each shape compiles anew): none, one and two batch axes.
batch_shapes = kit.batch_shapes(choices=[(), (3,), (2, 3)])
event_sizes = st.sampled_from([1, 3])
SETTINGS = settings(max_examples=20, deadline=None)


# Checks run in NumPy: a jnp comparison would compile once more per shape.
def _all_finite(x) -> bool:
    return bool(np.isfinite(np.asarray(x)).all())


def _within(x, low, high) -> bool:
    x = np.asarray(x)
    return bool(((x >= np.asarray(low)) & (x <= np.asarray(high))).all())


def _f32(lo: float, hi: float):
    # No subnormals: XLA on CPU flushes them to zero, NumPy does not (logits [0, 4e-45, 0, ...]
    # have argmax 0 under jnp and 1 under np: a failure of the comparison, not of eqxrl).
    return st.floats(lo, hi, width=32, allow_nan=False, allow_infinity=False, allow_subnormal=False)


@st.composite
def arrays(draw, shape, lo, hi):
    return jnp.asarray(draw(hnp.arrays(np.float32, shape, elements=_f32(lo, hi))))


def test_distributions_share_the_interface():
    for cls in (Categorical, Normal, TanhNormal):
        assert issubclass(cls, AbstractDistribution)
    with pytest.raises(TypeError):
        AbstractDistribution()


# ----------------------------------------------------------------------------- Categorical


@pytest.mark.slow
@SETTINGS
@given(data=st.data(), batch=batch_shapes, n=st.sampled_from([1, 5]), seed=st.integers(0, 2**16))
def test_categorical_against_numpy(data, batch, n, seed):
    logits = data.draw(arrays((*batch, n), -10.0, 10.0))
    dist = Categorical(logits)
    logp_np = scipy.special.log_softmax(np.asarray(logits, np.float64), axis=-1)

    np.testing.assert_allclose(dist.probs, np.exp(logp_np), atol=1e-6)
    # Entropy: -sum p log p, in [0, log n].
    entropy_np = -np.sum(np.exp(logp_np) * logp_np, axis=-1)
    ent = dist.entropy()
    assert ent.shape == batch
    np.testing.assert_allclose(ent, entropy_np, atol=1e-5)
    assert dist.entropy(jax.random.key(0)).shape == batch  # the key is accepted and unused

    action = dist.sample(jax.random.key(seed))
    assert action.shape == batch and action.dtype == jnp.int32
    assert _within(action, 0, n - 1)
    logp = dist.log_prob(action)
    assert logp.shape == batch
    expected = np.take_along_axis(logp_np, np.asarray(action)[..., None], axis=-1)[..., 0]
    np.testing.assert_allclose(logp, expected, atol=1e-5)
    assert _all_finite(logp)

    mode = dist.mode()
    assert mode.shape == batch and mode.dtype == jnp.int32
    np.testing.assert_array_equal(mode, np.argmax(np.asarray(logits), axis=-1))

    # sample_and_log_prob is consistent with log_prob.
    a2, lp2 = dist.sample_and_log_prob(jax.random.key(seed))
    np.testing.assert_array_equal(a2, action)
    np.testing.assert_allclose(lp2, logp, atol=1e-6)


def test_categorical_sample_frequencies(getkey):
    probs = np.array([0.1, 0.6, 0.3], np.float32)
    dist = Categorical(jnp.broadcast_to(jnp.log(probs), (20000, 3)))
    freq = np.bincount(np.asarray(dist.sample(getkey())), minlength=3) / 20000
    np.testing.assert_allclose(freq, probs, atol=0.015)


def test_categorical_is_invariant_to_logit_shift():
    logits = jnp.array([[1.0, 2.0, -3.0]])
    a, b = Categorical(logits), Categorical(logits + 100.0)
    np.testing.assert_allclose(a.entropy(), b.entropy(), atol=1e-5)
    np.testing.assert_allclose(a.log_prob(jnp.array([1])), b.log_prob(jnp.array([1])), atol=1e-5)


def test_categorical_log_prob_accepts_int_action_arrays():
    dist = Categorical(jnp.zeros((2, 4)))
    np.testing.assert_allclose(dist.log_prob(jnp.array([0, 3])), np.log(0.25), rtol=1e-6)


def test_categorical_log_prob_of_an_action_out_of_range_is_nan():
    dist = Categorical(jnp.zeros((4, 3)))
    logp = np.asarray(dist.log_prob(jnp.array([0, 2, 3, -1])))
    np.testing.assert_allclose(logp[:2], np.log(1 / 3), rtol=1e-6)
    assert np.all(np.isnan(logp[2:]))


def test_categorical_log_prob_gradient_is_one_hot_minus_probabilities(getkey):
    logits = jax.random.normal(getkey(), (5, 4))
    action = jnp.array([0, 3, 1, 1, 2])
    grad = jax.grad(lambda x: jnp.sum(Categorical(x).log_prob(action)))(logits)
    expected = np.eye(4)[np.asarray(action)] - np.asarray(jax.nn.softmax(logits, axis=-1))
    np.testing.assert_allclose(grad, expected, atol=1e-6)


# ----------------------------------------------------------------------------- masked Categorical
@st.composite
def masks(draw, shape):
    """A boolean mask of `shape` with at least one legal action per distribution."""
    mask = draw(hnp.arrays(np.bool_, shape))
    first = draw(st.integers(0, shape[-1] - 1))
    mask[..., first] |= ~mask.any(axis=-1)
    return mask


@pytest.mark.slow
@SETTINGS
@given(data=st.data(), batch=batch_shapes, n=st.sampled_from([1, 2, 5]), seed=st.integers(0, 2**16))
def test_masked_categorical_is_the_categorical_of_the_legal_actions(data, batch, n, seed):
    logits = data.draw(arrays(batch + (n,), -30.0, 30.0))
    mask = data.draw(masks(batch + (n,)))
    other = data.draw(arrays(batch + (n,), -30.0, 30.0))
    dist = Categorical(logits, jnp.asarray(mask))
    q = Categorical(other, jnp.asarray(mask))
    # Together, in NumPy: one compiled program per shape instead of one per operation.
    got = jax.jit(lambda d, q, k: (d.sample(k), d.mode(), d.probs, d.entropy(), kl_divergence(d, q),
                                   jax.vmap(d.log_prob, in_axes=-1, out_axes=-1)(jnp.broadcast_to(
                                       jnp.arange(n), batch + (n,)))))(dist, q, jax.random.key(seed))  # fmt: skip
    sample, mode, probs, entropy, kl, logps = map(np.asarray, got)
    p_ref = scipy.special.softmax(np.where(mask, np.asarray(logits, np.float64), -np.inf), axis=-1)
    q_ref = scipy.special.softmax(np.where(mask, np.asarray(other, np.float64), -np.inf), axis=-1)
    assert np.take_along_axis(mask, sample[..., None], -1).all() and np.take_along_axis(mask, mode[..., None], -1).all()
    assert np.all(probs[~mask] == 0) and np.allclose(probs, p_ref, atol=1e-5)
    assert np.all(logps[~mask] == -np.inf) and np.allclose(np.exp(logps), p_ref, atol=1e-5)
    with np.errstate(divide="ignore", invalid="ignore"):
        h_ref = -np.sum(np.where(mask, p_ref * np.log(p_ref), 0.0), axis=-1)
        kl_ref = np.sum(np.where(mask & (p_ref > 0), p_ref * (np.log(p_ref) - np.log(q_ref)), 0.0), axis=-1)
    assert _all_finite(entropy) and np.allclose(entropy, h_ref, atol=1e-4)
    assert _all_finite(kl) and np.allclose(kl, kl_ref, atol=1e-3, rtol=1e-3)


def test_masked_categorical_gradients_are_finite_and_zero_on_illegal_actions():
    logits = jnp.array([[1.0, 2.0, -1.0], [0.5, 0.0, 3.0]])
    mask = jnp.array([[True, False, True], [False, False, True]])
    loss = lambda l: jnp.sum(Categorical(l, mask).entropy() + Categorical(l, mask).log_prob(jnp.array([0, 2])))  # noqa: E731
    grad = np.asarray(jax.grad(loss)(logits))
    assert _all_finite(grad) and np.all(grad[~np.asarray(mask)] == 0)
    kl = jax.grad(lambda l: jnp.sum(kl_divergence(Categorical(l, mask), Categorical(logits[::-1], mask))))(logits)
    assert _all_finite(kl) and np.all(np.asarray(kl)[~np.asarray(mask)] == 0)


def test_a_uniform_draw_among_the_legal_actions(getkey):
    mask = jnp.array([False, True, False, True, True])
    draws = np.asarray(jax.vmap(lambda k: Categorical(jnp.zeros(5), mask).sample(k))(jax.random.split(getkey(), 6000)))
    counts = np.bincount(draws, minlength=5)
    assert counts[[0, 2]].sum() == 0 and np.all(np.abs(counts[[1, 3, 4]] / 6000 - 1 / 3) < 0.03), counts


def test_categorical_mask_of_another_size_is_refused():
    # (the suite's jaxtyping check would refuse it first; a user's run has this line)
    with no_runtime_typecheck(), pytest.raises(ValueError, match=r"Categorical\(mask\) must have the logits' last axis \(3 actions\), got shape \(2,\)"):
        Categorical(jnp.zeros(3), jnp.array([True, False]))


# ----------------------------------------------------------------------------- MultiCategorical
@pytest.mark.slow
@SETTINGS
@given(data=st.data(), batch=batch_shapes, nvec=st.sampled_from([(1,), (3, 2), (2, 4, 1)]), seed=st.integers(0, 2**16))
def test_multi_categorical_is_independent_masked_categoricals(data, batch, nvec, seed):
    """Each factor is the masked Categorical of its own slice of the logits and the mask: samples
    and modes legal in every entry, log-probs normalised over the legal joint actions, entropy and
    KL the factors' sums. A factor's all-illegal mask counts as all legal."""
    total = sum(nvec)
    logits, other = data.draw(arrays(batch + (total,), -30.0, 30.0)), data.draw(arrays(batch + (total,), -30.0, 30.0))
    parts = [data.draw(hnp.arrays(np.bool_, batch + (n,))) for n in nvec]
    mask = np.concatenate(parts, axis=-1)
    dist, q = MultiCategorical(logits, nvec, jnp.asarray(mask)), MultiCategorical(other, nvec, jnp.asarray(mask))
    value = np.stack([data.draw(hnp.arrays(np.int32, batch, elements=st.integers(0, n - 1))) for n in nvec], axis=-1)
    got = jax.jit(lambda d, q, k, v: (d.sample(k), d.mode(), d.entropy(), kl_divergence(d, q), d.log_prob(v)))(
        dist, q, jax.random.key(seed), jnp.asarray(value)
    )
    sample, mode, entropy, kl, logp = map(np.asarray, got)
    assert sample.shape == mode.shape == batch + (len(nvec),) and sample.dtype == np.int32
    start, h_ref, kl_ref, logp_ref = 0, 0.0, 0.0, 0.0
    for i, n in enumerate(nvec):
        legal = mask[..., start : start + n] | ~mask[..., start : start + n].any(axis=-1, keepdims=True)
        assert np.take_along_axis(legal, sample[..., i, None], -1).all() and np.take_along_axis(legal, mode[..., i, None], -1).all()
        lp = scipy.special.log_softmax(np.where(legal, np.asarray(logits[..., start : start + n], np.float64), -np.inf), axis=-1)
        lq = scipy.special.log_softmax(np.where(legal, np.asarray(other[..., start : start + n], np.float64), -np.inf), axis=-1)
        p = np.exp(lp)
        with np.errstate(invalid="ignore"):
            h_ref = h_ref - np.sum(np.where(legal & (p > 0), p * lp, 0.0), axis=-1)
            kl_ref = kl_ref + np.sum(np.where(legal & (p > 0), p * (lp - lq), 0.0), axis=-1)
        logp_ref = logp_ref + np.take_along_axis(lp, value[..., i, None], -1)[..., 0]
        start += n
    assert np.allclose(entropy, h_ref, atol=1e-4) and np.allclose(kl, kl_ref, atol=1e-3, rtol=1e-3)
    finite = np.isfinite(logp_ref)
    assert np.all(logp[~finite] == -np.inf) and np.allclose(logp[finite], logp_ref[finite], atol=1e-4)


def test_multi_categorical_log_probs_sum_to_one_over_the_legal_joint_actions():
    logits = jnp.array([0.3, -1.0, 2.0, 0.5, 0.1])
    mask = jnp.array([True, False, True, True, True])  # entry 0: actions 0 and 2; entry 1: both
    dist = MultiCategorical(logits, (3, 2), mask)
    joint = jnp.array([[a, b] for a in range(3) for b in range(2)])
    probs = np.exp(np.asarray(jax.vmap(dist.log_prob)(joint)))
    assert np.isclose(probs.sum(), 1.0, atol=1e-6) and np.all(probs[[2, 3]] == 0)


def test_multi_categorical_bad_arguments():
    with no_runtime_typecheck():
        with pytest.raises(ValueError, match=r"^MultiCategorical\(nvec\) must be a non-empty tuple of positive ints, got \(\)$"):
            MultiCategorical(jnp.zeros(3), ())
        with pytest.raises(ValueError, match=r"^MultiCategorical\(logits\) must have a last axis of sum\(nvec\) = 5, got shape \(4,\)$"):
            MultiCategorical(jnp.zeros(4), (3, 2))
        with pytest.raises(ValueError, match=r"^MultiCategorical\(mask\) must have a last axis of sum\(nvec\) = 5, got shape \(3,\)$"):
            MultiCategorical(jnp.zeros(5), (3, 2), jnp.ones(3, bool))
        with pytest.raises(ValueError, match=r"^MultiCategorical.log_prob\(value\) must have shape \(2,\) \(the batch shape and one entry per factor\), got \(\)$"):
            MultiCategorical(jnp.zeros(5), (3, 2)).log_prob(jnp.array(1))
        with pytest.raises(ValueError, match=r"^kl_divergence\(p, q\) needs two MultiCategorical of one nvec, got \(3, 2\) and \(2, 3\)$"):
            kl_divergence(MultiCategorical(jnp.zeros(5), (3, 2)), MultiCategorical(jnp.zeros(5), (2, 3)))


# ----------------------------------------------------------------------------- Normal


@pytest.mark.slow
@SETTINGS
@given(data=st.data(), batch=batch_shapes, d=event_sizes, seed=st.integers(0, 2**16))
def test_normal_against_scipy(data, batch, d, seed):
    shape = (*batch, d)
    loc = data.draw(arrays(shape, -5.0, 5.0))
    scale = data.draw(arrays(shape, 0.0625, 5.0))
    value = data.draw(arrays(shape, -10.0, 10.0))
    dist = Normal(loc, scale)
    ref = scipy.stats.norm(np.asarray(loc, np.float64), np.asarray(scale, np.float64))

    logp = dist.log_prob(value)
    assert logp.shape == batch
    np.testing.assert_allclose(logp, ref.logpdf(np.asarray(value)).sum(-1), rtol=1e-4, atol=1e-3)
    ent = dist.entropy()
    assert ent.shape == batch
    np.testing.assert_allclose(ent, ref.entropy().sum(-1), rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(dist.mode(), loc)

    sample, lp = dist.sample_and_log_prob(jax.random.key(seed))
    assert sample.shape == shape and sample.dtype == jnp.float32
    assert _all_finite(lp)
    np.testing.assert_allclose(lp, dist.log_prob(sample), rtol=1e-6)


def test_normal_sample_moments(getkey):
    loc, scale = jnp.array([1.0, -2.0]), jnp.array([0.5, 3.0])
    dist = Normal(jnp.broadcast_to(loc, (20000, 2)), jnp.broadcast_to(scale, (20000, 2)))
    s = dist.sample(getkey())
    np.testing.assert_allclose(s.mean(0), loc, atol=0.06)
    np.testing.assert_allclose(s.std(0), scale, rtol=0.03)


def test_normal_log_prob_hand_formula():
    # log N(x; mu, s) = -(x - mu)^2 / (2 s^2) - log s - log(2 pi) / 2, summed over the event.
    dist = Normal(jnp.array([0.0, 1.0]), jnp.array([1.0, 2.0]))
    x = jnp.array([1.0, 0.0])
    expected = (-0.5 - 0.5 * np.log(2 * np.pi)) + (-1 / 8 - np.log(2.0) - 0.5 * np.log(2 * np.pi))
    np.testing.assert_allclose(dist.log_prob(x), expected, rtol=1e-6)


# ----------------------------------------------------------------------------- TanhNormal


def _tanh_normal_log_prob_f64(loc, scale, low, high, value):
    """The change-of-variables formula in float64: log N(u) - sum log |dy/du|."""
    loc, scale, value = (np.asarray(x, np.float64) for x in (loc, scale, value))
    low, high = np.float64(low), np.float64(high)
    half = (high - low) / 2
    y = (value - low) / half - 1.0
    u = np.arctanh(y)
    base = scipy.stats.norm(loc, scale).logpdf(u)
    return np.sum(base - np.log(half * (1.0 - np.tanh(u) ** 2)), axis=-1)


bounds = st.sampled_from([(-1.0, 1.0), (0.0, 4.0), (-3.0, -2.5)])


@pytest.mark.slow
@SETTINGS
@given(data=st.data(), batch=batch_shapes, d=event_sizes, bnd=bounds, seed=st.integers(0, 2**16))
def test_tanh_normal_properties(data, batch, d, bnd, seed):
    low, high = bnd
    shape = (*batch, d)
    loc = data.draw(arrays(shape, -1.0, 1.0))
    scale = data.draw(arrays(shape, 0.0625, 0.5))
    dist = TanhNormal(loc, scale, low, high)
    key = jax.random.key(seed)

    sample, logp = dist.sample_and_log_prob(key)
    assert sample.shape == shape and logp.shape == batch
    assert _within(sample, low, high)
    assert _all_finite(logp)
    # The same key gives the same sample through both paths.
    np.testing.assert_array_equal(dist.sample(key), sample)
    # log_prob (through atanh of the squashed sample) agrees with the fused path
    # (which keeps the pre-tanh sample) and with the float64 formula.
    np.testing.assert_allclose(dist.log_prob(sample), logp, rtol=1e-3, atol=2e-2)
    np.testing.assert_allclose(
        logp, _tanh_normal_log_prob_f64(loc, scale, low, high, sample), rtol=1e-3, atol=2e-2
    )

    mode = dist.mode()
    assert mode.shape == shape
    np.testing.assert_allclose(mode, low + (np.tanh(np.asarray(loc)) + 1) * (high - low) / 2, rtol=1e-5, atol=1e-5)

    # entropy is the one-sample estimate -log_prob(sample) for that key.
    np.testing.assert_allclose(dist.entropy(key), -logp, rtol=1e-6)


@pytest.mark.slow
@settings(max_examples=15, deadline=None)
@given(batch=batch_shapes, d=event_sizes, bnd=bounds, loc=_f32(-20.0, 20.0), log_scale=_f32(-3.0, 2.0))
def test_tanh_normal_log_prob_finite_at_the_bounds(batch, d, bnd, loc, log_scale):
    low, high = bnd
    shape = (*batch, d)
    dist = TanhNormal(jnp.full(shape, loc), jnp.full(shape, np.exp(log_scale), jnp.float32), low, high)
    for edge in (low, high):
        lp = dist.log_prob(jnp.full(shape, edge, jnp.float32))
        assert lp.shape == batch
        assert _all_finite(lp), (edge, lp)
    # Saturated samples (|u| large: float32 tanh rounds to +-1) still give finite log-probs both ways.
    sample, logp = dist.sample_and_log_prob(jax.random.key(0))
    assert _within(sample, low, high)
    assert _all_finite(logp)
    assert _all_finite(dist.log_prob(sample))


@pytest.mark.parametrize("low, high, loc, scale", [(-1.0, 1.0, 0.3, 0.7), (2.0, 7.0, -0.5, 1.5)])
def test_tanh_normal_density_integrates_to_one(low, high, loc, scale):
    grid = np.linspace(low, high, 200_001, dtype=np.float64)[1:-1]
    dist = TanhNormal(jnp.full((grid.size, 1), loc), jnp.full((grid.size, 1), scale), low, high)
    density = np.exp(np.asarray(dist.log_prob(jnp.asarray(grid[:, None], jnp.float32)), np.float64))
    np.testing.assert_allclose(np.trapezoid(density, grid), 1.0, atol=2e-3)


def test_tanh_normal_per_dimension_bounds(getkey):
    low, high = jnp.array([-1.0, 10.0]), jnp.array([1.0, 20.0])
    dist = TanhNormal(jnp.zeros((1000, 2)), jnp.full((1000, 2), 2.0), low, high)
    s = dist.sample(getkey())
    assert _within(s, low, high)
    assert float(s[:, 1].min()) < 11.0 and float(s[:, 1].max()) > 19.0
    np.testing.assert_allclose(dist.mode()[0], [0.0, 15.0])
    assert _all_finite(dist.log_prob(jnp.broadcast_to(high, (1000, 2))))


def test_tanh_normal_entropy_needs_a_key():
    dist = TanhNormal(jnp.zeros(2), jnp.ones(2))
    with pytest.raises(ValueError, match=r"TanhNormal.entropy\(key\) needs a PRNG key"):
        dist.entropy()


def test_tanh_normal_default_bounds():
    dist = TanhNormal(jnp.zeros(3), jnp.ones(3))
    np.testing.assert_array_equal(dist.low, -1.0)
    np.testing.assert_array_equal(dist.high, 1.0)
    np.testing.assert_allclose(dist.mode(), 0.0, atol=1e-7)


def test_distributions_are_pytrees_under_jit_and_vmap():
    loc = jnp.zeros((4, 2))
    dist = Normal(loc, jnp.ones((4, 2)))

    @eqx.filter_jit
    def f(dist, key):
        return dist.sample_and_log_prob(key)

    s, lp = f(dist, jax.random.key(0))
    assert s.shape == (4, 2) and lp.shape == (4,)
    per_row = jax.vmap(lambda d: d.entropy())(dist)
    np.testing.assert_allclose(per_row, dist.entropy())


@pytest.mark.slow
def test_log_prob_gradients_are_finite():
    def loss(loc):
        dist = TanhNormal(loc, jnp.full((3, 2), 0.5), 0.0, 2.0)
        return dist.log_prob(jnp.array([[0.0, 2.0], [1.0, 1.0], [1.9999, 0.0001]])).sum()

    g = jax.grad(loss)(jnp.zeros((3, 2)))
    assert _all_finite(g)
