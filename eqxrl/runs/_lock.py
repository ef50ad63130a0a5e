"""One writer per run directory: a lock that the operating system releases when its
process ends, and the refusal of symbolic links below a run directory.

The lock is `fcntl.flock` on `RUN_DIR/.lock`, a file that holds the holder's process
id and host for the message a second writer gets. A killed process leaves the file
but not the lock (the kernel drops it with the process), so a stale lock never
blocks a resume. The holder deletes the file while it still holds the lock, and a
process that acquires the lock checks that the file it locked is still the one at
the path (else it tries again), so a finished run leaves no `.lock` behind and two
writers can never both hold it.

The lock is re-entrant within a thread (`resume_run` calls `train_run`, which calls
`save_run`); another thread of the same process is refused like another process.
Where `fcntl` does not exist (Windows), there is no lock.
"""

import contextlib
import functools
import inspect
import os
import pathlib
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

try:
    import fcntl
except ImportError:  # Windows: no flock
    fcntl = None

__all__ = ["LOCK", "RunDirectoryError", "check_no_links", "holds_run_lock", "run_lock"]

LOCK = ".lock"
"""The lock file of a live run (`RUN_DIR/.lock`); no run file, and absent once the run ends."""


class RunDirectoryError(ValueError):
    """A run directory that cannot be written safely: another process is writing it,
    it already holds a run, or a symbolic link lies below it. One line naming the path."""


_guard = threading.Lock()
_held: dict[tuple[str, int], list[int]] = {}  # (lock path, thread) -> [fd, depth]


def _holder(path: pathlib.Path) -> str:
    """Who holds the lock, from what it wrote in the file (retried briefly: a new holder
    writes its pid just after it takes the lock)."""
    for _ in range(20):
        with contextlib.suppress(OSError):
            fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
            try:
                text = os.read(fd, 256).decode(errors="replace").split()
            finally:
                os.close(fd)
            if len(text) >= 2 and text[0].isascii() and text[0].isdigit():
                return f"process {text[0]} on {text[1]}"
        time.sleep(0.01)
    return "another process (its id is not recorded)"


def check_no_links(run_dir: pathlib.Path, owner: str) -> None:
    """Refuse a symbolic link anywhere below `run_dir` (its own path may hold links):
    eqxrl deletes old checkpoints and replaces files there, and must never reach
    through a link to what lies outside. Raises `RunDirectoryError` naming the link."""
    root = pathlib.Path(os.path.realpath(run_dir))
    stack = [root]
    while stack:
        with contextlib.suppress(FileNotFoundError, NotADirectoryError):
            with os.scandir(stack.pop()) as entries:
                for entry in entries:
                    if entry.is_symlink():
                        target = os.readlink(entry.path)
                        raise RunDirectoryError(
                            f"{owner}: {entry.path} is a symbolic link (to {target}); eqxrl does not follow links below a "
                            f"run directory, where it deletes and replaces files: put the files themselves there"
                        )
                    if entry.is_dir(follow_symlinks=False):
                        stack.append(pathlib.Path(entry.path))


def _acquire(path: pathlib.Path, owner: str, run_dir: Any) -> int:
    """Take the lock at `path`; **returns** its file descriptor."""
    flags = os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    while True:
        try:
            fd = os.open(path, flags, 0o666)  # the umask decides the mode, as for every run file
        except OSError as e:
            if path.is_symlink():
                raise RunDirectoryError(f"{owner}: {path} is a symbolic link; eqxrl does not follow links below a run directory") from None
            raise e
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise RunDirectoryError(
                f"{owner}: {str(run_dir)!r} is in use by {_holder(path)}, which is writing it: wait for it to end, or stop it"
            ) from None
        except BaseException:
            os.close(fd)
            raise
        # The file we locked must still be the one at the path: a holder that just ended
        # deleted it, and another process may since have created and locked a new one.
        try:
            same = os.path.samestat(os.fstat(fd), os.stat(path, follow_symlinks=False))
        except FileNotFoundError:
            same = False
        if same:
            try:
                os.ftruncate(fd, 0)
                os.write(fd, f"{os.getpid()} {socket.gethostname()}\n".encode())
            except BaseException:
                os.close(fd)
                raise
            return fd
        os.close(fd)


def _is_writer_process() -> bool:
    """Whether this process takes run-directory locks: in a multi-host run, only process 0
    (the others write their shards into the directory process 0 holds)."""
    import jax

    return jax.process_count() == 1 or jax.process_index() == 0


@contextlib.contextmanager
def run_lock(run_dir: Any, owner: str, *, create: bool = True, check_links: bool = True) -> Iterator[pathlib.Path]:
    """Hold the lock of the run directory `run_dir` while the block runs.

    **Arguments:** the `run_dir`; the `owner` that errors name (`"train_run(run_dir)"`,
    `"--run-dir"`); `create`: create a missing `run_dir` (else a missing one is not
    locked: the block reports it); `check_links`: also refuse symbolic links below it
    (see `check_no_links`).

    Raises `RunDirectoryError` (one line naming the holder's process id and host) when
    another process or thread holds it. Re-entrant within a thread.

    **Yields:** the run directory's resolved path (resolved once: a link in its own
    path, such as `runs -> /scratch/runs`, is followed).
    """
    path = pathlib.Path(run_dir)
    if create:
        path.mkdir(parents=True, exist_ok=True)
    root = pathlib.Path(os.path.realpath(path))
    if fcntl is None or not path.is_dir() or not _is_writer_process():
        yield root
        return
    lock = root / LOCK
    key = (str(lock), threading.get_ident())
    with _guard:
        entry = _held.get(key)
        if entry is not None:
            entry[1] += 1
    if entry is not None:  # this thread holds it already
        try:
            yield root
        finally:
            with _guard:
                entry[1] -= 1
        return
    fd = _acquire(lock, owner, run_dir)
    try:
        if check_links:
            check_no_links(root, owner)
        with _guard:
            _held[key] = [fd, 1]
        try:
            yield root
        finally:
            with _guard:
                del _held[key]
    finally:
        # Deleted while still held (see the module docstring), then released.
        with contextlib.suppress(OSError):
            os.unlink(lock)
        os.close(fd)


def holds_run_lock(owner: str, create: bool = True) -> Callable:
    """Decorate a function that writes the run directory of its `run_dir` argument, so
    that it holds the lock (`run_lock(run_dir, owner, create=create)`) while it runs;
    `run_dir=None` takes none."""

    def decorate(fn: Callable) -> Callable:
        signature = inspect.signature(fn)

        @functools.wraps(fn)
        def locked(*args, **kwargs):
            run_dir = signature.bind_partial(*args, **kwargs).arguments.get("run_dir")
            if run_dir is None:
                return fn(*args, **kwargs)
            with run_lock(run_dir, owner, create=create):
                return fn(*args, **kwargs)

        return locked

    return decorate
