"""`eqxrl evaluate RUN_DIR`: evaluation returns of a run directory's final state (a
diverged run's last checkpoint with finite parameters)."""

import argparse
from typing import Any

from ..core import one_line
from ..loop import MAX_EVAL_EPISODES, evaluate
from ..runs import diverged_checkpoint, eval_key, load_run, summarize_returns
from ._common import NO_COMPILE_CACHE_HELP, add_devices_flag, add_run_dir_command, print_returns
from ._flags import DEFAULT_EVAL_EPISODES, add_trust_flag
from ._parse import parse_int, parse_seed, positive


def add_evaluate_command(commands: Any) -> None:
    """Add `eqxrl evaluate RUN_DIR` to `commands`."""
    ev = add_run_dir_command(
        commands,
        "evaluate",
        help="evaluate the final state of a run directory",
        description="Rebuild the agent and final state of a run directory and report evaluation returns.",
    )
    ev.add_argument(
        "--episodes", type=positive(parse_int, MAX_EVAL_EPISODES), default=DEFAULT_EVAL_EPISODES, metavar="N",
        help=f"episodes per seed (default: {DEFAULT_EVAL_EPISODES})",
    )  # fmt: skip
    ev.add_argument(
        "--stochastic", action="store_true", help="sample actions from the policy instead of taking its mode"
    )
    add_checkpoint_flag(ev, "evaluate")
    ev.add_argument(
        "--seed", type=parse_seed, default=None, metavar="S",
        help="evaluation seed (default: the run's seed, which reproduces eval.json)",
    )  # fmt: skip
    ev.add_argument("--no-compile-cache", action="store_true", help=NO_COMPILE_CACHE_HELP)
    add_devices_flag(ev)
    add_trust_flag(ev)


def add_checkpoint_flag(parser: Any, verb: str) -> None:
    """`--checkpoint best|last|STEP` of a command that reads a run's state (`verb`: what it does to it)."""
    parser.add_argument(
        "--checkpoint", type=parse_checkpoint, default=None, metavar="WHICH",
        help=f"{verb} a checkpoint instead of the final state: best, last, or an env step (default: the final state)",
    )  # fmt: skip


def parse_checkpoint(text: str) -> str | int:
    """`best`, `last` or an env step (a non-negative int)."""
    if text in ("best", "last"):
        return text
    try:
        step = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be best, last or an env step (an int), got {text!r}") from None
    if step < 0:
        raise argparse.ArgumentTypeError(f"must be best, last or an env step >= 0, got {text!r}")
    return step


def chosen_checkpoint(run_dir: str, checkpoint: str | int | None, doing: str) -> str | int | None:
    """The checkpoint a command reads: the one asked for; else, for a diverged run (it has no
    final state), its last checkpoint with finite parameters, said on stdout; else None."""
    if checkpoint is None:
        checkpoint = diverged_checkpoint(run_dir)
        if checkpoint is not None:
            print(f"{run_dir} diverged: {doing} its last checkpoint with finite parameters (env step {checkpoint:,})")
    return checkpoint


def evaluate_command(args: argparse.Namespace) -> int:
    parser = args._parser
    try:
        checkpoint = chosen_checkpoint(args.run_dir, args.checkpoint, "evaluating")
        agent, state, config = load_run(args.run_dir, checkpoint=checkpoint)
    except ValueError as e:
        parser.error(one_line(e))
    seed = config["seed"] if args.seed is None else args.seed
    deterministic = not args.stochastic
    returns = evaluate(agent, state, eval_key(seed), num_episodes=args.episodes, deterministic=deterministic)
    where = "" if checkpoint is None else f" ({checkpoint} checkpoint)" if isinstance(checkpoint, str) else f" (checkpoint at env step {checkpoint:,})"
    print(f"{type(agent).__name__} on {config['env']} from {args.run_dir}{where}")
    print_returns(summarize_returns(returns), config["seed"], deterministic)
    return 0
