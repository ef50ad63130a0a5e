"""The names of a run directory's files."""

import os

__all__ = ["CHECKPOINTS", "CONFIG", "CURVE", "EVAL", "METRICS", "STATE", "TENSORBOARD", "PathLike"]

CONFIG = "config.json"
METRICS = "metrics.csv"
STATE = "state.eqx"
CURVE = "learning_curve.png"
EVAL = "eval.json"
CHECKPOINTS = "checkpoints"
TENSORBOARD = "tensorboard"

PathLike = str | os.PathLike
