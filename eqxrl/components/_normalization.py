"""Running mean and standard deviation."""

import equinox as eqx
import jax.numpy as jnp
from jaxtyping import Array, Float

from ..core import is_positive_int


class RunningMeanStd(eqx.Module):
    """Running mean and variance over a stream of batches (parallel Welford update).

    The statistics are array leaves: they live in an agent's or env's state and
    are updated by returning a new module.
    """

    mean: Float[Array, "*shape"]
    var: Float[Array, "*shape"]
    count: Float[Array, ""]

    def __init__(self, shape: tuple[int, ...] = ()):
        """**Arguments:**

        - `shape`: the shape of one sample; leading axes of an update batch beyond
          it are reduced over.
        """
        shape = tuple(shape)
        if not all(is_positive_int(s) for s in shape):
            raise ValueError(f"RunningMeanStd(shape) must hold positive ints, got shape={shape!r}")
        self.mean = jnp.zeros(shape, jnp.float32)
        self.var = jnp.ones(shape, jnp.float32)
        self.count = jnp.zeros((), jnp.float32)

    def update(self, batch: Float[Array, "..."]) -> "RunningMeanStd":
        """**Returns:** the statistics updated with every sample of `batch`.

        `batch` has shape `(*leading, *shape)`; all leading axes are samples.
        """
        batch = jnp.asarray(batch, jnp.float32)
        sample_ndim = self.mean.ndim
        if batch.ndim < sample_ndim or batch.shape[batch.ndim - sample_ndim :] != self.mean.shape:
            raise ValueError(
                f"RunningMeanStd.update(batch) expects shape (*batch, {', '.join(map(str, self.mean.shape))}), "
                f"got {batch.shape}"
            )
        axes = tuple(range(batch.ndim - sample_ndim))
        n = jnp.asarray(batch.size // max(self.mean.size, 1), jnp.float32)
        batch_mean = jnp.mean(batch, axis=axes)
        batch_var = jnp.var(batch, axis=axes)
        total = self.count + n
        delta = batch_mean - self.mean
        mean = self.mean + delta * (n / total)
        m2 = self.var * self.count + batch_var * n + jnp.square(delta) * self.count * n / total
        # Before the first update var is the neutral 1; count 0 gives it no weight.
        var = m2 / total
        return eqx.tree_at(lambda s: (s.mean, s.var, s.count), self, (mean, var, total))

    def normalize(self, x: Float[Array, "..."], clip: float = 10.0, eps: float = 1e-8) -> Float[Array, "..."]:
        """**Returns:** `(x - mean) / sqrt(var + eps)`, clipped to `[-clip, clip]`."""
        return jnp.clip((x - self.mean) / jnp.sqrt(self.var + eps), -clip, clip)

    def denormalize(self, x: Float[Array, "..."], eps: float = 1e-8) -> Float[Array, "..."]:
        """**Returns:** the inverse of `normalize` (without clipping)."""
        return x * jnp.sqrt(self.var + eps) + self.mean
