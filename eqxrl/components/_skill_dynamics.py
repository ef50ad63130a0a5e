"""DADS's skill dynamics `q(delta | x, z)` and its intrinsic reward."""

import math
from collections.abc import Callable, Sequence

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, Int

from ..core import Key, check_positive_int
from .networks import MLP, check_last_axis

_LOG_2PI = math.log(2.0 * math.pi)


class SkillDynamics(eqx.Module):
    """A mixture of `num_experts` diagonal Gaussians over the change `delta` of a state
    descriptor, given an input `x` (a descriptor or an observation) and a one-hot skill `z`.

    One MLP on `[x, z]` outputs the mixture logits and each expert's mean (and,
    with `learn_std=True`, its std; otherwise every std is 1, as in DADS, which
    suits a target normalised to unit variance). Trained by maximum likelihood
    (`-log_prob`).
    """

    mlp: MLP
    input_size: int = eqx.field(static=True)
    output_size: int = eqx.field(static=True)
    num_skills: int = eqx.field(static=True)
    num_experts: int = eqx.field(static=True)
    learn_std: bool = eqx.field(static=True)
    min_std: float = eqx.field(static=True)

    def __init__(
        self,
        input_size: int,
        output_size: int,
        num_skills: int,
        num_experts: int = 4,
        hidden_sizes: Sequence[int] = (256, 256),
        activation: str | Callable[[Array], Array] = "relu",
        *,
        key: Key,
        learn_std: bool = False,
        min_std: float = 0.05,
    ):
        """**Arguments:**

        - `input_size`: width of `x`; `output_size`: width of `delta`.
        - `num_skills`: width of the one-hot skill (>= 2).
        - `num_experts`: mixture components (>= 1).
        - `hidden_sizes`, `activation`: the MLP torso.
        - `key`: PRNG key.
        - `learn_std`: learn a state-dependent std per expert (softplus, at least
          `min_std`) instead of a fixed std of 1.
        """
        self.input_size = check_positive_int("SkillDynamics", "input_size", input_size)
        self.output_size = check_positive_int("SkillDynamics", "output_size", output_size)
        self.num_skills = check_positive_int("SkillDynamics", "num_skills", num_skills)
        if self.num_skills < 2:
            raise ValueError(f"SkillDynamics(num_skills) must be >= 2, got {num_skills!r}")
        self.num_experts = check_positive_int("SkillDynamics", "num_experts", num_experts)
        if not min_std > 0:
            raise ValueError(f"SkillDynamics(min_std) must be > 0, got {min_std!r}")
        self.learn_std = bool(learn_std)
        self.min_std = float(min_std)
        per_expert = (2 if self.learn_std else 1) * self.output_size
        out = self.num_experts * (1 + per_expert)
        self.mlp = MLP(self.input_size + self.num_skills, out, hidden_sizes, activation, key=key)

    def __call__(
        self, x: Float[Array, "*#batch input"], skill: Float[Array, "*#batch skills"]
    ) -> tuple[Float[Array, "*b experts"], Float[Array, "*b experts out"], Float[Array, "*b experts out"]]:
        """**Returns:** `(log_weights, means, stds)` of the mixture: log mixture
        weights `(*batch, experts)` and per-expert means and stds `(*batch, experts, output)`,
        the batch shape broadcast from those of `x` and `skill`."""
        check_last_axis(x, self.input_size, "x", "SkillDynamics")
        check_last_axis(skill, self.num_skills, "skill", "SkillDynamics")
        batch = jnp.broadcast_shapes(x.shape[:-1], skill.shape[:-1])
        inputs = jnp.concatenate(
            [jnp.broadcast_to(x, (*batch, self.input_size)), jnp.broadcast_to(skill, (*batch, self.num_skills))], axis=-1
        )
        out = self.mlp(inputs)
        k, d = self.num_experts, self.output_size
        log_weights = jax.nn.log_softmax(out[..., :k], axis=-1)
        means = out[..., k : k + k * d].reshape(*batch, k, d)
        if self.learn_std:
            raw = out[..., k + k * d :].reshape(*batch, k, d)
            stds = jax.nn.softplus(raw + math.log(math.expm1(1.0))) + self.min_std
        else:
            stds = jnp.ones_like(means)
        return log_weights, means, stds

    def log_prob(
        self,
        x: Float[Array, "*#batch input"],
        skill: Float[Array, "*#batch skills"],
        delta: Float[Array, "*#batch out"],
    ) -> Float[Array, "*b"]:
        """**Returns:** `log q(delta | x, skill)`, one value per (broadcast) batch element."""
        check_last_axis(delta, self.output_size, "delta", "SkillDynamics")
        log_weights, means, stds = self(x, skill)
        z = (delta[..., None, :] - means) / stds
        per_expert = -0.5 * jnp.sum(jnp.square(z) + _LOG_2PI + 2.0 * jnp.log(stds), axis=-1)
        return jax.nn.logsumexp(log_weights + per_expert, axis=-1)

    def log_prob_all_skills(
        self, x: Float[Array, "*batch input"], delta: Float[Array, "*batch out"]
    ) -> Float[Array, "*batch skills"]:
        """**Returns:** `log q(delta | x, z)` for every skill `z` (the last axis)."""
        eye = jnp.eye(self.num_skills, dtype=jnp.float32)
        # Skills on a new leading axis, broadcast against the batch: one matmul per layer.
        skills = eye.reshape((self.num_skills,) + (1,) * (x.ndim - 1) + (self.num_skills,))
        lp = self.log_prob(x[None], skills, delta[None])
        return jnp.moveaxis(lp, 0, -1)

    def mean(self, x: Float[Array, "*batch input"], skill: Float[Array, "*batch skills"]) -> Float[Array, "*batch out"]:
        """**Returns:** the mixture's mean prediction of `delta`."""
        log_weights, means, _ = self(x, skill)
        return jnp.sum(jnp.exp(log_weights)[..., None] * means, axis=-2)


def dads_intrinsic_reward(
    log_probs: Float[Array, "*batch skills"], skill: Int[Array, "*batch"]
) -> Float[Array, "*batch"]:
    """DADS's reward `log q(delta|s,z) - log (1/L) sum_z' q(delta|s,z')` over all `L` skills.

    **Arguments:** `log_probs`, `log q(delta | s, z')` for every skill (as from
    `SkillDynamics.log_prob_all_skills`), and the index `skill` of the skill that acted.

    **Returns:** the reward, at most `log L`; 0 when every skill predicts alike
    (computed with log-sum-exp, so it is finite for any finite log-probabilities).
    """
    if jnp.ndim(log_probs) < 1 or tuple(jnp.shape(skill)) != tuple(log_probs.shape[:-1]):
        raise ValueError(
            f"dads_intrinsic_reward(skill) must have shape {tuple(jnp.shape(log_probs))[:-1]} (the batch shape of "
            f"log_probs, (*batch, skills)), got {tuple(jnp.shape(skill))}"
        )
    num_skills = log_probs.shape[-1]
    own = jnp.take_along_axis(log_probs, skill.astype(jnp.int32)[..., None], axis=-1)
    # log L - log sum_z' exp(lp_z' - lp_z): differences first, so that large
    # log-probabilities of similar size do not cancel in float32.
    return jnp.float32(math.log(num_skills)) - jax.nn.logsumexp(log_probs - own, axis=-1)
