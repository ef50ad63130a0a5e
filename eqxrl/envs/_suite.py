"""What the adapters of optional env suites share: importing the suite (or saying how to install
it), the suite's env behind a `StaticHandle`, a name under the suite's `make` prefix, and the
drawing their renderers have in common (a matplotlib figure's frames, MuJoCo's OpenGL renderer)."""

import functools
import importlib
import os
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import equinox as eqx
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array

from ..core import EnvState, Key
from ._base import AbstractEnv, Renderer, TimeStep, first_timestep
from ._spaces import Box
from ._static import StaticHandle, brax_style_reset, brax_style_step


def import_suite(module: str, what: str, extra: str, title: str | None = None) -> Any:
    """`import <module>`, or one `ImportError` line, `"<what> needs the <title> suite: pip install
    'eqxrl[<extra>]'"` (`title` defaults to `extra`): the suites are optional extras, and the
    line says which one to install (the import's own error stays its cause)."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise ImportError(f"{what} needs the {title or extra} suite: pip install 'eqxrl[{extra}]'") from e


def dm_env_timestep(timestep: Any, terminated: Any, truncated: Any) -> TimeStep:
    """An eqxrl `TimeStep` from a dm_env-style one (`observation`, `reward`; Navix's,
    xminigrid's), the observation cast to float32, the end of the episode told apart by the caller."""
    return TimeStep(
        obs=jnp.asarray(timestep.observation, jnp.float32),
        reward=jnp.asarray(timestep.reward, jnp.float32),
        terminated=terminated,
        truncated=truncated,
        info={},
    )


def figure_frames(fig: Any, update: Callable[[int], Any], n: int) -> list[np.ndarray]:
    """Draw `n` frames of a matplotlib figure, `update(t)` before each draw, then close it (the
    visualisers of gymnax and JaxMARL's MPE)."""
    import matplotlib.pyplot as plt

    try:
        frames = []
        for t in range(n):
            update(t)
            fig.canvas.draw()
            frames.append(np.array(fig.canvas.buffer_rgba())[..., :3])
    finally:
        plt.close(fig)
    return frames


class AbstractSuiteEnv(AbstractEnv):
    """An adapter whose suite env sits in a `StaticHandle` (hashable, for static fields) and that
    is named as `make` knows it: `prefix + env_name` (`"navix/Navix-Empty-5x5-v0"`).

    Final classes declare the field `handle` and the field (or property) `env_name` themselves,
    so that their pytree structure stays theirs, set the class variable `prefix`, and may name
    `suite_env` after their suite (`navix_env = AbstractSuiteEnv.suite_env`).
    """

    handle: eqx.AbstractVar[StaticHandle]
    env_name: eqx.AbstractVar[str]
    prefix: ClassVar[str]

    @property
    def suite_env(self) -> Any:
        """The suite's own environment object."""
        return self.handle.obj

    @property
    def name(self) -> str:
        return self.prefix + self.env_name


class AbstractBraxStyleEnv(AbstractSuiteEnv):
    """An adapter of a brax-style simulator (brax, MuJoCo Playground): `reset(key)` and
    `step(state, action)` on a `State` with `obs`, `reward` and `done` (a terminal state: brax-style
    envs have no time limit of their own), actions in `[-1, 1]`; `step`'s key is unused (brax
    dynamics are deterministic; Playground's envs draw from their state).

    Final classes declare the field `action_size` and may convert the observation (`_obs`).
    """

    action_size: eqx.AbstractVar[int]

    def _obs(self, obs: Any) -> Any:
        """The observation as eqxrl sees it (brax's as it is)."""
        return obs

    def mujoco_renderer(
        self, name: str, suite: str, draw: Callable[[Any, Sequence[Any]], list[np.ndarray]], html: Callable[[list[Any]], str] | None = None
    ) -> Renderer:
        """The `Renderer` `name` that draws with MuJoCo's OpenGL renderer (`draw(self, states)`), at
        `1 / dt` frames a second (the suite env's control step); a failure (a host without a display,
        and no off-screen context) becomes a one-line `ValueError` naming the `suite` and what to set."""
        fps = max(1, round(1.0 / float(self.suite_env.dt)))
        return Renderer(name, functools.partial(_mujoco_frames, self, suite, draw, html is not None), fps=fps, html=html)

    @property
    def action_space(self) -> Box:
        return Box(-1.0, 1.0, (self.action_size,))

    def reset(self, key: Key) -> tuple[EnvState, TimeStep]:
        state = brax_style_reset(self.handle, key)
        return state, first_timestep(self._obs(state.obs))

    def step(self, key: Key, state: EnvState, action: Array) -> tuple[EnvState, TimeStep]:
        del key  # (see the class's description)
        state = brax_style_step(self.handle, state, action)
        ts = TimeStep(
            obs=self._obs(state.obs),
            reward=jnp.asarray(state.reward, jnp.float32),
            terminated=jnp.asarray(state.done) > 0.5,
            truncated=jnp.zeros((), bool),
            info={},
        )
        return state, ts


def _mujoco_frames(env: AbstractEnv, suite: str, draw: Callable[[Any, Sequence[Any]], list[np.ndarray]], has_html: bool, seq: Sequence[Any]) -> list[np.ndarray]:
    try:
        return draw(env, seq)
    except Exception as e:
        fix = "start Python with MUJOCO_GL=egl (or osmesa) set" if not os.environ.get("MUJOCO_GL") else "check MUJOCO_GL"
        reason = str(e).strip().splitlines()[0][:160] if str(e).strip() else type(e).__name__
        raise ValueError(
            f"render: {suite} env {env.name!r} draws frames with MuJoCo's OpenGL renderer, which failed here ({reason}): "
            f"{fix}" + (", or write an .html file (brax's interactive viewer)" if has_html else "")
        ) from None
