"""Files that a crash cannot tear, and reads that a huge or foreign file cannot exhaust:
what run directories, PBT run directories and saves are written and read with."""

import contextlib
import errno
import json
import math
import os
import pathlib
import secrets
from typing import Any

__all__ = ["MAX_JSON_BYTES", "atomic_write_bytes", "disk_remedy", "is_step_name", "read_text_bounded", "temporary_dir", "write_json"]


def atomic_write_bytes(path: pathlib.Path, data: bytes) -> None:
    """Write `data` to `path` so that a crash leaves either the old file or the new one.

    The bytes go to a temporary file of a unique name beside `path` (two writers never
    share one), are flushed to disk, then renamed over `path`; a failed write (a full
    disk, say) removes its temporary file and leaves `path` as it was. The file gets the
    mode of any file the process creates (0666 less the umask), as the run's other files
    do (`tempfile.mkstemp` would make it 0600). A symbolic link at `path` is replaced,
    never written through.
    """
    path = pathlib.Path(path)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
    while True:
        tmp = path.parent / f".{path.name}.{secrets.token_hex(6)}.tmp"
        try:
            fd = os.open(tmp, flags, 0o666)
            break
        except FileExistsError:
            continue
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


def temporary_dir(path: pathlib.Path) -> pathlib.Path:
    """Create a directory of a unique name beside `path` (`.<name>.<random>.tmp`), to be
    renamed over it when complete. Its mode is that of any directory the process creates
    (0777 less the umask; `tempfile.mkdtemp` would make it 0700)."""
    while True:
        tmp = path.parent / f".{path.name}.{secrets.token_hex(6)}.tmp"
        try:
            tmp.mkdir()
            return tmp
        except FileExistsError:
            continue


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


def is_step_name(name: str) -> bool:
    """Whether `name` is a checkpoint's directory name: ASCII digits only (`str.isdigit`
    also takes `²` and other digits that `int` does not read as a step)."""
    return name.isascii() and name.isdigit()


def _errno(error: BaseException) -> int | None:
    """The errno of `error` or of the OSError it wraps (orbax re-raises some)."""
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if isinstance(error, OSError) and error.errno is not None:
            return error.errno
        error = error.__cause__ or error.__context__
    return None


def disk_remedy(error: BaseException) -> str | None:
    """What to fix for a write that failed with `error`: "free space on its disk" for a
    full disk or quota, "fix the directory's permissions" for a refused write, "make its
    file system writable" for a read-only one; None when it was none of these (then no
    such advice is given)."""
    code = _errno(error)
    if code in (errno.ENOSPC, getattr(errno, "EDQUOT", -1)):
        return "free space on its disk"
    if code in (errno.EACCES, errno.EPERM):
        return "fix the directory's permissions"
    if code == errno.EROFS:
        return "make its file system writable"
    return None


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
