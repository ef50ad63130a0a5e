"""Extra loss terms: modules an agent adds to its policy or critic loss.

Every built-in agent takes `policy_loss_terms` and `critic_loss_terms` (tuples of
terms). Each term is called inside the agent's loss with

- `network`: the module being differentiated (the policy, or the critic);
- `batch`: the batch the loss is computed on (PPO: its minibatch tuple; the
  off-policy agents: the replay `Sample`);
- `outputs`: a dict of what the agent computed, always with `"obs"` (the
  normalised flat observations the network saw); policy terms get `"dist"` (the
  policy's distribution at `"obs"`) where the policy is stochastic and `"action"`
  where it is deterministic, critic terms get `"q"` or `"value"`;

and returns `(loss, metrics)`: a scalar added to the agent's loss (so
differentiated with it) and a dict of scalars logged as `<prefix>/<name>`.
"""

import abc
import re
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, PyTree

from ..core import Metrics, check_hyperparameter, hyperparameter
from .distributions import AbstractDistribution, kl_divergence


class AbstractLossTerm(eqx.Module):
    """A scalar added to an agent's policy or critic loss (see the module docstring)."""

    @abc.abstractmethod
    def __call__(self, network: PyTree, batch: Any, outputs: dict[str, Any]) -> tuple[Float[Array, ""], Metrics]:
        """**Returns:** `(loss, metrics)`: a scalar to add to the loss, and scalars to log."""

    @property
    def name(self) -> str:
        """The name its metrics are logged under (the class name, snake_case)."""
        return re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", type(self).__name__).lower()


class L2Penalty(AbstractLossTerm):
    """`coef * sum(w ** 2)` over every floating-point parameter of the network (weight decay as a loss)."""

    coef: Float[Array, ""] = hyperparameter(1e-4)

    def __check_init__(self):
        check_hyperparameter("L2Penalty", "coef", self.coef, lambda v: v >= 0, ">= 0")

    def __call__(self, network, batch, outputs):
        leaves = jax.tree.leaves(eqx.filter(network, eqx.is_inexact_array))
        total = sum((jnp.sum(jnp.square(w)) for w in leaves), jnp.zeros((), jnp.float32))
        return self.coef * total, {"l2": total}


class KLToReference(AbstractLossTerm):
    """`coef * mean KL(pi(.|s) || reference(.|s))`: keeps the policy near a reference
    policy (a trained actor, e.g. `state.actor` of an earlier run, mapping observations
    to a distribution of the same kind); the reference is not trained."""

    reference: Any
    coef: Float[Array, ""] = hyperparameter(0.1)

    def __check_init__(self):
        check_hyperparameter("KLToReference", "coef", self.coef, lambda v: v >= 0, ">= 0")
        if not callable(self.reference):
            raise ValueError(f"KLToReference(reference) must be a policy network obs -> distribution, got {self.reference!r}")

    def __call__(self, network, batch, outputs):
        dist = outputs.get("dist")
        if not isinstance(dist, AbstractDistribution):
            raise ValueError(
                "KLToReference needs a stochastic policy: the agent's outputs have no 'dist' "
                f"(keys: {sorted(outputs)}); use it with PPO, SAC or MPO"
            )
        reference = jax.lax.stop_gradient(self.reference(outputs["obs"]))
        kl = jnp.mean(kl_divergence(dist, reference))
        return self.coef * kl, {"kl": kl}


def check_loss_terms(owner: str, name: str, terms: Any) -> None:
    """Raise a ValueError naming `owner(name)` unless `terms` is a tuple of loss terms."""
    if not isinstance(terms, tuple) or not all(isinstance(t, AbstractLossTerm) for t in terms):
        raise ValueError(
            f"{owner}({name}) must be a tuple of eqxrl.components.AbstractLossTerm (L2Penalty(...), "
            f"KLToReference(...), or your own subclass), got {terms!r}"
        )


def add_loss_terms(
    terms: tuple[AbstractLossTerm, ...], prefix: str, network: PyTree, batch: Any, outputs: dict[str, Any]
) -> tuple[Float[Array, ""], Metrics]:
    """**Returns:** the sum of the terms' losses and their metrics (`<prefix>/<name>` for
    each loss, `<prefix>/<name>/<key>` for each of its metrics; a repeated name gets `_1`, `_2`...)."""
    total = jnp.zeros((), jnp.float32)
    metrics: Metrics = {}
    for term in terms:
        loss, extra = term(network, batch, outputs)
        loss = jnp.asarray(loss, jnp.float32)
        if loss.shape != ():
            raise ValueError(f"{type(term).__name__} must return a scalar loss, got shape {loss.shape}")
        name, i = f"{prefix}/{term.name}", 0
        while name in metrics:
            i += 1
            name = f"{prefix}/{term.name}_{i}"
        total = total + loss
        metrics[name] = loss
        metrics.update({f"{name}/{k}": jnp.asarray(v, jnp.float32) for k, v in extra.items()})
    return total, metrics


def as_terms(value: Any) -> Any:
    """Converter for loss-term fields: a single term or a list becomes a tuple."""
    if isinstance(value, AbstractLossTerm):
        return (value,)
    if isinstance(value, list):
        return tuple(value)
    return value


def loss_terms(**kwargs: Any) -> Any:
    """Declare a loss-term field (default: no terms)."""
    return eqx.field(converter=as_terms, default=(), **kwargs)
