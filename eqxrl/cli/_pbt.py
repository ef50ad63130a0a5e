"""`eqxrl pbt AGENT` and `eqxrl pbt --resume RUN_DIR`: Population Based Training from the command line."""

import argparse
import json
import pathlib
import sys
import time
from typing import Any

import jax
import numpy as np

from ..agents import AGENTS, AbstractAgent
from ..core import one_line
from ..envs import make
from ..loop import MAX_EVAL_EPISODES
from ..pbt import PBT, LogUniform, Novelty, population_generations, pbt_from_config, resume
from ..runs import CheckpointError, RunDirectoryError
from ..store import read_text_bounded
from ._common import NO_COMPILE_CACHE_HELP, add_agent_parser, add_command_parser, add_devices_flag, disk_error, prepare_run_dir
from ._flags import add_field_flags, add_trust_flag, build_agent, given_fields
from ._parse import TUNE_HELP, parse_exploit, parse_float, parse_log, parse_seed, parse_tune, positive, parse_int


DESCRIPTOR_NAMES = ("auto", "observation", "xy", "feet_contact")


def parse_fitness(text: str) -> Novelty | None:
    """`--fitness`: `return` (None: the mean evaluation return) or
    `novelty[:K[:RETURN_WEIGHT]]` (`Novelty(k=K, return_weight=RETURN_WEIGHT)`)."""
    kind, _, rest = text.partition(":")
    if kind == "return" and not rest:
        return None
    if kind == "novelty":
        parts = rest.split(":") if rest else []
        try:
            if len(parts) > 2:
                raise ValueError("too many fields")
            k = int(parts[0]) if parts else 3
            weight = float(parts[1]) if len(parts) > 1 else 0.0
            return Novelty(k=k, return_weight=weight)
        except ValueError as e:
            raise argparse.ArgumentTypeError(f"{text!r}: {one_line(e)}") from None
    raise argparse.ArgumentTypeError(f"expected return or novelty[:K[:RETURN_WEIGHT]], got {text!r}")


def add_pbt_parser(agents: Any, name: str, cls: type[AbstractAgent]) -> None:
    p, run = add_agent_parser(
        agents,
        "pbt",
        name,
        help=f"PBT of {cls.__name__}",
        usage="%(prog)s [-h] [--env NAME] [--population N] [--ready STEPS] [--total-steps N] [--tune NAME=SPEC ...] [--FIELD VALUE ...]",
        description=f"Population Based Training of {cls.__name__}. Every field of {cls.__name__} except env is a flag.",
        epilog=(
            "example:\n"
            f"  eqxrl pbt {name} --env {cls.default_env} --population 16 --ready 10000 --total-steps 1e5 "
            "--tune learning_rate=log:1e-4:1e-2"
        ),
    )
    positive_int = positive(parse_int)
    run.add_argument("--env", default=cls.default_env, metavar="NAME", help=f"environment (default: {cls.default_env})")
    run.add_argument("--population", type=positive_int, default=8, metavar="N", help="members (default: 8)")
    run.add_argument("--ready", type=positive_int, default=10_000, metavar="STEPS",
                     help="env steps per member between exploit/explore steps (default: 10000)")  # fmt: skip
    run.add_argument("--total-steps", type=positive_int, default=100_000, metavar="N",
                     help="env steps per member (default: 100000)")  # fmt: skip
    run.add_argument("--tune", type=parse_tune, action="append", default=None, metavar="NAME=SPEC", help=TUNE_HELP)
    run.add_argument("--exploit", type=parse_exploit, default=None, metavar="KIND",
                     help="truncation:K:M or tournament[:MARGIN] (default: truncation of a quarter)")  # fmt: skip
    run.add_argument("--resample-probability", type=parse_float, default=0.25, metavar="P",
                     help="chance that explore resamples instead of perturbing (default: 0.25)")  # fmt: skip
    run.add_argument("--eval-episodes", type=positive(parse_int, MAX_EVAL_EPISODES), default=8, metavar="N", help="episodes per fitness evaluation (default: 8)")
    run.add_argument("--eval-every", type=positive_int, default=None, metavar="STEPS",
                     help="env steps per member between in-training evaluations (eval_return in the history; default: none)")  # fmt: skip
    run.add_argument("--eval-descriptor", choices=DESCRIPTOR_NAMES, default=None,
                     help="record each member's mean final state descriptor (descriptor/<j> in the history): "
                          "auto (DADS's own, brax torso x-y, Point2D position), xy or observation; or feet_contact, each foot's "
                          "fraction of the episode's steps on the ground (brax ant, halfcheetah, hopper, walker2d, humanoid) "
                          "(default: none)")  # fmt: skip
    run.add_argument("--fitness", type=parse_fitness, default=None, metavar="KIND",
                     help="return (mean evaluation return, the default) or novelty[:K[:RETURN_WEIGHT]]: mean distance "
                          "to the K nearest members' descriptors (default K=3), plus RETURN_WEIGHT x the return (default 0); "
                          "needs --eval-descriptor")  # fmt: skip
    run.add_argument("--seed", type=parse_seed, default=0, metavar="S", help="seed (default: 0)")
    run.add_argument("--run-dir", default=None, metavar="PATH", help="where to save (default: runs/pbt-<agent>-<env>-<timestamp>)")
    run.add_argument("--quiet", action="store_true", help="no progress bar")
    run.add_argument(
        "--log", type=parse_log, default=[], metavar="SINKS",
        help="also log each generation (fitness, hyperparameters, per member) to these sinks, comma-separated: "
        "tensorboard (RUN_DIR/tensorboard), wandb, mlflow",
    )  # fmt: skip
    run.add_argument("--no-compile-cache", action="store_true", help=NO_COMPILE_CACHE_HELP)
    add_devices_flag(run)
    add_trust_flag(run)
    add_field_flags(p, cls)


def add_pbt_command(commands: Any) -> None:
    """Add `eqxrl pbt AGENT` / `eqxrl pbt --resume RUN_DIR` to `commands`."""
    pbt = add_command_parser(
        commands,
        "pbt",
        help="Population Based Training of an agent (eqxrl.pbt.PBT), or --resume RUN_DIR",
        description="Train a population with PBT and save a run directory (pbt.json, history.csv, history.png, population/<generation>/).",
    )
    pbt.add_argument("--resume", metavar="RUN_DIR", default=None, help="continue an interrupted `eqxrl pbt` run")
    add_trust_flag(pbt)
    pbt_agents = pbt.add_subparsers(dest="agent", metavar="AGENT")
    for name, cls in AGENTS.items():
        add_pbt_parser(pbt_agents, name, cls)


def default_space(agent: AbstractAgent) -> dict[str, Any]:
    """`--tune`'s default: every learning rate, a decade either side, by the name a user knows it by
    (the keyword, `learning_rate`, for a rate the agent keeps in its optimizer)."""
    keyword = {path: name for name, path in type(agent).aliases.items()}
    out = {}
    for path, value in agent.hyperparameters().items():
        v = float(np.asarray(value))
        if path.endswith("learning_rate") and v > 0:
            out[keyword.get(path, path)] = LogUniform(v / 10, v * 10)
    return out


def print_pbt_summary(pbt: Any, history: Any, run_dir: Any, seconds: float) -> None:
    best, fitness = history.best()
    print(
        f"PBT {type(pbt.agent).__name__} on {pbt.agent.env.name}: {pbt.population_size} members x "
        f"{int(history.env_steps[-1]):,} env steps, {history.num_generations} generations in {seconds:.1f} s"
    )
    last = history.fitness[-1]
    print(f"  fitness after the last generation: best {fitness:.2f} (member {best}), median {np.nanmedian(last):.2f}")
    for name, values in history.hyperparameters.items():
        print(f"  {name:<24s} best member: {values[-1, best]:.4g}")
    if history.descriptor is not None:
        print(f"  descriptor       best member: {np.array2string(history.descriptor[-1, best], precision=3)}")
    if run_dir is not None:
        print(f"  run directory    {run_dir}")


def interrupted_exit(run_dir: pathlib.Path) -> int:
    """Ctrl-C: say how to go on (exit 130, as for any interrupted command)."""
    done = population_generations(run_dir)
    if done:
        print(f"eqxrl: interrupted; `eqxrl pbt --resume {run_dir}` continues the run from generation {done[-1]}", file=sys.stderr)
    else:
        print(
            f"eqxrl: interrupted before the first generation was saved; run the command again "
            f"(with `--run-dir {run_dir}` it reuses the directory)", file=sys.stderr,
        )  # fmt: skip
    return 130


def pbt_command(args: argparse.Namespace, argv: list[str]) -> int:
    parser = args._parser
    if args.resume is not None:
        if args.agent is not None:
            parser.error("--resume RUN_DIR takes no AGENT (the run directory names it)")
        start = time.perf_counter()
        try:
            population, history = resume(args.resume, progress=True)  # (logs to the sinks pbt.json records)
        except OSError as e:
            parser.error(disk_error(e, f"eqxrl pbt --resume {args.resume}"))
        except ValueError as e:
            parser.error(one_line(e))
        except KeyboardInterrupt:
            return interrupted_exit(pathlib.Path(args.resume))
        pbt = pbt_from_config(json.loads(read_text_bounded(pathlib.Path(args.resume) / "pbt.json")))
        print_pbt_summary(pbt, history, args.resume, time.perf_counter() - start)
        return 0
    if args.agent is None:
        parser.error("give an AGENT (" + ", ".join(AGENTS) + ") or --resume RUN_DIR")
    cls = AGENTS[args.agent]
    kwargs = given_fields(args, cls)
    try:
        agent = build_agent(cls, make(args.env), kwargs, args.set_paths)
        space = dict(args.tune) if args.tune else default_space(agent)
        pbt = PBT(
            agent, space, population_size=args.population, ready=args.ready, exploit=args.exploit,
            resample_probability=args.resample_probability, eval_episodes=args.eval_episodes,
            eval_every=args.eval_every, descriptor=args.eval_descriptor, fitness=args.fitness,
        )  # fmt: skip
        generations = pbt.num_generations(args.total_steps)
    except ValueError as e:
        parser.error(one_line(e))
    run_dir = prepare_run_dir(parser, args.run_dir, f"pbt-{args.agent}-{args.env}")
    print(
        f"PBT {cls.__name__} on {args.env}: {args.population} members, {generations} generations of "
        f"{pbt.steps_per_generation} env steps, tuning {', '.join(space)} -> {run_dir} (compiling...)",
        flush=True,
    )
    start = time.perf_counter()
    try:
        _, history = pbt.run(jax.random.key(args.seed), args.total_steps, progress=not args.quiet, run_dir=run_dir, log=args.log)
    except OSError as e:
        parser.error(disk_error(e, f"eqxrl pbt --resume {run_dir}"))
    except (CheckpointError, RunDirectoryError) as e:  # a checkpoint not written, or the directory taken meanwhile: one line
        parser.error(one_line(e))
    except KeyboardInterrupt:
        return interrupted_exit(run_dir)
    print_pbt_summary(pbt, history, run_dir, time.perf_counter() - start)
    return 0
