"""`eqxrl render RUN_DIR`: episodes of a run directory's policy as a GIF, an MP4 or brax's
interactive HTML, drawn with the env suite's own renderer."""

import argparse
import os
import sys
from typing import Any

from ..core import one_line
from ..loop import MAX_EVAL_EPISODES, check_video_path
from ..runs import render_run
from ._common import add_run_dir_command
from ._evaluate import add_checkpoint_flag, chosen_checkpoint
from ._flags import add_trust_flag
from ._parse import parse_int, parse_seed, positive


def add_render_command(commands: Any) -> None:
    """Add `eqxrl render RUN_DIR` to `commands`."""
    r = add_run_dir_command(
        commands,
        "render",
        help="record episodes of a run directory's policy (GIF, MP4 or brax's HTML viewer)",
        # Short, so that an error is two lines: the usage and the reason.
        usage="%(prog)s RUN_DIR [--checkpoint best|last|STEP] [--episodes N] [--out FILE.gif|.mp4|.html] [--FLAG ...]",
        description="Run episodes of the policy of a run directory and write them as an animated GIF, an MP4 "
        "(imageio, and CairoSVG for pgx: pip install 'eqxrl[video]') or, for a brax env, brax's interactive HTML "
        "viewer. Frames are drawn off screen with the env suite's own renderer.",
    )
    r.add_argument(
        "--out", default=None, metavar="FILE",
        help="the file to write: FILE.gif, FILE.mp4 or FILE.html (brax envs) (default: RUN_DIR/episode.gif)",
    )  # fmt: skip
    add_checkpoint_flag(r, "render")
    r.add_argument(
        "--episodes", type=positive(parse_int, MAX_EVAL_EPISODES), default=1, metavar="N",
        help="episodes to record, one after another in the file (default: 1)",
    )  # fmt: skip
    r.add_argument(
        "--max-steps", type=positive(parse_int), default=None, metavar="N",
        help="cut each episode after N steps (default: the env's time limit, or 10,000)",
    )  # fmt: skip
    r.add_argument("--member", type=parse_int, default=0, metavar="I", help="which seed of the run (default: 0)")
    r.add_argument(
        "--seed", type=parse_seed, default=None, metavar="S",
        help="the episodes' seed (default: the run's seed, as `eqxrl evaluate`'s first episodes)",
    )  # fmt: skip
    r.add_argument("--stochastic", action="store_true", help="sample actions from the policy instead of taking its mode")
    add_trust_flag(r)


def offscreen_rendering() -> None:
    """Draw frames off screen. Without a display, MuJoCo's renderer (brax's and MuJoCo
    Playground's frames) needs an off-screen OpenGL context: EGL, unless `MUJOCO_GL` says
    otherwise. matplotlib draws with Agg unless `MPLBACKEND` says otherwise (with an interactive
    backend, jumanji's viewers show their figures while they draw). Set before MuJoCo and
    matplotlib are imported (they read them then)."""
    if sys.platform.startswith("linux") and not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")):
        os.environ.setdefault("MUJOCO_GL", "egl")
    os.environ.setdefault("MPLBACKEND", "agg")


def render_command(args: argparse.Namespace) -> int:
    parser = args._parser
    offscreen_rendering()
    try:
        if args.out is not None:
            check_video_path(args.out, "--out")
        checkpoint = chosen_checkpoint(args.run_dir, args.checkpoint, "rendering")
        recording = render_run(
            args.run_dir, args.out, checkpoint=checkpoint, member=args.member, episodes=args.episodes,
            seed=args.seed, deterministic=not args.stochastic, max_steps=args.max_steps,
        )  # fmt: skip
    except ValueError as e:
        parser.error(one_line(e))
    lengths = ", ".join(str(n) for n in recording.lengths)
    returns = ", ".join(f"{r:.2f}" for r in recording.returns)
    print(f"wrote {recording.path} ({len(recording.lengths)} episode(s) of {lengths} steps, returns {returns}, {recording.fps} fps)")
    return 0
