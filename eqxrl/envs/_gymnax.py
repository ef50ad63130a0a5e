"""Adapter from gymnax environments to the eqxrl protocol, and its renderers: Gymnasium's
classic-control drawing and gymnax's matplotlib visualisers."""

import functools
import os
import threading
from typing import Any, ClassVar

import equinox as eqx
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, PyTree

from ..core import EnvState, Key
from ._base import Renderer, TimeStep, first_timestep
from ._spaces import AbstractSpace, Box, Dict, Discrete, Tuple, as_element, flatten_space
from ..core import foreign_promotion as _foreign_promotion
from ._static import StaticHandle
from ._suite import AbstractSuiteEnv, figure_frames

GYM_FPS = {"Acrobot-v1": 15, "CartPole-v1": 50, "Pendulum-v1": 30, "MountainCar-v0": 30, "MountainCarContinuous-v0": 30}
"""The classic-control envs Gymnasium draws, and their `metadata["render_fps"]`."""
GYMNAX_MATPLOTLIB = (
    "Asterix-MinAtar", "Breakout-MinAtar", "Freeway-MinAtar", "Seaquest-MinAtar", "SpaceInvaders-MinAtar",
    "Pong-misc", "Catch-bsuite", "PointRobot-misc", "MetaMaze-misc", "FourRooms-misc",
)  # fmt: skip
"""The envs gymnax's matplotlib `Visualizer` draws."""


def _convert_space(space: Any, what: str, env_name: str) -> AbstractSpace:
    from gymnax.environments import spaces

    if isinstance(space, spaces.Discrete):
        return Discrete(int(space.n))
    if isinstance(space, spaces.Box):
        return Box(space.low, space.high, tuple(space.shape))
    if isinstance(space, spaces.Dict):  # (nested spaces are converted entry by entry)
        return Dict({name: _convert_space(sub, what, env_name) for name, sub in space.spaces.items()})
    if isinstance(space, spaces.Tuple):
        return Tuple([_convert_space(sub, what, env_name) for sub in space.spaces])
    raise ValueError(
        f"gymnax env {env_name!r} has a {type(space).__name__} {what} space; "
        "eqxrl supports Discrete, Box, Dict and Tuple spaces"
    )


class GymnaxEnv(AbstractSuiteEnv):
    """A gymnax environment behind the eqxrl protocol.

    Steps with gymnax's `step_env` (no auto-reset: that is the `AutoReset`
    wrapper's job) and reports gymnax's time limit as `truncated`, distinct
    from the natural `terminated`.
    """

    handle: StaticHandle = eqx.field(static=True)
    params: PyTree
    prefix: ClassVar[str] = ""  # (`make` knows gymnax's envs by their own ids)
    gymnax_env = AbstractSuiteEnv.suite_env

    def __init__(self, env: Any, params: Any = None, *, key: Any = None):
        """**Arguments:**

        - `env`: a gymnax id (`"CartPole-v1"`) or a gymnax `Environment` instance.
        - `params`: gymnax `EnvParams`; the env's defaults when omitted.
        - `key`: a value key identifying `env` for the compilation cache (defaults
          to the id, or the instance itself).
        """
        if isinstance(env, str):
            import gymnax

            name = env
            # gymnax builds some envs (FourRooms, MetaMaze) with mixed-dtype arithmetic.
            with _foreign_promotion():
                env, default_params = gymnax.make(name)
            params = default_params if params is None else params
            key = (name,) if key is None else key
        elif params is None:
            with _foreign_promotion():
                params = env.default_params
        self.handle = StaticHandle(env, env if key is None else key)
        self.params = params

    @property
    def env_name(self) -> str:
        return self.gymnax_env.name

    @property
    def max_episode_steps(self) -> int | None:
        steps = getattr(self.params, "max_steps_in_episode", None)
        # Some gymnax envs keep the limit as a float (BernoulliBandit: 100.0).
        if isinstance(steps, (int, float, np.integer, np.floating)) and not isinstance(steps, bool):
            if float(steps).is_integer():
                return int(steps)
        return None

    @property
    def observation_space(self) -> AbstractSpace:
        with _foreign_promotion():
            space = self.gymnax_env.observation_space(self.params)
        return _convert_space(space, "observation", self.name)

    @property
    def action_space(self) -> AbstractSpace:
        with _foreign_promotion():
            space = self.gymnax_env.action_space(self.params)
        return _convert_space(space, "action", self.name)

    @property
    def renderer(self) -> Renderer | None:
        """For the classic-control envs, Gymnasium's drawing (gymnax's `vis_gym` helpers put the
        state into Gymnasium's env, which draws it with pygame, 600x400 pixels) at Gymnasium's
        `render_fps`; for MinAtar and the misc and bsuite envs it draws, gymnax's matplotlib
        `Visualizer` (one draw per state, 10 frames a second); None for the others."""
        if self.env_name in GYM_FPS:
            return Renderer("gymnasium classic control", functools.partial(_gym_frames, self), fps=GYM_FPS[self.env_name])
        if self.env_name in GYMNAX_MATPLOTLIB:
            return Renderer("gymnax visualizer", functools.partial(_figure_frames, self))
        return None

    def reset(self, key: Key) -> tuple[EnvState, TimeStep]:
        with _foreign_promotion():
            obs, state = self.gymnax_env.reset_env(key, self.params)
        return state, first_timestep(self._obs(obs))

    def _obs(self, obs: Any) -> Any:
        """A single-array observation as float32 (as always); a structured one (a gymnax `Dict` or
        `Tuple` space) as an element of `observation_space`: each leaf in its space's dtype."""
        if not isinstance(obs, (dict, tuple, list)):
            return jnp.asarray(obs, jnp.float32)
        space = self.observation_space
        leaves, treedef = flatten_space(space)
        values = treedef.flatten_up_to(as_element(space, obs))
        return treedef.unflatten([jnp.asarray(x, leaf.dtype) for x, leaf in zip(values, leaves)])

    def step(self, key: Key, state: EnvState, action: Array) -> tuple[EnvState, TimeStep]:
        env = self.gymnax_env
        with _foreign_promotion():
            obs, state, reward, terminated, _ = env.step_env(key, state, action, self.params)
            truncated = env.is_truncated(state, self.params)
        ts = TimeStep(
            obs=self._obs(obs),
            reward=jnp.asarray(reward, jnp.float32),
            terminated=jnp.asarray(terminated, bool),
            truncated=jnp.asarray(truncated, bool),
            info={},
        )
        return state, ts


_GYM_ENVS: dict[str, Any] = {}
"""One Gymnasium env per classic-control name, built at the first draw and reused (building it and
starting pygame is done once per process, not once per video)."""
_GYM_LOCK = threading.Lock()  # (one draw at a time: the env holds the state it draws)


def _gym_env(name: str) -> Any:
    if name not in _GYM_ENVS:
        # pygame starts SDL's audio and, without a display, complains about its video: neither is
        # used to draw into an array (ALSA and XDG_RUNTIME_DIR errors on a headless host otherwise).
        os.environ.setdefault("SDL_AUDIODRIVER", "dummy")
        if not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")):
            os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
        import gymnasium

        gym_env = gymnasium.make(name, render_mode="rgb_array")
        gym_env.reset(seed=0)
        _GYM_ENVS[name] = gym_env
    return _GYM_ENVS[name]


def _gym_frames(env: GymnaxEnv, seq: list[Any]) -> np.ndarray:
    from gymnax.visualize import vis_gym

    name = env.env_name
    # gymnax's render_gym_frame builds a Gymnasium env per frame; one env (per process) is given
    # each state with the same helpers, and each frame is copied once, into the output.
    with _GYM_LOCK:
        gym_env = _gym_env(name)
        unwrapped: Any = gym_env.unwrapped
        vis_gym.set_gym_params(unwrapped, name, env.params)
        frames = None
        for t, state in enumerate(seq):
            unwrapped.state = vis_gym.get_gym_state(state, name)
            if name == "Pendulum-v1":
                unwrapped.last_u = np.asarray(state.last_u, dtype=np.float64)
            frame = gym_env.render()
            if frames is None:
                frames = np.empty((len(seq), *frame.shape[:2], 3), np.uint8)
            frames[t] = frame[..., :3]
    assert frames is not None
    return frames


def _figure_frames(env: GymnaxEnv, seq: list[Any]) -> list[np.ndarray]:
    from gymnax.visualize.visualizer import Visualizer

    with _foreign_promotion():  # (gymnax's visualisers mix dtypes, as its envs do)
        vis = Visualizer(env.gymnax_env, env.params, seq)
        vis.init()
        return figure_frames(vis.fig, vis.update, len(seq))
