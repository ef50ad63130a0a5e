"""The XLand-MiniGrid adapter (`make("xminigrid/<id>")`) against xminigrid's own API."""

import functools
import importlib.util

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import eqxrl
from eqxrl.envs import Box, Discrete, XMiniGridEnv, check_env, make
from eqxrl.testing import check_env_steps
import suite_equivalence
from test_docs import run_page
from typecheck import no_runtime_typecheck

needs_xminigrid = pytest.mark.skipif(importlib.util.find_spec("xminigrid") is None, reason="xminigrid is not installed")
XLAND = "XLand-MiniGrid-R1-9x9"
# XLand's step (rules, goals) compiles in about 8 s on 2 cores: its rollout is in the slow tier.
IDS = ["MiniGrid-Empty-5x5", pytest.param(XLAND, marks=pytest.mark.exhaustive)]


def ball_ruleset():
    """An XLand task built by hand (the benchmarks are downloads): one red ball in the room,
    the goal to stand next to it and walk into it, no rules."""
    from xminigrid.core.constants import TILES_REGISTRY, Colors, Tiles
    from xminigrid.core.goals import AgentNearGoal
    from xminigrid.core.rules import EmptyRule
    from xminigrid.types import RuleSet

    ball = TILES_REGISTRY[Tiles.BALL, Colors.RED]
    return RuleSet(goal=AgentNearGoal(tile=ball).encode(), rules=EmptyRule().encode()[None], init_tiles=ball[None])


@needs_xminigrid
@pytest.mark.parametrize("name, view", [("MiniGrid-Empty-5x5", 7), (XLAND, 5)])
def test_make_gives_the_spaces_and_checks(name, view):
    kwargs = {"ruleset": ball_ruleset()} if name == XLAND else {}
    env = make(f"xminigrid/{name}", **kwargs)
    assert isinstance(env, XMiniGridEnv) and env.name == f"xminigrid/{name}"
    space = env.observation_space
    assert isinstance(space, Box) and space.shape == (view, view, 2)
    np.testing.assert_array_equal(space.low, 0.0)
    np.testing.assert_array_equal(space.high[..., 0], 12.0)  # tile ids
    np.testing.assert_array_equal(space.high[..., 1], 11.0)  # colour ids
    assert env.action_space == Discrete(6)
    assert env.max_episode_steps == (100 if name != XLAND else 243)
    check_env(env)


@needs_xminigrid
@pytest.mark.slow  # xminigrid's step compiles in 3 to 8 s on 2 cores (the fast tier rolls out MiniGrid-Empty below)
@pytest.mark.parametrize("name", ["MiniGrid-Empty-5x5", XLAND])
def test_check_env_steps(name):
    kwargs = {"ruleset": ball_ruleset()} if name == XLAND else {}
    check_env_steps(make(f"xminigrid/{name}", **kwargs), num_steps=300, num_envs=2)


def _episodes(env, suite, params, keys, actions):
    """The adapter's and xminigrid's own rollouts from the same keys and actions (one jit each)."""

    ours = functools.partial(suite_equivalence.adapter_rollout, env)

    def theirs(key, actions):
        with eqxrl.core.foreign_promotion():
            timestep = suite.reset(params, key)

            def step(timestep, action):
                timestep = suite.step(params, timestep, action)
                return timestep, (timestep.observation, timestep.reward, timestep.step_type, timestep.discount)

            return timestep.observation, jax.lax.scan(step, timestep, actions)[1]

    return jax.jit(jax.vmap(ours))(keys, actions), jax.jit(jax.vmap(theirs))(keys, actions)


@needs_xminigrid
@pytest.mark.parametrize("name", IDS)
def test_episodes_equal_xminigrid_own_steps(name):
    """Four episodes with max_steps=30 (36 steps each), stepped by the adapter and by xminigrid's
    `step` with the same keys and actions: the same observations, rewards and ends (discount
    0 -> terminated, a LAST step with discount 1 -> truncated) up to each episode's end. In
    MiniGrid-Empty-5x5, env 0 walks to the goal."""
    import xminigrid

    kwargs = {"ruleset": ball_ruleset()} if name == XLAND else {}
    env = make(f"xminigrid/{name}", max_steps=30, **kwargs)
    suite, params = xminigrid.make(name, max_steps=30, **kwargs)
    steps = 36
    keys = jax.random.split(jax.random.key(3), 4)
    actions = jax.random.randint(jax.random.key(4), (4, steps), 0, 6, dtype=jnp.int32)
    walk = name == "MiniGrid-Empty-5x5"
    if walk:
        actions = actions.at[0, :5].set(jnp.array([0, 0, 1, 0, 0], jnp.int32))  # east, east, turn south, south, south
    (first, (obs, reward, terminated, truncated)), (first_x, (obs_x, reward_x, step_type, discount)) = _episodes(
        env, suite, params, keys, actions
    )
    np.testing.assert_array_equal(first, np.asarray(first_x, np.float32))
    terminated, truncated, step_type, discount = map(np.asarray, (terminated, truncated, step_type, discount))
    last = suite_equivalence.first_done(terminated | truncated)
    np.testing.assert_array_equal(last, suite_equivalence.first_done(step_type == 2))  # the episodes end on the same steps
    for e in range(4):
        upto = slice(0, last[e] + 1)
        np.testing.assert_array_equal(obs[e, upto], np.asarray(obs_x[e, upto], np.float32))
        np.testing.assert_array_equal(reward[e, upto], np.asarray(reward_x[e, upto], np.float32))
        np.testing.assert_array_equal(terminated[e, upto], (step_type[e, upto] == 2) & (discount[e, upto] == 0))
        np.testing.assert_array_equal(truncated[e, upto], (step_type[e, upto] == 2) & (discount[e, upto] == 1))
    assert truncated[:, 29].any()
    if walk:
        assert last[0] == 4 and terminated[0, 4] and float(reward[0, 4]) > 0  # the goal reached, and rewarded


@needs_xminigrid
def test_kwargs_reach_the_params():
    env = make("xminigrid/MiniGrid-Empty-5x5", max_steps=9, view_size=5)
    assert env.max_episode_steps == 9 and env.observation_space.shape == (5, 5, 2)


@needs_xminigrid
@pytest.mark.parametrize(
    "name, kwargs, message",
    [
        ("MiniGrid-Empty-5x5", {"max_step": 9}, r" got unknown keyword\(s\) \['max_step'\]; its EnvParams fields are \["),
        ("MiniGrid-Empty-5x5", {"view_size": 0}, r": view_size must be a positive int, got 0$"),
        ("MiniGrid-Empty-5x5", {"ruleset": None}, r": ruleset= is for the XLand-MiniGrid ids; 'MiniGrid-Empty-5x5' has a fixed goal$"),
        (XLAND, {}, r" needs ruleset=: an xminigrid RuleSet, e\.g\. xminigrid\.load_benchmark\('trivial-21k'\)\.get_ruleset\(0\)"),
        (XLAND, {"ruleset": 3}, r": ruleset must be an xminigrid RuleSet, .*; got 3$"),
    ],
)
def test_bad_kwargs_are_one_line_errors(name, kwargs, message):
    with pytest.raises(ValueError, match=rf"^make\('xminigrid/{name}'\)" + message) as info:
        make(f"xminigrid/{name}", **kwargs)
    assert "\n" not in str(info.value)


@needs_xminigrid
def test_unknown_id_suggests_close_ids(monkeypatch):
    suite_equivalence.assert_suggests(monkeypatch, "xminigrid/MiniGrid-Empty-5x6", "xminigrid/MiniGrid-Empty-5x5")
    assert "xminigrid/XLand-MiniGrid-R1-9x9" in eqxrl.envs.registered()
    with pytest.raises(ValueError, match=r"XMiniGridEnv\(env\): unknown xminigrid id 'Nope'"):
        XMiniGridEnv("Nope")
    with no_runtime_typecheck(), pytest.raises(ValueError, match=r"^XMiniGridEnv\(env\) must be an xminigrid id, got 3$"):
        XMiniGridEnv(3)


def test_a_missing_xminigrid_is_one_line_naming_the_extra(monkeypatch):
    match = r"^make\('xminigrid/MiniGrid-Empty-5x5'\) needs the XLand-MiniGrid suite: pip install 'eqxrl\[xminigrid\]'$"
    suite_equivalence.assert_missing_suite(monkeypatch, "xminigrid/MiniGrid-Empty-5x5", match, ["xminigrid"])


@needs_xminigrid
def test_docs_page_runs():
    namespace = run_page("suites/xminigrid.md", {"__name__": "docs_suites_xminigrid"})
    assert namespace["ts"].obs.shape == (7, 7, 2)
    assert namespace["xland"].observation_space.shape == (5, 5, 2)
