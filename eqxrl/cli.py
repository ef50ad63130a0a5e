"""The `eqxrl` command line: `eqxrl train` and `eqxrl evaluate`.

```
eqxrl train                                   # PPO on CartPole-v1, 500k steps, 1 seed
eqxrl train ppo --env Acrobot-v1 --total-steps 1e6 --seeds 4 --learning-rate 3e-4 --anneal-lr false
eqxrl evaluate runs/ppo-CartPole-v1-20250101-120000 --episodes 100
eqxrl pbt sac --env Pendulum-v1 --population 16 --ready 5000 --total-steps 5e4 --tune actor_learning_rate=log:1e-4:1e-2
eqxrl pbt --resume runs/pbt-sac-Pendulum-v1-20250101-120000
```

Every field of an agent's dataclass except `env` is a flag, generated from
`dataclasses.fields`: `PPO.num_minibatches` is `--num-minibatches`, parsed as
the type of its default (int, float with `inf`, bool as `true`/`false`, a tuple
of ints as `64,64`, str). Fields of other types are not flags.
"""

import argparse
import dataclasses
import datetime
import json
import pathlib
import shlex
import sys
import types
import typing
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .core import as_float
from .agents import AbstractAgent
from .envs import make
from .agents import Stacked
from .rundir import (
    AGENTS,
    MAX_SEED,
    _one_line,
    agent_from_config,
    eval_key,
    load_config,
    load_run,
    resume_run,
    summarize_returns,
    train_run,
)
from .train import NonFiniteError, evaluate

DEFAULT_AGENT = "ppo"
DEFAULT_ENV = "CartPole-v1"
DEFAULT_TOTAL_STEPS = 500_000
DEFAULT_EVAL_EPISODES = 32


# --------------------------------------------------------------------- value parsers
_TRUE = {"true", "t", "yes", "y", "on", "1"}
_FALSE = {"false", "f", "no", "n", "off", "0"}


def _parse_bool(text: str) -> bool:
    value = text.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


def _parse_int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        pass
    try:
        value = float(text)  # accept 5e5 for 500000
    except ValueError:
        value = float("nan")
    if np.isfinite(value) and value.is_integer():
        return int(value)
    raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}")


def _parse_float(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number (or inf), got {text!r}") from None


def _parse_str(text: str) -> str:
    return text


def _positive(parse: Callable[[str], int]) -> Callable[[str], int]:
    def parse_positive(text: str) -> int:
        value = parse(text)
        if value < 1:
            raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
        return value

    return parse_positive


def _seed(text: str) -> int:
    value = _parse_int(text)
    if not 0 <= value <= MAX_SEED:
        raise argparse.ArgumentTypeError(f"expected a seed in [0, {MAX_SEED}], got {text!r}")
    return value


def _tuple_of(parse: Callable[[str], Any]) -> Callable[[str], tuple]:
    def parse_tuple(text: str) -> tuple:
        body = text.strip().strip("()[]").strip()
        if not body:
            return ()
        try:
            return tuple(parse(part.strip()) for part in body.split(","))
        except argparse.ArgumentTypeError as e:
            raise argparse.ArgumentTypeError(f"expected comma-separated values like 64,64: {e}") from None

    return parse_tuple


def _or_none(parse: Callable[[str], Any]) -> Callable[[str], Any]:
    def parse_optional(text: str) -> Any:
        return None if text.strip().lower() == "none" else parse(text)

    return parse_optional


_SCALARS: dict[type, tuple[Callable[[str], Any], str]] = {
    bool: (_parse_bool, "{true,false}"),
    int: (_parse_int, "INT"),
    float: (_parse_float, "FLOAT"),
    str: (_parse_str, "STR"),
}


# --------------------------------------------------------------------- flags from dataclass fields
@dataclasses.dataclass(frozen=True)
class _Flag:
    name: str
    parse: Callable[[str], Any]
    metavar: str
    default: Any  # dataclasses.MISSING for a required field


def _from_annotation(tp: Any) -> tuple[Callable[[str], Any], str] | None:
    if tp in _SCALARS:
        return _SCALARS[tp]
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
        elem = _from_annotation(args[0])
        if elem is not None:
            return _tuple_of(elem[0]), f"{elem[1]},{elem[1]},..."
    if origin in (typing.Union, types.UnionType):
        rest = [a for a in args if a is not type(None)]
        if len(rest) == 1 and len(rest) < len(args):
            inner = _from_annotation(rest[0])
            if inner is not None:
                return _or_none(inner[0]), inner[1] + "|none"
    return None


def _from_value(value: Any, annotation: Any) -> tuple[Callable[[str], Any], str] | None:
    if value is None:
        found = _from_annotation(annotation)
        if found is None or found[1].endswith("|none"):
            return found
        return _or_none(found[0]), found[1] + "|none"
    for kind in (bool, int, float, str):  # bool before int: bool is a subclass of int
        if isinstance(value, kind):
            return _SCALARS[kind]
    if isinstance(value, tuple):
        if not value:
            return _from_annotation(annotation)
        elem = _from_value(value[0], None)
        if elem is not None and all(isinstance(v, type(value[0])) for v in value):
            return _tuple_of(elem[0]), f"{elem[1]},{elem[1]},..."
    return None


def agent_flags(cls: type[AbstractAgent]) -> list[_Flag]:
    """The command-line flags of an agent class: one per dataclass field except `env`.

    **Arguments:** `cls`, an agent class (a dataclass, like every `eqx.Module`).

    **Returns:** the flags (name, parser, metavar, default); fields whose type
    cannot be parsed from text are left out.
    """
    flags = []
    for field in dataclasses.fields(cls):
        if field.name == "env" or not field.init:
            continue
        if field.default is not dataclasses.MISSING:
            default = field.default
        elif field.default_factory is not dataclasses.MISSING:
            default = field.default_factory()
        else:
            default = dataclasses.MISSING
        if field.metadata.get("converter") is as_float:
            found = _SCALARS[float]  # a float leaf, even with an int default
        elif default is dataclasses.MISSING:
            found = _from_annotation(field.type)
        else:
            found = _from_value(default, field.type)
        if found is not None:
            flags.append(_Flag(field.name, found[0], found[1], default))
    return flags


def _format_default(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, tuple):
        return ",".join(_format_default(v) for v in value)
    return str(value)


# --------------------------------------------------------------------- the parser
def _first_line(doc: str | None) -> str:
    return (doc or "").strip().split("\n\n")[0].replace("\n", " ")


def _add_agent_parser(agents: Any, name: str, cls: type[AbstractAgent]) -> None:
    p = agents.add_parser(
        name,
        help=f"{cls.__name__}: {_first_line(cls.__doc__)}",
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
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.set_defaults(command="train", agent=name, _parser=p)
    run = p.add_argument_group("run")
    positive = _positive(_parse_int)
    run.add_argument(
        "--env", default=cls.default_env, metavar="NAME",
        help=f"environment for eqxrl.envs.make (default: {cls.default_env})",
    )
    run.add_argument(
        "--total-steps", type=positive, default=DEFAULT_TOTAL_STEPS, metavar="N",
        help=f"env-step budget per seed, rounded down to whole iterations (default: {DEFAULT_TOTAL_STEPS})",
    )  # fmt: skip
    run.add_argument(
        "--seeds", type=positive, default=1, metavar="K",
        help="number of seeds, trained together in one program (default: 1)",
    )  # fmt: skip
    run.add_argument(
        "--seed", type=_seed, default=0, metavar="S",
        help="base seed: the seeds are S, S+1, ..., S+K-1 (default: 0)",
    )  # fmt: skip
    run.add_argument(
        "--run-dir", default=None, metavar="PATH",
        help="where to save the run (default: runs/<agent>-<env>-<timestamp>)",
    )  # fmt: skip
    run.add_argument(
        "--eval-episodes", type=positive, default=DEFAULT_EVAL_EPISODES, metavar="N",
        help=f"deterministic evaluation episodes per seed after training (default: {DEFAULT_EVAL_EPISODES})",
    )  # fmt: skip
    run.add_argument("--quiet", action="store_true", help="no progress bar")
    run.add_argument(
        "--checkpoint-every", type=positive, default=None, metavar="STEPS",
        help="env steps between checkpoints in the run directory (default: about 10 per run)",
    )  # fmt: skip
    run.add_argument("--nan-guard", action="store_true", help="stop at the first NaN/Inf in the state or a loss, naming it")
    run.add_argument("--tensorboard", action="store_true", help="also write TensorBoard event files (RUN_DIR/tensorboard)")
    run.add_argument("--resume", default=None, metavar="RUN_DIR", help="continue an interrupted run from its last checkpoint")
    run.add_argument(
        "--config", default=None, metavar="CONFIG_JSON",
        help="reproduce a run: agent, env, fields, budget and seeds from a run directory's config.json",
    )  # fmt: skip
    hyper = p.add_argument_group(f"{cls.__name__} fields")
    for flag in agent_flags(cls):
        required = flag.default is dataclasses.MISSING
        hyper.add_argument(
            "--" + flag.name.replace("_", "-"),
            dest=flag.name,
            type=flag.parse,
            metavar=flag.metavar,
            # Only flags given on the command line reach the agent: its own defaults apply otherwise.
            default=argparse.SUPPRESS,
            required=required,
            help="required" if required else f"default: {_format_default(flag.default)}",
        )


def build_parser() -> argparse.ArgumentParser:
    """**Returns:** the `eqxrl` argument parser (commands `train` and `evaluate`)."""
    from .core import __version__

    parser = argparse.ArgumentParser(
        prog="eqxrl",
        description="Train and evaluate eqxrl agents from the command line.",
        epilog="`eqxrl train --help` shows the flags of the default agent, `eqxrl train AGENT --help` another's.",
    )
    parser.add_argument("--version", action="version", version=f"eqxrl {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    train_parser = commands.add_parser(
        "train",
        help=f"train an agent and save a run directory (default: {DEFAULT_AGENT} on {DEFAULT_ENV})",
        description="Train an agent and save a run directory.",
    )
    agents = train_parser.add_subparsers(dest="agent", metavar="AGENT", required=True)
    for name, cls in AGENTS.items():
        _add_agent_parser(agents, name, cls)

    ev = commands.add_parser(
        "evaluate",
        help="evaluate the final state of a run directory",
        description="Rebuild the agent and final state of a run directory and report evaluation returns.",
    )
    ev.set_defaults(_parser=ev)
    ev.add_argument("run_dir", metavar="RUN_DIR", help="a directory written by `eqxrl train`")
    ev.add_argument(
        "--episodes", type=_positive(_parse_int), default=DEFAULT_EVAL_EPISODES, metavar="N",
        help=f"episodes per seed (default: {DEFAULT_EVAL_EPISODES})",
    )  # fmt: skip
    ev.add_argument(
        "--stochastic", action="store_true", help="sample actions from the policy instead of taking its mode"
    )
    ev.add_argument(
        "--seed", type=_seed, default=None, metavar="S",
        help="evaluation seed (default: the run's seed, which reproduces eval.json)",
    )  # fmt: skip
    pbt = commands.add_parser(
        "pbt",
        help="Population Based Training of an agent (eqxrl.pbt.PBT), or --resume RUN_DIR",
        description="Train a population with PBT and save a run directory (pbt.json, history.csv, history.png, population.eqx).",
    )
    pbt.set_defaults(_parser=pbt)
    pbt.add_argument("--resume", metavar="RUN_DIR", default=None, help="continue an interrupted `eqxrl pbt` run")
    pbt_agents = pbt.add_subparsers(dest="agent", metavar="AGENT")
    for name, cls in AGENTS.items():
        _add_pbt_agent_parser(pbt_agents, name, cls)
    return parser


_TUNE_HELP = (
    "NAME=SPEC, repeatable: SPEC is log:LOW:HIGH, uniform:LOW:HIGH, int:LOW:HIGH, intlog:LOW:HIGH or "
    "choice:V1,V2,... (default: every *learning_rate leaf, log-uniform over [default/10, default*10])"
)


def _parse_tune(text: str) -> tuple[str, Any]:
    from .pbt import Choice, IntLogUniform, IntUniform, LogUniform, Uniform

    name, sep, spec = text.partition("=")
    kind, _, rest = spec.partition(":")
    if not sep or not name or not kind:
        raise argparse.ArgumentTypeError(f"expected NAME=SPEC like learning_rate=log:1e-4:1e-2, got {text!r}")
    try:
        if kind == "choice":
            return name, Choice(tuple(_parse_float(v) for v in rest.split(",")))
        low, high = rest.split(":")
        makers = {"log": (LogUniform, _parse_float), "uniform": (Uniform, _parse_float),
                  "int": (IntUniform, _parse_int), "intlog": (IntLogUniform, _parse_int)}  # fmt: skip
        if kind not in makers:
            raise argparse.ArgumentTypeError(f"unknown domain {kind!r} (log, uniform, int, intlog, choice)")
        cls, parse = makers[kind]
        return name, cls(parse(low), parse(high))
    except ValueError as e:  # a domain's own check, or a malformed LOW:HIGH
        raise argparse.ArgumentTypeError(f"{text!r}: {_one_line(e)}") from None


def _parse_exploit(text: str) -> Any:
    from .pbt import Tournament, Truncation

    kind, _, rest = text.partition(":")
    try:
        if kind == "truncation":
            k, m = (int(v) for v in rest.split(":"))
            return Truncation(k, m)
        if kind == "tournament":
            return Tournament(float(rest) if rest else 0.0)
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"{text!r}: {_one_line(e)}") from None
    raise argparse.ArgumentTypeError(f"expected truncation:K:M or tournament[:MARGIN], got {text!r}")


def _add_pbt_agent_parser(agents: Any, name: str, cls: type[AbstractAgent]) -> None:
    p = agents.add_parser(
        name,
        help=f"PBT of {cls.__name__}",
        usage="%(prog)s [-h] [--env NAME] [--population N] [--ready STEPS] [--total-steps N] [--tune NAME=SPEC ...] [--FIELD VALUE ...]",
        description=f"Population Based Training of {cls.__name__}. Every field of {cls.__name__} except env is a flag.",
        epilog=(
            "example:\n"
            f"  eqxrl pbt {name} --env {cls.default_env} --population 16 --ready 10000 --total-steps 1e5 "
            "--tune learning_rate=log:1e-4:1e-2"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.set_defaults(command="pbt", agent=name, _parser=p)
    run = p.add_argument_group("run")
    positive = _positive(_parse_int)
    run.add_argument("--env", default=cls.default_env, metavar="NAME", help=f"environment (default: {cls.default_env})")
    run.add_argument("--population", type=positive, default=8, metavar="N", help="members (default: 8)")
    run.add_argument("--ready", type=positive, default=10_000, metavar="STEPS",
                     help="env steps per member between exploit/explore steps (default: 10000)")  # fmt: skip
    run.add_argument("--total-steps", type=positive, default=100_000, metavar="N",
                     help="env steps per member (default: 100000)")  # fmt: skip
    run.add_argument("--tune", type=_parse_tune, action="append", default=None, metavar="NAME=SPEC", help=_TUNE_HELP)
    run.add_argument("--exploit", type=_parse_exploit, default=None, metavar="KIND",
                     help="truncation:K:M or tournament[:MARGIN] (default: truncation of a quarter)")  # fmt: skip
    run.add_argument("--resample-probability", type=_parse_float, default=0.25, metavar="P",
                     help="chance that explore resamples instead of perturbing (default: 0.25)")  # fmt: skip
    run.add_argument("--eval-episodes", type=positive, default=8, metavar="N", help="episodes per fitness evaluation (default: 8)")
    run.add_argument("--seed", type=_seed, default=0, metavar="S", help="seed (default: 0)")
    run.add_argument("--run-dir", default=None, metavar="PATH", help="where to save (default: runs/pbt-<agent>-<env>-<timestamp>)")
    run.add_argument("--quiet", action="store_true", help="no progress bar")
    hyper = p.add_argument_group(f"{cls.__name__} fields")
    for flag in agent_flags(cls):
        hyper.add_argument(
            "--" + flag.name.replace("_", "-"), dest=flag.name, type=flag.parse, metavar=flag.metavar,
            default=argparse.SUPPRESS, help=f"default: {_format_default(flag.default)}",
        )  # fmt: skip


def _with_default_agent(argv: list[str]) -> list[str]:
    """`eqxrl train [--flags]` means `eqxrl train ppo [--flags]`."""
    if argv and argv[0] == "train" and (len(argv) == 1 or (argv[1] not in AGENTS and argv[1].startswith("-"))):
        return [argv[0], DEFAULT_AGENT, *argv[1:]]
    return argv


# --------------------------------------------------------------------- commands
def _default_run_dir(agent: str, env: str) -> pathlib.Path:
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    base = pathlib.Path("runs") / f"{agent}-{env.replace('/', '_')}-{stamp}"
    path, i = base, 1
    while path.exists():
        path, i = base.with_name(f"{base.name}-{i}"), i + 1
    return path


def _prepare_run_dir(args: argparse.Namespace) -> pathlib.Path:
    parser = args._parser
    if args.run_dir is None:
        path = _default_run_dir(args.agent, args.env)
    else:
        path = pathlib.Path(args.run_dir)
        if path.exists() and (not path.is_dir() or any(path.iterdir())):
            parser.error(f"--run-dir {str(path)!r} already exists and is not an empty directory")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        parser.error(f"--run-dir {str(path)!r} cannot be created: {e.strerror or _one_line(e)}")
    return path


def _print_returns(summary: dict[str, Any], seed: int, deterministic: bool) -> None:
    policy = "deterministic" if deterministic else "stochastic"
    print(f"  evaluation ({summary['episodes']} episodes per seed, {policy} policy):")
    for i, (mean, std) in enumerate(zip(summary["mean_per_seed"], summary["std_per_seed"])):
        print(f"    seed {seed + i:<6d} {mean:10.2f} ± {std:.2f}")
    n = len(summary["mean_per_seed"])
    print(f"    mean over {n} seed{'s' if n > 1 else ''}: {summary['mean']:.2f}")


def _train_command(args: argparse.Namespace, argv: list[str]) -> int:
    parser = args._parser
    given_fields = [flag.name for flag in agent_flags(AGENTS[args.agent]) if hasattr(args, flag.name)]
    if args.resume is not None:
        if args.config is not None or given_fields:
            parser.error("--resume RUN_DIR continues a run as it was configured: give no --config or agent fields")
        return _resume_command(args)
    if args.config is not None:
        if given_fields:
            parser.error(f"--config reproduces a run as it was: do not also set agent fields ({', '.join(given_fields)})")
        try:
            config = json.loads(pathlib.Path(args.config).read_text())
            agent = agent_from_config(config)
        except (OSError, json.JSONDecodeError, KeyError, TypeError, ValueError) as e:
            parser.error(f"--config {args.config!r}: {_one_line(e)}")
        name, env_name = config["agent"], config["env"]
        total_steps, num_seeds, seed = config["total_steps"], config["seeds"], config["seed"]
        checkpoint_every = args.checkpoint_every or config.get("checkpoint_every")
    else:
        name, env_name = args.agent, args.env
        total_steps, num_seeds, seed = args.total_steps, args.seeds, args.seed
        checkpoint_every = args.checkpoint_every
        cls = AGENTS[args.agent]
        kwargs = {field: getattr(args, field) for field in given_fields}
        try:
            agent = cls(make(args.env), **kwargs)
        except ValueError as e:
            parser.error(_one_line(e))
    base = agent.agent if isinstance(agent, Stacked) else agent
    per_iteration = base.steps_per_iteration
    num_iterations = total_steps // per_iteration
    if num_iterations < 1:
        parser.error(
            f"--total-steps {total_steps} must cover at least one iteration of "
            f"{type(base).__name__} ({per_iteration} env steps)"
        )
    if seed + num_seeds - 1 > MAX_SEED:
        parser.error(f"--seed {seed} with --seeds {num_seeds} goes past the largest seed {MAX_SEED}")
    args.agent, args.env = name, env_name
    run_dir = _prepare_run_dir(args)
    seeds = f"{num_seeds} seeds" if num_seeds > 1 else "1 seed"
    print(
        f"{type(base).__name__} on {env_name}: {num_iterations} iterations of {per_iteration} env steps, "
        f"{seeds} -> {run_dir} (compiling...)",
        flush=True,
    )
    try:
        _, _, info, summary = train_run(
            run_dir, agent, total_steps=total_steps, seed=seed, num_seeds=num_seeds, checkpoint_every=checkpoint_every,
            nan_guard=args.nan_guard, tensorboard=args.tensorboard, progress=not args.quiet,
            eval_episodes=args.eval_episodes, env_name=env_name, command=shlex.join(["eqxrl", *argv]),
        )  # fmt: skip
    except NonFiniteError as e:
        print(f"eqxrl: {e}", file=sys.stderr)
        print(f"eqxrl: the last checkpoint before it is in {run_dir}", file=sys.stderr)
        return 1
    _print_train_summary(type(base).__name__, env_name, seeds, info, summary, seed, run_dir)
    return 0


def _print_train_summary(name: str, env_name: str, seeds: str, info: Any, summary: dict, seed: int, run_dir: Any) -> None:
    print(f"{name} on {env_name}, {seeds}, {info.env_steps:,} env steps ({info.num_iterations} iterations)")
    print(f"  compile time     {info.compile_seconds:8.1f} s")
    print(f"  training time    {info.run_seconds:8.1f} s")
    print(f"  env steps/s      {info.steps_per_second:10,.0f}")
    _print_returns(summary, seed, deterministic=True)
    print(f"  run directory    {run_dir}")


def _resume_command(args: argparse.Namespace) -> int:
    parser = args._parser
    run_dir = pathlib.Path(args.resume)
    try:
        config = load_config(run_dir)
        if config.get("status") == "complete":
            parser.error(f"--resume {str(run_dir)!r}: the run is already complete")
        print(f"resuming {config['agent']} on {config['env']} from {run_dir} (compiling...)", flush=True)
        _, _, info, summary = resume_run(run_dir, progress=not args.quiet)
    except ValueError as e:
        parser.error(_one_line(e))
    except NonFiniteError as e:
        print(f"eqxrl: {e}", file=sys.stderr)
        return 1
    seeds = f"{config['seeds']} seeds" if config["seeds"] > 1 else "1 seed"
    _print_train_summary(config["agent"].upper(), config["env"], seeds, info, summary, config["seed"], run_dir)
    return 0


def _evaluate_command(args: argparse.Namespace) -> int:
    parser = args._parser
    try:
        agent, state, config = load_run(args.run_dir)
    except ValueError as e:
        parser.error(_one_line(e))
    seed = config["seed"] if args.seed is None else args.seed
    deterministic = not args.stochastic
    returns = evaluate(agent, state, eval_key(seed), num_episodes=args.episodes, deterministic=deterministic)
    print(f"{type(agent).__name__} on {config['env']} from {args.run_dir}")
    _print_returns(summarize_returns(returns), config["seed"], deterministic)
    return 0


def _default_space(agent: AbstractAgent) -> dict[str, Any]:
    from .pbt import LogUniform

    out = {}
    for name, value in agent.hyperparameters().items():
        v = float(np.asarray(value))
        if name.endswith("learning_rate") and v > 0:
            out[name] = LogUniform(v / 10, v * 10)
    return out


def _print_pbt_summary(pbt: Any, history: Any, run_dir: Any, seconds: float) -> None:
    best, fitness = history.best()
    print(
        f"PBT {type(pbt.agent).__name__} on {pbt.agent.env.name}: {pbt.population_size} members x "
        f"{int(history.env_steps[-1]):,} env steps, {history.num_generations} generations in {seconds:.1f} s"
    )
    last = history.fitness[-1]
    print(f"  fitness after the last generation: best {fitness:.2f} (member {best}), median {np.nanmedian(last):.2f}")
    for name, values in history.hyperparameters.items():
        print(f"  {name:<24s} best member: {values[-1, best]:.4g}")
    if run_dir is not None:
        print(f"  run directory    {run_dir}")


def _pbt_command(args: argparse.Namespace, argv: list[str]) -> int:
    import time as _time

    import jax

    from .pbt import PBT, resume

    parser = args._parser
    if args.resume is not None:
        if args.agent is not None:
            parser.error("--resume RUN_DIR takes no AGENT (the run directory names it)")
        start = _time.perf_counter()
        try:
            population, history = resume(args.resume, progress=True)
        except ValueError as e:
            parser.error(_one_line(e))
        from .pbt import pbt_from_config

        import json as _json

        pbt = pbt_from_config(_json.loads((pathlib.Path(args.resume) / "pbt.json").read_text()))
        _print_pbt_summary(pbt, history, args.resume, _time.perf_counter() - start)
        return 0
    if args.agent is None:
        parser.error("give an AGENT (" + ", ".join(AGENTS) + ") or --resume RUN_DIR")
    cls = AGENTS[args.agent]
    kwargs = {flag.name: getattr(args, flag.name) for flag in agent_flags(cls) if hasattr(args, flag.name)}
    try:
        agent = cls(make(args.env), **kwargs)
        space = dict(args.tune) if args.tune else _default_space(agent)
        pbt = PBT(
            agent, space, population_size=args.population, ready=args.ready, exploit=args.exploit,
            resample_probability=args.resample_probability, eval_episodes=args.eval_episodes,
        )  # fmt: skip
        generations = pbt.num_generations(args.total_steps)
    except ValueError as e:
        parser.error(_one_line(e))
    if args.run_dir is None:
        run_dir = _default_run_dir(f"pbt-{args.agent}", args.env)
    else:
        run_dir = pathlib.Path(args.run_dir)
        if run_dir.exists() and (not run_dir.is_dir() or any(run_dir.iterdir())):
            parser.error(f"--run-dir {str(run_dir)!r} already exists and is not an empty directory")
    print(
        f"PBT {cls.__name__} on {args.env}: {args.population} members, {generations} generations of "
        f"{pbt.steps_per_generation} env steps, tuning {', '.join(space)} -> {run_dir} (compiling...)",
        flush=True,
    )
    start = _time.perf_counter()
    _, history = pbt.run(jax.random.key(args.seed), args.total_steps, progress=not args.quiet, run_dir=run_dir)
    _print_pbt_summary(pbt, history, run_dir, _time.perf_counter() - start)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Run the `eqxrl` command line.

    **Arguments:** `argv`, the arguments without the program name (default `sys.argv[1:]`).

    **Returns:** the exit status, 0 on success. Bad arguments raise `SystemExit(2)`
    after printing the usage and a one-line reason on stderr.
    """
    argv = _with_default_agent(list(sys.argv[1:] if argv is None else argv))
    args = build_parser().parse_args(argv)
    try:
        if args.command == "train":
            return _train_command(args, argv)
        if args.command == "pbt":
            return _pbt_command(args, argv)
        return _evaluate_command(args)
    except KeyboardInterrupt:
        print("eqxrl: interrupted", file=sys.stderr)
        return 130
