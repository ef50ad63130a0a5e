"""The pgx adapter (`make("pgx/<id>")`, `eqxrl.envs.PgxEnv`) against pgx's own API."""

import importlib.util

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from eqxrl.core import foreign_promotion
from eqxrl.envs import ACTION_MASK, AutoReset, Box, Dict, Discrete, MultiBinary, PgxEnv, TimeLimit, make
from eqxrl.testing import check_env_steps

import suite_equivalence

needs_pgx = pytest.mark.skipif(importlib.util.find_spec("pgx") is None, reason="pgx is not installed")


def _first_legal(key, obs, mask):
    """A deterministic opponent: the lowest legal move (it checks what it is given, too)."""
    assert obs.dtype == jnp.float32 and mask.dtype == jnp.int32
    return jnp.argmax(mask).astype(jnp.int32)


@needs_pgx
def test_spaces_and_time_limit():
    env = make("pgx/minatar-breakout")
    assert isinstance(env, PgxEnv) and env.name == "pgx/minatar-breakout" and env.max_episode_steps is None
    assert env.action_space == Discrete(3)
    space = env.observation_space
    assert isinstance(space, Dict) and space.spaces[ACTION_MASK] == MultiBinary(3)
    assert isinstance(space.spaces["observation"], Box) and space.spaces["observation"].shape == (10, 10, 4)
    assert float(space.spaces["observation"].low.min()) == 0.0 and float(space.spaces["observation"].high.max()) == 1.0
    limited = make("pgx/minatar-breakout", max_episode_steps=50)
    assert isinstance(limited, TimeLimit) and limited.max_episode_steps == 50
    ttt = make("pgx/tic_tac_toe")
    assert ttt.action_space == Discrete(9) and ttt.observation_space.spaces["observation"].shape == (3, 3, 2)
    assert make("pgx/backgammon").observation_space.spaces["observation"].high.max() == np.inf  # an int32 observation


@pytest.mark.slow
@needs_pgx
def test_breakout_check_env_steps():
    check_env_steps(make("pgx/minatar-breakout"), num_steps=200, num_envs=2)


@pytest.mark.slow
@needs_pgx
def test_tic_tac_toe_check_env_steps():
    check_env_steps(make("pgx/tic_tac_toe"), num_steps=100, num_envs=2)


@needs_pgx
def test_breakout_matches_pgx_with_resets():
    """150 steps of MinAtar Breakout through `AutoReset(make(...))` and through pgx's init/step with
    the same keys and actions: the same observations, masks, rewards and terminations."""
    import pgx

    stepper, suite = AutoReset(make("pgx/minatar-breakout")), pgx.make("minatar-breakout")

    def run(key):
        reset_key, key = jax.random.split(key)
        state, _ = stepper.reset(reset_key)
        game = suite.init(jax.random.split(reset_key, 3)[0])

        def step(carry, key):
            state, game = carry
            action = jax.random.randint(jax.random.fold_in(key, 1), (), 0, 3, dtype=jnp.int32)
            state, ts = stepper.step(key, state, action)
            step_key, reset_key = jax.random.split(key)  # AutoReset's keys
            game = suite.step(game, action, jax.random.split(step_key)[0])  # PgxEnv.step's
            out = dict(game=(game.observation, game.legal_action_mask, game.rewards[0], game.terminated, game.truncated),
                       ours=(ts.info["final_obs"], ts.reward, ts.terminated, ts.truncated))  # fmt: skip
            game = jax.lax.cond(game.terminated, lambda: suite.init(jax.random.split(reset_key, 3)[0]), lambda: game)
            return (state, game), out

        return jax.lax.scan(step, (state, game), jax.random.split(key, 150))[1]

    with foreign_promotion():  # (the suite's own code runs under standard promotion)
        out = jax.device_get(jax.jit(run)(jax.random.key(0)))
    obs, mask, reward, terminated, truncated = out["game"]
    ours, our_reward, our_terminated, our_truncated = out["ours"]
    np.testing.assert_array_equal(ours["observation"], obs.astype(np.float32))
    np.testing.assert_array_equal(ours[ACTION_MASK], mask.astype(np.int32))
    np.testing.assert_array_equal(our_reward, reward)
    np.testing.assert_array_equal(our_terminated, terminated)
    np.testing.assert_array_equal(our_truncated, truncated)
    assert terminated.sum() >= 2 and reward.sum() >= 1, (terminated.sum(), reward.sum())


@needs_pgx
def test_tic_tac_toe_matches_pgx_against_an_opponent():
    """Tic-tac-toe with a random seat per episode and a deterministic opponent, 60 steps through
    `AutoReset(make(...))` and through pgx's init/step (the agent's move, then the opponent's if
    the game goes on): the agent's observations, masks, rewards, terminations and seats agree."""
    import pgx

    stepper, suite = AutoReset(make("pgx/tic_tac_toe", opponent=_first_legal)), pgx.make("tic_tac_toe")

    def opponent_moves(game, key, player):
        """PgxEnv's reset/step after the agent's move: the opponent plays while it is its turn."""
        key, act_key, step_key = jax.random.split(key, 3)
        move = _first_legal(act_key, game.observation.astype(jnp.float32), game.legal_action_mask.astype(jnp.int32))
        waiting = (game.current_player != player) & ~game.terminated
        game = jax.lax.cond(waiting, lambda: suite.step(game, move, step_key), lambda: game)
        return game, jnp.where(waiting, game.rewards[player], 0.0)

    def start(reset_key):
        init_key, seat_key, opponent_key = jax.random.split(reset_key, 3)
        player = jax.random.randint(seat_key, (), 0, 2, dtype=jnp.int32)
        return opponent_moves(suite.init(init_key), opponent_key, player)[0], player

    def run(key):
        reset_key, key = jax.random.split(key)
        state, ts = stepper.reset(reset_key)
        game, player = start(reset_key)
        first = (ts.obs["observation"], game.observation, state.player, player)

        def step(carry, key):
            state, game, player = carry
            logits = jnp.where(game.legal_action_mask, 0.0, -jnp.inf)
            action = jax.random.categorical(jax.random.fold_in(key, 1), logits).astype(jnp.int32)
            state, ts = stepper.step(key, state, action)
            step_key, reset_key = jax.random.split(key)
            agent_key, opponent_key = jax.random.split(step_key)
            game = suite.step(game, action, agent_key)
            reward = game.rewards[player]
            game, more = opponent_moves(game, opponent_key, player)
            reward = reward + more
            view = suite._observe(game, player)  # the agent's own view, at the end of the game too
            out = dict(game=(view, game.legal_action_mask, reward, game.terminated, player),
                       ours=(ts.info["final_obs"], ts.reward, ts.terminated, ts.info["player"]))  # fmt: skip
            game, player = jax.lax.cond(game.terminated, lambda: start(reset_key), lambda: (game, player))
            return (state, game, player), out

        return first, jax.lax.scan(step, (state, game, player), jax.random.split(key, 60))[1]

    with foreign_promotion():  # (the suite's own code runs under standard promotion)
        first, out = jax.device_get(jax.jit(run)(jax.random.key(0)))
    np.testing.assert_array_equal(first[0], first[1].astype(np.float32))
    assert first[2] == first[3]
    view, mask, reward, terminated, player = out["game"]
    ours, our_reward, our_terminated, our_player = out["ours"]
    np.testing.assert_array_equal(ours["observation"], view.astype(np.float32))
    np.testing.assert_array_equal(ours[ACTION_MASK], mask.astype(np.int32))
    np.testing.assert_array_equal(our_player, player)
    np.testing.assert_array_equal(our_terminated, terminated)
    np.testing.assert_array_equal(our_reward, reward)
    assert set(np.unique(player)) == {0, 1}  # both seats were played
    assert {-1.0, 1.0} <= set(np.unique(reward)), np.unique(reward)  # the agent won and lost
    assert (ours[ACTION_MASK] == 0).any()  # occupied squares show as illegal


@needs_pgx
def test_an_illegal_move_ends_the_game_with_pgx_penalty():
    env = make("pgx/tic_tac_toe", player=0)
    state, ts = env.reset(jax.random.key(0))
    assert int(state.player) == 0 and ts.obs[ACTION_MASK].sum() == 9  # the agent moves first
    state, ts = env.step(jax.random.key(1), state, jnp.int32(4))
    taken = np.flatnonzero(np.asarray(ts.obs[ACTION_MASK]) == 0)
    assert 4 in taken and len(taken) == 2  # the agent's square and the opponent's
    _, ts = env.step(jax.random.key(2), state, jnp.int32(4))
    assert bool(ts.terminated) and float(ts.reward) == -1.0


@needs_pgx
def test_bad_arguments_are_one_line_errors():
    with pytest.raises(ValueError, match=r"PgxEnv\(player\) must be None or a seat 0..1 of 'tic_tac_toe', got 2"):
        make("pgx/tic_tac_toe", player=2)
    with pytest.raises(ValueError, match=r"PgxEnv\(opponent\): pgx's '2048' has one player"):
        make("pgx/2048", opponent=_first_legal)
    with pytest.raises(ValueError, match=r"PgxEnv\(opponent\) must be a function"):
        make("pgx/tic_tac_toe", opponent="random")

    class Policy:
        __hash__ = None  # (like an eqx.Module with array leaves)

        def __call__(self, key, obs, mask):
            return jnp.argmax(mask)

    with pytest.raises(ValueError, match=r"PgxEnv\(opponent\) must be hashable \(it is a static field of the env\)"):
        make("pgx/tic_tac_toe", opponent=Policy())
    with pytest.raises(ValueError, match=r"make\('pgx/minatar-breakout'\) got unknown keyword argument\(s\) \['speed'\]; "
                                         r"the pgx game takes \['use_minimal_action_set', 'sticky_action_prob'\]"):  # fmt: skip
        make("pgx/minatar-breakout", speed=2)
    env = make("pgx/minatar-breakout", sticky_action_prob=0.0)
    assert env.pgx_env.sticky_action_prob == 0.0


@needs_pgx
def test_unknown_id_suggests_close_names(monkeypatch):
    suite_equivalence.assert_suggests(monkeypatch, "pgx/tic_tac_to", "pgx/tic_tac_toe")


def test_missing_pgx_is_one_import_error_line(monkeypatch):
    match = r"^make\('pgx/2048'\) needs the pgx suite: pip install 'eqxrl\[pgx\]'$"
    suite_equivalence.assert_missing_suite(monkeypatch, "pgx/2048", match, ["pgx"])


@needs_pgx
@pytest.mark.exhaustive  # 85 s on 2 cores: the fast tier covers breakout and tic-tac-toe
@pytest.mark.parametrize("name", ["pgx/2048", "pgx/connect_four", "pgx/sparrow_mahjong", "pgx/backgammon"])
def test_more_games_check_env_steps(name):
    check_env_steps(make(name), num_steps=100, num_envs=2)
