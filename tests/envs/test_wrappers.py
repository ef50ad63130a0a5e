"""Tests for `eqxrl.envs` wrappers, on a tiny hand-written environment with known values."""

import equinox as eqx
import hypothesis.strategies as st
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from jaxtyping import Array, Float, Int

from eqxrl.envs import (
    AbstractEnv,
    AbstractWrapper,
    AutoReset,
    Box,
    ClipAction,
    Discrete,
    EpisodeStatistics,
    NormalizeObservation,
    RescaleAction,
    TimeLimit,
    TimeStep,
    VectorEnv,
    first_timestep,
    make,
)


class ProbeState(eqx.Module):
    t: Int[Array, ""]
    start: Float[Array, ""]


class ProbeEnv(AbstractEnv):
    """obs = [t, start, last action]: `t` counts the steps of the episode, `start` is drawn
    at reset (it identifies the episode). reward = the action; the episode terminates
    after `horizon` steps, or earlier with probability `p_term` per step."""

    horizon: int = eqx.field(static=True, default=5)
    p_term: float = eqx.field(static=True, default=0.0)
    low: float = eqx.field(static=True, default=-2.0)
    high: float = eqx.field(static=True, default=3.0)

    def reset(self, key):
        start = jax.random.uniform(key, (), jnp.float32, 1.0, 2.0)
        obs = jnp.zeros(3, jnp.float32).at[1].set(start)
        return ProbeState(jnp.zeros((), jnp.int32), start), first_timestep(obs)

    def step(self, key, state, action):
        t = state.t + 1
        obs = jnp.stack([t.astype(jnp.float32), state.start, action[0]])
        terminated = (t >= self.horizon) | (jax.random.uniform(key) < self.p_term)
        ts = TimeStep(obs, action[0].astype(jnp.float32), terminated, jnp.zeros((), bool), {})
        return ProbeState(t, state.start), ts

    @property
    def observation_space(self):
        return Box(-jnp.inf, jnp.inf, (3,))

    @property
    def action_space(self):
        return Box(self.low, self.high, (1,))


@eqx.filter_jit
def _steps(env, key, actions):
    """Reset, then one step per action (scanned, jitted once per env structure).
    Returns (first timestep, stacked timesteps, final state)."""
    reset_key, key = jax.random.split(key)
    state, first = env.reset(reset_key)

    def body(state, x):
        key, action = x
        state, ts = env.step(key, state, action)
        return state, ts

    state, steps = jax.lax.scan(body, state, (jax.random.split(key, actions.shape[0]), actions))
    return first, steps, state


def _const_actions(n, value=1.0):
    return jnp.full((n, 1), value, jnp.float32)


# ----------------------------------------------------------------------------- TimeLimit


def test_time_limit_truncates_without_terminating(getkey):
    env = TimeLimit(ProbeEnv(horizon=100), 3)
    assert env.max_episode_steps == 3
    _, steps, state = _steps(env, getkey(), _const_actions(4))
    np.testing.assert_array_equal(steps.truncated, [False, False, True, True])
    assert not bool(steps.terminated.any())
    assert int(state.steps) == 4


def test_time_limit_keeps_natural_termination(getkey):
    _, steps, _ = _steps(TimeLimit(ProbeEnv(horizon=2), 5), getkey(), _const_actions(2))
    np.testing.assert_array_equal(steps.terminated, [False, True])
    np.testing.assert_array_equal(steps.truncated, [False, False])
    # When both happen on the same step, both are reported.
    _, steps, _ = _steps(TimeLimit(ProbeEnv(horizon=2), 2), getkey(), _const_actions(2))
    np.testing.assert_array_equal(steps.terminated, [False, True])
    np.testing.assert_array_equal(steps.truncated, [False, True])


def test_time_limit_max_episode_steps_is_the_tighter_limit():
    assert TimeLimit(TimeLimit(ProbeEnv(), 5), 3).max_episode_steps == 3
    assert TimeLimit(TimeLimit(ProbeEnv(), 2), 3).max_episode_steps == 2
    assert TimeLimit(make("CartPole-v1"), 1000).max_episode_steps == 500


def test_time_limit_counter_restarts_with_auto_reset(getkey):
    env = AutoReset(TimeLimit(ProbeEnv(horizon=100), 3))
    _, steps, _ = _steps(env, getkey(), _const_actions(9))
    np.testing.assert_array_equal(steps.truncated, [False, False, True] * 3)
    np.testing.assert_array_equal(steps.info["final_obs"][:, 0], [1, 2, 3] * 3)


@pytest.mark.parametrize("limit", [0, -1])
def test_time_limit_rejects_non_positive_limit(limit):
    with pytest.raises(ValueError, match=rf"TimeLimit\(max_episode_steps\) must be a positive int, got {limit}"):
        TimeLimit(ProbeEnv(), limit)


# ----------------------------------------------------------------------------- AutoReset


def test_auto_reset_returns_the_new_episodes_first_obs(getkey):
    env = AutoReset(ProbeEnv(horizon=2))
    first, steps, state = _steps(env, getkey(), _const_actions(5, 0.5))
    np.testing.assert_array_equal(first.info["final_obs"], first.obs)
    np.testing.assert_array_equal(steps.terminated, [False, True, False, True, False])
    obs, final = np.asarray(steps.obs), np.asarray(steps.info["final_obs"])
    # Step counter in obs: the episode restarts (t = 0) right after each termination.
    np.testing.assert_array_equal(obs[:, 0], [1, 0, 1, 0, 1])
    # final_obs is always the true next observation of the transition.
    np.testing.assert_array_equal(final[:, 0], [1, 2, 1, 2, 1])
    np.testing.assert_array_equal(final[:, 2], 0.5)
    # A new episode has a new start; the finished one's last obs keeps the old one.
    assert final[1, 1] == obs[0, 1] and obs[1, 1] != obs[0, 1]
    assert obs[2, 1] == obs[1, 1]
    # Not-done steps: obs == final_obs.
    np.testing.assert_array_equal(obs[[0, 2, 4]], final[[0, 2, 4]])
    assert int(state.t) == 1


def test_auto_reset_on_truncation(getkey):
    env = AutoReset(TimeLimit(ProbeEnv(horizon=100), 2))
    _, steps, _ = _steps(env, getkey(), _const_actions(2))
    assert bool(steps.truncated[1]) and not bool(steps.terminated[1])
    assert float(steps.obs[1, 0]) == 0.0 and float(steps.info["final_obs"][1, 0]) == 2.0


# ----------------------------------------------------------------------------- EpisodeStatistics


@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 2**16), limit=st.sampled_from([3, 50]))
def test_episode_statistics_against_python_accumulation(seed, limit):
    # Episodes end by random termination and by truncation.
    env = EpisodeStatistics(AutoReset(TimeLimit(ProbeEnv(horizon=100, p_term=0.25), limit)))
    key = jax.random.key(seed)
    actions = jax.random.uniform(jax.random.fold_in(key, 1), (40, 1), jnp.float32, -1.0, 1.0)
    first, steps, _ = _steps(env, key, actions)
    assert float(first.info["episode_return"]) == 0.0 and int(first.info["episode_length"]) == 0

    rewards, done = np.asarray(steps.reward), np.asarray(steps.done)
    returns, lengths = np.asarray(steps.info["episode_return"]), np.asarray(steps.info["episode_length"])
    assert lengths.dtype == np.int32 and returns.dtype == np.float32
    ret, length = 0.0, 0
    for t in range(40):
        ret += float(rewards[t])
        length += 1
        np.testing.assert_allclose(returns[t], ret, rtol=1e-5, atol=1e-5)
        assert lengths[t] == length
        if done[t]:
            ret, length = 0.0, 0
    if limit == 3:
        assert lengths.max() <= 3 and done.sum() >= 13


def test_episode_statistics_over_vector_env(getkey):
    env = VectorEnv(EpisodeStatistics(AutoReset(ProbeEnv(horizon=3))), 2)
    actions = jnp.broadcast_to(jnp.array([1.0, 2.0])[None, :, None], (6, 2, 1))
    _, steps, _ = _steps(env, getkey(), actions)
    np.testing.assert_array_equal(steps.info["episode_length"], np.tile([[1], [2], [3]], (2, 2)))
    np.testing.assert_allclose(steps.info["episode_return"][2], [3.0, 6.0])
    np.testing.assert_allclose(steps.info["episode_return"][3], [1.0, 2.0])


# ----------------------------------------------------------------------------- VectorEnv


def test_vector_env_shapes_and_independence(getkey):
    env = VectorEnv(ProbeEnv(horizon=4), 3)
    assert env.num_envs == 3
    assert env.observation_space.shape == (3,) and env.action_space.shape == (1,)  # one copy's spaces
    actions = jnp.broadcast_to(jnp.array([-1.0, 0.0, 2.0])[None, :, None], (2, 3, 1))
    first, steps, _ = _steps(env, getkey(), actions)
    assert first.obs.shape == (3, 3) and first.reward.shape == (3,) and first.terminated.shape == (3,)
    assert steps.obs.shape == (2, 3, 3) and steps.reward.shape == (2, 3)
    assert steps.terminated.dtype == jnp.bool_ and steps.truncated.shape == (2, 3)
    np.testing.assert_array_equal(steps.reward[0], [-1.0, 0.0, 2.0])
    # Each copy gets its own reset key: different starts.
    assert len(set(np.asarray(first.obs[:, 1]).tolist())) == 3


@pytest.mark.parametrize("n", [0, -2])
def test_vector_env_rejects_non_positive_num_envs(n):
    with pytest.raises(ValueError, match=rf"VectorEnv\(num_envs\) must be a positive int, got {n}"):
        VectorEnv(ProbeEnv(), n)


# ----------------------------------------------------------------------------- NormalizeObservation


@pytest.mark.slow
@pytest.mark.parametrize("num_envs", [None, 3])
def test_normalize_observation_matches_numpy(num_envs, getkey):
    base = AutoReset(ProbeEnv(horizon=3))
    raw_env = base if num_envs is None else VectorEnv(base, num_envs)
    env = NormalizeObservation(raw_env)
    key = getkey()
    n = 7
    batch = () if num_envs is None else (num_envs,)
    actions = jax.random.uniform(getkey(), (n, *batch, 1), jnp.float32, -2.0, 2.0)
    first, steps, state = _steps(env, key, actions)
    raw_first, raw_steps, _ = _steps(raw_env, key, actions)  # same keys: the same raw observations

    seen = np.concatenate([np.asarray(raw_first.obs).reshape(-1, 3), np.asarray(raw_steps.obs).reshape(-1, 3)])
    seen = seen.astype(np.float64)
    np.testing.assert_allclose(state.stats.mean, seen.mean(0), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(state.stats.var, seen.var(0), rtol=1e-4, atol=1e-5)
    assert float(state.stats.count) == seen.shape[0]
    # The last step is normalised with the statistics that include it.
    expected = np.clip((np.asarray(raw_steps.obs[-1]) - seen.mean(0)) / np.sqrt(seen.var(0) + 1e-8), -10, 10)
    np.testing.assert_allclose(steps.obs[-1], expected, rtol=1e-4, atol=1e-4)
    # final_obs is normalised with the same statistics.
    expected_final = np.clip(
        (np.asarray(raw_steps.info["final_obs"][-1]) - seen.mean(0)) / np.sqrt(seen.var(0) + 1e-8), -10, 10
    )
    np.testing.assert_allclose(steps.info["final_obs"][-1], expected_final, rtol=1e-4, atol=1e-4)
    # Rewards and flags pass through.
    np.testing.assert_array_equal(steps.reward, raw_steps.reward)
    np.testing.assert_array_equal(steps.terminated, raw_steps.terminated)


def test_normalize_observation_clips(getkey):
    env = NormalizeObservation(ProbeEnv(horizon=100), clip=0.5)
    _, steps, _ = _steps(env, getkey(), _const_actions(6, 3.0))
    assert float(jnp.abs(steps.obs).max()) <= 0.5
    assert float(jnp.abs(steps.obs).max()) == 0.5


# ----------------------------------------------------------------------------- action wrappers


def test_clip_action(getkey):
    env = ClipAction(ProbeEnv(horizon=100, low=-2.0, high=3.0))
    actions = jnp.array([[-10.0], [0.5], [10.0], [3.0]])
    _, steps, _ = _steps(env, getkey(), actions)
    np.testing.assert_allclose(steps.obs[:, 2], [-2.0, 0.5, 3.0, 3.0])
    np.testing.assert_allclose(steps.reward, [-2.0, 0.5, 3.0, 3.0])
    assert env.action_space.shape == (1,)
    np.testing.assert_array_equal(env.action_space.high, 3.0)


@pytest.mark.parametrize(
    "wrapper_low, wrapper_high, actions, expected",
    [
        (-1.0, 1.0, [-1.0, 0.0, 1.0, 0.5, -5.0, 5.0], [-2.0, 0.5, 3.0, 1.75, -2.0, 3.0]),
        (0.0, 10.0, [0.0, 10.0, 2.0], [-2.0, 3.0, -1.0]),
    ],
)
def test_rescale_action_is_affine(wrapper_low, wrapper_high, actions, expected, getkey):
    env = RescaleAction(ProbeEnv(horizon=100, low=-2.0, high=3.0), wrapper_low, wrapper_high)
    space = env.action_space
    assert isinstance(space, Box) and space.shape == (1,)
    np.testing.assert_array_equal(space.low, wrapper_low)
    np.testing.assert_array_equal(space.high, wrapper_high)
    _, steps, _ = _steps(env, getkey(), jnp.asarray(actions, jnp.float32)[:, None])
    np.testing.assert_allclose(steps.obs[:, 2], expected, rtol=1e-6, atol=1e-6)


def test_rescale_action_on_gymnax_envs(getkey):
    env = RescaleAction(make("MountainCarContinuous-v0"))  # action in [-1, 1] already: identity
    np.testing.assert_array_equal(env.action_space.low, -1.0)
    pendulum = RescaleAction(make("Pendulum-v1"))  # torque in [-2, 2]
    assert pendulum.unwrapped.action_space.high[0] == 2.0
    key = getkey()
    a, b = _steps(pendulum, key, jnp.array([[0.5]])), _steps(pendulum.env, key, jnp.array([[1.0]]))
    np.testing.assert_allclose(a[1].obs, b[1].obs, rtol=1e-6)


@pytest.mark.parametrize("wrapper", [ClipAction, RescaleAction])
def test_action_wrappers_reject_discrete_envs(wrapper):
    match = rf"{wrapper.__name__}\(env\) needs an env with a Box action space, got Discrete"
    with pytest.raises(ValueError, match=match):
        wrapper(make("CartPole-v1"))


def test_rescale_action_rejects_unbounded_and_empty_ranges():
    class Unbounded(ProbeEnv):
        @property
        def action_space(self):
            return Box(-jnp.inf, jnp.inf, (1,))

    with pytest.raises(ValueError, match=r"RescaleAction\(env\) needs finite action bounds"):
        RescaleAction(Unbounded())
    with pytest.raises(ValueError, match=r"RescaleAction\(low, high\) needs low < high, got low=1.0, high=1.0"):
        RescaleAction(ProbeEnv(), 1.0, 1.0)


# ----------------------------------------------------------------------------- forwarding


def test_wrappers_forward_what_they_do_not_change():
    inner = ProbeEnv(horizon=7)
    env = EpisodeStatistics(AutoReset(TimeLimit(ClipAction(inner), 4)))
    assert isinstance(env, AbstractWrapper)
    assert env.unwrapped is inner
    assert env.name == "ProbeEnv"
    assert env.max_episode_steps == 4
    assert env.observation_space.shape == (3,)
    assert isinstance(make("CartPole-v1").action_space, Discrete)
    assert AutoReset(make("CartPole-v1")).name == "CartPole-v1"


def test_full_stack_under_filter_jit_does_not_recompile(getkey):
    @eqx.filter_jit
    @eqx.debug.assert_max_traces(max_traces=1)
    def step(env, state, key, action):
        return env.step(key, state, action)

    def stack():
        return VectorEnv(EpisodeStatistics(AutoReset(TimeLimit(ProbeEnv(), 3))), 2)

    env = stack()
    state, _ = env.reset(getkey())
    for _ in range(4):
        state, ts = step(stack(), state, getkey(), jnp.ones((2, 1)))
    assert ts.obs.shape == (2, 3)
