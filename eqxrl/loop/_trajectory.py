"""Descriptors of whole evaluation episodes for quality-diversity (QDax's
`descriptor_extraction_fn(transitions, mask)`): `TrajectoryDescriptor`, and the built-in
`"feet_contact"` of the brax locomotion envs (the fraction of the episode's steps each foot
touches the ground)."""

from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Bool, Float, PyTree

from ..core import EnvState
from ..envs import AbstractEnv, BraxFeetContact, innermost_state

__all__ = ["TrajectoryDescriptor", "feet_contact_descriptor", "mean_over_episode"]


def mean_over_episode(transitions: dict[str, Any], mask: Bool[Array, " time"]) -> Float[Array, " n"]:
    """The mean, over the episode's steps (`mask`), of each step's `next_state` features
    (a vector per step, as a `TrajectoryDescriptor`'s `features` keeps them); 0 for an
    episode with no step.

    **Returns:** `(n,)` float32."""
    kept = jnp.asarray(transitions["next_state"], jnp.float32).reshape(mask.shape[0], -1)
    weight = mask.astype(jnp.float32)
    return jnp.sum(kept * weight[:, None], axis=0) / jnp.maximum(jnp.sum(weight), 1.0)


class TrajectoryDescriptor(eqx.Module):
    """A behaviour descriptor computed from a whole evaluation episode, not only its final
    state: `fn(transitions, mask) -> vector` (QDax's `descriptor_extraction_fn`).

    The evaluation records one transition per step, up to its `max_steps`, for each episode:
    `transitions` is a dict of arrays with a leading time axis `(max_steps, ...)`:

    - `obs`: the observation the action was taken in; `action`; `reward`;
    - `next_obs`: the observation after the step;
    - `next_state`: the env state after the step, below eqxrl's wrappers
      (`eqxrl.envs.innermost_state`), or what `features(next_state, next_obs)` keeps of it
      (a few numbers per step instead of a simulator's whole state).

    `mask` `(max_steps,)` is True for the steps inside the episode (before it ended);
    the rest are padding (after the episode ended, or zeros after the evaluation stopped).
    `fn` is traced (jit, vmap) and must return a non-empty vector of a fixed size.
    """

    fn: Callable[[dict[str, Any], Array], Array] = eqx.field(static=True)
    features: Callable[[EnvState, Array], PyTree] | None = eqx.field(static=True, default=None)
    size: int = eqx.field(static=True, default=0)
    kind: str = eqx.field(static=True, default="")

    def __check_init__(self):
        if not callable(self.fn):
            raise ValueError(f"TrajectoryDescriptor(fn) must be a callable (transitions, mask) -> vector, got {self.fn!r}")
        if self.features is not None and not callable(self.features):
            raise ValueError(f"TrajectoryDescriptor(features) must be None or a callable (state, obs) -> pytree, got {self.features!r}")

    @property
    def name(self) -> str:
        """`kind`, else the name of `fn`."""
        return self.kind or getattr(self.fn, "__name__", "trajectory")

    def record(self, obs: Array, action: Array, reward: Array, next_state: EnvState, next_obs: Array) -> dict[str, Any]:
        """One (unbatched) step's transition, as `fn` receives it stacked over time."""
        state = innermost_state(next_state)
        kept = state if self.features is None else self.features(state, next_obs)
        return dict(obs=obs, action=action, reward=reward, next_obs=next_obs, next_state=kept)

    def __call__(self, transitions: dict[str, Any], mask: Bool[Array, " time"]) -> Float[Array, " descriptor"]:
        """The descriptor of one episode's `transitions` and `mask`, a float32 vector."""
        return jnp.asarray(self.fn(transitions, mask), jnp.float32).reshape(-1)

    def resolved(self, env: AbstractEnv, owner: str) -> "TrajectoryDescriptor":
        """**Returns:** this descriptor with its `size`, found by tracing `fn` on a two-step
        trajectory of `env`. Raises a `ValueError` naming `owner` unless it is a non-empty vector."""

        def trace(key):
            state, ts = env.reset(key)
            action = env.action_space.sample(key)
            step = self.record(ts.obs, action, ts.reward, state, ts.obs)
            return self(jax.tree.map(lambda x: jnp.stack([x, x]), step), jnp.ones((2,), bool))

        try:
            out = jax.eval_shape(trace, jax.random.key(0))
        except ValueError:
            raise
        except Exception as error:  # the user's function on the env's transitions: say whose it is
            raise ValueError(f"{owner}(descriptor): the TrajectoryDescriptor {self.name!r} failed on env {env.name!r}'s transitions: {error}") from error
        if len(out.shape) != 1 or out.shape[0] < 1:
            raise ValueError(f"{owner}(descriptor) must give a non-empty vector, got shape {out.shape} on env {env.name!r}")
        return TrajectoryDescriptor(self.fn, self.features, int(out.shape[0]), self.name)

    # ----- the evaluation loop's three steps (see `eqxrl.loop.episode_outcomes`)
    def start(self, transition: PyTree, num_episodes: int, max_steps: int) -> tuple[PyTree, Array]:
        """Empty buffers for `max_steps` transitions shaped like `transition` (batched), and the mask."""
        buffer = jax.tree.map(lambda x: jnp.zeros((max_steps, *x.shape), x.dtype), transition)
        return buffer, jnp.zeros((max_steps, num_episodes), bool)

    def step(self, carry: tuple[PyTree, Array], t: Array, inside: Array, transition: PyTree) -> tuple[PyTree, Array]:
        """Write step `t`'s (batched) `transition` and whether each episode was still running."""
        buffer, mask = carry
        buffer = jax.tree.map(lambda b, x: jax.lax.dynamic_update_index_in_dim(b, x, t, 0), buffer, transition)
        return buffer, jax.lax.dynamic_update_index_in_dim(mask, inside, t, 0)

    def finish(self, carry: tuple[PyTree, Array]) -> Float[Array, "episodes descriptor"]:
        """Each episode's descriptor from the buffers (time on axis 0, episodes on axis 1)."""
        buffer, mask = carry
        return jax.vmap(self, in_axes=(1, 1))(buffer, mask)


def feet_contact_descriptor(env: AbstractEnv, owner: str = "evaluate") -> TrajectoryDescriptor:
    """The `"feet_contact"` descriptor of a brax locomotion env (QDax's feet-contact
    descriptor): for each foot, the fraction of the episode's steps after which it touches
    the ground (`eqxrl.envs.BraxFeetContact` per step, `mean_over_episode`), in [0, 1]^n_feet.

    Raises a `ValueError` naming `owner` on an env that is not a known brax locomotion env."""
    return TrajectoryDescriptor(mean_over_episode, BraxFeetContact(env, owner), kind="feet_contact")
