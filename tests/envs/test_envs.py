"""Tests for `eqxrl.envs`: the protocol, `make`/`register`/`registered`, the gymnax and brax adapters."""

import os

import equinox as eqx
import gymnax
import jax
import jax.numpy as jnp
import jaxtyping
import numpy as np
import pytest
from gymnax.environments import spaces as gymnax_spaces
from gymnax.environments.classic_control.cartpole import CartPole

import eqxrl
import eqxrl.envs
from eqxrl.envs import (
    AbstractEnv,
    BraxEnv,
    Box,
    Dict,
    Discrete,
    GymnaxEnv,
    TimeLimit,
    TimeStep,
    Tuple,
    check_env,
    first_timestep,
    make,
    register,
    registered,
    tree_select,
)
from typecheck import no_runtime_typecheck


# (Not `registered()`: at collection it would import every installed suite for its ids, ~5 s per worker.)
GYMNAX_IDS = list(gymnax.registered_envs)
# brax 0.14.2's registry, written out so that collecting this module does not import brax
# (~4 s per worker); `test_brax_ids_are_braxs_own` keeps the list honest.
BRAX_IDS = [
    "brax/" + n for n in ("ant", "fast", "halfcheetah", "hopper", "humanoid", "humanoidstandup", "inverted_pendulum",
                          "inverted_double_pendulum", "pusher", "reacher", "swimmer", "walker2d")
]  # fmt: skip


@pytest.mark.slow
def test_brax_ids_are_braxs_own():
    assert BRAX_IDS == eqxrl.envs._make._suite_ids("brax/")  # (private: the suite's id list that `make` checks against)


def _rollout(env: AbstractEnv, key, num_steps: int, action_fn=None):
    """Reset, then `num_steps` steps with random (or `action_fn`) actions; the env is closed over."""
    space = env.action_space

    def run(key):
        reset_key, key = jax.random.split(key)
        state, first = env.reset(reset_key)

        def body(state, key):
            action_key, step_key = jax.random.split(key)
            action = space.sample(action_key) if action_fn is None else action_fn(state)
            state, ts = env.step(step_key, state, action)
            return state, ts

        _, steps = jax.lax.scan(body, state, jax.random.split(key, num_steps))
        return first, steps

    # (Compiled unoptimised, as every non-learning test: conftest.py.)
    return jax.jit(run)(key)


# ----------------------------------------------------------------------------- protocol


def test_timestep_done_and_first_timestep():
    ts = first_timestep(jnp.ones(3))
    assert ts.reward.dtype == jnp.float32 and float(ts.reward) == 0.0
    assert ts.terminated.dtype == jnp.bool_ and not bool(ts.done)
    assert ts.info == {}
    assert first_timestep(jnp.ones(3), {"a": jnp.ones(())}).info.keys() == {"a"}
    flags = jnp.array([True, False, False]), jnp.array([False, True, False])
    ts = TimeStep(jnp.zeros((3, 2)), jnp.zeros(3), *flags, {})
    np.testing.assert_array_equal(ts.done, [True, True, False])


def test_tree_select():
    a = {"x": jnp.ones(2), "y": jnp.array(1)}
    b = {"x": jnp.zeros(2), "y": jnp.array(2)}
    assert eqx.tree_equal(tree_select(jnp.array(True), a, b), a)
    assert eqx.tree_equal(tree_select(jnp.array(False), a, b), b)


def test_abstract_env_defaults():
    with pytest.raises(TypeError):
        AbstractEnv()

    class Minimal(AbstractEnv):
        def reset(self, key):
            return None, first_timestep(jnp.zeros(1))

        def step(self, key, state, action):
            return None, first_timestep(jnp.zeros(1))

        @property
        def observation_space(self):
            return Box(0.0, 1.0, (1,))

        @property
        def action_space(self):
            return Discrete(2)

    env = Minimal()
    assert env.name == "Minimal"
    assert env.max_episode_steps is None
    assert env.unwrapped is env
    assert env.renderer is None and eqxrl.envs.renderer_name(env) is None


# ----------------------------------------------------------------------------- gymnax


# CI steps a third of gymnax's envs (classic control, MinAtar, misc and bsuite ones); the
# exhaustive tier every one (tests/tiers.py).
GYMNAX_CI = {"CartPole-v1", "Pendulum-v1", "Acrobot-v1", "MountainCarContinuous-v0", "Breakout-MinAtar",
             "SpaceInvaders-MinAtar", "FourRooms-misc", "MetaMaze-misc", "Catch-bsuite", "BernoulliBandit-misc"}  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("name", [n if n in GYMNAX_CI else pytest.param(n, marks=pytest.mark.exhaustive) for n in GYMNAX_IDS])
def test_every_gymnax_env_resets_and_steps_under_jit(name):
    try:
        env = make(name)
    except OSError as e:  # URLError is an OSError
        if name == "MNISTBandit-bsuite":
            pytest.skip(f"gymnax downloads MNIST when this env is built, and the network is unreachable: {e}")
        raise
    assert isinstance(env, GymnaxEnv)
    assert env.name == env.gymnax_env.name
    obs_space, action_space = env.observation_space, env.action_space
    assert isinstance(obs_space, (Box, Discrete))
    assert isinstance(action_space, (Box, Discrete))
    first, steps = _rollout(env, jax.random.key(0), 3)
    assert first.obs.shape == obs_space.shape and first.obs.dtype == jnp.float32
    assert steps.obs.shape == (3, *obs_space.shape) and steps.obs.dtype == jnp.float32
    assert bool(jnp.all(jnp.isfinite(first.obs))) and bool(jnp.all(jnp.isfinite(steps.obs)))
    assert steps.reward.shape == (3,) and steps.reward.dtype == jnp.float32
    for flag in (steps.terminated, steps.truncated):
        assert flag.shape == (3,) and flag.dtype == jnp.bool_
    assert first.reward.dtype == jnp.float32 and first.terminated.dtype == jnp.bool_


class _SplitCartPole(CartPole):
    """gymnax's CartPole observing `{"cart": (x, x_dot), "pole": ((theta,), (theta_dot,))}`: a
    gymnax Dict of a Box and a Tuple."""

    def get_obs(self, state, params=None, key=None):
        obs = super().get_obs(state, params, key)
        return {"cart": obs[:2], "pole": (obs[2:3], obs[3:])}

    def observation_space(self, params):
        box = super().observation_space(params)
        pole = gymnax_spaces.Tuple([gymnax_spaces.Box(box.low[i : i + 1], box.high[i : i + 1], (1,)) for i in (2, 3)])
        return gymnax_spaces.Dict({"cart": gymnax_spaces.Box(box.low[:2], box.high[:2], (2,)), "pole": pole})


@pytest.mark.slow  # (over 2 s in the fast tier: tests/tiers.py)
def test_gymnax_dict_and_tuple_spaces_become_eqxrl_ones_and_an_agent_trains_on_them():
    env = GymnaxEnv(_SplitCartPole())
    flat = make("CartPole-v1")
    box = flat.observation_space
    assert env.observation_space == Dict(
        {"cart": Box(box.low[:2], box.high[:2], (2,)), "pole": Tuple((Box(box.low[2:3], box.high[2:3], (1,)), Box(box.low[3:], box.high[3:], (1,))))}
    )
    check_env(env)
    state, ts = env.reset(jax.random.key(0))
    flat_state, flat_ts = flat.reset(jax.random.key(0))
    np.testing.assert_array_equal(jnp.concatenate([ts.obs["cart"], *ts.obs["pole"]]), flat_ts.obs)
    assert bool(env.observation_space.contains(ts.obs))
    agent = eqxrl.agents.PPO(env, num_envs=2, rollout_length=8, num_minibatches=1, num_epochs=1, hidden_sizes=(8,))
    assert agent.obs_shape == (("cart", (2,)), ("pole.0", (1,)), ("pole.1", (1,)))
    _, metrics = eqxrl.train(agent, jax.random.key(1), total_steps=32, progress=False)
    assert np.all(np.isfinite(metrics["loss"]))


def test_gymnax_env_with_an_unknown_space_fails_clearly():
    class OddCartPole(CartPole):
        def observation_space(self, params):
            return "odd"

    env = GymnaxEnv(OddCartPole())
    assert isinstance(env.action_space, Discrete)
    with pytest.raises(
        ValueError,
        match=r"^gymnax env 'CartPole-v1' has a str observation space; eqxrl supports Discrete, Box, Dict and Tuple spaces$",
    ):
        env.observation_space


def test_gymnax_env_from_an_instance():
    gym_env, params = gymnax.make("Pendulum-v1")
    env = GymnaxEnv(gym_env, params.replace(max_steps_in_episode=7))
    assert env.max_episode_steps == 7
    assert isinstance(env.action_space, Box) and env.action_space.shape == (1,)
    np.testing.assert_array_equal(env.action_space.low, -2.0)
    np.testing.assert_array_equal(env.action_space.high, 2.0)
    _, steps = _rollout(env, jax.random.key(1), 8)
    np.testing.assert_array_equal(steps.truncated, [False] * 6 + [True, True])
    assert not bool(steps.terminated.any())  # Pendulum never terminates by itself


def test_gymnax_max_episode_steps():
    assert make("CartPole-v1").max_episode_steps == 500
    assert make("Pendulum-v1").max_episode_steps == 200
    # BernoulliBandit keeps its limit as a float (100.0); it is still a limit.
    assert make("BernoulliBandit-misc").max_episode_steps == 100


def test_make_overrides_gymnax_params_and_truncates():
    # Huge thresholds: the pole never "falls", so the episode can only end by the time limit.
    env = make("CartPole-v1", max_steps_in_episode=50, theta_threshold_radians=100.0, x_threshold=1e6)
    assert env.max_episode_steps == 50
    assert env.params.max_steps_in_episode == 50
    _, steps = _rollout(env, jax.random.key(0), 51)
    truncated = np.asarray(steps.truncated)
    assert not truncated[:49].any()
    assert truncated[49]  # the 50th step
    assert not bool(steps.terminated.any())


def test_gymnax_termination_is_not_truncation():
    # Always pushing left, the pole falls within a few dozen steps: that is termination.
    env = make("CartPole-v1")
    _, steps = _rollout(env, jax.random.key(0), 100, action_fn=lambda state: jnp.int32(0))
    terminated = np.asarray(steps.terminated)
    assert terminated.any()
    first = int(np.argmax(terminated))
    assert first < 60
    assert not np.asarray(steps.truncated)[: first + 1].any()


def test_make_rejects_unknown_gymnax_params():
    with pytest.raises(
        ValueError,
        match=r"make\('CartPole-v1'\) got unknown parameter\(s\) \['max_steps'\]; "
        r"its EnvParams fields are \[.*'max_steps_in_episode'",
    ):
        make("CartPole-v1", max_steps=10)


def test_two_makes_share_one_compilation():
    a, b = make("CartPole-v1"), make("CartPole-v1")
    assert a is not b
    assert eqx.tree_equal(a, b)
    assert hash(a.handle) == hash(b.handle) and a.handle == b.handle

    traces = []

    @eqx.filter_jit
    @eqx.debug.assert_max_traces(max_traces=2)
    def reset(env, key):
        traces.append(env)
        return env.reset(key)[1].obs

    key = jax.random.key(0)
    np.testing.assert_array_equal(reset(a, key), reset(b, key))
    assert len(traces) == 1
    # Different parameters are a different program.
    reset(make("CartPole-v1", max_steps_in_episode=50), key)
    assert len(traces) == 2
    assert make("CartPole-v1", max_steps_in_episode=50).handle != a.handle


# ----------------------------------------------------------------------------- make / register


@pytest.mark.parametrize(
    "name, suggestion",
    [
        ("CartPole-v2", "CartPole-v1"),
        ("cartpole-v1", "CartPole-v1"),
        ("Pendulum-v0", "Pendulum-v1"),
        ("brax/antt", "brax/ant"),
        ("Breakout-MinAtr", "Breakout-MinAtar"),
    ],
)
def test_make_suggests_close_names(name, suggestion):
    with pytest.raises(ValueError, match=rf"unknown environment '{name}'; did you mean one of \[.*'{suggestion}'"):
        make(name)


@pytest.mark.slow  # (over 2 s in the fast tier: tests/tiers.py)
def test_make_unknown_name_without_close_match():
    with pytest.raises(ValueError, match=r"unknown environment 'zzzz'; see eqxrl.envs.registered\(\)"):
        make("zzzz")


@pytest.mark.slow  # (over 2 s in the fast tier: tests/tiers.py)
def test_registered_lists_gymnax_and_brax():
    names = registered()
    assert "CartPole-v1" in names and "brax/inverted_pendulum" in names
    assert set(gymnax.registered_envs) <= set(names)
    assert len(names) == len(set(names))


@pytest.fixture
def clean_registry(monkeypatch):
    monkeypatch.setattr(eqxrl.envs._make, "_registry", {})  # (private: an empty registry of env names for the test)


@pytest.mark.usefixtures("clean_registry")
def test_register_and_make():
    made = []

    def factory(**kwargs):
        made.append(kwargs)
        return TimeLimit(make("CartPole-v1"), 10)

    register("MyCartPole-v0", factory)
    assert "MyCartPole-v0" in registered()
    env = make("MyCartPole-v0", seed=3)
    assert made == [{"seed": 3}]
    assert env.max_episode_steps == 10
    with pytest.raises(ValueError, match=r"did you mean one of \[.*'MyCartPole-v0'"):
        make("MyCartPole-v1")


@pytest.mark.usefixtures("clean_registry")
def test_register_rejects_bad_input():
    register("a", lambda: None)
    with pytest.raises(ValueError, match=r"register\(name\): 'a' is already registered"):
        register("a", lambda: None)
    with pytest.raises(ValueError, match=r"register\(name\) must be a non-empty string, got ''"):
        register("", lambda: None)
    # A non-callable factory: the annotation catches it under the test hook; users get eqxrl's ValueError.
    with pytest.raises(jaxtyping.TypeCheckError, match="factory"):
        register("b", 3)
    with no_runtime_typecheck():
        with pytest.raises(ValueError, match=r"register\(factory\) must be callable, got 3"):
            register("b", 3)
    assert "b" not in registered()


# ----------------------------------------------------------------------------- brax

# Compiling a brax step takes 3-10 s per env: the default run steps the cheap ones
# and only builds (and traces the reset of) the others; EQXRL_TEST_ALL_BRAX=1 steps all.
CHEAP_BRAX = {"brax/fast", "brax/inverted_pendulum"}


@pytest.mark.slow
def test_brax_inverted_pendulum_resets_and_steps():
    env = make("brax/inverted_pendulum")
    assert isinstance(env, TimeLimit) and isinstance(env.unwrapped, BraxEnv)
    assert env.name == "brax/inverted_pendulum"
    assert env.max_episode_steps == 1000
    assert env.observation_space.shape == (4,)
    assert isinstance(env.action_space, Box) and env.action_space.shape == (1,)
    np.testing.assert_array_equal(env.action_space.low, -1.0)
    np.testing.assert_array_equal(env.action_space.high, 1.0)
    first, steps = _rollout(env, jax.random.key(0), 2)
    assert first.obs.shape == (4,) and steps.obs.shape == (2, 4)
    assert steps.reward.dtype == jnp.float32 and steps.reward.shape == (2,)
    assert steps.terminated.dtype == jnp.bool_ and steps.truncated.dtype == jnp.bool_
    assert not bool(steps.terminated.any()) and not bool(steps.truncated.any())
    assert bool(jnp.all(jnp.isfinite(steps.obs)))
    # The pendulum moves: the dynamics really ran.
    assert not np.allclose(steps.obs[0], steps.obs[1])


@pytest.mark.slow
def test_brax_backend_selection():
    # Building a second physics backend of an already-parsed model is fast; compiling
    # its step is not, and the adapter code is the same: check the selection only.
    default = make("brax/inverted_pendulum")
    assert default.unwrapped.brax_env.backend == "generalized"
    env = make("brax/inverted_pendulum", backend="spring")
    assert env.unwrapped.brax_env.backend == "spring"
    assert env.unwrapped.handle.key == ("brax", "inverted_pendulum", (("backend", "spring"),))
    assert env.unwrapped.handle != default.unwrapped.handle  # a different compiled program


def test_brax_fast_episode_length_and_structured_observation():
    env = make("brax/fast", episode_length=3)
    assert isinstance(env, TimeLimit) and env.max_episode_steps == 3
    inner = env.unwrapped
    assert isinstance(inner, BraxEnv)
    assert inner.name == "brax/fast" and inner.max_episode_steps is None
    assert env.observation_space.shape == (2,) and env.action_space.shape == (1,)
    first, steps = _rollout(env, jax.random.key(0), 4)
    assert steps.obs.shape == (4, 2) and steps.reward.dtype == jnp.float32
    np.testing.assert_array_equal(steps.truncated, [False, False, True, True])
    assert not bool(steps.terminated.any())
    with pytest.raises(ValueError, match=r"brax env 'fast' has a structured observation .*; eqxrl needs a flat vector"):
        make("brax/fast", obs_mode="dict_state")


def test_brax_reset_and_step_are_traced_once_per_program(monkeypatch):
    # The adapter jits brax's reset and step (keyed by the env's static handle): a program
    # that resets or steps several times (init, auto-reset, training, evaluation) runs
    # brax's Python (about a second per trace for a physics env) once for each.
    inner = make("brax/fast", episode_length=3).unwrapped
    calls = {"reset": 0, "step": 0}
    for name in calls:
        original = getattr(inner.brax_env, name)

        def counted(*args, _name=name, _original=original):
            calls[_name] += 1
            return _original(*args)

        monkeypatch.setattr(inner.brax_env, name, counted)
    jax.clear_caches()  # no trace of an earlier test

    def program(key):
        k1, k2 = jax.random.split(key)
        state, _ = inner.reset(k1)
        _, first = inner.reset(k2)
        action = jnp.zeros(inner.action_space.shape)
        # Both steps from the reset's state: a stepped state's types can differ (weak types),
        # and the trace is cached per input type.
        inner.step(k1, state, action)
        state, ts = inner.step(k2, state, action)
        return state, ts, first

    state, ts, first = jax.eval_shape(program, jax.random.key(0))
    assert calls == {"reset": 1, "step": 1}
    assert ts.obs.shape == first.obs.shape == (2,) and state.obs.shape == (2,)


# brax's swimmer steps with jnp.clip(a_min=...), which this JAX no longer accepts; make traces
# a step (check_env), so it fails there, with the note below, instead of at the first iteration.
SWIMMER = pytest.mark.xfail(raises=TypeError, strict=False, reason="brax's swimmer calls jnp.clip(a_min=)")


def _brax_build_param(name):
    """CI builds three brax envs (a locomotion one, the humanoid, the swimmer's known failure);
    the exhaustive tier every one (tests/tiers.py)."""
    marks = [SWIMMER] if name == "brax/swimmer" else []
    if name not in ("brax/ant", "brax/humanoid", "brax/swimmer"):
        marks.append(pytest.mark.exhaustive)
    return pytest.param(name, marks=marks)


@pytest.mark.slow
@pytest.mark.parametrize("name", [_brax_build_param(n) for n in BRAX_IDS])
def test_every_brax_env_builds(name):
    env = make(name)
    assert isinstance(env, TimeLimit) and isinstance(env.unwrapped, BraxEnv)
    assert env.name == name and env.max_episode_steps == 1000
    (obs_size,) = env.observation_space.shape
    (action_size,) = env.action_space.shape
    assert obs_size >= 1 and action_size >= 1
    assert action_size == env.unwrapped.brax_env.action_size
    # The traced reset (no compilation) agrees with the declared observation space.
    _, first = jax.eval_shape(env.reset, jax.random.key(0))
    assert first.obs.shape == (obs_size,) and first.obs.dtype == jnp.float32


@pytest.mark.parametrize("name", sorted(set(BRAX_IDS) - CHEAP_BRAX))
@pytest.mark.skipif(
    not os.environ.get("EQXRL_TEST_ALL_BRAX"),
    reason="compiling a brax step takes 3-10 s per env on CPU; set EQXRL_TEST_ALL_BRAX=1",
)
def test_other_brax_envs_step(name):
    env = make(name)
    first, steps = _rollout(env, jax.random.key(0), 1)
    assert first.obs.shape == env.observation_space.shape
    assert steps.reward.dtype == jnp.float32 and steps.terminated.dtype == jnp.bool_


def test_select_observation_keeps_the_chosen_entries_and_cartpole_no_vel_hides_the_velocities():
    from eqxrl.envs import AutoReset, SelectObservation

    full = eqxrl.envs.make("CartPole-v1")
    env = eqxrl.envs.make("CartPoleNoVel-v1")
    assert isinstance(env, SelectObservation) and env.indices == (0, 2)
    assert env.observation_space.shape == (2,) and env.max_episode_steps == full.max_episode_steps == 500
    np.testing.assert_allclose(env.observation_space.high, full.observation_space.high[np.array([0, 2])])
    key = jax.random.key(3)
    (state, ts), (full_state, full_ts) = env.reset(key), full.reset(key)
    np.testing.assert_array_equal(ts.obs, full_ts.obs[np.array([0, 2])])
    for _ in range(3):
        state, ts = env.step(key, state, jnp.int32(1))
        full_state, full_ts = full.step(key, full_state, jnp.int32(1))
        np.testing.assert_array_equal(ts.obs, full_ts.obs[np.array([0, 2])])
        assert ts.reward == full_ts.reward
    # Under AutoReset the final observation is cut the same way.
    wrapped = SelectObservation(AutoReset(full), (1,))
    _, ts = wrapped.reset(key)
    assert ts.obs.shape == ts.info["final_obs"].shape == (1,)
    # kwargs reach CartPole's EnvParams, as for make("CartPole-v1", ...).
    assert eqxrl.envs.make("CartPoleNoVel-v1", max_steps_in_episode=100).max_episode_steps == 100


@pytest.mark.parametrize(
    "indices, message",
    [
        ((), r"^SelectObservation\(indices\) must be distinct ints in \[0, 4\), got \(\)$"),
        ((0, 4), r"^SelectObservation\(indices\) must be distinct ints in \[0, 4\), got \(0, 4\)$"),
        ((1, 1), r"^SelectObservation\(indices\) must be distinct ints in \[0, 4\), got \(1, 1\)$"),
        ((True,), r"^SelectObservation\(indices\) must be distinct ints in \[0, 4\), got \(True,\)$"),
    ],
)
def test_select_observation_bad_indices(indices, message):
    with pytest.raises(ValueError, match=message):
        eqxrl.envs.SelectObservation(eqxrl.envs.make("CartPole-v1"), indices)


def test_select_observation_needs_a_flat_box():
    with pytest.raises(ValueError, match=r"^SelectObservation\(env\) needs a 1-D Box observation space, got Box"):
        eqxrl.envs.SelectObservation(eqxrl.envs.make("Breakout-MinAtar"), (0,))


@pytest.fixture
def clean_suites(monkeypatch):
    monkeypatch.setattr(eqxrl.envs._make, "_suites", dict(eqxrl.envs._make._suites))  # (private: the test registers a suite and leaves the registry as it was)


@pytest.mark.usefixtures("clean_suites")
def test_a_suite_registers_itself_by_prefix():
    made = []

    def factory(name, **kwargs):
        if name not in ("a", "bb"):
            raise KeyError(name)
        made.append((name, kwargs))
        return TimeLimit(make("CartPole-v1"), 10 if name == "a" else 20)

    eqxrl.envs.register_suite("mine/", factory, lambda: ["a", "bb"])
    assert "mine/" in eqxrl.envs.suites() and "brax/" in eqxrl.envs.suites()
    assert make("mine/bb", x=1).max_episode_steps == 20 and made == [("bb", {"x": 1})]
    assert {"mine/a", "mine/bb"} <= set(registered())
    with pytest.raises(ValueError, match=r"unknown environment 'mine/bbb'; did you mean one of \['mine/bb'"):
        make("mine/bbb")


@pytest.mark.usefixtures("clean_suites")
def test_a_suite_that_is_not_installed_lists_no_ids_and_says_what_to_install():
    def ids():
        raise ImportError("the nosuch suite is not installed: pip install 'eqxrl[nosuch]'")

    def factory(name, **kwargs):
        ids()

    eqxrl.envs.register_suite("nosuch/", factory, ids)
    assert not [name for name in registered() if name.startswith("nosuch/")]
    with pytest.raises(ImportError, match=r"pip install 'eqxrl\[nosuch\]'"):
        make("nosuch/x")


@pytest.mark.usefixtures("clean_suites")
@pytest.mark.parametrize(
    "args, message",
    [
        (("mine", lambda n: None), r"register_suite\(prefix\) must be a non-empty string ending in '/', got 'mine'"),
        (("brax/", lambda n: None), r"register_suite\(prefix\): 'brax/' is already registered"),
        (("mine/", 3), r"register_suite\(factory\) must be callable, got 3"),
        (("mine/", lambda n: None, ["a"]), r"register_suite\(ids\) must be None or a function returning"),
    ],
)
def test_register_suite_bad_inputs(args, message):
    with no_runtime_typecheck(), pytest.raises(ValueError, match=message):
        eqxrl.envs.register_suite(*args)


@pytest.mark.usefixtures("clean_suites")
def test_a_suite_factory_that_returns_no_env_is_named():
    eqxrl.envs.register_suite("mine/", lambda name: object())
    with pytest.raises(ValueError, match=r"make\('mine/x'\): suite 'mine/' returned <object .*>, not an eqxrl AbstractEnv"):
        make("mine/x")


def test_the_architecture_pages_suite_example_runs(monkeypatch):
    """docs/architecture.md, "Adding an env suite": an AbstractSuiteEnv adapter in one class,
    behind make() by register_suite (the registry restored afterwards)."""
    import pathlib
    import re

    monkeypatch.setattr(eqxrl.envs._make, "_suites", dict(eqxrl.envs._make._suites))  # (private: the test registers a suite and leaves the registry as it was)
    page = pathlib.Path(__file__).parents[2] / "docs" / "architecture.md"
    section = re.split(r"\n##+ ", page.read_text().split("### Adding an env suite", 1)[1], maxsplit=1)[0]
    (block,) = re.findall(r"```python\n(.*?)```", section, re.S)
    ns = {"__name__": "docs_architecture_suite"}
    exec(compile(block, "docs/architecture.md [Adding an env suite]", "exec"), ns)
    assert isinstance(ns["env"], eqxrl.envs.AbstractSuiteEnv) and ns["ts"].obs.shape == (4,)
    with pytest.raises(ValueError, match=r"unknown environment 'toy/CartPole-v9'; did you mean one of \['toy/CartPole-v1'\]"):
        make("toy/CartPole-v9")
    # The renderer it declares is what eqxrl draws it with, through a wrapper too.
    wrapped = eqxrl.envs.TimeLimit(ns["env"], 10)
    states = jax.tree.map(lambda x: jnp.stack([x, -x]), ns["state"])  # (the cart left and right of centre)
    frames = eqxrl.envs.render_frames(wrapped, states)
    assert eqxrl.envs.renderer_name(wrapped) == "toy" and eqxrl.envs.frame_rate(wrapped) == 10
    assert frames.shape == (2, 8, 8, 3) and frames.dtype == np.uint8 and sorted(frames[:, 0, 0, 0]) == [0, 255]
