"""The run directory's own files as sinks (`eqxrl.loop.AbstractSink`): `metrics.csv`, the learning
curve and `eval.json` (the checkpoints: `_checkpoint_sink.py`). Every `train_run` has them, after
the sinks of `log=`, in one `SinkGroup`; they are `required` (an error of theirs ends the run:
resume, plots and `eqxrl evaluate` read these files). Each writes its file as it always has, byte
for byte.
"""

import pathlib
from collections.abc import Mapping
from typing import Any

import numpy as np

from ..agents import Batch
from ..loop import AbstractSink, RunInfo
from ..store import write_json
from ._files import CURVE, EVAL, METRICS, PathLike
from ._metrics import save_metrics
from ._plots import member_labels, plot_learning_curve

__all__ = ["EvalJsonSink", "LearningCurveSink", "MetricsCsvSink", "run_file_sinks"]


def _path(owner: str, path: Any) -> pathlib.Path | None:
    if path is not None and not isinstance(path, (str, pathlib.Path)):
        raise ValueError(f"{owner}(path) must be a file path or None (the run directory's), got {path!r}")
    return None if path is None else pathlib.Path(path)


def _in_run(owner: str, path: pathlib.Path | None, run: RunInfo, name: str) -> pathlib.Path:
    if path is not None:
        return path
    if run.run_dir is None:
        raise ValueError(f"{owner}(path) is needed outside a run directory (a train callback), got None")
    return run.run_dir / name


class MetricsCsvSink(AbstractSink):
    """`metrics.csv` (`save_metrics`: one row per seed and iteration), written whole from the
    finished run's metrics (`result`), since its rows are grouped by seed.

    **Arguments:** `path` (default: `RUN_DIR/metrics.csv`), `seed`, the base seed of the first
    row (default: the run's `config.json` `seed`, else 0)."""

    required = True

    def __init__(self, path: Any = None, seed: Any = None):
        self.path = _path("MetricsCsvSink", path)
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, (int, np.integer))):
            raise ValueError(f"MetricsCsvSink(seed) must be an int or None, got {seed!r}")
        self.seed = seed

    def start(self, run: RunInfo) -> None:
        self.path = _in_run("MetricsCsvSink", self.path, run, METRICS)
        if self.seed is None:
            self.seed = run.config.get("seed", 0)

    def result(self, state: Any, metrics: Mapping[str, np.ndarray]) -> None:
        save_metrics(self.path, metrics, seed=int(self.seed or 0))


class LearningCurveSink(AbstractSink):
    """The learning curve (`plot_learning_curve`: `learning_curve.png`), drawn from the finished
    run's metrics (`result`).

    **Arguments:** `path` (default: `RUN_DIR/learning_curve.png`), `title`, `seed` and `members`
    (legend labels of a sweep's members) as for `plot_learning_curve`."""

    required = True

    def __init__(self, path: Any = None, *, title: str | None = None, seed: int = 0, members: list[str] | None = None):
        self.path = _path("LearningCurveSink", path)
        self.title, self.seed, self.members = title, seed, members

    def start(self, run: RunInfo) -> None:
        self.path = _in_run("LearningCurveSink", self.path, run, CURVE)

    def result(self, state: Any, metrics: Mapping[str, np.ndarray]) -> None:
        plot_learning_curve(metrics, self.path, title=self.title, seed=int(self.seed), members=self.members)


class EvalJsonSink(AbstractSink):
    """`eval.json`: the final evaluation's summary (`evaluation`), as `save_evaluation` writes it.

    **Arguments:** `path` (default: `RUN_DIR/eval.json`)."""

    required = True

    def __init__(self, path: Any = None):
        self.path = _path("EvalJsonSink", path)

    def start(self, run: RunInfo) -> None:
        self.path = _in_run("EvalJsonSink", self.path, run, EVAL)

    def evaluation(self, summary: Mapping[str, Any], env_steps: int) -> None:
        write_json(self.path, summary)


def run_file_sinks(run_dir: PathLike, agent: Any, config: Mapping[str, Any], *, diverged: bool = False) -> list[AbstractSink]:
    """`eval.json`, `metrics.csv` and the learning curve of a run directory with `config.json`'s
    `config` (env, seed, seeds and a sweep's members), as `save_run` and `train_run` write them."""
    run_dir = pathlib.Path(run_dir)
    batch = Batch.of(agent)
    seed, seeds = int(config["seed"]), config["seeds"]
    what = f"{seeds} members" if batch.stacked else f"{seeds} seeds" if seeds > 1 else f"seed {seed}"
    title = f"{batch.name} on {config['env']} ({what}{', diverged' if diverged else ''})"
    labels = member_labels(config["members"]) if batch.stacked else None
    curve = LearningCurveSink(run_dir / CURVE, title=title, seed=seed, members=labels)
    return [EvalJsonSink(run_dir / EVAL), MetricsCsvSink(run_dir / METRICS, seed), curve]
