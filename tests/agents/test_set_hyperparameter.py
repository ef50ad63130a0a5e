"""`eqxrl.agents.set_hyperparameter`: one hyperparameter changed by path (pytorchrl's
`update_algorithm_parameter`), the state untouched, bad paths refused in one line."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from eqxrl.agents import DQN, PPO, Clock, set_hyperparameter
from eqxrl.components import CosineSchedule, L2Penalty, Adam
from typecheck import no_runtime_typecheck

TINY_PPO = dict(num_envs=2, rollout_length=8, num_epochs=1, num_minibatches=1, hidden_sizes=(8,))


@pytest.mark.slow  # (over 2 s in the fast tier: tests/tiers.py)
def test_the_next_update_uses_the_new_value():
    # One Adam step from the same state: its size is proportional to the learning rate at
    # progress 0 (`learning_rate.init_value`, a nested path), so doubling it doubles the step.
    agent = PPO("CartPole-v1", learning_rate=CosineSchedule(1e-3), **TINY_PPO)
    state = agent.init(jax.random.key(0))
    faster = set_hyperparameter(agent, "learning_rate.init_value", 2e-3)  # (the keyword's path: the optimizer's schedule)
    assert float(faster.hyperparameters()["optimizer.learning_rate.init_value"]) == pytest.approx(2e-3)
    assert float(agent.hyperparameters()["optimizer.learning_rate.init_value"]) == pytest.approx(1e-3)  # a copy
    clock = Clock(jnp.zeros((), jnp.int32), jnp.asarray(10, jnp.int32))
    step = eqx.filter_jit(lambda a, s: a.train_iteration(s, clock)[0])
    before = jax.tree.leaves(eqx.filter(state.actor, eqx.is_inexact_array))
    moved = [
        [a - b for a, b in zip(jax.tree.leaves(eqx.filter(step(a, state).actor, eqx.is_inexact_array)), before)]
        for a in (agent, faster)
    ]
    assert max(float(jnp.max(jnp.abs(d))) for d in moved[0]) > 0
    for slow, fast in zip(*moved):
        np.testing.assert_allclose(fast, 2 * slow, rtol=1e-3, atol=1e-6)


def test_paths_flat_names_and_tuples():
    agent = DQN("CartPole-v1", hidden_sizes=(8,), critic_loss_terms=(L2Penalty(1e-5),))
    changed = set_hyperparameter(agent, "critic_loss_terms.0.coef", 1e-2)
    assert float(changed.critic_loss_terms[0].coef) == pytest.approx(1e-2)
    assert float(changed.hyperparameters()["critic.loss_terms.0.coef"]) == pytest.approx(1e-2)  # (the path it lives at)
    assert float(set_hyperparameter(agent, "coef", 3e-3).critic_loss_terms[0].coef) == pytest.approx(3e-3)
    with_opt = DQN("CartPole-v1", hidden_sizes=(8,), critic_optimizer=Adam(1e-3))
    assert float(set_hyperparameter(with_opt, "critic_optimizer.learning_rate", 5e-4).critic_optimizer.learning_rate) == pytest.approx(5e-4)
    # The other hyperparameters are the same leaves.
    old, new = agent.hyperparameters(), changed.hyperparameters()
    assert all(np.array_equal(old[k], new[k]) for k in old if k != "critic.loss_terms.0.coef")


@pytest.mark.parametrize(
    "make_agent, path, value, match",
    [
        (lambda: PPO("CartPole-v1", **TINY_PPO), "nope", 1.0,
         r"set_hyperparameter\(path\): PPO has no hyperparameter 'nope'; its hyperparameters: \[.*'gamma'"),
        (lambda: PPO("CartPole-v1", **TINY_PPO), "num_envs", 4,
         r"set_hyperparameter\(path\): 'num_envs' is a static \(structural\) field of PPO: build a new agent .*its hyperparameters: \["),
        (lambda: PPO("CartPole-v1", **TINY_PPO), "env", "Acrobot-v1", r"'env' is a static \(structural\) field of PPO"),
        (lambda: DQN("CartPole-v1", critic_optimizer=optax.adam(1e-3)), "learning_rate", 1e-4,
         r"set_hyperparameter\(path\): DQN has no hyperparameter 'critic.optimizer.learning_rate'"),  # (an optax optimizer holds no rate leaf)
        (lambda: PPO("CartPole-v1", **TINY_PPO), "gamma", 2.0, r"PPO\(gamma\) must be in \[0, 1\], got 2"),
        (lambda: PPO("CartPole-v1", **TINY_PPO), "", 1.0, r"set_hyperparameter\(path\) must be a dotted path string, got ''"),
        (lambda: "PPO", "gamma", 0.9, r"set_hyperparameter\(agent\) must be an eqxrl agent, got str"),
    ],
)  # fmt: skip
def test_bad_input(make_agent, path, value, match):
    with no_runtime_typecheck(), pytest.raises(ValueError, match=match):
        set_hyperparameter(make_agent(), path, value)
