"""PBT across devices (4 forced CPU devices) and hosts (two processes with jax.distributed).

Each configuration runs `pbt_devices_worker.py` in fresh subprocesses, because the
device count (XLA_FLAGS) must be set before jax is imported.
"""

import os
import pathlib
import shutil
import socket
import subprocess
import sys

import numpy as np
import pytest

WORKER = pathlib.Path(__file__).parents[1] / "pbt_devices_worker.py"


def _env(devices: int) -> dict[str, str]:
    # Every process here (one device, sharded, two hosts, resumed) inherits the test run's
    # compile settings (unoptimised, conftest.py): the same numbers in each, up to float
    # reduction order (`_assert_same_run`).
    env = dict(os.environ, XLA_FLAGS=f"{os.environ.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count={devices}")
    env["JAX_PLATFORMS"] = "cpu"
    # The worker imports the eqxrl of this checkout (not whichever one the venv installed).
    env["PYTHONPATH"] = os.pathsep.join([str(WORKER.parent.parent), *filter(None, [env.get("PYTHONPATH")])])
    return env


def _run(mode: str, out: pathlib.Path, devices: int, *extra: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, str(WORKER), mode, str(out), *extra],
        env=_env(devices),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _wait(proc: subprocess.Popen, timeout: float = 600) -> None:
    output, _ = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, output[-3000:]


def _params(result: dict) -> list[np.ndarray]:
    return [result[k] for k in sorted(result) if k.startswith("p") and k[1:].isdigit()]


def _assert_same_run(a: dict, b: dict) -> None:
    np.testing.assert_array_equal(a["parent"], b["parent"])
    np.testing.assert_allclose(a["fitness"], b["fitness"], rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(a["lr"], b["lr"], rtol=1e-6)
    for x, y in zip(_params(a), _params(b), strict=True):
        np.testing.assert_allclose(x, y, rtol=1e-4, atol=1e-5)  # float reduction order may differ


@pytest.mark.slow
def test_population_sharded_over_four_devices_and_over_two_processes_agree_with_one_device(tmp_path):
    """(One test, so that the one-device reference runs once: a module fixture would run it on
    each xdist worker that the two halves went to.)"""
    # One process on 4 devices, the one-device run (shard=False) then the sharded one: one start-up.
    both = _run("single+sharded", tmp_path / "single.npz", 4)
    # Meanwhile, two processes (2 devices each) with jax.distributed.
    with socket.socket() as s:
        s.bind(("localhost", 0))
        port = s.getsockname()[1]
    out = tmp_path / "multihost.npz"
    procs = [_run("multihost", out, 2, str(i), "2", str(port)) for i in range(2)]
    _wait(both)
    single, sharded = dict(np.load(tmp_path / "single.npz")), dict(np.load(tmp_path / "sharded.npz"))
    assert int(sharded["devices"]) == 4
    np.testing.assert_array_equal(sharded["shard_devices"], [4])  # every population leaf spans 4 devices
    assert list(sharded["specs"]) == ["P('population',)"]
    np.testing.assert_array_equal(single["shard_devices"], [1])
    _assert_same_run(sharded, single)

    for p in procs:
        _wait(p)
    multi = dict(np.load(out))
    assert int(multi["processes"]) == 2 and int(multi["devices"]) == 4
    np.testing.assert_array_equal(multi["shard_devices"], [4])
    _assert_same_run(multi, single)

    # Its run directory: orbax wrote each process's shards (no gather to process 0),
    # the newest two generations kept.
    run_dir = tmp_path / "multihost-run"
    generations = run_dir / "population"
    assert sorted(p.name for p in generations.iterdir()) == ["2", "3"]
    for g in ("2", "3"):
        assert (generations / g / "state" / "ocdbt.process_0").is_dir()
        assert (generations / g / "state" / "ocdbt.process_1").is_dir()
    # Resume from generation 2 (as if killed while writing 3) in one process on 4
    # devices: the 2-process checkpoint is read back with this layout, and the run
    # ends as the uninterrupted one did.
    shutil.rmtree(generations / "3")
    out = tmp_path / "resumed.npz"
    _wait(_run("resume", out, 4, str(run_dir)))
    resumed = dict(np.load(out))
    np.testing.assert_array_equal(resumed["shard_devices"], [4])
    _assert_same_run(resumed, multi)
    np.testing.assert_array_equal(resumed["fitness"], multi["fitness"])
