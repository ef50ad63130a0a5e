"""eqxrl.store's file writes: atomic, with unique temporary names, nothing left behind on failure."""

import os

import pytest

from eqxrl import store


def test_atomic_write_replaces_the_file(tmp_path):
    path = tmp_path / "config.json"
    store.atomic_write_bytes(path, b"one")
    store.atomic_write_bytes(path, b"two")
    assert path.read_bytes() == b"two" and sorted(p.name for p in tmp_path.iterdir()) == ["config.json"]
    store.write_json(tmp_path / "x.json", {"a": 1})
    assert (tmp_path / "x.json").read_text() == '{\n  "a": 1\n}\n'


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path, monkeypatch):
    path = tmp_path / "checkpoint.npz"
    store.atomic_write_bytes(path, b"old")

    def disk_full(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", disk_full)
    with pytest.raises(OSError, match="No space left on device"):
        store.atomic_write_bytes(path, b"new")
    monkeypatch.undo()
    assert path.read_bytes() == b"old" and [p.name for p in tmp_path.iterdir()] == ["checkpoint.npz"]


def test_two_writers_use_two_temporary_files(tmp_path, monkeypatch):
    seen = []
    real = os.replace

    def record(src, dst):
        seen.append(os.path.basename(src))
        real(src, dst)

    monkeypatch.setattr(os, "replace", record)
    store.atomic_write_bytes(tmp_path / "a", b"1")
    store.atomic_write_bytes(tmp_path / "a", b"2")
    assert len(set(seen)) == 2 and all(name.startswith(".a.") and name.endswith(".tmp") for name in seen)


def test_default_run_directories_are_unique_under_concurrent_starts(tmp_path, monkeypatch):
    import argparse
    import importlib
    from concurrent.futures import ThreadPoolExecutor

    common = importlib.import_module("eqxrl.cli._common")  # (private: the command line's run-directory checks)
    monkeypatch.chdir(tmp_path)
    parser = argparse.ArgumentParser()
    with ThreadPoolExecutor(8) as pool:  # eight commands started in the same second
        paths = list(pool.map(lambda _: common.prepare_run_dir(parser, None, "ppo-CartPole-v1"), range(8)))
    assert len({str(p) for p in paths}) == 8 and all(p.is_dir() and not any(p.iterdir()) for p in paths)
