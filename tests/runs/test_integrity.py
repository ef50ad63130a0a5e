"""Every file a load reads is checked: `state.eqx` against the CRC-32 that `config.json`
records, leaf by leaf against the agent's template; checkpoints and saves against
their templates before any array is read; metadata read only up to a bound."""

import io
import json
import os
import shutil
import time
import zlib

import jax
import numpy as np
import orbax.checkpoint as ocp
import pytest

import eqxrl
from eqxrl.agents import PPO
from eqxrl.pbt import PBT, LogUniform, Truncation, load_population as load_pbt_checkpoint, load_records
from eqxrl.store import MAX_JSON_BYTES, read_text_bounded
from cli_calls import main_captured as _main

TINY = ["--total-steps", "512", "--num-envs", "2", "--rollout-length", "64", "--num-minibatches", "2",
        "--hidden-sizes", "8", "--eval-episodes", "2", "--checkpoint-every", "256", "--quiet"]  # fmt: skip
HUGE = 64 * 2**30  # a sparse file: reading it whole would take minutes and 64 GiB


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("integrity") / "ppo"
    code, _, err = _main(["train", "ppo", "--run-dir", str(run_dir), *TINY])
    assert code == 0, err
    return run_dir


@pytest.fixture
def run_dir(finished, tmp_path):
    copy = tmp_path / "run"
    shutil.copytree(finished, copy)
    return copy


def _refused(argv, message):
    """The command exits 2 and its last stderr line (the one after argparse's usage) says `message`."""
    code, _, err = _main(argv)
    assert code == 2, err
    line = err.strip().splitlines()[-1]
    assert message in line, line
    return line


def _mean(argv):
    code, out, err = _main(argv)
    assert code == 0, err
    return out.split("mean over 1 seed:")[1].strip()


def _rerecord(run_dir):
    """Record state.eqx's current bytes in config.json, as if eqxrl had written them."""
    data = (run_dir / "state.eqx").read_bytes()
    config = json.loads((run_dir / "config.json").read_text())
    config["state_file"] = {"bytes": len(data), "crc32": f"{zlib.crc32(data):08x}"}
    (run_dir / "config.json").write_text(json.dumps(config))


# ----------------------------------------------------------------------- state.eqx
@pytest.mark.slow
@pytest.mark.parametrize("damage", ["bit flip", "truncated", "appended"])
def test_a_damaged_state_eqx_is_refused_with_one_line(run_dir, damage):
    path = run_dir / "state.eqx"
    data = bytearray(path.read_bytes())
    if damage == "bit flip":
        data[len(data) // 2] ^= 0x10  # inside a weight: loading would evaluate other numbers
        message = "state.eqx is damaged: its bytes do not match the CRC-32 recorded in config.json"
    elif damage == "truncated":
        data = data[:-100]
        message = f"state.eqx is damaged: it holds {len(data):,} bytes, config.json records {len(data) + 100:,}"
    else:
        data += b"\0" * 8
        message = f"state.eqx is damaged: it holds {len(data):,} bytes"
    path.write_bytes(bytes(data))
    line = _refused(["evaluate", str(run_dir)], message)
    assert f"{path} is damaged" in line and "--checkpoint last" in line
    for load in (eqxrl.runs.load_run, eqxrl.runs.load_policy):
        with pytest.raises(ValueError, match="state.eqx is damaged"):
            load(run_dir)
    # The checkpoints carry their own CRCs: the remedy the message gives works.
    assert _mean(["evaluate", str(run_dir), "--checkpoint", "last", "--episodes", "2"])


@pytest.mark.slow
def test_state_eqx_is_read_through_the_template_before_any_allocation(run_dir):
    path = run_dir / "state.eqx"
    data = path.read_bytes()
    stream = io.BytesIO(data)
    np.lib.format.read_magic(stream)
    shape, _, dtype = np.lib.format.read_array_header_1_0(stream)
    header_end = stream.tell()
    # The first leaf's header claims 4 TiB: refused from the header, nothing allocated
    # (the CRC-32 is made to match, so only the template can catch it).
    path.write_bytes(_with_header(data, header_end, dtype, (2**40,)))
    _rerecord(run_dir)
    _refused(["evaluate", str(run_dir)], f"state.eqx does not match PPO with 1 seed(s): an array is {dtype}[1099511627776] where {dtype}{list(shape)} was expected")
    # Another dtype of the same shape: refused too (it was cast silently before).
    other = np.dtype(np.int32) if dtype != np.int32 else np.dtype(np.float32)
    path.write_bytes(_with_header(data, header_end, other, shape))
    _rerecord(run_dir)
    _refused(["evaluate", str(run_dir)], f"an array is {other}{list(shape)} where {dtype}{list(shape)} was expected")
    # More bytes than the agent's arrays take.
    path.write_bytes(data + b"\x93NUMPY")
    _rerecord(run_dir)
    _refused(["evaluate", str(run_dir)], "state.eqx does not match PPO with 1 seed(s): the file holds more than the agent's arrays")


def _with_header(data, header_end, dtype, shape):
    """`data` (a state.eqx) with its first leaf's `.npy` header replaced."""
    out = io.BytesIO()
    np.lib.format.write_array_header_1_0(out, {"descr": np.dtype(dtype).str, "fortran_order": False, "shape": tuple(shape)})
    return out.getvalue() + data[header_end:]


@pytest.mark.slow
def test_a_run_dir_without_the_record_still_loads(run_dir):
    # Run directories of an eqxrl that recorded no CRC-32 (and hand-made ones) load as before.
    before = _mean(["evaluate", str(run_dir), "--episodes", "2"])
    config = json.loads((run_dir / "config.json").read_text())
    assert config["state_file"]["bytes"] == (run_dir / "state.eqx").stat().st_size
    del config["state_file"]
    (run_dir / "config.json").write_text(json.dumps(config))
    assert _mean(["evaluate", str(run_dir), "--episodes", "2"]) == before
    # A damaged record is named, not ignored.
    config["state_file"] = {"bytes": "many"}
    (run_dir / "config.json").write_text(json.dumps(config))
    _refused(["evaluate", str(run_dir)], "state.eqx: its record in config.json ('state_file') is damaged")


# ----------------------------------------------------------------------- restores through templates
def _restave(directory, change):
    """Rewrite the orbax arrays in `directory` with `change(arrays)` applied (the meta record is left alone)."""
    with ocp.StandardCheckpointer() as reader:
        arrays = {k: np.asarray(v) for k, v in reader.restore(directory.absolute()).items()}
    change(arrays)
    shutil.rmtree(directory)
    with ocp.StandardCheckpointer() as writer:
        writer.save(directory.absolute(), arrays)


@pytest.mark.slow
def test_a_checkpoint_array_of_another_shape_is_refused_before_it_is_read(run_dir):
    last = eqxrl.runs.checkpoint_steps(run_dir)[-1]
    agent = eqxrl.runs.load_agent(run_dir)
    template, _ = eqxrl.runs.state_array_template(agent, 1)
    name = next(k for k, v in sorted(template.items()) if len(v.shape) == 2)  # a weight matrix
    want = template[name]
    bigger = (want.shape[0] * 1000, want.shape[1])

    def grow(arrays):
        arrays[name] = np.zeros(bigger, arrays[name].dtype)

    _restave(last["path"] / "state", grow)
    message = (f"{last['path']} does not match PPO with 1 seed(s): array {name} of state/ is stored as "
               f"{want.dtype}{list(bigger)}, {want.dtype}{list(want.shape)} expected")  # fmt: skip
    line = _refused(["evaluate", str(run_dir), "--checkpoint", "last"], message)
    assert line.count(" does not match ") == 1
    with pytest.raises(ValueError, match="is stored as"):
        eqxrl.runs.load_checkpoint(run_dir, agent)
    # The metrics' shape is the run's: (iterations done,).
    _restave(last["path"] / "state", lambda arrays: arrays.update({name: np.zeros(want.shape, want.dtype)}))
    _restave(last["path"] / "history", lambda arrays: arrays.update({k: np.concatenate([v, v]) for k, v in arrays.items()}))
    _refused(["evaluate", str(run_dir), "--checkpoint", "last"], f"{last['path']} does not match the run's metrics: array")


@pytest.mark.slow
def test_a_save_with_another_shape_is_refused_before_it_is_read(run_dir, tmp_path):
    agent, state, _ = eqxrl.runs.load_run(run_dir)
    saved = eqxrl.save(tmp_path / "saved", agent, state)
    again, _ = eqxrl.load(saved)
    assert again == agent

    def grow(arrays):
        arrays["00003"] = np.zeros((10_000, *arrays["00003"].shape), arrays["00003"].dtype)

    _restave(saved / "state", grow)
    with pytest.raises(ValueError, match=r"saved/state does not match PPO with 1 seed\(s\): array 00003 of state/ is stored as") as info:
        eqxrl.load(saved)
    assert "\n" not in str(info.value)


@pytest.mark.slow
def test_a_pbt_checkpoint_is_restored_through_its_templates(tmp_path):
    agent = PPO("CartPole-v1", num_envs=2, rollout_length=16, num_epochs=1, num_minibatches=1, hidden_sizes=(8,))
    pbt = PBT(agent, {"learning_rate": LogUniform(1e-4, 1e-2)}, population_size=2, ready=32, eval_episodes=1,
              max_eval_steps=20, exploit=Truncation(1, 1))  # fmt: skip
    total = pbt.steps_per_generation
    pbt.run(jax.random.key(0), total, progress=False, run_dir=tmp_path)
    assert len(load_records(tmp_path, pbt, total)) == 1
    path = tmp_path / "population" / "1"
    # A record of another shape (episode_returns, the first by name): refused from orbax's metadata.
    _restave(path / "records", lambda arrays: arrays.update({"000": np.zeros((1, 2000), arrays["000"].dtype)}))
    for load in (load_records, load_pbt_checkpoint):
        with pytest.raises(ValueError, match=r"population/1 does not match this PBT configuration: array 000 of records/ is stored as float32\[1, 2000\], float32\[1, 2, 1\] expected"):
            load(tmp_path, pbt, total)


# ----------------------------------------------------------------------- bounded metadata
def _sparse(path):
    with open(path, "wb") as f:
        f.truncate(HUGE)


def test_read_text_bounded_refuses_a_huge_file_without_reading_it(tmp_path):
    _sparse(tmp_path / "big.json")
    t0 = time.perf_counter()
    with pytest.raises(ValueError, match=rf"big.json is larger than {MAX_JSON_BYTES:,} bytes, too large for an eqxrl metadata file: it was not read"):
        read_text_bounded(tmp_path / "big.json")
    assert time.perf_counter() - t0 < 10
    (tmp_path / "small.json").write_bytes(b'{"a": 1}')
    assert read_text_bounded(tmp_path / "small.json") == '{"a": 1}'
    (tmp_path / "latin.json").write_bytes(b'{"a": "\xe9"}')
    with pytest.raises(ValueError, match="latin.json is not UTF-8 text"):
        read_text_bounded(tmp_path / "latin.json")


@pytest.mark.slow
def test_huge_metadata_files_are_refused_with_one_line(run_dir, tmp_path):
    last = eqxrl.runs.checkpoint_steps(run_dir)[-1]["path"]
    meta = last / "meta" / "metadata"
    kept = meta.read_bytes()
    _sparse(meta)
    _refused(["evaluate", str(run_dir), "--checkpoint", "last"], f"{last} is damaged ({meta} is larger than {MAX_JSON_BYTES:,} bytes")
    meta.write_bytes(kept)
    orbax_meta = last / "state" / "_METADATA"
    kept = orbax_meta.read_bytes()
    _sparse(orbax_meta)
    _refused(["evaluate", str(run_dir), "--checkpoint", "last"], f"{last} is damaged (state/: its _METADATA is larger than")
    orbax_meta.write_bytes(kept)
    agent, state, _ = eqxrl.runs.load_run(run_dir)
    saved = eqxrl.save(tmp_path / "saved", agent, state)
    _sparse(saved / "agent.json")
    with pytest.raises(ValueError, match=rf"agent.json is damaged: .*agent.json is larger than {MAX_JSON_BYTES:,} bytes"):
        eqxrl.load(saved)
    _sparse(run_dir / "config.json")
    _refused(["evaluate", str(run_dir)], f"config.json is larger than {MAX_JSON_BYTES:,} bytes")
    with pytest.raises(ValueError, match="is larger than"):
        eqxrl.runs.load_config(run_dir)
    assert os.path.getsize(run_dir / "config.json") == HUGE


def test_huge_config_and_pbt_json_are_refused_before_anything_is_built(tmp_path):
    # The files a user passes or resumes from outside a run's checkpoints: --config FILE and pbt.json.
    _sparse(tmp_path / "config.json")
    _refused(["train", "--config", str(tmp_path / "config.json")], f"config.json is larger than {MAX_JSON_BYTES:,} bytes")
    run_dir = tmp_path / "pbt-run"
    run_dir.mkdir()
    _sparse(run_dir / "pbt.json")
    _refused(["pbt", "--resume", str(run_dir)], f"pbt.json is larger than {MAX_JSON_BYTES:,} bytes")
    with pytest.raises(ValueError, match=f"pbt.json is larger than {MAX_JSON_BYTES:,} bytes"):
        eqxrl.pbt.resume(run_dir)
