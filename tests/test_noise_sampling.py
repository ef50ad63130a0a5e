"""Sampling from given noise (`Noise`, `AbstractDistribution.sample_from_noise`, an agent's
`noise_spec` and `act_from_noise`): the sampler of an exported ONNX policy, which takes its
randomness as inputs because ONNX cannot reproduce JAX's PRNG."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from typecheck import no_runtime_typecheck

from eqxrl.components import AbstractDistribution, Categorical, MultiCategorical, Noise, Normal, TanhNormal

KEY = jax.random.key(3)
LOGITS = jax.random.normal(jax.random.key(1), (64, 5))
MASK = jax.random.bernoulli(jax.random.key(2), 0.6, (64, 5)).at[:, 0].set(True)
DISTRIBUTIONS = {
    "categorical": Categorical(LOGITS),
    "categorical_masked": Categorical(LOGITS, MASK),
    "multi_categorical": MultiCategorical(LOGITS[:, :4], (3, 1)),
    "normal": Normal(LOGITS, jnp.exp(LOGITS)),
    "tanh_normal": TanhNormal(LOGITS, jnp.exp(LOGITS), jnp.asarray(-2.0), jnp.asarray(3.0)),
}


@pytest.mark.parametrize("name", list(DISTRIBUTIONS))
def test_sample_is_sample_from_noise_of_the_keys_draw(name):
    """`sample(key)` is `sample_from_noise(noise_spec().draw(key))`, exactly: the noise-driven
    sampler is the key-driven one with its draw made explicit (Gumbel-max for the categoricals,
    as `jax.random.categorical` computes it; `loc + scale * eps` for the Gaussians)."""
    dist = DISTRIBUTIONS[name]
    spec = dist.noise_spec()
    assert spec.kind == ("gumbel" if "categorical" in name else "normal")
    assert spec.shape == ((64, 2, 3) if name == "multi_categorical" else (64, 5))
    np.testing.assert_array_equal(np.asarray(dist.sample(KEY)), np.asarray(dist.sample_from_noise(spec.draw(KEY))))


def test_masked_categorical_from_noise_never_picks_an_illegal_action():
    dist = Categorical(jnp.zeros((64, 5)).at[:, 1].set(1e6), MASK.at[:, 1].set(False))
    noise = np.random.default_rng(0).gumbel(size=(64, 5)).astype(np.float32) * 30  # (far larger than Gumbel's)
    action = np.asarray(dist.sample_from_noise(jnp.asarray(noise)))
    assert np.all(np.asarray(dist.mask)[np.arange(64), action])


@pytest.mark.parametrize("kind", ["normal", "gumbel", "uniform"])
def test_numpy_line_draws_the_noise(kind):
    """`Noise.numpy()` is a line NumPy runs (`rng` a Generator), float32 of the noise's shape, with
    the noise's distribution (moments within 6 standard errors of 20,000 draws)."""
    spec = Noise((100, 200), kind)
    x = eval(spec.numpy(), {"rng": np.random.default_rng(0), "np": np})
    assert x.dtype == np.float32 and x.shape == (100, 200)
    assert spec.numpy("(batch, 200)").count("(batch, 200)") == 1
    mean, var = {"normal": (0.0, 1.0), "gumbel": (np.euler_gamma, np.pi**2 / 6), "uniform": (0.5, 1 / 12)}[kind]
    assert abs(x.mean() - mean) < 6 * np.sqrt(var / x.size)
    y = np.asarray(spec.draw(KEY))  # (JAX's draw: the same distribution)
    assert y.dtype == np.float32 and y.shape == (100, 200) and abs(y.mean() - mean) < 6 * np.sqrt(var / y.size)


def test_bad_noise():
    class KeyOnly(AbstractDistribution):
        def sample(self, key):
            return jax.random.normal(key)

        def log_prob(self, value):
            return value

        def entropy(self, key=None):
            return 0.0

        def mode(self):
            return 0.0

    cases = [
        (lambda: Noise((2,), "cauchy"), "Noise(kind) must be one of ['normal', 'gumbel', 'uniform'], got 'cauchy'"),
        (lambda: Categorical(LOGITS).sample_from_noise(jnp.zeros((64, 4))),
         "Categorical.sample_from_noise(noise) must have shape (64, 5) (float32, standard Gumbel"),
        (lambda: Normal(LOGITS, LOGITS).sample_from_noise(jnp.zeros((5,))),
         "Normal.sample_from_noise(noise) must have shape (64, 5) (float32, standard normal N(0, 1)), got (5,)"),
        (lambda: TanhNormal(LOGITS, LOGITS).sample_from_noise(jnp.zeros((1, 64, 5))), "TanhNormal.sample_from_noise(noise) must have shape (64, 5)"),
        (lambda: KeyOnly().noise_spec(), "KeyOnly.noise_spec: this distribution samples from a PRNG key only"),
        (lambda: KeyOnly().sample_from_noise(jnp.zeros(1)), "KeyOnly.sample_from_noise: this distribution samples from a PRNG key only"),
    ]  # fmt: skip
    for call, message in cases:
        with no_runtime_typecheck(), pytest.raises(ValueError) as info:
            call()
        assert str(info.value).startswith(message) and "\n" not in str(info.value), str(info.value)
