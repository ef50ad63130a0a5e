"""Adapter from Craftax environments to the eqxrl protocol.

Craftax's environments are gymnax-style: `reset_env(key, params)` and `step_env(key, state,
action, params)`, the latter without auto-reset in the `NoAutoReset` classes that
`craftax.craftax_env.make_craftax_env_from_name(name, auto_reset=False)` builds, which the
adapter steps (eqxrl's `AutoReset` resets). Craftax's `done` joins a terminal state (death;
Classic: lava too; full Craftax: the final boss beaten) and its time limit
(`params.max_timesteps`); the adapter tells them apart.
"""

import functools
from collections.abc import Callable
from typing import Any, ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, PyTree

from ..core import EnvState, Key
from ..core import foreign_promotion as _foreign_promotion
from ._base import AbstractEnv, Renderer, TimeStep
from ._make import register_suite
from ._spaces import Box, Discrete
from ._static import StaticHandle
from ._suite import AbstractSuiteEnv, import_suite

PREFIX = "craftax/"
CRAFTAX_IDS = ("Craftax-Classic-Symbolic-v1", "Craftax-Symbolic-v1", "Craftax-Classic-Pixels-v1", "Craftax-Pixels-v1")
_NO_LIMIT = 2**31 - 1  # a `max_timesteps` no episode reaches: what is left of `done` is a terminal state


def import_craftax(name: str = "<id>") -> Any:
    """`import craftax.craftax_env`, or the one-line `ImportError` that says how to install it."""
    return import_suite("craftax.craftax_env", f"make('{PREFIX}{name}')", "craftax")


def craftax_ids() -> list[str]:
    """Every Craftax id `make("craftax/<id>")` accepts (those of `make_craftax_env_from_name`)."""
    import_craftax()
    return list(CRAFTAX_IDS)


def _achievements(env: Any, state: Any, done: Any) -> dict[str, Array]:
    """Craftax's step info without its `discount`: the episode's achievements (x100 on the step
    that ends it, 0 otherwise; Classic adds its `score`), computed by Craftax's own function."""
    if "craftax_classic" in type(env).__module__:
        from craftax.craftax_classic.envs.common import compute_score as info_fn
    else:
        from craftax.craftax.envs.common import log_achievements_to_info as info_fn
    return {k: jnp.asarray(v, jnp.float32) for k, v in info_fn(state, done).items()}


class CraftaxEnv(AbstractSuiteEnv):
    """A Craftax environment behind the eqxrl protocol.

    Observation: Craftax's float32 `Box` in [0, 1] (Classic symbolic: 1,345 entries, full
    Craftax symbolic: 8,268; pixels: `(63, 63, 3)` and `(130, 110, 3)` images). Action:
    `Discrete(17)` (Classic) or `Discrete(43)`. No action masks. `info["achievements"]` holds
    Craftax's step info without its `discount` (per achievement, x100 on the step that ends the
    episode; Classic adds `score`), zeros at `reset`.

    Termination vs truncation: `terminated` is Craftax's `done` with the time limit taken out
    (Craftax's own `is_terminal` with `max_timesteps` set out of reach: death, Classic's lava,
    full Craftax's beaten boss); `truncated` is a `done` that is only the time limit
    (`state.timestep >= params.max_timesteps`). `max_episode_steps` is `params.max_timesteps`
    (Classic: 10,000, full Craftax: 100,000).
    """

    handle: StaticHandle = eqx.field(static=True)
    env_name: str = eqx.field(static=True)
    params: PyTree
    prefix: ClassVar[str] = PREFIX
    craftax_env = AbstractSuiteEnv.suite_env

    def __init__(self, name: str, **kwargs: Any):
        """**Arguments:**

        - `name`: a Craftax id: `"Craftax-Classic-Symbolic-v1"`, `"Craftax-Symbolic-v1"`,
          `"Craftax-Classic-Pixels-v1"` or `"Craftax-Pixels-v1"`.
        - `**kwargs`: overrides of the env's `EnvParams` fields (`max_timesteps=1000`, `day_length=`, ...).
        """
        craftax_env = import_craftax(name)
        if name not in CRAFTAX_IDS:
            raise ValueError(f"CraftaxEnv(name): unknown Craftax id {name!r}; Craftax has {list(CRAFTAX_IDS)}")
        with _foreign_promotion():
            env = craftax_env.make_craftax_env_from_name(name, auto_reset=False)
            params = env.default_params
        if kwargs:
            fields = sorted(params.__dataclass_fields__)
            unknown = sorted(set(kwargs) - set(fields))
            if unknown:
                raise ValueError(f"make('{PREFIX}{name}') got unknown parameter(s) {unknown}; its EnvParams fields are {fields}")
            params = params.replace(**kwargs)
        self.handle = StaticHandle(env, (PREFIX, name))
        self.env_name = name
        self.params = params

    @property
    def max_episode_steps(self) -> int | None:
        steps = self.params.max_timesteps
        if isinstance(steps, (int, np.integer)) and not isinstance(steps, bool):
            return int(steps)
        return None

    @property
    def observation_space(self) -> Box:
        with _foreign_promotion():
            space = self.craftax_env.observation_space(self.params)
        return Box(np.float32(space.low), np.float32(space.high), tuple(space.shape))

    @property
    def action_space(self) -> Discrete:
        return Discrete(int(self.craftax_env.num_actions))

    @property
    def renderer(self) -> Renderer:
        """Craftax's pixel renderer (`make_craftax_pixel_renderer`, 16 pixels per block; a JAX
        function: every state of an episode drawn in one compiled call)."""
        return Renderer("craftax", functools.partial(_craftax_frames, self), stacked=True)

    def reset(self, key: Key) -> tuple[EnvState, TimeStep]:
        env = self.craftax_env
        with _foreign_promotion():
            obs, state = env.reset_env(key, self.params)
            info = {"achievements": _achievements(env, state, False)}
        false = jnp.zeros((), bool)
        return state, TimeStep(jnp.asarray(obs, jnp.float32), jnp.zeros((), jnp.float32), false, false, info)

    def step(self, key: Key, state: EnvState, action: Array) -> tuple[EnvState, TimeStep]:
        env = self.craftax_env
        with _foreign_promotion():
            obs, state, reward, done, info = env.step_env(key, state, action, self.params)
            terminated = env.is_terminal(state, self.params.replace(max_timesteps=_NO_LIMIT))
        done, terminated = jnp.asarray(done, bool), jnp.asarray(terminated, bool)
        info = {"achievements": {k: jnp.asarray(v, jnp.float32) for k, v in info.items() if k != "discount"}}
        ts = TimeStep(jnp.asarray(obs, jnp.float32), jnp.asarray(reward, jnp.float32), terminated, done & ~terminated, info)
        return state, ts


_DRAW: dict[bool, Callable[[Any], Any]] = {}
"""Craftax's pixel renderer compiled over a time axis, per variant (Classic or not)."""


def _craftax_frames(env: CraftaxEnv, states: Any) -> np.ndarray:
    classic = "craftax_classic" in type(env.craftax_env).__module__
    if classic not in _DRAW:
        if classic:
            from craftax.craftax_classic.constants import BLOCK_PIXEL_SIZE_IMG
            from craftax.craftax_classic.renderer import make_craftax_pixel_renderer
        else:
            from craftax.craftax.constants import BLOCK_PIXEL_SIZE_IMG
            from craftax.craftax.renderer import make_craftax_pixel_renderer
        with _foreign_promotion():  # (Craftax mixes dtypes, as its envs do)
            draw = make_craftax_pixel_renderer(BLOCK_PIXEL_SIZE_IMG)
        _DRAW[classic] = jax.jit(jax.vmap(draw))
    with _foreign_promotion():
        pixels = np.asarray(_DRAW[classic](states))
    return np.clip(np.rint(pixels), 0, 255).astype(np.uint8)[..., :3]


def _make_craftax(name: str, **kwargs: Any) -> AbstractEnv:
    import_craftax(name)
    if name not in CRAFTAX_IDS:
        raise KeyError(name)
    return CraftaxEnv(name, **kwargs)


register_suite(PREFIX, _make_craftax, craftax_ids)
