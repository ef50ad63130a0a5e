"""What the commands share: run directory names and printing evaluation returns."""

import argparse
import datetime
import pathlib
import shutil
from typing import Any

from ..core import one_line
from ..runs import CHECKPOINTS, CONFIG, LOCK, TENSORBOARD, RunDirectoryError, check_no_links, checkpoint_steps, load_config, run_lock
from ..store import disk_remedy, is_step_name


def add_command_parser(commands: Any, name: str, **kwargs: Any) -> argparse.ArgumentParser:
    """`eqxrl NAME`'s parser (`kwargs` go to `add_parser`), its own `_parser` default: the
    parser a command reports its usage errors with (`args._parser.error`)."""
    parser = commands.add_parser(name, **kwargs)
    parser.set_defaults(_parser=parser)
    return parser


def add_run_dir_command(commands: Any, name: str, **kwargs: Any) -> argparse.ArgumentParser:
    """`add_command_parser` of a command that reads a run directory (evaluate, export, render):
    its first argument is RUN_DIR."""
    parser = add_command_parser(commands, name, **kwargs)
    parser.add_argument("run_dir", metavar="RUN_DIR", help="a directory written by `eqxrl train`")
    return parser


def add_agent_parser(agents: Any, command: str, name: str, **kwargs: Any) -> tuple[argparse.ArgumentParser, Any]:
    """The parser of `eqxrl COMMAND NAME` for one agent (`kwargs` go to `add_parser`; the
    description and epilog are printed as written) and its "run" argument group."""
    parser = agents.add_parser(name, formatter_class=argparse.RawDescriptionHelpFormatter, **kwargs)
    parser.set_defaults(command=command, agent=name, _parser=parser)
    return parser, parser.add_argument_group("run")


def prepare_run_dir(parser: argparse.ArgumentParser, run_dir: str | None, stem: str) -> pathlib.Path:
    """Create the run directory: `run_dir` (which must not exist, or be empty), or by default
    `runs/<stem>-<timestamp>` with a suffix that makes it new.

    A default name is claimed by creating it (`mkdir` without `exist_ok`), so two
    commands started in the same second get two directories. A given directory is
    looked at while holding its lock (`eqxrl.runs` run directory lock): a live run's
    directory is refused (naming its process id), never taken for a stranded one.
    Errors exit through `parser.error`.
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
    if path.is_dir():
        try:
            with run_lock(path, "--run-dir", create=False, check_links=False):
                if stranded(path):
                    check_no_links(path, "--run-dir")  # (what is deleted must lie inside it)
                    # A run killed before its first checkpoint left nothing to resume: the directory is reused.
                    print(f"reusing {path}: it held only the config of a run stopped before its first checkpoint", flush=True)
                    for p in path.iterdir():
                        if p.name != LOCK:
                            shutil.rmtree(p) if p.is_dir() else p.unlink()
        except RunDirectoryError as e:
            parser.error(one_line(e))
        except OSError as e:
            parser.error(f"--run-dir {str(path)!r} cannot be written: {e.strerror or one_line(e)}")
    if path.exists() and (not path.is_dir() or any(p.name != LOCK for p in path.iterdir())):
        parser.error(f"--run-dir {str(path)!r} already exists and is not an empty directory")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        parser.error(f"--run-dir {str(path)!r} cannot be created: {e.strerror or one_line(e)}")
    return path


def stranded(path: pathlib.Path) -> bool:
    """Whether `path` holds only what a run killed before its first checkpoint leaves:
    a `config.json` saying "running" (and perhaps TensorBoard events), or a PBT's
    `pbt.json`, with no finished checkpoint, state or metrics."""
    names = {p.name for p in path.iterdir()} - {LOCK}
    if not names & {CONFIG, "pbt.json"} or names - {CONFIG, "pbt.json", TENSORBOARD, CHECKPOINTS, "population"}:
        return False
    if checkpoint_steps(path):
        return False
    population = path / "population"  # a PBT run's checkpoints, one directory per finished generation
    if population.is_dir() and any(is_step_name(p.name) for p in population.iterdir()):
        return False
    if CONFIG in names:
        try:
            return load_config(path).get("status") == "running"
        except ValueError:
            return False
    return True


def disk_error(e: OSError, resume: str | None) -> str:
    """One line for a file that could not be written (a full disk, a read-only directory):
    which file, why, and the command that continues the run once it is fixed (`resume`;
    None: nothing was written yet, so the command is to be run again)."""
    where = f" {e.filename}" if e.filename else ""
    then = f"continue with `{resume}`" if resume else "run the command again"
    fix = disk_remedy(e)  # (free space or permissions only where one of them is the cause)
    return f"could not write{where}: {e.strerror or one_line(e)}; the files written before are intact: {fix or 'fix it'}, then {then}"


def print_returns(summary: dict[str, Any], seed: int, deterministic: bool) -> None:
    """Print evaluation returns per seed and their mean (from `eqxrl.runs.summarize_returns`)."""
    policy = "deterministic" if deterministic else "stochastic"
    print(f"  evaluation ({summary['episodes']} episodes per seed, {policy} policy):")
    for i, (mean, std) in enumerate(zip(summary["mean_per_seed"], summary["std_per_seed"])):
        print(f"    seed {seed + i:<6d} {mean:10.2f} ± {std:.2f}")
    n = len(summary["mean_per_seed"])
    print(f"    mean over {n} seed{'s' if n > 1 else ''}: {summary['mean']:.2f}")
    if "median" in summary:  # (every episode of every seed; NaN episodes left out and counted)
        nans = f", {summary['nan_count']} NaN" if summary["nan_count"] else ""
        print(
            f"    all {n * summary['episodes']} episodes: median {_number(summary['median'])}, std {_number(summary['std'])}, "
            f"min {_number(summary['min'])}, max {_number(summary['max'])}{nans}"
        )


def _number(value: Any) -> str:
    """A statistic of `print_returns` (None: NaN, as eval.json reads back)."""
    return "nan" if value is None else f"{value:.2f}"


DEVICES_HELP = (
    "CPU devices to run on (default: $EQXRL_CPU_DEVICES, else one per core this process may use, and one "
    "for a single seed, which runs slower on several); a batch of seeds or a PBT population is sharded over them"
)


def add_devices_flag(parser: Any) -> None:
    """`--devices N` on a command's parser or argument group (eqxrl.core.configure_cpu_devices,
    applied before any array is made)."""
    parser.add_argument("--devices", type=positive_devices, default=None, metavar="N", help=DEVICES_HELP)


def positive_devices(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive int (CPU devices), got {text!r}")
    return value


NO_COMPILE_CACHE_HELP = (
    "do not use JAX's persistent compilation cache (default: on, in $EQXRL_COMPILE_CACHE or "
    "$XDG_CACHE_HOME/eqxrl/jax, ~/.cache/eqxrl/jax; EQXRL_COMPILE_CACHE=off switches it off too)"
)
