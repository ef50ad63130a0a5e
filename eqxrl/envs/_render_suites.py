"""The renderers of the optional suites (`eqxrl[suites]`), each the suite's own, for
`eqxrl.envs.render_frames` (`_render.py` says which env draws with which, and checks the frames).

- Craftax (and Craftax-Classic): its pixel renderer (`make_craftax_pixel_renderer`, a JAX
  function: every state of an episode drawn in one compiled call), at 16 pixels per block.
- Navix: `navix.observations.rgb` (the whole grid, Navix's 8-pixel tiles; a JAX function, an
  episode in one compiled call), the image Navix's own PPO logs.
- XLand-MiniGrid: its env's `render(params, timestep)` (`render_mode="rgb_array"`), per state.
- Jumanji: its env's `render(state)` (a matplotlib viewer: the env's named pyplot figure, read
  back as RGB). Off screen with matplotlib's Agg backend, the default without a display; under an
  interactive backend jumanji shows its figure while it draws (`MPLBACKEND=agg` keeps it off).
- pgx: the game state's `to_svg()`, turned into pixels by CairoSVG (the `video` extra), which needs
  the system's Cairo library (`libcairo2`).
- MuJoCo Playground: its env's `render(trajectory)` (MuJoCo's OpenGL renderer, 240x320, the free
  camera): like brax, it needs a display or `MUJOCO_GL=egl` set before MuJoCo is imported.
"""

import contextlib
import io
import threading
from collections.abc import Callable
from typing import Any

import jax
import numpy as np

from ..core import foreign_promotion
from ._craftax import CraftaxEnv
from ._jumanji import JumanjiEnv
from ._navix import NavixEnv
from ._pgx import PgxEnv
from ._playground import PlaygroundEnv
from ._xminigrid import XMiniGridEnv

__all__ = ["craftax_frames", "has_jumanji_renderer", "import_cairosvg", "jumanji_fps", "jumanji_frames", "navix_frames",
           "pgx_frames", "playground_frames", "xminigrid_frames"]  # fmt: skip

PGX_FPS = 5
"""pgx's frame rate: its SVG animations' default of 0.2 s a frame (`pgx.set_visualization_config`)."""

_JAX_RENDERERS: dict[Any, Callable[[Any], Any]] = {}
"""The JAX renderers compiled over a time axis, by suite (and Craftax's variant)."""


def craftax_frames(env: CraftaxEnv, states: Any) -> np.ndarray:
    classic = "craftax_classic" in type(env.craftax_env).__module__
    if ("craftax", classic) not in _JAX_RENDERERS:
        if classic:
            from craftax.craftax_classic.constants import BLOCK_PIXEL_SIZE_IMG
            from craftax.craftax_classic.renderer import make_craftax_pixel_renderer
        else:
            from craftax.craftax.constants import BLOCK_PIXEL_SIZE_IMG
            from craftax.craftax.renderer import make_craftax_pixel_renderer
        with foreign_promotion():  # (Craftax mixes dtypes, as its envs do)
            draw = make_craftax_pixel_renderer(BLOCK_PIXEL_SIZE_IMG)
        _JAX_RENDERERS["craftax", classic] = jax.jit(jax.vmap(draw))
    with foreign_promotion():
        pixels = np.asarray(_JAX_RENDERERS["craftax", classic](states))
    return np.clip(np.rint(pixels), 0, 255).astype(np.uint8)[..., :3]


def navix_frames(env: NavixEnv, timesteps: Any) -> np.ndarray:
    """Navix's full-grid RGB image of each state of `timesteps` (Navix `Timestep`s, stacked)."""
    del env  # (the image is drawn from the state alone: its grid, entities and cached background)
    if "navix" not in _JAX_RENDERERS:
        from navix.observations import rgb

        _JAX_RENDERERS["navix"] = jax.jit(jax.vmap(rgb))
    with foreign_promotion():
        return np.asarray(_JAX_RENDERERS["navix"](timesteps.state), np.uint8)[..., :3]


def xminigrid_frames(env: XMiniGridEnv, seq: list[Any]) -> list[np.ndarray]:
    params = env.params.replace(render_mode="rgb_array")
    return [np.asarray(env.xminigrid_env.render(params, timestep)) for timestep in seq]


def has_jumanji_renderer(env: JumanjiEnv) -> bool:
    """Whether the jumanji env has its own `render` (every jumanji 1.1.2 env does; the base
    `Environment`'s raises `NotImplementedError`)."""
    from jumanji.env import Environment

    return type(env.jumanji_env).render is not Environment.render


def jumanji_fps(env: JumanjiEnv) -> int:
    """The frame rate of the env's own animations: its `animate`'s default `interval` (ms)."""
    import inspect

    interval = inspect.signature(env.jumanji_env.animate).parameters.get("interval")
    ms = getattr(interval, "default", None)
    return max(1, round(1000 / ms)) if isinstance(ms, (int, float)) and ms > 0 else 10


_PYPLOT_LOCK = threading.Lock()  # (jumanji's viewers draw into pyplot's current figure, one draw at a time)


def jumanji_frames(env: JumanjiEnv, seq: list[Any]) -> list[np.ndarray]:
    import matplotlib.pyplot as plt

    jenv = env.jumanji_env
    frames = []
    with _PYPLOT_LOCK, foreign_promotion():
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


def import_cairosvg(env: PgxEnv, owner: str) -> Any:
    """`cairosvg`, or a one-line `ValueError` naming `owner` and saying what to install."""
    try:
        import cairosvg
    except (ImportError, OSError) as e:  # (OSError: cairocffi found no Cairo library)
        reason = str(e).strip().splitlines()[0][:120] if str(e).strip() else type(e).__name__
        raise ValueError(
            f"{owner}: pgx env {env.name!r} draws SVG, which needs CairoSVG and the system's Cairo library to become "
            f"frames ({reason}): pip install 'eqxrl[video]', and install Cairo (libcairo2 on Debian and Ubuntu)"
        ) from None
    return cairosvg


def pgx_frames(env: PgxEnv, seq: list[Any]) -> list[np.ndarray]:
    from PIL import Image

    cairosvg = import_cairosvg(env, "render")
    frames = []
    with foreign_promotion():
        for state in seq:
            png = cairosvg.svg2png(bytestring=state.game.to_svg().encode())
            frames.append(np.asarray(Image.open(io.BytesIO(png)).convert("RGB")))
    return frames


def playground_frames(env: PlaygroundEnv, seq: list[Any]) -> list[np.ndarray]:
    with contextlib.redirect_stderr(io.StringIO()):  # (its render shows a tqdm progress bar)
        return list(env.playground_env.render(seq))
