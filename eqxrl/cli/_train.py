"""`eqxrl train AGENT`: train and save a run directory; `--resume`, `--config`."""

import argparse
import json
import pathlib
import shlex
import sys
from typing import Any

from ..agents import AGENTS, AbstractAgent, Batch
from ..core import one_line
from ..envs import make
from ..loop import MAX_EVAL_EPISODES, NonFiniteError
from ..runs import (
    CONFIG, MAX_SEED, CheckpointError, agent_from_config, check_best, check_config, checkpoint_steps,
    RECORD_AUTO, RECORD_BUDGET, check_recordable, load_config, resume_run, run_lock, train_run,
)  # fmt: skip
from ..store import read_text_bounded
from ._common import NO_COMPILE_CACHE_HELP, add_agent_parser, add_devices_flag, disk_error, prepare_run_dir, print_returns
from ._flags import DEFAULT_AGENT, DEFAULT_ENV, DEFAULT_EVAL_EPISODES, add_field_flags, add_trust_flag, build_agent, first_line, given_fields
from ._parse import parse_int, parse_log, parse_seed, positive

LOG_NAMES = "tensorboard (RUN_DIR/tensorboard), wandb, mlflow"


RECORD_DEFAULT = -1
"""`--record-every` given without STEPS (replaced by `eqxrl.runs.RECORD_AUTO`, the time budget; not
`RECORD_AUTO` itself: argparse passes a string `const` through the flag's `type`)."""


def add_train_parser(agents: Any, name: str, cls: type[AbstractAgent]) -> None:
    p, run = add_agent_parser(
        agents,
        "train",
        name,
        help=f"{cls.__name__}: {first_line(cls.__doc__)}",
        # Short, so that an error is two lines: the usage and the reason.
        usage="%(prog)s [-h] [--env NAME] [--total-steps N] [--seeds K] [--run-dir PATH] [--FIELD VALUE ...]",
        description=(
            f"Train {cls.__name__} (eqxrl.agents.{cls.__name__}) and save a run directory.\n\n"
            f"AGENT is one of: {', '.join(AGENTS)}; `eqxrl train` with no AGENT trains {DEFAULT_AGENT}.\n"
            f"Every field of {cls.__name__} except env is a flag."
        ),
        epilog=(
            "example:\n"
            f"  eqxrl train {name} --env {cls.default_env} --total-steps 1e6 --seeds 4\n"
            "Bools take true/false, tuples of ints 64,64, floats also inf."
        ),
    )
    positive_int = positive(parse_int)
    run.add_argument(
        "--env", default=cls.default_env, metavar="NAME",
        help=f"environment for eqxrl.envs.make (default: {cls.default_env})",
    )
    run.add_argument(
        "--total-steps", type=positive_int, default=None, metavar="N",
        help=(
            "env-step budget per seed, rounded down to whole iterations (default: the agent's budget, "
            f"{cls.default_total_steps:,} for {cls.__name__}, at which its defaults learn {cls.default_env}; "
            "an agent whose defaults adapt to the env may differ, see its docs page)"
        ),
    )  # fmt: skip
    run.add_argument(
        "--seeds", type=positive_int, default=1, metavar="K",
        help="number of seeds, trained together in one program (default: 1)",
    )  # fmt: skip
    run.add_argument(
        "--seed", type=parse_seed, default=0, metavar="S",
        help="base seed: the seeds are S, S+1, ..., S+K-1 (default: 0)",
    )  # fmt: skip
    run.add_argument(
        "--run-dir", default=None, metavar="PATH",
        help="where to save the run (default: runs/<agent>-<env>-<timestamp>)",
    )  # fmt: skip
    run.add_argument(
        "--eval-episodes", type=positive(parse_int, MAX_EVAL_EPISODES), default=DEFAULT_EVAL_EPISODES, metavar="N",
        help=f"deterministic evaluation episodes per seed after training (default: {DEFAULT_EVAL_EPISODES})",
    )  # fmt: skip
    run.add_argument(
        "--eval-every", type=positive_int, default=None, metavar="STEPS",
        help="env steps per seed between deterministic evaluations during training (--eval-episodes each; "
        "eval_return in metrics.csv, the learning curve and TensorBoard; default: none)",
    )  # fmt: skip
    run.add_argument(
        "--record-every", type=positive_int, nargs="?", const=RECORD_DEFAULT, default=None, metavar="STEPS",
        help="videos of one deterministic episode (RUN_DIR/videos/<env steps>.mp4, and TensorBoard with --tensorboard), "
        "always one of the final policy; STEPS: env steps per seed between videos (one is skipped while the previous "
        f"is still being drawn); without STEPS: a time budget, a video at each evaluation (--eval-every; else each "
        f"quarter of the run) only while recording costs at most {RECORD_BUDGET * 100:.0f}%% of the training time so far, "
        "the final video's cost reserved (config.json counts those written and skipped); needs pip install 'eqxrl[video]'",
    )  # fmt: skip
    if cls.presets:
        run.add_argument(
            "--preset", choices=list(cls.presets), default=None,
            help=f"start from a named configuration ({cls.__name__}.presets; the other flags override its fields)",
        )  # fmt: skip
    run.add_argument("--quiet", action="store_true", help="no progress bar")
    run.add_argument("--no-compile-cache", action="store_true", help=NO_COMPILE_CACHE_HELP)
    add_devices_flag(run)
    run.add_argument(
        "--checkpoint-every", type=positive_int, default=None, metavar="STEPS",
        help="env steps between checkpoints in the run directory (default: about 10 per run)",
    )  # fmt: skip
    run.add_argument("--nan-guard", action="store_true", help="stop at the first NaN/Inf in the state or a loss, naming it")
    run.add_argument(
        "--log", type=parse_log, default=[], metavar="SINKS",
        help=f"also log to these sinks, comma-separated: {LOG_NAMES} (W&B and MLflow read their usual "
        "environment variables: WANDB_PROJECT, WANDB_MODE=offline, MLFLOW_TRACKING_URI, MLFLOW_EXPERIMENT_NAME)",
    )  # fmt: skip
    run.add_argument("--tensorboard", action="store_true", help="the same as --log tensorboard (RUN_DIR/tensorboard)")
    run.add_argument(
        "--resume", default=None, metavar="RUN_DIR",
        help="continue an interrupted run from its last checkpoint; with --total-steps N, a finished one to N steps",
    )  # fmt: skip
    run.add_argument(
        "--keep-checkpoints", type=positive_int, default=2, metavar="K",
        help="newest checkpoints kept in RUN_DIR/checkpoints, besides the best evaluated one (default: 2)",
    )  # fmt: skip
    run.add_argument(
        "--best", default=None, metavar="METRIC",
        help="what the best checkpoint (kept besides the newest, --checkpoint best) is best by: a metric of metrics.csv, "
        "highest best (default: eval_return, with --eval-every), or -METRIC for the lowest; recorded in config.json",
    )  # fmt: skip
    run.add_argument(
        "--config", default=None, metavar="CONFIG_JSON",
        help="reproduce a run: agent, env, fields, budget and seeds from a run directory's config.json",
    )  # fmt: skip
    add_trust_flag(run)
    add_field_flags(p, cls)


def add_train_command(commands: Any) -> None:
    """Add `eqxrl train AGENT` (one sub-parser per registered agent) to `commands`."""
    train_parser = commands.add_parser(
        "train",
        help=f"train an agent and save a run directory (default: {DEFAULT_AGENT} on {DEFAULT_ENV})",
        description="Train an agent and save a run directory.",
    )
    agents = train_parser.add_subparsers(dest="agent", metavar="AGENT", required=True)
    for name, cls in AGENTS.items():
        add_train_parser(agents, name, cls)


def train_command(args: argparse.Namespace, argv: list[str]) -> int:
    parser = args._parser
    given = given_fields(args, AGENTS[args.agent])
    sets = getattr(args, "set_paths", None) or []
    preset = getattr(args, "preset", None)  # only agents with presets have the flag
    named = [*given, *(["--set"] if sets else []), *(["--preset"] if preset else [])]  # what the errors below name
    if args.resume is not None:
        if args.config is not None or named or args.best is not None:
            parser.error("--resume RUN_DIR continues a run as it was configured: give no --config, --preset, --best or agent fields")
        return resume_command(args, argv)
    if args.config is not None:
        if named:
            parser.error(f"--config reproduces a run as it was: do not also set agent fields ({', '.join(named)})")
        try:
            config = json.loads(read_text_bounded(pathlib.Path(args.config)))
            check_config(config, args.config)
            agent = agent_from_config(config)
        except (OSError, json.JSONDecodeError, KeyError, TypeError, ValueError) as e:
            parser.error(f"--config {args.config!r}: {one_line(e)}")
        name, env_name = config["agent"], config["env"]
        total_steps, num_seeds, seed = config["total_steps"], config["seeds"], config["seed"]
        checkpoint_every = args.checkpoint_every or config.get("checkpoint_every")
        eval_every = args.eval_every or config.get("eval_every")
        record_every = args.record_every or config.get("record_every")
        best = args.best or config.get("best", "eval_return")
        if not isinstance(best, str):  # (a function's name: a config runs no code)
            parser.error(f"--config {args.config!r} chose its best checkpoint by a function ({best.get('function')}): give --best METRIC")
    else:
        name, env_name = args.agent, args.env
        total_steps, num_seeds, seed = args.total_steps, args.seeds, args.seed
        checkpoint_every = args.checkpoint_every
        eval_every = args.eval_every
        record_every = args.record_every
        best = args.best or "eval_return"
        cls = AGENTS[args.agent]
        try:
            fields = {**cls.presets[preset](), **given} if preset else given
            agent = build_agent(cls, make(args.env), fields, sets)
        except ValueError as e:
            parser.error(one_line(e))
        if total_steps is None:
            total_steps = Batch.of(agent).agent.default_budget()
    base = Batch.of(agent).agent
    per_iteration = base.steps_per_iteration
    num_iterations = total_steps // per_iteration
    if num_iterations < 1:
        parser.error(
            f"--total-steps {total_steps} must cover at least one iteration of "
            f"{type(base).__name__} ({per_iteration} env steps)"
        )
    if eval_every is not None and not per_iteration <= eval_every <= total_steps:
        parser.error(
            f"--eval-every {eval_every} must be between one iteration of {type(base).__name__} "
            f"({per_iteration} env steps) and --total-steps {total_steps}"
        )
    if record_every == RECORD_DEFAULT:
        record_every = RECORD_AUTO
    if isinstance(record_every, int) and not per_iteration <= record_every <= total_steps:
        parser.error(
            f"--record-every {record_every} must be between one iteration of {type(base).__name__} "
            f"({per_iteration} env steps) and --total-steps {total_steps}"
        )
    if record_every is not None:
        try:  # (before the run directory is made: an env without a renderer is refused first)
            check_recordable(base, owner="--record-every")
        except ValueError as e:
            parser.error(one_line(e))
    try:  # (before the run directory is made)
        check_best(best, agent, eval_every is not None, owner="--best")
    except ValueError as e:
        parser.error(one_line(e))
    if seed + num_seeds - 1 > MAX_SEED:
        parser.error(f"--seed {seed} with --seeds {num_seeds} goes past the largest seed {MAX_SEED}")
    run_dir = prepare_run_dir(parser, args.run_dir, f"{name}-{env_name}")
    seeds = f"{num_seeds} seeds" if num_seeds > 1 else "1 seed"
    print(
        f"{type(base).__name__} on {env_name}: {num_iterations} iterations of {per_iteration} env steps, "
        f"{seeds} -> {run_dir} (compiling...)",
        flush=True,
    )
    try:
        _, _, info, summary = train_run(
            run_dir, agent, total_steps=total_steps, seed=seed, num_seeds=num_seeds, checkpoint_every=checkpoint_every,
            keep_checkpoints=args.keep_checkpoints, nan_guard=args.nan_guard, tensorboard=args.tensorboard, log=args.log,
            progress=not args.quiet, eval_episodes=args.eval_episodes, env_name=env_name,
            command=shlex.join(["eqxrl", *argv]),
            eval_every=eval_every, record_every=record_every, best=best,
        )  # fmt: skip
    except NonFiniteError as e:
        return nonfinite_exit(e, run_dir)
    except (CheckpointError, OSError) as e:
        return disk_exit(parser, e, run_dir)
    except ValueError as e:  # another command took the directory meanwhile; a sink that cannot start
        parser.error(one_line(e))
    except KeyboardInterrupt:
        return interrupted_exit(run_dir, None)
    print_train_summary(type(base).__name__, env_name, seeds, info, summary, seed, run_dir)
    return 0


def print_train_summary(name: str, env_name: str, seeds: str, info: Any, summary: dict, seed: int, run_dir: Any) -> None:
    resumed = f", {info.env_steps:,} of them in this call" if info.env_steps != info.total_env_steps else ""
    print(f"{name} on {env_name}, {seeds}, {info.total_env_steps:,} env steps ({info.num_iterations} iterations{resumed})")
    print(f"  compile time     {info.compile_seconds:8.1f} s")
    print(f"  training time    {info.run_seconds:8.1f} s")
    print(f"  env steps/s      {info.steps_per_second:10,.0f}")
    print_returns(summary, seed, deterministic=True)
    print(f"  run directory    {run_dir}")


def nonfinite_exit(e: NonFiniteError, run_dir: pathlib.Path) -> int:
    """Report a diverged run (exit 1, as for a failed run) in one line: `train_run`'s
    message names the quantity, the iteration and the last checkpoint with finite parameters."""
    print(f"eqxrl: {one_line(e)}", file=sys.stderr)
    return 1


def resume_line(run_dir: pathlib.Path, total_steps: int | None) -> str:
    """The command that continues the run in `run_dir`, with the `--total-steps N` that
    continuing a finished run to a new budget needs (until its config.json says so)."""
    return f"eqxrl train --resume {run_dir}" + (f" --total-steps {total_steps}" if total_steps is not None else "")


def disk_exit(parser: argparse.ArgumentParser, e: BaseException, run_dir: pathlib.Path, total_steps: int | None = None) -> int:
    """A checkpoint or a run file could not be written or read: one line, exit 2."""
    if isinstance(e, OSError):
        started = (run_dir / CONFIG).is_file()
        parser.error(disk_error(e, resume_line(run_dir, total_steps) if started else None))
    parser.error(one_line(e))
    return 2


def interrupted_exit(run_dir: pathlib.Path, total_steps: int | None) -> int:
    """Ctrl-C: say how to go on (exit 130, as for any interrupted command)."""
    steps = checkpoint_steps(run_dir)
    where = f"from its checkpoint at env step {steps[-1]['step']:,}" if steps else "from the start: no checkpoint was written"
    print(f"eqxrl: interrupted; `{resume_line(run_dir, total_steps)}` continues the run {where}", file=sys.stderr)
    return 130


def resume_command(args: argparse.Namespace, argv: list[str]) -> int:
    parser = args._parser
    run_dir = pathlib.Path(args.resume)
    # --total-steps continues the run to a new budget; given or not, it is read from argv
    # (its default would otherwise look like a new budget).
    total_steps = args.total_steps if any(a == "--total-steps" or a.startswith("--total-steps=") for a in argv) else None
    try:
        config = load_config(run_dir)
        verb = "continuing" if total_steps is not None and total_steps != config.get("total_steps") else "resuming"
        print(f"{verb} {config['agent']} on {config['env']} from {run_dir} (compiling...)", flush=True)
        with run_lock(run_dir, "--resume", create=False):  # (resume_run holds it too: refused here, it names the flag)
            log = [*args.log, *(["tensorboard"] if args.tensorboard else [])]
            _, _, info, summary = resume_run(run_dir, total_steps=total_steps, progress=not args.quiet, log=log)
    except NonFiniteError as e:  # (a ValueError too: caught first, so it exits 1 as in the first run)
        return nonfinite_exit(e, run_dir)
    except OSError as e:
        return disk_exit(parser, e, run_dir, total_steps)
    except KeyboardInterrupt:
        return interrupted_exit(run_dir, total_steps)
    except ValueError as e:
        parser.error(one_line(e))
    seeds = f"{config['seeds']} seeds" if config["seeds"] > 1 else "1 seed"
    print_train_summary(config["agent"].upper(), config["env"], seeds, info, summary, config["seed"], run_dir)
    return 0
