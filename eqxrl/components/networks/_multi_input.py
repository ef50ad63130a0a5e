"""`MultiInputTorso`: a torso per entry of a `Dict` observation, their features concatenated."""

import math
from collections.abc import Mapping, Sequence
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float

from ...core import Key
from ._mlp import Linear, as_obs_shape, check_hidden_layers, get_activation, is_entries
from ._torsos import AbstractTorso, Activation, Encoder, IdentityTorso


class _MultiInputBody(eqx.Module):
    encoders: tuple[Encoder, ...]
    bounds: tuple[tuple[int, int], ...] = eqx.field(static=True)
    layers: tuple[Linear, ...]
    activation: Activation = eqx.field(static=True)

    def __call__(self, x: Float[Array, "*batch size"]) -> Float[Array, "*batch features"]:
        parts = [encoder(x[..., lo:hi]) for encoder, (lo, hi) in zip(self.encoders, self.bounds)]
        y = jnp.concatenate(parts, axis=-1)
        act = get_activation(self.activation)
        for layer in self.layers:
            y = act(layer(y))
        return y


class MultiInputTorso(AbstractTorso):
    """A torso for `Dict` (and `Tuple`) observations: each entry through a torso of its own, the features
    concatenated, then optional dense layers (`hidden_sizes`, `activation`).

    `MultiInputTorso({"grid": CNNTorso.minatar()}, hidden_sizes=(64,))` runs the `"grid"`
    entry through a CNN and every other entry through `default` (the entry flattened, as is,
    by default), concatenates, and adds one 64-unit layer. Entries are named by their keys
    (`"outer.inner"` in a nested `Dict`; a `Tuple`'s by position, `"0"`, `"1"`, ...); the action mask is never an entry (see
    `eqxrl.envs.ObservationLayout`). An agent given no torso builds `auto_torso` of its
    observation space: a `MultiInputTorso` when a `Dict` has image or integer-grid entries,
    else an MLP over the entries concatenated as one flat vector.
    """

    names: tuple[str, ...] = eqx.field(static=True)  # the entries given a torso (sorted), and
    torsos: tuple[AbstractTorso, ...]  # their torsos: two tuples, so no string is a pytree leaf
    default: AbstractTorso
    hidden_sizes: tuple[int, ...] = eqx.field(static=True)
    activation: Activation = eqx.field(static=True)

    def __init__(
        self,
        torsos: Mapping[str, AbstractTorso] | None = None,
        default: AbstractTorso | None = None,
        hidden_sizes: Sequence[int] = (),
        activation: Activation = "tanh",
    ):
        """**Arguments:** `torsos`: `{entry name: torso}`; `default`: the torso of the other entries
        (`IdentityTorso()`: flattened as they are); `hidden_sizes`/`activation`: dense layers after
        the concatenation (none by default)."""
        torsos = {} if torsos is None else torsos
        if not isinstance(torsos, Mapping) or not all(
            isinstance(k, str) and isinstance(v, AbstractTorso) for k, v in torsos.items()
        ):
            raise ValueError(f"MultiInputTorso(torsos) must be a dict from entry names to torsos (MLPTorso, CNNTorso, ...), got {torsos!r}")
        default = IdentityTorso() if default is None else default
        if not isinstance(default, AbstractTorso):
            raise ValueError(f"MultiInputTorso(default) must be a torso (MLPTorso, CNNTorso, ...), got {default!r}")
        hidden_sizes = check_hidden_layers("MultiInputTorso", hidden_sizes, activation, "a tuple of positive ints")
        self.names = tuple(sorted(torsos))
        self.torsos = tuple(torsos[name] for name in self.names)
        self.default = default
        self.hidden_sizes = hidden_sizes
        self.activation = activation

    def build(self, obs_shape: Any, *, key: Key) -> Any:
        return self.make(obs_shape, key=key).net

    def make(self, obs_shape: Any, *, key: Key) -> Encoder:
        if not is_entries(obs_shape):
            raise ValueError(
                f"MultiInputTorso needs a Dict observation (its entries' shapes), got one array of shape {tuple(obs_shape)}"
            )
        entries = as_obs_shape(obs_shape)
        names = [name for name, _ in entries]
        unknown = sorted(set(self.names) - set(names))
        if unknown:
            raise ValueError(f"MultiInputTorso(torsos) names entries {unknown} the observation does not have; its entries are {names}")
        chosen = dict(zip(self.names, self.torsos))
        encoders, bounds, start = [], [], 0
        keys = list(jax.random.split(key, len(entries) + 1))
        for (name, shape), k in zip(entries, keys):
            torso = chosen.get(name, self.default)
            try:
                encoders.append(torso.make(shape, key=k))
            except ValueError as e:
                raise ValueError(f"MultiInputTorso: entry {name!r} of shape {shape}: {e}") from e
            size = math.prod(shape)
            bounds.append((start, start + size))
            start += size
        sizes = (sum(e.features for e in encoders), *self.hidden_sizes)
        dense_keys = jax.random.split(keys[-1], max(len(sizes) - 1, 1))
        layers = tuple(Linear(i, o, key=k) for i, o, k in zip(sizes[:-1], sizes[1:], dense_keys))
        body = _MultiInputBody(tuple(encoders), tuple(bounds), layers, self.activation)
        return Encoder(body, entries, sizes[-1], batched=True)

