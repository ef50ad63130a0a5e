"""The learning-curve PNG of a run directory."""

import pathlib
from collections.abc import Mapping
from typing import Any

import numpy as np

from ..core import figure, png_bytes
from ._files import PathLike, atomic_write_bytes

__all__ = ["member_labels", "plot_learning_curve"]


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
    """Legend labels for sweep members: the fields in which they differ."""
    keys = [k for k in members[0] if any(m.get(k) != members[0].get(k) for m in members)]
    return [", ".join(f"{k}={m[k]}" for k in keys) or f"member {i}" for i, m in enumerate(members)]
