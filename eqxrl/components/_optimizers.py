"""An optax optimizer whose hyperparameters are array leaves."""

from typing import Any, Literal

import equinox as eqx
import jax.numpy as jnp
import optax
from jaxtyping import Array, Float, PyTree

from ..core import concrete_scalar, foreign_promotion, hyperparameter

OptState = Any


def _make_tx(learning_rate, max_grad_norm, *, clip: str, eps: float) -> optax.GradientTransformation:
    if clip == "global_norm":
        clipper = optax.clip_by_global_norm(max_grad_norm)
    elif clip == "value":
        clipper = optax.clip(max_grad_norm)
    else:
        clipper = optax.identity()
    return optax.chain(clipper, optax.adam(learning_rate, eps=eps))


class Optimizer(eqx.Module):
    """Adam with gradient clipping and optional linear learning-rate annealing.

    The learning rate and the clipping threshold are array leaves of this
    module, so a sweep or a PBT population gives each member its own values in
    one compiled program. The optax state is built with
    `optax.inject_hyperparams`; each `update` writes the current (annealed)
    learning rate into it, so the state always records the value in use.
    """

    learning_rate: Float[Array, ""] = hyperparameter()
    max_grad_norm: Float[Array, ""] = hyperparameter(float("inf"))
    clip: Literal["global_norm", "value", "none"] = eqx.field(static=True, default="global_norm")
    anneal: bool = eqx.field(static=True, default=False)
    eps: float = eqx.field(static=True, default=1e-5)

    def __check_init__(self):
        if self.clip not in ("global_norm", "value", "none"):
            raise ValueError(f"Optimizer(clip) must be 'global_norm', 'value' or 'none', got {self.clip!r}")
        _check_concrete(self.learning_rate, "learning_rate", lambda v: v > 0, "> 0")
        _check_concrete(self.max_grad_norm, "max_grad_norm", lambda v: v > 0, "> 0 (inf disables clipping)")

    def _tx(self) -> optax.GradientTransformation:
        make = lambda learning_rate, max_grad_norm: _make_tx(  # noqa: E731
            learning_rate, max_grad_norm, clip=self.clip, eps=self.eps
        )
        return optax.inject_hyperparams(make)(learning_rate=self.learning_rate, max_grad_norm=self.max_grad_norm)

    def init(self, params: PyTree) -> OptState:
        """**Returns:** the optax state for the inexact-array leaves of `params`."""
        return self._tx().init(eqx.filter(params, eqx.is_inexact_array))

    def current_learning_rate(self, progress: Float[Array, ""] | float = 0.0) -> Float[Array, ""]:
        """**Returns:** the learning rate at `progress` in [0, 1] of training (annealed if enabled)."""
        if self.anneal:
            return self.learning_rate * (1.0 - jnp.clip(progress, 0.0, 1.0))
        return self.learning_rate

    def update(
        self,
        grads: PyTree,
        state: OptState,
        params: PyTree,
        progress: Float[Array, ""] | float = 0.0,
    ) -> tuple[PyTree, OptState]:
        """Apply one step.

        **Arguments:** `grads` (as from `eqx.filter_grad`), the optax `state`,
        the current `params`, and `progress` (fraction of training done, for annealing).

        **Returns:** `(new_params, new_state)`.
        """
        hyper = dict(state.hyperparams)
        hyper["learning_rate"] = jnp.asarray(self.current_learning_rate(progress), hyper["learning_rate"].dtype)
        hyper["max_grad_norm"] = jnp.asarray(self.max_grad_norm, hyper["max_grad_norm"].dtype)
        state = state._replace(hyperparams=hyper)
        with foreign_promotion():
            updates, state = self._tx().update(grads, state, eqx.filter(params, eqx.is_inexact_array))
        return eqx.apply_updates(params, updates), state


def _check_concrete(value: Array, name: str, ok, expected: str) -> None:
    """Validate a hyperparameter when it is concrete (see `eqxrl.core.concrete_scalar`)."""
    v = concrete_scalar(value)
    if v is not None and not ok(v):
        raise ValueError(f"{name} must be {expected}, got {v}")
