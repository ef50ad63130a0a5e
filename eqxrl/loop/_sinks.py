"""Sinks: where everything a run emits goes. The run directory's own files (`metrics.csv`,
the learning curve, `eval.json`, the checkpoints; PBT's history) are sinks that every run has;
TensorBoard, Weights & Biases, MLflow or a user's own are sinks named with `--log`.

A sink is one small class whose hooks, all called on the host, do nothing unless overridden:

- `start(run)`: once, with a `RunInfo` (the run's name, config and directory, the
  iterations already done on resume, and what this sink recorded in an earlier call);
- `rows(steps, metrics)`: the metric rows of the iterations done since the last call;
- `checkpoint(checkpoint)`: then the run itself at that chunk boundary (a `Checkpoint`: the state
  and every metric row so far), for a sink that writes or judges the state; returning True
  stops training;
- `evaluation(summary, env_steps)` and `video(path, frames, fps, env_steps)`: the final
  evaluation (`eval.json`'s summary) and each recorded episode;
- `result(state, metrics)`: the finished run's final state and all its metric rows;
- `finish(status)`: once, with `"complete"`, `"diverged"`, `"interrupted"` or `"failed"`.

A sink is also a `train` callback (`eqxrl.train(..., callback=TensorBoardSink("tb"))`; every
callback `train` has ready, `StopAtReturn` and `EvalLogger`, is a sink): called with a
`Checkpoint`, it starts itself on first use, hands on the new rows, then calls `checkpoint` (whose
answer stops training), and `result` at the last iteration. `eqxrl.runs.train_run`, `PBT.run` and
the command line (`--log tensorboard,wandb,mlflow`) drive the same hooks of one `SinkGroup`, so
one class serves all of them. A sink registered by name (`register_sink`) can be named in `--log`
and is built again when a run directory is resumed.
"""

import abc
import dataclasses
import pathlib
import sys
from collections.abc import Iterator, Mapping
from typing import Any, ClassVar

import numpy as np

from ..core import one_line
from ._results import Checkpoint

__all__ = ["SINKS", "STATUSES", "AbstractSink", "RunInfo", "SinkGroup", "evaluation_scalars", "make_sinks", "register_sink", "scalar_rows"]

STATUSES = ("complete", "diverged", "interrupted", "failed")
"""How a run ended, as `AbstractSink.finish` is told."""

PER_MEMBER = ("episode_return", "eval_return", "fitness", "train_return")
"""Metrics that `scalar_rows` also gives per member of a batch (`episode_return/member_3`), besides
PBT's hyperparameters (`hp/<name>`)."""


@dataclasses.dataclass(frozen=True)
class RunInfo:
    """What a sink learns of a run when it starts.

    - `name`: a title such as `"PPO on CartPole-v1"`.
    - `config`: the run's `config.json` as written at the start (empty for a bare `train`).
    - `run_dir`: the run directory, or None (a sink used as a `train` callback).
    - `start_iteration`: iterations already done (nonzero when a run is resumed).
    - `steps_per_iteration`: env steps per member per iteration, when known.
    - `record`: what this sink's `start` returned when the run first started (its entry in
      `config.json`'s `"sinks"`), e.g. the tracker's run id, so that a resumed run goes on
      in the same tracked run; empty the first time.
    """

    name: str
    config: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    run_dir: pathlib.Path | None = None
    start_iteration: int = 0
    steps_per_iteration: int | None = None
    record: Mapping[str, Any] = dataclasses.field(default_factory=dict)


def scalar_rows(steps: np.ndarray, metrics: Mapping[str, np.ndarray]) -> Iterator[tuple[int, dict[str, float]]]:
    """The scalars trackers plot, one dict per row: every metric's mean over the members
    where it is finite (a metric with no finite value in a row, like `eval_return` between
    evaluations, is left out of that row), and for a batch each member's value of the metrics in
    `PER_MEMBER` and of PBT's hyperparameters (`episode_return/member_<i>`, `hp/learning_rate/member_<i>`).

    **Arguments:** `steps`, env steps per member of each row, shape `(n,)`; `metrics`, each of
    shape `(members, n)` (as `AbstractSink.rows` gets them).

    **Yields:** `(env_steps, scalars)` per row.
    """
    for i, step in enumerate(np.asarray(steps)):
        out: dict[str, float] = {}
        for k, v in metrics.items():
            col = np.asarray(v, np.float64)[:, i]
            if np.isfinite(col).any():
                out[k] = float(np.nanmean(col))
            if (k in PER_MEMBER or k.startswith("hp/")) and col.size > 1:
                out.update({f"{k}/member_{m}": float(x) for m, x in enumerate(col) if np.isfinite(x)})
        yield int(step), out


def evaluation_scalars(summary: Mapping[str, Any]) -> dict[str, float]:
    """The final evaluation as trackers plot it: `eval/mean` (the summary's mean over seeds of
    each seed's mean), and `eval/std`, `eval/min`, `eval/max` over every episode of every seed,
    with `eval/median` and `eval/nan_count` where the summary has them (`eval.json` written by
    this eqxrl: its `std`, `min`, `max` and `median` leave NaN episodes out).

    **Arguments:** `summary`, `eval.json`'s contents (`eqxrl.runs.summarize_returns`: `mean`,
    `returns`, ...), as `AbstractSink.evaluation` gets it."""
    if not isinstance(summary, Mapping) or "mean" not in summary or np.size(summary.get("returns", [])) == 0:
        raise ValueError(f"evaluation_scalars(summary) must be eval.json's summary, with 'mean' and non-empty 'returns', got {summary!r}")
    returns = np.asarray(summary["returns"], np.float64)
    number = lambda v: float("nan") if v is None else float(v)  # noqa: E731  (write_json's null for NaN reads back as None)
    out = {"eval/mean": number(summary["mean"])}
    for name, of in (("std", np.std), ("min", np.min), ("max", np.max), ("median", None), ("nan_count", None)):
        if name in summary:
            out[f"eval/{name}"] = number(summary[name])
        elif of is not None:  # (an eval.json of an older eqxrl: from its returns)
            out[f"eval/{name}"] = float(of(returns))
    return out


class AbstractSink(abc.ABC):
    """One destination for what a run emits; subclass it and override the hooks it needs (most
    loggers need `rows` only; every hook does nothing unless overridden). See the module
    docstring for when each hook is called. `name` is the sink's `--log` name (see
    `register_sink`); `required`: whether an error of the sink ends the run (the run directory's
    own files) rather than leaving the sink out of it (a tracker's outage; see `SinkGroup`)."""

    name: ClassVar[str] = ""
    required: ClassVar[bool] = False

    def start(self, run: RunInfo) -> Mapping[str, Any] | None:
        """Open the sink. **Returns:** what to record for a resumed run (JSON-able, kept in
        `config.json` under `"sinks"` and handed back as `RunInfo.record`), or None."""
        return None

    def rows(self, steps: np.ndarray, metrics: Mapping[str, np.ndarray]) -> None:
        """New metric rows: `steps` (n,) env steps per member, `metrics[name]` of shape
        `(members, n)` (one member for a single run; NaN where a metric has no value)."""

    def checkpoint(self, checkpoint: Checkpoint) -> bool | None:
        """The run at a chunk boundary, after `rows`: `checkpoint.state` (donated to the next
        chunk: copy what must outlive the call) and `checkpoint.metrics`, every row so far laid
        out as `train` returns them. **Returns:** True to stop training after this chunk."""
        return None

    def result(self, state: Any, metrics: Mapping[str, np.ndarray]) -> None:
        """The finished run: its final `state` and every metric row (as `train` returns them),
        after the final evaluation and before `finish("complete")` (not called for a run that
        stopped otherwise). As a bare `train` callback: at the chunk that reaches the budget."""

    def evaluation(self, summary: Mapping[str, Any], env_steps: int) -> None:
        """The final evaluation (`eval.json`: `mean`, `mean_per_seed`, `returns`, ...) at `env_steps`."""

    def video(self, path: pathlib.Path, frames: np.ndarray, fps: int, env_steps: int) -> None:
        """A recorded episode: the MP4 at `path`, its `frames` (n, height, width, 3) uint8."""

    def finish(self, status: str) -> None:
        """Close the sink; `status` is one of `STATUSES`."""

    @classmethod
    def resume(cls, record: Mapping[str, Any]) -> "AbstractSink":
        """Build the sink again for a resumed run from what its `start` returned (default: `cls()`)."""
        return cls()

    def __call__(self, checkpoint: Checkpoint) -> bool:
        """As a `train(callback=...)`: start on the first call, then hand on the new rows, call
        `checkpoint` (**returns** its answer: True stops training) and, at the chunk that reaches
        the budget, `result`. `train` has no end hook: call `finish(status)` after it (a
        tracker's run stays open until then)."""
        seen = getattr(self, "_seen", None)  # (iterations handed on so far; none before the first call)
        if seen is None:
            self.start(RunInfo(name=type(self).__name__))
            seen = 0
        if takes_rows(self):  # (reading checkpoint.metrics brings them to the host: only for a sink that wants them)
            self.rows_of(checkpoint.metrics, seen, checkpoint.iteration)
        self._seen = checkpoint.iteration
        stop = bool(self.checkpoint(checkpoint))
        if checkpoint.iteration == checkpoint.num_iterations and _overrides(self, "result"):
            self.result(checkpoint.state, checkpoint.metrics)
        return stop

    def rows_of(self, metrics: Mapping[str, np.ndarray], start: int, stop: int) -> None:
        """`rows` for iterations `start` to `stop` of metrics laid out as `train` returns them
        (`(iterations,)` or `(members, iterations)`)."""
        if stop <= start:
            return
        arrays = {k: np.atleast_2d(np.asarray(v))[:, start:stop] for k, v in metrics.items()}
        steps = arrays.pop("env_steps")[0]
        self.rows(steps, arrays)


def _overrides(sink: AbstractSink, hook: str) -> bool:
    return getattr(type(sink), hook) is not getattr(AbstractSink, hook)


def takes_rows(sink: AbstractSink) -> bool:
    """Whether `sink` overrides `rows` (a `SinkGroup`: whether one of its sinks does): the metric
    rows are brought to the host only for such a sink."""
    return any(takes_rows(s) for s in sink.sinks) if isinstance(sink, SinkGroup) else _overrides(sink, "rows")


SINKS: dict[str, type[AbstractSink]] = {}
"""Sink classes by `--log` name: `"tensorboard"`, `"wandb"`, `"mlflow"` and those registered."""


def register_sink(cls: Any) -> Any:
    """Make a sink class available by its `name` to `train_run(log=[name])`, `eqxrl train --log
    NAME` and resumed runs (usable as a class decorator). A resumed run builds it again with
    `cls.resume(record)`: the default calls `cls()`, so a sink with settings takes them back
    from the record its `start` returned (as the trackers do with their run ids and stores).

    **Returns:** `cls`.
    """
    if not (isinstance(cls, type) and issubclass(cls, AbstractSink)):
        raise ValueError(f"register_sink(cls) must be a subclass of eqxrl.loop.AbstractSink, got {cls!r}")
    name = cls.name
    if not isinstance(name, str) or not name.isidentifier() or name.lower() != name:
        raise ValueError(f"register_sink(cls): {cls.__name__}.name must be a lower-case identifier such as 'my_logger', got {name!r}")
    SINKS[name] = cls
    return cls


def make_sinks(
    log: Any, records: Mapping[str, Any] | None = None, owner: str = "train_run(log)"
) -> tuple[list[AbstractSink], list[str]]:
    """Sinks from names (`SINKS`) and sink instances, in order, without repeated names.

    **Arguments:** `log`, a name, a sink, or a list of them; `records`, a resumed run's
    `config.json` `"sinks"` (a named sink with a record is built by `cls.resume(record)`).

    **Returns:** `(sinks, names)`: the names are those of the registered sinks, which
    `config.json` records so that `resume_run` builds them again (an instance of an
    unregistered class is used but not recorded: pass it again to `resume_run`).
    """
    items = [log] if isinstance(log, (str, AbstractSink)) else list(log) if isinstance(log, (list, tuple)) else None
    if items is None:
        raise ValueError(f"{owner} must be a list of sink names ({', '.join(sorted(SINKS))}) or sinks, got {log!r}")
    records = records or {}
    sinks: list[AbstractSink] = []
    names: list[str] = []
    for item in items:
        if isinstance(item, str):
            if item not in SINKS:
                known = ", ".join(repr(n) for n in sorted(SINKS))
                raise ValueError(f"{owner} must name a sink ({known}; or register_sink), got {item!r}")
            record = records.get(item)
            sink = SINKS[item].resume(record) if isinstance(record, Mapping) and record else SINKS[item]()
        elif isinstance(item, AbstractSink):
            sink = item
        else:
            raise ValueError(f"{owner} must hold sink names or eqxrl.loop.AbstractSink instances, got {item!r}")
        registered = SINKS.get(sink.name) is type(sink)
        if registered and sink.name in names:
            continue
        if registered:
            names.append(sink.name)
        sinks.append(sink)
    return sinks, names


class SinkGroup(AbstractSink):
    """Several sinks driven as one (what `train_run` and `PBT.run` hold): each hook goes to every
    sink in order. A sink whose hook raises after it started is reported on stderr in one line and
    left out for the rest of the run (a tracker's outage is not worth the training run), unless it
    is `required` (the run directory's own files): then the other sinks still get the hook and the
    first required sink's error is raised (but in `finish` of a run that did not complete, whose
    own error is the one to report). `start`'s errors propagate, since they come before training.
    `checkpoint` returns True when a sink asked to stop, and `stopped_by` lists those sinks.

    **Arguments:** `sinks`, a list of `AbstractSink`; `names`, their recorded names (see `make_sinks`).
    """

    def __init__(self, sinks: list[AbstractSink], names: list[str] | None = None):
        self.sinks, self.names = list(sinks), list(names or [])
        self.stopped_by: list[AbstractSink] = []

    def __bool__(self) -> bool:
        return bool(self.sinks)

    def start(self, run: RunInfo) -> dict[str, Any]:
        """Start every sink (with its own `record` from `run.record[name]`). **Returns:** the
        records by name of the registered sinks that returned one."""
        records: dict[str, Any] = {}
        for i, sink in enumerate(self.sinks):
            own = run.record.get(sink.name, {}) if sink.name in self.names else {}
            try:
                record = sink.start(dataclasses.replace(run, record=own))
            except BaseException:
                SinkGroup(self.sinks[:i]).finish("failed")  # (the ones started: a tracker run is not left open)
                raise
            if record and sink.name in self.names:
                records[sink.name] = dict(record)
        return records

    def _each(self, hook: str, *args: Any) -> list[tuple[AbstractSink, Any]]:
        """Call `hook` of every sink; **returns** each sink that answered, with its answer."""
        answers, error = [], None
        quiet = hook == "finish" and args[0] != "complete"
        for sink in list(self.sinks):
            try:
                answers.append((sink, getattr(sink, hook)(*args)))
            except Exception as e:
                if sink.required:
                    error = error if error is not None or quiet else e
                    continue
                if sink not in self.sinks:  # (the video thread's call and the training thread's both failed)
                    continue
                self.sinks.remove(sink)
                label = sink.name or type(sink).__name__
                print(f"eqxrl: the {label} sink failed in {hook} and is left out of this run: {one_line(e)[:300]}",
                      file=sys.stderr, flush=True)  # fmt: skip
        if error is not None:
            raise error
        return answers

    def rows(self, steps: np.ndarray, metrics: Mapping[str, np.ndarray]) -> None:
        if takes_rows(self):
            self._each("rows", steps, metrics)

    def rows_of(self, metrics: Mapping[str, np.ndarray], start: int, stop: int) -> None:
        if takes_rows(self):  # (reading the metrics brings them to the host: only for a sink that wants them)
            super().rows_of(metrics, start, stop)

    def checkpoint(self, checkpoint: Checkpoint) -> bool:
        self.stopped_by = [sink for sink, stop in self._each("checkpoint", checkpoint) if stop]
        return bool(self.stopped_by)

    def evaluation(self, summary: Mapping[str, Any], env_steps: int) -> None:
        self._each("evaluation", summary, env_steps)

    def video(self, path: pathlib.Path, frames: np.ndarray, fps: int, env_steps: int) -> None:
        self._each("video", path, frames, fps, env_steps)

    def result(self, state: Any, metrics: Mapping[str, np.ndarray]) -> None:
        self._each("result", state, metrics)

    def finish(self, status: str) -> None:
        self._each("finish", status)
