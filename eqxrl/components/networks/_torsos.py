"""Torsos: what maps one observation (a vector, an image, anything) to a feature vector.

A torso is given to an agent or a head as a *specification*: a small module of
static configuration (`MLPTorso((64, 64), "tanh")`, `CNNTorso.minatar()`, or a
user's own Equinox module class) whose `make(obs_shape, key=...)` builds the
network. Specifications compare by value, so two agents built alike still stack
into one sweep or PBT population, and the built-in ones are written to and read
back from a run's `config.json`.

The built network is an `Encoder`: it takes the flat float observations the
agents store (`(*batch, obs_size)`), restores each one's shape, and returns
features `(*batch, features)`.
"""

import abc
import math
from collections.abc import Callable, Sequence
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float

from ...core import Key, is_positive_int
from ._mlp import LayerNorm, Linear, ObsShape, as_obs_shape, check_hidden_layers, check_last_axis, get_activation, is_entries, obs_size_of, refuse_entries
from ._recurrent import AbstractRecurrentTorso

Activation = str | Callable[[Array], Array]


def _size(shape: Any) -> int:
    return obs_size_of(shape)


def _one(obs_shape: Any) -> tuple[int, ...]:
    """The shape a network sees for one observation: a `Dict` observation's entries arrive
    concatenated, as one flat vector."""
    return (_size(obs_shape),) if is_entries(obs_shape) else obs_shape


class Encoder(eqx.Module):
    """A built torso: flat observations `(*batch, obs_size)` -> features `(*batch, features)`.

    `net` maps one observation of shape `obs_shape` to a feature vector (or, when
    `batched`, already accepts any leading batch axes of flat observations).
    """

    net: Any
    obs_shape: Any = eqx.field(static=True)  # one array's shape, or a Dict observation's ((name, shape), ...)
    features: int = eqx.field(static=True)
    batched: bool = eqx.field(static=True, default=False)

    @property
    def obs_size(self) -> int:
        return _size(self.obs_shape)

    def __call__(self, x: Float[Array, "*batch obs_size"]) -> Float[Array, "*batch features"]:
        check_last_axis(x, self.obs_size, "obs", "Encoder")
        if self.batched:
            return self.net(x)
        lead = x.shape[:-1]
        y = jax.vmap(self.net)(x.reshape((-1, *_one(self.obs_shape))))
        return y.reshape(lead + y.shape[1:])


def _features(net: Any, obs_shape: Any, owner: str) -> int:
    try:
        out = jax.eval_shape(net, jax.ShapeDtypeStruct(_one(obs_shape), jnp.float32))
    except Exception as e:  # a user network that cannot take this observation shape
        raise ValueError(f"{owner}: the torso cannot take one observation of shape {obs_shape}: {e}") from e
    if not isinstance(out, jax.ShapeDtypeStruct) or len(out.shape) != 1 or out.shape[0] < 1:
        got = getattr(out, "shape", type(out).__name__)
        raise ValueError(f"{owner}: a torso must map one observation to a feature vector (features,), got {got}")
    return int(out.shape[0])


class AbstractTorso(eqx.Module):
    """The specification of a torso: static configuration with a `make` method.

    Subclass it for a configurable torso of your own (its fields should be
    static: they describe the network, they are not its weights).
    """

    @abc.abstractmethod
    def build(self, obs_shape: Any, *, key: Key) -> Callable[[Array], Array]:
        """**Returns:** a network (an Equinox module) mapping ONE observation of
        shape `obs_shape` (float32) to a feature vector `(features,)`. For a `Dict`
        observation `obs_shape` is its `((name, shape), ...)` entries and the network gets
        them concatenated, flat (`MultiInputTorso` gives each entry a torso of its own)."""

    def make(self, obs_shape: ObsShape, *, key: Key) -> Encoder:
        """**Returns:** the built torso as an `Encoder` over flat observations."""
        obs_shape = as_obs_shape(obs_shape)
        net = self.build(obs_shape, key=key)
        return Encoder(net, obs_shape, _features(net, obs_shape, type(self).__name__))


class _MLPBody(eqx.Module):
    layers: tuple[Linear, ...]
    activation: Activation = eqx.field(static=True)
    norms: tuple[LayerNorm, ...] | None = None  # (MLPTorso(layer_norm=True): one per layer)

    def __call__(self, x: Array) -> Array:
        act = get_activation(self.activation)
        for i, layer in enumerate(self.layers):
            x = layer(x)
            x = act(x if self.norms is None else self.norms[i](x))
        return x


class MLPTorso(AbstractTorso):
    """Fully connected layers, each followed by `activation` (orthogonal init, gain sqrt 2);
    with `layer_norm=True` each layer's output is layer-normalised before the activation
    (`LayerNorm`: what PQN's Q-network uses; any agent can take it).

    An empty `hidden_sizes` is the identity (the flat observation is the feature vector).
    """

    hidden_sizes: tuple[int, ...] = eqx.field(static=True, default=(64, 64), converter=tuple)
    activation: Activation = eqx.field(static=True, default="tanh")
    layer_norm: bool = eqx.field(static=True, default=False)

    def __check_init__(self):
        check_hidden_layers("MLPTorso", self.hidden_sizes, self.activation, "a tuple of positive ints")
        if not isinstance(self.layer_norm, bool):
            raise ValueError(f"MLPTorso(layer_norm) must be True or False, got {self.layer_norm!r}")

    def build(self, obs_shape: Any, *, key: Key) -> _MLPBody:
        sizes = (_size(obs_shape), *self.hidden_sizes)
        keys = jax.random.split(key, max(len(sizes) - 1, 1))
        layers = tuple(Linear(i, o, key=k) for i, o, k in zip(sizes[:-1], sizes[1:], keys))
        norms = tuple(LayerNorm(o) for o in sizes[1:]) if self.layer_norm else None
        return _MLPBody(layers, self.activation, norms)

    def make(self, obs_shape: ObsShape, *, key: Key) -> Encoder:
        obs_shape = as_obs_shape(obs_shape)
        features = self.hidden_sizes[-1] if self.hidden_sizes else _size(obs_shape)
        # Matrix products take any leading axes: no vmap, and the input stays flat.
        return Encoder(self.build(obs_shape, key=key), obs_shape, features, batched=True)


class _Conv(eqx.Module):
    """A 'VALID' 2-D convolution over one channels-last image `(H, W, C)`, computed as
    its k*k shifted (strided) slices concatenated and one matrix product.

    On CPU, XLA's convolution gradient inside `lax.scan` (PPO's epochs and
    minibatches) ran ~14x slower than this, for the same numbers."""

    linear: Linear
    kernel: int = eqx.field(static=True)
    stride: int = eqx.field(static=True)

    def __call__(self, x: Array) -> Array:
        k, s = self.kernel, self.stride
        h, w = (x.shape[0] - k) // s + 1, (x.shape[1] - k) // s + 1
        patches = [x[i : i + s * (h - 1) + 1 : s, j : j + s * (w - 1) + 1 : s, :] for i in range(k) for j in range(k)]
        return self.linear(jnp.concatenate(patches, axis=-1))


class _CNNBody(eqx.Module):
    convs: tuple[_Conv, ...]
    dense: tuple[Linear, ...]
    activation: Activation = eqx.field(static=True)
    add_channel: bool = eqx.field(static=True)

    def __call__(self, obs: Array) -> Array:
        act = get_activation(self.activation)
        x = obs[..., None] if self.add_channel else obs
        for conv in self.convs:
            x = act(conv(x))
        x = x.reshape(-1)
        for layer in self.dense:
            x = act(layer(x))
        return x


class CNNTorso(AbstractTorso):
    """Convolutions over a channels-last image `(H, W, C)` (or `(H, W)`), then dense layers.

    `CNNTorso.minatar()` is the MinAtar network (one 3x3 convolution of 16
    channels, a 128-unit layer; gymnax's MinAtar games are 10x10xC images);
    `CNNTorso.nature()` is the Nature-DQN network for 84x84 frames. Padding is
    'VALID'; every layer is followed by `activation`; weights are orthogonally
    initialised (gain sqrt 2) like every eqxrl layer.
    """

    channels: tuple[int, ...] = eqx.field(static=True, default=(16,), converter=tuple)
    kernel_sizes: tuple[int, ...] = eqx.field(static=True, default=(3,), converter=tuple)
    strides: tuple[int, ...] = eqx.field(static=True, default=(1,), converter=tuple)
    hidden_sizes: tuple[int, ...] = eqx.field(static=True, default=(128,), converter=tuple)
    activation: Activation = eqx.field(static=True, default="relu")

    def __check_init__(self):
        for name in ("channels", "kernel_sizes", "strides"):
            value = getattr(self, name)
            if not value or not all(is_positive_int(v) for v in value):
                raise ValueError(f"CNNTorso({name}) must be a non-empty tuple of positive ints, got {value!r}")
        if not len(self.channels) == len(self.kernel_sizes) == len(self.strides):
            raise ValueError(
                "CNNTorso(channels, kernel_sizes, strides) must have one entry per convolution, got lengths "
                f"{len(self.channels)}, {len(self.kernel_sizes)}, {len(self.strides)}"
            )
        check_hidden_layers("CNNTorso", self.hidden_sizes, self.activation, "a tuple of positive ints")

    @classmethod
    def minatar(cls, activation: Activation = "relu") -> "CNNTorso":
        """**Returns:** the MinAtar network (Young & Tian 2019): conv 16x3x3, dense 128."""
        return cls((16,), (3,), (1,), (128,), activation)

    @classmethod
    def nature(cls, activation: Activation = "relu") -> "CNNTorso":
        """**Returns:** the Nature-DQN network (Mnih et al. 2015): convs 32x8x8/4, 64x4x4/2, 64x3x3/1, dense 512."""
        return cls((32, 64, 64), (8, 4, 3), (4, 2, 1), (512,), activation)

    def build(self, obs_shape: Any, *, key: Key) -> _CNNBody:
        refuse_entries("CNNTorso", "image observations (H, W, C) or (H, W)", obs_shape)
        if len(obs_shape) not in (2, 3):
            raise ValueError(
                f"CNNTorso needs image observations (H, W, C) or (H, W), got observation shape {obs_shape}"
            )
        height, width = obs_shape[:2]
        in_channels = obs_shape[2] if len(obs_shape) == 3 else 1
        keys = jax.random.split(key, len(self.channels) + len(self.hidden_sizes))
        convs = []
        for i, (out, kernel, stride) in enumerate(zip(self.channels, self.kernel_sizes, self.strides)):
            if kernel > min(height, width):
                raise ValueError(
                    f"CNNTorso: convolution {i} has kernel size {kernel}, larger than its {height}x{width} "
                    f"input (observation shape {obs_shape}); use smaller kernel_sizes or strides"
                )
            convs.append(_Conv(Linear(kernel * kernel * in_channels, out, key=keys[i]), kernel, stride))
            height, width = (height - kernel) // stride + 1, (width - kernel) // stride + 1
            in_channels = out
        sizes = (in_channels * height * width, *self.hidden_sizes)
        dense = tuple(
            Linear(i, o, key=k, scale=math.sqrt(2.0))
            for i, o, k in zip(sizes[:-1], sizes[1:], keys[len(self.channels):])
        )
        return _CNNBody(tuple(convs), dense, self.activation, len(obs_shape) == 2)


class ModuleTorso(AbstractTorso):
    """A user's Equinox module class used as a torso, with no registration:
    `module(obs_shape, key=key)` builds it, and it maps one observation to features.

    It is built inside the agent's traced `init`, so shape arithmetic in its
    `__init__` must use Python or NumPy (`math.prod(obs_shape)`), not `jnp`."""

    module: type = eqx.field(static=True)

    def __check_init__(self):
        if not isinstance(self.module, type):
            raise ValueError(f"ModuleTorso(module) must be a class, got {self.module!r}")

    def build(self, obs_shape: Any, *, key: Key) -> Any:
        return self.module(obs_shape, key=key)


class IdentityTorso(AbstractTorso):
    """No layers: the flat observation is the feature vector (heads on a shared torso's features)."""

    def build(self, obs_shape: Any, *, key: Key) -> Callable[[Array], Array]:
        return MLPTorso(()).build(obs_shape, key=key)

    def make(self, obs_shape: ObsShape, *, key: Key) -> Encoder:
        return MLPTorso(()).make(obs_shape, key=key)


TorsoLike = AbstractTorso | type | None


def as_torso(value: Any) -> Any:
    """Converter for torso fields: a class becomes `ModuleTorso(cls)`; a spec or None is kept
    (anything else is left for the owner's check to name)."""
    if isinstance(value, type) and not issubclass(value, (AbstractTorso, AbstractRecurrentTorso)):
        return ModuleTorso(value)
    if isinstance(value, type):
        return value()
    return value


def check_torso(owner: str, name: str, value: Any, recurrent: bool = False) -> None:
    """Raise a ValueError naming `owner(name)` unless `value` is a torso spec or None
    (or, with `recurrent=True`, a recurrent torso spec: `GRUTorso`, `LSTMTorso`)."""
    if isinstance(value, AbstractRecurrentTorso):
        if recurrent:
            return
        raise ValueError(
            f"{owner}({name}) is a recurrent torso ({type(value).__name__}); only PPO takes one "
            f"(PPO(actor_torso={type(value).__name__}(...), shared_torso=True)); give a feed-forward torso here"
        )
    if value is not None and not isinstance(value, AbstractTorso):
        raise ValueError(
            f"{owner}({name}) must be a torso: eqxrl.components.MLPTorso(...), CNNTorso(...), "
            f"an AbstractTorso subclass instance, or an Equinox module class built as cls(obs_shape, key=key); "
            f"got {value!r}"
        )


def torso_or_mlp(
    torso: AbstractTorso | AbstractRecurrentTorso | None, hidden_sizes: Sequence[int], activation: Activation
) -> AbstractTorso | AbstractRecurrentTorso:
    """**Returns:** `torso`, or the MLP torso of `hidden_sizes` and `activation` when it is None."""
    if torso is None:
        return MLPTorso(tuple(hidden_sizes), activation)
    return torso

