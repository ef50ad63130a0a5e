"""The persistent compilation cache: on by default (at `import eqxrl`, for scripts and the
command line) in the user's cache home, switchable off with `--no-compile-cache` or
`EQXRL_COMPILE_CACHE=off`, and left alone where the user chose a directory; a second run of a
command or a script loads its programs (no new cache entries) and gives the same numbers."""

import os
import pathlib
import subprocess
import sys

import pytest

import jax
from typecheck import no_runtime_typecheck

from eqxrl.core import COMPILE_CACHE_ENV, configure_compile_cache, default_compile_cache

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
    # Switched off by the flag: nothing is written, neither in $EQXRL_COMPILE_CACHE (which replaced
    # the test run's own JAX_COMPILATION_CACHE_DIR at import) nor anywhere else.
    off = tmp_path / "off"
    _train(tmp_path / "c", off, "--no-compile-cache", env={"JAX_COMPILATION_CACHE_DIR": str(cache)})
    assert _entries(off) == {}
    assert _entries(cache) == second


@pytest.fixture
def jax_cache_settings():
    """Restore JAX's cache settings, and eqxrl's record of its own directory, after a test."""
    from eqxrl.core import _compile_cache

    names = ("jax_compilation_cache_dir", "jax_enable_compilation_cache", "jax_persistent_cache_min_compile_time_secs")
    saved = {name: getattr(jax.config, name) for name in names}
    ours = _compile_cache._ours
    yield
    for name, value in saved.items():
        jax.config.update(name, value)
    _compile_cache._ours = ours


def test_cache_directory_and_switches(tmp_path, monkeypatch, jax_cache_settings):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_compile_cache() == tmp_path / "xdg" / "eqxrl" / "jax"
    jax.config.update("jax_compilation_cache_dir", None)
    for off in ("off", "OFF", "0", "false"):
        monkeypatch.setenv(COMPILE_CACHE_ENV, off)
        assert configure_compile_cache() is None
        assert jax.config.jax_compilation_cache_dir is None
    # On by default, in the user's cache home, writing programs that compile in over 0.2 s...
    monkeypatch.delenv(COMPILE_CACHE_ENV)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 1.0)
    assert configure_compile_cache() == tmp_path / "xdg" / "eqxrl" / "jax"
    assert jax.config.jax_compilation_cache_dir == str(tmp_path / "xdg" / "eqxrl" / "jax")
    assert jax.config.jax_persistent_cache_min_compile_time_secs == 0.2
    # ...and off again by the command line's --no-compile-cache.
    assert configure_compile_cache(False) is None
    assert jax.config.jax_compilation_cache_dir is None
    # In $EQXRL_COMPILE_CACHE; a threshold the user changed stays.
    monkeypatch.setenv(COMPILE_CACHE_ENV, str(tmp_path / "c"))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 3.0)
    assert configure_compile_cache() == tmp_path / "c" and (tmp_path / "c").is_dir()
    assert jax.config.jax_persistent_cache_min_compile_time_secs == 3.0
    # A directory the user chose is theirs: eqxrl's default neither replaces it nor switches it
    # off; $EQXRL_COMPILE_CACHE, named for eqxrl, does replace it.
    jax.config.update("jax_compilation_cache_dir", str(tmp_path / "mine"))
    assert configure_compile_cache() == tmp_path / "c"
    jax.config.update("jax_compilation_cache_dir", str(tmp_path / "mine"))
    monkeypatch.delenv(COMPILE_CACHE_ENV)
    assert configure_compile_cache() is None and configure_compile_cache(False) is None
    assert jax.config.jax_compilation_cache_dir == str(tmp_path / "mine")
    # A cache the user switched off stays off, unless eqxrl is asked explicitly.
    jax.config.update("jax_compilation_cache_dir", None)
    jax.config.update("jax_enable_compilation_cache", False)
    assert configure_compile_cache() is None
    monkeypatch.setenv(COMPILE_CACHE_ENV, "off")
    assert configure_compile_cache(True) == default_compile_cache()
    assert jax.config.jax_enable_compilation_cache
    # A path that cannot be a directory (a file is in the way): the run goes on without a cache.
    configure_compile_cache(False)
    (tmp_path / "file").write_text("")
    monkeypatch.setenv(COMPILE_CACHE_ENV, str(tmp_path / "file" / "cache"))
    assert configure_compile_cache() is None
    assert jax.config.jax_compilation_cache_dir is None


def test_configure_compile_cache_names_a_bad_argument(jax_cache_settings):
    with no_runtime_typecheck(), pytest.raises(
        ValueError, match=r"configure_compile_cache\(enabled\) must be True, False or None, got 'off'"
    ):
        configure_compile_cache("off")


SCRIPT = """
import eqxrl
import jax
agent = eqxrl.agents.PPO("CartPole-v1", num_envs=2, rollout_length=64, num_minibatches=2, hidden_sizes=(16,))
state, metrics = eqxrl.train(agent, jax.random.key(0), 1024, progress=False)
print(float(metrics["episode_return"][-1]), float(metrics["loss"][-1]))
"""


@pytest.mark.slow
def test_a_script_run_again_loads_its_programs_from_the_cache(tmp_path):
    """The cache is on for Python users too: `import eqxrl` switches it on, no flag needed."""
    cache = tmp_path / "cache"
    env = dict(os.environ, **{COMPILE_CACHE_ENV: str(cache)})
    env.pop("JAX_COMPILATION_CACHE_DIR", None)  # (the test run's own, which a user does not have)
    run = lambda: subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=600)  # noqa: E731
    first_out = run()
    assert first_out.returncode == 0, first_out.stderr[-3000:]
    first = _entries(cache)
    assert any(name.startswith("jit__flat_chunk") for name in first), sorted(first)
    second_out = run()
    assert second_out.returncode == 0, second_out.stderr[-3000:]
    assert {name: _entries(cache).get(name) for name in first} == first
    assert first_out.stdout == second_out.stdout
