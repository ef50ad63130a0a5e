"""TD targets and off-policy losses on hand-built batches."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from eqxrl.components import (
    NStepWindow,
    clipped_double_q_target,
    huber,
    polyak,
    q_learning_target,
    sac_actor_loss,
    sac_alpha_loss,
    select_q,
    smoothed_target_action,
)

GAMMA = 0.9


def _one_step_discounts(terminated, truncated):
    """The discounts the n-step window emits for one-step transitions."""
    b = len(terminated)
    obs = jnp.zeros((b, 1))
    window = NStepWindow.create(
        obs[None][:0], jnp.zeros((0, b), jnp.int32), jnp.zeros((0, b)), jnp.zeros((0, b), bool),
        jnp.zeros((0, b), bool), obs[None][:0],
    )
    window = window.push(obs, jnp.zeros((b,), jnp.int32), jnp.ones((b,)), jnp.asarray(terminated),
                         jnp.asarray(truncated), obs + 1.0)
    return window.emit().transition(GAMMA).discount


@pytest.mark.slow  # (over 2 s in the fast tier: tests/tiers.py)
def test_terminated_stops_bootstrapping_truncated_does_not():
    discount = _one_step_discounts([True, False, False], [False, True, False])
    np.testing.assert_allclose(discount, [0.0, GAMMA, GAMMA])
    next_q = jnp.asarray([[5.0, 7.0], [5.0, 7.0], [5.0, 7.0]])
    target = q_learning_target(jnp.ones(3), discount, next_q)
    np.testing.assert_allclose(target, [1.0, 1.0 + GAMMA * 7.0, 1.0 + GAMMA * 7.0])


def test_double_q_target_uses_online_argmax():
    next_target = jnp.asarray([[1.0, 10.0, 3.0]])
    next_online = jnp.asarray([[0.0, -1.0, 2.0]])  # online prefers action 2
    plain = q_learning_target(jnp.zeros(1), jnp.ones(1), next_target)
    double = q_learning_target(jnp.zeros(1), jnp.ones(1), next_target, next_online)
    assert float(plain[0]) == 10.0  # max of the target network
    assert float(double[0]) == 3.0  # target network's value of the online argmax


def test_select_q_and_huber():
    q = jnp.asarray([[1.0, 2.0], [3.0, 4.0]])
    np.testing.assert_array_equal(select_q(q, jnp.asarray([1, 0])), [2.0, 3.0])
    np.testing.assert_allclose(huber(jnp.asarray([0.5, -2.0, 3.0])), [0.125, 1.5, 2.5])


def test_td3_target_smoothing_is_clipped():
    action = jnp.zeros((10_000, 2))
    smoothed = smoothed_target_action(action, jax.random.key(0), noise=1.0, noise_clip=0.3)
    assert float(jnp.max(jnp.abs(smoothed))) == pytest.approx(0.3)
    assert float(jnp.std(smoothed)) < 0.3
    near_bound = smoothed_target_action(jnp.full((1000, 1), 0.9), jax.random.key(1), noise=1.0, noise_clip=0.5)
    assert float(jnp.max(near_bound)) <= 1.0 and float(jnp.min(near_bound)) >= 0.4 - 1e-6
    np.testing.assert_array_equal(smoothed_target_action(action, jax.random.key(2), 0.0, 0.5), action)


def test_clipped_double_q_and_entropy_term():
    qs = jnp.asarray([[1.0, 5.0], [2.0, 4.0]])  # two critics, two samples
    log_prob = jnp.asarray([-1.0, 2.0])
    target = clipped_double_q_target(jnp.zeros(2), jnp.full(2, 0.5), qs, log_prob, alpha=0.1)
    # min over critics (1, 4), minus alpha * log pi (entropy bonus), discounted
    np.testing.assert_allclose(target, 0.5 * (jnp.asarray([1.0, 4.0]) - 0.1 * log_prob), rtol=1e-6)
    # SAC's actor loss prefers higher Q and higher entropy (lower log pi)
    base = sac_actor_loss(qs, log_prob, 0.1)
    assert float(sac_actor_loss(qs + 1.0, log_prob, 0.1)) < float(base)
    assert float(sac_actor_loss(qs, log_prob - 1.0, 0.1)) < float(base)


@pytest.mark.parametrize("log_prob, direction", [(2.0, +1), (-5.0, -1)])
def test_alpha_loss_sign(log_prob, direction):
    """Entropy below target (log pi high) must raise alpha; above target must lower it."""
    target_entropy = -1.0
    grad = jax.grad(sac_alpha_loss)(jnp.asarray(0.0), jnp.full((4,), log_prob), target_entropy)
    # gradient descent on log_alpha moves opposite to the gradient
    assert np.sign(-float(grad)) == direction


def test_polyak():
    online, target = {"w": jnp.ones(3)}, {"w": jnp.zeros(3)}
    np.testing.assert_allclose(polyak(online, target, 0.25)["w"], 0.25)
    np.testing.assert_allclose(polyak(online, target, 1.0)["w"], 1.0)
