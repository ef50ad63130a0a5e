"""The integrity of what checkpoints and saves store: CRC-32 records of arrays and of a
meta record, what orbax stored checked before it is read (names, shapes and dtypes from
orbax's metadata alone, against a template: a file that claims other arrays allocates
nothing), the cleanup of a failed orbax write, and `CheckpointError`, the one-line error of
a checkpoint that cannot be written or read. A run's checkpoints (`eqxrl.runs`), a PBT
run's population (`eqxrl.pbt`) and saves (`eqxrl.save`) are all checked this way."""

import json
import pathlib
import shutil
import zlib
from typing import Any

import jax
import numpy as np

from ..core import one_line
from ._files import MAX_JSON_BYTES, disk_remedy, read_text_bounded

__all__ = ["CheckpointError", "check_stored", "checkpoint_write_error", "crc32_of", "meta_crc32", "read_meta", "remove_temporary", "stored_arrays"]


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


def crc32_of(arrays: dict[str, Any]) -> str:
    """A CRC-32 (hex) of named arrays: names, dtypes, shapes and bytes."""
    crc = 0
    for name in sorted(arrays):
        x = np.ascontiguousarray(arrays[name])
        crc = zlib.crc32(f"{name}:{x.dtype.str}:{x.shape}".encode(), crc)
        crc = zlib.crc32(x.view(np.uint8).reshape(-1) if x.size else b"", crc)
    return f"{crc:08x}"


def remove_temporary(directory: pathlib.Path) -> None:
    """Remove what a failed orbax write left in `directory`: its temporary directories
    (`<step>.orbax-checkpoint-tmp-*`), by process 0 of a multi-host run. Symbolic links
    are never followed (nor is `directory` itself, if it is one)."""
    if jax.process_index() == 0 and directory.is_dir() and not directory.is_symlink():
        for p in directory.iterdir():
            if ".orbax-checkpoint-tmp" in p.name and not p.is_symlink():
                shutil.rmtree(p, ignore_errors=True)


def checkpoint_write_error(path: pathlib.Path, error: BaseException, kept: str, resume: str) -> CheckpointError:
    """The one-line error of a checkpoint (a run's or a PBT generation's) that could not be
    written at `path`: the reason, what is `kept`, the fix where the errno names one
    (`disk_remedy`), and the `resume` command that continues."""
    reason = getattr(error, "strerror", None) or one_line(error)[:200]
    fix = disk_remedy(error)  # (advice to free space or fix permissions only where that is the cause)
    then = f"{fix[0].upper()}{fix[1:]}, then continue" if fix else "Continue"
    return CheckpointError(f"could not write the checkpoint {path}: {reason}; {kept}. {then} with `{resume}`")


def meta_crc32(meta: dict[str, Any]) -> str:
    """A CRC-32 of a checkpoint's meta record itself (every field but `meta_crc32`), so
    that a flipped bit in the JSON cannot pass for another value."""
    body = json.dumps({k: v for k, v in meta.items() if k != "meta_crc32"}, sort_keys=True)
    return f"{zlib.crc32(body.encode()):08x}"


def read_meta(path: pathlib.Path, counter: str, remedy: str) -> dict[str, Any]:
    """The JSON meta record (`meta/metadata`, `meta_crc32` among its fields) of the checkpoint
    at `path` (a run's and a PBT run's alike), checked: it parses, holds the int `counter`
    (`"iteration"`, `"generation"`), and matches its own CRC-32.

    Raises `CheckpointError` naming `path` and `remedy` (what to do, such as deleting it to
    resume from the checkpoint before it) when it does not.
    """
    try:
        meta = json.loads(read_text_bounded(path / "meta" / "metadata"))
    except (OSError, ValueError) as e:  # (too large, not UTF-8, not JSON)
        raise CheckpointError(f"{path} is damaged ({one_line(e)[:200]}): {remedy}") from None
    if not isinstance(meta, dict) or not isinstance(meta.get(counter), int):
        raise CheckpointError(f"{path} is damaged (its meta record is not an eqxrl checkpoint's): {remedy}")
    if meta.get("meta_crc32") != meta_crc32(meta):
        raise CheckpointError(f"{path} is damaged (its meta record does not match its CRC-32): {remedy}")
    return meta
