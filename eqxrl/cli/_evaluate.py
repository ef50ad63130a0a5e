"""`eqxrl evaluate RUN_DIR`: evaluation returns of a run directory's final state."""

import argparse
from typing import Any

from ..core import one_line
from ..loop import evaluate
from ..runs import eval_key, load_run, summarize_returns
from ._common import print_returns
from ._flags import DEFAULT_EVAL_EPISODES
from ._parse import parse_int, parse_seed, positive


def add_evaluate_command(commands: Any) -> None:
    """Add `eqxrl evaluate RUN_DIR` to `commands`."""
    ev = commands.add_parser(
        "evaluate",
        help="evaluate the final state of a run directory",
        description="Rebuild the agent and final state of a run directory and report evaluation returns.",
    )
    ev.set_defaults(_parser=ev)
    ev.add_argument("run_dir", metavar="RUN_DIR", help="a directory written by `eqxrl train`")
    ev.add_argument(
        "--episodes", type=positive(parse_int), default=DEFAULT_EVAL_EPISODES, metavar="N",
        help=f"episodes per seed (default: {DEFAULT_EVAL_EPISODES})",
    )  # fmt: skip
    ev.add_argument(
        "--stochastic", action="store_true", help="sample actions from the policy instead of taking its mode"
    )
    ev.add_argument(
        "--seed", type=parse_seed, default=None, metavar="S",
        help="evaluation seed (default: the run's seed, which reproduces eval.json)",
    )  # fmt: skip


def evaluate_command(args: argparse.Namespace) -> int:
    parser = args._parser
    try:
        agent, state, config = load_run(args.run_dir)
    except ValueError as e:
        parser.error(one_line(e))
    seed = config["seed"] if args.seed is None else args.seed
    deterministic = not args.stochastic
    returns = evaluate(agent, state, eval_key(seed), num_episodes=args.episodes, deterministic=deterministic)
    print(f"{type(agent).__name__} on {config['env']} from {args.run_dir}")
    print_returns(summarize_returns(returns), config["seed"], deterministic)
    return 0
