"""Weights & Biases as a sink (`--log wandb`; `pip install 'eqxrl[wandb]'`)."""

import os
import pathlib
from collections.abc import Mapping
from typing import Any

import numpy as np

from ..core import one_line
from ..loop import AbstractSink, RunInfo, evaluation_scalars, register_sink, scalar_rows
from ._config import tracked_config
from ._files import PathLike

__all__ = ["WandbSink"]

_MODES = (None, "online", "offline", "disabled")


@register_sink
class WandbSink(AbstractSink):
    """A Weights & Biases run: the run's config, every metric row against `env_steps`
    (`eqxrl.loop.scalar_rows`; W&B's x-axis is `env_steps`, set with `define_metric`), the
    final evaluation (`eval/mean`, ... in the run summary) and each recorded episode as a video.

    **Arguments** (each `None` means W&B's own default, which reads its environment variables):

    - `project`: the W&B project (default `$WANDB_PROJECT`, else `"eqxrl"`); `entity`, `group`,
      `tags`: as for `wandb.init`.
    - `mode`: `"online"`, `"offline"` (written under `dir`, uploaded later with `wandb sync`) or
      `"disabled"`; default `$WANDB_MODE`, else online (which needs `wandb login`).
    - `dir`: where W&B writes its files (default: the run directory, so an offline run lands in
      `RUN_DIR/wandb/`).

    A resumed run directory goes on in the same W&B run (its id is kept in `config.json`).
    """

    name = "wandb"

    def __init__(self, project: Any = None, *, entity: Any = None, mode: Any = None, dir: Any = None,
                 group: Any = None, tags: Any = (), run_id: Any = None):  # fmt: skip
        for arg, value in (("project", project), ("entity", entity), ("group", group), ("run_id", run_id)):
            if value is not None and (not isinstance(value, str) or not value):
                raise ValueError(f"WandbSink({arg}) must be a non-empty string or None, got {value!r}")
        if mode not in _MODES:
            raise ValueError(f"WandbSink(mode) must be one of {', '.join(map(repr, _MODES))}, got {mode!r}")
        if dir is not None and not isinstance(dir, (str, pathlib.Path)):
            raise ValueError(f"WandbSink(dir) must be a directory path or None, got {dir!r}")
        if not isinstance(tags, (list, tuple)) or not all(isinstance(t, str) for t in tags):
            raise ValueError(f"WandbSink(tags) must be a list of strings, got {tags!r}")
        self.project = project or os.environ.get("WANDB_PROJECT") or "eqxrl"
        self.entity, self.mode, self.group, self.tags, self.run_id = entity, mode, group, tuple(tags), run_id
        self.dir: PathLike | None = dir
        self.run: Any = None

    @classmethod
    def resume(cls, record: Mapping[str, Any]) -> "WandbSink":
        return cls(record.get("project"), entity=record.get("entity"), mode=record.get("mode"), dir=record.get("dir"),
                   group=record.get("group"), tags=record.get("tags", ()), run_id=record.get("id"))  # fmt: skip

    def start(self, run: RunInfo) -> dict[str, Any]:
        try:
            import wandb
        except ImportError:
            raise ValueError("the wandb sink needs wandb: pip install 'eqxrl[wandb]'") from None
        directory = self.dir if self.dir is not None else run.run_dir
        if directory is not None:
            pathlib.Path(directory).mkdir(parents=True, exist_ok=True)
        try:
            self.run = wandb.init(
                project=self.project, entity=self.entity, mode=self.mode, group=self.group, tags=list(self.tags) or None,
                dir=None if directory is None else str(directory), name=run.name if not run.start_iteration else None,
                id=self.run_id, resume="allow" if self.run_id else None, config=tracked_config(run.config),
                reinit="create_new", settings=wandb.Settings(silent=True, console="off"),
            )  # fmt: skip
        except Exception as e:  # (no login, no network in online mode: one line, before training starts)
            raise ValueError(
                f"the wandb sink could not start a W&B run ({one_line(e)[:200]}): `wandb login`, or set WANDB_MODE=offline"
            ) from None
        self.run.define_metric("env_steps")
        self.run.define_metric("*", step_metric="env_steps")
        self.run_id = self.run.id
        record = {"id": self.run.id, "project": self.project, "mode": self.mode}
        record.update({k: v for k, v in (("entity", self.entity), ("group", self.group)) if v is not None})
        if self.tags:
            record["tags"] = list(self.tags)
        if self.dir is not None:
            record["dir"] = str(self.dir)
        return record

    def rows(self, steps: np.ndarray, metrics: Mapping[str, np.ndarray]) -> None:
        for step, scalars in scalar_rows(steps, metrics):
            self.run.log({**scalars, "env_steps": step})

    def evaluation(self, summary: Mapping[str, Any], env_steps: int) -> None:
        values = {**evaluation_scalars(summary), "eval/episodes": int(np.size(summary["returns"]))}
        self.run.log({**values, "env_steps": int(env_steps)})
        self.run.summary.update(values)

    def video(self, path: pathlib.Path, frames: np.ndarray, fps: int, env_steps: int) -> None:
        import wandb

        self.run.log({"episode": wandb.Video(str(path), format="mp4"), "env_steps": int(env_steps)})

    def finish(self, status: str) -> None:
        if self.run is not None:
            self.run.finish(exit_code=0 if status == "complete" else 1)
            self.run = None
