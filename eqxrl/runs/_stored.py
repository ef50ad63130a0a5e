"""What orbax stored, checked before it is read: the names, shapes and dtypes of a
checkpoint's or a save's arrays from orbax's metadata alone, against a template
(restores go through templates, so a file that claims other arrays allocates
nothing); and `CheckpointError`, the one-line error of a checkpoint that cannot be
written or read."""

import pathlib
from typing import Any

import jax
import numpy as np

from ..core import one_line
from ._files import MAX_JSON_BYTES

__all__ = ["CheckpointError", "check_stored", "metrics_template", "stored_arrays"]


class CheckpointError(ValueError):
    """A checkpoint could not be written or read back (a full disk, a read-only
    directory, a damaged file). The message is one line naming the path and what to do."""


def stored_arrays(directory: pathlib.Path, remedy: str, item: bool = True) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
    """The names, shapes and dtypes of the arrays orbax stored in `directory` (an item of
    a checkpoint or a save), from its metadata alone (no array is read). Raises
    `CheckpointError` naming the checkpoint and the item (`item`; else `directory`
    itself) and `remedy` when the metadata cannot be read or is larger than
    `MAX_JSON_BYTES`."""
    import orbax.checkpoint as ocp  # (heavy: imported when a checkpoint is read)

    try:
        for name in ("_METADATA", "_sharding"):  # (the JSON that orbax reads whole)
            if (directory / name).is_file() and (directory / name).stat().st_size > MAX_JSON_BYTES:
                raise ValueError(f"its {name} is larger than {MAX_JSON_BYTES:,} bytes")
        reader = ocp.StandardCheckpointer()
        try:
            tree = reader.metadata(directory.absolute()).item_metadata.tree
        finally:
            reader.close()
        return {str(k): (tuple(v.shape), np.dtype(v.dtype)) for k, v in tree.items()}
    except Exception as e:  # orbax and tensorstore raise many kinds for a damaged file
        # (named by the checkpoint, as its other damage is, with the item that is damaged)
        where, what = (directory.parent, f"{directory.name}/: ") if item else (directory, "")
        raise CheckpointError(f"{where} is damaged ({what}{one_line(e)[:200]}): {remedy}") from None


def check_stored(directory: pathlib.Path, template: dict[str, Any], owner: str, remedy: str, item: bool = True) -> None:
    """Check the arrays orbax stored in `directory` against `template` (name to
    `jax.ShapeDtypeStruct`) before any is read (`stored_arrays`), so that a file that
    claims other arrays allocates nothing.

    Raises `CheckpointError` as `stored_arrays` does, and `ValueError` ("`owner`: ...",
    one line) naming the first array that differs.
    """
    stored = stored_arrays(directory, remedy, item)
    if sorted(stored) != sorted(template):
        missing, extra = sorted(set(template) - set(stored)), sorted(set(stored) - set(template))
        raise ValueError(
            f"{owner}: {len(stored)} arrays stored in {directory.name}/, {len(template)} expected"
            f" (missing {missing[:3]}, unexpected {extra[:3]})"
        )
    for name in sorted(template):
        want = template[name]
        shape, dtype = stored[name]
        if shape != tuple(want.shape) or dtype != np.dtype(want.dtype):
            raise ValueError(
                f"{owner}: array {name} of {directory.name}/ is stored as {dtype}{list(shape)}, "
                f"{np.dtype(want.dtype)}{list(want.shape)} expected"
            )


def metrics_template(directory: pathlib.Path, batch_size: int | None, iteration: int, remedy: str) -> dict[str, Any]:
    """The stored metrics' template: the names orbax lists (an agent's metrics are known
    only by tracing an iteration), each of the run's shape, `(iteration,)` or
    `(batch_size, iteration)`, and of a numeric dtype (`check_stored` refuses the rest)."""
    shape = (iteration,) if batch_size is None else (batch_size, iteration)
    numeric = lambda d: d if d.kind in "biuf" else np.dtype(np.float32)  # noqa: E731
    return {k: jax.ShapeDtypeStruct(shape, numeric(d)) for k, (_, d) in stored_arrays(directory, remedy).items()}
