"""Command-line values for an agent's module-valued fields: torsos, buffers, optimizers,
loss terms and learning-rate schedules, and `--set PATH=VALUE` for any hyperparameter.

Every such flag takes a short preset (`--actor-torso cnn`, `--buffer prioritized:100000`,
`--critic-optimizer adamw:3e-4`, `--learning-rate cosine:3e-4`, `--policy-loss-terms l2:1e-4`),
a class given as `package.module:Name` (built with no arguments; a torso class is
used as a user's torso), or the JSON a run's `config.json` holds for that field
(`{"class": "eqxrl.components:MLPTorso", "hidden_sizes": [64, 64]}`).

A class named as `package.module:Name` is the user's own choice, so its module is
imported (trusted for that flag); it must be a subclass of the family's base
(`AbstractReplayBuffer` for `--buffer`, an Equinox module for a torso) before it
is built. Classes inside JSON resolve like a run directory's: eqxrl's own,
registered ones, and `--trust MODULE`.
"""

import argparse
import json
from collections.abc import Callable
from typing import Any

import equinox as eqx

from ..components import (
    AbstractLossTerm,
    AbstractOptimizer,
    AbstractReplayBuffer,
    AbstractSchedule,
    AbstractRecurrentTorso,
    AbstractTorso,
    CNNTorso,
    GRUTorso,
    LSTMTorso,
    ConstantSchedule,
    CosineSchedule,
    ExponentialSchedule,
    L2Penalty,
    LinearSchedule,
    MLPTorso,
    NamedOptimizer,
    Adam,
    PrioritizedReplayBuffer,
    ReplayBuffer,
    WarmupCosineSchedule,
    as_torso,
)
from ..core import from_spec, import_class, one_line
from ._parse import parse_float, parse_int, tuple_of

TORSO_HELP = (
    "mlp:64,64[:ACTIVATION], cnn (MinAtar), nature-cnn, gru[:HIDDEN[:ENCODER]] or lstm[:HIDDEN[:ENCODER]] "
    "(PPO with --shared-torso true; ENCODER e.g. 64 or 64,64, or none), package.module:Class, or JSON"
)
BUFFER_HELP = "uniform[:CAPACITY], prioritized[:CAPACITY[:ALPHA]], package.module:Class, or JSON"
OPTIMIZER_HELP = "adam:LR[:MAX_GRAD_NORM], adamw:LR[:WEIGHT_DECAY], sgd:LR, rmsprop:LR, or JSON"
TERMS_HELP = "none, or l2:COEF (comma-separated for several), package.module:Class, or JSON"
RATE_HELP = (
    "a number, constant:LR, linear:LR[:END], exponential:LR:END, cosine:LR[:ALPHA], "
    "warmup-cosine:PEAK[:WARMUP[:END]], or JSON"
)
SET_HELP = (
    "PATH=VALUE, repeatable: set any hyperparameter by its dotted path (as agent.hyperparameters() "
    "lists them, e.g. buffer.alpha=0.7 or critic_optimizer.learning_rate=1e-3), or by a flat name that names one path"
)


def _generic(text: str, what: str, expected: type) -> Any:
    """JSON, or a class path (a subclass of `expected`); None when `text` is neither (a preset)."""
    if text[:1] in "{[":
        try:
            return from_spec(json.loads(text), what)
        except json.JSONDecodeError as e:
            raise ValueError(f"{what} is not valid JSON: {e}") from None
    head = text.partition(":")[0]
    if ":" in text and "." in head:
        cls = import_class(text, f"the class of {what}", expected, trusted=True)
        # A torso class is kept (as_torso makes it a torso); any other class is built with no arguments.
        return cls() if what != "torso" else cls


def _args(rest: str, parsers: list[Callable[[str], Any]], text: str, usage: str) -> list[Any]:
    parts = rest.split(":") if rest else []
    if len(parts) > len(parsers):
        raise ValueError(f"expected {usage}, got {text!r}")
    return [p(v) for p, v in zip(parsers, parts)]


def _spec_or_preset(text: str, what: str, expected: type, help: str, presets: dict[str, Callable[[str, str], Any]]) -> Any:
    """JSON or a class path (`_generic`), else a preset `KIND[:ARGS]` that `presets[KIND](ARGS, text)`
    builds (None when the arguments make it no preset after all); anything else raises
    `unknown WHAT 'TEXT'; expected HELP`."""
    found = _generic(text, what, expected)
    if found is None:
        kind, _, rest = text.partition(":")
        found = presets[kind](rest, text) if kind in presets else None
    if found is None:
        raise ValueError(f"unknown {what} {text!r}; expected {help}")
    return found


def _mlp_torso(rest: str, text: str) -> MLPTorso:
    sizes, _, activation = rest.partition(":")
    return MLPTorso(tuple_of(parse_int)(sizes) if sizes else (64, 64), activation or "tanh")


def _recurrent_torso(cls: type[GRUTorso] | type[LSTMTorso]) -> Callable[[str, str], AbstractRecurrentTorso]:
    def make(rest: str, text: str) -> AbstractRecurrentTorso:
        hidden, _, encoder = rest.partition(":")
        sizes = () if encoder == "none" else tuple_of(parse_int)(encoder) if encoder else (64,)
        return cls(parse_int(hidden) if hidden else 64, sizes)

    return make


_TORSOS: dict[str, Callable[[str, str], Any]] = {
    "mlp": _mlp_torso,
    "cnn": lambda rest, text: None if rest else CNNTorso.minatar(),
    "minatar-cnn": lambda rest, text: None if rest else CNNTorso.minatar(),
    "nature-cnn": lambda rest, text: None if rest else CNNTorso.nature(),
    "gru": _recurrent_torso(GRUTorso),
    "lstm": _recurrent_torso(LSTMTorso),
}


def parse_torso(text: str) -> AbstractTorso | AbstractRecurrentTorso:
    return as_torso(_spec_or_preset(text, "torso", eqx.Module, TORSO_HELP, _TORSOS))


def _prioritized_buffer(rest: str, text: str) -> PrioritizedReplayBuffer:
    args = _args(rest, [parse_int, parse_float], text, "prioritized[:CAPACITY[:ALPHA]]")
    return PrioritizedReplayBuffer(*args[:1], **({"alpha": args[1]} if len(args) > 1 else {}))


_BUFFERS: dict[str, Callable[[str, str], Any]] = {
    "uniform": lambda rest, text: ReplayBuffer(*_args(rest, [parse_int], text, "uniform[:CAPACITY]")),
    "prioritized": _prioritized_buffer,
}


def parse_buffer(text: str) -> AbstractReplayBuffer:
    return _spec_or_preset(text, "buffer", AbstractReplayBuffer, BUFFER_HELP, _BUFFERS)


def _adam(rest: str, text: str) -> Adam:
    args = _args(rest, [parse_float, parse_float], text, "adam:LR[:MAX_GRAD_NORM]")
    if not args:
        raise ValueError(f"expected adam:LR[:MAX_GRAD_NORM], got {text!r}")
    return Adam(*args)


def _named_optimizer(kind: str, most: int) -> Callable[[str, str], NamedOptimizer]:
    def make(rest: str, text: str) -> NamedOptimizer:
        args = _args(rest, [parse_float] * most, text, f"{kind}:LR" + ("[:WEIGHT_DECAY]" if most == 2 else ""))
        if not args:
            raise ValueError(f"expected {kind}:LR, got {text!r}")
        # A module of numbers, not an optax transformation: config.json can hold it, and
        # its checks refuse a learning rate that is not finite and > 0 like any other.
        return NamedOptimizer(kind, *args)

    return make


_OPTIMIZERS: dict[str, Callable[[str, str], Any]] = {
    "adam": _adam,
    **{kind: _named_optimizer(kind, most) for kind, most in {"adamw": 2, "sgd": 1, "rmsprop": 1}.items()},
}


def parse_optimizer(text: str) -> AbstractOptimizer:
    return _spec_or_preset(text, "optimizer", AbstractOptimizer, OPTIMIZER_HELP, _OPTIMIZERS)


def parse_loss_terms(text: str) -> tuple[AbstractLossTerm, ...]:
    found = _generic(text, "loss terms", AbstractLossTerm)
    if found is not None:
        return found if isinstance(found, tuple) else (found,)
    if text == "none":
        return ()
    terms = []
    for item in text.split(","):
        kind, _, rest = item.partition(":")
        if kind != "l2":
            raise ValueError(f"unknown loss term {item!r}; expected {TERMS_HELP}")
        terms.append(L2Penalty(*_args(rest, [parse_float], item, "l2:COEF")))
    return tuple(terms)


def _schedule(kind: str, cls: type[AbstractSchedule], most: int) -> Callable[[str, str], AbstractSchedule]:
    def make(rest: str, text: str) -> AbstractSchedule:
        args = _args(rest, [parse_float] * most, text, f"{kind}:VALUE[...]")
        if not args:
            raise ValueError(f"expected {kind}:VALUE, got {text!r}; {RATE_HELP}")
        if cls is ExponentialSchedule and len(args) != 2:
            raise ValueError(f"expected exponential:LR:END, got {text!r}; {RATE_HELP}")
        if cls is WarmupCosineSchedule and len(args) == 3:
            return cls(args[0], args[1], end_value=args[2])
        return cls(*args)

    return make


_SCHEDULES: dict[str, Callable[[str, str], Any]] = {
    "constant": _schedule("constant", ConstantSchedule, 1),
    "linear": _schedule("linear", LinearSchedule, 2),
    "exponential": _schedule("exponential", ExponentialSchedule, 2),
    "cosine": _schedule("cosine", CosineSchedule, 2),
    "warmup-cosine": _schedule("warmup-cosine", WarmupCosineSchedule, 3),
}


def parse_learning_rate(text: str) -> Any:
    try:
        return parse_float(text)
    except (argparse.ArgumentTypeError, ValueError):
        pass
    return _spec_or_preset(text, "learning rate", AbstractSchedule, RATE_HELP, _SCHEDULES)


def parse_set(text: str) -> tuple[str, float]:
    path, sep, value = text.partition("=")
    if not sep or not path:
        raise argparse.ArgumentTypeError(f"expected PATH=VALUE like buffer.alpha=0.7, got {text!r}")
    return path, parse_float(value)


def as_argparse(parse: Callable[[str], Any]) -> Callable[[str], Any]:
    """`parse` with its ValueErrors as argparse's `ArgumentTypeError` (a clean usage error)."""

    def parse_flag(text: str) -> Any:
        try:
            return parse(text)
        except ValueError as e:
            raise argparse.ArgumentTypeError(one_line(e)) from None

    parse_flag.__name__ = parse.__name__
    return parse_flag


SPEC_PARSERS: dict[str, tuple[Callable[[str], Any], str]] = {
    "torso": (as_argparse(parse_torso), "TORSO"),
    "buffer": (as_argparse(parse_buffer), "BUFFER"),
    "optimizer": (as_argparse(parse_optimizer), "OPTIMIZER"),
    "terms": (as_argparse(parse_loss_terms), "TERMS"),
    "rate": (as_argparse(parse_learning_rate), "RATE"),
}
"""Parser and metavar of each kind of module-valued flag."""

SPEC_HELP = {"TORSO": TORSO_HELP, "BUFFER": BUFFER_HELP, "OPTIMIZER": OPTIMIZER_HELP, "TERMS": TERMS_HELP, "RATE": RATE_HELP}
