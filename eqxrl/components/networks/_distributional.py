"""C51's categorical Q-head (Bellemare et al. 2017): a distribution over returns per action."""

import math
import numbers

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float

from ...core import is_positive_int
from ._heads import AbstractDiscreteQHead
from ._mlp import Linear
from ._torsos import Encoder


class CategoricalQHead(AbstractDiscreteQHead):
    """`obs -> Q(obs, a)` for every discrete action as the mean of a categorical distribution
    over `num_atoms` returns evenly spaced on `[v_min, v_max]` (C51, Bellemare et al. 2017; one
    of Rainbow's parts). `logits(obs)` gives the distribution, `(*batch, num_actions,
    num_atoms)`; calling the head gives the expected values `sum_i softmax(logits)_i atoms_i`,
    what acting maximises. With `dueling=True` the logits are a value stream plus advantages
    less their mean over actions, atom by atom (Rainbow's dueling distributional head). Its
    constructor is `DiscreteQHead`'s plus `num_atoms=51, v_min=-10.0, v_max=10.0, dueling=False`
    (the keyword arguments of `_output_size`)."""

    torso: Encoder
    out: Linear  # (num_actions * num_atoms outputs, after num_atoms for the value with dueling)
    obs_size: int = eqx.field(static=True)
    num_actions: int = eqx.field(static=True)
    num_atoms: int = eqx.field(static=True)
    v_min: float = eqx.field(static=True)
    v_max: float = eqx.field(static=True)
    dueling: bool = eqx.field(static=True)

    def _output_size(self, num_atoms: int = 51, v_min: float = -10.0, v_max: float = 10.0, dueling: bool = False) -> int:
        """The constructor's keyword arguments beyond `DiscreteQHead`'s (`noisy` included): the
        support, `num_atoms` (an int >= 2) evenly spaced from `v_min` to `v_max` (finite, `v_min <
        v_max`), and `dueling` (True or False)."""
        owner = type(self).__name__
        self.num_atoms, self.v_min, self.v_max = check_categorical_support(owner, num_atoms, v_min, v_max)
        if not isinstance(dueling, bool):
            raise ValueError(f"{owner}(dueling) must be True or False, got {dueling!r}")
        self.dueling = dueling
        return (self.num_actions + int(dueling)) * self.num_atoms

    @property
    def atoms(self) -> Float[Array, " num_atoms"]:
        """The support: `num_atoms` returns evenly spaced from `v_min` to `v_max`."""
        return jnp.linspace(self.v_min, self.v_max, self.num_atoms, dtype=jnp.float32)

    def logits(self, obs: Float[Array, "*batch obs"]) -> Float[Array, "*batch num_actions num_atoms"]:
        """**Returns:** the logits of each action's return distribution over `atoms`."""
        out = self.body_outputs(obs)
        out = jnp.reshape(out, (*out.shape[:-1], -1, self.num_atoms))
        if not self.dueling:
            return out
        value, advantages = out[..., :1, :], out[..., 1:, :]
        return value + advantages - jnp.mean(advantages, axis=-2, keepdims=True)

    def __call__(self, obs: Float[Array, "*batch obs"]) -> Float[Array, "*batch num_actions"]:
        return jnp.sum(jax.nn.softmax(self.logits(obs), axis=-1) * self.atoms, axis=-1)


def check_categorical_support(owner: str, num_atoms, v_min, v_max) -> tuple[int, float, float]:
    """Check a categorical support's `num_atoms` (an int >= 2) and `v_min < v_max` (finite);
    **returns** them as `(int, float, float)`. Raises a one-line `ValueError` naming `owner`'s argument."""
    if not is_positive_int(num_atoms) or num_atoms < 2:
        raise ValueError(f"{owner}(num_atoms) must be an int >= 2, got {num_atoms!r}")
    for name, v in (("v_min", v_min), ("v_max", v_max)):
        if isinstance(v, bool) or not isinstance(v, numbers.Real) or not math.isfinite(v):
            raise ValueError(f"{owner}({name}) must be a finite number, got {v!r}")
    if not v_min < v_max:
        raise ValueError(f"{owner}(v_min, v_max) must have v_min < v_max, got {v_min!r} and {v_max!r}")
    return int(num_atoms), float(v_min), float(v_max)
