"""JAX's persistent compilation cache, on by default for eqxrl's users (Python and command line).

A program compiled once is written to disk and loaded by the next process that compiles
the same program (same code, shapes, flags, jax version), so running a script or a command
again skips most of its compile time (`benchmarks/results/compile_cache.md`).
"""

import os
import pathlib

import jax

COMPILE_CACHE_ENV = "EQXRL_COMPILE_CACHE"
"""Environment variable: the compilation-cache directory, or `off` (read at `import eqxrl`)."""

MIN_COMPILE_SECONDS = 0.2
"""Programs that compile faster than this are not written (JAX's own default is 1 s)."""

_OFF = ("off", "0", "false", "no", "none")
_JAX_MIN_DEFAULT = 1.0
_ours: str | None = None  # the directory eqxrl set, while it is the one in use


def default_compile_cache() -> pathlib.Path:
    """`$XDG_CACHE_HOME/eqxrl/jax`, or `~/.cache/eqxrl/jax`."""
    home = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return pathlib.Path(home) / "eqxrl" / "jax"


def configure_compile_cache(enabled: bool | None = None) -> pathlib.Path | None:
    """Switch JAX's persistent compilation cache on (or off) for this process.

    Called when eqxrl is imported, with `enabled=None`: the cache is on in the directory
    `$EQXRL_COMPILE_CACHE` names (always), or else in `default_compile_cache()` unless the
    user already chose a directory (`jax.config.update("jax_compilation_cache_dir", ...)`
    or `JAX_COMPILATION_CACHE_DIR`) or switched the cache off
    (`jax_enable_compilation_cache=False`): eqxrl then leaves JAX's settings as they are.
    `EQXRL_COMPILE_CACHE=off` (or `0`, `false`, `no`, `none`) leaves them too.
    A directory that cannot be created leaves the cache off (nothing fails).
    When eqxrl sets the directory it also writes programs that compile in over
    `MIN_COMPILE_SECONDS` (unless `jax_persistent_cache_min_compile_time_secs` was changed).

    `enabled=False` (the command line's `--no-compile-cache`) switches off a cache that
    eqxrl switched on; call it before the first compile (JAX decides once per process).
    `enabled=True` switches it on even when `EQXRL_COMPILE_CACHE=off`.

    **Returns:** the directory eqxrl set, or None.
    """
    global _ours
    if enabled is not None and not isinstance(enabled, bool):
        raise ValueError(f"configure_compile_cache(enabled) must be True, False or None, got {enabled!r}")
    if enabled is False:
        if _ours is not None and jax.config.jax_compilation_cache_dir == _ours:
            jax.config.update("jax_compilation_cache_dir", None)
        _ours = None
        return None
    setting = os.environ.get(COMPILE_CACHE_ENV, "").strip()
    off = setting.lower() in _OFF
    if enabled is None and off:
        return None
    current = jax.config.jax_compilation_cache_dir
    chosen = (current is not None and current != _ours) or not jax.config.jax_enable_compilation_cache
    if enabled is None and not setting and chosen:
        return None  # (the user's own directory, or the user switched the cache off)
    path = pathlib.Path(setting).expanduser() if setting and not off else default_compile_cache()
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError:
        return None
    jax.config.update("jax_enable_compilation_cache", True)
    jax.config.update("jax_compilation_cache_dir", str(path))
    if jax.config.jax_persistent_cache_min_compile_time_secs == _JAX_MIN_DEFAULT:
        jax.config.update("jax_persistent_cache_min_compile_time_secs", MIN_COMPILE_SECONDS)
    _ours = str(path)
    return path
