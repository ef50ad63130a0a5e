"""MLflow as a sink (`--log mlflow`; `pip install 'eqxrl[mlflow]'`)."""

import json
import os
import pathlib
import time
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from ..core import one_line
from ..loop import AbstractSink, RunInfo, evaluation_scalars, register_sink, scalar_rows
from ._config import tracked_config

__all__ = ["MlflowSink", "flat_params"]

MAX_PARAM = 6000
"""MLflow's longest parameter value (characters); longer values are cut there."""
_BATCH = 1000  # MLflow's most metrics per log_batch call
_STATUS = {"complete": "FINISHED", "interrupted": "KILLED", "diverged": "FAILED", "failed": "FAILED"}


def flat_params(config: Mapping[str, Any], prefix: str = "") -> Iterator[tuple[str, str]]:
    """A nested config as MLflow parameters: `("agent_config.learning_rate", "0.0003")`, lists
    indexed (`hidden_sizes.0`), values as JSON text cut to `MAX_PARAM` characters."""
    for k, v in config.items():
        key = f"{prefix}{k}"
        if isinstance(v, Mapping) and v:
            yield from flat_params(v, key + ".")
        elif isinstance(v, list) and v and any(isinstance(x, Mapping) for x in v):
            for i, x in enumerate(v):
                yield from flat_params(x, f"{key}.{i}.") if isinstance(x, Mapping) else [(f"{key}.{i}", json.dumps(x)[:MAX_PARAM])]
        else:
            yield key, (v if isinstance(v, str) else json.dumps(v))[:MAX_PARAM]


@register_sink
class MlflowSink(AbstractSink):
    """An MLflow run: the run's config as parameters (`flat_params`), every metric row at step
    `env_steps` (`eqxrl.loop.scalar_rows`), the final evaluation (`eval/mean`, ... and
    `eval.json` as an artifact) and each recorded episode (`videos/<env steps>.mp4`).

    **Arguments:**

    - `tracking_uri`: the store (`"sqlite:///mlflow.db"`, `"http://host:5000"`, ...); default
      `$MLFLOW_TRACKING_URI`, else MLflow's own default.
    - `experiment`: the experiment's name, created if missing; default
      `$MLFLOW_EXPERIMENT_NAME`, else `"eqxrl"`.

    Everything goes through `mlflow.MlflowClient` with the run's id (no global active run), so
    several sinks and threads do not interfere. A resumed run directory goes on in the same MLflow
    run (its id is kept in `config.json`); rows at or before the last step it logged are not
    logged twice. The run ends `FINISHED`, `KILLED` (interrupted) or `FAILED`.
    """

    name = "mlflow"

    def __init__(self, tracking_uri: Any = None, *, experiment: Any = None, run_id: Any = None):
        for arg, value in (("tracking_uri", tracking_uri), ("experiment", experiment), ("run_id", run_id)):
            if value is not None and (not isinstance(value, str) or not value):
                raise ValueError(f"MlflowSink({arg}) must be a non-empty string or None, got {value!r}")
        self.tracking_uri = tracking_uri or os.environ.get("MLFLOW_TRACKING_URI") or None
        self.experiment = experiment or os.environ.get("MLFLOW_EXPERIMENT_NAME") or "eqxrl"
        self.run_id = run_id
        self.client: Any = None
        self.last_step = -1

    @classmethod
    def resume(cls, record: Mapping[str, Any]) -> "MlflowSink":
        return cls(record.get("tracking_uri"), experiment=record.get("experiment"), run_id=record.get("run_id"))

    def start(self, run: RunInfo) -> dict[str, Any]:
        try:
            import mlflow
        except ImportError:
            raise ValueError("the mlflow sink needs mlflow: pip install 'eqxrl[mlflow]'") from None
        from mlflow.entities import Param

        try:
            self.client = mlflow.MlflowClient(self.tracking_uri)
            self.tracking_uri = self.client.tracking_uri
            if self.run_id is not None:
                self.client.update_run(self.run_id, status="RUNNING")
                history = self.client.get_metric_history(self.run_id, "env_steps")
                self.last_step = max((m.step for m in history), default=-1)
            else:
                found = self.client.get_experiment_by_name(self.experiment)
                experiment = found.experiment_id if found is not None else self.client.create_experiment(self.experiment)
                self.run_id = self.client.create_run(experiment, run_name=run.name).info.run_id
                params = [Param(k, v) for k, v in flat_params(tracked_config(run.config))]
                for i in range(0, len(params), 100):  # (MLflow takes at most 100 parameters a call)
                    self.client.log_batch(self.run_id, params=params[i : i + 100])
        except Exception as e:  # (an unreachable server, a bad URI: one line, before training starts)
            raise ValueError(f"the mlflow sink could not start an MLflow run at {self.tracking_uri!r}: {one_line(e)[:200]}") from None
        return {"run_id": self.run_id, "tracking_uri": self.tracking_uri, "experiment": self.experiment}

    def _log(self, scalars: list[tuple[int, dict[str, float]]]) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        metrics = [Metric(k, v, now, step) for step, row in scalars for k, v in row.items()]
        for i in range(0, len(metrics), _BATCH):
            self.client.log_batch(self.run_id, metrics=metrics[i : i + _BATCH])

    def rows(self, steps: np.ndarray, metrics: Mapping[str, np.ndarray]) -> None:
        self._log([(step, {**row, "env_steps": step}) for step, row in scalar_rows(steps, metrics) if step > self.last_step])

    def evaluation(self, summary: Mapping[str, Any], env_steps: int) -> None:
        self._log([(int(env_steps), evaluation_scalars(summary))])
        self.client.log_dict(self.run_id, dict(summary), "eval.json")

    def video(self, path: pathlib.Path, frames: np.ndarray, fps: int, env_steps: int) -> None:
        self.client.log_artifact(self.run_id, str(path), "videos")

    def finish(self, status: str) -> None:
        if self.client is not None:
            self.client.set_terminated(self.run_id, status=_STATUS.get(status, "FAILED"))
            self.client = None
