"""Videos of a run directory: `render_run` (`eqxrl render RUN_DIR`) records a run's policy, and
`VideoRecorder` records the policy while it trains (`train_run(record_every=...)`,
`eqxrl train --record-every`), into `RUN_DIR/videos/` and TensorBoard."""

import pathlib
import sys
import threading
from typing import Any

import jax
import numpy as np

from ..agents import Batch
from ..core import check_positive_int, one_line
from ..envs import check_renderable, frame_rate, render_frames
from ..loop import (
    Checkpoint, Recording, check_video_path, default_eval_steps, render, require_imageio, rollout, video_bytes, write_video,
)  # fmt: skip
from ._config import eval_key, load_config
from ._files import PathLike

__all__ = ["DEFAULT_RECORDINGS", "VIDEOS", "VideoRecorder", "default_record_every", "render_run"]

VIDEOS = "videos"
"""The run directory's folder of the videos recorded while training (`<env steps>.mp4`)."""

DEFAULT_RECORDINGS = 4
"""`--record-every` without a value: a video at each quarter of the run (the last at its end)."""


def default_record_every(total_steps: int) -> int:
    """The env steps between videos for `--record-every` without a value (`DEFAULT_RECORDINGS` per run)."""
    return max(1, int(total_steps) // DEFAULT_RECORDINGS)


def render_run(
    run_dir: PathLike, out: PathLike | None = None, *, checkpoint: Any = None, member: int = 0, episodes: int = 1,
    seed: int | None = None, deterministic: bool = True, max_steps: int | None = None, trust: Any = (),
) -> Recording:  # fmt: skip
    """`eqxrl.render` the policy of a run directory, loaded as `load_policy` loads it (`checkpoint`
    None for the final state, `"best"`, `"last"` or an env step; `member`; `trust`), with the key
    `eval_key(seed)` (default: the run's seed). `out` defaults to `<run_dir>/episode.gif`.

    **Returns:** the `Recording` (its `path`: the file written)."""
    from ._policy import load_policy

    out = pathlib.Path(run_dir) / "episode.gif" if out is None else out
    check_video_path(out)
    check_positive_int("render", "episodes", episodes)
    if seed is None:
        seed = load_config(run_dir)["seed"]
    policy = load_policy(run_dir, member, deterministic, checkpoint, trust=trust)
    return render(policy.agent, policy.state, eval_key(seed), out, episodes=episodes, max_steps=max_steps,
                  deterministic=deterministic)  # fmt: skip


class VideoRecorder:
    """Records one deterministic episode of member 0 at the chunk boundaries past each multiple of
    `every` env steps and at the end of training (`train_run(record_every=...)`).

    The episode runs at once in the compiled rollout (the state is donated to the next chunk);
    drawing it and writing `RUN_DIR/videos/<env steps>.mp4` (and a GIF to TensorBoard's images,
    `board`) happen on a background thread, one video at a time: a video due while the previous one
    is still being drawn is skipped, training never waits for it (the last one is waited for).
    A video that fails is reported on stderr; training goes on.
    """

    def __init__(self, run_dir: pathlib.Path, agent: Any, seed: int, num_seeds: int, every: int, board: Any = None,
                 done: int = 0):  # fmt: skip
        batch = Batch.of(agent)
        self.member0 = batch.stacked or num_seeds > 1  # (the state has a leading member axis)
        self.agent = batch.member(0) if batch.batched else batch.agent
        check_renderable(self.agent.eval_env, owner="record_every")
        require_imageio(".mp4", "record_every")
        self.run_dir, self.key, self.board = run_dir, eval_key(seed), board
        self.per_iteration = batch.agent.steps_per_iteration
        self.every = max(1, int(every) // self.per_iteration)
        self.steps = default_eval_steps(self.agent)
        self.fps = frame_rate(self.agent.eval_env)
        self.last = done
        self.thread: threading.Thread | None = None
        self.written: list[int] = []
        self.skipped = 0

    def __call__(self, checkpoint: Checkpoint, final: bool) -> None:
        """Record `checkpoint`'s state if a video is due (always on the `final` chunk)."""
        if not final and checkpoint.iteration // self.every <= self.last // self.every:
            return
        busy = self.thread is not None and self.thread.is_alive()
        if busy and not final:
            self.skipped += 1
            self.last = checkpoint.iteration  # (the next one is due past the next multiple)
            return
        self.last = checkpoint.iteration
        state = checkpoint.state
        if self.member0:
            state = jax.tree.map(lambda x: x[0], state)  # member 0 of a seed batch or a sweep
        trajectory = rollout(self.agent, state, jax.random.fold_in(self.key, checkpoint.iteration), self.steps, states=True)
        if busy:
            self.thread.join()  # type: ignore[union-attr]
        step = checkpoint.iteration * self.per_iteration
        self.thread = threading.Thread(target=self._write, args=(trajectory, step), daemon=True)
        self.thread.start()

    def _write(self, trajectory: dict[str, Any], step: int) -> None:
        try:
            done = np.asarray(trajectory["terminated"][:, 0]) | np.asarray(trajectory["truncated"][:, 0])
            n = int(np.argmax(done)) + 1 if done.any() else self.steps
            frames = render_frames(self.agent.eval_env, jax.tree.map(lambda x: x[:n, 0], trajectory["state"]))
            (self.run_dir / VIDEOS).mkdir(exist_ok=True)
            write_video(self.run_dir / VIDEOS / f"{step}.mp4", frames, self.fps)
            if self.board is not None:
                self.board.video("episode", video_bytes(frames, self.fps), frames.shape, step)
            self.written.append(step)
        except Exception as e:  # a video is not worth a run: say so, train on
            print(f"eqxrl: the video at env step {step:,} was not written: {one_line(e)}", file=sys.stderr, flush=True)

    def close(self) -> None:
        """Wait for the video being drawn."""
        if self.thread is not None:
            self.thread.join()

