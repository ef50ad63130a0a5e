"""Helpers the benchmark scripts share: library versions, the git revision, the core count."""

import os
import subprocess
from pathlib import Path


def _versions() -> str:
    from importlib.metadata import version

    out = []
    for m in ("jax", "jaxlib", "equinox", "optax", "gymnax"):
        try:
            out.append(f"{m} {version(m)}")
        except Exception:  # noqa: BLE001
            pass
    return ", ".join(out)


def _git_rev() -> str:
    root = Path(__file__).resolve().parent.parent
    try:
        rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True, check=True)
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "eqxrl"], cwd=root, capture_output=True, text=True)
    except (OSError, subprocess.CalledProcessError):
        return "unknown commit"
    return f"commit {rev.stdout.strip()}" + (" (eqxrl/ has uncommitted changes)" if dirty.stdout.strip() else "")


def _nproc() -> str:
    try:
        return subprocess.run(["nproc"], capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return str(os.cpu_count())
