"""eqxrl.make_train: training as a pure function of a key (jit, vmap, scan), equal to eqxrl.train."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from probe_envs import ObservationActionReward

import eqxrl
from eqxrl.agents import PPO

SMALL = dict(num_envs=4, rollout_length=8, num_epochs=2, num_minibatches=2, hidden_sizes=(8,))
PER_ITER = 32
STEPS = 3 * PER_ITER


@pytest.fixture(scope="module")
def agent():
    return PPO(ObservationActionReward(), **SMALL)


def _assert_same(a, b):
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
        if jnp.issubdtype(x.dtype, jax.dtypes.prng_key):
            x, y = jax.random.key_data(x), jax.random.key_data(y)
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


@pytest.mark.slow
@pytest.mark.bitwise
def test_jit_of_make_train_equals_train_bit_for_bit(agent):
    key = jax.random.key(3)
    state, metrics = jax.jit(eqxrl.make_train(agent, STEPS))(key)
    ref_state, ref_metrics = eqxrl.train(agent, key, STEPS, progress=False)
    assert sorted(metrics) == sorted(ref_metrics) and metrics["loss"].shape == (3,)
    _assert_same(metrics, ref_metrics)
    _assert_same(state, ref_state)
    # Chunked with a progress bar: the same numbers.
    _, chunked = eqxrl.train(agent, key, STEPS, progress=False, chunk_iterations=1)
    _assert_same(metrics, chunked)


@pytest.mark.slow
def test_vmap_over_keys_equals_a_seed_batch(agent):
    keys = jax.random.split(jax.random.key(0), 4)
    states, metrics = jax.jit(jax.vmap(eqxrl.make_train(agent, STEPS)))(keys)
    ref_states, ref_metrics = eqxrl.train(agent, keys, STEPS, progress=False)
    assert metrics["loss"].shape == (4, 3)
    np.testing.assert_allclose(metrics["loss"], ref_metrics["loss"], rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(metrics["env_steps"], ref_metrics["env_steps"])
    # Keys of shape (n,) in one call are a seed batch, as for train.
    _, direct = jax.jit(eqxrl.make_train(agent, STEPS))(keys)
    np.testing.assert_allclose(direct["loss"], ref_metrics["loss"], rtol=1e-5, atol=1e-6)


@pytest.mark.slow
def test_vmap_over_learning_rates_equals_a_sweep(agent):
    rates = jnp.asarray([1e-4, 1e-3, 1e-2], jnp.float32)
    key = jax.random.key(1)

    def run(lr):
        return eqxrl.make_train(eqx.tree_at(lambda a: a.learning_rate, agent, lr), STEPS)(key)

    _, metrics = jax.jit(jax.vmap(run))(rates)
    for i, lr in enumerate(rates):
        _, ref = eqxrl.train(PPO(ObservationActionReward(), **SMALL, learning_rate=float(lr)), key, STEPS, progress=False)
        np.testing.assert_allclose(metrics["loss"][i], ref["loss"], rtol=1e-5, atol=1e-6)
    assert float(metrics["learning_rate"][2, 0]) == pytest.approx(1e-2)


@pytest.mark.slow
def test_a_stack_and_a_users_own_scan(agent):
    sweep = eqxrl.stack([agent, eqx.tree_at(lambda a: a.learning_rate, agent, jnp.asarray(3e-3, jnp.float32))])
    states, metrics = jax.jit(eqxrl.make_train(sweep, STEPS))(jax.random.key(0))
    assert metrics["loss"].shape == (2, 3) and jax.tree.leaves(states)[0].shape[0] == 2
    train_fn = eqxrl.make_train(agent, STEPS)

    def outer(carry, key):  # a meta-loop: several whole runs inside one program
        _, m = train_fn(key)
        return carry + jnp.nanmean(m["loss"]), m["env_steps"][-1]

    total, steps = jax.jit(lambda k: jax.lax.scan(outer, jnp.zeros(()), jax.random.split(k, 2)))(jax.random.key(2))
    assert np.isfinite(float(total)) and steps.tolist() == [STEPS, STEPS]


def test_make_train_errors(agent):
    with pytest.raises(ValueError, match=r"make_train\(total_steps=10\) must cover at least one iteration of PPO \(32 env steps\)"):
        eqxrl.make_train(agent, 10)
    with pytest.raises(ValueError, match=r"make_train\(total_steps\) must be an int, got '1e5'"):
        eqxrl.make_train(agent, "1e5")
    with pytest.raises(ValueError, match=r"make_train\(agent\) must be an eqxrl agent or eqxrl.stack\(\[...\]\), got str"):
        eqxrl.make_train("ppo", 100)
