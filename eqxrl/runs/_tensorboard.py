"""TensorBoard event files (tensorboardX: no TensorFlow or PyTorch needed), as a sink."""

import pathlib
from collections.abc import Mapping
from typing import Any

import numpy as np

from ..loop import AbstractSink, RunInfo, evaluation_scalars, register_sink, scalar_rows, video_bytes
from ._files import TENSORBOARD

__all__ = ["TensorBoardSink"]


@register_sink
class TensorBoardSink(AbstractSink):
    """TensorBoard event files (`--log tensorboard`, or `--tensorboard`): every metric against
    env steps (`eqxrl.loop.scalar_rows`: the mean over seeds/members, and `episode_return`/
    `eval_return` per member), the final evaluation (`eval/mean`, `eval/std`, ...), and each
    recorded episode as an animated GIF in the image dashboard.

    **Arguments:** `logdir`, where to write (default: `RUN_DIR/tensorboard` in a run directory;
    required when the sink is a bare `train` callback).

    On resume, events a crashed run wrote past its last checkpoint are purged.
    """

    name = "tensorboard"

    def __init__(self, logdir: Any = None):
        if logdir is not None and not isinstance(logdir, (str, pathlib.Path)):
            raise ValueError(f"TensorBoardSink(logdir) must be a directory path or None, got {logdir!r}")
        self.logdir = None if logdir is None else pathlib.Path(logdir)
        self.writer: Any = None

    @classmethod
    def resume(cls, record: Mapping[str, Any]) -> "TensorBoardSink":
        return cls(record.get("logdir"))

    def start(self, run: RunInfo) -> dict[str, Any]:
        from tensorboardX import SummaryWriter

        if self.logdir is None:
            if run.run_dir is None:
                raise ValueError("TensorBoardSink(logdir) is needed outside a run directory (a train callback), got None")
            self.logdir = run.run_dir / TENSORBOARD
        purge = run.start_iteration * (run.steps_per_iteration or 0) + 1 if run.start_iteration else None
        self.writer = SummaryWriter(str(self.logdir), purge_step=purge)
        inside = run.run_dir is not None and self.logdir == run.run_dir / TENSORBOARD
        return {} if inside else {"logdir": str(self.logdir)}

    def rows(self, steps: np.ndarray, metrics: Mapping[str, np.ndarray]) -> None:
        for step, scalars in scalar_rows(steps, metrics):
            for k, v in scalars.items():
                self.writer.add_scalar(k, v, step)
        self.writer.flush()

    def evaluation(self, summary: Mapping[str, Any], env_steps: int) -> None:
        for k, v in evaluation_scalars(summary).items():
            self.writer.add_scalar(k, v, env_steps)
        self.writer.flush()

    def video(self, path: pathlib.Path, frames: np.ndarray, fps: int, env_steps: int) -> None:
        """An animated GIF as an image at `env_steps`: TensorBoard's image dashboard plays it
        (what tensorboardX's `add_video` writes, without the moviepy it needs to encode one)."""
        from tensorboardX.proto.summary_pb2 import Summary

        _, height, width, channels = frames.shape
        gif = video_bytes(frames, fps)
        image = Summary.Image(height=height, width=width, colorspace=channels, encoded_image_string=gif)
        self.writer._get_file_writer().add_summary(Summary(value=[Summary.Value(tag="episode", image=image)]), env_steps)
        self.writer.flush()

    def finish(self, status: str) -> None:
        if self.writer is not None:
            self.writer.close()
