"""The template a checkpoint's stored metrics are restored through (`eqxrl.store.check_stored`
checks them against it before any is read)."""

import pathlib
from typing import Any

import jax
import numpy as np

from ..store import stored_arrays

__all__ = ["metrics_template"]


def metrics_template(directory: pathlib.Path, batch_size: int | None, iteration: int, remedy: str) -> dict[str, Any]:
    """The stored metrics' template: the names orbax lists (an agent's metrics are known
    only by tracing an iteration), each of the run's shape, `(iteration,)` or
    `(batch_size, iteration)`, and of a numeric dtype (`check_stored` refuses the rest)."""
    shape = (iteration,) if batch_size is None else (batch_size, iteration)
    numeric = lambda d: d if d.kind in "biuf" else np.dtype(np.float32)  # noqa: E731
    return {k: jax.ShapeDtypeStruct(shape, numeric(d)) for k, (_, d) in stored_arrays(directory, remedy).items()}
