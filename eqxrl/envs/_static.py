"""A hashable handle to a foreign simulator object, for use in static fields, and the jitted
`reset`/`step` of brax-style simulators (brax, MuJoCo Playground) behind one."""

import functools
from typing import Any

import jax

from ..core import foreign_promotion


class StaticHandle:
    """Holds an object (a gymnax or brax env) and compares by a value key.

    Equinox static fields take part in `filter_jit`'s cache key; a gymnax env
    compares by identity, so two `make("CartPole-v1")` calls would otherwise
    compile twice. Comparing by `(name, kwargs)` keeps one compiled program.
    """

    __slots__ = ("obj", "key")

    def __init__(self, obj: Any, key: Any):
        self.obj = obj
        self.key = key

    def __eq__(self, other: object) -> bool:
        return isinstance(other, StaticHandle) and self.key == other.key

    def __hash__(self) -> int:
        return hash(self.key)

    def __repr__(self) -> str:
        return f"StaticHandle({self.key!r})"


def hashable_or(key: Any, fallback: Any) -> Any:
    """`key` if it can be hashed (a `StaticHandle`'s key must be: static fields are hashed),
    else `fallback` (a keyword value that is an array, say)."""
    try:
        hash(key)
    except TypeError:
        return fallback
    return key


@functools.partial(jax.jit, static_argnums=0)
def brax_style_reset(handle: StaticHandle, key: Any) -> Any:
    """`handle.obj.reset(key)`, jitted (one program per simulator: eager brax-style resets
    dispatch op by op), under standard dtype promotion."""
    with foreign_promotion():
        return handle.obj.reset(key)


@functools.partial(jax.jit, static_argnums=0)
def brax_style_step(handle: StaticHandle, state: Any, action: Any) -> Any:
    """`handle.obj.step(state, action)`, jitted, under standard dtype promotion."""
    with foreign_promotion():
        return handle.obj.step(state, action)
