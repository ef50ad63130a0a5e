"""Files of a run directory: their names, and writes that a crash cannot tear."""

import json
import os
import pathlib
from typing import Any

__all__ = ["CHECKPOINT", "CONFIG", "CURVE", "EVAL", "METRICS", "STATE", "TENSORBOARD", "PathLike", "atomic_write_bytes", "write_json"]

CONFIG = "config.json"
METRICS = "metrics.csv"
STATE = "state.eqx"
CURVE = "learning_curve.png"
EVAL = "eval.json"
CHECKPOINT = "checkpoint.npz"
TENSORBOARD = "tensorboard"

PathLike = str | os.PathLike


def atomic_write_bytes(path: pathlib.Path, data: bytes) -> None:
    """Write `data` to `path` so that a crash leaves either the old file or the new one."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def write_json(path: pathlib.Path, data: Any) -> None:
    """Write `data` as indented JSON to `path`, atomically (see `atomic_write_bytes`)."""
    atomic_write_bytes(path, (json.dumps(data, indent=2, allow_nan=False) + "\n").encode())
