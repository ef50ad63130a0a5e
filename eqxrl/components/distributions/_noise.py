"""`Noise`: the randomness of one sampling step as an explicit array, given instead of a PRNG key.

A sampler that takes noise (`AbstractDistribution.sample_from_noise`, an agent's `act_from_noise`)
is a deterministic function of it: a program without JAX's PRNG (an exported ONNX policy) draws
the noise with its own generator, e.g. NumPy's, and gets the agent's sampling distribution.
"""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from ...core import Key

NOISE_KINDS = {
    "normal": "standard normal N(0, 1)",
    "gumbel": "standard Gumbel (location 0, scale 1): -log(-log(U)), U uniform on (0, 1)",
    "uniform": "uniform on [0, 1)",
}
"""The distributions a noise array's entries are drawn from, by name."""

_NUMPY = {
    "normal": "rng.standard_normal({shape}, dtype=np.float32)",
    "gumbel": "rng.gumbel(size={shape}).astype(np.float32)",
    "uniform": "rng.random({shape}, dtype=np.float32)",
}


class Noise(eqx.Module):
    """The description of one noise array: float32 of `shape`, its entries independent draws of
    `kind` (`"normal"`, `"gumbel"` or `"uniform"`: `NOISE_KINDS`).

    `draw(key)` draws it with JAX (what a key-driven sampler draws: `dist.sample(key)` equals
    `dist.sample_from_noise(dist.noise_spec().draw(key))`); `numpy()` says how to draw it with NumPy.
    """

    shape: tuple = eqx.field(static=True, converter=tuple)
    kind: str = eqx.field(static=True)

    def __check_init__(self):
        if self.kind not in NOISE_KINDS:
            raise ValueError(f"Noise(kind) must be one of {list(NOISE_KINDS)}, got {self.kind!r}")

    def draw(self, key: Key) -> Float[Array, "..."]:
        """**Returns:** a draw of this noise from `key` (JAX's samplers)."""
        if self.kind == "normal":
            return jax.random.normal(key, self.shape, jnp.float32)
        if self.kind == "gumbel":
            return jax.random.gumbel(key, self.shape, jnp.float32)
        return jax.random.uniform(key, self.shape, jnp.float32)

    def numpy(self, shape: str | None = None) -> str:
        """**Returns:** the NumPy expression that draws this noise from a `rng =
        np.random.default_rng()` (of `shape`, e.g. `"(batch, 2)"`; default: this noise's shape)."""
        return _NUMPY[self.kind].format(shape=shape or str(tuple(self.shape)))

    def check(self, value: Array, owner: str) -> None:
        """Raise a one-line ValueError naming `owner` unless `value` has this noise's shape."""
        got = tuple(np.shape(value))
        if len(got) != len(self.shape) or any(g != s for g, s in zip(got, self.shape)):
            raise ValueError(
                f"{owner} must have shape {tuple(self.shape)} (float32, {NOISE_KINDS[self.kind]}), got {got}"
            )
