"""Adapter from Navix (MiniGrid in JAX) environments to the eqxrl protocol.

Navix's own `env.step(timestep, action)` auto-resets, dm_env style: the step *after* a
done timestep is a reset (its action ignored). The adapter steps with Navix's
`env._step`, the same step without that reset, so that episodes end where Navix says and
eqxrl's `AutoReset` starts the next one.
"""

import dataclasses
import functools
from typing import Any, ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array

from ..core import EnvState, Key, is_positive_int
from ..core import foreign_promotion as _foreign_promotion
from ._base import Renderer, TimeStep, first_timestep
from ._make import register_suite
from ._spaces import Box, Discrete
from ._static import StaticHandle, hashable_or
from ._suite import AbstractSuiteEnv, dm_env_timestep, import_suite

PREFIX = "navix/"
_TERMINATION, _TRUNCATION = 2, 1  # navix.StepType: 0 transition, 1 truncation, 2 termination


def import_navix(what: str) -> Any:
    """`import navix`, or one `ImportError` line naming the extra that installs it."""
    return import_suite("navix", what, "navix")


def navix_ids(what: str = "listing the navix ids") -> list[str]:
    """Navix's registered ids (`"Navix-Empty-5x5-v0"`, ...), without eqxrl's `navix/` prefix."""
    return list(import_navix(what).registry())


def _cache_key(name: str, kwargs: dict[str, Any]) -> Any:
    """`(name, kwargs)` for the compilation cache, or a fresh object when a kwarg is unhashable
    (then every env built compiles its own program)."""
    return hashable_or(("navix", name, tuple(sorted(kwargs.items()))), ("navix", name, object()))


def _bounds(dtype: Any) -> tuple[float, float]:
    """An observation dtype's range: `[0, 255]` for uint8 grids and images, `[0, 1]` for bools,
    unbounded otherwise (Navix's own observation spaces understate the symbolic grids' range:
    they say at most 8, its entity tags go up to 10)."""
    if dtype == jnp.uint8:
        return 0.0, 255.0
    if dtype == jnp.bool_:
        return 0.0, 1.0
    return -np.inf, np.inf


def _strong(x: Any) -> Any:
    """A weakly typed array as a strongly typed one of its dtype; anything else as it is."""
    if isinstance(x, jax.Array) and getattr(jax.typeof(x), "weak_type", False):
        return jnp.asarray(x, x.dtype)
    return x


@functools.partial(jax.jit, static_argnums=0)
def _reset(handle: StaticHandle, key: Key) -> Any:
    with _foreign_promotion():
        timestep = handle.obj.reset(key)
    # Navix's reset starts `info["return"]` weakly typed and its step returns it strongly typed:
    # a jitted step would compile twice (once for the reset's state, once for its own).
    return jax.tree.map(_strong, timestep)


@functools.partial(jax.jit, static_argnums=0)
def _step(handle: StaticHandle, timestep: Any, action: Array) -> Any:
    with _foreign_promotion():
        return handle.obj._step(timestep, jnp.asarray(action, jnp.int32))


class NavixEnv(AbstractSuiteEnv):
    """A Navix environment behind the eqxrl protocol.

    The env state is Navix's `Timestep` (which holds its `State`). Observations are Navix's
    (by default the symbolic `uint8[H, W, 3]` grid: entity tag, colour, state per cell) cast
    to float32, in a `Box` of the dtype's range (`[0, 255]` for uint8). Actions are
    `Discrete(len(action_set))` (7, MiniGrid's, by default); Navix has no action masks.

    Navix's step type says how an episode ended: `TERMINATION` (a terminal state: goal
    reached, lava, ...) is `terminated`, `TRUNCATION` (its `max_steps` time limit, 100 by
    default with `navix.make`) is `truncated`; a step that does both is a termination, as in
    Navix. Randomness after reset (moving obstacles) comes from the key Navix keeps in its
    state, split from `reset`'s key: `step`'s key is unused, so that the adapter steps
    exactly as Navix does.
    """

    handle: StaticHandle = eqx.field(static=True)
    env_name: str = eqx.field(static=True)
    obs_shape: tuple[int, ...] = eqx.field(static=True)
    obs_bounds: tuple[float, float] = eqx.field(static=True)
    num_actions: int = eqx.field(static=True)
    prefix: ClassVar[str] = PREFIX
    navix_env = AbstractSuiteEnv.suite_env  # the Navix `Environment`

    def __init__(self, env: Any, **kwargs: Any):
        """**Arguments:**

        - `env`: a Navix id (`"Navix-Empty-5x5-v0"`) or a Navix `Environment` instance.
        - `**kwargs`: with an id, the keywords of `navix.make`: `max_steps` (default 100),
          `observation_fn` (`navix.observations.symbolic` by default;
          `symbolic_first_person`, `categorical`, `rgb`, ...), `reward_fn`,
          `termination_fn`, `action_set`, ... (the env's dataclass fields).
        """
        if isinstance(env, str):
            navix = import_navix(f"make('{PREFIX}{env}')")
            name = env
            if name not in navix.registry():
                raise ValueError(f"NavixEnv(env): unknown Navix id {name!r}; see eqxrl.envs.registered()")
            if "max_steps" in kwargs and not is_positive_int(kwargs["max_steps"]):
                raise ValueError(f"make('{PREFIX}{name}'): max_steps must be a positive int, got {kwargs['max_steps']!r}")
            with _foreign_promotion():
                default = navix.make(name)
                fields = {f.name for f in dataclasses.fields(default)}
                unknown = sorted(set(kwargs) - fields)
                if unknown:
                    raise ValueError(
                        f"make('{PREFIX}{name}') got unknown keyword(s) {unknown}; "
                        f"navix.make takes the env's fields {sorted(fields)}"
                    )
                try:
                    env = navix.make(name, **kwargs) if kwargs else default
                except TypeError as e:  # a field that the id fixes (height, width, ...)
                    raise ValueError(f"make('{PREFIX}{name}'): navix.make rejected {sorted(kwargs)}: {e}") from None
            key = _cache_key(name, kwargs)
        else:
            navix = import_navix("NavixEnv")
            if kwargs:
                raise ValueError(f"NavixEnv: keyword arguments {sorted(kwargs)} need an env id, not an instance")
            if not isinstance(env, navix.Environment):
                raise ValueError(f"NavixEnv(env) must be a Navix id or navix.Environment, got {env!r}")
            name = type(env).__name__
            key = ("navix", name, object())
        self.handle = StaticHandle(env, key)
        self.env_name = name
        with _foreign_promotion():
            obs = jax.eval_shape(env.reset, jax.random.key(0)).observation
        self.obs_shape = tuple(int(s) for s in obs.shape)
        self.obs_bounds = _bounds(obs.dtype)
        self.num_actions = len(env.action_set)

    @property
    def max_episode_steps(self) -> int:
        return int(self.navix_env.max_steps)

    @property
    def observation_space(self) -> Box:
        return Box(self.obs_bounds[0], self.obs_bounds[1], self.obs_shape)

    @property
    def action_space(self) -> Discrete:
        return Discrete(self.num_actions)

    @property
    def renderer(self) -> Renderer:
        """`navix.observations.rgb`: the whole grid in Navix's 8-pixel tiles, the image Navix's own
        PPO logs (a JAX function: an episode in one compiled call)."""
        return Renderer("navix", _navix_frames, stacked=True)  # (drawn from the states alone)

    def reset(self, key: Key) -> tuple[EnvState, TimeStep]:
        timestep = _reset(self.handle, key)
        return timestep, first_timestep(jnp.asarray(timestep.observation, jnp.float32))

    def step(self, key: Key, state: EnvState, action: Array) -> tuple[EnvState, TimeStep]:
        del key  # Navix draws from the key in its state
        timestep = _step(self.handle, state, action)
        return timestep, dm_env_timestep(timestep, timestep.step_type == _TERMINATION, timestep.step_type == _TRUNCATION)


_RGB: dict[str, Any] = {}
"""`navix.observations.rgb` compiled over a time axis (at the first draw)."""


def _navix_frames(timesteps: Any) -> np.ndarray:
    """Navix's full-grid RGB image of each state of `timesteps` (Navix `Timestep`s, stacked): drawn
    from the state alone (its grid, entities and cached background)."""
    if "rgb" not in _RGB:
        from navix.observations import rgb

        _RGB["rgb"] = jax.jit(jax.vmap(rgb))
    with _foreign_promotion():
        return np.asarray(_RGB["rgb"](timesteps.state), np.uint8)[..., :3]


def _navix(name: str, **kwargs: Any) -> NavixEnv:
    """`make("navix/<id>", **kwargs)`."""
    if name not in navix_ids(f"make('{PREFIX}{name}')"):
        raise KeyError(name)
    return NavixEnv(name, **kwargs)


register_suite(PREFIX, _navix, navix_ids)
