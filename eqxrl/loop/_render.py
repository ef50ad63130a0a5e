"""Episode recording: `render` runs episodes of a trained policy in the compiled rollout (which
collects the env states), draws them on the host with the suite's renderer
(`eqxrl.envs.render_frames`) and writes a GIF or MP4 with imageio, or brax's interactive HTML."""

import os
import pathlib
import warnings
from typing import Any

import equinox as eqx
import jax
import numpy as np
from jaxtyping import PyTree

from ..core import Key, check_positive_int
from ..envs import check_renderable, frame_rate, render_frames, render_html
from ._chunk import placeholder
from ._evaluate import _rollout, default_eval_steps, rollout, state_batch
from ._keys import MAX_EVAL_EPISODES, as_keys

__all__ = ["FAST_H264", "Recording", "VIDEO_SUFFIXES", "check_video_path", "precompile_rollout", "render", "require_imageio", "video_bytes", "write_video"]

VIDEO_SUFFIXES = (".gif", ".mp4", ".html")
"""The files `render` writes: an animated GIF, an H.264 MP4, or brax's interactive HTML viewer."""


class Recording:
    """What `render` returns.

    - `frames`: one `uint8` array `(length, height, width, 3)` per episode (none for an
      `.html` file, which brax's viewer draws from the states in the browser);
    - `lengths`, `returns`: each episode's steps and undiscounted return;
    - `fps`: the frame rate the file plays at; `path`: the file written, or None.
    """

    def __init__(self, frames: list[np.ndarray], lengths: list[int], returns: list[float], fps: int, path: pathlib.Path | None):
        self.frames, self.lengths, self.returns, self.fps, self.path = frames, lengths, returns, fps, path

    def __repr__(self) -> str:
        return f"Recording(episodes={len(self.lengths)}, lengths={self.lengths}, fps={self.fps}, path={self.path})"


def check_video_path(path: Any, owner: str = "render(out)") -> pathlib.Path:
    """`path` as a `pathlib.Path` ending in `.gif`, `.mp4` or `.html`, in an existing directory,
    and imageio importable for a video; else a one-line `ValueError` naming `owner`."""
    path = pathlib.Path(path)
    suffix = path.suffix.lower()
    if suffix not in VIDEO_SUFFIXES:
        raise ValueError(f"{owner} must end in .gif, .mp4 or .html, got {str(path)!r}")
    if not path.parent.is_dir():
        raise ValueError(f"{owner} must be in an existing directory, got {str(path)!r}")
    if suffix != ".html":
        require_imageio(suffix, owner.split("(")[0])
    return path


def require_imageio(suffix: str, owner: str) -> Any:
    """**Returns:** `imageio.v3`, with imageio-ffmpeg for an `.mp4` `suffix`; without them, a one-line
    `ValueError` naming `owner` and `pip install 'eqxrl[video]'`."""
    try:
        import imageio.v3 as iio

        if suffix == ".mp4":
            import imageio_ffmpeg  # noqa: F401  (imageio's MP4 writer runs its ffmpeg)
    except ImportError:
        raise ValueError(f"{owner} needs imageio and imageio-ffmpeg to write videos: pip install 'eqxrl[video]'") from None
    return iio


def _even(frames: np.ndarray) -> np.ndarray:
    """Frames padded (black, at the bottom and right) to an even height and width, which H.264's
    4:2:0 colour sampling needs."""
    _, h, w, _ = frames.shape
    return np.pad(frames, ((0, 0), (0, h % 2), (0, w % 2), (0, 0)))


def video_bytes(frames: np.ndarray, fps: int) -> bytes:
    """An animated GIF of `frames` (`uint8`, `(n, height, width, 3)`) at `fps`, looping, written by
    imageio's Pillow plugin. Pillow merges identical consecutive frames into one shown longer, so the
    file may hold fewer frames than `n`; it plays for as long."""
    iio = require_imageio(".gif", "render")
    return iio.imwrite("<bytes>", np.asarray(frames, np.uint8), extension=".gif", duration=1000.0 / fps, loop=0)


FAST_H264 = ("-preset", "ultrafast", "-tune", "zerolatency")
"""x264's cheapest settings, for `write_video(fast=True)`: about half the CPU time of its default
(`medium`) for a file about three times larger (CartPole, 500 frames: ~0.8 s and ~190 kB)."""


def write_video(path: Any, frames: np.ndarray, fps: int, fast: bool = False) -> pathlib.Path:
    """Write `frames` (`uint8`, `(n, height, width, 3)`) at `fps` to `path`: `.gif` (`video_bytes`)
    or `.mp4` (H.264 by imageio's ffmpeg plugin, imageio-ffmpeg's ffmpeg; frames padded to even
    sizes; `fast`: x264's cheapest settings, `FAST_H264`, for videos recorded while training).
    Written to a temporary name beside it, then renamed. **Returns:** the path."""
    path = check_video_path(path, "write_video(path)")
    frames = np.asarray(frames, np.uint8)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}{path.suffix}")
    try:
        if path.suffix.lower() == ".gif":
            tmp.write_bytes(video_bytes(frames, fps))
        else:
            iio = require_imageio(".mp4", "render")
            with warnings.catch_warnings():
                # JAX warns at every fork; imageio's ffmpeg is a fork followed at once by exec.
                warnings.filterwarnings("ignore", "os.fork", RuntimeWarning)
                iio.imwrite(tmp, _even(frames), plugin="FFMPEG", fps=fps, codec="libx264", macro_block_size=2,
                            ffmpeg_log_level="error", output_params=list(FAST_H264) if fast else None)  # fmt: skip
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def precompile_rollout(agent: Any, num_steps: int) -> None:
    """Compile the program of `rollout(agent, state, key, num_steps, states=True)` for one run's
    state (not a batch) ahead of time, from `agent.init`'s shapes, into JAX's cache: the call that
    follows runs at once. `VideoRecorder` calls it on a thread while the training chunk compiles
    (XLA releases the GIL), so that the first video does not compile."""
    key = jax.random.key(0)
    like = placeholder(eqx.filter_eval_shape(agent.init, key), key)
    # Committed to the device, as the training state is: jit's cache tells them apart.
    like = jax.device_put(like, jax.devices()[0])
    batch = state_batch("rollout", agent, like)
    _rollout.lower(batch, like, key, 1, int(num_steps), True, True).compile()


def _episode_ends(trajectory: dict[str, Any], max_steps: int) -> list[int]:
    """Each env's first episode length: its first `terminated | truncated` step, or `max_steps`."""
    done = np.asarray(trajectory["terminated"]) | np.asarray(trajectory["truncated"])
    return [int(np.argmax(done[:, i])) + 1 if done[:, i].any() else max_steps for i in range(done.shape[1])]


def render(
    agent: Any,
    state: PyTree,
    key: Key | Any,
    out: Any = None,
    *,
    episodes: int = 1,
    max_steps: int | None = None,
    deterministic: bool = True,
    member: int | None = None,
    fps: int | None = None,
) -> Recording:
    """Record episodes of a trained policy as frames, and as a video file.

    ```python
    eqxrl.render(agent, state, jax.random.key(0), "cartpole.gif")
    ```

    The episodes run in `eqxrl.rollout`'s compiled program, which collects the env states
    (`rollout(..., num_envs=episodes, states=True)` with the same key gives the same ones); each
    episode's states, up to the step it ends on, are drawn on the host with the suite's own
    renderer (`eqxrl.envs.render_frames`): one frame per step, the state the action was taken in.

    **Arguments:**

    - `agent`, `state`: as returned by `train` (a batched state: pick a `member`, default 0).
    - `key`: a PRNG key (or an int seed).
    - `out`: a `.gif` or `.mp4` file (imageio; `pip install 'eqxrl[video]'`), or `.html`
      (brax's interactive viewer, brax envs only); None writes nothing.
    - `episodes`: episodes to record, one after another in the file.
    - `max_steps`: where an episode is cut (default: the env's time limit, or 10,000).
    - `deterministic`: act with the policy's mode (True) or sample.
    - `fps`: frames per second of the file (default: the env's real time, `eqxrl.envs.frame_rate`).

    **Returns:** a `Recording` (frames, lengths, returns, path). Raises a one-line `ValueError`
    for an env without a renderer, an unknown file type or a missing imageio.
    """
    check_positive_int("render", "episodes", episodes)
    if episodes > MAX_EVAL_EPISODES:
        raise ValueError(f"render(episodes) must be at most {MAX_EVAL_EPISODES:,}, got {episodes}")
    path = None if out is None else check_video_path(out)
    as_html = path is not None and path.suffix.lower() == ".html"
    batch = state_batch("render", agent, state)
    if batch.batched:
        member = 0 if member is None else member
        if isinstance(member, bool) or not isinstance(member, int) or not -batch.size <= member < batch.size:
            raise ValueError(f"render(member) must be in [-{batch.size}, {batch.size}) for a batch of {batch.size}, got {member!r}")
    elif member is not None:
        raise ValueError("render(member) needs a batched state (seeds or a sweep)")
    one = batch.member(member) if batch.batched else batch.agent
    env = one.eval_env
    check_renderable(env, html=as_html)
    steps = default_eval_steps(one) if max_steps is None else check_positive_int("render", "max_steps", max_steps)
    if fps is None:
        fps = frame_rate(env)
    check_positive_int("render", "fps", fps)
    trajectory = rollout(agent, state, as_keys(key), steps, num_envs=episodes, member=member,
                         deterministic=deterministic, states=True)  # fmt: skip
    lengths = _episode_ends(trajectory, steps)
    rewards = np.asarray(trajectory["reward"], np.float64)
    returns = [float(rewards[:n, i].sum()) for i, n in enumerate(lengths)]
    episode_states = [jax.tree.map(lambda x: x[:n, i], trajectory["state"]) for i, n in enumerate(lengths)]
    if as_html:
        assert path is not None
        whole = jax.tree.map(lambda *xs: np.concatenate(xs), *episode_states)
        _write_text(path, render_html(env, whole))
        return Recording([], lengths, returns, fps, path)
    frames = [render_frames(env, s) for s in episode_states]
    if path is not None:
        write_video(path, np.concatenate(frames), fps)
    return Recording(frames, lengths, returns, fps, path)


def _write_text(path: pathlib.Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    try:
        tmp.write_text(text)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
