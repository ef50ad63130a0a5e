"""Linear layers and MLP torsos with orthogonal initialisation."""

import math
from collections.abc import Callable, Sequence
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float

from ...core import Key, check_positive_int, is_positive_int
from ._init import orthogonal

ACTIVATIONS: dict[str, Callable[[Array], Array]] = {
    "tanh": jnp.tanh,
    "relu": jax.nn.relu,
    "elu": jax.nn.elu,
    "gelu": jax.nn.gelu,
    "silu": jax.nn.silu,
    "swish": jax.nn.silu,
    "leaky_relu": jax.nn.leaky_relu,
    "identity": lambda x: x,
}


def get_activation(activation: str | Callable[[Array], Array], owner: str | None = None) -> Callable[[Array], Array]:
    """Resolve an activation given by name (`"tanh"`, `"relu"`, ...) or as a callable;
    a `ValueError` (naming `owner(activation)` when given) for anything else."""
    if callable(activation):
        return activation
    if not isinstance(activation, str) or activation not in ACTIVATIONS:
        name = f"{owner}(activation)" if owner else "activation"
        raise ValueError(f"{name} must be one of {sorted(ACTIVATIONS)} or a callable, got {activation!r}")
    return ACTIVATIONS[activation]


ObsShape = Sequence[int] | Sequence[tuple[str, Sequence[int]]]
"""One observation's shape, or a `Dict` observation's `((name, shape), ...)` entries."""


def is_entries(obs_shape: Any) -> bool:
    """Whether `obs_shape` describes a `Dict` observation: `((name, shape), ...)` (see
    `eqxrl.envs.ObservationLayout.torso_shape`), not one array's shape."""
    return isinstance(obs_shape, (tuple, list)) and len(obs_shape) > 0 and all(
        isinstance(e, (tuple, list)) and len(e) == 2 and isinstance(e[0], str) for e in obs_shape
    )


def check_hidden_layers(owner: str, hidden_sizes: Any, activation: Any, expected: str = "positive ints") -> tuple[int, ...]:
    """Check fully connected layers' `hidden_sizes` (positive ints, maybe none) and `activation`;
    **returns** `hidden_sizes` as a tuple. `expected` words the `ValueError` naming `owner`."""
    hidden_sizes = tuple(hidden_sizes)
    if not all(is_positive_int(h) for h in hidden_sizes):
        raise ValueError(f"{owner}(hidden_sizes) must be {expected}, got {hidden_sizes!r}")
    get_activation(activation)
    return hidden_sizes


def check_positive_ints(owner: str, name: str, value: Any) -> tuple[int, ...]:
    """`check_positive_int` for a non-empty tuple or list: **returns** it as a tuple of ints."""
    value = tuple(value) if isinstance(value, (tuple, list)) else value
    if not isinstance(value, tuple) or not value or not all(is_positive_int(v) for v in value):
        raise ValueError(f"{owner}({name}) must be a non-empty sequence of positive ints, got {value!r}")
    return tuple(int(v) for v in value)


def refuse_entries(owner: str, needs: str, obs_shape: Any) -> None:
    """Raise the one-line ValueError of a one-array torso (`owner`, which `needs` e.g. "image
    observations (H, W, C) or (H, W)") given a `Dict` observation's entries: it names them and
    the `MultiInputTorso` that gives one entry this torso."""
    if is_entries(obs_shape):
        names = [name for name, _ in obs_shape]
        raise ValueError(
            f"{owner} needs {needs}, got a Dict observation with entries {names}; give the entry its own: "
            f"MultiInputTorso({{{names[0]!r}: {owner}(...)}})"
        )


def as_obs_shape(obs_shape: Any) -> Any:
    """**Returns:** `obs_shape` as a tuple of ints, or (for a `Dict` observation) as a tuple of
    `(name, tuple of ints)` entries: hashable, as a static field needs."""
    if is_entries(obs_shape):
        return tuple((str(name), tuple(int(d) for d in shape)) for name, shape in obs_shape)
    return tuple(int(d) for d in obs_shape)


def obs_size_of(obs_shape: Any) -> int:
    """**Returns:** the number of floats of one flat observation of `obs_shape` (either form)."""
    if is_entries(obs_shape):
        return sum(math.prod(int(d) for d in shape) for _, shape in obs_shape)
    return math.prod(int(d) for d in obs_shape)


def check_last_axis(x: Array, size: int, name: str, owner: str) -> None:
    """Raise a ValueError naming `owner(name)` when `x`'s last axis is not `size` (trace-time check)."""
    if x.ndim < 1 or x.shape[-1] != size:
        raise ValueError(f"{owner}: {name} must have shape (*batch, {size}), got shape {tuple(x.shape)}")


def check_obs_and_action(obs: Array, action: Array, obs_size: int, action_size: int, owner: str) -> None:
    """The trace-time checks of a critic's `(obs, action)` pair: each last axis (`check_last_axis`),
    and one batch shape for both; a ValueError naming `owner` otherwise."""
    check_last_axis(obs, obs_size, "obs", owner)
    check_last_axis(action, action_size, "action", owner)
    if obs.shape[:-1] != action.shape[:-1]:
        raise ValueError(
            f"{owner}: action must have shape {(*obs.shape[:-1], action_size)} "
            f"(the batch shape of obs, {tuple(obs.shape[:-1])}), got shape {tuple(action.shape)}"
        )


class Linear(eqx.Module):
    """An affine map `x @ weight + bias` over any leading batch axes, orthogonally initialised."""

    weight: Float[Array, "in_size out_size"]
    bias: Float[Array, " out_size"]

    def __init__(self, in_size: int, out_size: int, *, key: Key, scale: float = math.sqrt(2.0)):
        """**Arguments:**

        - `in_size`, `out_size`: input and output widths.
        - `key`: PRNG key for the weights.
        - `scale`: gain of the orthogonal initialiser (biases start at zero).
        """
        self.weight = orthogonal(key, (in_size, out_size), scale)
        self.bias = jnp.zeros((out_size,), jnp.float32)

    def __call__(self, x: Float[Array, "*batch in_size"]) -> Float[Array, "*batch out_size"]:
        return x @ self.weight + self.bias


class LayerNorm(eqx.Module):
    """Layer normalisation over the last axis (Ba et al. 2016), any leading batch axes: each
    feature vector centred and scaled to unit variance, then `x * weight + bias` (learned,
    starting at ones and zeros)."""

    weight: Float[Array, " size"]
    bias: Float[Array, " size"]
    eps: float = eqx.field(static=True, default=1e-5)

    def __init__(self, size: int, eps: float = 1e-5):
        size = check_positive_int("LayerNorm", "size", size)
        self.weight = jnp.ones((size,), jnp.float32)
        self.bias = jnp.zeros((size,), jnp.float32)
        self.eps = eps

    def __call__(self, x: Float[Array, "*batch size"]) -> Float[Array, "*batch size"]:
        mean = jnp.mean(x, axis=-1, keepdims=True)
        var = jnp.mean(jnp.square(x - mean), axis=-1, keepdims=True)
        return (x - mean) * jax.lax.rsqrt(var + self.eps) * self.weight + self.bias


class MLP(eqx.Module):
    """A multilayer perceptron torso: `Linear -> activation` per hidden width, then a `Linear` output."""

    layers: tuple[Linear, ...]
    activation: str | Callable[[Array], Array] = eqx.field(static=True)
    in_size: int = eqx.field(static=True)
    out_size: int = eqx.field(static=True)

    def __init__(
        self,
        in_size: int,
        out_size: int,
        hidden_sizes: Sequence[int] = (64, 64),
        activation: str | Callable[[Array], Array] = "tanh",
        *,
        key: Key,
        hidden_scale: float = math.sqrt(2.0),
        final_scale: float = 1.0,
    ):
        """**Arguments:**

        - `in_size`, `out_size`: input and output widths.
        - `hidden_sizes`: widths of the hidden layers (may be empty: a linear map).
        - `activation`: name (`"tanh"`, `"relu"`, ...) or callable, between layers.
        - `key`: PRNG key.
        - `hidden_scale`, `final_scale`: orthogonal-init gains of the hidden and output layers.
        """
        in_size = check_positive_int("MLP", "in_size", in_size)
        out_size = check_positive_int("MLP", "out_size", out_size)
        hidden_sizes = check_hidden_layers("MLP", hidden_sizes, activation)
        sizes = (in_size, *hidden_sizes, out_size)
        keys = jax.random.split(key, len(sizes) - 1)
        scales = [hidden_scale] * len(hidden_sizes) + [final_scale]
        self.layers = tuple(
            Linear(i, o, key=k, scale=s) for i, o, k, s in zip(sizes[:-1], sizes[1:], keys, scales)
        )
        self.activation = activation
        self.in_size = in_size
        self.out_size = out_size

    def __call__(self, x: Float[Array, "*batch in_size"]) -> Float[Array, "*batch out_size"]:
        check_last_axis(x, self.in_size, "x", "MLP")
        act = get_activation(self.activation)
        for layer in self.layers[:-1]:
            x = act(layer(x))
        return self.layers[-1](x)
