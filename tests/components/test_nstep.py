"""Tests for `eqxrl.components.nstep_return` and `NStepWindow`."""

import equinox as eqx
import hypothesis.strategies as st
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis.extra.numpy import arrays

from eqxrl.components import NStepTransition, NStepWindow, Transition, n_step_returns, nstep_return

SETTINGS = settings(max_examples=25, deadline=None)
# Few distinct shapes: every (n, B) is a new compilation.
window_lengths = st.sampled_from([1, 2, 3, 5])
num_envs = st.sampled_from([1, 3])
gammas = st.floats(0.0, 1.0, width=32)
seeds = st.integers(0, 2**16)


def reference(rewards, terminated, truncated, gamma, start: int, n: int, env: int):
    """The n-step transition starting at step `start` of `env`, by a plain loop.

    **Returns:** `(reward, discount, closing step)`.
    """
    total, scale = 0.0, 1.0
    for k in range(n):
        t = start + k
        total += scale * float(rewards[t, env])
        scale *= gamma
        if terminated[t, env] or truncated[t, env] or k == n - 1:
            return total, 0.0 if terminated[t, env] else scale, t
    raise AssertionError("unreachable")


def random_flags(seed: int, shape, p_term: float = 0.2, p_trunc: float = 0.15):
    rng = np.random.default_rng(seed)
    return rng.random(shape) < p_term, rng.random(shape) < p_trunc


nstep_jit = jax.jit(nstep_return)


# ----------------------------------------------------------------------------- nstep_return


@pytest.mark.slow
@SETTINGS
@given(n=window_lengths, B=num_envs, gamma=gammas, seed=seeds, data=st.data())
def test_nstep_return_matches_python_loop(n, B, gamma, seed, data):
    rewards = np.random.default_rng(seed).normal(size=(n, B)).astype(np.float32)
    terminated = data.draw(arrays(np.bool_, (n, B)), label="terminated")
    truncated = data.draw(arrays(np.bool_, (n, B)), label="truncated")
    reward, discount, last = nstep_jit(
        jnp.asarray(rewards), jnp.asarray(terminated), jnp.asarray(truncated), jnp.float32(gamma)
    )
    assert reward.shape == discount.shape == last.shape == (B,)
    assert last.dtype == jnp.int32 and reward.dtype == discount.dtype == jnp.float32
    for e in range(B):
        want_r, want_d, want_last = reference(rewards, terminated, truncated, gamma, 0, n, e)
        np.testing.assert_allclose(reward[e], want_r, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(discount[e], want_d, rtol=1e-5, atol=1e-7)
        assert int(last[e]) == want_last


def test_nstep_return_cases():
    gamma = 0.5
    rewards = jnp.array([[1.0, 1.0, 1.0, 1.0], [2.0, 2.0, 2.0, 2.0], [4.0, 4.0, 4.0, 4.0]])
    # env 0: no end; env 1: terminated at 1; env 2: truncated at 1; env 3: both at 0.
    terminated = jnp.array([[False, False, False, True], [False, True, False, False], [False, False, False, False]])
    truncated = jnp.array([[False, False, False, True], [False, False, True, False], [False, False, False, False]])
    reward, discount, last = nstep_return(rewards, terminated, truncated, gamma)
    np.testing.assert_allclose(reward, [1 + 1 + 1, 1 + 1, 1 + 1, 1])
    np.testing.assert_allclose(discount, [0.125, 0.0, 0.25, 0.0])
    np.testing.assert_array_equal(last, [2, 1, 1, 0])


@pytest.mark.slow
@SETTINGS
@given(n=st.sampled_from([1, 3]), gamma=gammas, seed=seeds)
def test_nstep_return_agrees_with_n_step_returns(n, gamma, seed):
    # reward + discount * V(next_obs of the closing step) is the n-step return G[0].
    rng = np.random.default_rng(seed)
    rewards = jnp.asarray(rng.normal(size=(n, 4)), jnp.float32)
    next_values = jnp.asarray(rng.normal(size=(n, 4)), jnp.float32)
    terminated, truncated = (jnp.asarray(f) for f in random_flags(seed, (n, 4), 0.3, 0.3))
    reward, discount, last = nstep_return(rewards, terminated, truncated, gamma)
    target = reward + discount * jnp.take_along_axis(next_values, last[None], axis=0)[0]
    expected = n_step_returns(rewards, next_values, terminated, truncated, jnp.float32(gamma), n)[0]
    np.testing.assert_allclose(target, expected, rtol=1e-5, atol=1e-5)


# ----------------------------------------------------------------------------- NStepWindow


def make_stream(seed: int, T: int, B: int):
    """T steps of B envs with recognisable values: obs[t, e] = (t, e), action = 10 t + e."""
    t = np.arange(T, dtype=np.float32)[:, None] * np.ones((1, B), np.float32)
    e = np.ones((T, 1), np.float32) * np.arange(B, dtype=np.float32)[None]
    obs = np.stack([t, e], axis=-1)
    next_obs = np.stack([t + 0.5, e], axis=-1)  # the true next observation of step t
    action = (10 * np.arange(T)[:, None] + np.arange(B)[None]).astype(np.int32)
    rewards = np.random.default_rng(seed).normal(size=(T, B)).astype(np.float32)
    terminated, truncated = random_flags(seed + 7, (T, B))
    return obs, action, rewards, terminated, truncated, next_obs


@eqx.filter_jit
def run_window(steps, n: int, gamma=None):
    """Pre-fill with the first n - 1 steps, then push the rest in a scan, emitting after each push:
    the stored `NStepTransition`s, or (with `gamma`) their `Transition`s under `gamma`."""
    prefill = jax.tree.map(lambda x: x[: n - 1], steps)
    rest = jax.tree.map(lambda x: x[n - 1 :], steps)
    window = NStepWindow.create(*prefill)

    def body(window, step):
        window = window.push(*step)
        out = window.emit()
        return window, out if gamma is None else out.transition(gamma)

    return jax.lax.scan(body, window, rest)


@pytest.mark.slow
@SETTINGS
@given(n=window_lengths, B=num_envs, gamma=gammas, seed=seeds)
def test_window_matches_python_loop(n, B, gamma, seed):
    T = 12
    stream = make_stream(seed, T, B)
    obs, action, rewards, terminated, truncated, next_obs = stream
    steps = tuple(jnp.asarray(x) for x in stream)
    window, out = run_window(steps, n, jnp.float32(gamma))
    assert window.n == n
    num_emitted = T - n + 1
    assert out.reward.shape == (num_emitted, B) and out.obs.shape == (num_emitted, B, 2)
    # The k-th emitted transition starts at step k: every step, the pre-fill included, starts one.
    for k in range(num_emitted):
        for e in range(B):
            want_r, want_d, closing = reference(rewards, terminated, truncated, gamma, k, n, e)
            np.testing.assert_array_equal(out.obs[k, e], obs[k, e])
            assert int(out.action[k, e]) == action[k, e]
            np.testing.assert_allclose(out.reward[k, e], want_r, rtol=1e-5, atol=1e-5)
            np.testing.assert_allclose(out.discount[k, e], want_d, rtol=1e-5, atol=1e-7)
            np.testing.assert_array_equal(out.next_obs[k, e], next_obs[closing, e])


def test_window_one_step_is_the_plain_transition():
    T, B, gamma = 8, 3, 0.9
    stream = make_stream(3, T, B)
    obs, action, rewards, terminated, truncated, next_obs = stream
    assert terminated.any() and truncated.any()
    window, out = run_window(tuple(jnp.asarray(x) for x in stream), 1, jnp.float32(gamma))
    np.testing.assert_array_equal(out.obs, obs)
    np.testing.assert_array_equal(out.action, action)
    np.testing.assert_array_equal(out.reward, rewards)
    np.testing.assert_allclose(out.discount, gamma * (1.0 - terminated), rtol=1e-7)
    np.testing.assert_array_equal(out.next_obs, next_obs)


def test_window_boundaries_by_hand():
    # One env, n = 3, gamma = 0.5. Steps: r = 1, 2, 4, 8, 16; step 1 truncated, step 3 terminated.
    gamma, n = 0.5, 3
    r = np.array([1.0, 2.0, 4.0, 8.0, 16.0], np.float32)[:, None]
    term = np.array([0, 0, 0, 1, 0], bool)[:, None]
    trunc = np.array([0, 1, 0, 0, 0], bool)[:, None]
    obs = np.arange(5, dtype=np.float32)[:, None, None]
    steps = (jnp.asarray(obs), jnp.zeros((5, 1), jnp.int32), jnp.asarray(r), jnp.asarray(term), jnp.asarray(trunc), jnp.asarray(obs + 0.5))
    _, out = run_window(steps, n, jnp.float32(gamma))
    # start 0: steps 0, 1 (truncated: bootstraps gamma^2 from next_obs of step 1)
    # start 1: step 1 only (truncated)
    # start 2: steps 2, 3 (terminated: no bootstrap)
    np.testing.assert_allclose(out.reward[:, 0], [1 + 0.5 * 2, 2, 4 + 0.5 * 8])
    np.testing.assert_allclose(out.discount[:, 0], [0.25, 0.5, 0.0])
    np.testing.assert_allclose(out.next_obs[:, 0, 0], [1.5, 1.5, 3.5])
    np.testing.assert_allclose(out.obs[:, 0, 0], [0.0, 1.0, 2.0])


@pytest.mark.parametrize("n", [1, 3])
def test_stored_transition_gives_nstep_return_for_any_gamma(n):
    # The window stores no gamma: the transition emitted once gives, for every gamma asked
    # afterwards, the reward and discount nstep_return computes from the window it came from.
    T, B = 9, 3
    stream = make_stream(11, T, B)
    obs, action, rewards, terminated, truncated, next_obs = stream
    assert terminated.any() and truncated.any()
    _, out = run_window(tuple(jnp.asarray(x) for x in stream), n)
    assert isinstance(out, NStepTransition) and out.n == n
    assert out.rewards.shape == (T - n + 1, B, n) and out.steps.dtype == jnp.int32 and out.terminated.dtype == jnp.bool_
    for gamma in (0.9, 0.3, 1.0):
        reward, discount = out.reward_and_discount(jnp.float32(gamma))
        transition = out.transition(jnp.float32(gamma))
        assert isinstance(transition, Transition)
        np.testing.assert_array_equal(transition.reward, reward)
        np.testing.assert_array_equal(transition.discount, discount)
        np.testing.assert_array_equal(transition.obs, out.obs)
        np.testing.assert_array_equal(transition.next_obs, out.next_obs)
        for k in range(T - n + 1):
            window = slice(k, k + n)
            want_r, want_d, last = nstep_return(
                jnp.asarray(rewards[window]), jnp.asarray(terminated[window]), jnp.asarray(truncated[window]), gamma
            )
            np.testing.assert_allclose(reward[k], want_r, rtol=1e-6, atol=1e-6)
            np.testing.assert_allclose(discount[k], want_d, rtol=1e-6, atol=1e-7)
            np.testing.assert_array_equal(out.steps[k], last + 1)
    # n = 1: the raw one-step transition.
    if n == 1:
        np.testing.assert_array_equal(out.rewards[..., 0], rewards)
        np.testing.assert_array_equal(out.terminated, terminated)
        np.testing.assert_array_equal(out.steps, 1)


def test_stored_transition_bad_input():
    good = dict(obs=jnp.zeros((4, 2)), action=jnp.zeros((4,), jnp.int32), rewards=jnp.zeros((4, 3)),
                steps=jnp.ones((4,), jnp.int32), terminated=jnp.zeros((4,), bool), next_obs=jnp.zeros((4, 2)))
    stored = NStepTransition(**good)
    reward, discount = stored.reward_and_discount(0.5)
    np.testing.assert_allclose(discount, 0.5)
    # (Replaced after construction: with jaxtyping's checks on, as here, the constructor already refuses these.)
    bad = [
        (dict(rewards=jnp.zeros(())), r"NStepTransition\(rewards\) needs a trailing window axis of n >= 1 steps, got shape \(\)"),
        (dict(steps=jnp.ones((4,), jnp.float32)), r"NStepTransition\(steps\) must be an integer array of shape \(4,\) .* got float32\[4\]"),
        (dict(terminated=jnp.zeros((3,), bool)), r"NStepTransition\(terminated\) must be a bool array of shape \(4,\) .* got bool\[3\]"),
    ]
    for change, match in bad:
        with pytest.raises(ValueError, match=match):
            (name, value), = change.items()
            eqx.tree_at(lambda t: getattr(t, name), stored, value).reward_and_discount(0.5)


@pytest.mark.slow
def test_window_under_vmap_over_seeds():
    T, B, n, seeds = 7, 2, 3, 3
    streams = [tuple(jnp.asarray(x) for x in make_stream(s, T, B)) for s in range(seeds)]
    stacked = jax.tree.map(lambda *xs: jnp.stack(xs), *streams)
    gammas = jnp.array([0.9, 0.5, 0.0], jnp.float32)
    _, batched = jax.vmap(lambda s, g: run_window(s, n, g))(stacked, gammas)
    for i in range(seeds):
        _, single = run_window(streams[i], n, gammas[i])
        for got, want in zip(jax.tree.leaves(batched), jax.tree.leaves(single), strict=True):
            np.testing.assert_allclose(got[i], want, rtol=1e-6)


@pytest.mark.slow
def test_window_output_feeds_a_buffer():
    from eqxrl.components import ReplayBuffer

    B, n = 2, 2
    stream = tuple(jnp.asarray(x) for x in make_stream(0, 5, B))
    _, out = run_window(stream, n)
    buffer = ReplayBuffer(16)
    state = buffer.init(jax.tree.map(lambda x: x[0, 0], out))
    for k in range(out.steps.shape[0]):
        state = buffer.add(state, jax.tree.map(lambda x: x[k], out))
    assert int(state.size) == B * (5 - n + 1)
    assert isinstance(state.data, NStepTransition) and state.data.rewards.shape == (16, n)
    # What is stored holds no gamma: the sample's TD quantities follow whatever gamma is asked for.
    sample = buffer.sample(state, jax.random.key(0), 4)
    for gamma in (0.9, 0.5):
        reward, discount = sample.data.reward_and_discount(jnp.float32(gamma))
        g = gamma ** np.arange(n, dtype=np.float32)
        np.testing.assert_allclose(reward, np.asarray(sample.data.rewards) @ g, rtol=1e-6)
        want = np.where(sample.data.terminated, 0.0, gamma ** np.asarray(sample.data.steps, np.float32))
        np.testing.assert_allclose(discount, want, rtol=1e-6)


# ----------------------------------------------------------------------------- bad input


def test_nstep_return_bad_input():
    with pytest.raises(ValueError, match=r"nstep_return\(rewards\) needs a leading window axis of n >= 1 steps, got shape \(0, 3\)"):
        nstep_return(jnp.zeros((0, 3)), jnp.zeros((0, 3), bool), jnp.zeros((0, 3), bool), 0.9)
    with pytest.raises(ValueError, match=r"nstep_return\(terminated\) must have the \(n, \*batch\) shape of rewards \(2, 3\), got \(2, 4\)"):
        nstep_return(jnp.zeros((2, 3)), jnp.zeros((2, 4), bool), jnp.zeros((2, 3), bool), 0.9)
    with pytest.raises(ValueError, match=r"nstep_return\(truncated\) must have the \(n, \*batch\) shape of rewards \(2, 3\), got \(3, 3\)"):
        nstep_return(jnp.zeros((2, 3)), jnp.zeros((2, 3), bool), jnp.zeros((3, 3), bool), 0.9)


def _prefill(m: int, B: int = 2):
    return (
        jnp.zeros((m, B, 4)),
        jnp.zeros((m, B), jnp.int32),
        jnp.zeros((m, B)),
        jnp.zeros((m, B), bool),
        jnp.zeros((m, B), bool),
        jnp.zeros((m, B, 4)),
    )


def test_window_create_bad_input():
    obs, action, reward, terminated, truncated, next_obs = _prefill(2)
    with pytest.raises(ValueError, match=r"NStepWindow.create\(obs\) must have leading axes \(n - 1, \*batch\) = \(2, 2\) .* got shape \(3, 2, 4\)"):
        NStepWindow.create(jnp.zeros((3, 2, 4)), action, reward, terminated, truncated, next_obs)
    with pytest.raises(ValueError, match=r"NStepWindow.create\(truncated\) must have leading axes .* got shape \(2, 3\)"):
        NStepWindow.create(obs, action, reward, terminated, jnp.zeros((2, 3), bool), next_obs)
    with pytest.raises(ValueError, match=r"NStepWindow.create\(next_obs\) must have the shape and dtype of obs"):
        NStepWindow.create(obs, action, reward, terminated, truncated, jnp.zeros((2, 2, 5)))
    window = NStepWindow.create(*_prefill(0))
    assert window.n == 1 and window.data.obs.shape == (1, 2, 4)


@pytest.mark.slow
def test_window_push_bad_input():
    window = NStepWindow.create(*_prefill(2))
    assert window.n == 3
    step = [x[0] for x in _prefill(1)]
    window.push(*step)  # the right shapes are accepted
    bad = list(step)
    bad[0] = jnp.zeros((2, 5))
    with pytest.raises(ValueError, match=r"NStepWindow.push\(obs\) must be float32\[2, 4\] like create\(obs\) without its leading axis, got float32\[2, 5\]"):
        window.push(*bad)
    bad = list(step)
    bad[1] = jnp.zeros((2,), jnp.float32)
    with pytest.raises(ValueError, match=r"NStepWindow.push\(action\) must be int32\[2\] .* got float32\[2\]"):
        window.push(*bad)
    bad = list(step)
    bad[3] = jnp.zeros((3,), bool)
    with pytest.raises(ValueError, match=r"NStepWindow.push\(terminated\) must be bool\[2\] .* got bool\[3\]"):
        window.push(*bad)
