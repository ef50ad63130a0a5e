"""Command-line flags generated from an agent's dataclass fields, and the defaults of a run."""

import argparse
import dataclasses
import types
import typing
from collections.abc import Callable
from typing import Any

from ..agents import AbstractAgent, keyword_types, set_hyperparameter
from ..components import (
    AbstractLossTerm, AbstractOptimizer, AbstractReplayBuffer, AbstractSchedule, AbstractTorso,
    as_buffer, as_learning_rate, as_optimizer, as_terms, as_torso,
)  # fmt: skip
from ..core import is_float_converter, trust_modules
from ._parse import SCALARS, or_none, tuple_of
from ._specs import SET_HELP, SPEC_HELP, SPEC_PARSERS, parse_set

DEFAULT_AGENT = "ppo"
DEFAULT_ENV = "CartPole-v1"
DEFAULT_EVAL_EPISODES = 32


TRUST_HELP = (
    "MODULE, repeatable: also import classes of MODULE (and its submodules) that the run directory or "
    "config names; without it only eqxrl's own and registered classes load (a run directory is data: "
    "opening one runs no code it names)"
)


def parse_module(text: str) -> str:
    """A dotted module name (`my_pkg` or `my_pkg.sub`), for `--trust`."""
    try:
        return trust_modules(text, "--trust")[0]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a module name like my_pkg or my_pkg.sub, got {text!r}") from None


def add_trust_flag(group: Any) -> None:
    """Add `--trust MODULE` (repeatable) to a command that loads a run directory or a config.

    `main` reads it from the command line before parsing the rest (`trusted_in_argv`),
    so that it covers the class specs of other flags too; this declaration gives it
    help and a parser."""
    group.add_argument("--trust", type=parse_module, action="append", default=argparse.SUPPRESS, metavar="MODULE", help=TRUST_HELP)


def trusted_in_argv(argv: list[str]) -> tuple[str, ...]:
    """The modules `--trust MODULE` (or `--trust=MODULE`) names in `argv`, checked.

    Raises `ValueError` (one line, naming `--trust`) for a value that is not a module name."""
    found = []
    for i, arg in enumerate(argv):
        if arg == "--":
            break
        if arg == "--trust":
            if i + 1 >= len(argv):
                raise ValueError("argument --trust: expected one argument")
            found.append(argv[i + 1])
        elif arg.startswith("--trust="):
            found.append(arg.partition("=")[2])
    for text in found:
        try:
            parse_module(text)
        except argparse.ArgumentTypeError as e:
            raise ValueError(f"argument --trust: {e}") from None
    return tuple(found)


@dataclasses.dataclass(frozen=True)
class Flag:
    name: str
    parse: Callable[[str], Any]
    metavar: str
    default: Any  # dataclasses.MISSING for a required field


def from_annotation(tp: Any) -> tuple[Callable[[str], Any], str] | None:
    if tp in SCALARS:
        return SCALARS[tp]
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
        elem = from_annotation(args[0])
        if elem is not None:
            return tuple_of(elem[0]), f"{elem[1]},{elem[1]},..."
    if origin in (typing.Union, types.UnionType):
        rest = [a for a in args if a is not type(None)]
        if len(rest) == 1 and len(rest) < len(args):
            inner = from_annotation(rest[0])
            if inner is not None:
                return or_none(inner[0]), inner[1] + "|none"
    return None


def from_value(value: Any, annotation: Any) -> tuple[Callable[[str], Any], str] | None:
    if value is None:
        found = from_annotation(annotation)
        if found is None or found[1].endswith("|none"):
            return found
        return or_none(found[0]), found[1] + "|none"
    for kind in (bool, int, float, str):  # bool before int: bool is a subclass of int
        if isinstance(value, kind):
            return SCALARS[kind]
    if isinstance(value, tuple):
        if not value:
            return from_annotation(annotation)
        elem = from_value(value[0], None)
        if elem is not None and all(isinstance(v, type(value[0])) for v in value):
            return tuple_of(elem[0]), f"{elem[1]},{elem[1]},..."
    return None


def spec_kind(field: dataclasses.Field) -> str | None:
    """Which module-valued flag a field takes (`"torso"`, `"buffer"`, `"optimizer"`,
    `"terms"`, `"rate"`; see `eqxrl.cli._specs`), or None for a plain one."""
    if isinstance(field.type, dataclasses.InitVar):  # an init-only keyword: by the modules it takes
        kinds = {
            AbstractSchedule: "rate", AbstractReplayBuffer: "buffer", AbstractTorso: "torso",
            AbstractOptimizer: "optimizer", AbstractLossTerm: "terms",
        }  # fmt: skip  (a learning rate takes a schedule too; loss terms come as a tuple of them)
        inner = [typing.get_args(a)[0] if typing.get_origin(a) is tuple else a for a in keyword_types(field)]
        return next((kind for base, kind in kinds.items() if any(isinstance(a, type) and issubclass(a, base) for a in inner)), None)
    converter = field.metadata.get("converter")
    kinds = {as_torso: "torso", as_optimizer: "optimizer", as_terms: "terms", as_learning_rate: "rate", as_buffer: "buffer"}
    return kinds.get(converter)


def agent_flags(cls: type[AbstractAgent]) -> list[Flag]:
    """The command-line flags of an agent class: one per keyword of its constructor (`cls.keywords()`).

    **Arguments:** `cls`, an agent class (a dataclass, like every `eqx.Module`).

    **Returns:** the flags (name, parser, metavar, default); fields whose type
    cannot be parsed from text are left out.
    """
    flags = []
    for field in cls.keywords().values():
        if field.default is not dataclasses.MISSING:
            default = field.default
        elif field.default_factory is not dataclasses.MISSING:
            default = field.default_factory()
        else:
            default = dataclasses.MISSING
        kind = spec_kind(field)
        if kind is not None:
            found = SPEC_PARSERS[kind]
        elif is_float_converter(field.metadata.get("converter")):
            found = SCALARS[float]  # a float leaf, even with an int default
        else:
            annotation = field.type.type if isinstance(field.type, dataclasses.InitVar) else field.type
            found = from_annotation(annotation) if default is dataclasses.MISSING else from_value(default, annotation)
        if found is not None:
            flags.append(Flag(field.name, found[0], found[1], default))
    return flags


def format_default(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, tuple):
        return ",".join(format_default(v) for v in value) or "none"
    if value is None:
        return "none"
    return str(value)


def first_line(doc: str | None) -> str:
    return (doc or "").strip().split("\n\n")[0].replace("\n", " ")


def add_field_flags(parser: Any, cls: type[AbstractAgent]) -> None:
    """Add one flag per field of `cls` (see `agent_flags`) to `parser`, in a group of their own.

    Only flags given on the command line reach the agent: its own defaults apply
    otherwise; a field without a default is a required flag.
    """
    group = parser.add_argument_group(f"{cls.__name__} fields")
    group.add_argument("--set", dest="set_paths", type=parse_set, action="append", default=[], metavar="PATH=VALUE", help=SET_HELP)
    for flag in agent_flags(cls):
        required = flag.default is dataclasses.MISSING
        group.add_argument(
            "--" + flag.name.replace("_", "-"),
            dest=flag.name,
            type=flag.parse,
            metavar=flag.metavar,
            default=argparse.SUPPRESS,
            required=required,
            help=("required" if required else f"default: {format_default(flag.default)}")
            + (f"; {SPEC_HELP[flag.metavar]}" if flag.metavar in SPEC_HELP else ""),
        )


def build_agent(cls: type[AbstractAgent], env: Any, given: dict[str, Any], sets: Any) -> AbstractAgent:
    """**Returns:** `cls(env, **given)` with every `--set PATH=VALUE` applied (checked like a field)."""
    agent = cls(env, **given)
    for path, value in dict(sets or []).items():
        agent = set_hyperparameter(agent, path, value)
    return agent


def given_fields(args: Any, cls: type[AbstractAgent]) -> dict[str, Any]:
    """**Returns:** the fields of `cls` set by flags on the command line (parsed values, by field name)."""
    return {flag.name: getattr(args, flag.name) for flag in agent_flags(cls) if hasattr(args, flag.name)}
