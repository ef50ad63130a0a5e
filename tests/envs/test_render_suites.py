"""Episode recording of the optional suites' envs (`eqxrl[suites]`), each with the suite's own
renderer: the frames of `eqxrl.render` equal the frames that renderer draws, called directly, of
`eqxrl.rollout`'s states with the same key (one per step of the episode), and the GIF written
reads back with imageio."""

import json
import os
import pathlib
import subprocess
import sys
import textwrap

import equinox as eqx
import imageio.v3 as iio
import jax
import numpy as np
import pytest
from typecheck import no_runtime_typecheck

import eqxrl
from eqxrl.agents import PPO
from eqxrl.envs import check_renderable, frame_rate, make, render_frames

ROOT = pathlib.Path(__file__).resolve().parents[2]
TINY = dict(num_envs=2, rollout_length=8, num_epochs=1, num_minibatches=1, hidden_sizes=(8,))


def _craftax(inner, states):
    from craftax.craftax_classic.constants import BLOCK_PIXEL_SIZE_IMG
    from craftax.craftax_classic.renderer import make_craftax_pixel_renderer

    with eqxrl.core.foreign_promotion():
        draw = jax.jit(make_craftax_pixel_renderer(BLOCK_PIXEL_SIZE_IMG))  # (per state: no vmap)
        pixels = [np.asarray(draw(s)) for s in states]
    return [np.clip(np.rint(p), 0, 255).astype(np.uint8) for p in pixels]


def _xminigrid(inner, states):
    params = inner.params.replace(render_mode="rgb_array")
    return [inner.xminigrid_env.render(params, s) for s in states]


def _navix(inner, states):
    from navix.observations import rgb

    return [rgb(jax.tree.map(jax.numpy.asarray, s.state)) for s in states]


def _jumanji(inner, states):
    from jumanji.environments.routing.snake.viewer import SnakeViewer

    viewer = SnakeViewer(render_mode="rgb_array")  # (what Snake draws with, returning its pixels)
    try:  # (each a copy: the viewer returns a view of its canvas, which the next draw overwrites)
        return [np.array(viewer.render(s)) for s in states]
    finally:
        viewer.close()


def _pgx(inner, states, tmp_path):
    import cairosvg

    frames = []
    for t, s in enumerate(states):  # pgx's SVG file, drawn by CairoSVG into a PNG file, read back
        s.game.save_svg(str(tmp_path / f"{t}.svg"))
        cairosvg.svg2png(url=str(tmp_path / f"{t}.svg"), write_to=str(tmp_path / f"{t}.png"))
        frames.append(iio.imread(tmp_path / f"{t}.png"))
    return frames


SUITES = {
    "craftax/Craftax-Classic-Symbolic-v1": (_craftax, 10),
    "xminigrid/MiniGrid-Empty-5x5": (_xminigrid, 10),
    "navix/Navix-Empty-5x5-v0": (_navix, 10),
    "jumanji/Snake-v1": (_jumanji, 5),
    "pgx/tic_tac_toe": (_pgx, 5),
}
"""Each suite's env, its renderer called directly on a list of states, and its frame rate."""


def _merged(frames: np.ndarray) -> np.ndarray:
    """`frames` with each run of identical consecutive frames kept once (as Pillow writes a GIF)."""
    keep = [0] + [t for t in range(1, len(frames)) if not np.array_equal(frames[t], frames[t - 1])]
    return frames[keep]


@pytest.mark.slow  # (over 2 s in the fast tier: tests/tiers.py)
@pytest.mark.parametrize("name", list(SUITES))
def test_frames_are_the_suites_own(name, tmp_path):
    """One frame per step of the episode, each what the suite's renderer draws of that state of
    `eqxrl.rollout` (same key), at the suite's frame rate; the GIF reads back."""
    direct, fps = SUITES[name]
    agent = PPO(name, **TINY)
    key = jax.random.key(0)
    state = eqx.filter_jit(agent.init)(key)  # (compiled: Craftax's reset runs slowly op by op)
    # (sampled actions: an untrained policy's mode may stand still)
    rec = eqxrl.render(agent, state, key, tmp_path / "episode.gif", max_steps=5, deterministic=False)
    traj = eqxrl.rollout(agent, state, key, 5, states=True, deterministic=False)
    done = traj["terminated"][:, 0] | traj["truncated"][:, 0]
    n = int(np.argmax(done)) + 1 if done.any() else 5
    frames = rec.frames[0]
    assert rec.lengths == [n] and frames.shape[0] == n and frames.dtype == np.uint8 and frames.shape[-1] == 3
    states = [jax.tree.map(lambda x: x[t, 0], traj["state"]) for t in range(n)]  # noqa: B023
    own = direct(agent.eval_env.unwrapped, states, *([tmp_path] if name.startswith("pgx") else []))
    np.testing.assert_array_equal(frames, np.stack([np.asarray(f)[..., :3] for f in own]))
    assert frames.max() > frames.min() and len(_merged(frames)) > 1  # (a drawn scene, and it changes)
    assert rec.fps == frame_rate(agent.eval_env) == fps
    gif = iio.imread(rec.path, index=None)[..., :3]
    assert gif.shape[1:] == frames.shape[1:] and len(gif) == len(_merged(frames))


@pytest.mark.slow  # (over 2 s in the fast tier: tests/tiers.py)
def test_playground_frames(tmp_path):
    """MuJoCo Playground through its env's `render` (MuJoCo's OpenGL renderer), in a process started
    with MUJOCO_GL=egl, as `eqxrl render` sets it on a host without a display."""
    script = textwrap.dedent(
        """
        import json, sys, jax, numpy as np, imageio.v3 as iio, eqxrl
        from eqxrl.agents import PPO
        agent = PPO("playground/CartpoleBalance", num_envs=2, rollout_length=8, num_epochs=1, num_minibatches=1,
                    hidden_sizes=(8,))
        state = agent.init(jax.random.key(0))
        key = jax.random.key(1)
        rec = eqxrl.render(agent, state, key, sys.argv[1] + "/p.gif", max_steps=4)
        traj = eqxrl.rollout(agent, state, key, 4, states=True)
        n = rec.lengths[0]
        own = agent.eval_env.unwrapped.playground_env.render([jax.tree.map(lambda x: x[t, 0], traj["state"]) for t in range(n)])
        gif = iio.imread(sys.argv[1] + "/p.gif", index=None)
        colours = len(np.unique(rec.frames[0].reshape(-1, 3), axis=0))
        print(json.dumps(dict(length=n, shape=rec.frames[0].shape, equal=bool(np.array_equal(rec.frames[0], np.stack(own))),
                              gif=gif.shape, fps=rec.fps, colours=colours)))
        """
    )
    path = os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])
    env = {**os.environ, "MUJOCO_GL": "egl", "PYTHONPATH": path}
    done = subprocess.run([sys.executable, "-c", script, str(tmp_path)], capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["length"] == 4 and got["shape"] == [4, 240, 320, 3] and got["equal"]  # (a balanced pole: no end in 4 steps)
    assert 1 <= got["gif"][0] <= 4 and got["gif"][1:3] == [240, 320]
    assert got["colours"] > 10 and got["fps"] == 100  # (a drawn scene; CartpoleBalance's ctrl_dt is 0.01 s)


@pytest.mark.slow  # (over 2 s in the fast tier: tests/tiers.py)
def test_suite_renderer_errors(monkeypatch):
    """pgx without CairoSVG (or the Cairo library), and MuJoCo Playground's renderer failing
    (no OpenGL context): one line each, saying what to install or set."""
    pgx = make("pgx/tic_tac_toe")
    assert check_renderable(pgx) == "pgx"
    monkeypatch.setitem(sys.modules, "cairosvg", None)
    with no_runtime_typecheck():
        with pytest.raises(ValueError, match=r"^render: pgx env 'pgx/tic_tac_toe' draws SVG, which needs CairoSVG and the "
                                             r"system's Cairo library to become frames \(.*\): pip install 'eqxrl\[video\]', "
                                             r"and install Cairo \(libcairo2 on Debian and Ubuntu\)$"):  # fmt: skip
            render_frames(pgx, {"x": np.zeros(2)})
        with pytest.raises(ValueError, match=r"^--record-every: pgx env 'pgx/tic_tac_toe' draws SVG, which needs CairoSVG"):
            eqxrl.runs.check_recordable(PPO("pgx/tic_tac_toe", **TINY), owner="--record-every")

        playground = make("playground/CartpoleBalance")
        assert check_renderable(playground) == "mujoco playground"

        def no_context(self, trajectory, *args, **kwargs):
            raise RuntimeError("gladLoadGL error\nmore")

        monkeypatch.setattr(type(playground.unwrapped.playground_env), "render", no_context)
        monkeypatch.delenv("MUJOCO_GL", raising=False)
        with pytest.raises(ValueError, match=r"^render: playground env 'playground/CartpoleBalance' draws frames with MuJoCo's OpenGL "
                                             r"renderer, which failed here \(gladLoadGL error\): start Python with "
                                             r"MUJOCO_GL=egl \(or osmesa\) set$"):  # fmt: skip
            render_frames(playground, {"x": np.zeros(2)})


def test_cli_renders_off_screen(monkeypatch):
    """`eqxrl render` and `--record-every` draw off screen: matplotlib's Agg (jumanji's viewers
    would show their figures under an interactive backend) and, without a display, MuJoCo's EGL;
    a setting already in the environment is kept."""
    from eqxrl.cli._render import offscreen_rendering  # (private: the command line's off-screen setting, called directly)

    for name in ("MPLBACKEND", "MUJOCO_GL", "DISPLAY", "WAYLAND_DISPLAY"):
        monkeypatch.delenv(name, raising=False)
    offscreen_rendering()
    assert os.environ["MPLBACKEND"] == "agg" and os.environ.get("MUJOCO_GL") == ("egl" if sys.platform.startswith("linux") else None)
    monkeypatch.setenv("MPLBACKEND", "qtagg")
    monkeypatch.setenv("MUJOCO_GL", "osmesa")
    offscreen_rendering()
    assert os.environ["MPLBACKEND"] == "qtagg" and os.environ["MUJOCO_GL"] == "osmesa"
