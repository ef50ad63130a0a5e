"""Noisy linear layers (Fortunato et al. 2018, "Noisy Networks for Exploration"; one of Rainbow's
parts): learned, factorised Gaussian perturbations of a layer's weights, for exploration."""

import math
from typing import Any

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float

from ...core import Key, check_positive_int
from ._mlp import Linear


def _signed_sqrt(x: Array) -> Array:
    return jnp.sign(x) * jnp.sqrt(jnp.abs(x))


class NoisyLinear(Linear):
    """A `Linear` layer with factorised Gaussian noise on its weights (Fortunato et al. 2018):
    `sample(key)` gives the `Linear` of weights `weight + weight_sigma * outer(f(e_in), f(e_out))`
    and biases `bias + bias_sigma * f(e_out)`, `e_in`, `e_out` standard normal, `f(x) = sign(x)
    sqrt(|x|)`. Calling it directly uses the mean weights (`weight`, `bias`): deterministic
    evaluation. `weight`, `bias`, `weight_sigma` and `bias_sigma` are all trained."""

    weight_sigma: Float[Array, "in_size out_size"]
    bias_sigma: Float[Array, " out_size"]

    def __init__(self, in_size: int, out_size: int, *, key: Key, sigma0: float = 0.5):
        """**Arguments:** `in_size`, `out_size`, a PRNG `key`, and `sigma0` (> 0): the means start
        uniform on `[-1/sqrt(in_size), 1/sqrt(in_size)]` and every sigma at `sigma0 / sqrt(in_size)`
        (the paper's factorised initialisation)."""
        in_size = check_positive_int("NoisyLinear", "in_size", in_size)
        out_size = check_positive_int("NoisyLinear", "out_size", out_size)
        if isinstance(sigma0, bool) or not isinstance(sigma0, (int, float)) or not sigma0 > 0:
            raise ValueError(f"NoisyLinear(sigma0) must be a number > 0, got {sigma0!r}")
        bound = 1.0 / math.sqrt(in_size)
        w_key, b_key = jax.random.split(key)
        self.weight = jax.random.uniform(w_key, (in_size, out_size), jnp.float32, -bound, bound)
        self.bias = jax.random.uniform(b_key, (out_size,), jnp.float32, -bound, bound)
        self.weight_sigma = jnp.full((in_size, out_size), sigma0 * bound, jnp.float32)
        self.bias_sigma = jnp.full((out_size,), sigma0 * bound, jnp.float32)

    def sample_from_noise(self, noise_in: Float[Array, " in_size"], noise_out: Float[Array, " out_size"]) -> Linear:
        """**Returns:** the `Linear` layer that the standard-normal `noise_in`, `noise_out` give (see the class)."""
        f_in, f_out = _signed_sqrt(noise_in), _signed_sqrt(noise_out)
        weight = self.weight + self.weight_sigma * jnp.outer(f_in, f_out)
        bias = self.bias + self.bias_sigma * f_out
        layer = object.__new__(Linear)  # (as a pytree unflattens: no initialiser to run, nothing drawn)
        object.__setattr__(layer, "weight", weight)
        object.__setattr__(layer, "bias", bias)
        return layer

    def call_with_noise(
        self, x: Float[Array, "*batch in_size"], noise_in: Float[Array, "*batch in_size"], noise_out: Float[Array, "*batch out_size"]
    ) -> Float[Array, "*batch out_size"]:
        """**Returns:** each input row through its own draw of the layer: row `i` through
        `sample_from_noise(noise_in[i], noise_out[i])` (computed without forming the weights)."""
        f_in, f_out = _signed_sqrt(noise_in), _signed_sqrt(noise_out)
        return x @ self.weight + self.bias + f_out * ((x * f_in) @ self.weight_sigma + self.bias_sigma)

    def sample(self, key: Key) -> Linear:
        """**Returns:** the `Linear` layer of one draw of the noise from `key`."""
        in_key, out_key = jax.random.split(key)
        in_size, out_size = self.weight.shape
        return self.sample_from_noise(jax.random.normal(in_key, (in_size,)), jax.random.normal(out_key, (out_size,)))


def _is_noisy(x: Any) -> bool:
    return isinstance(x, NoisyLinear)


def sample_noise(tree: Any, key: Key) -> Any:
    """**Returns:** `tree` (a network, or any pytree) with each of its `NoisyLinear` layers replaced
    by `layer.sample(k)`, an independent key `k` from `key` for each: one draw of the noisy network.
    Gradients reach every layer's means and sigmas. A tree without noisy layers comes back as it is."""
    layers = [x for x in jax.tree.leaves(tree, is_leaf=_is_noisy) if _is_noisy(x)]
    if not layers:
        return tree
    keys = iter(jax.random.split(key, len(layers)))
    return jax.tree.map(lambda x: x.sample(next(keys)) if _is_noisy(x) else x, tree, is_leaf=_is_noisy)


def has_noise(tree: Any) -> bool:
    """Whether `tree` holds any `NoisyLinear` layer."""
    return any(_is_noisy(x) for x in jax.tree.leaves(tree, is_leaf=_is_noisy))


def noisy_output(owner: str, noisy: Any, out: Linear, key: Key) -> Linear:
    """A head's output layer: `out`, or with `noisy=True` a `NoisyLinear` of its shape (from `key`).
    Raises a one-line `ValueError` naming `owner(noisy)` unless `noisy` is True or False."""
    if not isinstance(noisy, bool):
        raise ValueError(f"{owner}(noisy) must be True or False, got {noisy!r}")
    return NoisyLinear(*out.weight.shape, key=key) if noisy else out
