"""Run by test_train_devices.py in a subprocess with 4 forced CPU devices (XLA_FLAGS is set
before jax is imported): `eqxrl.train` with the member axis sharded over the devices gives the
one-device run's numbers, for seeds (PPO, SAC with evaluation during training), a sweep, and a
batch that does not divide by the devices (padded)."""

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

# Three seeds (or a sweep of three) do not split over four devices: train pads the batch with a
# copy of its first member, runs the four sharded and drops the copy: the one-device numbers, and
# callbacks and resume see the three members only.
def close(a, b):
    for x, y in zip(arrays(a), arrays(b), strict=True):
        np.testing.assert_allclose(x, y, rtol=1e-4, atol=1e-6)


three = jax.random.split(jax.random.key(0), 3)
seen = []
padded, m_padded = eqxrl.train(ppo, three, 64, progress=False, chunk_iterations=2, callback=lambda c: seen.append(c.copy()))
single, m_single = eqxrl.train(ppo, three, 64, progress=False, shard=False)
close(padded, single)
close(m_padded, m_single)
assert {k: v.shape for k, v in m_padded.items()} == {k: v.shape for k, v in m_single.items()}
assert all(x.shape[0] == 3 for x in jax.tree.leaves(padded) if isinstance(x, jax.Array) and x.ndim)
assert all(x.shape[0] == 3 for c in seen for x in jax.tree.leaves(c.state) if isinstance(x, jax.Array) and x.ndim)
resumed, m_resumed = eqxrl.train(ppo, three, 64, progress=False, chunk_iterations=2, resume=seen[0], shard=True)
close(resumed, padded)
close(m_resumed, m_padded)
sweep3 = eqxrl.stack([
    PPO("CartPole-v1", num_envs=2, rollout_length=8, num_minibatches=2, num_epochs=1, hidden_sizes=(8,), learning_rate=lr)
    for lr in (1e-3, 2e-3, 3e-3)
])
close(eqxrl.train(sweep3, jax.random.key(1), 64, progress=False), eqxrl.train(sweep3, jax.random.key(1), 64, progress=False, shard=False))
print("ok")
