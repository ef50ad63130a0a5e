"""Batch renormalisation (Ioffe 2017) with its running statistics as explicit state, and the
batch-renormalised MLP and Q-network CrossQ's critics are made of.

The running statistics are not parameters: a `BatchRenormStats` lives in the learner state beside
the network (as an agent's `RunningMeanStd` of observations does), no optimizer sees it, and a
train-mode call returns the updated statistics instead of mutating anything:

    norm = BatchRenorm(4)
    stats = norm.init_stats()
    y, stats = norm(x, stats, train=True)   # batch statistics, corrected by r and d
    y, _ = norm(x, stats, train=False)      # the running statistics
"""

from collections.abc import Callable, Sequence
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, Int, PyTree

from ...core import Key, check_positive_int
from ..distributions import TanhNormal
from ._ensemble import Ensemble
from ._heads import log_std_range, tanh_gaussian
from ._mlp import Linear, check_last_axis, check_obs_and_action, check_positive_ints, get_activation


class BatchRenormStats(eqx.Module):
    """One `BatchRenorm` layer's running statistics: state, not parameters (no optimizer updates
    them; `BatchRenorm.__call__(train=True)` returns new ones)."""

    mean: Float[Array, " size"]
    var: Float[Array, " size"]
    steps: Int[Array, ""]  # train-mode calls so far (the warm-up of r_max and d_max reads it)


def _number(owner: str, name: str, value: Any, ok: Callable[[float], bool], expected: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not ok(float(value)):
        raise ValueError(f"{owner}({name}) must be a number {expected}, got {value!r}")
    return float(value)


def _steps(owner: str, name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{owner}({name}) must be an int >= 0, got {value!r}")
    return value


class BatchRenorm(eqx.Module):
    """Batch renormalisation over the last axis (Ioffe 2017, "Batch Renormalization"), any leading
    batch axes, with a learned scale `weight` and shift `bias` (ones and zeros at first).

    Train mode (`train=True`), with the batch's mean `mu_B` and variance `var_B` over every leading
    axis and the running `mean` and `var`:
    `sigma_B = sqrt(var_B + eps)`, `sigma = sqrt(var + eps)`,
    `r = clip(sigma_B / sigma, 1 / r_max_t, r_max_t)`, `d = clip((mu_B - mean) / sigma, -d_max_t, d_max_t)`
    (both without gradient), `y = weight * ((x - mu_B) / sigma_B * r + d) + bias`; the returned
    statistics are `mean + (1 - momentum) * (mu_B - mean)`, likewise for `var` with `var_B`, and
    `steps + 1`. Eval mode: `y = weight * (x - mean) / sigma + bias`, the statistics unchanged.

    The warm-up: for the first `warmup_steps` train-mode calls `r_max_t = 1`, `d_max_t = 0` (plain
    batch normalisation, as sbx's CrossQ does); then the limits grow linearly to `r_max` and
    `d_max` over `relax_steps` calls (Ioffe's relaxation; `relax_steps=0`: at once, as sbx).
    """

    weight: Float[Array, " size"]
    bias: Float[Array, " size"]
    size: int = eqx.field(static=True)
    momentum: float = eqx.field(static=True)
    eps: float = eqx.field(static=True)
    r_max: float = eqx.field(static=True)
    d_max: float = eqx.field(static=True)
    warmup_steps: int = eqx.field(static=True)
    relax_steps: int = eqx.field(static=True)

    def __init__(
        self,
        size: int,
        *,
        momentum: float = 0.99,
        eps: float = 1e-3,
        r_max: float = 3.0,
        d_max: float = 5.0,
        warmup_steps: int = 100_000,
        relax_steps: int = 0,
    ):
        """**Arguments:**

        - `size`: the features (the last axis).
        - `momentum`: the running statistics' decay per train-mode call, in [0, 1).
        - `eps`: added to the variances, `> 0`.
        - `r_max`: `r`'s clipping limit once warmed up, `>= 1`; `d_max`: `d`'s, `>= 0`.
        - `warmup_steps`: train-mode calls of plain batch normalisation first, `>= 0`.
        - `relax_steps`: train-mode calls over which the limits then grow to `r_max`, `d_max`, `>= 0`.
        """
        owner = "BatchRenorm"
        self.size = check_positive_int(owner, "size", size)
        self.momentum = _number(owner, "momentum", momentum, lambda v: 0 <= v < 1, "in [0, 1)")
        self.eps = _number(owner, "eps", eps, lambda v: v > 0, "> 0")
        self.r_max = _number(owner, "r_max", r_max, lambda v: v >= 1, ">= 1")
        self.d_max = _number(owner, "d_max", d_max, lambda v: v >= 0, ">= 0")
        self.warmup_steps = _steps(owner, "warmup_steps", warmup_steps)
        self.relax_steps = _steps(owner, "relax_steps", relax_steps)
        self.weight = jnp.ones((self.size,), jnp.float32)
        self.bias = jnp.zeros((self.size,), jnp.float32)

    def init_stats(self) -> BatchRenormStats:
        """**Returns:** the statistics before any batch: mean 0, variance 1, 0 steps."""
        return BatchRenormStats(jnp.zeros((self.size,), jnp.float32), jnp.ones((self.size,), jnp.float32), jnp.zeros((), jnp.int32))

    def limits(self, steps: Int[Array, ""]) -> tuple[Float[Array, ""], Float[Array, ""]]:
        """**Returns:** `(r_max_t, d_max_t)` after `steps` train-mode calls (see the warm-up above)."""
        done = jnp.asarray(steps, jnp.float32) - self.warmup_steps
        if self.relax_steps == 0:
            frac = (done >= 0).astype(jnp.float32)
        else:
            frac = jnp.clip(done / self.relax_steps, 0.0, 1.0)
        return 1.0 + (self.r_max - 1.0) * frac, self.d_max * frac

    def __call__(
        self, x: Float[Array, "*batch size"], stats: BatchRenormStats, *, train: bool
    ) -> tuple[Float[Array, "*batch size"], BatchRenormStats]:
        """**Returns:** `(y, stats)`: the normalised `x` and (train mode) the updated statistics,
        (eval mode) `stats` as they were."""
        check_last_axis(x, self.size, "x", "BatchRenorm")
        # (np.shape: under jax2onnx's tracing, exporting a batch-renormalised actor, jnp.shape gave a tracer)
        if not isinstance(stats, BatchRenormStats) or tuple(np.shape(stats.mean)) != (self.size,):
            got = f"mean of shape {tuple(np.shape(stats.mean))}" if isinstance(stats, BatchRenormStats) else repr(type(stats).__name__)
            raise ValueError(f"BatchRenorm(stats) must be the BatchRenormStats of init_stats() (mean of shape ({self.size},)), got {got}")
        if not isinstance(train, bool):
            raise ValueError(f"BatchRenorm(train) must be True or False, got {train!r}")
        sigma = jnp.sqrt(stats.var + self.eps)
        if not train:
            return (x - stats.mean) / sigma * self.weight + self.bias, stats
        if x.ndim < 2:
            raise ValueError(f"BatchRenorm: train mode needs a batch x of shape (*batch, {self.size}), got shape {tuple(x.shape)}")
        axes = tuple(range(x.ndim - 1))
        mu_b = jnp.mean(x, axis=axes)
        var_b = jnp.mean(jnp.square(x - mu_b), axis=axes)
        sigma_b = jnp.sqrt(var_b + self.eps)
        r_max, d_max = self.limits(stats.steps)
        r = jax.lax.stop_gradient(jnp.clip(sigma_b / sigma, 1.0 / r_max, r_max))
        d = jax.lax.stop_gradient(jnp.clip((mu_b - stats.mean) / sigma, -d_max, d_max))
        y = ((x - mu_b) / sigma_b * r + d) * self.weight + self.bias
        keep = self.momentum
        new = BatchRenormStats(
            jax.lax.stop_gradient(keep * stats.mean + (1.0 - keep) * mu_b),
            jax.lax.stop_gradient(keep * stats.var + (1.0 - keep) * var_b),
            stats.steps + 1,
        )
        return y, new


class BatchRenormMLP(eqx.Module):
    """A batch-renormalised MLP (CrossQ's critic body, as in sbx): `BatchRenorm` of the input, then
    per hidden width `Linear -> activation -> BatchRenorm`. Its statistics are a tuple of
    `BatchRenormStats`, one per `BatchRenorm` (`init_stats()`), passed in and returned."""

    input_norm: BatchRenorm
    layers: tuple[Linear, ...]
    norms: tuple[BatchRenorm, ...]
    activation: str | Callable[[Array], Array] = eqx.field(static=True)
    in_size: int = eqx.field(static=True)
    features: int = eqx.field(static=True)

    def __init__(
        self,
        in_size: int,
        hidden_sizes: Sequence[int] = (256, 256),
        activation: str | Callable[[Array], Array] = "relu",
        *,
        key: Key,
        **renorm: Any,
    ):
        """**Arguments:** `in_size`, the `hidden_sizes` (a non-empty sequence of positive ints),
        `activation` (a name or a callable), `key`, and `BatchRenorm`'s keyword arguments
        (`momentum`, `eps`, `r_max`, `d_max`, `warmup_steps`, `relax_steps`) for every layer."""
        self.in_size = check_positive_int("BatchRenormMLP", "in_size", in_size)
        hidden_sizes = check_positive_ints("BatchRenormMLP", "hidden_sizes", hidden_sizes)
        get_activation(activation, "BatchRenormMLP")
        sizes = (self.in_size, *hidden_sizes)
        keys = jax.random.split(key, len(hidden_sizes))
        self.input_norm = BatchRenorm(self.in_size, **renorm)
        self.layers = tuple(Linear(i, o, key=k) for i, o, k in zip(sizes[:-1], sizes[1:], keys))
        self.norms = tuple(BatchRenorm(o, **renorm) for o in hidden_sizes)
        self.activation = activation
        self.features = hidden_sizes[-1]

    def init_stats(self) -> tuple[BatchRenormStats, ...]:
        """**Returns:** every layer's initial statistics, the input's first."""
        return tuple(norm.init_stats() for norm in (self.input_norm, *self.norms))

    def __call__(
        self, x: Float[Array, "*batch in_size"], stats: tuple[BatchRenormStats, ...], *, train: bool
    ) -> tuple[Float[Array, "*batch features"], tuple[BatchRenormStats, ...]]:
        """**Returns:** `(features, stats)` (see `BatchRenorm` for the modes)."""
        check_last_axis(x, self.in_size, "x", "BatchRenormMLP")
        if not isinstance(stats, tuple) or len(stats) != 1 + len(self.layers):
            raise ValueError(f"BatchRenormMLP(stats) must be the tuple of {1 + len(self.layers)} BatchRenormStats of init_stats(), got {type(stats).__name__}")
        act = get_activation(self.activation)
        x, first = self.input_norm(x, stats[0], train=train)
        new = [first]
        for layer, norm, s in zip(self.layers, self.norms, stats[1:]):
            x, s = norm(act(layer(x)), s, train=train)
            new.append(s)
        return x, tuple(new)


class BatchRenormQHead(eqx.Module):
    """`(obs, action, stats) -> (Q(obs, action), stats)`: a `BatchRenormMLP` over the concatenated
    `[obs, action]` and a linear output (CrossQ's critic)."""

    body: BatchRenormMLP
    out: Linear
    obs_size: int = eqx.field(static=True)
    action_size: int = eqx.field(static=True)

    def __init__(
        self,
        obs_size: int,
        action_size: int,
        hidden_sizes: Sequence[int] = (1024, 1024),
        activation: str | Callable[[Array], Array] = "relu",
        *,
        key: Key,
        **renorm: Any,
    ):
        """**Arguments:** `obs_size`, `action_size`, and `BatchRenormMLP`'s `hidden_sizes`,
        `activation`, `key` and `BatchRenorm` keyword arguments."""
        self.obs_size = check_positive_int("BatchRenormQHead", "obs_size", obs_size)
        self.action_size = check_positive_int("BatchRenormQHead", "action_size", action_size)
        body_key, out_key = jax.random.split(key)
        self.body = BatchRenormMLP(self.obs_size + self.action_size, hidden_sizes, activation, key=body_key, **renorm)
        self.out = Linear(self.body.features, 1, key=out_key, scale=1.0)

    def init_stats(self) -> tuple[BatchRenormStats, ...]:
        """**Returns:** the body's initial statistics."""
        return self.body.init_stats()

    def __call__(
        self, obs: Float[Array, "*batch obs"], action: Float[Array, "*batch action"], stats: tuple[BatchRenormStats, ...], *, train: bool
    ) -> tuple[Float[Array, "*batch"], tuple[BatchRenormStats, ...]]:
        check_obs_and_action(obs, action, self.obs_size, self.action_size, "BatchRenormQHead")
        features, stats = self.body(jnp.concatenate([obs, action], axis=-1), stats, train=train)
        return self.out(features)[..., 0], stats


class BatchRenormPolicy(eqx.Module):
    """`(obs, stats) -> (TanhNormal policy, stats)`: a `BatchRenormMLP` over the observation and a
    linear output of every action's mean and raw log-std, squashed as `TanhGaussianHead` does,
    on actions in `[-1, 1]` (CrossQ's batch-renormalised actor, sbx's default: train mode in the
    actor's update, eval mode to act and to sample the critics' next actions)."""

    body: BatchRenormMLP
    out: Linear
    obs_size: int = eqx.field(static=True)
    action_size: int = eqx.field(static=True)
    log_std_min: float = eqx.field(static=True)
    log_std_max: float = eqx.field(static=True)

    def __init__(
        self,
        obs_size: int,
        action_size: int,
        hidden_sizes: Sequence[int] = (256, 256),
        activation: str | Callable[[Array], Array] = "relu",
        *,
        key: Key,
        log_std_min: float = -5.0,
        log_std_max: float = 2.0,
        **renorm: Any,
    ):
        """**Arguments:** `obs_size`, `action_size`, `BatchRenormMLP`'s `hidden_sizes`, `activation`
        and `key`, the log-std's range `[log_std_min, log_std_max]`, and `BatchRenorm`'s keyword arguments."""
        self.obs_size = check_positive_int("BatchRenormPolicy", "obs_size", obs_size)
        self.action_size = check_positive_int("BatchRenormPolicy", "action_size", action_size)
        self.log_std_min, self.log_std_max = log_std_range("BatchRenormPolicy", log_std_min, log_std_max)
        body_key, out_key = jax.random.split(key)
        self.body = BatchRenormMLP(self.obs_size, hidden_sizes, activation, key=body_key, **renorm)
        self.out = Linear(self.body.features, 2 * self.action_size, key=out_key, scale=0.01)

    def init_stats(self) -> tuple[BatchRenormStats, ...]:
        """**Returns:** the body's initial statistics."""
        return self.body.init_stats()

    def __call__(
        self, obs: Float[Array, "*batch obs"], stats: tuple[BatchRenormStats, ...], *, train: bool
    ) -> tuple[TanhNormal, tuple[BatchRenormStats, ...]]:
        check_last_axis(obs, self.obs_size, "obs", "BatchRenormPolicy")
        features, stats = self.body(obs, stats, train=train)
        return tanh_gaussian(self.out(features), self.log_std_min, self.log_std_max, -1.0, 1.0), stats


def ensemble_stats(ensemble: Ensemble) -> PyTree:
    """**Returns:** the initial statistics of every member of an `Ensemble` of batch-renormalised
    networks (`BatchRenormQHead`s), stacked on a leading member axis."""
    return eqx.filter_vmap(lambda member: member.init_stats())(ensemble.members)


def ensemble_apply(ensemble: Ensemble, stats: PyTree, *args: Array, train: bool) -> tuple[PyTree, PyTree]:
    """Every member of `ensemble` on the same `args`, each with its own statistics (`stats` as
    `ensemble_stats` gives them). **Returns:** `(outputs, stats)`, both with a leading member axis."""
    return eqx.filter_vmap(lambda member, s: member(*args, s, train=train))(ensemble.members, stats)
