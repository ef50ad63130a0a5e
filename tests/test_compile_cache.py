"""The CLI's persistent compilation cache: on by default in the user's cache home, switchable
off with `--no-compile-cache` or `EQXRL_COMPILE_CACHE=off`; a second run of a command loads its
programs (no new cache entries) and gives the same numbers."""

import os
import pathlib
import subprocess
import sys

import pytest

from eqxrl.cli._common import COMPILE_CACHE_ENV, default_compile_cache, use_compile_cache

TINY = [
    "--total-steps", "1024", "--num-envs", "2", "--rollout-length", "64",
    "--num-minibatches", "2", "--hidden-sizes", "16", "--eval-episodes", "2", "--quiet",
]  # fmt: skip


def _train(run_dir: pathlib.Path, cache: pathlib.Path, *extra: str, env: dict | None = None) -> subprocess.CompletedProcess:
    # (The subprocess compiles unoptimised, as every test process does (conftest.py): small helper
    # programs then take about the 0.2 s above which the CLI writes them, so which of them are
    # written can change from run to run under load; the test checks the first run's entries.)
    env = dict(os.environ, **{COMPILE_CACHE_ENV: str(cache)}, **(env or {}))
    out = subprocess.run(
        [sys.executable, "-m", "eqxrl", "train", "ppo", "--run-dir", str(run_dir), *TINY, *extra],
        env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    return out


def _entries(cache: pathlib.Path) -> dict[str, int]:
    """Each entry's name and modification time (ns)."""
    return {p.name: p.stat().st_mtime_ns for p in cache.iterdir()} if cache.exists() else {}


@pytest.mark.slow
def test_second_run_loads_its_programs_from_the_cache(tmp_path):
    cache = tmp_path / "cache"
    _train(tmp_path / "a", cache)
    first = _entries(cache)
    assert any(name.startswith("jit__flat_chunk") for name in first), sorted(first)
    _train(tmp_path / "b", cache)
    second = _entries(cache)
    # Every program of the first run came from the cache: its entry is there, not written again.
    # (A small helper program that compiled under the CLI's 0.2 s threshold in the first run may
    # cross it in the second under load and be written then: new names are allowed, rewrites not.)
    assert {name: second.get(name) for name in first} == first
    metrics = [(tmp_path / d / "metrics.csv").read_text() for d in ("a", "b")]
    assert metrics[0] == metrics[1]
    # Switched off by the flag: nothing is written. (The test run's own cache, which JAX reads from
    # the environment whatever the flag says, is the first run's here: the programs are loaded, not
    # compiled a third time.)
    off = tmp_path / "off"
    _train(tmp_path / "c", off, "--no-compile-cache", env={"JAX_COMPILATION_CACHE_DIR": str(cache)})
    assert _entries(off) == {}


def test_cache_directory_and_switches(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_compile_cache() == tmp_path / "xdg" / "eqxrl" / "jax"
    for off in ("off", "OFF", "0", "false"):
        monkeypatch.setenv(COMPILE_CACHE_ENV, off)
        assert use_compile_cache() is None
    monkeypatch.setenv(COMPILE_CACHE_ENV, str(tmp_path / "c"))
    assert use_compile_cache(disabled=True) is None
    assert not (tmp_path / "c").exists()
    # A path that cannot be a directory (a file is in the way): the run goes on without a cache.
    (tmp_path / "file").write_text("")
    monkeypatch.setenv(COMPILE_CACHE_ENV, str(tmp_path / "file" / "cache"))
    assert use_compile_cache() is None
