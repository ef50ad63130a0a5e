"""Recurrent torsos: a GRU or LSTM cell over a feed-forward encoder of each observation.

Like a feed-forward torso, a recurrent torso is given as a *specification*
(`GRUTorso(64)`, `LSTMTorso(64, encoder_sizes=())`) whose `make(obs_shape,
key=...)` builds the network, a `RecurrentEncoder`. The built network steps a
hidden state: `features, hidden = encoder(x, hidden, reset)`, where `reset`
(True at the first observation of an episode) zeroes the hidden state of those
rows *before* the step, and `encoder.scan(xs, hidden, resets)` runs a whole
sequence the same way.
"""

import abc
from collections.abc import Callable, Sequence
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Bool, Float, PyTree

from ...core import Key, is_positive_int
from ._mlp import Linear, ObsShape, check_last_axis, get_activation, obs_size_of

Activation = str | Callable[[Array], Array]


class AbstractRecurrentTorso(eqx.Module):
    """The specification of a recurrent torso: an MLP encoder of each observation
    (`encoder_sizes`, `activation`; `()` feeds the flat observation to the cell) and
    a recurrent cell of `hidden_size` units.

    A subclass implements `cell` (the cell mapping `(input, hidden) -> hidden` for
    one row), `zeros` (the initial hidden state) and, when the hidden state is not
    itself the feature vector, `output`.
    """

    hidden_size: eqx.AbstractVar[int]
    encoder_sizes: eqx.AbstractVar[tuple[int, ...]]
    activation: eqx.AbstractVar[Activation]

    def __check_init__(self):
        name = type(self).__name__
        if not is_positive_int(self.hidden_size):
            raise ValueError(f"{name}(hidden_size) must be a positive int, got {self.hidden_size!r}")
        if not all(is_positive_int(h) for h in self.encoder_sizes):
            raise ValueError(f"{name}(encoder_sizes) must be a tuple of positive ints, got {self.encoder_sizes!r}")
        get_activation(self.activation, name)

    @abc.abstractmethod
    def cell(self, input_size: int, *, key: Key) -> Callable[[Array, PyTree], PyTree]:
        """**Returns:** the cell: `(input (input_size,), hidden) -> hidden` for one row."""

    @abc.abstractmethod
    def zeros(self, batch: tuple[int, ...]) -> PyTree:
        """**Returns:** the hidden state of a fresh episode for a batch of shape `batch`."""

    def output(self, hidden: PyTree) -> Float[Array, "*batch features"]:
        """**Returns:** the feature vector of a hidden state (default: the hidden state itself)."""
        return hidden

    def make(self, obs_shape: ObsShape, *, key: Key) -> "RecurrentEncoder":
        """**Returns:** the built recurrent torso, taking flat observations of `obs_shape`."""
        obs_size = obs_size_of(obs_shape)  # (a Dict observation's entries are concatenated)
        sizes = (obs_size, *self.encoder_sizes)
        keys = jax.random.split(key, len(sizes))
        layers = tuple(Linear(i, o, key=k) for i, o, k in zip(sizes[:-1], sizes[1:], keys[1:]))
        return RecurrentEncoder(layers, self.cell(sizes[-1], key=keys[0]), self, obs_size)


class GRUTorso(AbstractRecurrentTorso):
    """A GRU cell (`equinox.nn.GRUCell`) of `hidden_size` units on an MLP encoder
    (`encoder_sizes`, `activation`). Its features are the hidden state."""

    hidden_size: int = eqx.field(static=True, default=64)
    encoder_sizes: tuple[int, ...] = eqx.field(static=True, default=(64,), converter=tuple)
    activation: Activation = eqx.field(static=True, default="tanh")

    def cell(self, input_size: int, *, key: Key) -> eqx.nn.GRUCell:
        return eqx.nn.GRUCell(input_size, self.hidden_size, key=key)

    def zeros(self, batch: tuple[int, ...]) -> Float[Array, "*batch hidden"]:
        return jnp.zeros((*batch, self.hidden_size), jnp.float32)


class LSTMTorso(AbstractRecurrentTorso):
    """An LSTM cell (`equinox.nn.LSTMCell`) of `hidden_size` units on an MLP encoder
    (`encoder_sizes`, `activation`). Its hidden state is the pair `(h, c)`; its
    features are `h`."""

    hidden_size: int = eqx.field(static=True, default=64)
    encoder_sizes: tuple[int, ...] = eqx.field(static=True, default=(64,), converter=tuple)
    activation: Activation = eqx.field(static=True, default="tanh")

    def cell(self, input_size: int, *, key: Key) -> eqx.nn.LSTMCell:
        return eqx.nn.LSTMCell(input_size, self.hidden_size, key=key)

    def zeros(self, batch: tuple[int, ...]) -> tuple[Array, Array]:
        zero = jnp.zeros((*batch, self.hidden_size), jnp.float32)
        return zero, zero

    def output(self, hidden: tuple[Array, Array]) -> Float[Array, "*batch features"]:
        return hidden[0]


class RecurrentEncoder(eqx.Module):
    """A built recurrent torso: `(x (*batch, obs_size), hidden, reset (*batch,)) ->
    (features (*batch, features), hidden)`."""

    layers: tuple[Linear, ...]
    cell: Any
    spec: AbstractRecurrentTorso = eqx.field(static=True)
    obs_size: int = eqx.field(static=True)

    @property
    def features(self) -> int:
        return self.spec.hidden_size

    def encode(self, x: Float[Array, "*batch obs_size"]) -> Float[Array, "*batch encoded"]:
        """The feed-forward encoder (`encoder_sizes`) of each observation."""
        act = get_activation(self.spec.activation)
        for layer in self.layers:
            x = act(layer(x))
        return x

    def initial_state(self, batch: Sequence[int] = ()) -> PyTree:
        """**Returns:** the hidden state of fresh episodes for a batch of shape `batch`."""
        return self.spec.zeros(tuple(int(b) for b in batch))

    def __call__(
        self, x: Float[Array, "*batch obs_size"], hidden: PyTree, reset: Bool[Array, "..."]
    ) -> tuple[Float[Array, "*batch features"], PyTree]:
        """One step: zero the hidden state where `reset` (an episode's first
        observation), then step the cell. **Returns:** `(features, new hidden)`."""
        check_last_axis(x, self.obs_size, "x", "RecurrentEncoder")
        lead = x.shape[:-1]
        if tuple(reset.shape) != lead:
            raise ValueError(f"RecurrentEncoder: reset must have the batch shape of x, {lead}, got {tuple(reset.shape)}")
        hidden = jax.tree.map(lambda h: jnp.where(reset.reshape(lead + (1,) * (h.ndim - len(lead))), 0.0, h), hidden)
        y = self.encode(x)
        y = y.reshape((-1, y.shape[-1]))
        flat = jax.tree.map(lambda h: h.reshape((-1,) + h.shape[len(lead):]), hidden)
        new = jax.vmap(self.cell)(y, flat)
        new = jax.tree.map(lambda h: h.reshape(lead + h.shape[1:]), new)
        return self.spec.output(new), new

    def scan(
        self, xs: Float[Array, "T *batch obs_size"], hidden: PyTree, resets: Bool[Array, "T *batch"]
    ) -> tuple[Float[Array, "T *batch features"], PyTree]:
        """Run a sequence from `hidden`, resetting where `resets`.

        **Returns:** the features of every step and the final hidden state.
        """

        def step(h, inputs):
            x, reset = inputs
            features, h = self(x, h, reset)
            return h, features

        hidden, features = jax.lax.scan(step, hidden, (xs, resets))
        return features, hidden


def is_recurrent(torso: Any) -> bool:
    """Whether `torso` is a recurrent torso specification (`GRUTorso`, `LSTMTorso`, ...)."""
    return isinstance(torso, AbstractRecurrentTorso)
