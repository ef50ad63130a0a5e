"""The jumanji adapter (`make("jumanji/<id>")`, `eqxrl.envs.JumanjiEnv`) against jumanji's own API."""

import importlib.util

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from eqxrl.core import foreign_promotion
from eqxrl.envs import ACTION_MASK, AutoReset, Box, Dict, Discrete, JumanjiEnv, MultiBinary, MultiDiscrete, make
from eqxrl.testing import check_env_steps

import suite_equivalence

needs_jumanji = pytest.mark.skipif(importlib.util.find_spec("jumanji") is None, reason="jumanji is not installed")


def _box(space, low, high, shape):
    assert isinstance(space, Box) and space.shape == shape, space
    np.testing.assert_array_equal(space.low, np.broadcast_to(np.float32(low), shape))
    np.testing.assert_array_equal(space.high, np.broadcast_to(np.float32(high), shape))


@needs_jumanji
def test_snake_spaces_and_limit():
    env = make("jumanji/Snake-v1")
    assert isinstance(env, JumanjiEnv) and env.name == "jumanji/Snake-v1"
    assert env.action_space == Discrete(4) and env.max_episode_steps == 4000
    space = env.observation_space
    assert isinstance(space, Dict) and set(space.spaces) == {"grid", "step_count", ACTION_MASK}
    _box(space.spaces["grid"], 0.0, 1.0, (12, 12, 5))
    _box(space.spaces["step_count"], 0.0, 4000.0, ())  # (jumanji's spec stops at 3999; the last step reaches 4000)
    assert space.spaces[ACTION_MASK] == MultiBinary(4)
    _, ts = env.reset(jax.random.key(0))
    assert ts.obs[ACTION_MASK].dtype == jnp.int32 and ts.obs["grid"].dtype == jnp.float32


@needs_jumanji
def test_multi_discrete_masks_per_factor_and_joint():
    """Cleaner: one mask row per agent -> MultiDiscrete, rows concatenated; Minesweeper: a joint
    (10, 10) mask -> Discrete(100) over the flat index, the joint mask flattened."""
    cleaner = make("jumanji/Cleaner-v0")
    assert cleaner.action_space == MultiDiscrete((4, 4, 4)) and cleaner.max_episode_steps == 100
    assert cleaner.observation_space.spaces[ACTION_MASK] == MultiBinary(12)
    mines = make("jumanji/Minesweeper-v0")
    assert mines.action_space == Discrete(100) and mines.max_episode_steps is None
    assert mines.observation_space.spaces[ACTION_MASK] == MultiBinary(100)
    _box(mines.observation_space.spaces["board"], -1.0, 8.0, (10, 10))
    cube = make("jumanji/RubiksCube-partly-scrambled-v0")  # no mask at all
    assert cube.action_space == MultiDiscrete((6, 1, 3)) and ACTION_MASK not in cube.observation_space.spaces


@needs_jumanji
def test_minesweeper_flat_action_is_the_joint_choice():
    import jumanji

    env, suite = make("jumanji/Minesweeper-v0"), jumanji.make("Minesweeper-v0")

    def both(key, action):
        state, ts = env.reset(key)
        _, ts = env.step(key, state, action)
        state, ref = suite.reset(key)
        _, ref = suite.step(state, jnp.array([action // 10, action % 10], jnp.int32))
        return ts, ref

    with foreign_promotion():  # (the suite's own code runs under standard promotion)
        ts, ref = jax.jit(both)(jax.random.key(3), jnp.int32(57))
    np.testing.assert_array_equal(ts.obs["board"], ref.observation.board.astype(np.float32))
    np.testing.assert_array_equal(ts.obs[ACTION_MASK], ref.observation.action_mask.reshape(-1).astype(np.int32))
    assert ts.obs[ACTION_MASK][57] == 0  # the revealed square is no longer a legal move
    assert float(ts.reward) == float(ref.reward)


@needs_jumanji
def test_snake_check_env_steps():
    check_env_steps(make("jumanji/Snake-v1"), num_steps=200, num_envs=2)


@needs_jumanji
def test_snake_matches_jumanji_with_resets_and_time_limit():
    """Snake with a 10-step limit (its episodes end dead or at the limit) for 150 steps, through
    `AutoReset(make(...))` and through jumanji's reset/step with the same keys and actions: the
    same observations, masks and rewards; `terminated` where jumanji ends an episode before the
    limit (discount 0), `truncated` where it ends at the limit."""
    import jumanji

    env = make("jumanji/Snake-v1", time_limit=10)
    assert env.max_episode_steps == 10
    suite = jumanji.make("Snake-v1", time_limit=10)
    stepper = AutoReset(env)

    def run(key):
        reset_key, key = jax.random.split(key)
        state, _ = stepper.reset(reset_key)
        ref_state, ref = suite.reset(reset_key)

        def step(carry, key):
            state, ref_state, ref = carry
            action_key, key = jax.random.split(key)
            # Mostly legal moves (jumanji's Snake masks the deadly ones), a uniform one now and then.
            logits = jnp.where(ref.observation.action_mask | jax.random.bernoulli(key, 0.1), 0.0, -jnp.inf)
            action = jax.random.categorical(action_key, logits).astype(jnp.int32)
            state, ts = stepper.step(key, state, action)
            ref_state, ref = suite.step(ref_state, action)
            out = dict(
                last=ref.last(), discount=ref.discount, steps=ref_state.step_count, reward=ref.reward,
                grid=ref.observation.grid, mask=ref.observation.action_mask,
                ours=(ts.info["final_obs"], ts.reward, ts.terminated, ts.truncated),
            )  # fmt: skip
            _, reset_key = jax.random.split(key)  # AutoReset's reset key
            restart = suite.reset(reset_key)
            ref_state, ref = jax.lax.cond(ref.last(), lambda: restart, lambda: (ref_state, ref))
            return (state, ref_state, ref), out

        _, out = jax.lax.scan(step, (state, ref_state, ref), jax.random.split(key, 150))
        return out

    with foreign_promotion():  # (the suite's own code runs under standard promotion)
        out = jax.device_get(jax.jit(run)(jax.random.key(0)))
    obs, reward, terminated, truncated = out["ours"]
    np.testing.assert_array_equal(obs["grid"], out["grid"].astype(np.float32))
    np.testing.assert_array_equal(obs[ACTION_MASK], out["mask"].astype(np.int32))
    np.testing.assert_array_equal(reward, out["reward"])
    at_limit = out["steps"] >= 10
    np.testing.assert_array_equal(terminated, out["last"] & ~at_limit)
    np.testing.assert_array_equal(truncated, out["last"] & at_limit)
    assert (out["discount"][out["last"]] == 0).all()  # jumanji itself calls both a termination
    assert terminated.sum() >= 1 and truncated.sum() >= 1, (terminated.sum(), truncated.sum())
    assert (obs[ACTION_MASK] == 0).any()  # an illegal move shows in the mask


@needs_jumanji
@pytest.mark.exhaustive  # the fast tier covers Snake, Cleaner, Minesweeper and RubiksCube
def test_level_based_foraging_trusts_jumanji_truncation_and_sums_rewards():
    """LevelBasedForaging reports its own time limit as a truncation (discount > 0) and gives one
    reward per agent: summed into the reward, each agent's in info['agent_rewards']."""
    env = make("jumanji/LevelBasedForaging-v0", time_limit=5)
    check_env_steps(env, num_steps=60, num_envs=2)
    state, ts = env.reset(jax.random.key(0))
    assert ts.info["agent_rewards"].shape == (2,)
    step = jax.jit(env.step)
    for _ in range(5):
        state, ts = step(jax.random.key(0), state, jnp.zeros(2, jnp.int32))
    assert float(ts.reward) == float(ts.info["agent_rewards"].sum())
    assert bool(ts.truncated) and not bool(ts.terminated)


@needs_jumanji
def test_jumanji_env_from_an_instance_and_bad_arguments():
    import jumanji

    env = JumanjiEnv(jumanji.make("Game2048-v1"))
    assert env.action_space == Discrete(4) and env.name == "jumanji/Game2048"
    with pytest.raises(ValueError, match=r"make\('jumanji/Snake-v1'\) got keyword arguments \['colour'\]"):
        make("jumanji/Snake-v1", colour=3)
    with pytest.raises(ValueError, match=r"keyword arguments \['time_limit'\] need a jumanji id, not an instance"):
        JumanjiEnv(jumanji.make("Snake-v1"), time_limit=3)
    with pytest.raises(ValueError, match=r"JumanjiEnv\(env\) must be a jumanji id or a jumanji Environment"):
        JumanjiEnv(3)
    with pytest.raises(ValueError, match=r"JumanjiEnv\(env\): unknown jumanji id 'Snake'"):
        JumanjiEnv("Snake")


@needs_jumanji
def test_a_continuous_or_bounded_action_is_refused_in_one_line():
    with pytest.raises(ValueError, match=r"jumanji env 'MultiCVRP-v0' has a BoundedArray action spec .*; eqxrl supports "
                                         r"DiscreteArray and MultiDiscreteArray actions"):  # fmt: skip
        make("jumanji/MultiCVRP-v0")


@needs_jumanji
def test_unknown_id_suggests_close_names(monkeypatch):
    suite_equivalence.assert_suggests(monkeypatch, "jumanji/Snake-v2", "jumanji/Snake-v1")


def test_missing_jumanji_is_one_import_error_line(monkeypatch):
    match = r"^make\('jumanji/Snake-v1'\) needs the jumanji suite: pip install 'eqxrl\[jumanji\]'$"
    suite_equivalence.assert_missing_suite(monkeypatch, "jumanji/Snake-v1", match, ["jumanji"])
