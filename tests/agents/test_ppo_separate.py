"""PPO's separate actor and critic updates: `actor_epochs`, `critic_epochs`, `critic_optimizer`
and the per-epoch KL stop on the actor (`target_kl_epoch`), their bad inputs and flags.
The default (none of them set) keeps every number: tests/agents/test_regression.py's record."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from eqxrl import cli
from eqxrl.agents import PPO, Clock
from eqxrl.components import GRUTorso, NamedOptimizer
from learning import most_above, per_seed_returns, train_seeds
from typecheck import no_runtime_typecheck

SMALL = dict(num_envs=2, rollout_length=16, num_minibatches=2, hidden_sizes=(8,))


def _iterate(agent, key=0):
    """One update of `agent` from its initial state: **returns** `(initial state, new state, metrics)`."""
    state = agent.init(jax.random.key(key))
    new, metrics = _update(agent, state)
    return state, new, metrics


@eqx.filter_jit
def _update(agent, state):  # (agents that differ only in hyperparameters share one program)
    return agent.train_iteration(state, Clock(jnp.asarray(0), jnp.asarray(10)))


def _changed(before, after) -> bool:
    return any(not np.array_equal(a, b) for a, b in zip(jax.tree.leaves(before), jax.tree.leaves(after)))


@pytest.mark.slow  # (over 2 s in the fast tier: tests/tiers.py)
def test_the_default_is_one_joint_update_and_separate_ones_count_each_networks_steps():
    assert not PPO("CartPole-v1").separate_updates  # (one optimizer state over both networks, as before)
    agent = PPO("CartPole-v1", **SMALL, actor_epochs=1, critic_epochs=3)
    assert agent.separate_updates
    state, new, metrics = _iterate(agent)
    actor_state, critic_state = new.opt_state
    # Adam's step counts: 1 actor epoch and 3 critic epochs of 2 minibatches each.
    assert int(actor_state.count) == 2 and int(critic_state.count) == 6
    assert _changed(state.actor, new.actor) and _changed(state.critic, new.critic)
    assert float(metrics["updates_applied"]) == 2.0
    assert float(metrics["loss"]) == pytest.approx(float(metrics["actor_loss"] + metrics["critic_loss"]))
    for name in ("policy_loss", "value_loss", "entropy", "approx_kl", "clip_fraction", "learning_rate"):
        assert np.isfinite(metrics[name]), name


@pytest.mark.slow  # (over 2 s in the fast tier: tests/tiers.py)
def test_the_per_epoch_kl_stop_stops_the_actor_only():
    # Any policy change moves the first epoch's mean KL above 1e-9: the actor's other two epochs are skipped.
    free = PPO("CartPole-v1", **SMALL, actor_epochs=3, critic_epochs=2, learning_rate=1e-2)
    stopped = PPO("CartPole-v1", **SMALL, actor_epochs=3, critic_epochs=2, learning_rate=1e-2, target_kl_epoch=1e-9)
    _, free_state, free_metrics = _iterate(free)
    _, stop_state, stop_metrics = _iterate(stopped)
    assert int(free_state.opt_state[0].count) == 6 and int(stop_state.opt_state[0].count) == 2
    assert float(free_metrics["updates_applied"]) == 6.0 and float(stop_metrics["updates_applied"]) == 2.0
    # The critic's epochs are unaffected: the same steps, the same parameters, bit for bit.
    assert int(stop_state.opt_state[1].count) == 4
    assert not _changed(free_state.critic, stop_state.critic) and _changed(free_state.actor, stop_state.actor)
    # A limit the first epoch stays under changes nothing.
    loose = PPO("CartPole-v1", **SMALL, actor_epochs=3, critic_epochs=2, learning_rate=1e-2, target_kl_epoch=10.0)
    loose_state = _iterate(loose)[1]
    assert not _changed((free_state.actor, free_state.critic, free_state.opt_state), (loose_state.actor, loose_state.critic, loose_state.opt_state))


@pytest.mark.slow  # (over 2 s in the fast tier: tests/tiers.py)
def test_a_critic_optimizer_of_its_own():
    agent = PPO("CartPole-v1", **SMALL, critic_optimizer=NamedOptimizer("sgd", 0.1))
    assert agent.separate_updates and agent.actor_epochs is None
    _, new, metrics = _iterate(agent)
    # num_epochs (4) each, the critic's by SGD (its state: no step count of its own, plain SGD's).
    assert int(new.opt_state[0].count) == 8 and float(metrics["critic_learning_rate"]) == pytest.approx(0.1)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(actor_epochs=0), "PPO(actor_epochs) must be a positive int, got 0"),
        (dict(critic_epochs=2.5), "PPO(critic_epochs) must be a positive int, got 2.5"),
        (dict(critic_optimizer="adam"), "PPO(critic_optimizer) must be an optax.GradientTransformation, an eqxrl optimizer (Adam, ...) or None"),
        (
            dict(actor_epochs=1, critic_epochs=3, shared_torso=True),
            "PPO(actor_epochs, critic_epochs) trains the actor and the critic in separate passes, each on its own torso: "
            "shared_torso=True (and so a recurrent torso) cannot take actor_epochs, critic_epochs; "
            "leave it None or set shared_torso=False",
        ),
        (
            dict(critic_epochs=2, actor_torso=GRUTorso(8), shared_torso=True),
            "PPO(critic_epochs) trains the actor and the critic in separate passes, each on its own torso",
        ),
        (dict(actor_epochs=2, target_kl_epoch=0.0), "PPO(target_kl_epoch) must be > 0 (inf disables the per-epoch stop), got 0"),
        (
            dict(target_kl_epoch=0.02),
            "PPO(target_kl_epoch=0.02) stops the actor's remaining epochs only, which needs separate actor and critic "
            "passes: set actor_epochs (and critic_epochs; None is num_epochs) with shared_torso=False",
        ),
    ],
)
def test_bad_separate_updates_are_refused_in_one_line(kwargs, message):
    with no_runtime_typecheck(), pytest.raises(ValueError) as e:
        PPO("CartPole-v1", **kwargs)
    assert str(e.value).startswith(message) and "\n" not in str(e.value)


def test_the_command_line_has_the_flags():
    args = cli.build_parser().parse_args(
        ["train", "ppo", "--actor-epochs", "1", "--critic-epochs", "3", "--critic-optimizer", "adam:1e-3", "--target-kl-epoch", "0.02"]
    )
    assert (args.actor_epochs, args.critic_epochs, args.target_kl_epoch) == (1, 3, 0.02)
    agent = PPO("CartPole-v1", **{f.name: getattr(args, f.name) for f in cli.agent_flags(PPO) if hasattr(args, f.name)})
    assert agent.separate_updates and float(agent.critic_optimizer.learning_rate) == pytest.approx(1e-3)
    assert cli.build_parser().parse_args(["train", "ppo", "--actor-epochs", "none"]).actor_epochs is None


@pytest.mark.slow  # (over 2 s in the fast tier: tests/tiers.py)
def test_separate_updates_learn_cartpole():
    agent = PPO("CartPole-v1", num_envs=4, rollout_length=128, actor_epochs=2, critic_epochs=6, target_kl_epoch=0.05)
    states, _ = train_seeds(agent, 20_480, num_seeds=3)
    assert most_above(per_seed_returns(agent, states, num_episodes=8), 120.0, need=2)  # (203, 366 and 207 here)
