"""`eqxrl.train` across devices: seeds and sweeps sharded over 4 forced CPU devices give
the one-device numbers (`train_devices_worker.py`, in a subprocess: the device count must
be set before jax is imported)."""

import os
import pathlib
import subprocess
import sys

import jax
import pytest

import eqxrl
from eqxrl.agents import PPO
from eqxrl.loop import member_sharding

WORKER = pathlib.Path(__file__).parents[1] / "train_devices_worker.py"


@pytest.mark.slow
def test_sharded_seeds_and_sweeps_match_one_device():
    # The sharded and the one-device runs alike inherit the test run's compile settings (conftest.py;
    # the worker compares them up to float reduction order).
    env = dict(os.environ, XLA_FLAGS=f"{os.environ.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count=4")
    env["JAX_PLATFORMS"] = "cpu"
    env["PYTHONPATH"] = os.pathsep.join([str(WORKER.parent.parent), *filter(None, [env.get("PYTHONPATH")])])
    out = subprocess.run([sys.executable, str(WORKER)], env=env, capture_output=True, text=True, timeout=900)
    assert out.returncode == 0 and out.stdout.strip().endswith("ok"), (out.stdout + out.stderr)[-4000:]


def test_batches_are_sharded_over_the_devices_and_single_runs_are_not():
    # The suite runs with eqxrl's default: one CPU device per available core (2 on CI's machines).
    agent = PPO("CartPole-v1", num_envs=2, rollout_length=8, num_minibatches=2, num_epochs=1, hidden_sizes=(8,))
    batch, _ = eqxrl.loop.batch_and_keys(agent, jax.random.split(jax.random.key(0), 4 * jax.device_count()))
    sharding = member_sharding(batch, None)
    assert (sharding is None) == (jax.device_count() == 1)
    if sharding is not None:
        assert sharding.mesh.devices.size == jax.device_count()
    assert member_sharding(batch, False) is None
    single, _ = eqxrl.loop.batch_and_keys(agent, jax.random.key(0))
    assert member_sharding(single, True) is None


def test_bad_shard_value_is_named():
    agent = PPO("CartPole-v1", num_envs=2, rollout_length=8, num_minibatches=2, num_epochs=1, hidden_sizes=(8,))
    with pytest.raises(ValueError, match=r"train\(shard\) must be None \(automatic\), True or False, got 'yes'"):
        eqxrl.train(agent, jax.random.key(0), 16, progress=False, shard="yes")


@pytest.mark.slow  # (over 2 s in the fast tier: tests/tiers.py)
def test_the_state_train_returns_is_on_one_device_and_eager_ops_over_members_finish():
    # On several CPU devices (eqxrl's default: one per core) the run is sharded, but the state it
    # returns is not: XLA:CPU (jax 0.10.2) deadlocks on eager ops that need a collective across
    # CPU devices once a few are in flight, and a mean over the seeds leaf by leaf is one.
    agent = PPO("CartPole-v1", num_envs=2, rollout_length=8, num_minibatches=2, num_epochs=1, hidden_sizes=(8,))
    seen = []
    state, _ = eqxrl.train(agent, jax.random.split(jax.random.key(0), 2 * jax.device_count() + 1), 32,
                           progress=False, callback=seen.append)  # fmt: skip
    arrays = [x for x in jax.tree.leaves(state) if isinstance(x, jax.Array)]
    assert {len(x.sharding.device_set) for x in arrays} == {1}
    assert {x.shape[0] for x in arrays if x.ndim} == {2 * jax.device_count() + 1}
    floats = [x for x in arrays if jax.numpy.issubdtype(x.dtype, jax.numpy.floating) and x.ndim]
    for _ in range(5):
        jax.block_until_ready([jax.numpy.mean(x, axis=0) for x in floats])
