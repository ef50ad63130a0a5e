"""Run by test_train_devices.py in a subprocess with 4 forced CPU devices (XLA_FLAGS is set
before jax is imported): `eqxrl.train` with the member axis sharded over the devices gives the
one-device run's numbers, for seeds (PPO, SAC with evaluation during training) and a sweep."""

import jax
import numpy as np

import eqxrl
from eqxrl.agents import PPO, SAC

jax.config.update("jax_numpy_dtype_promotion", "strict")
assert jax.device_count() == 4, jax.devices()


def arrays(state):
    as_data = lambda x: jax.random.key_data(x) if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key) else x  # noqa: E731
    return [np.asarray(x) for x in jax.tree.leaves(jax.tree.map(as_data, state))]


def same(agent, key, steps, **kw):
    sharded, m_sharded = eqxrl.train(agent, key, steps, progress=False, shard=True, **kw)
    single, m_single = eqxrl.train(agent, key, steps, progress=False, shard=False, **kw)
    devices = {len(x.sharding.device_set) for x in jax.tree.leaves(sharded) if isinstance(x, jax.Array)}
    assert devices == {4}, devices
    assert {len(x.sharding.device_set) for x in jax.tree.leaves(single) if isinstance(x, jax.Array)} == {1}
    # Same numbers up to float reduction order (a device vectorises 1 member instead of 4).
    for a, b in zip(arrays(sharded), arrays(single), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)
    assert sorted(m_sharded) == sorted(m_single)
    for k in m_single:
        np.testing.assert_allclose(m_sharded[k], m_single[k], rtol=1e-4, atol=1e-6)
    # The default (shard=None) shards a batch of 4 on 4 devices.
    auto, _ = eqxrl.train(agent, key, steps, progress=False, **kw)
    assert {len(x.sharding.device_set) for x in jax.tree.leaves(auto) if isinstance(x, jax.Array)} == {4}


ppo = PPO("CartPole-v1", num_envs=2, rollout_length=8, num_minibatches=2, num_epochs=1, hidden_sizes=(8,))
seeds = jax.random.split(jax.random.key(0), 4)
same(ppo, seeds, 64, eval_every=32, eval_episodes=1)
sac = SAC("Pendulum-v1", hidden_sizes=(8,), learning_starts=8, batch_size=4, buffer_size=64)
same(sac, seeds, 24)
sweep = eqxrl.stack([
    PPO("CartPole-v1", num_envs=2, rollout_length=8, num_minibatches=2, num_epochs=1, hidden_sizes=(8,), learning_rate=lr)
    for lr in (1e-3, 2e-3, 3e-3, 4e-3)
])
same(sweep, jax.random.key(1), 64)

# Three seeds do not split over four devices: shard=None runs them on one, shard=True says why.
three = jax.random.split(jax.random.key(0), 3)
state, _ = eqxrl.train(ppo, three, 64, progress=False)
assert {len(x.sharding.device_set) for x in jax.tree.leaves(state) if isinstance(x, jax.Array)} == {1}
try:
    eqxrl.train(ppo, three, 64, progress=False, shard=True)
except ValueError as e:
    assert "train(shard=True): the 3 seeds/members must be a multiple of the 4 devices" in str(e), e
else:
    raise AssertionError("shard=True with 3 seeds on 4 devices did not raise")
print("ok")
