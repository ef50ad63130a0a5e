"""TensorBoard event files of a run directory (tensorboardX: no TensorFlow or PyTorch needed)."""

import pathlib
from collections.abc import Mapping

import numpy as np

from ._files import TENSORBOARD

__all__ = ["TensorBoard"]


class TensorBoard:
    """TensorBoard event files (tensorboardX) with every metric against env steps
    (the mean over seeds/members, and `episode_return`/`eval_return` per seed/member);
    a row where a metric is NaN everywhere (`eval_return` between evaluations) writes
    no point for it."""

    def __init__(self, run_dir: pathlib.Path, start: int, start_step: int):
        from tensorboardX import SummaryWriter

        # On resume, events a crashed run wrote past its last checkpoint are purged.
        self.writer = SummaryWriter(str(run_dir / TENSORBOARD), purge_step=start_step or None)
        self.done = start

    def write(self, metrics: Mapping[str, np.ndarray], iteration: int) -> None:
        steps = np.atleast_2d(np.asarray(metrics["env_steps"]))
        for i in range(self.done, iteration):
            step = int(steps[0, i])
            for k, v in metrics.items():
                if k == "env_steps":
                    continue
                col = np.atleast_2d(np.asarray(v, np.float64))[:, i]
                if np.isfinite(col).any():
                    self.writer.add_scalar(k, float(np.nanmean(col)), step)
                if k in ("episode_return", "eval_return") and col.size > 1:
                    for s, x in enumerate(col):
                        if np.isfinite(x):
                            self.writer.add_scalar(f"{k}/member_{s}", float(x), step)
        self.done = iteration
        self.writer.flush()

    def video(self, tag: str, gif: bytes, shape: tuple[int, ...], step: int) -> None:
        """An animated GIF (`gif`, frames of `shape` `(n, height, width, 3)`) as an image at `step`:
        TensorBoard's image dashboard plays it (what tensorboardX's `add_video` writes, without
        the moviepy it needs to encode one)."""
        from tensorboardX.proto.summary_pb2 import Summary

        _, height, width, channels = shape
        image = Summary.Image(height=height, width=width, colorspace=channels, encoded_image_string=gif)
        self.writer._get_file_writer().add_summary(Summary(value=[Summary.Value(tag=tag, image=image)]), step)
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()
