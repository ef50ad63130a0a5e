"""Adapter from brax environments to the eqxrl protocol."""

import functools
from collections.abc import Sequence
from typing import Any, ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from ._base import Renderer
from ._spaces import Box
from ..core import foreign_promotion
from ._static import StaticHandle
from ._suite import AbstractBraxStyleEnv
from ._descriptor import FEET_LINKS

BRAX_SIZE = (240, 320)  # (height, width) of brax frames


class BraxEnv(AbstractBraxStyleEnv):
    """A brax environment behind the eqxrl protocol (no time limit of its own).

    brax's `done` is natural termination; `eqxrl.envs.make("brax/...")` adds a
    `TimeLimit` that reports the episode-length cut-off as truncation. The
    state descriptor helpers of later agents read `state.pipeline_state`.
    """

    handle: StaticHandle = eqx.field(static=True)
    obs_size: int = eqx.field(static=True)
    action_size: int = eqx.field(static=True)
    prefix: ClassVar[str] = "brax/"
    brax_env = AbstractBraxStyleEnv.suite_env

    def __init__(self, env_name: str, backend: str | None = None, **kwargs: Any):
        """**Arguments:**

        - `env_name`: a brax environment name (`"ant"`, `"inverted_pendulum"`, ...).
        - `backend`: brax physics backend (`"generalized"`, `"positional"`,
          `"spring"`, `"mjx"`); the env's default when omitted.
        - `**kwargs`: passed to the brax environment's constructor.
        """
        from brax import envs as brax_envs

        if backend is not None:
            kwargs["backend"] = backend
        # brax mixes dtypes freely (eqxrl's tests run under strict promotion).
        with foreign_promotion():
            env = brax_envs.get_environment(env_name, **kwargs)
            # brax's `observation_size` runs an un-jitted reset (5-35 s on CPU);
            # tracing the reset for its output shape takes well under a second.
            obs = jax.eval_shape(env.reset, jax.random.PRNGKey(0)).obs
            action_size = int(env.action_size)
        self.handle = StaticHandle(env, ("brax", env_name, tuple(sorted(kwargs.items()))))
        if not isinstance(obs, jax.ShapeDtypeStruct) or len(obs.shape) != 1:
            shapes = jax.tree.map(lambda x: x.shape, obs)
            raise ValueError(
                f"brax env {env_name!r} has a structured observation {shapes}; eqxrl needs a flat vector"
            )
        self.obs_size = int(obs.shape[0])
        self.action_size = action_size

    @property
    def env_name(self) -> str:
        return self.handle.key[1]  # (the handle's key is `("brax", env_name, kwargs)`)

    @property
    def descriptors(self) -> tuple[str, ...]:
        """`("xy",)` (the torso's x-y, what `"auto"` picks), and `"feet_contact"` for the
        locomotion envs whose feet `FEET_LINKS` names."""
        return ("xy", "feet_contact") if self.env_name in FEET_LINKS else ("xy",)

    @property
    def observation_space(self) -> Box:
        return Box(-jnp.inf, jnp.inf, (self.obs_size,))

    @property
    def renderer(self) -> Renderer:
        """brax's own: `brax.io.image.render_array` (MuJoCo's OpenGL renderer, 240x320: it needs a
        display, or `MUJOCO_GL=egl` set before MuJoCo is imported) at `1 / dt` frames a second, and
        `brax.io.html.render`, its interactive HTML viewer (`render_html`)."""
        return self.mujoco_renderer("brax", "brax", _brax_frames, html=functools.partial(_brax_html, self))


def _brax_frames(env: BraxEnv, seq: Sequence[Any]) -> list[np.ndarray]:
    from brax.io import image

    height, width = BRAX_SIZE
    return list(image.render_array(env.brax_env.sys, [s.pipeline_state for s in seq], height, width))


def _brax_html(env: BraxEnv, seq: list[Any]) -> str:
    from brax.io import html as brax_html

    return brax_html.render(env.brax_env.sys, [s.pipeline_state for s in seq])
