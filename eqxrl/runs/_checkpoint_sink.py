"""A run's checkpoint writer as a sink (`eqxrl.loop.AbstractSink`): which chunk boundaries are
written, and the divergence check that keeps a non-finite state from being one."""

import contextlib
import math
from collections.abc import Callable
from typing import Any

from ..loop import AbstractSink, Checkpoint, RunInfo
from ._best import DEFAULT_BEST, best_score
from ._checkpoint import CheckpointWriter, checkpoint_steps
from ._divergence import DivergenceCheck

__all__ = ["CheckpointSink"]


class CheckpointSink(AbstractSink):
    """A run's checkpoints (`RUN_DIR/checkpoints/<env_steps>/`, by a `CheckpointWriter`), as a
    sink: at each chunk boundary (`checkpoint`) one is written at the first boundary past each
    multiple of `every` iterations (skipped while the previous one is being written), at every
    boundary whose score by `best` beats the best so far (waiting for the disk), and at the end.
    Without the non-finite guard it checks for divergence first (`DivergenceCheck`): a
    non-finite state is never written, `diverged` holds `(iteration, quantities)` and training
    stops (the hook returns True).

    **Arguments:** `writer`, a function that makes the `CheckpointWriter` (called by `start`, once
    the trackers started); `every`, iterations between checkpoints; `best`, as for `train_run`;
    `scoring`, whether each boundary is scored (with evaluations, or a `best` of another metric);
    `nan_guard`, the run's; `done`, the iterations done before (a resumed run's)."""

    required = True

    def __init__(self, writer: Callable[[], CheckpointWriter], *, every: int, best: Any = DEFAULT_BEST,
                 scoring: bool = False, nan_guard: bool = False, done: int = 0):  # fmt: skip
        self.make_writer, self.every, self.best, self.scoring, self.nan_guard = writer, every, best, scoring, nan_guard
        self.writer: CheckpointWriter | None = None
        self.last_saved, self.top = done, -math.inf
        self.check = DivergenceCheck(done)
        self.diverged: tuple[int, list[str]] | None = None

    def start(self, run: RunInfo) -> None:
        self.writer = self.make_writer()
        self.top = max((c["best"] for c in checkpoint_steps(self.writer.directory.parent) if c["best"] is not None), default=-math.inf)

    def checkpoint(self, checkpoint: Checkpoint) -> bool:
        final = checkpoint.iteration == checkpoint.num_iterations
        # A checkpoint at the first chunk boundary past each multiple of `every` iterations
        # (skipped while the previous one is being written), and at every evaluation that
        # beats the best so far (never skipped: it is the new best).
        due = checkpoint.iteration // self.every > self.last_saved // self.every
        value = best_score(self.best, checkpoint.metrics, checkpoint.iteration) if self.scoring else None  # (a device sync)
        better = value is not None and value > self.top
        if not self.nan_guard:
            # Without the guard, divergence is checked at every chunk boundary (read at the
            # next one, or at once where a checkpoint is due: none of a non-finite state is
            # written); the run stops there.
            self.diverged = self.check(checkpoint, now=final or due or better)
            if self.diverged is not None:
                return True
        if (final or due or better) and self.writer.submit(checkpoint, wait=final or better):
            self.last_saved = checkpoint.iteration
            self.top = max(self.top, value) if value is not None else self.top
        return False

    def close(self) -> dict[str, int]:
        """Wait for the last write (`CheckpointError` if it failed). **Returns:** what this call's
        writer did, as `config.json` records it (`{"written": n, "skipped": m}`)."""
        writer, self.writer = self.writer, None
        if writer is None:
            return {"written": 0, "skipped": 0}
        writer.close()
        return {"written": writer.written, "skipped": writer.skipped}

    def finish(self, status: str) -> None:
        if self.writer is None:
            return
        if status == "complete":
            self.close()
        else:
            with contextlib.suppress(Exception):  # (the run's own error is the one to report)
                self.close()
