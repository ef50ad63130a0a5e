"""Files of a run directory: their names, and writes that a crash cannot tear."""

import contextlib
import json
import os
import pathlib
import tempfile
from typing import Any

__all__ = ["CHECKPOINTS", "CONFIG", "CURVE", "EVAL", "METRICS", "STATE", "TENSORBOARD", "PathLike", "atomic_write_bytes", "write_json"]

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
    """Write `data` as indented JSON to `path`, atomically (see `atomic_write_bytes`)."""
    atomic_write_bytes(path, (json.dumps(data, indent=2, allow_nan=False) + "\n").encode())
