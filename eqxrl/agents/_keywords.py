"""Init-only keywords: the convenient arguments (`learning_rate=3e-4`, `prioritized=True`) an
agent's constructor turns into the modules it stores (its optimizer, its replay buffer), as
`optimistix.BFGS.__init__` builds its descent. They are `dataclasses.InitVar`s of the agent: the
dataclass constructor takes them, `__post_init__` builds the module from them, and the agent
stores the module only, so each number lives once, where it is used. `AbstractAgent.aliases`
keeps the keywords' names working for `--set`, sweeps and PBT; `AbstractAgent.keywords()` lists
them for the command line and `config.json`."""

import dataclasses
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any

import equinox as eqx
import jax
from jaxtyping import Array

from ..components import AbstractSchedule, Adam, EpsilonSchedule, PrioritizedReplayBuffer, ReplayBuffer, check_epsilon, check_learning_rate
from ..core import check_hyperparameter, check_positive_int


LearningRate = float | Array | AbstractSchedule | Callable[..., Any]
"""What a learning-rate keyword takes: a number, an eqxrl schedule, or an optax schedule (a callable)."""

_SLOT = object()  # (module_from_keywords: read the module from the agent's field)


def _same(a: Any, b: Any) -> bool:
    """Whether two keyword values are the same (numbers, one-element arrays, strings, modules)."""
    if a is b:  # (a value read back from the module: dataclasses.replace, also under a trace)
        return True
    if isinstance(a, jax.core.Tracer) or isinstance(b, jax.core.Tracer):  # (no comparison traced into the program)
        return False
    try:
        if isinstance(a, eqx.Module) or isinstance(b, eqx.Module):
            return bool(eqx.tree_equal(a, b))
        return bool(a == b)
    except (TypeError, ValueError):
        return False


def module_from_keywords(
    agent: Any, slot: str, keywords: Mapping[str, Any], what: str, build: Callable[[], Any], current: Any = _SLOT,
    read: Callable[[str, Any], Any] | None = None,
) -> Any:
    """**Returns:** the module the agent's `slot` holds (or `current`, the value of an init-only
    `slot`), or (None) `build()`, from the init-only `keywords`. With the module given, a keyword
    whose value is neither its default nor what the module says (`read(name, default)`; by default
    `agent.init_only_value`: a `dataclasses.replace` passes those back) is refused in one line
    naming `slot`, `what` it is, and the keywords."""
    current = getattr(agent, slot) if current is _SLOT else current
    if current is None:
        return build()
    fields, read = type(agent).__dataclass_fields__, read or agent.init_only_value
    given = [
        name for name, value in keywords.items()
        if not _same(value, fields[name].default) and not _same(value, read(name, fields[name].default))
    ]  # fmt: skip
    if given:
        raise ValueError(f"{type(agent).__name__}({slot}) is {what} itself: with it given, {given} must stay unset (or agree with it)")
    return current


def default_adam(owner: str, learning_rate: Any, max_grad_norm: Any, anneal_lr: bool = False, grad_clip: str = "global_norm") -> Adam:
    """The Adam an agent builds from its keywords, each checked under the agent's name."""
    if grad_clip not in ("global_norm", "value", "none"):
        raise ValueError(f"{owner}(grad_clip) must be 'global_norm', 'value' or 'none', got {grad_clip!r}")
    check_learning_rate(owner, "learning_rate", learning_rate)
    check_hyperparameter(owner, "max_grad_norm", max_grad_norm, lambda v: v > 0, "> 0 (inf disables clipping)")
    return Adam(learning_rate, max_grad_norm, clip=grad_clip, anneal=anneal_lr)


def default_buffer(owner: str, buffer_size: int, prioritized: bool, per_alpha: Any) -> Any:
    """The replay buffer an off-policy agent builds from its keywords, each checked under its name."""
    check_positive_int(owner, "buffer_size", buffer_size)
    check_hyperparameter(owner, "per_alpha", per_alpha, lambda v: v >= 0, ">= 0")
    return PrioritizedReplayBuffer(buffer_size, alpha=per_alpha) if prioritized else ReplayBuffer(buffer_size)


def init_only_names(cls: type) -> list[str]:
    """The names of `cls`'s init-only keywords, in the order the dataclass passes them to `__post_init__`."""
    return [name for name, f in cls.__dataclass_fields__.items() if isinstance(f.type, dataclasses.InitVar)]


def keyword_types(field: dataclasses.Field) -> tuple[Any, ...]:
    """The types a constructor keyword takes, from the dataclass field that declares it: an
    init-only keyword's `InitVar[float | Array]` gives `(float, Array)`; a field's annotation
    likewise (`(int, NoneType)` for `int | None`). For the command line's flags and the
    configs' float keywords."""
    tp = field.type.type if isinstance(field.type, dataclasses.InitVar) else field.type
    return typing.get_args(tp) if typing.get_origin(tp) in (typing.Union, types.UnionType) else (tp,)


EPSILON_KEYWORDS = {"eps_start": "start", "eps_end": "end", "exploration_fraction": "fraction", "epsilon_decay": "decay"}
"""The init-only keywords that build an `EpsilonSchedule`, and the field each sets."""


def epsilon_schedule(owner: str, eps_start: Any, eps_end: Any, exploration_fraction: Any, epsilon_decay: str) -> EpsilonSchedule:
    """The exploration schedule an agent builds from its keywords, each checked under the agent's name."""
    check_epsilon(owner, eps_start, eps_end, exploration_fraction, epsilon_decay, tuple(EPSILON_KEYWORDS))
    return EpsilonSchedule(eps_start, eps_end, exploration_fraction, epsilon_decay)
