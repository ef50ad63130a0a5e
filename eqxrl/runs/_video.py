"""Videos of a run directory: `render_run` (`eqxrl render RUN_DIR`) records a run's policy, and
`VideoRecorder` records the policy while it trains (`train_run(record_every=...)`,
`eqxrl train --record-every`), into `RUN_DIR/videos/` and TensorBoard."""

import pathlib
import resource
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import jax
import numpy as np

from ..agents import Batch
from ..core import check_positive_int, one_line
from ..envs import check_renderable, frame_rate, render_frames
from ..loop import (
    Checkpoint, Recording, check_video_path, default_eval_steps, on_one_device, precompile_rollout, render, require_imageio,
    rollout, write_video,
)  # fmt: skip
from ._config import eval_key, load_config
from ._files import PathLike

__all__ = [
    "DEFAULT_RECORDINGS", "FIRST_FRAME_SECONDS", "RECORD_AUTO", "RECORD_BUDGET", "VIDEOS", "VideoBudget", "VideoRecorder",
    "check_recordable", "close_recorder", "default_record_every", "render_run",
]

VIDEOS = "videos"
"""The run directory's folder of the videos recorded while training (`<env steps>.mp4`)."""

RECORD_AUTO = "auto"
"""`train_run(record_every=RECORD_AUTO)` (`--record-every` without STEPS): videos within a time budget."""

DEFAULT_RECORDINGS = 4
"""`record_every=RECORD_AUTO` without in-training evaluations: a video may be due at each quarter of the run."""

RECORD_BUDGET = 0.05
"""`record_every=RECORD_AUTO`: the share of the training time elapsed that recording may cost."""

FIRST_FRAME_SECONDS = 0.01
"""`VideoBudget`'s cost of a frame before a video was measured (drawn and encoded: CartPole's
600x400 frames cost about 3.5 ms; gymnax's and JaxMARL's matplotlib figures more)."""


def check_recordable(agent: Any, owner: str = "record_every") -> Any:
    """Raise a one-line `ValueError` naming `owner` unless videos of `agent` (an agent, a seed
    batch's or a sweep's) can be recorded: its env has a renderer and imageio can write MP4s.
    **Returns:** the agent whose episodes are recorded (a batch's member 0)."""
    batch = Batch.of(agent)
    one = batch.member(0) if batch.batched else batch.agent
    check_renderable(one.eval_env, owner=owner)
    require_imageio(".mp4", owner)
    return one


def default_record_every(total_steps: int) -> int:
    """The env steps between the points where `record_every=RECORD_AUTO` considers a video without
    in-training evaluations (`DEFAULT_RECORDINGS` per run)."""
    return max(1, int(total_steps) // DEFAULT_RECORDINGS)


def _work_seconds() -> float:
    """The calling thread's CPU time plus that of this process's finished children (the encoder's
    ffmpeg): a video's cost, measured around the drawing and encoding."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.thread_time() + children.ru_utime + children.ru_stime


class VideoBudget:
    """The account of `record_every=RECORD_AUTO`: recording may cost `fraction` of the training time.

    A due video is written when what recording cost so far (`spent`: compiling its program,
    the episodes, drawing and encoding), plus this video's and the final video's estimated cost,
    stays within `fraction` of the training time elapsed (`allows`). The final video is always
    written: reserving its cost keeps the whole recording within the budget where the run is
    long enough for one video. A video is estimated at `max_frames` frames of the costliest
    frame measured so far (`FIRST_FRAME_SECONDS` before any).
    """

    def __init__(self, max_frames: int, fraction: float = RECORD_BUDGET, frame_seconds: float = FIRST_FRAME_SECONDS):
        self.max_frames, self.fraction = int(max_frames), float(fraction)
        self.frame_seconds = float(frame_seconds)
        self.measured = False
        self.spent = 0.0
        self._lock = threading.Lock()  # (spent from the training, compiling and drawing threads)

    def estimate(self) -> float:
        """**Returns:** the cost in seconds expected of one video."""
        return self.frame_seconds * self.max_frames

    def allows(self, elapsed: float) -> bool:
        """Whether a video may be written after `elapsed` seconds of training (see the class)."""
        return self.spent + 2 * self.estimate() <= self.fraction * elapsed

    def spend(self, seconds: float, frames: int = 0) -> None:
        """Count `seconds` of recording; with `frames`, those of a video, whose cost per frame
        then estimates the next ones (the costliest measured so far)."""
        with self._lock:
            self.spent += float(seconds)
            if frames > 0:
                per_frame = float(seconds) / frames
                self.frame_seconds = per_frame if not self.measured else max(self.frame_seconds, per_frame)
                self.measured = True




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
    """Records one deterministic episode of member 0 at chunk boundaries while training, and
    always at its end (`train_run(record_every=...)`), into `RUN_DIR/videos/<env steps>.mp4`.

    A video is due at the first chunk boundary past each multiple of `every` env steps, and is
    written unless the previous one is still being drawn; with a `fraction` (`record_every=
    RECORD_AUTO`: `RECORD_BUDGET`), also only while the `VideoBudget` of that fraction allows it
    after the training time elapsed (measured with `clock` between chunk boundaries, the first
    chunk's time taken as the average's). Every video's cost is counted in `budget` either way.

    The recording program is compiled on a thread at once (`precompile`; XLA releases the GIL,
    so it overlaps the training program's compile). The episode runs at a due boundary in the
    compiled rollout (the state is donated to the next chunk); drawing it and writing the MP4
    (x264's cheapest settings, `FAST_H264`; then handed to `sink`, an `eqxrl.loop.AbstractSink`) happen on a
    background thread, one video at a time; training never waits for one but the last.
    Each video's cost (CPU time of the drawing thread and ffmpeg, and the episode's time on the training thread) goes to
    the budget. A video that fails is reported on stderr; training goes on.
    """

    def __init__(self, run_dir: pathlib.Path, agent: Any, seed: int, num_seeds: int, every: int, sink: Any = None,
                 done: int = 0, fraction: float | None = None, clock: Callable[[], float] = time.perf_counter,
                 precompile: bool = True):  # fmt: skip
        batch = Batch.of(agent)
        self.member0 = batch.stacked or num_seeds > 1  # (the state has a leading member axis)
        self.agent = check_recordable(agent)
        self.run_dir, self.key, self.sink = run_dir, eval_key(seed), sink
        self.per_iteration = batch.agent.steps_per_iteration
        self.every = max(1, int(every) // self.per_iteration)
        self.steps = default_eval_steps(self.agent)
        self.fps = frame_rate(self.agent.eval_env)
        self.fraction, self.clock, self.cost = fraction, clock, _work_seconds
        self.budget = VideoBudget(self.steps, RECORD_BUDGET if fraction is None else fraction)
        self.done = self.last = done
        self.started: tuple[float, int] | None = None  # (clock, iteration) at the first chunk boundary
        self.thread: threading.Thread | None = None
        self.written: list[int] = []
        self.skipped = 0
        self.compiling: threading.Thread | None = None
        if precompile:
            self.compiling = threading.Thread(target=self._compile, daemon=True)
            self.compiling.start()

    def _compile(self) -> None:
        t0 = self.clock()
        try:
            precompile_rollout(self.agent, self.steps)
        except Exception:  # (the first video compiles it then, and reports what fails)
            pass
        self.budget.spend(self.clock() - t0)

    def elapsed(self, iteration: int) -> float:
        """Seconds of training up to `iteration`, extrapolated from the chunk boundaries seen."""
        now = self.clock()
        if self.started is None:
            self.started = (now, iteration)
        t0, first = self.started
        return 0.0 if iteration <= first else (now - t0) * (iteration - self.done) / (iteration - first)

    def __call__(self, checkpoint: Checkpoint, final: bool) -> None:
        """Record `checkpoint`'s state if a video is due (always on the `final` chunk)."""
        elapsed = self.elapsed(checkpoint.iteration)
        if not final and checkpoint.iteration // self.every <= self.last // self.every:
            return
        busy = self.thread is not None and self.thread.is_alive()
        over = self.fraction is not None and not self.budget.allows(elapsed)
        if (busy or over) and not final:
            self.skipped += 1
            self.last = checkpoint.iteration  # (the next one is due past the next multiple)
            return
        self.last = checkpoint.iteration
        if self.compiling is not None:
            self.compiling.join()  # (compiled long before the first video, as a rule)
            self.compiling = None
        t0 = self.clock()
        state = checkpoint.state
        if self.member0:
            # Member 0 of a seed batch or a sweep; a state sharded over CPU devices (train's callbacks
            # see it so) comes through the host first: eager slices across them can deadlock XLA:CPU.
            state = jax.tree.map(lambda x: x[0], on_one_device(state))
        # Committed to one device, as `precompile_rollout` compiled for (jit's cache tells them apart).
        state = jax.device_put(state, jax.devices()[0])
        trajectory = rollout(self.agent, state, jax.random.fold_in(self.key, checkpoint.iteration), self.steps, states=True)
        self.budget.spend(self.clock() - t0)
        if busy:
            self.thread.join()  # type: ignore[union-attr]
        step = checkpoint.iteration * self.per_iteration
        self.thread = threading.Thread(target=self._write, args=(trajectory, step), daemon=True)
        self.thread.start()

    def _write(self, trajectory: dict[str, Any], step: int) -> None:
        c0 = self.cost()
        try:
            frames = self._draw(trajectory, step)
        except Exception as e:  # a video is not worth a run: say so, train on
            frames = 0
            print(f"eqxrl: the video at env step {step:,} was not written: {one_line(e)}", file=sys.stderr, flush=True)
        self.budget.spend(self.cost() - c0, frames)

    def _draw(self, trajectory: dict[str, Any], step: int) -> int:
        """Draw the episode and write its video. **Returns:** the frames drawn."""
        done = np.asarray(trajectory["terminated"][:, 0]) | np.asarray(trajectory["truncated"][:, 0])
        n = int(np.argmax(done)) + 1 if done.any() else self.steps
        frames = render_frames(self.agent.eval_env, jax.tree.map(lambda x: x[:n, 0], trajectory["state"]))
        (self.run_dir / VIDEOS).mkdir(exist_ok=True)
        path = self.run_dir / VIDEOS / f"{step}.mp4"
        write_video(path, frames, self.fps, fast=True)
        if self.sink is not None:
            self.sink.video(path, frames, self.fps, step)
        self.written.append(step)
        return n

    def close(self) -> None:
        """Wait for the video being drawn (and the recording program's compile)."""
        for thread in (self.compiling, self.thread):
            if thread is not None:
                thread.join()


def close_recorder(recorder: VideoRecorder | None, config: dict[str, Any]) -> None:
    """Wait for the last video; what the recorder did goes to `config` (`"videos"`)."""
    if recorder is not None:
        recorder.close()
        spent = round(recorder.budget.spent, 3)
        config["videos"] = {"written": len(recorder.written), "skipped": recorder.skipped, "seconds": spent}
