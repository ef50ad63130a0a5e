"""Parsers of command-line values: numbers written as 5e5, booleans, tuples like 64,64, seeds,
PBT's search-space and exploit specs, and `--log`'s sink names."""

import argparse
from collections.abc import Callable
from typing import Any

import numpy as np

from ..core import one_line
from ..loop import SINKS
from ..pbt import Choice, IntLogUniform, IntUniform, LogUniform, Tournament, Truncation, Uniform
from ..runs import MAX_SEED

_TRUE = {"true", "t", "yes", "y", "on", "1"}
_FALSE = {"false", "f", "no", "n", "off", "0"}


def parse_bool(text: str) -> bool:
    value = text.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


def parse_int(text: str) -> int:
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


def parse_float(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number (or inf), got {text!r}") from None


def is_negative_number(text: str) -> bool:
    """Whether `text` is a negative number as `float` reads it (`-1e-3`, `-inf`, `-nan`):
    argparse takes only `-1` and `-0.5` for numbers, and anything else after a flag for
    another flag."""
    if not text.startswith("-") or text == "-":
        return False
    try:
        float(text)
    except ValueError:
        return False
    return True


def attach_negative_values(argv: list[str]) -> list[str]:
    """`--flag -inf` as `--flag=-inf` (and `-1e-3`, `-nan`), so that argparse gives the value
    to the flag's parser (which accepts it or refuses it with the field's own message)
    instead of reading it as an unknown option. A value argparse already reads (`-1`) and
    anything after `--` are left as they are."""
    out: list[str] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--":
            return out + argv[i:]
        nxt = argv[i + 1] if i + 1 < len(argv) else None
        if arg.startswith("--") and "=" not in arg and nxt is not None and is_negative_number(nxt):
            out.append(f"{arg}={nxt}")
            i += 2
            continue
        out.append(arg)
        i += 1
    return out


def parse_str(text: str) -> str:
    return text


MAX_COUNT = 2**31 - 1
"""The largest count a flag takes: env steps, iterations and episodes are counted in int32."""


def positive(parse: Callable[[str], int], maximum: int = MAX_COUNT) -> Callable[[str], int]:
    """`parse`, then a check that the value is in `[1, maximum]`."""

    def parse_positive(text: str) -> int:
        value = parse(text)
        if value < 1:
            raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
        if value > maximum:
            raise argparse.ArgumentTypeError(f"expected a positive integer of at most {maximum:,}, got {text!r}")
        return value

    return parse_positive


def parse_seed(text: str) -> int:
    value = parse_int(text)
    if not 0 <= value <= MAX_SEED:
        raise argparse.ArgumentTypeError(f"expected a seed in [0, {MAX_SEED}], got {text!r}")
    return value


def tuple_of(parse: Callable[[str], Any]) -> Callable[[str], tuple]:
    def parse_tuple(text: str) -> tuple:
        body = text.strip().strip("()[]").strip()
        if not body:
            return ()
        try:
            return tuple(parse(part.strip()) for part in body.split(","))
        except argparse.ArgumentTypeError as e:
            raise argparse.ArgumentTypeError(f"expected comma-separated values like 64,64: {e}") from None

    return parse_tuple


def or_none(parse: Callable[[str], Any]) -> Callable[[str], Any]:
    def parse_optional(text: str) -> Any:
        return None if text.strip().lower() == "none" else parse(text)

    return parse_optional


SCALARS: dict[type, tuple[Callable[[str], Any], str]] = {
    bool: (parse_bool, "{true,false}"),
    int: (parse_int, "INT"),
    float: (parse_float, "FLOAT"),
    str: (parse_str, "STR"),
}


TUNE_HELP = (
    "NAME=SPEC, repeatable: SPEC is log:LOW:HIGH, uniform:LOW:HIGH, int:LOW:HIGH, intlog:LOW:HIGH or "
    "choice:V1,V2,... (default: every *learning_rate leaf, log-uniform over [default/10, default*10])"
)


def parse_tune(text: str) -> tuple[str, Any]:
    name, sep, spec = text.partition("=")
    kind, _, rest = spec.partition(":")
    if not sep or not name or not kind:
        raise argparse.ArgumentTypeError(f"expected NAME=SPEC like learning_rate=log:1e-4:1e-2, got {text!r}")
    try:
        if kind == "choice":
            return name, Choice(tuple(parse_float(v) for v in rest.split(",")))
        low, high = rest.split(":")
        makers = {"log": (LogUniform, parse_float), "uniform": (Uniform, parse_float),
                  "int": (IntUniform, parse_int), "intlog": (IntLogUniform, parse_int)}  # fmt: skip
        if kind not in makers:
            raise argparse.ArgumentTypeError(f"unknown domain {kind!r} (log, uniform, int, intlog, choice)")
        cls, parse = makers[kind]
        return name, cls(parse(low), parse(high))
    except ValueError as e:  # a domain's own check, or a malformed LOW:HIGH
        raise argparse.ArgumentTypeError(f"{text!r}: {one_line(e)}") from None


def parse_exploit(text: str) -> Any:
    kind, _, rest = text.partition(":")
    try:
        if kind == "truncation":
            k, m = (int(v) for v in rest.split(":"))
            return Truncation(k, m)
        if kind == "tournament":
            return Tournament(float(rest) if rest else 0.0)
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"{text!r}: {one_line(e)}") from None
    raise argparse.ArgumentTypeError(f"expected truncation:K:M or tournament[:MARGIN], got {text!r}")


def parse_log(text: str) -> list[str]:
    """`--log tensorboard,wandb,mlflow`: sink names (`eqxrl.loop.SINKS`), comma-separated."""
    names = [n.strip() for n in text.split(",")]
    unknown = [n for n in names if n not in SINKS]
    if unknown or not text.strip():
        raise argparse.ArgumentTypeError(f"expected sink names from {', '.join(sorted(SINKS))} separated by commas, got {text!r}")
    return list(dict.fromkeys(names))
