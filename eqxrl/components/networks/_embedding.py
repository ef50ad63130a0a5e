"""`EmbeddingTorso`: a learned embedding per integer code of a grid, then a torso over the embedded grid."""

import math
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float

from ...core import Key, is_positive_int
from ._mlp import ObsShape, as_obs_shape, refuse_entries
from ._torsos import AbstractTorso, CNNTorso, Encoder, as_torso


class _EmbeddingBody(eqx.Module):
    table: Float[Array, "channels codes embedding"]  # one table per channel
    inner: Encoder  # the torso over the embedded grid
    cells: tuple[int, ...] = eqx.field(static=True)  # the observation's shape with the channel axis last

    def __call__(self, x: Float[Array, "*batch size"]) -> Float[Array, "*batch features"]:
        lead = x.shape[:-1]
        channels, codes = self.table.shape[0], self.table.shape[1]
        index = jnp.clip(jnp.round(x), 0, codes - 1).astype(jnp.int32).reshape(lead + self.cells)
        embedded = self.table[jnp.arange(channels), index]  # (*batch, *cells, embedding)
        return self.inner(embedded.reshape(lead + (-1,)))


class EmbeddingTorso(AbstractTorso):
    """A torso for integer-valued grids (Navix's or XLand-MiniGrid's tiles: `(H, W, C)` small
    integer codes per cell): each code is looked up in a learned table of `embedding_size`
    vectors, and `torso` runs over the embedded grid.

    - Each channel `c` of a cell has a table of its own (`num_embeddings` codes, so the code 3
      of the tile channel and the code 3 of the colour channel are different vectors); a cell's
      channel embeddings are **concatenated**: an `(H, W, C)` grid becomes an
      `(H, W, C * embedding_size)` image. An `(H, W)` grid (one channel) becomes `(H, W,
      embedding_size)`, a vector `(n,)` becomes `(n, embedding_size)`.
    - Observations arrive as the agents store them (float32): each value is rounded to the
      nearest integer and clipped into `[0, num_embeddings - 1]` (a code out of range takes
      the nearest end's vector).
    - `torso` (default `CNNTorso.minatar()`: one 3x3 convolution of 16 channels, a 128-unit
      layer) is any feed-forward torso: `MLPTorso((256,))` flattens the embedded grid instead.
    - Table entries start as standard normal draws. The codes must reach the torso as they
      are: with an agent's `normalize_observations=True` they are normalised first.

    `EmbeddingTorso(13)` embeds tiles coded 0..12. Works on any leading batch axes, like
    every torso.
    """

    num_embeddings: int = eqx.field(static=True)
    embedding_size: int = eqx.field(static=True, default=16)
    torso: Any = eqx.field(default_factory=CNNTorso.minatar, converter=as_torso)

    def __check_init__(self):
        if not is_positive_int(self.num_embeddings):
            raise ValueError(
                f"EmbeddingTorso(num_embeddings) must be a positive int (the number of integer codes), got {self.num_embeddings!r}"
            )
        if not is_positive_int(self.embedding_size):
            raise ValueError(f"EmbeddingTorso(embedding_size) must be a positive int, got {self.embedding_size!r}")
        if not isinstance(self.torso, AbstractTorso):
            raise ValueError(
                f"EmbeddingTorso(torso) must be a feed-forward torso (CNNTorso, MLPTorso, ...), got {self.torso!r}"
            )

    def embedded_shape(self, obs_shape: Any) -> tuple[int, ...]:
        """**Returns:** the shape `torso` is built for: one observation of `obs_shape` embedded."""
        shape = tuple(obs_shape)
        if len(shape) == 3:
            return (*shape[:2], shape[2] * self.embedding_size)
        return (*shape, self.embedding_size)

    def build(self, obs_shape: Any, *, key: Key) -> Any:
        return self.make(obs_shape, key=key).net

    def make(self, obs_shape: ObsShape, *, key: Key) -> Encoder:
        refuse_entries("EmbeddingTorso", "one integer grid (H, W, C), (H, W) or (n,)", obs_shape)
        obs_shape = as_obs_shape(obs_shape)
        if len(obs_shape) not in (1, 2, 3) or math.prod(obs_shape) == 0:
            raise ValueError(
                f"EmbeddingTorso needs integer grids of shape (H, W, C), (H, W) or (n,), got observation shape {obs_shape}"
            )
        channels = obs_shape[2] if len(obs_shape) == 3 else 1
        cells = obs_shape if len(obs_shape) == 3 else (*obs_shape, 1)
        table_key, torso_key = jax.random.split(key)
        table = jax.random.normal(table_key, (channels, self.num_embeddings, self.embedding_size), jnp.float32)
        try:
            inner = self.torso.make(self.embedded_shape(obs_shape), key=torso_key)
        except ValueError as e:
            raise ValueError(f"EmbeddingTorso(torso) on the embedded grid {self.embedded_shape(obs_shape)}: {e}") from e
        return Encoder(_EmbeddingBody(table, inner, cells), obs_shape, inner.features, batched=True)
