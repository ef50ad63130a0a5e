"""Per-iteration metrics (`metrics.csv`) and evaluation returns (`eval.json`) of a run directory."""

import csv
import json
import pathlib
from collections.abc import Mapping
from typing import Any

import numpy as np
from jaxtyping import Array

from ..store import read_text_bounded, write_json
from ._files import EVAL, METRICS, PathLike

__all__ = ["evaluation_summary", "load_evaluation", "load_metrics", "save_evaluation", "save_metrics", "summarize_returns"]


def _batch_size(metrics: Mapping[str, Any]) -> int | None:
    steps = np.asarray(metrics["env_steps"])
    if steps.ndim == 1:
        return None
    if steps.ndim == 2:
        return steps.shape[0]
    raise ValueError(f"metrics['env_steps'] must have shape (iterations,) or (seeds, iterations), got {steps.shape}")


def save_metrics(path: PathLike, metrics: Mapping[str, Any], seed: int = 0) -> None:
    """Write per-iteration metrics as CSV: one row per (seed, iteration).

    **Arguments:**

    - `path`: the CSV file to write.
    - `metrics`: as returned by `eqxrl.train`: arrays of shape `(iterations,)`
      or `(seeds, iterations)`.
    - `seed`: the base seed; row `i` of a batch gets seed `seed + i`.

    **Returns:** nothing. The columns are `seed`, `iteration` (1-based), `env_steps`,
    `episode_return`, `eval_return` (with `train(eval_every=...)`: `nan` on rows with
    no evaluation), then the other metrics in alphabetical order.
    """
    if "env_steps" not in metrics or "episode_return" not in metrics:
        raise ValueError(f"metrics must include 'env_steps' and 'episode_return', got {sorted(metrics)}")
    arrays = {k: np.asarray(v) for k, v in metrics.items()}
    if _batch_size(arrays) is None:
        arrays = {k: v[None] for k, v in arrays.items()}
    shape = arrays["env_steps"].shape
    for k, v in arrays.items():
        if v.shape != shape:
            raise ValueError(f"metrics[{k!r}] has shape {v.shape}, metrics['env_steps'] {shape}")
    first = ["env_steps", "episode_return"] + (["eval_return"] if "eval_return" in arrays else [])
    names = first + sorted(k for k in arrays if k not in first)
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["seed", "iteration", *names])
        for s in range(shape[0]):
            for i in range(shape[1]):
                # str of a NumPy scalar: the shortest repr of its own dtype (float32: 19.666666).
                writer.writerow([seed + s, i + 1, *(str(arrays[k][s, i]) for k in names)])


def load_metrics(run_dir: PathLike) -> dict[str, np.ndarray]:
    """Read a run directory's `metrics.csv` back into arrays.

    **Arguments:** `run_dir`, a directory written by `save_run` (or `eqxrl train`).

    **Returns:** a dict of arrays of shape `(iterations,)` for one seed or
    `(seeds, iterations)`, as `eqxrl.train` returned them (plus `iteration`).
    """
    path = pathlib.Path(run_dir) / METRICS
    if not path.is_file():
        raise ValueError(f"{str(run_dir)!r} has no {METRICS}")
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    if not rows or "seed" not in rows[0]:
        raise ValueError(f"{path} has no rows or no 'seed' column")
    seeds = list(dict.fromkeys(row["seed"] for row in rows))
    columns: dict[str, np.ndarray] = {}
    for name in rows[0]:
        if name == "seed":
            continue
        values = [row[name] for row in rows]
        try:
            array = np.array([int(v) for v in values], dtype=np.int64)
        except ValueError:
            array = np.array([float(v) for v in values], dtype=np.float64)
        columns[name] = array
    if len(rows) % len(seeds):
        raise ValueError(f"{path}: {len(rows)} rows do not split evenly over {len(seeds)} seeds")
    per_seed = len(rows) // len(seeds)
    if len(seeds) == 1:
        return columns
    return {k: v.reshape(len(seeds), per_seed) for k, v in columns.items()}


def save_evaluation(
    run_dir: PathLike, returns: Array | np.ndarray, *, deterministic: bool, seed: int
) -> dict[str, Any]:
    """Write `eval.json`: evaluation returns per seed, their means and the overall mean.

    **Arguments:**

    - `run_dir`: the run directory.
    - `returns`: from `eqxrl.evaluate`, shape `(episodes,)` or `(seeds, episodes)`.
    - `deterministic`: whether the policy's mode was used.
    - `seed`: the seed of the evaluation key (`eqxrl.runs.eval_key(seed)`).

    **Returns:** the dict written (`summarize_returns`'s: `returns`, `mean_per_seed`, `mean`,
    `std`, `min`, `max`, `median`, `nan_count`, ..., and `deterministic`, `seed`).
    """
    summary = evaluation_summary(returns, deterministic=deterministic, seed=seed)
    write_json(pathlib.Path(run_dir) / EVAL, summary)
    return summary


def evaluation_summary(returns: Array | np.ndarray, *, deterministic: bool, seed: int) -> dict[str, Any]:
    """**Returns:** `eval.json`'s contents, as `save_evaluation` writes them (and `train_run`'s
    sinks get them, `eqxrl.loop.AbstractSink.evaluation`): `summarize_returns(returns)` with
    `deterministic` and `seed`."""
    summary = summarize_returns(returns)
    summary.update(deterministic=bool(deterministic), seed=int(seed))
    return summary


def summarize_returns(returns: Array | np.ndarray) -> dict[str, Any]:
    """Evaluation statistics of returns of shape `(episodes,)` or `(seeds, episodes)`.

    **Returns:** a dict with `episodes` (per seed), `returns` (per seed), `mean_per_seed`,
    `std_per_seed`, `mean` (the mean of the seeds' means; NaN where an episode is NaN), and
    over every episode of every seed `std`, `min`, `max`, `median` and `nan_count`, each also
    per seed but `std` (`min_per_seed`, `max_per_seed`, `median_per_seed`, `nan_count_per_seed`).
    The statistics besides `mean`, `mean_per_seed` and `std_per_seed` (NaN where a seed has a
    NaN episode, as before) leave NaN episodes out (NaN where every episode is NaN);
    `nan_count` says how many there were.
    """
    r = np.atleast_2d(np.asarray(returns, dtype=np.float64))
    if r.ndim != 2:
        raise ValueError(f"returns must have shape (episodes,) or (seeds, episodes), got {np.shape(returns)}")
    per_seed = r.mean(axis=1)
    overall = _statistics(r.reshape(-1))
    seeds = [_statistics(row) for row in r]
    return {
        "episodes": int(r.shape[1]),
        "returns": r.tolist(),
        "mean_per_seed": per_seed.tolist(),
        "std_per_seed": r.std(axis=1).tolist(),
        "mean": float(per_seed.mean()),
        **overall,
        **{f"{name}_per_seed": [s[name] for s in seeds] for name in overall if name != "std"},  # (std_per_seed: above)
    }


def _statistics(returns: np.ndarray) -> dict[str, Any]:
    """`std`, `min`, `max`, `median` of the non-NaN `returns` (NaN when none is), and `nan_count`."""
    nan = np.isnan(returns)
    kept = returns[~nan]
    stats = dict(std=kept.std(), min=kept.min(), max=kept.max(), median=np.median(kept)) if kept.size else {}
    out = {k: float(stats.get(k, np.nan)) for k in ("std", "min", "max", "median")}
    return {**out, "nan_count": int(nan.sum())}


def load_evaluation(run_dir: PathLike) -> dict[str, Any]:
    """**Returns:** the contents of a run directory's `eval.json`."""
    path = pathlib.Path(run_dir) / EVAL
    if not path.is_file():
        raise ValueError(f"{str(run_dir)!r} has no {EVAL}")
    return json.loads(read_text_bounded(path))
