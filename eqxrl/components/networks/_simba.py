"""SimBa (Lee et al. 2024, "SimBa: Simplicity Bias for Scaling Up Parameters in Deep RL"): a
torso of residual blocks with layer normalisation, usable wherever an agent takes a torso."""

from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax
from jaxtyping import Array

from ...core import Key, is_positive_int
from ._mlp import LayerNorm, Linear, ObsShape, as_obs_shape, get_activation, obs_size_of
from ._torsos import AbstractTorso, Encoder


class _SimBaBlock(eqx.Module):
    norm: LayerNorm
    up: Linear
    down: Linear
    activation: str | Callable[[Array], Array] = eqx.field(static=True)

    def __call__(self, x: Array) -> Array:
        return x + self.down(get_activation(self.activation)(self.up(self.norm(x))))


class _SimBaBody(eqx.Module):
    embed: Linear
    blocks: tuple[_SimBaBlock, ...]
    final_norm: LayerNorm

    def __call__(self, x: Array) -> Array:
        x = self.embed(x)
        for block in self.blocks:
            x = block(x)
        return self.final_norm(x)


class SimBaTorso(AbstractTorso):
    """SimBa's torso: a linear layer to `hidden_size`, `num_blocks` residual blocks
    `x + Linear(activation(Linear(LayerNorm(x))))` whose inner width is `expansion * hidden_size`
    (SimBa's inverted bottleneck, 4x), and a final `LayerNorm`; the features are `hidden_size` wide.
    Weights are orthogonally initialised (gain sqrt 2) like every eqxrl layer.

    SimBa's third part, running statistics normalising the observations, is the agents' own
    `normalize_observations=True` (a `RunningMeanStd` in their state): this torso keeps no copy.
    A `Dict` observation reaches it as one flat vector, as it reaches `MLPTorso`.
    """

    hidden_size: int = eqx.field(static=True, default=256)
    num_blocks: int = eqx.field(static=True, default=2)
    expansion: int = eqx.field(static=True, default=4)
    activation: str | Callable[[Array], Array] = eqx.field(static=True, default="relu")

    def __check_init__(self):
        for name in ("hidden_size", "expansion"):
            if not is_positive_int(getattr(self, name)):
                raise ValueError(f"SimBaTorso({name}) must be a positive int, got {getattr(self, name)!r}")
        if isinstance(self.num_blocks, bool) or not isinstance(self.num_blocks, int) or self.num_blocks < 0:
            raise ValueError(f"SimBaTorso(num_blocks) must be an int >= 0, got {self.num_blocks!r}")
        get_activation(self.activation, "SimBaTorso")

    def build(self, obs_shape: Any, *, key: Key) -> _SimBaBody:
        h, inner = self.hidden_size, self.expansion * self.hidden_size
        keys = jax.random.split(key, 1 + 2 * self.num_blocks)
        blocks = tuple(
            _SimBaBlock(LayerNorm(h), Linear(h, inner, key=keys[1 + 2 * i]), Linear(inner, h, key=keys[2 + 2 * i]), self.activation)
            for i in range(self.num_blocks)
        )
        return _SimBaBody(Linear(obs_size_of(obs_shape), h, key=keys[0]), blocks, LayerNorm(h))

    def make(self, obs_shape: ObsShape, *, key: Key) -> Encoder:
        obs_shape = as_obs_shape(obs_shape)
        # Matrix products and LayerNorm take any leading axes: no vmap, the input stays flat.
        return Encoder(self.build(obs_shape, key=key), obs_shape, self.hidden_size, batched=True)
