"""C51's distributional TD (Bellemare et al. 2017, "A Distributional Perspective on Reinforcement
Learning"): the projection of a categorical distribution onto a fixed support, the projected
target of (double) categorical Q-learning, and its cross-entropy loss.

Every target takes a transition's `discount`, which already folds in termination (see
`eqxrl.components.Transition`): a terminated transition's target is all its mass on the atom
nearest the reward.
"""

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, Int

from ._td import _check_batch


def _check_support(owner: str, name: str, z: Array) -> None:
    if jnp.ndim(z) != 1 or jnp.shape(z)[0] < 2:
        raise ValueError(f"{owner}({name}) must be a 1-D support of at least 2 atoms, got shape {tuple(jnp.shape(z))}")


def categorical_l2_project(
    z_p: Float[Array, "*batch kp"], probs: Float[Array, "*batch kp"], z_q: Float[Array, " kq"]
) -> Float[Array, "*batch kq"]:
    """Project the categorical distribution of atoms `z_p` and probabilities `probs` onto the
    sorted support `z_q` (C51's projection: the Cramér (L2 over CDFs) projection).

    Each atom of `z_p`, clipped into `[z_q[0], z_q[-1]]`, gives its mass to its two neighbours
    on `z_q` in proportion to its closeness. `z_p` and `probs` may have leading batch axes
    (broadcast against each other); `z_q` is one support. Equal to rlax's
    `categorical_l2_project` row by row. **Returns:** the probabilities on `z_q`."""
    _check_support("categorical_l2_project", "z_q", z_q)
    if jnp.shape(z_p)[-1:] != jnp.shape(probs)[-1:]:
        raise ValueError(
            f"categorical_l2_project(z_p) must have as many atoms as probs ({jnp.shape(probs)[-1]}), "
            f"got shape {tuple(jnp.shape(z_p))}"
        )
    d_pos = jnp.roll(z_q, -1) - z_q  # z_q[i + 1] - z_q[i]
    d_neg = z_q - jnp.roll(z_q, 1)  # z_q[i] - z_q[i - 1]
    inv_pos = jnp.where(d_pos > 0, 1.0 / jnp.where(d_pos > 0, d_pos, 1.0), 0.0)[:, None]
    inv_neg = jnp.where(d_neg > 0, 1.0 / jnp.where(d_neg > 0, d_neg, 1.0), 0.0)[:, None]
    z_p = jnp.clip(z_p, z_q[0], z_q[-1])[..., None, :]  # (*batch, 1, kp)
    delta = z_p - z_q[:, None]  # (*batch, kq, kp): atom j of z_p from atom i of z_q
    above = (delta >= 0.0).astype(delta.dtype)
    scaled = above * delta * inv_pos - (1.0 - above) * delta * inv_neg
    return jnp.sum(jnp.clip(1.0 - scaled, 0.0, 1.0) * probs[..., None, :], axis=-1)


def categorical_q_target(
    reward: Float[Array, " b"],
    discount: Float[Array, " b"],
    next_logits: Float[Array, "b a n"],
    next_selector: Float[Array, "b a"],
    atoms: Float[Array, " n"],
) -> Float[Array, "b n"]:
    """The projected target distribution of categorical Q-learning: the distribution of
    `reward + discount * Z(s', a*)` under `next_logits` (the target network's, per action and
    atom) with `a* = argmax next_selector` (the target network's expected Q for C51; the online
    network's for double Q-learning), projected onto `atoms` (`categorical_l2_project`).
    **Returns:** `(b, n)` probabilities (take their `stop_gradient` for a loss)."""
    _check_support("categorical_q_target", "atoms", atoms)
    if jnp.ndim(next_logits) != 3 or next_logits.shape[-1] != atoms.shape[0]:
        raise ValueError(
            f"categorical_q_target(next_logits) must have shape (batch, num_actions, {atoms.shape[0]}), "
            f"got {tuple(jnp.shape(next_logits))}"
        )
    b = next_logits.shape[0]
    if tuple(jnp.shape(next_selector)) != next_logits.shape[:2]:
        raise ValueError(
            f"categorical_q_target(next_selector) must have shape {next_logits.shape[:2]}, got {tuple(jnp.shape(next_selector))}"
        )
    _check_batch("categorical_q_target", "one per transition", b, reward=reward, discount=discount)
    best = jnp.argmax(next_selector, axis=-1)
    probs = jax.nn.softmax(jnp.take_along_axis(next_logits, best[:, None, None], axis=1)[:, 0], axis=-1)
    z = jnp.reshape(reward, (-1, 1)) + jnp.reshape(discount, (-1, 1)) * atoms
    return categorical_l2_project(z, probs, atoms)


def categorical_q_loss(
    logits: Float[Array, "b a n"], action: Int[Array, " b"], target: Float[Array, "b n"]
) -> Float[Array, " b"]:
    """The cross-entropy `-sum_i target_i log softmax(logits[action])_i` of each taken action's
    distribution to its (projected) `target`: C51's per-sample loss, also its PER priority.
    With `categorical_q_target` it equals rlax's `categorical_double_q_learning`."""
    if jnp.ndim(logits) != 3 or tuple(jnp.shape(target)) != (logits.shape[0], logits.shape[2]):
        raise ValueError(
            "categorical_q_loss(target) must have shape (batch, num_atoms) of logits (batch, num_actions, num_atoms), "
            f"got {tuple(jnp.shape(target))} and {tuple(jnp.shape(logits))}"
        )
    if tuple(jnp.shape(action)) != logits.shape[:1]:
        raise ValueError(f"categorical_q_loss(action) must have shape {logits.shape[:1]}, got {tuple(jnp.shape(action))}")
    taken = jnp.take_along_axis(logits, action.astype(jnp.int32)[:, None, None], axis=1)[:, 0]
    return -jnp.sum(target * jax.nn.log_softmax(taken, axis=-1), axis=-1)
