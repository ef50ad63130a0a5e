"""Agent-specific results of a finished run (`AbstractAgent.report`), written by the run floor:
each named value as `NAME.json` (its `summary()`, or the value itself if it is JSON already) and,
where its type has a plot (`REPORT_PLOTS`, `register_report_plot`), as `NAME.png`."""

import pathlib
from collections.abc import Callable, Mapping
from typing import Any

from ..agents import SkillReport
from ..store import write_json
from ._files import PathLike
from ._plots import plot_skill_trajectories

ReportPlot = Callable[..., None]
"""`plot(value, path, *, title)`: draws one report value into the PNG file `path`."""

REPORT_PLOTS: dict[type, ReportPlot] = {SkillReport: plot_skill_trajectories}
"""The plot of each report type: DADS's `SkillReport` draws its skills' descriptor trajectories."""


def register_report_plot(cls: type, plot: ReportPlot) -> None:
    """Draw every report value of type `cls` (what a user's agent returns from `report`) with
    `plot(value, path, *, title)` into `NAME.png` beside `NAME.json`."""
    if not isinstance(cls, type):
        raise ValueError(f"register_report_plot(cls) must be a class (the report value's type), got {cls!r}")
    if not callable(plot):
        raise ValueError(f"register_report_plot(plot) must be a function plot(value, path, *, title), got {plot!r}")
    REPORT_PLOTS[cls] = plot


def write_reports(run_dir: PathLike, reports: Mapping[str, Any], *, title: str = "") -> list[str]:
    """Write an agent's `report(state, key)` into `run_dir`.

    **Arguments:** `run_dir`; `reports`, `{name: value}`; `title`, the start of each plot's
    title (`"<title> <name>"`).

    **Returns:** the names of the files written, in order.
    """
    if not isinstance(reports, Mapping):
        raise ValueError(f"an agent's report(state, key) must return a dict {{name: value}}, got {type(reports).__name__}")
    run_dir, files = pathlib.Path(run_dir), []
    for name, value in reports.items():
        if not isinstance(name, str) or not name.isidentifier():
            raise ValueError(f"an agent's report names must be identifiers (they name files), got {name!r}")
        plot = REPORT_PLOTS.get(type(value))
        if plot is not None:
            plot(value, run_dir / f"{name}.png", title=f"{title} {name}".strip())
            files.append(f"{name}.png")
        write_json(run_dir / f"{name}.json", value.summary() if callable(getattr(value, "summary", None)) else value)
        files.append(f"{name}.json")
    return files
