"""A PBT run's checkpoints: `RUN_DIR/population/<generation>/`, written by orbax-checkpoint.

Each holds `state/` (the whole population: every member's hyperparameters,
parameters, optimizer and target networks, replay buffer, statistics, PRNG keys
as key data, PBT's key and the generation counter) as `jax.Array`s with their
shardings (orbax `StandardSave`), so each process of a multi-host run writes
the shards it holds (`state/ocdbt.process_<i>/`) and nothing is gathered;
`records/` (the generations' records, small NumPy arrays); `meta/` (a JSON
record with a CRC-32 of every array, of the records and of itself). orbax writes
into a temporary directory and renames it when complete, so a crash leaves the
earlier generations intact; the newest `KEEP` are kept. The write is
asynchronous (`PopulationWriter`): the next generation trains meanwhile.
Run directories of eqxrl before these checkpoints (`population.eqx`) resume no more.
"""

import contextlib
import logging
import os
import pathlib
import warnings
import zlib
from collections.abc import Mapping, Sequence
from typing import Any

import equinox as eqx
import jax
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from ..agents import agent_name
from ..core import __version__, is_key, keys_as_data, one_line, version_note
from ..store import CheckpointError, check_stored, checkpoint_write_error, crc32_of, is_step_name, meta_crc32, read_meta, remove_temporary
from ._population import Population

__all__ = ["CHECKPOINTS", "KEEP", "PopulationWriter", "population_generations", "load_population", "load_records", "save_population"]

CHECKPOINTS = "population"
KEEP = 2
"""Generations kept: the newest, and the one before it in case the newest is damaged."""


def _record_template(pbt: Any, generations: int) -> dict[str, np.ndarray]:
    size = pbt.population_size
    out = {"fitness": np.zeros((generations, size), np.float32), "train_return": np.zeros((generations, size), np.float32)}
    out["source"] = np.zeros((generations, size), np.int32)
    for name in pbt.space:
        out[f"hp/{name}"] = np.zeros((generations, size), np.float32)
    if getattr(pbt, "eval_every", None):  # PBT(eval_every=) (on main since the eval-train merge)
        out["eval_return"] = np.zeros((generations, size), np.float32)
    evaluator, describe = pbt.evaluator(), pbt.episode_descriptor()
    if evaluator is not None:
        out["episode_returns"] = np.zeros((generations, size, evaluator.num_episodes), np.float32)
    if describe is not None:
        out["descriptor"] = np.zeros((generations, size, describe.size), np.float32)
    return out


class _OrbaxErrors(logging.Filter):
    """Drops orbax's own error logs (tracebacks from its write threads): every failure
    of a write or a read reaches the caller as one `CheckpointError` instead."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno < logging.ERROR or f"{os.sep}orbax{os.sep}" not in record.pathname


_ORBAX_ERRORS = _OrbaxErrors()


def _orbax():
    import orbax.checkpoint as ocp  # imported when a checkpoint is written or read: it is heavy

    logger = logging.getLogger("absl")  # orbax logs through absl's logger
    if _ORBAX_ERRORS not in logger.filters:
        logger.addFilter(_ORBAX_ERRORS)
    return ocp


def _manager(directory: pathlib.Path, read_only: bool = False) -> Any:
    ocp = _orbax()
    options = ocp.CheckpointManagerOptions(
        max_to_keep=KEEP,
        enable_async_checkpointing=not read_only,  # the next generation trains while this one is written
        cleanup_tmp_directories=not read_only,
        read_only=read_only,
        create=not read_only,
    )
    return ocp.CheckpointManager(directory.absolute(), options=options)


def _named(population: Population) -> dict[str, Any]:
    """The population's array leaves (PRNG keys as key data), named by position."""
    arrays = eqx.filter((population.agent, population.state, population.key, population.generation), eqx.is_array)
    return {f"{i:05d}": x for i, x in enumerate(jax.tree.leaves(keys_as_data(arrays)))}


def _layout(arrays: Any) -> list[str]:
    """Where each array leaf sits (`[0].buffer.alpha`: the agent's, `[1]...`: the state's), in the
    order `_named` numbers them: a checkpoint records it, and one whose agent kept a number
    elsewhere (an older eqxrl's flat `per_alpha`) is refused instead of read into the wrong leaf."""
    is_leaf = lambda x: isinstance(x, jax.ShapeDtypeStruct) or eqx.is_array(x)  # noqa: E731
    return [jax.tree_util.keystr(p) for p, _ in jax.tree_util.tree_flatten_with_path(arrays, is_leaf=is_leaf)[0]]


def _row_crcs(arrays: Mapping[str, Any]) -> dict[str, str]:
    """A CRC-32 per array, computed shard by shard without gathering anything.

    Each process takes the CRC-32 of every row (index along the member axis; a
    scalar is one row) of the shards it holds (`replica_id == 0`: each row is held
    by one device of one process), the processes add their vectors up (one small
    allgather), and an array's CRC-32 is that of its name, dtype, shape and row
    CRCs. It does not depend on how the rows are laid out over devices or
    processes, so a checkpoint written by 2 processes is checked by 1.
    """
    names = sorted(arrays)
    rows = [max(1, arrays[n].shape[0] if arrays[n].ndim else 1) for n in names]
    offsets = np.concatenate([[0], np.cumsum(rows)]).astype(np.int64)
    local = np.zeros(int(offsets[-1]), np.int64)
    for n, start in zip(names, offsets[:-1]):
        x = arrays[n]
        shards = [s for s in x.addressable_shards if s.replica_id == 0] if isinstance(x, jax.Array) else None
        if shards is None:  # a NumPy array (restored on one process): all rows here
            shards = [_Shard(np.asarray(x), (slice(None),) * np.ndim(x))]
        for s in shards:
            data = np.ascontiguousarray(s.data)
            if x.ndim == 0:
                local[start] = zlib.crc32(data.tobytes())
                continue
            first = s.index[0].indices(x.shape[0])[0]
            if data.shape[1:] != x.shape[1:]:  # sharded along another axis: not PBT's layout
                raise ValueError(f"array {n} is sharded along an axis other than the member axis: {x.sharding}")
            for r in range(data.shape[0]):
                local[start + first + r] = zlib.crc32(data[r].tobytes())
    if jax.process_count() > 1:
        from jax.experimental import multihost_utils

        local = np.asarray(multihost_utils.process_allgather(local)).reshape(jax.process_count(), -1).sum(axis=0)
    out = {}
    for n, start, stop in zip(names, offsets[:-1], offsets[1:]):
        x = arrays[n]
        crc = zlib.crc32(f"{n}:{np.dtype(x.dtype).str}:{tuple(x.shape)}".encode())
        out[n] = f"{zlib.crc32(local[start:stop].astype('>u4').tobytes(), crc):08x}"
    return out


class _Shard:
    def __init__(self, data, index):
        self.data, self.index = data, index


def _stacked_records(pbt: Any, records: Sequence[Mapping[str, np.ndarray]]) -> dict[str, np.ndarray]:
    template = _record_template(pbt, len(records))
    for g, r in enumerate(records):
        for k in template:
            template[k][g] = np.asarray(r[k])
    return template


def _remedy(path: pathlib.Path) -> str:
    return f"delete {path} to resume from the generation before it (`eqxrl pbt --resume RUN_DIR`)"


def _write_error(path: pathlib.Path, error: BaseException, previous: int | None) -> CheckpointError:
    kept = f"the checkpoint of generation {previous} is intact" if previous is not None else "no earlier checkpoint exists"
    return checkpoint_write_error(path, error, kept, f"eqxrl pbt --resume {path.parent.parent}")


def _save(manager: Any, generation: int, args: Any) -> None:
    """Start orbax's write of one generation (returns once the arrays are copied to the host)."""
    manager.save(generation, args=args, force=True)


class PopulationWriter:
    """Writes a PBT run's population to `RUN_DIR/population/<generation>/` with orbax.

    Every process calls `submit` at every generation (orbax needs all of them) and
    writes the shards it holds; the write goes on in orbax's background threads
    while the next generation trains, and `submit` first waits for the one before.
    A failed write raises `CheckpointError` (naming the path, one line) at the next
    `submit` or at `close`, after removing orbax's temporary directory; the earlier
    generations are kept. **Arguments:** the `run_dir`, the `pbt`, the run's `total_steps`.
    """

    def __init__(self, run_dir: Any, pbt: Any, total_steps: int):
        self.directory = pathlib.Path(run_dir) / CHECKPOINTS
        self.pbt, self.total_steps = pbt, total_steps
        try:
            self.manager = _manager(self.directory)
        except OSError as e:
            raise _write_error(self.directory / "0", e, None) from None
        self.last_written: int | None = self.manager.latest_step()
        self._pending: int | None = None

    def _settle(self) -> None:
        if self._pending is None:
            return
        generation, self._pending = self._pending, None
        try:
            self.manager.wait_until_finished()
        except BaseException as e:
            remove_temporary(self.directory)
            raise _write_error(self.directory / str(generation), e, self.last_written) from None
        self.last_written = generation

    def submit(self, population: Population, records: Sequence[Mapping[str, np.ndarray]]) -> None:
        """Start writing `population` and the `records` of its generations."""
        self._settle()
        ocp = _orbax()
        generation = len(records)
        arrays = _named(population)
        named = _stacked_records(self.pbt, records)
        # By position: orbax reads "/" and "." in a name as nesting (`hp/critic_optimizer.learning_rate`).
        stacked = {f"{i:03d}": named[k] for i, k in enumerate(sorted(named))}
        meta = {
            "generation": generation,
            "total_steps": int(self.total_steps),
            "population_size": self.pbt.population_size,
            "agent": agent_name(self.pbt.agent),
            "space": list(self.pbt.space),
            "processes": jax.process_count(),
            "eqxrl_version": __version__,
            "state_crc32": _row_crcs(arrays),
            "layout": _layout(eqx.filter((population.agent, population.state, population.key, population.generation), eqx.is_array)),
            "records": sorted(named),
            "records_crc32": crc32_of(stacked),
        }
        meta["meta_crc32"] = meta_crc32(meta)
        args = ocp.args.Composite(
            state=ocp.args.StandardSave(arrays), records=ocp.args.StandardSave(stacked), meta=ocp.args.JsonSave(meta)
        )
        try:
            _save(self.manager, generation, args)
        except BaseException as e:
            with contextlib.suppress(BaseException):
                self.manager.wait_until_finished()
            remove_temporary(self.directory)
            raise _write_error(self.directory / str(generation), e, self.last_written) from None
        self._pending = generation

    def close(self) -> None:
        """Wait for the pending write (raising `CheckpointError` if it failed)."""
        try:
            self._settle()
        finally:
            with contextlib.suppress(Exception):
                self.manager.close()


def population_generations(run_dir: Any) -> list[int]:
    """**Returns:** the generations of a PBT run directory's finished checkpoints, oldest first."""
    directory = pathlib.Path(run_dir) / CHECKPOINTS
    if not directory.is_dir():
        return []
    done = [p for p in directory.iterdir() if is_step_name(p.name) and ((p / "_CHECKPOINT_METADATA").is_file() or (p / "commit_success.txt").is_file())]
    return sorted(int(p.name) for p in done)


def save_population(run_dir: Any, pbt: Any, total_steps: int, population: Population, records: Sequence[Mapping[str, np.ndarray]]) -> pathlib.Path:
    """Write `population` and the generation records to `RUN_DIR/population/<generation>/`
    and wait for it (`PBT.run` writes without waiting). Every process must call it.

    **Returns:** the checkpoint's path.
    """
    writer = PopulationWriter(run_dir, pbt, total_steps)
    try:
        writer.submit(population, records)
    finally:
        writer.close()
    return writer.directory / str(len(records))


def _read_meta(path: pathlib.Path) -> dict[str, Any]:
    return read_meta(path, counter="generation", remedy=_remedy(path))


def _choose(run_dir: Any, generation: int | None) -> pathlib.Path:
    run_dir = pathlib.Path(run_dir)
    done = population_generations(run_dir)
    if not done:
        old = " (it was written by eqxrl before 0.2.x's orbax checkpoints, which resume no more)" if (run_dir / "population.eqx").is_file() else ""
        raise CheckpointError(f"{str(run_dir)!r} has no checkpoint in {CHECKPOINTS}/ to resume from{old}")
    if generation is None:
        generation = done[-1]
    if generation not in done:
        raise CheckpointError(f"{str(run_dir)!r} has no checkpoint of generation {generation}; it has {done}")
    return run_dir / CHECKPOINTS / str(generation)


def _records(path: pathlib.Path, pbt: Any, meta: Mapping[str, Any], restored: Mapping[str, Any]) -> list[dict[str, np.ndarray]]:
    stacked = {k: np.asarray(v) for k, v in restored.items()}
    if crc32_of(stacked) != meta.get("records_crc32"):
        raise CheckpointError(f"{path} is damaged (its generation records do not match their CRC-32): {_remedy(path)}")
    template = _stacked_records(pbt, [])
    names, expected = meta.get("records"), sorted(template)
    # A checkpoint written before PBT kept per-episode returns: they read as NaN.
    older = sorted(k for k in expected if k != "episode_returns")
    if (names != expected and names != older) or names is None or len(names) != len(stacked):
        raise ValueError(f"{path}{version_note(meta)} does not match this PBT configuration: records {names}, expected {expected}")
    named = {k: stacked[f"{i:03d}"] for i, k in enumerate(names)}
    generations = meta["generation"]
    for k in set(expected) - set(names):
        named[k] = np.full((generations, *template[k].shape[1:]), np.nan, template[k].dtype)
    return [{k: v[g] for k, v in named.items()} for g in range(generations)]


def _records_target(path: pathlib.Path, pbt: Any, meta: Mapping[str, Any]) -> dict[str, jax.ShapeDtypeStruct]:
    """The template the generation records are restored through: the names the meta
    record lists (this configuration's, or those before per-episode returns were kept),
    each `(generations, *shape)` of this configuration."""
    template = _stacked_records(pbt, [])
    names, expected = meta.get("records"), sorted(template)
    older = sorted(k for k in expected if k != "episode_returns")
    if names is None or (names != expected and names != older):
        raise ValueError(f"{path}{version_note(meta)} does not match this PBT configuration: records {names}, expected {expected}")
    generations = meta["generation"]
    return {f"{i:03d}": jax.ShapeDtypeStruct((generations, *template[k].shape[1:]), template[k].dtype) for i, k in enumerate(names)}


def _restore(path: pathlib.Path, **items: Any) -> dict[str, Any]:
    """Restore `items` (name: template of `jax.ShapeDtypeStruct`s) of the checkpoint at
    `path`, each checked against what orbax stored before any array is read (names,
    shapes, dtypes: `check_stored`), so a file that claims other arrays allocates nothing."""
    for name, target in items.items():
        check_stored(path / name, target, f"{path} does not match this PBT configuration", _remedy(path))
    ocp = _orbax()
    try:
        reader = ocp.StandardCheckpointer()
        out = {name: reader.restore((path / name).absolute(), target) for name, target in items.items()}
        reader.close()
    except Exception as e:  # orbax and tensorstore raise many kinds for a damaged file
        raise CheckpointError(f"{path} is damaged ({one_line(e)[:200]}): {_remedy(path)}") from None
    return out


def _check_meta(path: pathlib.Path, meta: Mapping[str, Any], pbt: Any, total_steps: int) -> None:
    if meta.get("population_size") != pbt.population_size or meta.get("agent") != agent_name(pbt.agent) or meta.get("space") != list(pbt.space):
        got = {k: meta.get(k) for k in ("agent", "population_size", "space")}
        want = {"agent": agent_name(pbt.agent), "population_size": pbt.population_size, "space": list(pbt.space)}
        raise ValueError(f"{path}{version_note(meta)} does not match this PBT configuration: {got} in the checkpoint, {want} here")
    if meta["generation"] > pbt.num_generations(total_steps):
        raise ValueError(f"{path} is past the run's {pbt.num_generations(total_steps)} generations (total_steps={total_steps})")


def _warn_other_version(path: pathlib.Path, meta: Mapping[str, Any]) -> None:
    """Another eqxrl's checkpoint that fits this configuration is read, with a warning (one that
    does not fit is refused, naming the version: `version_note`)."""
    if meta.get("eqxrl_version") != __version__:
        warnings.warn(f"{path} was written by eqxrl {meta.get('eqxrl_version')}, this is eqxrl {__version__}", stacklevel=3)


def load_records(run_dir: Any, pbt: Any, total_steps: int, generation: int | None = None) -> list[dict[str, np.ndarray]]:
    """**Returns:** the generation records of a checkpoint (the newest by default), without the population."""
    path = _choose(run_dir, generation)
    meta = _read_meta(path)
    _check_meta(path, meta, pbt, total_steps)
    records = _records(path, pbt, meta, _restore(path, records=_records_target(path, pbt, meta))["records"])
    _warn_other_version(path, meta)
    return records


def load_population(run_dir: Any, pbt: Any, total_steps: int, generation: int | None = None) -> tuple[Population, list[dict[str, np.ndarray]]]:
    """Read a checkpoint of a PBT run directory (the newest, or that of `generation`)
    back, laid out by `pbt.sharding()` (every process of a multi-host run reads its
    own shards; every process must call it).

    Raises `CheckpointError` (a `ValueError`, one line naming the path and what to do)
    when the checkpoint is damaged: orbax cannot read it, or an array, the records
    or the meta record do not match their CRC-32.

    **Returns:** the population and the records of its generations.
    """
    path = _choose(run_dir, generation)
    meta = _read_meta(path)
    _check_meta(path, meta, pbt, total_steps)
    template = eqx.filter_eval_shape(pbt.init, jax.random.key(0))
    is_leaf_array = lambda x: isinstance(x, jax.ShapeDtypeStruct) or eqx.is_array(x)  # noqa: E731
    arrays, static = eqx.partition((template.agent, template.state, template.key, template.generation), is_leaf_array)
    leaves, treedef = jax.tree.flatten(arrays)
    sharding = pbt.sharding()
    if sharding is None:
        replicated = jax.sharding.SingleDeviceSharding(jax.devices()[0])
    else:
        replicated = NamedSharding(sharding.mesh, P())
    targets = {}
    for i, t in enumerate(leaves):
        shape = jax.eval_shape(jax.random.key_data, t) if is_key(t) else t
        targets[f"{i:05d}"] = jax.ShapeDtypeStruct(shape.shape, shape.dtype, sharding=sharding if t.ndim and sharding is not None else replicated)
    if sorted(meta.get("state_crc32", {})) != sorted(targets):
        raise ValueError(f"{path}{version_note(meta)} does not match this PBT configuration: {len(meta.get('state_crc32', {}))} arrays in the checkpoint, {len(targets)} here")
    here = _layout(arrays)
    if "layout" not in meta:
        raise ValueError(
            f"{path} was written by eqxrl {meta.get('eqxrl_version')} before population checkpoints recorded where each "
            "array sits, and agents have since moved numbers into modules (per_alpha into the buffer): resume it with that eqxrl"
        )
    if meta["layout"] != here:
        first = next(i for i, (a, b) in enumerate(zip(meta["layout"], here)) if a != b)
        raise ValueError(f"{path}{version_note(meta)} does not match this PBT configuration: array {first} is {meta['layout'][first]} in the checkpoint, {here[first]} here")
    try:
        restored = _restore(path, state=targets, records=_records_target(path, pbt, meta))
    except CheckpointError as e:
        if "shape" in str(e) or "dtype" in str(e):
            raise ValueError(f"{path}{version_note(meta)} does not match this PBT configuration: {one_line(e)}") from None
        raise
    state = restored["state"]
    if _row_crcs(state) != meta["state_crc32"]:
        raise CheckpointError(f"{path} is damaged (its arrays do not match their CRC-32): {_remedy(path)}")
    records = _records(path, pbt, meta, restored["records"])
    _warn_other_version(path, meta)
    keyed = [
        jax.random.wrap_key_data(state[f"{i:05d}"], impl=getattr(t.dtype, "_impl", None)) if is_key(t) else state[f"{i:05d}"]
        for i, t in enumerate(leaves)
    ]
    agent, pstate, key, generation = eqx.combine(jax.tree.unflatten(treedef, keyed), static)
    return Population(agent, pstate, key, generation), records
