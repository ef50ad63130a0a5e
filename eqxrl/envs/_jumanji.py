"""Adapter from jumanji environments to the eqxrl protocol.

jumanji's `reset(key)` returns `(state, TimeStep)` and `step(state, action)` (no key: the
state carries its own) returns the next pair; neither resets by itself (jumanji's
`AutoResetWrapper` is separate), so the adapter steps the env as it is and eqxrl's `AutoReset`
resets it. jumanji's `TimeStep` ends an episode with `step_type == LAST`; `discount == 0`
there is a terminal state, `discount > 0` a truncation (jumanji's `truncation`). Most jumanji
envs with a `time_limit` (Snake, Tetris, Maze, PacMan, Cleaner, RobotWarehouse, ...) end the
episode at their limit with `termination` (discount 0), like a terminal state: the adapter
reports a last step at `state.step_count >= time_limit` as truncated for them.
"""

import dataclasses
import functools
import math
import threading
from typing import Any, ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array

from ..core import EnvState, Key
from ..core import foreign_promotion as _foreign_promotion
from ._base import ACTION_MASK, AbstractEnv, Renderer, TimeStep
from ._make import register_suite
from ._spaces import AbstractSpace, Box, Dict, Discrete, MultiBinary, MultiDiscrete
from ._static import StaticHandle, hashable_or
from ._suite import AbstractSuiteEnv, import_suite

PREFIX = "jumanji/"

# jumanji envs that report their own time limit with `jumanji.types.truncation` (discount > 0),
# and a natural end on the limit's step with `termination`: their discounts are trusted as they are.
_TRUNCATING = frozenset({"LevelBasedForaging", "Connector"})
# Observation fields whose jumanji spec is narrower than what the env returns: (env class, field) -> low.
_LOWER = {("TSP", "position"): -1.0}  # TSP's reset position is -1 (no city yet); its spec starts at 0


def import_jumanji(name: str = "<id>") -> Any:
    """`import jumanji`, or the one-line `ImportError` that says how to install it."""
    return import_suite("jumanji", f"make('{PREFIX}{name}')", "jumanji")


def jumanji_ids() -> list[str]:
    """Every jumanji id (`"Snake-v1"`, ...) `make("jumanji/<id>")` accepts: jumanji's registry."""
    return sorted(import_jumanji().registered_environments())


def _fields(value: Any) -> dict[str, Any] | None:
    """A structured observation (named tuple, dataclass, mapping) as a dict of its fields; None for a leaf."""
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        return dict(zip(value._fields, value))
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return dict(value)
    return None


def _leaf_space(spec: Any, shape: tuple[int, ...], lower: float | None = None, upper: int | None = None) -> Box:
    """A float32 `Box` with the bounds jumanji's spec gives (unbounded for a plain `Array`)."""
    low, high = getattr(spec, "minimum", -np.inf), getattr(spec, "maximum", np.inf)
    low, high = np.asarray(low, np.float32), np.asarray(high, np.float32)
    if lower is not None:
        low = np.minimum(low, np.float32(lower))
    if upper is not None:  # a step counter's spec stops one short of the limit its last step reaches
        high = np.maximum(high, np.float32(upper))
    return Box(low, high, shape)


def _obs_space(value: Any, spec: Any, time_limit: int | None, kind: str, top: bool = True) -> Any:
    """The `Dict` of a (nested) observation's spaces; at the top, a dict of them (the caller adds the mask)."""
    fields = _fields(value)
    if fields is None:
        return _leaf_space(spec, tuple(value.shape))
    spaces = {}
    for name, sub in fields.items():
        if top and name == ACTION_MASK:
            continue  # (set by the caller: its shape depends on the actions)
        if _fields(sub) is not None:
            spaces[name] = _obs_space(sub, spec[name], time_limit, kind, top=False)
        else:
            upper = time_limit if top and name == "step_count" else None
            lower = _LOWER.get((kind, name)) if top else None
            spaces[name] = _leaf_space(spec[name], tuple(sub.shape), lower, upper)
    return spaces if top else Dict(spaces)


def _convert(value: Any) -> Any:
    fields = _fields(value)
    if fields is None:
        return jnp.asarray(value).astype(jnp.float32)
    return {name: _convert(sub) for name, sub in fields.items()}


class JumanjiEnv(AbstractSuiteEnv):
    """A jumanji environment behind the eqxrl protocol.

    Observations: jumanji's observation (a named tuple) becomes a `Dict` keyed by its field
    names (nested ones nest), each leaf a float32 `Box` with the spec's bounds; the
    `action_mask` field becomes a `MultiBinary` (int32 0/1) under `"action_mask"`.
    Actions: a `DiscreteArray` action is `Discrete(n)` (mask `(n,)`); a `MultiDiscreteArray`
    action with one mask row per factor (the multi-agent envs: Cleaner, Connector,
    RobotWarehouse, LevelBasedForaging, MMST, JobShop) or no mask (RubiksCube) is
    `MultiDiscrete(nvec)` (mask: the rows one after another, `sum(nvec)` entries); one whose
    mask is joint, of shape `nvec` (Minesweeper, Tetris, BinPack, FlatPack, Sudoku), is
    `Discrete(prod(nvec))`: the action is the row-major flat index into the joint choice
    (`jnp.unravel_index`), and the mask is the joint mask flattened, so that it stays exact.
    Other actions (continuous, `BoundedArray`) are refused.

    Rewards: a per-agent reward vector is summed into the team reward (each agent's is in
    `info["agent_rewards"]`); jumanji's `extras` are in `info["extras"]`.

    Termination vs truncation: `terminated` where jumanji's last step has `discount == 0`,
    `truncated` where it has `discount > 0`; an env with a `time_limit` that ends its
    episodes there with `termination` (all but LevelBasedForaging and Connector) is
    truncated on a last step with `step_count >= time_limit` instead (a natural end that
    falls on that very step is then reported as truncated too: jumanji does not tell them
    apart). `max_episode_steps` is the env's `time_limit` (None without one).
    """

    handle: StaticHandle = eqx.field(static=True)
    env_name: str = eqx.field(static=True)
    mask_kind: str = eqx.field(static=True)  # "none", "discrete", "factored" or "joint"
    nvec: tuple[int, ...] = eqx.field(static=True)  # () for a Discrete action
    time_limit: int | None = eqx.field(static=True)
    counts_steps: bool = eqx.field(static=True)  # whether jumanji's state has `step_count`
    prefix: ClassVar[str] = PREFIX
    jumanji_env = AbstractSuiteEnv.suite_env

    def __init__(self, env: Any, *, key: Any = None, **kwargs: Any):
        """**Arguments:**

        - `env`: a jumanji id (`"Snake-v1"`) or a jumanji `Environment` instance.
        - `key`: a value identifying `env` for the compilation cache (default: the id and
          `kwargs`, or the instance itself).
        - `**kwargs`: the jumanji env constructor's keywords (with an id only), as for
          `jumanji.make(id, **kwargs)`.
        """
        jumanji = import_jumanji(env if isinstance(env, str) else type(env).__name__)
        if isinstance(env, str):
            name = env
            if name not in jumanji.registered_environments():
                raise ValueError(f"JumanjiEnv(env): unknown jumanji id {name!r}; jumanji has {jumanji_ids()}")
            with _foreign_promotion():
                try:
                    env = jumanji.make(name, **kwargs)
                except TypeError as e:
                    raise ValueError(f"make('{PREFIX}{name}') got keyword arguments {sorted(kwargs)} that jumanji's "
                                     f"constructor refuses: {e}") from None  # fmt: skip
            if key is None:
                # (an unhashable keyword value: the instance identifies the env)
                key = hashable_or((PREFIX, name, tuple(sorted(kwargs.items()))), env)
        else:
            if kwargs:
                raise ValueError(f"JumanjiEnv: keyword arguments {sorted(kwargs)} need a jumanji id, not an instance")
            if not isinstance(env, jumanji.Environment):
                raise ValueError(f"JumanjiEnv(env) must be a jumanji id or a jumanji Environment, got {env!r}")
            name = type(env).__name__
        self.handle = StaticHandle(env, env if key is None else key)
        self.env_name = name
        with _foreign_promotion():
            state, ts = jax.eval_shape(env.reset, jax.random.key(0))
            action_spec = env.action_spec
        limit = getattr(env, "time_limit", None)
        self.counts_steps = hasattr(state, "step_count")
        self.time_limit = int(limit) if isinstance(limit, (int, np.integer)) and self.counts_steps else None
        self.mask_kind, self.nvec = self._action_layout(action_spec, ts.observation)

    def _action_layout(self, spec: Any, obs: Any) -> tuple[str, tuple[int, ...]]:
        from jumanji import specs

        fields = _fields(obs)
        mask = None if fields is None else fields.get(ACTION_MASK)
        mask_shape = None if mask is None else tuple(mask.shape)
        refuse = f"jumanji env {self.env_name!r} has a {type(spec).__name__} action spec {spec!r}"
        if isinstance(spec, specs.MultiDiscreteArray):
            nvec = tuple(int(n) for n in np.asarray(spec.num_values).reshape(-1))
            if mask_shape is None:
                return "none", nvec
            joint = mask_shape == nvec
            factored = mask_shape == (len(nvec), max(nvec))
            if joint and factored:
                raise ValueError(f"{refuse}: its action mask of shape {mask_shape} could be joint or per factor")
            if joint or factored:
                return ("joint" if joint else "factored"), nvec
            raise ValueError(f"{refuse}: eqxrl does not know its action mask of shape {mask_shape}")
        if isinstance(spec, specs.DiscreteArray) and tuple(spec.shape) == ():
            n = int(spec.num_values)
            if mask_shape not in (None, (n,)):
                raise ValueError(f"{refuse}: eqxrl does not know its action mask of shape {mask_shape}")
            return ("none" if mask_shape is None else "discrete"), ()
        raise ValueError(f"{refuse}; eqxrl supports DiscreteArray and MultiDiscreteArray actions")

    @property
    def max_episode_steps(self) -> int | None:
        return self.time_limit

    @property
    def renderer(self) -> Renderer | None:
        """Its env's `render(state)` (a matplotlib viewer: the env's named pyplot figure, read back
        as RGB; off screen with matplotlib's Agg backend, the default without a display, while
        under an interactive backend jumanji shows its figure as it draws: `MPLBACKEND=agg` keeps
        it off), at the frame rate of its env's own animations; None for an env without its own
        `render` (every jumanji 1.1.2 env has one; the base `Environment`'s raises)."""
        from jumanji.env import Environment

        if type(self.jumanji_env).render is Environment.render:
            return None
        return Renderer("jumanji", functools.partial(_jumanji_frames, self), fps=_jumanji_fps(self))

    @property
    def action_space(self) -> AbstractSpace:
        if self.mask_kind == "joint":
            return Discrete(math.prod(self.nvec))
        if self.nvec:
            return MultiDiscrete(self.nvec)
        return Discrete(int(self.jumanji_env.action_spec.num_values))

    @property
    def observation_space(self) -> AbstractSpace:
        env = self.jumanji_env
        with _foreign_promotion():
            obs = jax.eval_shape(env.reset, jax.random.key(0))[1].observation
            spec = env.observation_spec
        spaces = _obs_space(obs, spec, self.time_limit, type(env).__name__)
        if not isinstance(spaces, dict):
            return spaces  # one array
        if self.mask_kind != "none":
            space = self.action_space
            size = space.n if isinstance(space, Discrete) else sum(self.nvec)
            spaces[ACTION_MASK] = MultiBinary(size)
        return Dict(spaces)

    def _mask(self, mask: Array) -> Array:
        mask = jnp.asarray(mask)
        if self.mask_kind == "factored":
            mask = jnp.concatenate([mask[i, :n] for i, n in enumerate(self.nvec)])
        return mask.reshape(-1).astype(jnp.int32)

    def _timestep(self, ts: Any, state: Any, first: bool) -> TimeStep:
        fields = _fields(ts.observation)
        if fields is None:
            obs = _convert(ts.observation)
        else:
            obs = {name: _convert(value) for name, value in fields.items() if name != ACTION_MASK}
            if self.mask_kind != "none":
                obs[ACTION_MASK] = self._mask(fields[ACTION_MASK])
        reward = jnp.asarray(ts.reward, jnp.float32)
        info: dict[str, Any] = {}
        if reward.shape != ():
            info["agent_rewards"] = reward
            reward = jnp.sum(reward)
        if ts.extras:
            info["extras"] = ts.extras
        false = jnp.zeros((), bool)
        if first:
            return TimeStep(obs, jnp.zeros((), jnp.float32), false, false, info)
        last = ts.last()
        cut = jnp.any(ts.discount > 0)
        if self.time_limit is not None and type(self.jumanji_env).__name__ not in _TRUNCATING:
            cut = cut | (state.step_count >= self.time_limit)
        return TimeStep(obs, reward, last & ~cut, last & cut, info)

    def _action(self, action: Array) -> Array:
        dtype = self.jumanji_env.action_spec.dtype
        if self.mask_kind == "joint":
            return jnp.stack(jnp.unravel_index(jnp.asarray(action), self.nvec)).astype(dtype)
        return jnp.asarray(action).astype(dtype)

    def reset(self, key: Key) -> tuple[EnvState, TimeStep]:
        with _foreign_promotion():
            state, ts = self.jumanji_env.reset(key)
        return state, self._timestep(ts, state, first=True)

    def step(self, key: Key, state: EnvState, action: Array) -> tuple[EnvState, TimeStep]:
        del key  # jumanji's state carries its own key
        with _foreign_promotion():
            state, ts = self.jumanji_env.step(state, self._action(action))
        return state, self._timestep(ts, state, first=False)


def _jumanji_fps(env: JumanjiEnv) -> int:
    """The frame rate of the env's own animations: its `animate`'s default `interval` (ms)."""
    import inspect

    interval = inspect.signature(env.jumanji_env.animate).parameters.get("interval")
    ms = getattr(interval, "default", None)
    return max(1, round(1000 / ms)) if isinstance(ms, (int, float)) and ms > 0 else 10


_PYPLOT_LOCK = threading.Lock()  # (jumanji's viewers draw into pyplot's current figure, one draw at a time)


def _jumanji_frames(env: JumanjiEnv, seq: list[Any]) -> list[np.ndarray]:
    import matplotlib.pyplot as plt

    jenv = env.jumanji_env
    frames = []
    with _PYPLOT_LOCK, _foreign_promotion():
        # A jumanji viewer draws every state into one pyplot figure, kept by name: closed first, so
        # that the frames do not depend on what it drew before, and after, so that it is not left open.
        jenv.close()
        try:
            for state in seq:
                drawn = jenv.render(state)
                if drawn is None:  # (a viewer in jumanji's default "human" mode draws and returns nothing)
                    fig = plt.gcf()
                    fig.canvas.draw()
                    drawn = fig.canvas.buffer_rgba()
                frames.append(np.array(drawn)[..., :3])
        finally:
            jenv.close()
    return frames


def _make_jumanji(name: str, **kwargs: Any) -> AbstractEnv:
    jumanji = import_jumanji(name)
    if name not in jumanji.registered_environments():
        raise KeyError(name)
    return JumanjiEnv(name, **kwargs)


register_suite(PREFIX, _make_jumanji, jumanji_ids)
