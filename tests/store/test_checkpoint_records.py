"""eqxrl.store's checkpoint integrity: meta records checked against their own CRC-32, and the
cleanup of a failed orbax write."""

import json

import pytest

from eqxrl import store


def test_read_meta_checks_the_record_against_its_own_crc(tmp_path):
    (tmp_path / "meta").mkdir()
    meta = {"iteration": 4, "eval_return": 1.5}
    meta["meta_crc32"] = store.meta_crc32(meta)
    (tmp_path / "meta" / "metadata").write_text(json.dumps(meta))
    remedy = "delete it to resume from the checkpoint before it"
    assert store.read_meta(tmp_path, "iteration", remedy) == meta
    (tmp_path / "meta" / "metadata").write_text(json.dumps({**meta, "eval_return": 2.5}))  # a flipped digit
    with pytest.raises(store.CheckpointError, match=r"is damaged \(its meta record does not match its CRC-32\): delete"):
        store.read_meta(tmp_path, "iteration", remedy)
    with pytest.raises(store.CheckpointError, match=r"is damaged \(its meta record is not an eqxrl checkpoint's\): fix it"):
        store.read_meta(tmp_path, counter="generation", remedy="fix it")


def test_remove_temporary_leaves_finished_checkpoints(tmp_path):
    (tmp_path / "8.orbax-checkpoint-tmp-17").mkdir()
    (tmp_path / "4").mkdir()
    store.remove_temporary(tmp_path)
    store.remove_temporary(tmp_path / "missing")  # nothing to do
    assert [p.name for p in tmp_path.iterdir()] == ["4"]
