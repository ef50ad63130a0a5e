"""The figures of a run directory: every PNG eqxrl writes (learning curves, PBT histories,
DADS's skills) is made by `figure` and written by `png_bytes`."""

import io
import os
import pathlib
from collections.abc import Mapping
from typing import Any

import numpy as np

from ..agents import SkillReport
from ..store import atomic_write_bytes
from ._config import flat_config
from ._files import PathLike

__all__ = ["figure", "member_labels", "plot_learning_curve", "plot_skill_trajectories", "png_bytes"]


def figure(figsize: tuple[float, float] = (6.4, 4.0)):
    """A Matplotlib `Figure` with constrained layout.

    The object-oriented API renders with Agg and leaves pyplot's global backend
    (and a user's interactive session) alone.
    """
    from matplotlib.figure import Figure

    return Figure(figsize=figsize, layout="constrained")


def png_bytes(fig, dpi: int = 100) -> bytes:
    """**Returns:** `fig` rendered as PNG (write it atomically where it must survive a crash)."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi)
    return buffer.getvalue()


def plot_learning_curve(
    metrics: Mapping[str, Any],
    path: PathLike,
    *,
    title: str | None = None,
    seed: int = 0,
    members: list[str] | None = None,
) -> None:
    """Plot the mean training episode return against env steps, with the min–max band over seeds,
    and the in-training evaluation returns (`eval_return`, from `train(eval_every=...)`) as
    points on a line on the same axes (the mean over seeds, or one per sweep member).

    NaN returns (no episode finished in that iteration; no evaluation) are ignored.

    **Arguments:**

    - `metrics`: as returned by `eqxrl.train` (`env_steps` and `episode_return`,
      shape `(iterations,)` or `(seeds, iterations)`).
    - `path`: the image file to write (`.png`).
    - `title`: the figure title.
    - `seed`: the base seed, for the legend of a single-seed run.
    - `members`: for a sweep, one label per member: one line each instead of
      the mean and band over seeds.

    **Returns:** nothing.
    """
    steps = np.atleast_2d(np.asarray(metrics["env_steps"], dtype=np.float64))
    returns = np.atleast_2d(np.asarray(metrics["episode_return"], dtype=np.float64))
    num_seeds = returns.shape[0]
    finite = np.isfinite(returns)
    count = finite.sum(axis=0)
    keep = count > 0
    x = steps[0][keep]
    mean = np.where(finite, returns, 0.0).sum(axis=0)[keep] / count[keep]
    low = np.where(finite, returns, np.inf).min(axis=0)[keep]
    high = np.where(finite, returns, -np.inf).max(axis=0)[keep]

    fig = figure((6.4, 4.0))
    ax = fig.add_subplot()
    has_eval = "eval_return" in metrics and bool(np.isfinite(np.asarray(metrics["eval_return"], np.float64)).any())
    training = " (training)" if has_eval else ""
    if members is not None:
        for i, label in enumerate(members):
            ok = finite[i]
            ax.plot(steps[i][ok], returns[i][ok], label=label + training)
    elif num_seeds > 1:
        ax.fill_between(x, low, high, alpha=0.25, linewidth=0, label=f"min–max over {num_seeds} seeds{training}")
        ax.plot(x, mean, label=f"mean over {num_seeds} seeds{training}")
    else:
        ax.plot(x, mean, label=f"seed {seed}{training}")
    evaluated = _plot_evaluations(ax, metrics, steps, members)
    if not keep.any() and not evaluated:
        ax.text(0.5, 0.5, "no episode finished", ha="center", va="center", transform=ax.transAxes)
    else:
        ax.legend(loc="best")
    ax.set_xlabel("env steps")
    ax.set_ylabel("mean episode return" if evaluated else "mean episode return (training)")
    ax.grid(alpha=0.3)
    if title:
        ax.set_title(title)
    atomic_write_bytes(pathlib.Path(path), png_bytes(fig))


def _plot_evaluations(ax: Any, metrics: Mapping[str, Any], steps: np.ndarray, members: list[str] | None) -> bool:
    """The `eval_return` points (mean over seeds, or per member): whether there were any."""
    if "eval_return" not in metrics:
        return False
    evals = np.atleast_2d(np.asarray(metrics["eval_return"], dtype=np.float64))
    rows = np.isfinite(evals).any(axis=0)
    if not rows.any():
        return False
    if members is not None:
        for i, label in enumerate(members):
            ok = np.isfinite(evals[i])
            ax.plot(steps[i][ok], evals[i][ok], marker="o", markersize=3, linestyle="--", label=f"{label} (evaluation)")
    else:
        finite = np.isfinite(evals[:, rows])
        mean = np.where(finite, evals[:, rows], 0.0).sum(axis=0) / np.maximum(finite.sum(axis=0), 1)
        label = f"evaluation, mean over {evals.shape[0]} seeds" if evals.shape[0] > 1 else "evaluation (deterministic)"
        ax.plot(steps[0][rows], mean, marker="o", markersize=4, color="black", label=label)
    return True


def member_labels(members: list[dict[str, Any]]) -> list[str]:
    """Legend labels for sweep members: the fields in which they differ (a module's by dotted path,
    `optimizer.learning_rate=0.001`)."""
    members = [flat_config(m) for m in members]
    keys = [k for k in members[0] if any(m.get(k) != members[0].get(k) for m in members)]
    return [", ".join(f"{k}={m[k]}" for k in keys) or f"member {i}" for i, m in enumerate(members)]


def plot_skill_trajectories(report: SkillReport, path: str | os.PathLike, *, title: str | None = None) -> None:
    """Draw each skill's descriptor trajectory (the first two descriptor dimensions; a
    1-D descriptor against time) in a PNG, one colour per skill, every seed of a batch.

    **Arguments:**

    - `report`: from `DADS.evaluate_skills` (one run or a batch of seeds).
    - `path`: the image file to write (`.png`).
    - `title`: the figure title.

    **Returns:** nothing.
    """
    from matplotlib import colormaps

    descs = np.asarray(report.descriptors, dtype=np.float64)
    if descs.ndim == 3:
        descs = descs[None]
    if descs.ndim != 4:
        raise ValueError(
            "plot_skill_trajectories(report) needs descriptors of shape (skills, steps, d) or "
            f"(seeds, skills, steps, d), got {descs.shape}"
        )
    num_seeds, num_skills, steps, dim = descs.shape
    fig = figure((5.6, 5.0) if dim > 1 else (6.4, 4.0))
    ax = fig.add_subplot()
    colors = colormaps["tab10" if num_skills <= 10 else "viridis"]
    for z in range(num_skills):
        color = colors(z if num_skills <= 10 else z / max(num_skills - 1, 1))
        for s in range(num_seeds):
            traj = descs[s, z]
            xs, ys = (traj[:, 0], traj[:, 1]) if dim > 1 else (np.arange(steps), traj[:, 0])
            ax.plot(xs, ys, color=color, alpha=0.8, linewidth=1.2, label=f"skill {z}" if s == 0 else None)
            ax.plot(xs[-1:], ys[-1:], marker="o", color=color, markersize=4)
        ax.plot(xs[:1], ys[:1], marker="x", color="black", markersize=5)
    if dim > 1:
        ax.set_xlabel("descriptor 0")
        ax.set_ylabel("descriptor 1")
        ax.set_aspect("equal", adjustable="datalim")
    else:
        ax.set_xlabel("step")
        ax.set_ylabel("descriptor")
    ax.grid(alpha=0.3)
    ax.legend(loc="best", fontsize="small")
    ax.set_title(title or f"DADS skills ({num_seeds} seed{'s' if num_seeds > 1 else ''})")
    atomic_write_bytes(pathlib.Path(path), png_bytes(fig))
