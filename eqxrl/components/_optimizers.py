"""Optimizers as modules: eqxrl's Adam with array-leaf hyperparameters, or any optax transformation."""

import abc
import itertools
import math
from typing import Any, Literal

import equinox as eqx
import jax
import jax.numpy as jnp
import optax
from jaxtyping import Array, Float, PyTree

from ..core import concrete_scalar, foreign_promotion, hyperparameter
from ._schedules import AbstractSchedule, learning_rate, value_at

OptState = Any


class AbstractOptimizer(eqx.Module):
    """What an agent's optimizer slot holds: `init` and `update` over Equinox modules."""

    @abc.abstractmethod
    def init(self, params: PyTree) -> OptState:
        """**Returns:** the optimizer state for the inexact-array leaves of `params`."""

    @abc.abstractmethod
    def update(
        self, grads: PyTree, state: OptState, params: PyTree, progress: Float[Array, ""] | float = 0.0
    ) -> tuple[PyTree, OptState]:
        """Apply one step. **Returns:** `(new_params, new_state)`."""

    def current_learning_rate(self, progress: Float[Array, ""] | float = 0.0) -> Float[Array, ""] | None:
        """**Returns:** the learning rate at `progress` (for metrics), or None when unknown."""
        return None


def _make_tx(learning_rate, max_grad_norm, *, clip: str, eps: float, b1: float = 0.9) -> optax.GradientTransformation:
    if clip == "global_norm":
        clipper = optax.clip_by_global_norm(max_grad_norm)
    elif clip == "value":
        clipper = optax.clip(max_grad_norm)
    else:
        clipper = optax.identity()
    return optax.chain(clipper, optax.adam(learning_rate, b1=b1, eps=eps))


class Adam(AbstractOptimizer):
    """Adam with gradient clipping, and a learning rate that is a number or a schedule.

    The learning rate (or its schedule's numbers) and the clipping threshold are
    array leaves of this module, so a sweep or a PBT population gives each member
    its own values in one compiled program. The optax state is built with
    `optax.inject_hyperparams`; each `update` writes the current learning rate
    into it, so the state always records the value in use. `anneal=True` with a
    number decays it linearly to 0 over training.
    """

    learning_rate: Float[Array, ""] | AbstractSchedule = learning_rate()
    max_grad_norm: Float[Array, ""] = hyperparameter(float("inf"))
    clip: Literal["global_norm", "value", "none"] = eqx.field(static=True, default="global_norm")
    anneal: bool = eqx.field(static=True, default=False)
    eps: float = eqx.field(static=True, default=1e-5)
    b1: float = eqx.field(static=True, default=0.9)

    def __check_init__(self):
        if isinstance(self.b1, bool) or not isinstance(self.b1, (int, float)) or not 0 <= self.b1 < 1:
            raise ValueError(f"Adam(b1) must be a number in [0, 1), got {self.b1!r}")
        if self.clip not in ("global_norm", "value", "none"):
            raise ValueError(f"Adam(clip) must be 'global_norm', 'value' or 'none', got {self.clip!r}")
        if not isinstance(self.learning_rate, AbstractSchedule):
            _check_concrete(self.learning_rate, "learning_rate", lambda v: v > 0, "> 0")
            _check_concrete(self.learning_rate, "learning_rate", math.isfinite, "finite")
        _check_concrete(self.max_grad_norm, "max_grad_norm", lambda v: v > 0, "> 0 (inf disables clipping)")

    def _tx(self, learning_rate: Any) -> optax.GradientTransformation:
        make = lambda learning_rate, max_grad_norm: _make_tx(  # noqa: E731
            learning_rate, max_grad_norm, clip=self.clip, eps=self.eps, b1=self.b1
        )
        return optax.inject_hyperparams(make)(learning_rate=learning_rate, max_grad_norm=self.max_grad_norm)

    def init(self, params: PyTree) -> OptState:
        """**Returns:** the optax state for the inexact-array leaves of `params` (Adam's
        moments as one flat vector when the leaves share a dtype: see `update`)."""
        return self._tx(self.current_learning_rate(0.0)).init(_Flat(params).pack(params))

    def current_learning_rate(self, progress: Float[Array, ""] | float = 0.0, count: Any = 0) -> Float[Array, ""]:
        """**Returns:** the learning rate at `progress` in [0, 1] of training, after `count`
        updates (scheduled, or annealed if enabled)."""
        lr = value_at(self.learning_rate, progress, count)
        if self.anneal and not isinstance(self.learning_rate, AbstractSchedule):
            return lr * (1.0 - jnp.clip(progress, 0.0, 1.0))
        return lr

    def update(
        self,
        grads: PyTree,
        state: OptState,
        params: PyTree,
        progress: Float[Array, ""] | float = 0.0,
    ) -> tuple[PyTree, OptState]:
        """Apply one step.

        **Arguments:** `grads` (as from `eqx.filter_grad`), the optax `state`,
        the current `params`, and `progress` (fraction of training done, for schedules).

        **Returns:** `(new_params, new_state)`.
        """
        hyper = dict(state.hyperparams)
        lr = self.current_learning_rate(progress, state.count)
        hyper["learning_rate"] = jnp.asarray(lr, hyper["learning_rate"].dtype)
        hyper["max_grad_norm"] = jnp.asarray(self.max_grad_norm, hyper["max_grad_norm"].dtype)
        state = state._replace(hyperparams=hyper)
        # One flat vector instead of a tree: clipping and Adam are a handful of fused
        # kernels for every network, not a few per weight matrix (about 40% less compile
        # time and faster steps on CPU, where each kernel launch costs). Same numbers up
        # to the summation order of the global norm.
        flat = _Flat(params)
        with foreign_promotion():
            updates, state = self._tx(lr).update(flat.pack(grads), state, flat.pack(params))
        return eqx.apply_updates(params, flat.unpack(updates)), state


class _Flat:
    """The inexact-array leaves of a tree as one flat vector, when they share a dtype
    (`pack`), and back (`unpack`); otherwise the filtered tree itself, unchanged."""

    def __init__(self, params: PyTree):
        filtered = eqx.filter(params, eqx.is_inexact_array)
        leaves, self.treedef = jax.tree.flatten(filtered)
        self.shapes = [jnp.shape(x) for x in leaves]
        self.flat = bool(leaves) and len({jnp.result_type(x) for x in leaves}) == 1

    def pack(self, tree: PyTree) -> PyTree:
        filtered = eqx.filter(tree, eqx.is_inexact_array)
        if not self.flat:
            return filtered
        leaves = self.treedef.flatten_up_to(filtered)
        return jnp.concatenate([jnp.ravel(x) for x in leaves])

    def unpack(self, packed: PyTree) -> PyTree:
        if not self.flat:
            return packed
        sizes = [math.prod(shape) for shape in self.shapes]
        parts = jnp.split(packed, list(itertools.accumulate(sizes))[:-1])
        return jax.tree.unflatten(self.treedef, [part.reshape(shape) for part, shape in zip(parts, self.shapes)])


class OptaxOptimizer(AbstractOptimizer):
    """Any optax `GradientTransformation` in an agent's optimizer slot:
    `SAC(env, critic_optimizer=optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(3e-4)))`
    (a transformation given to an agent is wrapped in this module).

    Its numbers live inside the transformation, so PBT and sweeps cannot change
    them (use `Adam` or a field's learning rate for that); two agents stack
    when they hold the same transformation object.
    """

    tx: optax.GradientTransformation = eqx.field(static=True)

    def __check_init__(self):
        if not isinstance(self.tx, optax.GradientTransformation):
            raise ValueError(f"OptaxOptimizer(tx) must be an optax.GradientTransformation, got {self.tx!r}")

    def init(self, params: PyTree) -> OptState:
        return self.tx.init(eqx.filter(params, eqx.is_inexact_array))

    def update(self, grads, state, params, progress=0.0):
        with foreign_promotion():
            updates, state = self.tx.update(grads, state, eqx.filter(params, eqx.is_inexact_array))
        return eqx.apply_updates(params, updates), state


_NAMED = {"adamw": optax.adamw, "sgd": optax.sgd, "rmsprop": optax.rmsprop}


class NamedOptimizer(AbstractOptimizer):
    """One of optax's optimizers by name (`adamw`, `sgd`, `rmsprop`), its numbers array
    leaves: what the command line's `--optimizer adamw:LR[:WEIGHT_DECAY]`, `sgd:LR` and
    `rmsprop:LR` build, and what a run's `config.json` records for them (so such a run
    evaluates, resumes and reproduces, where an `OptaxOptimizer` cannot be written down).

    The optax state is built with `optax.inject_hyperparams`, and each `update` writes
    this module's numbers into it: a sweep or PBT member uses its own values.
    """

    name: Literal["adamw", "sgd", "rmsprop"] = eqx.field(static=True)
    learning_rate: Float[Array, ""] = hyperparameter()
    weight_decay: Float[Array, ""] = hyperparameter()

    def __init__(self, name: str, learning_rate: Any, weight_decay: Any = None):
        """**Arguments:**

        - `name`: `"adamw"`, `"sgd"` or `"rmsprop"` (`optax.adamw`, `optax.sgd`, `optax.rmsprop`
          with their other defaults).
        - `learning_rate`: a finite number > 0.
        - `weight_decay`: adamw's decoupled weight decay, a finite number >= 0 (default
          optax's 1e-4); the others take none (default 0).
        """
        self.name = name  # type: ignore[assignment]
        self.learning_rate = learning_rate
        self.weight_decay = (1e-4 if name == "adamw" else 0.0) if weight_decay is None else weight_decay

    def __check_init__(self):
        if self.name not in _NAMED:
            raise ValueError(f"NamedOptimizer(name) must be one of {sorted(_NAMED)}, got {self.name!r}")
        _check_concrete(self.learning_rate, "NamedOptimizer(learning_rate)", lambda v: 0 < v < math.inf, "a finite number > 0")
        _check_concrete(self.weight_decay, "NamedOptimizer(weight_decay)", lambda v: 0 <= v < math.inf, "a finite number >= 0")
        if self.name != "adamw":
            _check_concrete(self.weight_decay, "NamedOptimizer(weight_decay)", lambda v: v == 0, f"0 for {self.name} (only adamw decays weights)")

    def _tx(self) -> optax.GradientTransformation:
        if self.name == "adamw":
            return optax.inject_hyperparams(optax.adamw)(learning_rate=self.learning_rate, weight_decay=self.weight_decay)
        return optax.inject_hyperparams(_NAMED[self.name])(learning_rate=self.learning_rate)

    def init(self, params: PyTree) -> OptState:
        return self._tx().init(eqx.filter(params, eqx.is_inexact_array))

    def current_learning_rate(self, progress: Float[Array, ""] | float = 0.0) -> Float[Array, ""]:
        return self.learning_rate

    def update(self, grads, state, params, progress=0.0):
        hyper = dict(state.hyperparams)
        hyper["learning_rate"] = jnp.asarray(self.learning_rate, hyper["learning_rate"].dtype)
        if "weight_decay" in hyper:
            hyper["weight_decay"] = jnp.asarray(self.weight_decay, hyper["weight_decay"].dtype)
        state = state._replace(hyperparams=hyper)
        with foreign_promotion():
            updates, state = self._tx().update(grads, state, eqx.filter(params, eqx.is_inexact_array))
        return eqx.apply_updates(params, updates), state


def as_optimizer(value: Any) -> Any:
    """Converter for optimizer slots: an optax transformation becomes `OptaxOptimizer`;
    an eqxrl optimizer or None is kept (anything else is left for the owner's check)."""
    if isinstance(value, optax.GradientTransformation) and not isinstance(value, AbstractOptimizer):
        return OptaxOptimizer(value)
    return value


def optimizer_slot(**kwargs: Any) -> Any:
    """Declare an agent's optimizer slot: None (built from the agent's learning-rate
    fields), an eqxrl optimizer module, or an optax transformation."""
    return eqx.field(converter=as_optimizer, default=None, **kwargs)


def check_optimizer(owner: str, name: str, value: Any) -> None:
    """Raise a ValueError naming `owner(name)` unless `value` is an optimizer or None."""
    if value is not None and not isinstance(value, AbstractOptimizer):
        raise ValueError(
            f"{owner}({name}) must be an optax.GradientTransformation, an eqxrl optimizer (Adam, ...) or None "
            f"(built from the learning-rate fields), got {value!r}"
        )


def _check_concrete(value: Array, name: str, ok, expected: str) -> None:
    """Validate a hyperparameter when it is concrete (see `eqxrl.core.concrete_scalar`)."""
    v = concrete_scalar(value)
    if v is not None and not ok(v):
        raise ValueError(f"{name} must be {expected}, got {v}")
