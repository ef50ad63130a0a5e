"""Training states on disk (`state.eqx`): saved with PRNG keys as key data and a
CRC-32 of the file's bytes (recorded in `config.json`), loaded after checking that
CRC, against the shapes and dtypes the agent's `init` gives, leaf by leaf before
each is read."""

import contextlib
import pathlib
import zlib
from typing import Any

import equinox as eqx
import jax
import numpy as np
from jaxtyping import PyTree

from ..agents import Batch
from ..core import is_key, keys_as_data, one_line
from ._config import config_mismatch, diverged_record, load_config, versioned_refusal
from ._files import CHECKPOINTS, CONFIG, STATE, PathLike

__all__ = ["STATE_RECORD", "deserialise_state", "load_state", "save_state", "state_array_template", "template_state", "unflatten_state", "verify_state_file"]

STATE_RECORD = "state_file"
"""The key of `config.json` that records `state.eqx`'s size and CRC-32: `{"bytes": N, "crc32": "1a2b3c4d"}`."""


class _Summing:
    """A write-only file that passes bytes on to `f` and keeps their count and CRC-32."""

    def __init__(self, f: Any):
        self.f, self.bytes, self.crc = f, 0, 0

    def write(self, data: Any) -> int:
        view = memoryview(data).cast("B")
        self.crc = zlib.crc32(view, self.crc)
        self.bytes += view.nbytes
        return self.f.write(view)


def save_state(path: PathLike, state: PyTree) -> dict[str, Any]:
    """Save a training state with `eqx.tree_serialise_leaves` (PRNG keys as their key data).

    **Arguments:** the file `path` and the `state` (one run's, or a batch's).

    **Returns:** the file's record, `{"bytes": N, "crc32": "..."}` (a CRC-32 of every
    byte written), which `save_run` stores in `config.json` under `"state_file"` and
    `load_state` checks before reading the file.
    """
    with open(pathlib.Path(path), "wb") as f:
        out = _Summing(f)
        eqx.tree_serialise_leaves(out, keys_as_data(state))
    return {"bytes": out.bytes, "crc32": f"{out.crc:08x}"}


def verify_state_file(path: pathlib.Path, record: Any, remedy: str) -> None:
    """Check `state.eqx` against its record (size first, then the CRC-32 of its bytes,
    read in blocks). Raises `ValueError`, one line naming `path` and `remedy`, when it
    does not match or the record is not one."""
    if not isinstance(record, dict) or not isinstance(record.get("bytes"), int) or not isinstance(record.get("crc32"), str):
        raise ValueError(f"{path}: its record in {CONFIG} ({STATE_RECORD!r}) is damaged, got {record!r}; {remedy}")
    size = path.stat().st_size
    if size != record["bytes"]:
        raise ValueError(f"{path} is damaged: it holds {size:,} bytes, {CONFIG} records {record['bytes']:,}; {remedy}")
    crc = 0
    with open(path, "rb") as f:
        while block := f.read(2**20):
            crc = zlib.crc32(block, crc)
    if f"{crc:08x}" != record["crc32"]:
        raise ValueError(f"{path} is damaged: its bytes do not match the CRC-32 recorded in {CONFIG}; {remedy}")


def template_state(agent: Any, num_seeds: int = 1) -> PyTree:
    """The shape of `agent`'s training state, with no arrays allocated.

    **Arguments:** the `agent` (or a `Stacked` population: one row per member) and
    `num_seeds`; more than one seed adds a leading axis.

    **Returns:** `eqx.filter_eval_shape` of `agent.init` (vmapped over seeds or members).
    """
    return _batch(agent, num_seeds).template_state()


def _batch(agent: Any, num_seeds: int) -> Batch:
    """The batch of a run directory's state: `num_seeds == 1` is one run (no leading axis)."""
    return Batch.of(agent, None if num_seeds == 1 or isinstance(agent, Batch) else num_seeds)


def load_state(run_dir: PathLike, agent: Any, num_seeds: int | None = None) -> PyTree:
    """Load the final training state of a run directory.

    **Arguments:**

    - `run_dir`: a directory written by `save_run` (or `eqxrl train`).
    - `agent`: the agent the state belongs to (e.g. from `load_agent`).
    - `num_seeds`: the number of seeds (default: `seeds` in `config.json`).

    **Returns:** the state, with a leading seed axis when there are several seeds.
    Raises `ValueError` when `state.eqx` is missing or does not match `agent`.
    """
    run_dir = pathlib.Path(run_dir)
    config = load_config(run_dir)
    if num_seeds is None:
        num_seeds = config["seeds"]
    saved = config.get("members", [config["agent_config"]])
    mismatch = config_mismatch(config["agent"], saved, agent, "the run")
    if mismatch is not None:
        raise ValueError(f"{str(run_dir)!r} does not hold a state of the agent given: {mismatch}")
    path = run_dir / STATE
    has_checkpoints = (run_dir / CHECKPOINTS).is_dir()
    record = diverged_record(config)
    if record is not None:
        step = record.get("last_finite_checkpoint")
        then = (
            f"load its last checkpoint with finite parameters: load_run(run_dir, checkpoint={step})" if step is not None
            else "no checkpoint with finite parameters was written before it"
        )  # fmt: skip
        raise ValueError(f"{str(run_dir)!r} diverged after iteration {record.get('iteration')} and has no final state; {then}")
    if not path.is_file():
        hint = " (the run did not finish: continue it with `eqxrl train --resume RUN_DIR`)" if has_checkpoints else ""
        raise ValueError(f"{str(run_dir)!r} has no {STATE}{hint}")
    remedy = (
        "load a checkpoint instead (`eqxrl evaluate RUN_DIR --checkpoint last`, or load_run(run_dir, checkpoint='last'))"
        if has_checkpoints else "the run's final state is lost: train it again (`eqxrl train --config RUN_DIR/config.json`)"
    )  # fmt: skip
    # A run directory written before eqxrl recorded the CRC-32 has none to check: its file is
    # still read against the agent's shapes and dtypes, as every state.eqx is.
    if STATE_RECORD in config:
        verify_state_file(path, config[STATE_RECORD], remedy)
    with versioned_refusal(config):
        return deserialise_state(path, path, agent, num_seeds)


def _key_data_template(agent: Any, num_seeds: int) -> tuple[Batch, PyTree, PyTree]:
    """The batch, the state's template, and the template with PRNG keys as their key data
    (what `save_state` and `state_arrays` write)."""
    batch = _batch(agent, num_seeds)
    template = batch.template_state()
    return batch, template, jax.tree.map(lambda x: jax.eval_shape(jax.random.key_data, x) if is_key(x) else x, template)


def state_array_template(agent: Any, num_seeds: int) -> tuple[dict[str, jax.ShapeDtypeStruct], Batch]:
    """The array leaves of the state's template as `state_arrays` names them (position,
    PRNG keys as key data), and the batch (its `name`, and its `size` when `batched`).

    **Returns:** `({"00000": ShapeDtypeStruct, ...}, batch)`.
    """
    batch, _, like = _key_data_template(agent, num_seeds)
    leaves = [x for x in jax.tree.leaves(like) if hasattr(x, "shape")]
    return {f"{i:05d}": jax.ShapeDtypeStruct(x.shape, x.dtype) for i, x in enumerate(leaves)}, batch


def _wrap_keys(path: Any, template: PyTree, data: PyTree) -> PyTree:
    """`data` with the key data at the template's PRNG-key leaves wrapped as keys; a
    `ValueError` naming `path` when a key's type is not the agent's."""

    def unwrap(t: Any, x: Any) -> Any:
        if not is_key(t):
            return x
        key = jax.random.wrap_key_data(x)
        if key.dtype != t.dtype:
            raise ValueError(f"{path}: PRNG key of type {key.dtype} does not match the agent's {t.dtype}")
        return key

    return jax.tree.map(unwrap, template, data)


class _Mismatch(ValueError):
    """A leaf of a state file that is not what the template expects."""


_HEADERS = {(1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0}


def _read_leaf(f: Any, x: Any) -> Any:
    """One leaf of `eqx.tree_serialise_leaves`'s format (a `.npy` record) for the template
    leaf `x`: the header's shape and dtype are checked against `x` before any array is
    allocated, and the array is read from exactly the bytes it takes."""
    if not isinstance(x, (jax.ShapeDtypeStruct, jax.Array, np.ndarray, np.generic, bool, int, float, complex)):
        return x  # (static: not in the file)
    try:
        version = np.lib.format.read_magic(f)
        shape, fortran, dtype = _HEADERS[version](f)
    except (ValueError, KeyError, EOFError) as e:
        raise _Mismatch(f"a leaf's header is not a NumPy array's ({one_line(e)[:120]})") from None
    want_shape = tuple(np.shape(x))
    want_dtype = x.dtype if hasattr(x, "dtype") else np.asarray(x).dtype
    scalar = not hasattr(x, "dtype")  # a Python number leaf: its dtype is the one jnp.save chose
    if tuple(shape) != want_shape or (dtype != want_dtype and not scalar) or (fortran and len(shape) > 1):
        raise _Mismatch(f"an array is {dtype}{list(shape)} where {want_dtype}{list(want_shape)} was expected")
    size = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    data = f.read(size)
    if len(data) != size:
        raise _Mismatch(f"the file ends inside an array ({len(data):,} of its {size:,} bytes)")
    array = np.frombuffer(data, dtype).reshape(shape)
    if scalar:
        return type(x)(array.item())
    return jax.numpy.asarray(array)


def deserialise_state(source: Any, path: Any, agent: Any, num_seeds: int) -> PyTree:
    """Read a state written by `save_state` (from a path or a file object `source`) for
    `agent` and `num_seeds`; a `ValueError` naming `path` when it does not match.

    Each leaf's shape and dtype are checked against the agent's template before the
    leaf is read, so a file that claims other arrays allocates nothing; a file longer
    than the template's arrays is refused too.
    """
    batch, template, like = _key_data_template(agent, num_seeds)
    owner = f"{path} does not match {batch.name} with {num_seeds} seed(s)"
    with (open(source, "rb") if isinstance(source, (str, pathlib.Path)) else contextlib.nullcontext(source)) as f:
        try:
            data = eqx.tree_deserialise_leaves(f, like, filter_spec=_read_leaf)
        except Exception as e:  # equinox wraps a leaf's error in its own, naming the leaf's path
            cause = e
            while cause is not None and not isinstance(cause, _Mismatch):
                cause = cause.__cause__
            raise ValueError(f"{owner}: {one_line(cause if cause is not None else e)}") from None
        if f.read(1):
            raise ValueError(f"{owner}: the file holds more than the agent's arrays")
    return _wrap_keys(path, template, data)


def unflatten_state(leaves: list[Any], path: Any, agent: Any, num_seeds: int) -> PyTree:
    """The state of `agent` (and `num_seeds`) from its array leaves in `jax.tree.leaves`
    order, PRNG keys given as key data; a `ValueError` naming `path` when they do not fit."""
    batch, template, like = _key_data_template(agent, num_seeds)
    flat, treedef = jax.tree.flatten(like)
    slots = [i for i, x in enumerate(flat) if hasattr(x, "shape")]  # array leaves (the rest is static)
    if len(slots) != len(leaves):
        raise ValueError(f"{path} does not match {batch.name} with {num_seeds} seed(s): {len(leaves)} arrays, expected {len(slots)}")
    for i, got in zip(slots, leaves):
        want = flat[i]
        if tuple(want.shape) != tuple(got.shape) or want.dtype != got.dtype:
            raise ValueError(
                f"{path} does not match {batch.name} with {num_seeds} seed(s): an array is "
                f"{got.dtype}{list(got.shape)} where {want.dtype}{list(want.shape)} was expected"
            )
        flat[i] = jax.numpy.asarray(got)
    return _wrap_keys(path, template, jax.tree.unflatten(treedef, flat))
