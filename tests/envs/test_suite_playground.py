"""The MuJoCo Playground adapter (`make("playground/<id>")`) against Playground's own API.

MJX compiles slowly on CPU (a CartpoleBalance reset or step takes seconds), so the rollouts
are in the slow tier; the fast tier builds and traces envs (no compilation) and checks the
errors. No locomotion env is tested: they load their robots from mujoco_menagerie, which
Playground downloads on first use (this machine is offline)."""

import functools
import importlib.util
import subprocess

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import eqxrl
from eqxrl.envs import Box, Dict, PlaygroundEnv, TimeLimit, check_env, make
from eqxrl.testing import check_env_steps
import suite_equivalence
from test_docs import run_page
from typecheck import no_runtime_typecheck

needs_playground = pytest.mark.skipif(
    importlib.util.find_spec("mujoco_playground") is None, reason="mujoco_playground is not installed"
)
CARTPOLE = "playground/CartpoleBalance"


@needs_playground
def test_make_wraps_a_time_limit_and_checks():
    env = make(CARTPOLE)
    assert isinstance(env, TimeLimit) and isinstance(env.env, PlaygroundEnv)
    assert env.name == CARTPOLE and env.max_episode_steps == 1000  # the config's episode_length
    space = env.observation_space
    assert isinstance(space, Box) and space.shape == (5,) and not space.bounded
    assert env.action_space == Box(-1.0, 1.0, (1,))
    assert env.env.config.impl == ("jax" if jax.default_backend() == "cpu" else "warp")
    check_env(env)


@needs_playground
def test_kwargs_reach_the_config_and_the_time_limit():
    env = make(CARTPOLE, episode_length=50, ctrl_dt=0.02, config_overrides={"sim_dt": 0.005})
    assert env.max_episode_steps == 50
    config = env.env.config
    assert config.episode_length == 50 and config.ctrl_dt == 0.02 and config.sim_dt == 0.005
    assert env.env.playground_env.n_substeps == 4
    impl = {"impl": "jax"} if jax.default_backend() == "cpu" else {}
    assert make(CARTPOLE, **impl).env.handle == PlaygroundEnv("CartpoleBalance").handle  # one compiled program


@needs_playground
@pytest.mark.slow  # compiles MJX's reset and step: about 20 s on 2 cores
def test_check_env_steps():
    check_env_steps(make(CARTPOLE, episode_length=40), num_steps=100, num_envs=2)


@needs_playground
@pytest.mark.slow  # two MJX rollouts compiled: about 30 s on 2 cores
def test_episodes_equal_playground_brax_training_wrapper():
    """Two episodes of 20 steps (`episode_length=20`), stepped by the adapter and by
    Playground's own `wrap_for_brax_training(env, episode_length=20)` with the same reset keys
    and actions: the same observations and rewards, `done` where the episode ends, and the
    time limit reported as truncation (brax's `info["truncation"]`), not termination."""
    from mujoco_playground import registry, wrapper

    env = make(CARTPOLE, episode_length=20, impl="jax")
    suite = wrapper.wrap_for_brax_training(
        registry.load("CartpoleBalance", config_overrides={"impl": "jax"}), episode_length=20
    )
    # Playground's auto-reset wrapper takes raw uint32 keys and resets the env with
    # `jax.vmap(jax.random.split)(keys)[..., 1]` (each split's second words): so does the adapter.
    keys = jax.random.split(jax.random.PRNGKey(5), 2)
    env_keys = jax.vmap(jax.random.split)(keys)[..., 1]
    actions = jax.random.uniform(jax.random.key(6), (20, 2, 1), minval=-1.0, maxval=1.0)

    ours = functools.partial(suite_equivalence.adapter_rollout, env)

    def theirs(keys, actions):
        with eqxrl.core.foreign_promotion():
            state = suite.reset(keys)

            def step(state, action):
                state = suite.step(state, action)
                return state, (state.obs, state.reward, state.done, state.info["truncation"])

            return state.obs, jax.lax.scan(step, state, actions)[1]

    first, (obs, reward, terminated, truncated) = jax.jit(jax.vmap(ours, in_axes=(0, 1), out_axes=(0, 1)))(env_keys, actions)
    first_p, (obs_p, reward_p, done_p, truncation_p) = jax.jit(theirs)(keys, actions)
    np.testing.assert_allclose(first, first_p, rtol=1e-6, atol=1e-6)
    # (on the last step Playground's wrapper has already put the first observation back in
    # `obs`; the adapter returns the true last one, and eqxrl's AutoReset keeps it in final_obs)
    np.testing.assert_allclose(obs[:19], obs_p[:19], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(obs_p[19], first_p, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(reward, reward_p, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(terminated | truncated, np.asarray(done_p) > 0.5)
    np.testing.assert_array_equal(truncated, np.asarray(truncation_p) > 0.5)
    assert truncated[19].all() and not truncated[:19].any() and not terminated.any()


@needs_playground
@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        ({"ctrl_dtt": 0.02}, ValueError, r" got unknown keyword\(s\) \['ctrl_dtt'\]; its config's entries are \["),
        ({"episode_length": 0}, ValueError, r": episode_length must be a positive int, got 0$"),
        ({"config_overrides": [("ctrl_dt", 0.02)]}, ValueError, r": config_overrides must be a dict of flattened config keys"),
        ({"config_overrides": {"vision_config.nope": 1}}, ValueError, r": config_overrides has 'vision_config.nope', which the env's config lacks$"),
        ({"ctrl_dt": "x"}, ValueError, r": Could not override field 'ctrl_dt' \(reference\)\. x is of original type"),
    ],
)
def test_bad_kwargs_are_one_line_errors(kwargs, error, message):
    with no_runtime_typecheck(), pytest.raises(error, match=r"^make\('playground/CartpoleBalance'\)" + message) as info:
        make(CARTPOLE, **kwargs)
    assert "\n" not in str(info.value)


@needs_playground
def test_a_failed_menagerie_download_says_what_failed(monkeypatch):
    from mujoco_playground._src import mjx_env

    def offline():
        raise subprocess.CalledProcessError(128, ["git", "clone"])

    monkeypatch.setattr(mjx_env, "ensure_menagerie_exists", offline)
    with pytest.raises(RuntimeError, match=r"^make\('playground/Go1JoystickFlatTerrain'\): MuJoCo Playground could not download mujoco_menagerie"):
        make("playground/Go1JoystickFlatTerrain")


@needs_playground
def test_unknown_id_suggests_close_ids(monkeypatch):
    suite_equivalence.assert_suggests(monkeypatch, "playground/CartpoleBalanse", "playground/CartpoleBalance")
    assert "playground/WalkerWalk" in eqxrl.envs.registered()
    with pytest.raises(ValueError, match=r"PlaygroundEnv\(env\): unknown MuJoCo Playground env 'Nope'"):
        PlaygroundEnv("Nope")


def test_dict_observations_become_dict_spaces():
    """The locomotion envs' dict observations (which need the menagerie download), by parts."""
    from eqxrl.envs._playground import _as_float32, _obs_shapes, _obs_space  # (private: the adapter's conversions, tested by parts without the menagerie download)

    obs = {"state": jax.ShapeDtypeStruct((3,), jnp.float32), "privileged_state": jax.ShapeDtypeStruct((2, 4), jnp.float32)}
    space = _obs_space(_obs_shapes(obs, "Go1"))
    assert isinstance(space, Dict) and space.shape == {"privileged_state": (2, 4), "state": (3,)}
    x = _as_float32({"state": jnp.zeros(3, jnp.float16), "privileged_state": jnp.zeros((2, 4), jnp.int32)})
    assert all(leaf.dtype == jnp.float32 for leaf in jax.tree.leaves(x)) and bool(space.contains(x))
    assert _obs_space(_obs_shapes(jax.ShapeDtypeStruct((5,), jnp.float32), "Cartpole")).shape == (5,)


def test_a_missing_playground_is_one_line_naming_the_extra(monkeypatch):
    match = r"^make\('playground/CartpoleBalance'\) needs the MuJoCo Playground suite: pip install 'eqxrl\[playground\]'$"
    suite_equivalence.assert_missing_suite(monkeypatch, CARTPOLE, match, ["mujoco_playground"])


@needs_playground
@pytest.mark.slow  # compiles MJX's reset: about 8 s on 2 cores
def test_docs_page_runs():
    namespace = run_page("suites/playground.md", {"__name__": "docs_suites_playground"})
    assert namespace["ts"].obs.shape == (5,)
