"""Clear errors at the components' boundaries: shapes and dtypes a user can plausibly get wrong,
checked at trace time (static shapes, so free at run time), each a `ValueError` naming the owner,
the argument, what was expected and what was received, instead of a raw JAX error (or, for a
`(batch, 1)` column beside a `(batch,)` array, a silent broadcast to `(batch, batch)`).

Under the test suite's jaxtyping hook, some annotations reject the input first (with a
`TypeCheckError`); `both_paths` checks that path and the message a user (no hook) gets.
"""

import jax
import jax.numpy as jnp
import jaxtyping
import numpy as np
import pytest

from eqxrl.components import (
    Categorical,
    CategoricalHead,
    ContinuousQHead,
    Normal,
    TanhNormal,
    clipped_double_q_target,
    dads_intrinsic_reward,
    gae,
    lambda_returns,
    n_step_returns,
    ppo_policy_loss,
    q_learning_target,
    sac_actor_loss,
    select_q,
    value_loss,
)
from typecheck import no_runtime_typecheck


def both_paths(fn, message, hook_catches: str | None = None):
    """`fn()` raises `ValueError(message)` for a user; under the hook, the same ValueError, or a
    TypeCheckError naming the parameter `hook_catches` when an annotation rejects the input first."""
    if hook_catches is None:
        with pytest.raises(ValueError, match=message):
            fn()
    else:
        with pytest.raises(jaxtyping.TypeCheckError, match=hook_catches):
            fn()
    with no_runtime_typecheck(), pytest.raises(ValueError, match=message):
        fn()


# ----------------------------------------------------------------------------- distributions


def test_categorical_log_prob_of_a_column(getkey):
    dist = CategoricalHead(3, 4, (8,), key=getkey())(jnp.zeros((8, 3)))
    message = r"Categorical\.log_prob\(value\) must have shape \(8,\) \(the batch shape of the logits\), got \(8, 1\)"
    both_paths(lambda: dist.log_prob(jnp.zeros((8, 1), jnp.int32)), message)
    both_paths(lambda: dist.log_prob(jnp.zeros((4,), jnp.int32)), r"must have shape \(8,\) .*got \(4,\)")
    # At trace time, under jit too; the right shape is unaffected.
    with pytest.raises(ValueError, match=message):
        jax.jit(lambda v: dist.log_prob(v))(jnp.zeros((8, 1), jnp.int32))
    assert jax.jit(lambda v: dist.log_prob(v))(jnp.zeros(8, jnp.int32)).shape == (8,)


@pytest.mark.parametrize("cls", [Normal, TanhNormal])
def test_normal_log_prob_shapes(cls):
    name = cls.__name__
    dist = cls(jnp.zeros((8, 1)), jnp.ones((8, 1)))
    # A (batch,) value against a (batch, 1) loc would broadcast to (batch, batch).
    message = rf"{name}\.log_prob\(value\) must have shape \(8, 1\) \(the distribution's batch and event shape; .*got \(8,\)"
    both_paths(lambda: dist.log_prob(jnp.zeros(8)), message)
    wide = cls(jnp.zeros((8, 2)), jnp.ones((8, 2)))
    both_paths(lambda: wide.log_prob(jnp.zeros((8, 3))), rf"{name}\.log_prob\(value\) must have shape \(8, 2\)")
    both_paths(lambda: wide.log_prob(jnp.zeros((4, 2))), r"must have shape \(8, 2\) .*got \(4, 2\)")
    assert wide.log_prob(jnp.zeros((8, 2))).shape == (8,)
    # Size-1 batch axes and extra leading (sample) axes still broadcast (for a user: the
    # annotation's "*batch" of the value and of the result reject these under the hook).
    with no_runtime_typecheck():
        assert wide.log_prob(jnp.zeros((1, 2))).shape == (8,)
        assert wide.log_prob(jnp.zeros((5, 8, 2))).shape == (5, 8)
        assert wide.log_prob(jnp.zeros(2)).shape == (8,)


def test_categorical_direct_construction():
    dist = Categorical(jnp.zeros((2, 5, 3)))
    assert dist.log_prob(jnp.zeros((2, 5), jnp.int32)).shape == (2, 5)
    both_paths(lambda: dist.log_prob(jnp.zeros((5,), jnp.int32)), r"must have shape \(2, 5\) .*got \(5,\)")


# ----------------------------------------------------------------------------- networks


def test_continuous_q_head_batch_mismatch(getkey):
    head = ContinuousQHead(3, 2, (8,), key=getkey())
    message = r"ContinuousQHead: action must have shape \(8, 2\) \(the batch shape of obs, \(8,\)\), got shape \(4, 2\)"
    both_paths(lambda: head(jnp.zeros((8, 3)), jnp.zeros((4, 2))), message, hook_catches="action")
    assert head(jnp.zeros((8, 3)), jnp.zeros((8, 2))).shape == (8,)


# ----------------------------------------------------------------------------- returns


R = jnp.zeros((4, 2))
B = jnp.zeros((4, 2), bool)


@pytest.mark.parametrize(
    "call, message, hook",
    [
        (lambda: gae(R, R, R, B.astype(jnp.float32), B, 0.9, 0.95), r"gae\(terminated\) must have dtype bool \(an episode-end flag\), got float32; cast it with \.astype\(bool\)", "terminated"),
        (lambda: gae(R, R, R, B, B.astype(jnp.int32), 0.9, 0.95), r"gae\(truncated\) must have dtype bool .*got int32", "truncated"),
        (lambda: lambda_returns(R, R, B.astype(jnp.float32), B, 0.9, 0.95), r"lambda_returns\(terminated\) must have dtype bool .*got float32", "terminated"),
        (lambda: n_step_returns(R, R, B, B.astype(jnp.float32), 0.9, 2), r"n_step_returns\(truncated\) must have dtype bool .*got float32", "truncated"),
        (lambda: gae(R.astype(jnp.int32), R, R, B, B, 0.9, 0.95), r"gae\(rewards\) must have a floating dtype, got int32", "rewards"),
        (lambda: gae(R, R, R.astype(jnp.int32), B, B, 0.9, 0.95), r"gae\(next_values\) must have a floating dtype, got int32", "next_values"),
    ],
)
def test_return_estimators_dtypes(call, message, hook):
    both_paths(call, message, hook_catches=hook)


# ----------------------------------------------------------------------------- TD targets and losses


@pytest.mark.parametrize(
    "call, message, hook",
    [
        (lambda: select_q(jnp.zeros((8, 3)), jnp.zeros((8, 1), jnp.int32)), r"select_q\(action\) must have shape \(8,\) \(one per row of q\), got \(8, 1\)", "action"),
        (lambda: select_q(jnp.zeros(8), jnp.zeros(8, jnp.int32)), r"select_q\(q\) must have shape \(batch, num_actions\), got \(8,\)", "q"),
        (lambda: q_learning_target(jnp.zeros((8, 1)), jnp.zeros(8), jnp.zeros((8, 3))), r"q_learning_target\(reward\) must have shape \(8,\) \(one per row of next_q_target\), got \(8, 1\)", "reward"),
        (lambda: q_learning_target(jnp.zeros(8), jnp.zeros((8, 1)), jnp.zeros((8, 3))), r"q_learning_target\(discount\) must have shape \(8,\)", "discount"),
        (lambda: q_learning_target(jnp.zeros(8), jnp.zeros(8), jnp.zeros((8, 3)), jnp.zeros((8, 2))), r"q_learning_target\(next_q_online\) must have the shape of next_q_target \(8, 3\), got \(8, 2\)", "next_q_online"),
        (lambda: clipped_double_q_target(jnp.zeros(8), jnp.zeros((8, 1)), jnp.zeros((2, 8))), r"clipped_double_q_target\(discount\) must have shape \(8,\) \(one per column of next_qs, \(num_critics, batch\)\), got \(8, 1\)", "discount"),
        (lambda: clipped_double_q_target(jnp.zeros(8), jnp.zeros(8), jnp.zeros((2, 8)), jnp.zeros((8, 1)), 0.2), r"clipped_double_q_target\(next_log_prob\) must have shape \(8,\)", "next_log_prob"),
        (lambda: clipped_double_q_target(jnp.zeros(8), jnp.zeros(8), jnp.zeros(8)), r"clipped_double_q_target\(next_qs\) must have shape \(num_critics, batch\), got \(8,\)", "next_qs"),
        (lambda: sac_actor_loss(jnp.zeros((2, 8)), jnp.zeros((8, 1)), 0.2), r"sac_actor_loss\(log_prob\) must have shape \(8,\) \(one per column of qs, \(num_critics, batch\)\), got \(8, 1\)", "log_prob"),
        (lambda: ppo_policy_loss(jnp.zeros(8), jnp.zeros(8), jnp.zeros((8, 1)), 0.2), r"ppo_policy_loss\(advantages\) must have the shape of log_prob, \(8,\), got \(8, 1\)", "advantages"),
        (lambda: value_loss(jnp.zeros(8), jnp.zeros(8), jnp.zeros((8, 1))), r"value_loss\(targets\) must have the shape of values, \(8,\), got \(8, 1\)", "targets"),
        (lambda: value_loss(jnp.zeros(8), jnp.zeros(4), jnp.zeros(8), 0.2), r"value_loss\(old_values\) must have the shape of values, \(8,\), got \(4,\)", "old_values"),
        (lambda: dads_intrinsic_reward(jnp.zeros((8, 3)), jnp.zeros((8, 1), jnp.int32)), r"dads_intrinsic_reward\(skill\) must have shape \(8,\) \(the batch shape of log_probs, \(\*batch, skills\)\), got \(8, 1\)", "skill"),
    ],
)
def test_td_targets_and_losses_shapes(call, message, hook):
    both_paths(call, message, hook_catches=hook)


def test_right_shapes_and_scalar_discounts_pass():
    reward, q = jnp.ones(8), jnp.arange(24.0).reshape(8, 3)
    np.testing.assert_allclose(q_learning_target(reward, jnp.full(8, 0.5), q), 1 + 0.5 * q[:, 2])
    with no_runtime_typecheck():  # a scalar discount broadcasts harmlessly (the annotation asks for (b,))
        np.testing.assert_allclose(q_learning_target(reward, 0.5, q), 1 + 0.5 * q[:, 2])
    assert select_q(q, jnp.zeros(8, jnp.int32)).shape == (8,)
    assert clipped_double_q_target(reward, reward, jnp.zeros((2, 8)), reward, 0.1).shape == (8,)
    # The old values are only read when clipping.
    assert value_loss(reward, reward, reward).shape == ()
