"""The Navix adapter (`make("navix/<id>")`) against Navix's own API."""

import functools
import importlib.util

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import eqxrl
from eqxrl.envs import Box, Discrete, NavixEnv, check_env, make
from eqxrl.testing import check_env_steps
import suite_equivalence
from test_docs import run_page

needs_navix = pytest.mark.skipif(importlib.util.find_spec("navix") is None, reason="navix is not installed")


@needs_navix
@pytest.mark.parametrize("name", ["Navix-Empty-5x5-v0", "Navix-DoorKey-5x5-v0"])
def test_make_gives_the_spaces_and_checks(name):
    env = make(f"navix/{name}")
    assert isinstance(env, NavixEnv) and env.name == f"navix/{name}"
    space = env.observation_space
    assert isinstance(space, Box) and space.shape == (5, 5, 3)
    np.testing.assert_array_equal(space.low, 0.0)
    np.testing.assert_array_equal(space.high, 255.0)
    assert env.action_space == Discrete(7)
    assert env.max_episode_steps == 100  # navix.make's default
    check_env(env)


@needs_navix
# (DoorKey's step compiles in about 4 s on 2 cores: in the slow tier)
@pytest.mark.parametrize("name", ["Navix-Empty-5x5-v0", pytest.param("Navix-DoorKey-5x5-v0", marks=pytest.mark.exhaustive)])
def test_check_env_steps(name):
    check_env_steps(make(f"navix/{name}"), num_steps=300, num_envs=2)


@needs_navix
def test_reset_and_step_states_have_the_same_types():
    """Weak types included, so that a jitted step compiles once, whether it gets reset's state
    or its own (Navix's reset alone starts its return weakly typed)."""
    env = make("navix/Navix-DoorKey-5x5-v0")
    key = jax.random.key(0)
    state, _ = jax.eval_shape(env.reset, key)
    stepped, _ = jax.eval_shape(env.step, key, state, jax.eval_shape(env.action_space.sample, key))
    assert [jax.typeof(x) for x in jax.tree.leaves(state)] == [jax.typeof(x) for x in jax.tree.leaves(stepped)]


@needs_navix
def test_episodes_equal_navix_own_steps():
    """Four episodes of Navix-Empty-5x5 with max_steps=30, stepped by the adapter and by
    Navix's `step` with the same keys and actions: the same observations, rewards and ends
    (TERMINATION -> terminated, TRUNCATION -> truncated), up to each episode's end (where
    Navix's own step auto-resets on the step after). Env 0 walks to the goal."""
    import navix

    env = make("navix/Navix-Empty-5x5-v0", max_steps=30)
    suite = navix.make("Navix-Empty-5x5-v0", max_steps=30)
    steps = 36
    keys = jax.random.split(jax.random.key(3), 4)
    actions = jax.random.randint(jax.random.key(4), (4, steps), 0, 7, dtype=jnp.int32)
    actions = actions.at[0, :5].set(jnp.array([2, 2, 1, 2, 2], jnp.int32))  # east, east, turn south, south, south

    ours = functools.partial(suite_equivalence.adapter_rollout, env)

    def theirs(key, actions):
        with eqxrl.core.foreign_promotion():
            timestep = suite.reset(key)

            def step(timestep, action):
                timestep = suite.step(timestep, action)
                return timestep, (timestep.observation, timestep.reward, timestep.step_type)

            return timestep.observation, jax.lax.scan(step, timestep, actions)[1]

    first, (obs, reward, terminated, truncated) = jax.jit(jax.vmap(ours))(keys, actions)
    first_n, (obs_n, reward_n, step_type) = jax.jit(jax.vmap(theirs))(keys, actions)
    np.testing.assert_array_equal(first, np.asarray(first_n, np.float32))
    terminated, truncated, step_type = map(np.asarray, (terminated, truncated, step_type))
    last = suite_equivalence.first_done(terminated | truncated)
    np.testing.assert_array_equal(last, suite_equivalence.first_done(step_type > 0))  # the episodes end on the same steps
    assert terminated[0, last[0]] and last[0] == 4  # env 0 reached the goal on its fifth step
    assert truncated[1:, 29].any() and not terminated[0, :4].any()
    for e in range(4):
        upto = slice(0, last[e] + 1)
        np.testing.assert_array_equal(obs[e, upto], np.asarray(obs_n[e, upto], np.float32))
        np.testing.assert_array_equal(reward[e, upto], np.asarray(reward_n[e, upto], np.float32))
        np.testing.assert_array_equal(terminated[e, upto], step_type[e, upto] == 2)
        np.testing.assert_array_equal(truncated[e, upto], step_type[e, upto] == 1)
    assert float(reward[0, 4]) > 0  # the goal's reward


@needs_navix
def test_kwargs_reach_navix():
    from navix import observations

    env = make("navix/Navix-Empty-5x5-v0", max_steps=7, observation_fn=observations.symbolic_first_person)
    assert env.max_episode_steps == 7 and env.observation_space.shape == (7, 7, 3)
    assert make("navix/Navix-Empty-5x5-v0", max_steps=7).handle == NavixEnv("Navix-Empty-5x5-v0", max_steps=7).handle


@needs_navix
def test_an_instance_is_wrapped_as_it_is():
    import navix

    env = NavixEnv(navix.make("Navix-Empty-5x5-v0", max_steps=12))
    assert env.name == "navix/Room" and env.max_episode_steps == 12 and check_env(env) is env
    with pytest.raises(ValueError, match=r"^NavixEnv: keyword arguments \['max_steps'\] need an env id, not an instance$"):
        NavixEnv(env.navix_env, max_steps=3)
    with pytest.raises(ValueError, match=r"^NavixEnv\(env\) must be a Navix id or navix.Environment, got 3$"):
        NavixEnv(3)


@needs_navix
@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"max_step": 10}, r"^make\('navix/Navix-Empty-5x5-v0'\) got unknown keyword\(s\) \['max_step'\]; navix.make takes the env's fields \["),
        ({"max_steps": 0}, r"^make\('navix/Navix-Empty-5x5-v0'\): max_steps must be a positive int, got 0$"),
        ({"height": 6}, r"^make\('navix/Navix-Empty-5x5-v0'\): navix.make rejected \['height'\]: .*multiple values"),
    ],
)
def test_bad_kwargs_are_one_line_errors(kwargs, message):
    with pytest.raises(ValueError, match=message) as info:
        make("navix/Navix-Empty-5x5-v0", **kwargs)
    assert "\n" not in str(info.value)


@needs_navix
def test_unknown_id_suggests_close_ids(monkeypatch):
    suite_equivalence.assert_suggests(monkeypatch, "navix/Navix-Empty-5x5-v1", "navix/Navix-Empty-5x5-v0")
    assert "navix/Navix-DoorKey-5x5-v0" in eqxrl.envs.registered()
    with pytest.raises(ValueError, match=r"NavixEnv\(env\): unknown Navix id 'Nope'"):
        NavixEnv("Nope")


def test_a_missing_navix_is_one_line_naming_the_extra(monkeypatch):
    match = r"^make\('navix/Navix-Empty-5x5-v0'\) needs the navix suite: pip install 'eqxrl\[navix\]'$"
    suite_equivalence.assert_missing_suite(monkeypatch, "navix/Navix-Empty-5x5-v0", match, ["navix"])


@needs_navix
def test_docs_page_runs():
    namespace = run_page("suites/navix.md", {"__name__": "docs_suites_navix"})
    assert namespace["ts"].obs.shape == (5, 5, 3)
