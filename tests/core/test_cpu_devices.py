"""One CPU device per available core (eqxrl.core._devices): the core count from the affinity and
the cgroup's quota, the count chosen at `import eqxrl` unless the user chose one, the warning when
JAX's backend started first, and the switches (`EQXRL_CPU_DEVICES`, `--devices N`).

The choice happens before the backend starts, so each case runs `import eqxrl` in a subprocess."""

import os
import re
import subprocess
import sys

import pytest

from eqxrl.core import CPU_DEVICES_ENV, available_cores, configure_cpu_devices
from eqxrl.core._devices import cpu_devices_from_env  # (private: the core count from a given environment (cgroup files), not this machine's)
from typecheck import no_runtime_typecheck

AFFINITY = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


def _cgroup_v2(tmp_path, cpu_max: str | None, own: str | None = None, parent: str | None = None):
    """A cgroup v2 tree under tmp_path (the process in /job/step) and its /proc/self/cgroup."""
    root = tmp_path / "cgroup"
    (root / "job" / "step").mkdir(parents=True)
    for directory, text in ((root, cpu_max), (root / "job", parent), (root / "job" / "step", own)):
        if text is not None:
            (directory / "cpu.max").write_text(text + "\n")
    proc = tmp_path / "proc_cgroup"
    proc.write_text("0::/job/step\n")
    return root, proc


def test_cores_are_the_affinity_without_a_quota(tmp_path):
    root, proc = _cgroup_v2(tmp_path, "max 100000")
    assert available_cores(root, proc) == AFFINITY


def test_a_cgroup_v2_quota_caps_the_cores_rounded_down(tmp_path):
    root, proc = _cgroup_v2(tmp_path, None, own="150000 100000")  # 1.5 CPUs: 1 device
    assert available_cores(root, proc) == 1
    root, proc = _cgroup_v2(tmp_path / "b", "max 100000", parent="50000 100000")  # an ancestor's limit applies
    assert available_cores(root, proc) == 1
    root, proc = _cgroup_v2(tmp_path / "c", None, own=f"{100000 * (AFFINITY + 4)} 100000")  # a quota above the affinity
    assert available_cores(root, proc) == AFFINITY


def test_a_cgroup_v1_quota_caps_the_cores(tmp_path):
    root = tmp_path / "cgroup"
    cpu = root / "cpu,cpuacct" / "docker" / "abc"
    cpu.mkdir(parents=True)
    (cpu / "cpu.cfs_quota_us").write_text("100000\n")
    (cpu / "cpu.cfs_period_us").write_text("100000\n")
    proc = tmp_path / "proc_cgroup"
    proc.write_text("4:memory:/docker/abc\n3:cpu,cpuacct:/docker/abc\n")
    assert available_cores(root, proc) == 1
    (cpu / "cpu.cfs_quota_us").write_text("-1\n")  # no quota
    assert available_cores(root, proc) == AFFINITY


def test_unreadable_cgroup_files_leave_the_affinity(tmp_path):
    assert available_cores(tmp_path / "none", tmp_path / "none") == AFFINITY
    root, proc = _cgroup_v2(tmp_path, "garbage")
    assert available_cores(root, proc) == AFFINITY


@pytest.mark.parametrize("value, expected", [(None, None), ("auto", None), (" AUTO ", None), ("", None), ("3", 3)])
def test_the_environment_variable_is_read(value, expected):
    assert cpu_devices_from_env(value) == expected


@pytest.mark.parametrize("count", [0, -1, 1.5, True, "2"])
def test_a_bad_count_is_named(count):
    # (refused before anything touches JAX's configuration)
    with no_runtime_typecheck(), pytest.raises(ValueError, match=rf"^--devices must be a positive int, got {re.escape(repr(count))}$"):
        configure_cpu_devices(count, owner="--devices")
    with no_runtime_typecheck(), pytest.raises(ValueError, match=r"^EQXRL_CPU_DEVICES must be a positive int, got 0$"):
        configure_cpu_devices(0)


@pytest.mark.parametrize("value", ["0", "-2", "two", "1.5"])
def test_a_bad_environment_variable_is_named(value):
    with pytest.raises(ValueError, match=rf"^EQXRL_CPU_DEVICES must be a positive int or 'auto', got '{value}'$"):
        cpu_devices_from_env(value)


def _devices_after_import(env: dict, before: str = "", after: str = "") -> subprocess.CompletedProcess:
    code = f"{before}\nimport eqxrl, jax\n{after}\nprint(jax.device_count())"
    base = {k: v for k, v in os.environ.items() if k != CPU_DEVICES_ENV}
    # (The test run's XLA_FLAGS, minus any forced device count, and the same jax settings.)
    base["XLA_FLAGS"] = " ".join(f for f in base.get("XLA_FLAGS", "").split() if "device_count" not in f)
    return subprocess.run([sys.executable, "-c", code], env={**base, **env}, capture_output=True, text=True, timeout=300)


@pytest.mark.slow  # (over 2 s in the fast tier: tests/tiers.py)
def test_import_chooses_one_device_per_core_unless_the_user_chose():
    cases = [
        ({}, AFFINITY),  # (this machine has no CPU quota)
        ({CPU_DEVICES_ENV: "3"}, 3),
        ({CPU_DEVICES_ENV: "auto"}, AFFINITY),
        ({"XLA_FLAGS": "--xla_force_host_platform_device_count=3"}, 3),  # the user's flag stands
        ({"XLA_FLAGS": "--xla_force_host_platform_device_count=3", CPU_DEVICES_ENV: "1"}, 1),  # the explicit switch wins
    ]
    for env, expected in cases:
        out = _devices_after_import(env)
        assert out.returncode == 0 and out.stdout.split()[-1] == str(expected), (env, out.stdout, out.stderr[-2000:])
        assert "UserWarning" not in out.stderr, out.stderr
    chosen = _devices_after_import({}, before="import jax; jax.config.update('jax_num_cpu_devices', 3)")
    assert chosen.stdout.split()[-1] == "3", chosen.stderr[-2000:]


@pytest.mark.slow  # (over 2 s in the fast tier: tests/tiers.py)
def test_a_backend_started_before_import_gives_one_warning_line():
    out = _devices_after_import({CPU_DEVICES_ENV: "2"}, before="import jax; jax.numpy.zeros(1)")
    assert out.returncode == 0 and out.stdout.split()[-1] == "1", out.stderr[-2000:]
    warning = [line for line in out.stderr.splitlines() if "UserWarning" in line]
    assert len(warning) == 1 and "JAX's backend started before eqxrl chose 2 CPU devices" in warning[0], out.stderr
    assert "running on 1" in warning[0]


@pytest.mark.slow  # (over 2 s in the fast tier: tests/tiers.py)
def test_the_devices_flag_sets_the_count_and_refuses_a_bad_one(tmp_path):
    bad = subprocess.run([sys.executable, "-m", "eqxrl", "train", "--devices", "0"], capture_output=True, text=True, timeout=300)
    assert bad.returncode == 2
    assert bad.stderr.strip().splitlines()[-1].endswith("argument --devices: must be a positive int (CPU devices), got '0'")
    env = {k: v for k, v in os.environ.items() if k != CPU_DEVICES_ENV}

    def devices_seen(argv: list[str]) -> subprocess.CompletedProcess:
        """`eqxrl.cli.main(argv)` with the train command replaced by a print of the device count."""
        probe = (
            "import sys, jax\n"
            "from eqxrl.cli import _main as m\n"
            "m.train_command = lambda args, argv: print('devices', jax.device_count()) or 0\n"
            f"sys.exit(m.main({argv!r}))\n"
        )
        return subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=300, env=env)

    out = devices_seen(["train", "--devices", "3", "--total-steps", "8"])
    assert out.returncode == 0 and "devices 3" in out.stdout, out.stderr[-2000:]
    # Without the flag: one device for one seed (a single run is slower on several), one per core for a batch.
    for argv, expected in ((["train", "--total-steps", "8"], 1), (["train", "--seeds", "4", "--total-steps", "8"], AFFINITY)):
        out = devices_seen(argv)
        assert out.returncode == 0 and f"devices {expected}" in out.stdout, (argv, out.stdout, out.stderr[-2000:])
