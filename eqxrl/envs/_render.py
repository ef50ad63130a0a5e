"""Drawing env states with each suite's own renderer, on the host.

- gymnax classic control (CartPole, Pendulum, Acrobot, MountainCar, MountainCarContinuous):
  gymnax's `vis_gym` helpers put the state into Gymnasium's classic-control env, which draws it
  with pygame (`render_mode="rgb_array"`, 600x400 pixels).
- gymnax's matplotlib visualisers (MinAtar, Catch-bsuite, Pong-misc, PointRobot-misc,
  MetaMaze-misc, FourRooms-misc): `gymnax.visualize.Visualizer`'s figure, one draw per state.
- brax: `brax.io.image.render_array` (MuJoCo's OpenGL renderer: it needs a display, or
  `MUJOCO_GL=egl` set before MuJoCo is imported), and `brax.io.html.render`, brax's interactive
  HTML viewer (`render_html`).
- JaxMARL's MPE: `jaxmarl.environments.mpe.MPEVisualizer`'s figure, one draw per state.
- the optional suites (`eqxrl[suites]`), in `_render_suites.py`: Craftax's and Navix's JAX pixel
  renderers (an episode in one compiled call), XLand-MiniGrid's and Jumanji's env `render`, pgx's
  SVG (through CairoSVG) and MuJoCo Playground's env `render` (MuJoCo's, as brax's).

Every other env raises a one-line `ValueError` naming it (`check_renderable`).
"""

import contextlib
import io
import os
import threading
from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np

from ..core import foreign_promotion
from ._base import AbstractEnv
from ._brax import BraxEnv
from ._craftax import CraftaxEnv
from ._gymnax import GymnaxEnv
from ._jaxmarl import JaxMARLEnv
from ._jumanji import JumanjiEnv
from ._navix import NavixEnv
from ._pgx import PgxEnv
from ._playground import PlaygroundEnv
from ._render_suites import (PGX_FPS, craftax_frames, has_jumanji_renderer, import_cairosvg, jumanji_fps, jumanji_frames,
                             navix_frames, pgx_frames, playground_frames, xminigrid_frames)  # fmt: skip
from ._xminigrid import XMiniGridEnv

__all__ = ["check_renderable", "frame_rate", "render_frames", "render_html", "renderer_name"]

GYM_CLASSIC = ("Acrobot-v1", "CartPole-v1", "Pendulum-v1", "MountainCar-v0", "MountainCarContinuous-v0")
GYMNAX_MATPLOTLIB = (
    "Asterix-MinAtar", "Breakout-MinAtar", "Freeway-MinAtar", "Seaquest-MinAtar", "SpaceInvaders-MinAtar",
    "Pong-misc", "Catch-bsuite", "PointRobot-misc", "MetaMaze-misc", "FourRooms-misc",
)  # fmt: skip
BRAX_SIZE = (240, 320)  # (height, width) of brax frames


def _is_mpe(env: Any) -> bool:
    if not isinstance(env, JaxMARLEnv):
        return False
    from jaxmarl.environments.mpe import SimpleMPE

    return isinstance(env.jaxmarl_env, SimpleMPE)


def renderer_name(env: AbstractEnv) -> str | None:
    """**Returns:** which renderer draws `env`'s frames (`"gymnasium classic control"`,
    `"gymnax visualizer"`, `"brax"`, `"jaxmarl mpe"`, `"craftax"`, `"navix"`, `"xminigrid"`,
    `"jumanji"`, `"pgx"`, `"mujoco playground"`), or None when eqxrl knows none for it."""
    inner = env.unwrapped
    if isinstance(inner, GymnaxEnv):
        if inner.env_name in GYM_CLASSIC:
            return "gymnasium classic control"
        if inner.env_name in GYMNAX_MATPLOTLIB:
            return "gymnax visualizer"
        return None
    if isinstance(inner, BraxEnv):
        return "brax"
    if _is_mpe(inner):
        return "jaxmarl mpe"
    if isinstance(inner, CraftaxEnv):
        return "craftax"
    if isinstance(inner, NavixEnv):
        return "navix"
    if isinstance(inner, XMiniGridEnv):
        return "xminigrid"
    if isinstance(inner, JumanjiEnv):
        return "jumanji" if has_jumanji_renderer(inner) else None
    if isinstance(inner, PgxEnv):
        return "pgx"
    if isinstance(inner, PlaygroundEnv):
        return "mujoco playground"
    return None


def check_renderable(env: AbstractEnv, html: bool = False, owner: str = "render") -> str:
    """Raise a one-line `ValueError` naming `owner` and `env` when eqxrl cannot draw it (or, with
    `html`, write brax's HTML viewer for it; or, for pgx, CairoSVG or the Cairo library is
    missing). **Returns:** the renderer's name (`renderer_name`)."""
    name = renderer_name(env)
    if name is None:
        raise ValueError(
            f"{owner}: env {env.name!r} has no renderer (eqxrl draws gymnax's classic-control, MinAtar and "
            "misc envs with a visualiser, brax envs, JaxMARL's MPE, Craftax, Navix, XLand-MiniGrid, Jumanji, pgx "
            "and MuJoCo Playground)"
        )
    if name == "pgx":
        inner = env.unwrapped
        assert isinstance(inner, PgxEnv)
        import_cairosvg(inner, owner)
    if html and name != "brax":
        raise ValueError(f"{owner}(out): an .html file is brax's interactive viewer, and env {env.name!r} is not a brax env: write .gif or .mp4")
    return name


def _frame_at(states: Any, t: int, i: int | None = None) -> Any:
    """The state at step `t` (and env `i`) of a stacked pytree of states, as NumPy arrays."""
    def at(x: Any) -> Any:
        x = x[t] if i is None else x[t, i]
        # (a PRNG key, as XLand-MiniGrid's state holds, has no NumPy form: it stays a JAX array)
        return x if jax.dtypes.issubdtype(getattr(x, "dtype", None), jax.dtypes.prng_key) else np.asarray(x)

    return jax.tree.map(at, states)


def _unstack(states: Any) -> list[Any]:
    leaves = jax.tree.leaves(states)
    n = int(np.shape(leaves[0])[0]) if leaves else 0
    return [_frame_at(states, t) for t in range(n)]


def render_frames(env: AbstractEnv, states: Any) -> np.ndarray:
    """Draw a sequence of `env`'s states with its suite's renderer.

    **Arguments:** `env` (an eqxrl env, wrapped or not) and `states`: the innermost env states
    (`eqxrl.envs.innermost_state`, as `eqxrl.rollout(..., states=True)` returns them) stacked on a
    leading time axis.

    **Returns:** the frames, `uint8` of shape `(time, height, width, 3)`. Raises a one-line
    `ValueError` for an env without a renderer (`check_renderable`).
    """
    name = check_renderable(env)
    inner: Any = env.unwrapped
    leaves = jax.tree.leaves(states)
    if not leaves or not np.shape(leaves[0])[0]:
        raise ValueError("render_frames(states) must hold at least one state")
    if name in _JAX_RENDERERS:  # (the stacked states in one compiled call)
        return _JAX_RENDERERS[name](inner, states)
    seq = _unstack(states)
    if name == "gymnasium classic control":
        return _gym_frames(inner, seq)  # (uint8 RGB already)
    if name in ("brax", "mujoco playground"):
        frames = _mujoco_frames(inner, seq, _brax_frames if name == "brax" else playground_frames)
    else:
        frames = _HOST_RENDERERS[name](inner, seq)
    return np.stack([np.asarray(f, np.uint8)[..., :3] for f in frames])


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


def _figure_frames(fig: Any, update: Callable[[int], Any], n: int) -> list[np.ndarray]:
    """Draw `n` frames of a matplotlib figure, `update(t)` before each draw, then close it."""
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


def _gymnax_figure_frames(env: GymnaxEnv, seq: list[Any]) -> list[np.ndarray]:
    from gymnax.visualize.visualizer import Visualizer

    with foreign_promotion():  # (gymnax's visualisers mix dtypes, as its envs do)
        vis = Visualizer(env.gymnax_env, env.params, seq)
        vis.init()
        return _figure_frames(vis.fig, vis.update, len(seq))


def _mpe_frames(env: JaxMARLEnv, seq: list[Any]) -> list[np.ndarray]:
    from jaxmarl.environments.mpe import MPEVisualizer

    with foreign_promotion():
        with contextlib.redirect_stdout(io.StringIO()):  # (it prints whether agents communicate)
            vis = MPEVisualizer(env.jaxmarl_env, seq)
        return _figure_frames(vis.fig, vis.update, len(seq))


def _brax_frames(env: BraxEnv, seq: Sequence[Any]) -> list[np.ndarray]:
    from brax.io import image

    height, width = BRAX_SIZE
    return list(image.render_array(env.brax_env.sys, [s.pipeline_state for s in seq], height, width))


def _mujoco_frames(env: Any, seq: Sequence[Any], draw: Callable[[Any, Any], list[np.ndarray]]) -> list[np.ndarray]:
    """`draw(env, seq)` with MuJoCo's OpenGL renderer (brax, MuJoCo Playground); its failure (a host
    without a display, and no off-screen context) as a one-line `ValueError` saying what to set."""
    try:
        return draw(env, seq)
    except Exception as e:
        fix = "start Python with MUJOCO_GL=egl (or osmesa) set" if not os.environ.get("MUJOCO_GL") else "check MUJOCO_GL"
        reason = str(e).strip().splitlines()[0][:160] if str(e).strip() else type(e).__name__
        brax = isinstance(env, BraxEnv)
        raise ValueError(
            f"render: {'brax' if brax else 'playground'} env {env.name!r} draws frames with MuJoCo's OpenGL renderer, "
            f"which failed here ({reason}): {fix}" + (", or write an .html file (brax's interactive viewer)" if brax else "")
        ) from None


_JAX_RENDERERS: dict[str, Callable[[Any, Any], np.ndarray]] = {"craftax": craftax_frames, "navix": navix_frames}
"""The renderers that are JAX functions: an episode's stacked states drawn in one compiled call."""
_HOST_RENDERERS: dict[str, Callable[[Any, list[Any]], Any]] = {
    "gymnax visualizer": _gymnax_figure_frames, "jaxmarl mpe": _mpe_frames, "xminigrid": xminigrid_frames,
    "jumanji": jumanji_frames, "pgx": pgx_frames,
}  # fmt: skip
"""The renderers that draw one state at a time on the host (the others: Gymnasium's, and MuJoCo's)."""


def render_html(env: AbstractEnv, states: Any) -> str:
    """brax's interactive HTML viewer (`brax.io.html.render`) of a brax env's `states` (stacked
    innermost states, as `render_frames` takes). **Returns:** the HTML page."""
    check_renderable(env, html=True)
    from brax.io import html as brax_html

    inner = env.unwrapped
    assert isinstance(inner, BraxEnv)
    return brax_html.render(inner.brax_env.sys, [s.pipeline_state for s in _unstack(states)])


# Gymnasium's classic-control `metadata["render_fps"]`.
_GYM_FPS = {"Acrobot-v1": 15, "CartPole-v1": 50, "Pendulum-v1": 30, "MountainCar-v0": 30, "MountainCarContinuous-v0": 30}


def frame_rate(env: AbstractEnv) -> int:
    """**Returns:** the frames per second an episode of `env` plays at in real time: Gymnasium's
    `render_fps` for classic control, `1 / dt` for brax and MuJoCo Playground (its control step),
    the default of the suite's own animations for Jumanji (its env's `animate` interval) and pgx
    (5), 10 (gymnax's and JaxMARL's visualisers' 100 ms per frame) otherwise."""
    inner = env.unwrapped
    if isinstance(inner, GymnaxEnv) and inner.env_name in _GYM_FPS:
        return _GYM_FPS[inner.env_name]
    if isinstance(inner, BraxEnv):
        return max(1, round(1.0 / float(inner.brax_env.dt)))
    if isinstance(inner, PlaygroundEnv):
        return max(1, round(1.0 / float(inner.playground_env.dt)))
    if isinstance(inner, JumanjiEnv):
        return jumanji_fps(inner)
    if isinstance(inner, PgxEnv):
        return PGX_FPS
    return 10
