"""Adapter from MuJoCo Playground (`mujoco_playground`) environments to the eqxrl protocol.

Playground envs are brax-style: `reset(rng) -> State(data, obs, reward, done, metrics,
info)` and `step(state, action)`, with no time limit of their own (brax-style training
wraps one around them) and no auto-reset. `make("playground/<id>")` puts a `TimeLimit`
around the adapter, as `make("brax/<env>")` does.
"""

import contextlib
import io
import subprocess
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from ..core import is_positive_int, one_line
from ..core import foreign_promotion as _foreign_promotion
from ._base import AbstractEnv, Renderer
from ._make import register_suite
from ._spaces import AbstractSpace, Box, Dict
from ._static import StaticHandle, hashable_or
from ._suite import AbstractBraxStyleEnv, import_suite
from ._wrappers import TimeLimit

PREFIX = "playground/"
_obs_shapes_seen: dict[Any, Any] = {}  # by cache key: tracing a reset for its shapes takes seconds


def import_playground(what: str) -> Any:
    """`mujoco_playground.registry`, or one `ImportError` line naming the extra that installs it."""
    return import_suite("mujoco_playground", what, "playground", "MuJoCo Playground").registry


def playground_ids(what: str = "listing the playground ids") -> list[str]:
    """MuJoCo Playground's env names (`"CartpoleBalance"`, `"Go1JoystickFlatTerrain"`, ...),
    without eqxrl's `playground/` prefix."""
    return list(import_playground(what).ALL_ENVS)


def _cache_key(name: str, overrides: dict[str, Any]) -> Any:
    """`(name, overrides)` for the compilation cache, or a fresh object when an override is
    unhashable (then every env built compiles its own program)."""
    return hashable_or(("playground", name, tuple(sorted(overrides.items()))), ("playground", name, object()))


def _obs_shapes(obs: Any, name: str) -> Any:
    """An observation's shapes, hashable for a static field: an array's shape tuple, or for a
    mapping (Playground's `{"state": ..., "privileged_state": ...}`) a tuple of
    `(key, shapes)` pairs, nested alike."""
    if isinstance(obs, Mapping):
        return tuple((str(k), _obs_shapes(v, name)) for k, v in obs.items())
    if isinstance(obs, jax.ShapeDtypeStruct):
        return tuple(int(s) for s in obs.shape)
    raise ValueError(f"playground env {name!r} has an observation leaf {obs!r}; eqxrl takes arrays and dicts of them")


def _obs_space(shapes: Any) -> AbstractSpace:
    """An unbounded `Box` per array, in `Dict`s where the observation has mappings."""
    if shapes and isinstance(shapes[0], tuple):
        return Dict({k: _obs_space(v) for k, v in shapes})
    return Box(-np.inf, np.inf, shapes)


def _as_float32(obs: Any) -> Any:
    """The observation with every leaf float32 and every mapping a plain dict (the `Dict`
    space's structure)."""
    if isinstance(obs, Mapping):
        return {str(k): _as_float32(v) for k, v in obs.items()}
    return jnp.asarray(obs, jnp.float32)


class PlaygroundEnv(AbstractBraxStyleEnv):
    """A MuJoCo Playground environment behind the eqxrl protocol (no time limit of its own).

    The env state is Playground's `State`. Observations are float32: a `Box` for an array
    observation, a `Dict` of `Box`es for a dict one (the locomotion envs'
    `{"state": ..., "privileged_state": ...}`). Actions are a `Box` in `[-1, 1]` of
    `action_size` entries. Playground's `done` is a terminal state (a fall, NaN physics):
    `terminated`. It has no time limit: `eqxrl.envs.make("playground/...")` adds a
    `TimeLimit` that reports the episode-length cut-off as truncation. `step`'s key is
    unused (the env keeps its own in `state.info["rng"]`). The config's `action_repeat`
    is not applied (Playground's brax training wrapper applies it, not the env).
    """

    handle: StaticHandle = eqx.field(static=True)
    env_name: str = eqx.field(static=True)
    obs_shapes: Any = eqx.field(static=True)
    action_size: int = eqx.field(static=True)
    prefix: ClassVar[str] = PREFIX
    playground_env = AbstractBraxStyleEnv.suite_env  # the Playground `MjxEnv`

    def __init__(self, env: str, *, config_overrides: dict[str, Any] | None = None, **config: Any):
        """**Arguments:**

        - `env`: a Playground env name (`"CartpoleBalance"`; `mujoco_playground.registry.ALL_ENVS`).
        - `config_overrides`: overrides of the env's config by flattened key
          (`{"vision_config.cam_res": (32, 32)}`), as `registry.load` takes them.
        - `**config`: overrides of the config's top-level entries (`ctrl_dt=0.02`,
          `impl="jax"`, ...). `impl` defaults to the config's (MJX-Warp, `"warp"`, for most
          envs) except where JAX has only CPUs: there it is `"jax"` (MJX in JAX), because
          Warp's CPU kernels step CartpoleBalance about 500 times slower.
        """
        registry = import_playground(f"make('{PREFIX}{env}')")
        if not isinstance(env, str) or env not in registry.ALL_ENVS:
            raise ValueError(f"PlaygroundEnv(env): unknown MuJoCo Playground env {env!r}; see eqxrl.envs.registered()")
        where = f"make('{PREFIX}{env}')"
        if config_overrides is not None and not isinstance(config_overrides, Mapping):
            raise ValueError(f"{where}: config_overrides must be a dict of flattened config keys, got {config_overrides!r}")
        defaults = registry.get_default_config(env)
        unknown = sorted(set(config) - set(defaults.keys()))
        if unknown:
            raise ValueError(f"{where} got unknown keyword(s) {unknown}; its config's entries are {sorted(defaults.keys())}")
        for path in config_overrides or {}:
            node = defaults
            for part in str(path).split("."):
                if not (hasattr(node, "keys") and part in node.keys()):
                    raise ValueError(f"{where}: config_overrides has {path!r}, which the env's config lacks")
                node = node[part]
        overrides = {**(config_overrides or {}), **config}
        if "impl" in defaults and "impl" not in overrides and jax.default_backend() == "cpu":
            overrides["impl"] = "jax"
        try:
            with _foreign_promotion():
                suite_env = registry.load(env, config_overrides=overrides or None)
                key = _cache_key(env, overrides)
                shapes = _obs_shapes_seen.get(key)
                if shapes is None:
                    shapes = _obs_shapes(jax.eval_shape(suite_env.reset, jax.random.key(0)).obs, env)
                    if isinstance(key[2], tuple):  # (not a one-off key: an override is unhashable)
                        _obs_shapes_seen[key] = shapes
                action_size = int(suite_env.action_size)
        except TypeError as e:  # ml_collections: an override of the wrong type
            raise ValueError(f"{where}: {one_line(e)}") from None
        except subprocess.CalledProcessError as e:  # the mujoco_menagerie download
            raise RuntimeError(
                f"{where}: MuJoCo Playground could not download mujoco_menagerie, the robot models of "
                f"its locomotion and manipulation envs ({e}); the dm_control suite envs need no download"
            ) from None
        self.handle = StaticHandle(suite_env, key)
        self.env_name = env
        self.obs_shapes = shapes
        self.action_size = action_size

    @property
    def config(self) -> Any:
        """The env's config (`ml_collections.ConfigDict`), overrides applied."""
        return self.playground_env._config

    @property
    def observation_space(self) -> AbstractSpace:
        return _obs_space(self.obs_shapes)

    def _obs(self, obs: Any) -> Any:
        return _as_float32(obs)

    @property
    def renderer(self) -> Renderer:
        """Its env's `render(trajectory)` (MuJoCo's OpenGL renderer, 240x320, the free camera: like
        brax, it needs a display or `MUJOCO_GL=egl` set before MuJoCo is imported), at `1 / dt`
        frames a second (the env's control step)."""
        return self.mujoco_renderer("mujoco playground", "playground", _playground_frames)


def _playground_frames(env: PlaygroundEnv, seq: Sequence[Any]) -> list[np.ndarray]:
    with contextlib.redirect_stderr(io.StringIO()):  # (its render shows a tqdm progress bar)
        return list(env.playground_env.render(seq))


def _playground(name: str, episode_length: int | None = None, **kwargs: Any) -> AbstractEnv:
    """`make("playground/<id>", episode_length=None, **kwargs)`: a `PlaygroundEnv` in a
    `TimeLimit` of `episode_length` steps (default: the env config's `episode_length`, else 1000)."""
    if name not in playground_ids(f"make('{PREFIX}{name}')"):
        raise KeyError(name)
    if episode_length is not None:
        if not is_positive_int(episode_length):
            raise ValueError(f"make('{PREFIX}{name}'): episode_length must be a positive int, got {episode_length!r}")
        episode_length = int(episode_length)
        from mujoco_playground import registry

        if "episode_length" in registry.get_default_config(name):
            kwargs["episode_length"] = episode_length  # the config says what the TimeLimit does
    env = PlaygroundEnv(name, **kwargs)
    if episode_length is None:
        episode_length = int(env.config.get("episode_length", 1000))
    return TimeLimit(env, episode_length)


register_suite(PREFIX, _playground, playground_ids)
