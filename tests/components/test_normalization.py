"""Tests for `eqxrl.components.RunningMeanStd`."""

import equinox as eqx
import hypothesis.strategies as st
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings

from eqxrl.components import RunningMeanStd

sample_shapes = st.sampled_from([(), (3,), (2, 2)])
leading_shapes = st.sampled_from([(), (1,), (5,), (2, 4)])


@pytest.mark.slow
@settings(max_examples=25, deadline=None)
@given(
    shape=sample_shapes,
    leads=st.lists(leading_shapes, min_size=1, max_size=4),
    loc=st.floats(-100, 100),
    scale=st.floats(0.1, 10),
    seed=st.integers(0, 2**16),
)
def test_running_stats_match_numpy_over_all_batches(shape, leads, loc, scale, seed):
    rng = np.random.default_rng(seed)
    batches = [(loc + scale * rng.normal(size=(*lead, *shape))).astype(np.float32) for lead in leads]
    rms = RunningMeanStd(shape)
    for b in batches:
        rms = rms.update(jnp.asarray(b))
    everything = np.concatenate([b.reshape(-1, *shape) for b in batches]).astype(np.float64)
    assert rms.mean.shape == rms.var.shape == shape
    assert float(rms.count) == everything.shape[0]
    np.testing.assert_allclose(rms.mean, everything.mean(0), rtol=1e-5, atol=1e-5 * scale)
    # Population variance (ddof=0); zero for a single sample.
    np.testing.assert_allclose(rms.var, everything.var(0), rtol=1e-3, atol=1e-4 * scale**2)


def test_initial_statistics_are_neutral():
    rms = RunningMeanStd((2,))
    np.testing.assert_array_equal(rms.mean, 0.0)
    np.testing.assert_array_equal(rms.var, 1.0)
    assert float(rms.count) == 0.0
    x = jnp.array([[1.0, -2.0]])
    np.testing.assert_allclose(rms.normalize(x), x, rtol=1e-6)
    # The neutral var of the empty statistics gets no weight in the first update.
    np.testing.assert_allclose(rms.update(jnp.array([[3.0, 3.0], [5.0, 3.0]])).var, [1.0, 0.0])


def test_normalize_and_denormalize():
    rms = RunningMeanStd((2,)).update(jnp.array([[0.0, 10.0], [2.0, 30.0]]))  # mean (1, 20), var (1, 100)
    x = jnp.array([[3.0, 0.0], [1.0, 20.0]])
    np.testing.assert_allclose(rms.normalize(x), [[2.0, -2.0], [0.0, 0.0]], rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(rms.denormalize(rms.normalize(x)), x, rtol=1e-6, atol=1e-5)
    # Clipping bounds the normalised value.
    np.testing.assert_allclose(rms.normalize(jnp.array([100.0, -1e4]), clip=5.0), [5.0, -5.0])


def test_update_under_jit_and_scan():
    data = jax.random.normal(jax.random.key(0), (6, 8, 3)) * 2.0 + 1.0

    @eqx.filter_jit
    def run(rms, data):
        return jax.lax.scan(lambda r, b: (r.update(b), None), rms, data)[0]

    rms = run(RunningMeanStd((3,)), data)
    flat = np.asarray(data, np.float64).reshape(-1, 3)
    np.testing.assert_allclose(rms.mean, flat.mean(0), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(rms.var, flat.var(0), rtol=1e-4)
    assert float(rms.count) == 48


def test_update_rejects_wrong_shape():
    rms = RunningMeanStd((3,))
    with pytest.raises(ValueError, match=r"RunningMeanStd.update\(batch\) expects shape \(\*batch, 3\), got \(4, 2\)"):
        rms.update(jnp.zeros((4, 2)))
    with pytest.raises(ValueError, match=r"RunningMeanStd.update\(batch\) expects shape \(\*batch, 2, 2\), got \(2,\)"):
        RunningMeanStd((2, 2)).update(jnp.zeros((2,)))


@pytest.mark.parametrize("shape", [(0,), (3, -1)])
def test_constructor_rejects_bad_shape(shape):
    with pytest.raises(ValueError, match=r"RunningMeanStd\(shape\) must hold positive ints, got shape="):
        RunningMeanStd(shape)
