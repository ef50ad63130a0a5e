"""What a `train` call hands back besides the state: timings, checkpoints, the
non-finite error, and the per-iteration metrics brought to the host."""

import dataclasses
from collections.abc import Mapping
from typing import Any

import equinox as eqx
import jax
import numpy as np
from jaxtyping import PyTree

from ._chunk import _all_finite, guarded_leaves

__all__ = ["Checkpoint", "HostMetrics", "NonFiniteError", "LazyMetrics", "TrainInfo", "divergence", "finite_flag", "nonfinite_report", "state_is_finite"]


class TrainInfo(eqx.Module):
    """Timings of a `train` call, returned by `train(..., return_info=True)`.

    `compile_seconds` covers tracing, lowering and compiling both programs
    (`init` and the training chunk); `run_seconds` everything after.
    `env_steps` (and `steps_per_second`) count what this call trained, over every
    seed or member; `total_env_steps` counts the whole run's (with a resumed
    checkpoint's), over every seed or member; `num_iterations` is the run's length.
    `stopped_at`: the iterations done when a callback stopped training early (the
    metrics have that many rows), None when the run went to its end.
    """

    compile_seconds: float
    run_seconds: float
    env_steps: int
    steps_per_second: float
    num_iterations: int
    total_env_steps: int = 0
    stopped_at: int | None = None

    @property
    def stopped_early(self) -> bool:
        """Whether a callback stopped training before `num_iterations`."""
        return self.stopped_at is not None


@dataclasses.dataclass(frozen=True)
class Checkpoint:
    """Where a `train` call stands after a chunk: enough to continue it exactly.

    - `state`: the training state after `iteration` iterations (device arrays).
    - `iteration`: iterations done; `num_iterations`: the run's total.
    - `chunk_iterations`: the chunk length (a resumed run must use the same one).
    - `metrics`: host NumPy arrays of the iterations so far, laid out as `train` returns them.
    """

    state: PyTree
    iteration: int
    num_iterations: int
    chunk_iterations: int
    metrics: Mapping[str, np.ndarray]

    def copy(self) -> "Checkpoint":
        """**Returns:** a checkpoint with its own copy of the state (a callback's
        checkpoint shares its state with the next chunk, which consumes it)."""
        state = jax.tree.map(lambda x: x.copy() if isinstance(x, jax.Array) else x, self.state)
        return dataclasses.replace(self, state=state)


class NonFiniteError(ValueError):
    """Training produced NaN or Inf (raised by `train(..., nan_guard=True)`).

    Attributes: `iteration` (1-based), `env_steps` (per member, at the end of
    that iteration), `quantities` (names of the non-finite parameters, state
    leaves and metrics), and `checkpoint` (the last finite chunk boundary, to
    inspect or to continue from with other settings).
    """

    def __init__(self, message: str, iteration: int, env_steps: int, quantities: list[str], checkpoint: Checkpoint | None):
        super().__init__(message)
        self.iteration = iteration
        self.env_steps = env_steps
        self.quantities = quantities
        self.checkpoint = checkpoint


class HostMetrics:
    """A run's per-iteration metrics on the host, filled one chunk at a time.

    Arrays of the whole run's length are allocated at the first chunk and filled in
    place, so each chunk's metrics cross to the host once (`add` queues the device
    arrays; `view` moves what is queued) and `view(n)` costs no copy of earlier
    chunks. Rows `[:n]` never change once filled, so a view handed to a callback
    stays valid.

    **Arguments:** `num_iterations` (the run's length), `before` (a resumed
    checkpoint's metrics, laid out as `train` returns them), `done_before` (its
    iterations), `batched` (a leading member axis in what `view` returns), `members`
    (a padded batch's own members: the padding's columns are dropped; None: all).
    """

    def __init__(
        self, num_iterations: int, before: dict[str, np.ndarray], done_before: int, batched: bool,
        members: int | None = None,
    ):  # fmt: skip
        self.num_iterations = num_iterations
        self.before = before
        self.done_before = done_before
        self.batched = batched
        self.arrays: dict[str, np.ndarray] | None = None
        self.pending: list[tuple[Any, int]] = []
        self.members = members

    def add(self, metrics: dict[str, Any], start: int) -> None:
        """Queue one chunk's metrics (iterations first, device arrays) for rows from `start`."""
        self.pending.append((metrics, start))

    def _allocate(self, first: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        arrays = {}
        for k, v in first.items():
            fill = np.nan if np.issubdtype(v.dtype, np.floating) else 0
            shape = v.shape[1:] if self.members is None else (self.members, *v.shape[2:])
            arrays[k] = np.full((self.num_iterations, *shape), fill, v.dtype)
            if k in self.before and self.done_before:
                old = np.asarray(self.before[k])
                arrays[k][: self.done_before] = np.moveaxis(old, 1, 0) if self.batched else old
        return arrays

    def flush(self) -> None:
        """Move the queued chunks to the host (one transfer) and into the arrays."""
        if not self.pending:
            return
        host = jax.device_get([m for m, _ in self.pending])
        for metrics, (_, start) in zip(host, self.pending):
            if self.arrays is None:
                self.arrays = self._allocate(metrics)
            count = min(len(next(iter(metrics.values()))), self.num_iterations - start)
            for k, v in metrics.items():
                self.arrays[k][start : start + count] = v[:count] if self.members is None else v[:count, : self.members]
        self.pending = []

    def iterations_first(self, upto: int) -> dict[str, np.ndarray]:
        """Rows `[:upto]`, iterations first (views), `nonfinite` included."""
        self.flush()
        if self.arrays is None:
            return {k: (np.moveaxis(np.asarray(v), 1, 0) if self.batched else np.asarray(v))[:upto] for k, v in self.before.items()}
        return {k: v[:upto] for k, v in self.arrays.items()}

    def view(self, upto: int) -> dict[str, np.ndarray]:
        """The metrics of iterations `[:upto]` as `train` returns them (views, no copy)."""
        out = self.iterations_first(upto)
        out.pop("nonfinite", None)
        return {k: np.moveaxis(v, 0, 1) for k, v in out.items()} if self.batched else out


class LazyMetrics(Mapping):
    """`HostMetrics.view(upto)` as a read-only mapping that moves the metrics to the host
    on first access: a callback that never looks at them (a checkpoint writer with
    nothing due, say) leaves the next chunk free to start before this one's metrics
    arrive. Rows `[:upto]` never change, so a late first access sees the same values."""

    def __init__(self, host: HostMetrics, upto: int):
        self._host, self._upto = host, upto
        self._data: dict[str, np.ndarray] | None = None

    def _metrics(self) -> dict[str, np.ndarray]:
        if self._data is None:
            self._data = self._host.view(self._upto)
        return self._data

    def __getitem__(self, name: str) -> np.ndarray:
        return self._metrics()[name]

    def __iter__(self):
        return iter(self._metrics())

    def __len__(self) -> int:
        return len(self._metrics())

    def __repr__(self) -> str:
        return f"LazyMetrics({self._metrics()!r})"


EPISODE_METRICS = ("episode_return", "episode_length", "eval_return")
"""Metrics that are NaN by design on iterations that finished no episode (or were not evaluated)."""


def nonfinite_report(state: PyTree, metrics: dict[str, np.ndarray], row: int, batched: bool) -> list[str]:
    """Names of the non-finite quantities: state leaves (with the member) and metrics of `row`."""
    found = []
    for path, leaf, inf_ok in guarded_leaves(state):
        x = np.asarray(leaf)
        bad = np.isnan(x) if inf_ok else ~np.isfinite(x)
        if bad.any():
            name = jax.tree_util.keystr(path).lstrip(".")
            if batched and x.ndim:
                members = np.nonzero(bad.reshape(x.shape[0], -1).any(axis=1))[0].tolist()
                name += f" (member{'s' if len(members) > 1 else ''} {', '.join(map(str, members[:8]))})"
            found.append(name)
    for k, v in metrics.items():
        value = np.asarray(v)[row]
        if np.issubdtype(value.dtype, np.floating) and np.isinf(value).any():
            found.append(f"metric {k} (Inf)")
        elif np.issubdtype(value.dtype, np.floating) and np.isnan(value).any() and k not in EPISODE_METRICS:
            found.append(f"metric {k} (NaN)")
    return found


_finite = eqx.filter_jit(_all_finite)


def finite_flag(state: PyTree) -> jax.Array:
    """Whether the leaves that `train(nan_guard=True)` checks hold no NaN (and no Inf
    where Inf is not allowed): parameters, optimizer states and statistics; replay
    buffers are not scanned. One compiled reduction, dispatched without waiting for it.

    **Returns:** a bool scalar on the device (`bool()` of it waits).
    """
    return _finite(state)


def state_is_finite(state: PyTree) -> bool:
    """`finite_flag(state)`, waited for: **returns** a Python bool."""
    return bool(_finite(state))


def divergence(checkpoint: Checkpoint, since: int, upto: int | None = None, finite: bool | None = None) -> tuple[int, list[str]] | None:
    """Whether training diverged in the iterations `[since, upto)` (default `upto`: the
    checkpoint's iteration), the check of a run without the non-finite guard.

    The run diverged when the state at `upto` is not finite (as the guard checks it:
    `finite`, or `state_is_finite(checkpoint.state)` when not given) or a metric of
    those iterations is Inf. A NaN metric alone is not divergence: an off-policy
    agent's losses are NaN before learning starts and a delayed actor's on the
    iterations it skips. The iteration named is the first of the trailing run of
    iterations (up to `upto`) with a non-finite metric besides the episode statistics:
    once parameters are NaN every loss stays NaN, so that is where it appeared; the
    iteration `upto` when no metric shows it.

    **Returns:** None, or `(iteration, quantities)`: the 1-based iteration, and the names
    of the non-finite metrics at it and of the non-finite leaves of `checkpoint.state`
    (as `nonfinite_report` names them).
    """
    stop = checkpoint.iteration if upto is None else upto
    if stop <= since:
        return None
    metrics = {k: np.asarray(v) for k, v in checkpoint.metrics.items()}
    batched = metrics["env_steps"].ndim == 2
    rows = {k: (np.moveaxis(v, 1, 0) if batched else v) for k, v in metrics.items()}
    floats = {k: v for k, v in rows.items() if np.issubdtype(v.dtype, np.floating)}

    def per_row(bad: Any) -> np.ndarray:
        return bad.reshape(bad.shape[0], -1).any(axis=1)

    span = slice(since, stop)
    inf = np.zeros(stop - since, bool)
    nonfinite = np.zeros(stop - since, bool)
    for k, v in floats.items():
        inf |= per_row(np.isinf(v[span]))
        if k not in EPISODE_METRICS:
            nonfinite |= per_row(~np.isfinite(v[span]))
    if finite is None:
        finite = state_is_finite(checkpoint.state)
    if finite and not inf.any():
        return None
    row = stop - 1
    if nonfinite[-1]:
        clean = np.nonzero(~nonfinite)[0]
        row = since + (int(clean[-1]) + 1 if clean.size else 0)
    if inf.any():
        row = min(row, since + int(np.argmax(inf)))
    quantities = nonfinite_report(checkpoint.state, rows, row, batched)
    return row + 1, quantities


def listing(names: list[str], limit: int = 6) -> str:
    """`names` for a message: metrics first (the loss that went wrong is the most telling), at most `limit`."""
    names = [n for n in names if n.startswith("metric")] + [n for n in names if not n.startswith("metric")]
    if not names:
        return "unknown"
    more = f" and {len(names) - limit} more" if len(names) > limit else ""
    return ", ".join(names[:limit]) + more
