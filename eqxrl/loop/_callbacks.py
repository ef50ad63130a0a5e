"""Ready-made `train(callback=...)` callbacks: stop at a return threshold, report evaluations.

A callback is called with a `Checkpoint` after every chunk and stops training by
returning `True`. Both classes here are sinks (`eqxrl.loop.AbstractSink`) with a `checkpoint`
hook, so they also go where sinks go (`train_run(log=[EvalLogger()])`). They read
`checkpoint.metrics` only (host arrays laid out as `train` returns them), so they work for one
run, seed batches and sweeps.
"""

import math
import sys
from typing import Any

import numpy as np

from ._results import Checkpoint
from ._sinks import AbstractSink

__all__ = ["EvalLogger", "StopAtReturn", "latest_value"]


def _rows(checkpoint: Checkpoint, metric: str, owner: str) -> np.ndarray:
    """The metric as `(members, iterations)` float64 (one member for a single run)."""
    if metric not in checkpoint.metrics:
        hint = " (pass train(eval_every=...) for eval_return)" if metric == "eval_return" else ""
        raise ValueError(f"{owner}(metric={metric!r}): the run has no such metric{hint}; it has {sorted(checkpoint.metrics)}")
    return np.atleast_2d(np.asarray(checkpoint.metrics[metric], np.float64))


def latest_value(checkpoint: Checkpoint, metric: str = "eval_return", window: int = 1) -> tuple[int, float] | None:
    """The rule `StopAtReturn` uses: the latest value of `metric` in `checkpoint.metrics`.

    The last `window` iterations at which the metric is finite for at least one
    seed/member are taken; the value is the mean over those rows and over the
    seeds/members that have a value there (NaN entries, e.g. a member with no
    finished episode, are left out).

    **Returns:** `(iteration, value)` with `iteration` 1-based (the latest row used),
    or None when no row has a value yet.
    """
    return _latest(_rows(checkpoint, metric, "latest_value"), window)


def _latest(values: np.ndarray, window: int) -> tuple[int, float] | None:
    """`latest_value` of the `(members, iterations)` rows `values`."""
    rows = np.nonzero(np.isfinite(values).any(axis=0))[0]
    if rows.size == 0:
        return None
    last = rows[-window:]
    block = values[:, last]
    return int(last[-1]) + 1, float(np.nanmean(block))


class StopAtReturn(AbstractSink):
    """Stop training once a return reaches `threshold` (`train(callback=StopAtReturn(475.0))`).

    **Arguments:**

    - `threshold`: a finite number; training stops after the first chunk whose latest
      value (see `latest_value`) is `>= threshold`.
    - `metric`: `"eval_return"` (default: the in-training deterministic evaluation,
      needs `train(eval_every=...)`) or any other metric, e.g. `"episode_return"`.
    - `window`: how many of the latest rows with a value are averaged (default 1; a
      window smooths the noisy `episode_return`).

    For seed batches and sweeps the value is the mean over seeds/members: training
    stops when the batch as a whole reaches the threshold. After a stop,
    `stopped_at` holds `(iteration, value)` and `train`'s `TrainInfo.stopped_at`
    the iterations done.
    """

    def __init__(self, threshold: Any, metric: Any = "eval_return", *, window: Any = 1):
        if isinstance(threshold, bool) or not isinstance(threshold, (int, float, np.integer, np.floating)) or not math.isfinite(threshold):
            raise ValueError(f"StopAtReturn(threshold) must be a finite number, got {threshold!r}")
        if not isinstance(metric, str) or not metric:
            raise ValueError(f"StopAtReturn(metric) must be a metric name such as 'eval_return' or 'episode_return', got {metric!r}")
        if isinstance(window, bool) or not isinstance(window, (int, np.integer)) or window < 1:
            raise ValueError(f"StopAtReturn(window) must be a positive int, got {window!r}")
        self.threshold = float(threshold)
        self.metric = metric
        self.window = int(window)
        self.stopped_at: tuple[int, float] | None = None

    def checkpoint(self, checkpoint: Checkpoint) -> bool:
        """**Returns:** True (stop) when the latest value reaches the threshold."""
        latest = _latest(_rows(checkpoint, self.metric, "StopAtReturn"), self.window)
        if latest is not None and latest[1] >= self.threshold:
            self.stopped_at = latest
            return True
        return False

    def __repr__(self) -> str:
        return f"StopAtReturn({self.threshold!r}, metric={self.metric!r}, window={self.window})"


class EvalLogger(AbstractSink):
    """Collect (and print) each in-training evaluation as it appears: `train(eval_every=...,
    callback=EvalLogger())`.

    **Arguments:**

    - `metric`: the metric to report (default `"eval_return"`).
    - `verbose`: print a line per new evaluation (`env steps 40,960: eval_return 195.30`,
      with the spread over seeds/members for a batch).
    - `file`: where to print (default `sys.stdout`).

    After (or during) training, `evaluations` is a list of `(env_steps, mean)` per
    evaluation (mean over seeds/members), and `returns` the matching per-member
    arrays (shape `()` for one run, `(n,)` for a batch). Each row is reported once,
    whatever the chunking.
    """

    def __init__(self, metric: Any = "eval_return", *, verbose: Any = True, file: Any = None):
        if not isinstance(metric, str) or not metric:
            raise ValueError(f"EvalLogger(metric) must be a metric name such as 'eval_return', got {metric!r}")
        if not isinstance(verbose, (bool, np.bool_)):
            raise ValueError(f"EvalLogger(verbose) must be True or False, got {verbose!r}")
        self.metric = metric
        self.verbose = bool(verbose)
        self.file = file
        self.evaluations: list[tuple[int, float]] = []
        self.returns: list[np.ndarray] = []
        self._reported = 0

    def checkpoint(self, checkpoint: Checkpoint) -> None:
        """Record (and print) the rows with a value since the last call."""
        values = _rows(checkpoint, self.metric, "EvalLogger")
        batched = np.ndim(checkpoint.metrics[self.metric]) == 2
        steps = np.atleast_2d(np.asarray(checkpoint.metrics["env_steps"]))[0]
        start = min(self._reported, values.shape[1])
        for i in range(start, values.shape[1]):
            column = values[:, i]
            if not np.isfinite(column).any():
                continue
            mean = float(np.nanmean(column))
            self.evaluations.append((int(steps[i]), mean))
            self.returns.append(column.copy() if batched else np.asarray(column[0]))
            if self.verbose:
                spread = f" (min {np.nanmin(column):.2f}, max {np.nanmax(column):.2f} over {column.size})" if batched else ""
                print(f"env steps {int(steps[i]):,}: {self.metric} {mean:.2f}{spread}", file=self.file or sys.stdout, flush=True)
        self._reported = values.shape[1]

    def __repr__(self) -> str:
        return f"EvalLogger(metric={self.metric!r}, verbose={self.verbose})"
