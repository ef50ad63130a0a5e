"""Adapter from XLand-MiniGrid (`xminigrid`) environments to the eqxrl protocol.

xminigrid's base environments do not auto-reset (that is its optional
`GymAutoResetWrapper`'s job, which the adapter does not use): `env.step(params, timestep,
action)` is one transition, and eqxrl's `AutoReset` starts the next episode.
"""

import dataclasses
import functools
from typing import Any, ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, PyTree

from ..core import EnvState, Key, is_positive_int
from ..core import foreign_promotion as _foreign_promotion
from ._base import Renderer, TimeStep, first_timestep
from ._make import register_suite
from ._spaces import Box, Discrete
from ._static import StaticHandle
from ._suite import AbstractSuiteEnv, dm_env_timestep, import_suite

PREFIX = "xminigrid/"
_XLAND = "XLand-MiniGrid"
_BENCHMARK_HINT = (
    "an xminigrid RuleSet, e.g. xminigrid.load_benchmark('trivial-21k').get_ruleset(0) "
    "(load_benchmark downloads the benchmark the first time)"
)


def import_xminigrid(what: str) -> Any:
    """`import xminigrid`, or one `ImportError` line naming the extra that installs it."""
    return import_suite("xminigrid", what, "xminigrid", "XLand-MiniGrid")


def xminigrid_ids(what: str = "listing the xminigrid ids") -> list[str]:
    """xminigrid's registered ids (`"MiniGrid-Empty-5x5"`, `"XLand-MiniGrid-R1-9x9"`, ...),
    without eqxrl's `xminigrid/` prefix."""
    return list(import_xminigrid(what).registered_environments())


@functools.partial(jax.jit, static_argnums=0)
def _reset(handle: StaticHandle, params: Any, key: Key) -> Any:
    with _foreign_promotion():
        return handle.obj.reset(params, key)


@functools.partial(jax.jit, static_argnums=0)
def _step(handle: StaticHandle, params: Any, timestep: Any, action: Array) -> Any:
    with _foreign_promotion():
        return handle.obj.step(params, timestep, jnp.asarray(action, jnp.int32))


class XMiniGridEnv(AbstractSuiteEnv):
    """An XLand-MiniGrid environment behind the eqxrl protocol.

    The env state is xminigrid's `TimeStep` (which holds its `State`); `params` (xminigrid's
    `EnvParams`, with an XLand env's ruleset as array leaves) is a pytree field, so envs
    with different rulesets stack and vmap. Observations are xminigrid's symbolic
    egocentric view, `uint8[view_size, view_size, 2]` (tile id, colour id per cell), cast to
    float32 in a `Box` of the tiles' and colours' ranges (`[0, 12]` and `[0, 11]`). Actions
    are `Discrete(6)`; xminigrid has no action masks.

    xminigrid ends an episode with a `LAST` step type and tells why by its discount: a
    discount of 0 (the goal reached) is `terminated`, a `LAST` step with discount 1 (its
    `max_steps` time limit) is `truncated`; a step that does both is a termination, as in
    xminigrid. Randomness comes from the key xminigrid keeps in its state, split from
    `reset`'s key: `step`'s key is unused.
    """

    handle: StaticHandle = eqx.field(static=True)
    params: PyTree
    env_name: str = eqx.field(static=True)
    prefix: ClassVar[str] = PREFIX
    xminigrid_env = AbstractSuiteEnv.suite_env  # the xminigrid `Environment`

    def __init__(self, env: str, **kwargs: Any):
        """**Arguments:**

        - `env`: an xminigrid id (`"MiniGrid-Empty-5x5"`, `"XLand-MiniGrid-R1-9x9"`).
        - `**kwargs`: overrides of the env's `EnvParams` fields, as `xminigrid.make` takes
          them: `max_steps`, `view_size`, `height`, `width`, and for XLand ids the required
          `ruleset` (an xminigrid `RuleSet`, e.g.
          `xminigrid.load_benchmark("trivial-21k").get_ruleset(0)`; eqxrl gives no default,
          because the benchmarks are downloaded on first use).
        """
        xminigrid = import_xminigrid(f"make('{PREFIX}{env}')")
        if not isinstance(env, str):
            raise ValueError(f"XMiniGridEnv(env) must be an xminigrid id, got {env!r}")
        if env not in xminigrid.registered_environments():
            raise ValueError(f"XMiniGridEnv(env): unknown xminigrid id {env!r}; see eqxrl.envs.registered()")
        where = f"make('{PREFIX}{env}')"
        for field in ("max_steps", "view_size", "height", "width"):
            if field in kwargs and not is_positive_int(kwargs[field]):
                raise ValueError(f"{where}: {field} must be a positive int, got {kwargs[field]!r}")
        if env.startswith(_XLAND):
            from xminigrid.types import RuleSet

            if "ruleset" not in kwargs:
                raise ValueError(f"{where} needs ruleset=: {_BENCHMARK_HINT}")
            if not isinstance(kwargs["ruleset"], RuleSet):
                raise ValueError(f"{where}: ruleset must be {_BENCHMARK_HINT}; got {kwargs['ruleset']!r}")
        elif "ruleset" in kwargs:
            raise ValueError(f"{where}: ruleset= is for the XLand-MiniGrid ids; {env!r} has a fixed goal")
        with _foreign_promotion():
            xland, params = xminigrid.make(env)
            fields = {f.name for f in dataclasses.fields(params)}
            unknown = sorted(set(kwargs) - fields)
            if unknown:
                raise ValueError(f"{where} got unknown keyword(s) {unknown}; its EnvParams fields are {sorted(fields)}")
            params = params.replace(**kwargs)
        self.handle = StaticHandle(xland, ("xminigrid", env))
        self.params = params
        self.env_name = env

    @property
    def max_episode_steps(self) -> int:
        return int(self.params.max_steps)

    @property
    def observation_space(self) -> Box:
        from xminigrid.core.constants import NUM_COLORS, NUM_TILES

        shape = tuple(int(s) for s in self.xminigrid_env.observation_shape(self.params))
        return Box(0.0, np.asarray([NUM_TILES - 1, NUM_COLORS - 1], np.float32), shape)

    @property
    def action_space(self) -> Discrete:
        return Discrete(int(self.xminigrid_env.num_actions(self.params)))

    @property
    def renderer(self) -> Renderer:
        """Its env's `render(params, timestep)` (`render_mode="rgb_array"`), per state."""
        return Renderer("xminigrid", functools.partial(_xminigrid_frames, self))

    def reset(self, key: Key) -> tuple[EnvState, TimeStep]:
        timestep = _reset(self.handle, self.params, key)
        return timestep, first_timestep(jnp.asarray(timestep.observation, jnp.float32))

    def step(self, key: Key, state: EnvState, action: Array) -> tuple[EnvState, TimeStep]:
        del key  # xminigrid draws from the key in its state
        timestep = _step(self.handle, self.params, state, action)
        last = timestep.step_type == 2  # xminigrid.types.StepType.LAST
        terminated = last & (timestep.discount == 0.0)
        return timestep, dm_env_timestep(timestep, terminated, last & ~terminated)


def _xminigrid_frames(env: XMiniGridEnv, seq: list[Any]) -> list[np.ndarray]:
    params = env.params.replace(render_mode="rgb_array")
    return [np.asarray(env.xminigrid_env.render(params, timestep)) for timestep in seq]


def _xminigrid(name: str, **kwargs: Any) -> XMiniGridEnv:
    """`make("xminigrid/<id>", **kwargs)`."""
    if name not in xminigrid_ids(f"make('{PREFIX}{name}')"):
        raise KeyError(name)
    return XMiniGridEnv(name, **kwargs)


register_suite(PREFIX, _xminigrid, xminigrid_ids)
