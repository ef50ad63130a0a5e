"""Drawing env states with each suite's own renderer, on the host.

An env says how its states become frames (`AbstractEnv.renderer`, a `Renderer`; wrappers forward
it): these functions ask the env, never its class. eqxrl's suites draw with their own renderers:

- gymnax classic control (CartPole, Pendulum, Acrobot, MountainCar, MountainCarContinuous):
  gymnax's `vis_gym` helpers put the state into Gymnasium's classic-control env, which draws it
  with pygame (`render_mode="rgb_array"`, 600x400 pixels).
- gymnax's matplotlib visualisers (MinAtar, Catch-bsuite, Pong-misc, PointRobot-misc,
  MetaMaze-misc, FourRooms-misc): `gymnax.visualize.Visualizer`'s figure, one draw per state.
- brax: `brax.io.image.render_array` (MuJoCo's OpenGL renderer: it needs a display, or
  `MUJOCO_GL=egl` set before MuJoCo is imported), and `brax.io.html.render`, brax's interactive
  HTML viewer (`render_html`).
- JaxMARL's MPE: `jaxmarl.environments.mpe.MPEVisualizer`'s figure, one draw per state.
- the optional suites (`eqxrl[suites]`): Craftax's and Navix's JAX pixel renderers (an episode in
  one compiled call), XLand-MiniGrid's and Jumanji's env `render`, pgx's SVG (through CairoSVG)
  and MuJoCo Playground's env `render` (MuJoCo's, as brax's).

Every other env raises a one-line `ValueError` naming it (`check_renderable`).
"""

from typing import Any

import jax
import numpy as np

from ._base import AbstractEnv, Renderer

__all__ = ["check_renderable", "frame_rate", "render_frames", "render_html", "renderer_name"]


def renderer_name(env: AbstractEnv) -> str | None:
    """**Returns:** which renderer draws `env`'s frames (`"gymnasium classic control"`,
    `"gymnax visualizer"`, `"brax"`, `"jaxmarl mpe"`, `"craftax"`, `"navix"`, `"xminigrid"`,
    `"jumanji"`, `"pgx"`, `"mujoco playground"`, or a new suite's), or None when `env` has none."""
    renderer = env.unwrapped.renderer
    return None if renderer is None else renderer.name


def _checked(env: AbstractEnv, html: bool, owner: str) -> Renderer:
    renderer = env.unwrapped.renderer
    if renderer is None:
        raise ValueError(
            f"{owner}: env {env.name!r} has no renderer (eqxrl draws gymnax's classic-control, MinAtar and "
            "misc envs with a visualiser, brax envs, JaxMARL's MPE, Craftax, Navix, XLand-MiniGrid, Jumanji, pgx "
            "and MuJoCo Playground)"
        )
    if renderer.check is not None:
        renderer.check(owner)
    if html and renderer.html is None:
        raise ValueError(f"{owner}(out): an .html file is brax's interactive viewer, and env {env.name!r} is not a brax env: write .gif or .mp4")
    return renderer


def check_renderable(env: AbstractEnv, html: bool = False, owner: str = "render") -> str:
    """Raise a one-line `ValueError` naming `owner` and `env` when eqxrl cannot draw it (or, with
    `html`, write brax's HTML viewer for it; or, for pgx, CairoSVG or the Cairo library is
    missing). **Returns:** the renderer's name (`renderer_name`)."""
    return _checked(env, html, owner).name


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
    """Draw a sequence of `env`'s states with its suite's renderer (`env.renderer`).

    **Arguments:** `env` (an eqxrl env, wrapped or not) and `states`: the innermost env states
    (`eqxrl.envs.innermost_state`, as `eqxrl.rollout(..., states=True)` returns them) stacked on a
    leading time axis.

    **Returns:** the frames, `uint8` of shape `(time, height, width, 3)`. Raises a one-line
    `ValueError` for an env without a renderer (`check_renderable`).
    """
    renderer = _checked(env, False, "render")
    leaves = jax.tree.leaves(states)
    if not leaves or not np.shape(leaves[0])[0]:
        raise ValueError("render_frames(states) must hold at least one state")
    frames = renderer.draw(states if renderer.stacked else _unstack(states))
    if isinstance(frames, np.ndarray):  # (the finished uint8 RGB frames)
        return frames
    return np.stack([np.asarray(f, np.uint8)[..., :3] for f in frames])


def render_html(env: AbstractEnv, states: Any) -> str:
    """brax's interactive HTML viewer (`brax.io.html.render`) of a brax env's `states` (stacked
    innermost states, as `render_frames` takes). **Returns:** the HTML page."""
    renderer = _checked(env, True, "render")
    assert renderer.html is not None
    return renderer.html(_unstack(states))


def frame_rate(env: AbstractEnv) -> int:
    """**Returns:** the frames per second an episode of `env` plays at in real time, as its renderer
    says: Gymnasium's `render_fps` for classic control, `1 / dt` for brax and MuJoCo Playground (its
    control step), the default of the suite's own animations for Jumanji (its env's `animate`
    interval) and pgx (5), 10 (gymnax's and JaxMARL's visualisers' 100 ms per frame) otherwise."""
    renderer = env.unwrapped.renderer
    return 10 if renderer is None else renderer.fps
