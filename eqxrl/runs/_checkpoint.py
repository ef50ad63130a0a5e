"""`checkpoint.npz`: where an unfinished run stands, written atomically after a chunk,
read back to resume it exactly."""

import io
import json
import pathlib
import warnings
from typing import Any

import equinox as eqx
import numpy as np

from ..agents import agent_name
from ..core import __version__, keys_as_data, one_line
from ..loop import Checkpoint
from ._config import config_mismatch, load_config, member_configs
from ._files import CHECKPOINT, PathLike, atomic_write_bytes
from ._state import deserialise_state

__all__ = ["load_checkpoint", "save_checkpoint"]


def save_checkpoint(run_dir: PathLike, agent: Any, checkpoint: Checkpoint) -> None:
    """Write `checkpoint.npz` atomically: the state, the metrics so far, where the run
    stands, the agent's config and the eqxrl version.

    **Arguments:** the `run_dir`, the `agent` being trained, and a `Checkpoint`
    from `eqxrl.train(..., callback=...)`.
    """
    state_bytes = io.BytesIO()
    eqx.tree_serialise_leaves(state_bytes, keys_as_data(checkpoint.state))
    meta = {
        "iteration": checkpoint.iteration,
        "num_iterations": checkpoint.num_iterations,
        "chunk_iterations": checkpoint.chunk_iterations,
        "agent": agent_name(agent),
        "members": member_configs(agent),
        "eqxrl_version": __version__,
    }
    arrays = {f"metrics/{k}": np.asarray(v) for k, v in checkpoint.metrics.items()}
    buffer = io.BytesIO()
    np.savez(buffer, state=np.frombuffer(state_bytes.getvalue(), np.uint8), meta=np.array(json.dumps(meta)), **arrays)
    atomic_write_bytes(pathlib.Path(run_dir) / CHECKPOINT, buffer.getvalue())


def load_checkpoint(run_dir: PathLike, agent: Any, num_seeds: int | None = None) -> Checkpoint:
    """Read `checkpoint.npz` back for `agent`.

    Raises `ValueError` naming the first mismatched field when the checkpoint was
    written for another configuration; warns when it was written by another eqxrl version.

    **Returns:** a `Checkpoint` for `eqxrl.train(..., resume=...)`.
    """
    run_dir = pathlib.Path(run_dir)
    path = run_dir / CHECKPOINT
    if not path.is_file():
        raise ValueError(f"{str(run_dir)!r} has no {CHECKPOINT} to resume from")
    if num_seeds is None:
        num_seeds = load_config(run_dir)["seeds"]
    try:
        with np.load(path, allow_pickle=False) as data:
            meta = json.loads(str(data["meta"]))
            state_bytes = data["state"].tobytes()
            metrics = {k.split("/", 1)[1]: data[k] for k in data.files if k.startswith("metrics/")}
    except (OSError, ValueError, KeyError, json.JSONDecodeError) as e:
        raise ValueError(f"{path} is not a readable eqxrl checkpoint: {one_line(e)}") from None
    mismatch = config_mismatch(meta["agent"], meta["members"], agent, "the checkpoint")
    if mismatch is not None:
        raise ValueError(f"{path} does not match the agent: {mismatch}")
    if meta["eqxrl_version"] != __version__:
        warnings.warn(f"{path} was written by eqxrl {meta['eqxrl_version']}, this is eqxrl {__version__}", stacklevel=2)
    state = deserialise_state(io.BytesIO(state_bytes), path, agent, num_seeds)
    return Checkpoint(state, meta["iteration"], meta["num_iterations"], meta["chunk_iterations"], metrics)
