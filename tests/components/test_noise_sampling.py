"""Sampling from given noise (`Noise`, `AbstractDistribution.sample_from_noise`, an agent's
`noise_spec` and `act_from_noise`): the sampler of an exported ONNX policy, which takes its
randomness as inputs because ONNX cannot reproduce JAX's PRNG."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from export_cases import CASES
from typecheck import no_runtime_typecheck

import eqxrl
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


# ----------------------------------------------------------------- agents
EXACT = [name for name in CASES if name not in ("dqn", "dqn_rainbow", "pqn")]
"""The agents whose `act(key)` draws exactly `noise_spec(...).draw(key)` (a distribution's `sample`
or TD3's normal draw); DQN and PQN draw their random action with randint and split keys."""
N, OBS = 2000, 4  # samples per observation, observations
KS_ALPHA = 1e-6


def _numpy_noise(spec, rng):
    """`spec` (a `Noise` or a dict of them) drawn by NumPy with each noise's own line."""
    draw = lambda s: jnp.asarray(eval(s.numpy(), {"rng": rng, "np": np}))  # noqa: E731
    return {k: draw(s) for k, s in spec.items()} if isinstance(spec, dict) else draw(spec)


def _act(agent, state, obs, key=None, noise=None):
    """`act` from `key`, or `act_from_noise`; a recurrent policy at its episodes' first step."""
    if agent.initial_carry(state, ()) is None:
        return agent.act(state, obs, key) if noise is None else agent.act_from_noise(state, obs, noise)
    batch = np.shape(jax.tree.leaves(obs)[0])[:1]
    carry, reset = agent.initial_carry(state, batch), jnp.ones(batch, bool)
    if noise is None:
        return agent.act_with_carry(state, obs, carry, reset, key)[0]
    return agent.act_with_carry_from_noise(state, obs, carry, reset, noise)[0]


def _samples(name):
    """`(agent, from_key, from_numpy_noise)`: `N` actions at each of `OBS` observations (axis 1), from
    `act` with a key and from `act_from_noise` with noise NumPy drew."""
    agent = CASES[name]()
    state = agent.init(jax.random.key(0))
    traj = eqxrl.rollout(agent, state, jax.random.key(1), 2, num_envs=OBS, deterministic=False)
    obs = jax.tree.map(lambda x: jnp.repeat(jnp.asarray(x)[-1][None], N, axis=0).reshape(N * OBS, *x.shape[2:]), traj["obs"])
    noise = _numpy_noise(agent.noise_spec(state, (N * OBS,)), np.random.default_rng(0))
    act = jax.jit(lambda o, k, z: (_act(agent, state, o, key=k), _act(agent, state, o, noise=z)))
    from_key, from_noise = act(obs, jax.random.key(2), noise)
    split = lambda a: np.asarray(a).reshape(N, OBS, -1)  # noqa: E731
    return agent, state, obs, split(from_key), split(from_noise)


@pytest.mark.slow  # (over 2 s in the fast tier: tests/tiers.py)
@pytest.mark.parametrize("name", list(CASES))
def test_act_from_noise_has_acts_distribution(name):
    """With noise NumPy draws as `noise_spec` says, `act_from_noise` samples what `act` samples: at each of
    4 observations, 2,000 actions of each (independent samples of two distributions that must be one).

    Discrete actions: each action's frequency in the two agrees within 5 standard errors of a difference
    of two frequencies of 2,000 (`5 * sqrt(2 p (1 - p) / 2000)`, p the pooled frequency: a false alarm
    once in 1.7 million per comparison). Continuous actions (clipped, squashed: not Gaussian), per
    dimension: the two-sample Kolmogorov-Smirnov statistic is below its critical value at level 1e-6,
    `sqrt(-ln(1e-6 / 2) / 2) * sqrt(2 / 2000)` (0.085), and the means agree within 5 standard errors.
    Where `act` draws exactly the noise `noise_spec` describes, the two are also equal for one draw."""
    agent, state, obs, from_key, from_noise = _samples(name)
    if np.issubdtype(from_key.dtype, np.integer):
        for value in np.union1d(from_key, from_noise):
            f1, f2 = (np.mean(a == value, axis=0) for a in (from_key, from_noise))
            p = (f1 + f2) / 2
            assert np.all(np.abs(f1 - f2) <= 5 * np.sqrt(2 * p * (1 - p) / N) + 1e-12), (value, f1, f2)
    else:
        critical = np.sqrt(-np.log(KS_ALPHA / 2) / 2) * np.sqrt(2 / N)
        for b in range(OBS):
            for d in range(from_key.shape[-1]):
                x, y = np.sort(from_key[:, b, d]), np.sort(from_noise[:, b, d])
                grid = np.concatenate([x, y])
                ks = np.max(np.abs(np.searchsorted(x, grid, "right") - np.searchsorted(y, grid, "right"))) / N
                assert ks < critical, (b, d, ks, critical)
                se = np.sqrt((x.var() + y.var()) / N)
                assert abs(x.mean() - y.mean()) <= 5 * se + 1e-7, (b, d, x.mean(), y.mean(), se)
    if name in EXACT:
        spec = agent.noise_spec(state, (N * OBS,))
        key = jax.random.key(5)
        np.testing.assert_array_equal(np.asarray(_act(agent, state, obs, key=key)), np.asarray(_act(agent, state, obs, noise=spec.draw(key))))


def test_act_from_noise_bad_input():
    dqn = CASES["dqn"]()
    state = dqn.init(jax.random.key(0))
    obs = jnp.zeros((3, 4))
    cases = [
        (lambda: dqn.act_from_noise(state, obs, jnp.zeros((3, 2))),
         "DQN.act_from_noise(noise) must be a dict of noise arrays ['action', 'explore'] (epsilon-greedy), got ArrayImpl"),
        (lambda: dqn.act_from_noise(state, obs, {"action": jnp.zeros((3, 2)), "explore": jnp.zeros((2,))}),
         "DQN.act_from_noise(noise)['explore'] must have shape (3,) (float32, uniform on [0, 1)), got (2,)"),
        (lambda: dqn.act_from_noise(state, obs, {"action": jnp.zeros((3, 3)), "explore": jnp.zeros((3,))}),
         "DQN.act_from_noise(noise)['action'] must have shape (3, 2) (float32, standard Gumbel"),
    ]  # fmt: skip
    for call, message in cases:
        with no_runtime_typecheck(), pytest.raises(ValueError) as info:
            call()
        assert str(info.value).startswith(message) and "\n" not in str(info.value), str(info.value)
