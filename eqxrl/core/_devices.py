"""One CPU device per available core, chosen when eqxrl is imported.

JAX exposes one CPU device unless told otherwise, and a batch of seeds, a sweep or a
PBT population is then one `vmap` on it that keeps the other cores only partly busy.
`eqxrl.train`, `sweep` and PBT shard a batch's members over the devices they find, so
eqxrl asks for one CPU device per core this process may use: its CPU affinity (a
`taskset`, a SLURM job's cpuset) and its cgroup's CPU quota (a container's
`--cpus`), not the host's count.

The count is set with `jax_num_cpu_devices` before JAX's backend starts. It is left
alone when the user chose one already (`--xla_force_host_platform_device_count` in
`XLA_FLAGS`, or `jax.config.update("jax_num_cpu_devices", n)`), and it cannot be set
once the backend is up (anything that made an array before `import eqxrl`): eqxrl
then warns in one line and runs on the devices there are. `EQXRL_CPU_DEVICES` (a
positive int, or `auto`) and the command line's `--devices N` choose the count.

One run (not a batch) is not split over devices, and tends to run slower on several (about
12% for PPO CartPole on 2 cores): `eqxrl train` with one seed goes back to one device
(`one_device_for_one_run`); a Python program that trains one run can set
`EQXRL_CPU_DEVICES=1`.
"""

import math
import os
import pathlib
import warnings

import jax

__all__ = ["CPU_DEVICES_ENV", "available_cores", "configure_cpu_devices", "cpu_devices_from_env", "one_device_for_one_run"]

CPU_DEVICES_ENV = "EQXRL_CPU_DEVICES"
"""The environment variable that chooses eqxrl's CPU device count: a positive int, or `auto`
(one per available core, the default)."""

_FORCE_FLAG = "--xla_force_host_platform_device_count"
_automatic: int | None = None  # the count eqxrl chose by itself (None: none, or the user's)


def _cgroup_quota(root: pathlib.Path, proc_cgroup: pathlib.Path) -> float | None:
    """The CPU quota (in cores) of this process's cgroup and its ancestors, or None."""
    try:
        lines = proc_cgroup.read_text().splitlines()
    except OSError:
        lines = []
    quotas = []
    for line in lines:
        hierarchy, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if hierarchy == "0" and controllers == "":  # cgroup v2: <root>/<path>/cpu.max = "max 100000" or "200000 100000"
            bases, read = [root], lambda d: _v2_quota(d / "cpu.max")
        elif "cpu" in controllers.split(","):  # cgroup v1: cpu.cfs_quota_us (-1: none) / cpu.cfs_period_us
            bases = [root / name for name in ("cpu", "cpu,cpuacct", "cpuacct,cpu")]
            read = _v1_quota
        else:
            continue
        parts = pathlib.PurePosixPath(path).parts[1:]
        for base in bases:
            # The process's own cgroup and every ancestor (a limit on any of them applies);
            # inside a container's cgroup namespace the path is "/" and the root is its own.
            for depth in range(len(parts), -1, -1):
                if (quota := read(base.joinpath(*parts[:depth]))) is not None:
                    quotas.append(quota)
    if not quotas and not lines:  # no /proc/self/cgroup: the root's files, if any
        quotas = [q for q in (_v2_quota(root / "cpu.max"), _v1_quota(root / "cpu")) if q is not None]
    return min(quotas) if quotas else None


def _v2_quota(path: pathlib.Path) -> float | None:
    try:
        quota, period = path.read_text().split()[:2]
        return None if quota == "max" else int(quota) / int(period)
    except (OSError, ValueError):
        return None


def _v1_quota(directory: pathlib.Path) -> float | None:
    try:
        quota = int((directory / "cpu.cfs_quota_us").read_text())
        period = int((directory / "cpu.cfs_period_us").read_text())
    except (OSError, ValueError):
        return None
    return None if quota <= 0 or period <= 0 else quota / period


def available_cores(root: str | os.PathLike = "/sys/fs/cgroup", proc_cgroup: str | os.PathLike = "/proc/self/cgroup") -> int:
    """The cores this process may use: its CPU affinity, capped by its cgroup's CPU quota
    (rounded down, at least 1). `root` and `proc_cgroup` are where the cgroup files are
    read (tests point them elsewhere)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # (macOS, Windows: no affinity API)
        cores = os.cpu_count() or 1
    quota = _cgroup_quota(pathlib.Path(root), pathlib.Path(proc_cgroup))
    if quota is not None:
        cores = min(cores, math.floor(quota))
    return max(1, cores)


def cpu_devices_from_env(value: str | None) -> int | None:
    """`EQXRL_CPU_DEVICES` read: None (unset, or `auto`) or a positive int; anything else
    is a one-line `ValueError` naming the variable."""
    if value is None or value.strip().lower() in ("", "auto"):
        return None
    try:
        count = int(value)
    except ValueError:
        count = 0
    if count < 1:
        raise ValueError(f"{CPU_DEVICES_ENV} must be a positive int or 'auto', got {value!r}")
    return count


def _backend_started() -> bool:
    from jax._src import xla_bridge  # (no public test for it; jax 0.10)

    return bool(getattr(xla_bridge, "_backends", None))


def _user_chose() -> str | None:
    """How the user already chose a CPU device count, or None."""
    if _FORCE_FLAG in os.environ.get("XLA_FLAGS", ""):
        return f"{_FORCE_FLAG} in XLA_FLAGS"
    if jax.config.jax_num_cpu_devices != -1:
        return "jax_num_cpu_devices"
    return None


def configure_cpu_devices(count: int | None = None, *, owner: str = CPU_DEVICES_ENV) -> int | None:
    """Ask JAX for `count` CPU devices (None: `EQXRL_CPU_DEVICES`, else one per available
    core) before its backend starts.

    Called when eqxrl is imported, and by the command line's `--devices N`. An explicit
    `count` (or the environment variable) is always applied; the automatic count leaves a
    count the user chose through `XLA_FLAGS` or `jax.config` as it is. When the backend is
    already up the count cannot change: a one-line warning says so (unless it is already
    right) and nothing changes.

    **Returns:** the count set, or None when nothing was set.
    """
    if count is not None and (isinstance(count, bool) or not isinstance(count, int) or count < 1):
        raise ValueError(f"{owner} must be a positive int, got {count!r}")
    explicit = count if count is not None else cpu_devices_from_env(os.environ.get(CPU_DEVICES_ENV))
    if explicit is None and _user_chose() is not None:
        return None
    wanted = explicit if explicit is not None else available_cores()
    if _backend_started():
        cpus = len(jax.devices("cpu")) if "cpu" in {d.platform for d in jax.devices()} else None
        if cpus is not None and cpus != wanted:
            warnings.warn(
                f"eqxrl: JAX's backend started before eqxrl chose {wanted} CPU devices"
                f"{' (one per core)' if explicit is None else ''}; running on "
                f"{cpus} (import eqxrl before making arrays, or set {CPU_DEVICES_ENV}/XLA_FLAGS first)",
                stacklevel=3,
            )
        return None
    if explicit is None and wanted == 1 and jax.config.jax_num_cpu_devices == -1:
        return None  # (one core: JAX's own default)
    global _automatic
    jax.config.update("jax_num_cpu_devices", wanted)
    _automatic = wanted if explicit is None else None
    return wanted


def one_device_for_one_run() -> bool:
    """Go back to one CPU device for a process that trains one run (not a batch), when the
    count is eqxrl's automatic choice and JAX's backend has not started.

    A single run is not split over devices, and on several it tends to run slower: PPO
    CartPole, 1 seed, on 2 cores: a median of 106k env steps per second with 2 CPU devices
    against 120k with 1 (8 runs each, the spread wide: 70-149k) and about 14% more CPU
    time (`benchmarks/results/cpu_devices.md`). The command line calls this for
    `eqxrl train` with one seed.

    **Returns:** whether the count changed.
    """
    global _automatic
    if _automatic is None or _backend_started() or jax.config.jax_num_cpu_devices != _automatic:
        return False
    jax.config.update("jax_num_cpu_devices", 1)
    _automatic = None
    return True
