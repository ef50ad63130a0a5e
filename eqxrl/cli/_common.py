"""What the commands share: run directory names and printing evaluation returns."""

import argparse
import datetime
import pathlib
from typing import Any

from ..core import one_line


def prepare_run_dir(parser: argparse.ArgumentParser, run_dir: str | None, stem: str) -> pathlib.Path:
    """Create the run directory: `run_dir` (which must not exist, or be empty), or by default
    `runs/<stem>-<timestamp>` with a suffix that makes it new.

    A default name is claimed by creating it (`mkdir` without `exist_ok`), so two
    commands started in the same second get two directories. Errors exit through
    `parser.error`.
    """
    if run_dir is None:
        stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
        base = pathlib.Path("runs") / f"{stem.replace('/', '_')}-{stamp}"
        path, i = base, 1
        while True:
            try:
                path.mkdir(parents=True)
                return path
            except FileExistsError:
                path, i = base.with_name(f"{base.name}-{i}"), i + 1
            except OSError as e:
                parser.error(f"the run directory {str(path)!r} cannot be created: {e.strerror or one_line(e)}")
    path = pathlib.Path(run_dir)
    if path.exists() and (not path.is_dir() or any(path.iterdir())):
        parser.error(f"--run-dir {str(path)!r} already exists and is not an empty directory")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        parser.error(f"--run-dir {str(path)!r} cannot be created: {e.strerror or one_line(e)}")
    return path


def print_returns(summary: dict[str, Any], seed: int, deterministic: bool) -> None:
    """Print evaluation returns per seed and their mean (from `eqxrl.runs.summarize_returns`)."""
    policy = "deterministic" if deterministic else "stochastic"
    print(f"  evaluation ({summary['episodes']} episodes per seed, {policy} policy):")
    for i, (mean, std) in enumerate(zip(summary["mean_per_seed"], summary["std_per_seed"])):
        print(f"    seed {seed + i:<6d} {mean:10.2f} ± {std:.2f}")
    n = len(summary["mean_per_seed"])
    print(f"    mean over {n} seed{'s' if n > 1 else ''}: {summary['mean']:.2f}")
