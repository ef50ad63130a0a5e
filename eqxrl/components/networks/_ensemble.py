"""Ensembles of identical networks, built and applied with `eqx.filter_vmap`."""

from collections.abc import Callable
from typing import Any, Generic, TypeVar

import equinox as eqx
import jax
from jaxtyping import PyTree

from ...core import Key, check_positive_int
from ._init import batched_orthogonal

M = TypeVar("M", bound=eqx.Module)


class Ensemble(eqx.Module, Generic[M]):
    """`num` independently initialised copies of a network, stored as one stacked module.

    Calling the ensemble applies every member to the same inputs and returns
    outputs with a leading `num` axis (twin critics: `q1, q2 = ensemble(obs, a)`).
    """

    members: M
    num: int = eqx.field(static=True)

    def __init__(self, make: Callable[[Key], M], num: int, *, key: Key):
        """**Arguments:**

        - `make`: `key -> module`, e.g. `lambda k: ContinuousQHead(3, 1, key=k)`.
        - `num`: number of members (>= 1).
        - `key`: PRNG key; each member gets its own split.
        """
        num = check_positive_int("Ensemble", "num", num)
        # A member's orthogonal weights in one batched draw (see `batched_orthogonal`).
        self.members = eqx.filter_vmap(batched_orthogonal(make))(jax.random.split(key, num))
        self.num = num

    def __call__(self, *args: Any) -> PyTree:
        """**Returns:** each member's output on `args`, stacked on a new leading axis."""
        return eqx.filter_vmap(lambda m: m(*args))(self.members)

    def member(self, i: int) -> M:
        """**Returns:** the `i`-th member as a standalone module."""
        if not -self.num <= i < self.num:
            raise ValueError(f"Ensemble.member(i) needs -{self.num} <= i < {self.num}, got {i}")
        arrays, static = eqx.partition(self.members, eqx.is_array)
        return eqx.combine(jax.tree.map(lambda x: x[i], arrays), static)
