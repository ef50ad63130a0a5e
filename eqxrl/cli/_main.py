"""The `eqxrl` parser and entry point."""

import argparse
import contextlib
import sys
from collections.abc import Sequence

from ..agents import AGENTS, agent_name, import_agent
from ..core import (
    __version__,
    configure_compile_cache,
    configure_cpu_devices,
    one_device_for_one_run,
    one_line,
    trust_modules,
    trusting,
)
from ._evaluate import add_evaluate_command, evaluate_command
from ._export import add_export_command, export_command
from ._flags import DEFAULT_AGENT, trusted_in_argv
from ._parse import attach_negative_values
from ._pbt import add_pbt_command, pbt_command
from ._render import add_render_command, offscreen_rendering, render_command
from ._train import add_train_command, train_command


def build_parser() -> argparse.ArgumentParser:
    """**Returns:** the `eqxrl` argument parser (commands `train`, `evaluate`, `export`, `render` and `pbt`)."""
    parser = argparse.ArgumentParser(
        prog="eqxrl",
        description="Train and evaluate eqxrl agents from the command line.",
        epilog="`eqxrl train --help` shows the flags of the default agent, `eqxrl train AGENT --help` another's.",
    )
    parser.add_argument("--version", action="version", version=f"eqxrl {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    add_train_command(commands)
    add_evaluate_command(commands)
    add_export_command(commands)
    add_render_command(commands)
    add_pbt_command(commands)
    return parser


def with_default_agent(argv: list[str]) -> list[str]:
    """`eqxrl train [--flags]` means `eqxrl train ppo [--flags]`; `eqxrl train pkg.mod:Agent`
    (or `eqxrl pbt pkg.mod:Agent`) imports and registers a custom agent class and names it."""
    if argv and argv[0] == "train" and (len(argv) == 1 or (argv[1] not in AGENTS and argv[1].startswith("-"))):
        return [argv[0], DEFAULT_AGENT, *argv[1:]]
    if len(argv) > 1 and argv[0] in ("train", "pbt") and ":" in argv[1] and not argv[1].startswith("-"):
        return [argv[0], agent_name(import_agent(argv[1])), *argv[2:]]
    return argv


def main(argv: Sequence[str] | None = None) -> int:
    """Run the `eqxrl` command line.

    **Arguments:** `argv`, the arguments without the program name (default `sys.argv[1:]`).

    **Returns:** the exit status, 0 on success. Bad arguments raise `SystemExit(2)`
    after printing the usage and a one-line reason on stderr.

    The command runs trusting the modules of `--trust MODULE` and of an agent class
    named on the command line (`eqxrl train my_pkg.mod:MyAgent`): the classes that the
    files it reads name resolve to those, to eqxrl's own and to registered ones
    (`eqxrl.core.trusting`). They are read before parsing, since flags' class specs
    are resolved while argparse parses them.
    """
    argv = attach_negative_values(list(sys.argv[1:] if argv is None else argv))
    try:
        trust = trusted_in_argv(argv)
    except ValueError as e:
        build_parser().error(one_line(e))
    if len(argv) > 1 and argv[0] in ("train", "pbt") and ":" in argv[1] and not argv[1].startswith("-"):
        with contextlib.suppress(ValueError):  # (not a module name: import_agent says so, one line)
            trust += trust_modules(argv[1].partition(":")[0])
    with trusting(trust):
        return _main(argv)


def _main(argv: list[str]) -> int:
    try:
        argv = with_default_agent(argv)
    except ValueError as e:
        build_parser().error(one_line(e))
    args = build_parser().parse_args(argv)
    if getattr(args, "devices", None) is not None:
        configure_cpu_devices(args.devices, owner="--devices")
    elif args.command == "train" and args.seeds == 1 and args.resume is None and args.config is None:
        one_device_for_one_run()  # (one run is not split, and runs slower on several CPU devices)
    if getattr(args, "no_compile_cache", False):
        configure_compile_cache(False)  # (eqxrl's import switched it on)
    if getattr(args, "record_every", None) is not None:
        offscreen_rendering()  # (before the env is built: MuJoCo and matplotlib read their settings when imported)
    try:
        if args.command == "train":
            return train_command(args, argv)
        if args.command == "pbt":
            return pbt_command(args, argv)
        if args.command == "export":
            return export_command(args)
        if args.command == "render":
            return render_command(args)
        return evaluate_command(args)
    except KeyboardInterrupt:
        print("eqxrl: interrupted", file=sys.stderr)
        return 130
