"""Options shared by SAC, DDPG and TD3: `target_update_interval`; SAC's `alpha_loss` and
observation-statistics metrics."""

import equinox as eqx
import jax.numpy as jnp
import numpy as np
import pytest

from update_batches import same_leaves, update_batch

import eqxrl
from eqxrl.agents import DDPG, SAC, TD3, Clock

SMALL = dict(hidden_sizes=(8,), batch_size=8, buffer_size=64, learning_starts=16)


def _targets(learner):
    return (learner.target_critic, getattr(learner, "target_actor", None))


# Compiled once per agent (the update counter is an array): on these cores far cheaper than
# running an update op by op.
_init_learner = eqx.filter_jit(lambda agent, key: agent.init_learner(key))
_update = eqx.filter_jit(lambda agent, learner, batch, key, step: agent.update(learner, batch, key, step, jnp.zeros(())))


@pytest.mark.parametrize(
    "cls, env, kwargs, period",
    [
        (SAC, "Pendulum-v1", {}, 3),
        (SAC, "CartPole-v1", {}, 3),
        (DDPG, "Pendulum-v1", {}, 3),
        # TD3 updates its targets on its delayed policy updates: every 2 * 3 updates here.
        (TD3, "Pendulum-v1", dict(policy_delay=2), 6),
    ],
)
@pytest.mark.slow
def test_target_update_interval(cls, env, kwargs, period, getkey):
    agent = cls(env, **SMALL, **kwargs, target_update_interval=3, tau=0.5)
    learner = _init_learner(agent, getkey())
    # Move the online networks off the targets first (targets start as copies of them).
    changed = []
    for step in range(2 * period):
        before = _targets(learner)
        learner, _, _ = _update(agent, learner, update_batch(agent, getkey()), getkey(), jnp.asarray(step, jnp.int32))
        changed.append(not same_leaves(before, _targets(learner)))
    # The counter passed is the number of earlier updates: update `step` syncs when (step + 1) % period == 0.
    assert changed == [(step + 1) % period == 0 for step in range(2 * period)]


@pytest.mark.slow  # over 5 s in the fast tier (2 cores)
def test_target_update_interval_one_is_every_update(getkey):
    agent = DDPG("Pendulum-v1", **SMALL)
    assert agent.target_update_interval == 1
    learner = _init_learner(agent, getkey())
    for step in range(2):
        before = _targets(learner)
        learner, _, _ = _update(agent, learner, update_batch(agent, getkey()), getkey(), jnp.asarray(step, jnp.int32))
        assert not same_leaves(before, _targets(learner)), step


@pytest.mark.parametrize("cls", [SAC, DDPG, TD3])
def test_bad_target_update_interval(cls):
    with pytest.raises(ValueError, match=rf"{cls.__name__}\(target_update_interval\) must be a positive int, got 0"):
        cls("Pendulum-v1", target_update_interval=0)


@pytest.mark.slow
def test_sac_metrics_alpha_loss_and_observation_statistics(getkey):
    agent = SAC("Pendulum-v1", **SMALL, normalize_observations=True, init_alpha=0.5)
    state, metrics = eqxrl.train(agent, getkey(), 64, progress=False)
    stats = state.obs_stats
    np.testing.assert_allclose(metrics["obs_mean"][-1], float(jnp.mean(stats.mean)), rtol=1e-6)
    np.testing.assert_allclose(metrics["obs_std"][-1], float(jnp.mean(jnp.sqrt(stats.var))), rtol=1e-6)
    # (after the first iteration the statistics hold the first observation twice, init's and the step's: std 0)
    assert np.all(np.isfinite(metrics["obs_mean"])) and np.all(metrics["obs_std"] >= 0) and metrics["obs_std"][-1] > 0
    # alpha_loss is NaN while warming up (no updates), then the temperature's loss.
    assert np.isnan(metrics["alpha_loss"][0]) and np.isfinite(metrics["alpha_loss"][-1]) and metrics["alpha_loss"][-1] != 0
    # Without observation normalisation there are no statistics to report: the metrics of a training
    # iteration, traced for their shapes only (a second training compiled two programs, ~10 CPU-s).
    agent = SAC("Pendulum-v1", **SMALL)
    clock = Clock(jnp.zeros((), jnp.int32), jnp.ones((), jnp.int32))
    _, plain = eqx.filter_eval_shape(agent.train_iteration, eqx.filter_eval_shape(agent.init, getkey()), clock)
    assert "obs_mean" not in plain and "obs_std" not in plain and "alpha_loss" in plain
