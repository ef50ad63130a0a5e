"""Noisy linear layers (factorised Gaussian, Fortunato et al. 2018): the effective weights' statistics
against the formulas, the mean weights for deterministic use, noisy heads and noisy DQN."""

import math

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import eqxrl
from eqxrl.agents import DQN
from eqxrl.components import CategoricalQHead, DiscreteQHead, DuelingQHead, Linear, NoisyLinear, has_noise, sample_noise
from eqxrl.testing import check_agent
from typecheck import no_runtime_typecheck

TINY = dict(num_envs=2, rollout_length=2, batch_size=8, buffer_size=64, learning_starts=8, hidden_sizes=(8,))
N = 20_000


def test_initialisation_follows_the_paper():
    layer = NoisyLinear(16, 3, key=jax.random.key(0), sigma0=0.4)
    bound = 1 / math.sqrt(16)
    assert np.all(np.abs(layer.weight) <= bound) and np.all(np.abs(layer.bias) <= bound)
    np.testing.assert_allclose(layer.weight_sigma, 0.4 * bound)
    np.testing.assert_allclose(layer.bias_sigma, 0.4 * bound)


def test_effective_weights_have_the_factorised_gaussian_statistics():
    k1, k2 = jax.random.split(jax.random.key(1))
    layer = NoisyLinear.__new__(NoisyLinear)  # (sigmas of several sizes: every entry its own check)
    object.__setattr__(layer, "weight", jax.random.normal(k1, (4, 3)))
    object.__setattr__(layer, "bias", jax.random.normal(k2, (3,)))
    object.__setattr__(layer, "weight_sigma", jnp.linspace(0.1, 2.0, 12).reshape(4, 3))
    object.__setattr__(layer, "bias_sigma", jnp.array([0.3, 1.0, 2.5]))
    draws = jax.vmap(layer.sample)(jax.random.split(jax.random.key(2), N))
    w, b = np.asarray(draws.weight, np.float64), np.asarray(draws.bias, np.float64)
    # f(e) = sign(e) sqrt(|e|), e ~ N(0, 1): E f = 0, E f^2 = E|e| = sqrt(2/pi). So each weight's
    # noise sigma * f(e_in) f(e_out) has mean 0 and std sigma * sqrt(2/pi), each bias's sigma * (2/pi)**(1/4).
    w_std, b_std = np.asarray(layer.weight_sigma) * math.sqrt(2 / math.pi), np.asarray(layer.bias_sigma) * (2 / math.pi) ** 0.25
    # 5 standard errors of the mean; the std's relative standard error is about sqrt((kurtosis - 1) / 4N),
    # kurtosis pi^2/4 for a weight, pi/2 for a bias: 0.43% and 0.27% at N = 20,000, so 3% is 7 or more.
    assert np.all(np.abs(w.mean(0) - layer.weight) < 5 * w_std / math.sqrt(N))
    assert np.all(np.abs(b.mean(0) - layer.bias) < 5 * b_std / math.sqrt(N))
    np.testing.assert_allclose(w.std(0), w_std, rtol=0.03)
    np.testing.assert_allclose(b.std(0), b_std, rtol=0.03)
    # factorised: one draw's weight noise, divided by sigma, is the rank-1 outer(f(e_in), f(e_out))
    noise = (w[0] - np.asarray(layer.weight)) / np.asarray(layer.weight_sigma)
    assert np.linalg.matrix_rank(noise, tol=1e-4) == 1
    np.testing.assert_allclose(np.outer(noise[:, 0], noise[0]) / noise[0, 0], noise, rtol=1e-3, atol=1e-5)


def test_calling_the_layer_uses_the_mean_weights_and_gradients_reach_the_sigmas():
    layer = NoisyLinear(3, 2, key=jax.random.key(0))
    x = jnp.arange(3.0)
    np.testing.assert_allclose(layer(x), x @ layer.weight + layer.bias, rtol=1e-6)
    sampled = layer.sample(jax.random.key(1))
    assert type(sampled) is Linear and not np.allclose(sampled(x), layer(x))
    grads = jax.grad(lambda l: jnp.sum(sample_noise(l, jax.random.key(1))(x) ** 2))(layer)
    assert np.all(np.asarray(grads.weight_sigma)[1:] != 0) and np.all(np.asarray(grads.bias_sigma) != 0)


@pytest.mark.parametrize(
    "make",
    [
        lambda k, noisy: DiscreteQHead(3, 2, (8,), key=k, noisy=noisy),
        lambda k, noisy: DuelingQHead(3, 2, (8,), key=k, noisy=noisy),
        lambda k, noisy: CategoricalQHead(3, 2, (8,), key=k, num_atoms=5, noisy=noisy),
    ],
    ids=["plain", "dueling", "categorical"],
)
def test_noisy_heads_are_deterministic_called_and_noisy_sampled(make):
    head, plain = make(jax.random.key(0), True), make(jax.random.key(0), False)
    assert head.noisy and has_noise(head) and isinstance(head.out, NoisyLinear)
    assert not plain.noisy and not has_noise(plain) and sample_noise(plain, jax.random.key(1)) is plain
    np.testing.assert_array_equal(plain.torso(jnp.ones(3)), head.torso(jnp.ones(3)))  # (the same torso)
    obs = jnp.ones((4, 3))
    mean = head.torso(obs) @ head.out.weight + head.out.bias
    np.testing.assert_allclose(head.out(head.torso(obs)), mean, rtol=1e-6)
    one, two = (sample_noise(head, jax.random.key(k))(obs) for k in (1, 2))
    assert not has_noise(sample_noise(head, jax.random.key(1)))
    assert not np.allclose(one, two) and not np.allclose(one, head(obs))


def test_noisy_dqn_acts_on_fresh_noise_and_greedily_on_the_mean():
    agent = DQN("CartPole-v1", **TINY, noisy=True, eps_start=0.0, eps_end=0.0)
    state = agent.init(jax.random.key(0))
    assert state.learner.q.noisy and state.learner.target_q.noisy
    obs = jax.random.normal(jax.random.key(3), (256, 4)) * 2.0
    greedy = agent.act(state, obs, deterministic=True)
    np.testing.assert_array_equal(greedy, jnp.argmax(state.learner.q(obs), axis=-1))
    acts = [np.asarray(agent.act(state, obs, jax.random.key(k))) for k in range(4)]
    assert any(not np.array_equal(a, acts[0]) for a in acts[1:])  # no epsilon: the noise alone varies them


def test_noisy_dqn_acts_from_given_noise_one_draw_of_the_layer_per_observation():
    agent = DQN("CartPole-v1", **TINY, noisy=True, eps_start=0.0, eps_end=0.0)
    state = agent.init(jax.random.key(0))
    obs = jax.random.normal(jax.random.key(3), (64, 4)) * 2.0
    spec = agent.noise_spec(state, (64,))
    assert spec["noisy_in"] == eqxrl.components.Noise((64, 8), "normal")
    assert spec["noisy_out"] == eqxrl.components.Noise((64, 2), "normal")
    noise = {name: s.draw(k) for (name, s), k in zip(sorted(spec.items()), jax.random.split(jax.random.key(4), 4))}
    q, layer = state.learner.q, state.learner.q.out
    features = q.torso(obs)
    by_hand = [jnp.argmax(layer.sample_from_noise(noise["noisy_in"][i], noise["noisy_out"][i])(features[i])) for i in range(64)]
    np.testing.assert_array_equal(agent.act_from_noise(state, obs, noise), by_hand)
    zero = {**noise, "noisy_in": jnp.zeros((64, 8)), "noisy_out": jnp.zeros((64, 2))}  # f(0) = 0: the mean weights
    np.testing.assert_array_equal(agent.act_from_noise(state, obs, zero), agent.act(state, obs, deterministic=True))
    with no_runtime_typecheck(), pytest.raises(ValueError) as info:
        agent.act_from_noise(state, obs, {"action": noise["action"], "explore": noise["explore"]})
    assert str(info.value) == (
        "DQN.act_from_noise(noise) must be a dict of noise arrays ['action', 'explore', 'noisy_in', 'noisy_out'] "
        "(noisy epsilon-greedy), got ['action', 'explore']"
    )


def test_noisy_dqn_act_and_act_from_noise_sample_one_distribution():
    # act(key) draws the layer's noise per observation as noise_spec says: at each of 4 observations, 2,000
    # actions of each; each action's frequency agrees within 5 standard errors of a difference of two
    # frequencies (as tests/components/test_noise_sampling.py checks every agent's). sigma0 is raised so they vary.
    agent = DQN("CartPole-v1", **TINY, noisy=True, eps_start=0.0, eps_end=0.0)
    state = agent.init(jax.random.key(0))
    out = state.learner.q.out
    state = eqx.tree_at(lambda s: s.learner.q.out.weight_sigma, state, out.weight_sigma * 20)
    n, obs = 2000, jnp.repeat(jax.random.normal(jax.random.key(3), (1, 4, 4)), 2000, axis=0).reshape(-1, 4)
    rng = np.random.default_rng(0)
    spec = agent.noise_spec(state, (n * 4,))
    noise = {k: jnp.asarray(rng.standard_normal(s.shape) if s.kind == "normal" else rng.uniform(size=s.shape), jnp.float32)
             for k, s in spec.items() if k != "action"}  # fmt: skip
    noise["action"] = jnp.asarray(rng.gumbel(size=spec["action"].shape), jnp.float32)
    from_key = np.asarray(agent.act(state, obs, jax.random.key(2))).reshape(n, 4)
    from_noise = np.asarray(agent.act_from_noise(state, obs, noise)).reshape(n, 4)
    f1, f2 = (np.mean(a == 0, axis=0) for a in (from_key, from_noise))
    p = (f1 + f2) / 2
    assert np.any((p > 0.05) & (p < 0.95)), p  # (the noise moves the greedy action somewhere)
    assert np.all(np.abs(f1 - f2) <= 5 * np.sqrt(2 * p * (1 - p) / n) + 1e-12), (f1, f2)


@pytest.mark.slow  # (over 2 s in the fast tier: tests/tiers.py)
def test_rainbow_dqn_trains_and_passes_check_agent():
    agent = DQN(
        "CartPole-v1", **TINY, head="dueling_categorical", num_atoms=11, noisy=True, prioritized=True, n_step=3,
        eps_start=0.0, eps_end=0.0,
    )  # fmt: skip
    state, metrics = eqxrl.train(agent, jax.random.key(0), total_steps=64, progress=False)
    assert np.all(np.isfinite(np.asarray(metrics["q_loss"])[-4:]))
    assert not np.allclose(state.learner.q.out.weight_sigma, 0.5 / math.sqrt(8))  # the sigmas are trained
    check_agent(agent)


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda: NoisyLinear(3, 2, key=jax.random.key(0), sigma0=0.0), "NoisyLinear(sigma0) must be a number > 0, got 0.0"),
        (lambda: DiscreteQHead(3, 2, key=jax.random.key(0), noisy="yes"), "DiscreteQHead(noisy) must be True or False, got 'yes'"),
        (lambda: DQN("CartPole-v1", noisy=1), "DQN(noisy) must be True or False, got 1"),
    ],
)
def test_bad_noisy_arguments(make, message):
    with no_runtime_typecheck(), pytest.raises(ValueError) as info:
        make()
    assert str(info.value) == message


@pytest.mark.slow  # (over 2 s in the fast tier: tests/tiers.py)
@pytest.mark.learning
def test_rainbow_dqn_learns_cartpole_exploring_by_noise_alone():
    from learning import most_above, per_seed_returns, train_seeds

    agent = DQN(  # Rainbow: dueling C51, noisy nets (no epsilon), double Q, PER, 3-step returns
        "CartPole-v1", head="dueling_categorical", num_atoms=21, v_min=0.0, v_max=100.0, noisy=True, eps_start=0.0,
        eps_end=0.0, double=True, prioritized=True, n_step=3, learning_starts=1_000, batch_size=64,
        target_update_period=1, tau=0.01,
    )  # fmt: skip
    states, _ = train_seeds(agent, 25_000)
    returns = per_seed_returns(agent, states)
    # Bound: 2 of 3 seeds >= 100. Measured (2 CPU cores): 351, 483, 273 on these keys and 338, 491, 300 on
    # jax.random.key(1)'s, so the rule fails only if a second seed loses 63% of the lowest return seen; an
    # untrained greedy policy (the mean weights) scores about 9 on every seed.
    assert most_above(returns, 100), returns
