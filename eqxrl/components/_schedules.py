"""Learning-rate schedules as small modules: their numbers are array leaves (swept, tuned by
PBT, listed by `agent.hyperparameters()` as `learning_rate.init_value`), their shape is static.

A schedule is a function of training progress (the fraction of the run done, in
[0, 1]) and of the optimizer's update count. The built-in ones use progress, so
the same schedule fits any run length; `OptaxSchedule` wraps an optax schedule,
which counts updates.
"""

import abc
import dataclasses
import math
from typing import Any

import equinox as eqx
import jax.numpy as jnp
from jaxtyping import Array, Float, Int

from ..core import as_float, check_hyperparameter, concrete_scalar, hyperparameter, named_field


class AbstractSchedule(eqx.Module):
    """A learning rate that changes over training."""

    @abc.abstractmethod
    def __call__(self, progress: Float[Array, ""] | float, count: Int[Array, ""] | int = 0) -> Float[Array, ""]:
        """**Returns:** the value at `progress` in [0, 1] of training, after `count` updates."""


def _p(progress: Any) -> Array:
    return jnp.clip(jnp.asarray(progress, jnp.float32), 0.0, 1.0)


class ConstantSchedule(AbstractSchedule):
    """`value` throughout."""

    value: Float[Array, ""] = hyperparameter()

    def __check_init__(self):
        check_hyperparameter("ConstantSchedule", "value", self.value, lambda v: v > 0, "> 0")

    def __call__(self, progress, count=0):
        return self.value


class LinearSchedule(AbstractSchedule):
    """From `init_value` at the start linearly to `end_value` at the end of training."""

    init_value: Float[Array, ""] = hyperparameter()
    end_value: Float[Array, ""] = hyperparameter(0.0)

    def __check_init__(self):
        check_hyperparameter("LinearSchedule", "init_value", self.init_value, lambda v: v > 0, "> 0")
        check_hyperparameter("LinearSchedule", "end_value", self.end_value, lambda v: v >= 0, ">= 0")

    def __call__(self, progress, count=0):
        return self.init_value + (self.end_value - self.init_value) * _p(progress)


class ExponentialSchedule(AbstractSchedule):
    """From `init_value` at the start exponentially (geometrically) to `end_value` at the end
    of training: `init_value * (end_value / init_value) ** progress`, a straight line in
    log-space (the same fraction lost per unit of progress). Both values > 0; an
    `end_value` above `init_value` grows."""

    init_value: Float[Array, ""] = hyperparameter()
    end_value: Float[Array, ""] = hyperparameter()

    def __check_init__(self):
        check_hyperparameter("ExponentialSchedule", "init_value", self.init_value, lambda v: v > 0, "> 0")
        check_hyperparameter("ExponentialSchedule", "end_value", self.end_value, lambda v: v > 0, "> 0")

    def __call__(self, progress, count=0):
        return self.init_value * jnp.exp(jnp.log(self.end_value / self.init_value) * _p(progress))


class CosineSchedule(AbstractSchedule):
    """Cosine decay from `init_value` to `alpha * init_value` over training (Loshchilov & Hutter 2017)."""

    init_value: Float[Array, ""] = hyperparameter()
    alpha: Float[Array, ""] = hyperparameter(0.0)

    def __check_init__(self):
        check_hyperparameter("CosineSchedule", "init_value", self.init_value, lambda v: v > 0, "> 0")
        check_hyperparameter("CosineSchedule", "alpha", self.alpha, lambda v: 0 <= v <= 1, "in [0, 1]")

    def __call__(self, progress, count=0):
        cosine = 0.5 * (1.0 + jnp.cos(math.pi * _p(progress)))
        return self.init_value * ((1.0 - self.alpha) * cosine + self.alpha)


class WarmupCosineSchedule(AbstractSchedule):
    """Linear warm-up from `init_value` to `peak_value` over the first `warmup` fraction
    of training, then cosine decay to `end_value`."""

    peak_value: Float[Array, ""] = hyperparameter()
    warmup: Float[Array, ""] = hyperparameter(0.05)
    init_value: Float[Array, ""] = hyperparameter(0.0)
    end_value: Float[Array, ""] = hyperparameter(0.0)

    def __check_init__(self):
        check = lambda name, ok, expected: check_hyperparameter(  # noqa: E731
            "WarmupCosineSchedule", name, getattr(self, name), ok, expected
        )
        check("peak_value", lambda v: v > 0, "> 0")
        check("warmup", lambda v: 0 <= v < 1, "in [0, 1)")
        check("init_value", lambda v: v >= 0, ">= 0")
        check("end_value", lambda v: v >= 0, ">= 0")

    def __call__(self, progress, count=0):
        p = _p(progress)
        warm = self.init_value + (self.peak_value - self.init_value) * p / jnp.maximum(self.warmup, 1e-8)
        decay = jnp.clip((p - self.warmup) / jnp.maximum(1.0 - self.warmup, 1e-8), 0.0, 1.0)
        cosine = self.end_value + (self.peak_value - self.end_value) * 0.5 * (1.0 + jnp.cos(math.pi * decay))
        return jnp.where(p < self.warmup, warm, cosine)


class GeometricDecaySchedule(AbstractSchedule):
    """`initial * decay ** count`, floored at `minimum`: a value multiplied by `decay` at every
    step (pytorchrl's DQN exploration, `epsilon <- max(epsilon * epsilon_decay, min_epsilon)`
    each step). It reads the step `count`, not progress: as DQN's `exploration` schedule the
    collection steps taken so far; as a learning rate the optimizer's update count."""

    initial: Float[Array, ""] = hyperparameter()
    decay: Float[Array, ""] = hyperparameter()
    minimum: Float[Array, ""] = hyperparameter(0.0)

    def __check_init__(self):
        check = lambda name, ok, expected: check_hyperparameter(  # noqa: E731
            "GeometricDecaySchedule", name, getattr(self, name), ok, expected
        )
        check("initial", lambda v: v > 0, "> 0")
        check("decay", lambda v: 0 < v <= 1, "in (0, 1]")
        check("minimum", lambda v: v >= 0, ">= 0")
        initial, minimum = concrete_scalar(self.initial), concrete_scalar(self.minimum)
        if initial is not None and minimum is not None and minimum > initial:
            raise ValueError(f"GeometricDecaySchedule(minimum) must be <= initial ({initial:g}), got {minimum:g}")

    def __call__(self, progress, count=0):
        steps = jnp.maximum(jnp.asarray(count), 0).astype(jnp.float32)
        return jnp.maximum(self.initial * jnp.power(self.decay, steps), self.minimum)


EPSILON_DECAYS = ("linear", "exponential")
"""`EpsilonSchedule(decay)`'s values."""


class EpsilonSchedule(AbstractSchedule):
    """An exploration rate (DQN's epsilon): from `start` to `end` over the first `fraction` of
    training, then `end`; linearly, or with `decay="exponential"` geometrically
    (`ExponentialSchedule(start, end)` over that fraction: both then > 0). `start`, `end` in
    [0, 1] (0: no random actions, e.g. with noisy nets), `fraction` in (0, 1]."""

    start: Float[Array, ""] = hyperparameter(1.0)
    end: Float[Array, ""] = hyperparameter(0.05)
    fraction: Float[Array, ""] = hyperparameter(0.5)
    decay: str = eqx.field(static=True, default="linear")

    def __check_init__(self):
        check_epsilon("EpsilonSchedule", self.start, self.end, self.fraction, self.decay, ("start", "end", "fraction", "decay"))

    def __call__(self, progress, count=0):
        frac = jnp.clip(jnp.asarray(progress, jnp.float32) / self.fraction, 0.0, 1.0)
        if self.decay == "exponential":
            return ExponentialSchedule(self.start, self.end)(frac)
        return self.start + (self.end - self.start) * frac


def check_epsilon(owner: str, start: Any, end: Any, fraction: Any, decay: Any, names: tuple[str, str, str, str]) -> None:
    """Raise a ValueError naming `owner(<name>)` (`names`: what the owner calls start, end,
    fraction and decay) for an exploration schedule `EpsilonSchedule` cannot run."""
    check_hyperparameter(owner, names[0], start, lambda v: 0 <= v <= 1, "in [0, 1]")
    check_hyperparameter(owner, names[1], end, lambda v: 0 <= v <= 1, "in [0, 1]")
    check_hyperparameter(owner, names[2], fraction, lambda v: 0 < v <= 1, "in (0, 1]")
    if decay not in EPSILON_DECAYS:
        raise ValueError(f"{owner}({names[3]}) must be one of {list(EPSILON_DECAYS)}, got {decay!r}")
    if decay == "exponential":
        for name, value in zip(names[:2], (start, end)):
            check_hyperparameter(owner, name, value, lambda v: 0 < v <= 1, f"in (0, 1] with {names[3]}='exponential'")


class OptaxSchedule(AbstractSchedule):
    """An optax schedule (`count -> value`, e.g. `optax.cosine_decay_schedule(3e-4, 10_000)`),
    called with the optimizer's update count. Its numbers live inside the function,
    so PBT and sweeps cannot change them; two agents stack when they hold the same function."""

    fn: Any = eqx.field(static=True)  # count -> value (checked below, with a message naming it)

    def __check_init__(self):
        if not callable(self.fn):
            raise ValueError(f"OptaxSchedule(fn) must be a callable count -> value, got {self.fn!r}")

    def __call__(self, progress, count=0):
        return jnp.asarray(self.fn(jnp.asarray(count)), jnp.float32)


def as_learning_rate(value: Any) -> Any:
    """Converter for learning-rate fields: a schedule is kept, a callable (an optax
    schedule) becomes `OptaxSchedule`, a number a float32 leaf."""
    if isinstance(value, AbstractSchedule):
        return value
    if callable(value) and not hasattr(value, "__array__") and not isinstance(value, (int, float)):
        return OptaxSchedule(value)
    return as_float(value)


def learning_rate(default: Any = dataclasses.MISSING, **kwargs: Any) -> Any:
    """Declare a learning-rate field: a number (a hyperparameter leaf) or a schedule
    (`CosineSchedule(3e-4)`, an optax schedule, ...); no `default`: a required field. A
    default of None must be replaced before the converter runs (in `__post_init__`)."""
    if default is not dataclasses.MISSING:
        kwargs["default"] = default
    return named_field(as_learning_rate, "a number or a schedule", metadata={"hyperparameter": True}, **kwargs)


def check_learning_rate(owner: str, name: str, value: Any) -> None:
    """Raise a ValueError naming `owner(name)` unless `value` is a finite number > 0 or a schedule
    (an eqxrl schedule, or a callable such as an optax schedule, which `as_learning_rate` wraps)."""
    if isinstance(value, AbstractSchedule) or (callable(value) and not hasattr(value, "__array__")):
        return
    v = concrete_scalar(value, f"{owner}({name})", "a number > 0 or a schedule")
    if v is not None and v == float("inf"):
        raise ValueError(f"{owner}({name}) must be a finite number > 0, got inf")
    if v is not None and not v > 0:
        raise ValueError(
            f"{owner}({name}) must be > 0, got {v:g} (or a schedule: eqxrl.components.CosineSchedule(...), "
            "an optax schedule, ...)"
        )


def value_at(lr: Any, progress: Any, count: Any = 0) -> Float[Array, ""]:
    """**Returns:** the learning rate `lr` (a number or a schedule) at `progress` and `count`."""
    if isinstance(lr, AbstractSchedule):
        return jnp.asarray(lr(progress, count), jnp.float32)
    return lr
