"""Files of a run directory: their names, and writes that a crash cannot tear."""

import contextlib
import json
import math
import os
import pathlib
import tempfile
from typing import Any

__all__ = ["CHECKPOINTS", "CONFIG", "CURVE", "EVAL", "METRICS", "STATE", "TENSORBOARD", "MAX_JSON_BYTES", "PathLike", "atomic_write_bytes", "read_text_bounded", "write_json"]

CONFIG = "config.json"
METRICS = "metrics.csv"
STATE = "state.eqx"
CURVE = "learning_curve.png"
EVAL = "eval.json"
CHECKPOINTS = "checkpoints"
TENSORBOARD = "tensorboard"

PathLike = str | os.PathLike


def atomic_write_bytes(path: pathlib.Path, data: bytes) -> None:
    """Write `data` to `path` so that a crash leaves either the old file or the new one.

    The bytes go to a temporary file of a unique name beside `path` (two writers never
    share one), are flushed to disk, then renamed over `path`; a failed write (a full
    disk, say) removes its temporary file and leaves `path` as it was.
    """
    path = pathlib.Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def write_json(path: pathlib.Path, data: Any) -> None:
    """Write `data` as indented JSON to `path`, atomically (see `atomic_write_bytes`).

    A non-finite float (NaN, Inf: a diverged run's returns, say) is written as `null`,
    which every JSON reader accepts (Python's `NaN` literal is not JSON), so the file
    reads back anywhere; NumPy scalars are written as the numbers they hold.
    """
    atomic_write_bytes(path, (json.dumps(_finite_json(data), indent=2, allow_nan=False) + "\n").encode())


def _finite_json(x: Any) -> Any:
    """`x` with every non-finite float as None (and NumPy scalars and arrays as Python values)."""
    if isinstance(x, dict):
        return {k: _finite_json(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_finite_json(v) for v in x]
    if hasattr(x, "tolist") and not isinstance(x, (str, bytes)):  # a NumPy scalar or array
        return _finite_json(x.tolist())
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


MAX_JSON_BYTES = 16 * 2**20
"""The largest metadata file (`config.json`, a checkpoint's meta record, `agent.json`)
a load reads: eqxrl writes kilobytes (a sweep of thousands of members, a few MiB), so
anything larger is not one of its files, and is refused before it is read."""


def read_text_bounded(path: pathlib.Path, limit: int = MAX_JSON_BYTES) -> str:
    """The text of a metadata file, read only if it holds at most `limit` bytes.

    Raises `ValueError` (one line naming `path`) for a larger file, having read at most
    `limit + 1` bytes of it, or for one that is not UTF-8; `OSError` as `open` does.
    """
    path = pathlib.Path(path)
    with open(path, "rb") as f:
        data = f.read(limit + 1)  # (a FIFO or a device has no meaningful size: count what is read)
    if len(data) > limit:
        raise ValueError(f"{path} is larger than {limit:,} bytes, too large for an eqxrl metadata file: it was not read")
    try:
        return data.decode()
    except UnicodeDecodeError as e:
        raise ValueError(f"{path} is not UTF-8 text: {e.reason} at byte {e.start}") from None
