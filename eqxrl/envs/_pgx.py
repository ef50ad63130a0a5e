"""Adapter from pgx games to the eqxrl protocol.

pgx's `init(key)` returns a `State` and `step(state, action, key)` the next one; a state that is
already `terminated` (or `truncated`) steps to itself with zero rewards: pgx does not reset by
itself, so eqxrl's `AutoReset` does. Every pgx game has legal-action masks; an illegal action
ends the game at once with a penalty (-1) for the player who took it.

A game of two or more players is played from one seat (the agent's), the other seats by a
fixed opponent policy; one eqxrl step is the agent's move followed by every opponent move
until it is the agent's turn again (or the game is over).
"""

import functools
import inspect
import io
from collections.abc import Callable
from typing import Any, ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Int, PyTree

from ..core import EnvState, Key
from ..core import foreign_promotion as _foreign_promotion
from ._base import ACTION_MASK, AbstractEnv, Renderer, TimeStep
from ._make import register_suite
from ._spaces import Box, Dict, Discrete, MultiBinary
from ._static import StaticHandle, hashable_or
from ._suite import AbstractSuiteEnv, import_suite
from ._wrappers import TimeLimit

PREFIX = "pgx/"
OBSERVATION = "observation"

# `pgx.make` builds Go with these (its constructor's defaults differ); keywords override them.
_DEFAULTS = {"go_9x9": {"size": 9, "komi": 7.5}, "go_19x19": {"size": 19, "komi": 7.5}}


def import_pgx(name: str = "<id>") -> Any:
    """`import pgx`, or the one-line `ImportError` that says how to install it."""
    return import_suite("pgx", f"make('{PREFIX}{name}')", "pgx")


def pgx_ids() -> list[str]:
    """Every pgx id (`"2048"`, `"minatar-breakout"`, `"tic_tac_toe"`, ...) `make("pgx/<id>")`
    accepts: `pgx.available_envs()`."""
    return list(import_pgx().available_envs())


def uniform_opponent(key: Key, obs: Array, legal_action_mask: Array) -> Array:
    """The default opponent: a move drawn uniformly among the legal ones."""
    del obs
    logits = jnp.where(legal_action_mask > 0, 0.0, -jnp.inf)
    return jax.random.categorical(key, logits).astype(jnp.int32)


class PgxState(eqx.Module):
    """The pgx game state and the agent's seat (its pgx player id) in this episode."""

    game: PyTree
    player: Int[Array, ""]


class PgxEnv(AbstractSuiteEnv):
    """A pgx game behind the eqxrl protocol.

    Observation: a `Dict` with `"observation"`, pgx's observation of the agent's seat as a
    float32 `Box` (bounds [0, 1] where pgx's is boolean, unbounded otherwise), and
    `"action_mask"`, pgx's `legal_action_mask` as a `MultiBinary(num_actions)` (int32; pgx
    marks every action legal once the game is over). Action: `Discrete(num_actions)`.

    Games of several players (`tic_tac_toe`, `connect_four`, `go_9x9`, ...): the agent plays
    the seat `player` (a pgx player id; with `player=None`, a seat drawn uniformly at random
    each episode, in `state.player` and `info["player"]`), an `opponent` policy every other
    seat. `opponent(key, obs, legal_action_mask) -> action` sees what the agent would see in
    its place (the float32 observation of the player to move, the int32 0/1 mask), so an
    eqxrl policy can play itself; the default draws uniformly among the legal moves. The
    reward is the agent's (pgx's `rewards[player]`) summed over the agent's move and the
    opponent moves that follow it; the observation is always the agent's, the final one
    included. Should the game end before the agent's first move, the first step is a no-op
    that ends the episode with zero reward.

    Termination vs truncation: pgx's `terminated` (the game is over, by its rules: MinAtar
    Freeway's 2500-step clock and Go's move cap included) is `terminated`; pgx's
    `truncated` (which no pgx 2.6 game sets) is `truncated`. pgx games have no time limit
    of their own: `make("pgx/<id>", max_episode_steps=n)` adds a `TimeLimit` (truncation),
    counting the agent's steps.
    """

    handle: StaticHandle = eqx.field(static=True)
    env_name: str = eqx.field(static=True)
    num_players: int = eqx.field(static=True)
    num_actions: int = eqx.field(static=True)
    player: int | None = eqx.field(static=True)
    opponent: Callable[..., Array] = eqx.field(static=True)
    prefix: ClassVar[str] = PREFIX
    pgx_env = AbstractSuiteEnv.suite_env

    def __init__(self, name: str, *, player: int | None = None, opponent: Any = None,
                 **kwargs: Any):  # fmt: skip
        """**Arguments:**

        - `name`: a pgx id (`"2048"`, `"minatar-breakout"`, `"tic_tac_toe"`): `pgx.available_envs()`.
        - `player`: the agent's seat in a game of several players (`0 <= player < num_players`),
          or None (default) for a seat drawn at random each episode.
        - `opponent`: `opponent(key, obs, legal_action_mask) -> action`, the policy of the other
          seats; uniform over legal moves by default. It is a static field (hashable): a policy
          with array leaves goes in a function that calls it (its arrays become constants of
          the compiled step).
        - `**kwargs`: the pgx game constructor's keywords (MinAtar's `sticky_action_prob`, Go's
          `komi`, ...).
        """
        pgx = import_pgx(name)
        if name not in pgx.available_envs():
            raise ValueError(f"PgxEnv(name): unknown pgx id {name!r}; pgx has {pgx_ids()}")
        with _foreign_promotion():
            env = pgx.make(name)
            if kwargs:
                accepted = [p for p in inspect.signature(type(env)).parameters if p not in ("self", "args", "kwargs")]
                unknown = sorted(set(kwargs) - set(accepted))
                if unknown:
                    raise ValueError(f"make('{PREFIX}{name}') got unknown keyword argument(s) {unknown}; the pgx "
                                     f"game takes {accepted} (and player=, opponent=, max_episode_steps=)")  # fmt: skip
                env = type(env)(**{**_DEFAULTS.get(name, {}), **kwargs})
            num_players, num_actions = int(env.num_players), int(env.num_actions)
        if player is not None and (isinstance(player, bool) or not isinstance(player, int)
                                   or not 0 <= player < num_players):  # fmt: skip
            raise ValueError(f"PgxEnv(player) must be None or a seat 0..{num_players - 1} of {name!r}, got {player!r}")
        if opponent is not None and not callable(opponent):
            raise ValueError(f"PgxEnv(opponent) must be a function (key, obs, legal_action_mask) -> action, got {opponent!r}")
        if opponent is not None:
            try:
                hash(opponent)
            except TypeError:  # (an eqx.Module policy with array leaves): it sits in a static field
                raise ValueError("PgxEnv(opponent) must be hashable (it is a static field of the env): wrap a policy "
                                 "with array leaves in a function, `lambda key, obs, mask: policy(key, obs, mask)`") from None
        if opponent is not None and num_players == 1:
            raise ValueError(f"PgxEnv(opponent): pgx's {name!r} has one player; opponent= is for games of several")
        self.handle = StaticHandle(env, hashable_or((PREFIX, name, tuple(sorted(kwargs.items()))), env))
        self.env_name = name
        self.num_players = num_players
        self.num_actions = num_actions
        self.player = player
        self.opponent = uniform_opponent if opponent is None else opponent

    @property
    def action_space(self) -> Discrete:
        return Discrete(self.num_actions)

    @property
    def renderer(self) -> Renderer:
        """The game state's `to_svg()`, turned into pixels by CairoSVG (the `video` extra, which
        needs the system's Cairo library, `libcairo2`: checked first), at pgx's frame rate."""
        return Renderer("pgx", functools.partial(_pgx_frames, self), fps=PGX_FPS, check=functools.partial(import_cairosvg, self))

    @property
    def observation_space(self) -> Dict:
        with _foreign_promotion():
            obs = jax.eval_shape(self.pgx_env.init, jax.random.key(0)).observation
        high = 1.0 if obs.dtype == jnp.bool_ else jnp.inf
        low = 0.0 if obs.dtype == jnp.bool_ else -jnp.inf
        return Dict({OBSERVATION: Box(low, high, tuple(obs.shape)), ACTION_MASK: MultiBinary(self.num_actions)})

    def _observe(self, game: Any, player: Array) -> dict[str, Array]:
        if self.num_players == 1:
            obs = game.observation
        else:  # the agent's own view, also once the game is over on an opponent's move
            obs = jax.lax.stop_gradient(self.pgx_env._observe(game, player))
        return {OBSERVATION: obs.astype(jnp.float32), ACTION_MASK: game.legal_action_mask.astype(jnp.int32)}

    def _opponents(self, key: Key, game: Any, player: Array) -> tuple[Any, Array]:
        """Play the opponent seats until it is `player`'s turn or the game is over; **returns**
        the game and `player`'s reward over those moves."""
        env = self.pgx_env

        def waiting(carry):
            game, _, _ = carry
            return (game.current_player != player) & ~(game.terminated | game.truncated)

        def move(carry):
            game, reward, key = carry
            key, act_key, step_key = jax.random.split(key, 3)
            action = self.opponent(act_key, game.observation.astype(jnp.float32), game.legal_action_mask.astype(jnp.int32))
            game = env.step(game, jnp.asarray(action, jnp.int32), step_key)
            return game, reward + game.rewards[player], key

        game, reward, _ = jax.lax.while_loop(waiting, move, (game, jnp.zeros((), jnp.float32), key))
        return game, reward

    def _timestep(self, game: Any, player: Array, reward: Array) -> TimeStep:
        info = {} if self.num_players == 1 else {"player": player}
        terminated, truncated = jnp.asarray(game.terminated, bool), jnp.asarray(game.truncated, bool)
        return TimeStep(self._observe(game, player), jnp.asarray(reward, jnp.float32), terminated, truncated, info)

    def reset(self, key: Key) -> tuple[PgxState, TimeStep]:
        init_key, seat_key, opponent_key = jax.random.split(key, 3)
        with _foreign_promotion():
            game = self.pgx_env.init(init_key)
            if self.num_players == 1 or self.player is not None:
                player = jnp.asarray(0 if self.player is None else self.player, jnp.int32)
            else:
                player = jax.random.randint(seat_key, (), 0, self.num_players, dtype=jnp.int32)
            if self.num_players > 1:
                game, _ = self._opponents(opponent_key, game, player)
            ts = self._timestep(game, player, jnp.zeros((), jnp.float32))
        false = jnp.zeros((), bool)
        return PgxState(game, player), eqx.tree_at(lambda t: (t.terminated, t.truncated), ts, (false, false))

    def step(self, key: Key, state: EnvState, action: Array) -> tuple[PgxState, TimeStep]:
        step_key, opponent_key = jax.random.split(key)
        player = state.player
        with _foreign_promotion():
            game = self.pgx_env.step(state.game, jnp.asarray(action, jnp.int32), step_key)
            reward = game.rewards[player]
            if self.num_players > 1:
                game, more = self._opponents(opponent_key, game, player)
                reward = reward + more
            ts = self._timestep(game, player, reward)
        return PgxState(game, player), ts


PGX_FPS = 5
"""pgx's frame rate: its SVG animations' default of 0.2 s a frame (`pgx.set_visualization_config`)."""


def import_cairosvg(env: PgxEnv, owner: str) -> Any:
    """`cairosvg`, or a one-line `ValueError` naming `owner` and saying what to install."""
    try:
        import cairosvg
    except (ImportError, OSError) as e:  # (OSError: cairocffi found no Cairo library)
        reason = str(e).strip().splitlines()[0][:120] if str(e).strip() else type(e).__name__
        raise ValueError(
            f"{owner}: pgx env {env.name!r} draws SVG, which needs CairoSVG and the system's Cairo library to become "
            f"frames ({reason}): pip install 'eqxrl[video]', and install Cairo (libcairo2 on Debian and Ubuntu)"
        ) from None
    return cairosvg


def _pgx_frames(env: PgxEnv, seq: list[Any]) -> list[np.ndarray]:
    from PIL import Image

    cairosvg = import_cairosvg(env, "render")
    frames = []
    with _foreign_promotion():
        for state in seq:
            png = cairosvg.svg2png(bytestring=state.game.to_svg().encode())
            frames.append(np.asarray(Image.open(io.BytesIO(png)).convert("RGB")))
    return frames


def _make_pgx(name: str, max_episode_steps: int | None = None, **kwargs: Any) -> AbstractEnv:
    pgx = import_pgx(name)
    if name not in pgx.available_envs():
        raise KeyError(name)
    env = PgxEnv(name, **kwargs)
    return env if max_episode_steps is None else TimeLimit(env, max_episode_steps)


register_suite(PREFIX, _make_pgx, pgx_ids)
