"""CrossQ: one update against its definition (the joint train-mode critic call, the target from the
next half, the statistics as learner state, the actor on the critics' eval mode, the policy delay),
bad input, the command line, and learning Pendulum-v1."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import eqxrl.runs
from learning import most_above, per_seed_returns, train_seeds, untrained_returns
from typecheck import no_runtime_typecheck
from update_batches import same_leaves, update_batch

from eqxrl.agents import CrossQ, sac_policy_update
from eqxrl.components import BatchRenormPolicy, BatchRenormStats, MLPTorso, clipped_double_q_target, ensemble_apply

SMALL = dict(hidden_sizes=(16,), critic_hidden_sizes=(16, 16), batch_size=8, buffer_size=64, learning_starts=8)
_update = eqx.filter_jit(lambda agent, learner, batch, key, updates: agent.update(learner, batch, key, updates, jnp.zeros(())))


def _learner(agent, key):
    return eqx.filter_jit(agent.init_learner)(key)


@pytest.mark.slow  # (over 2 s in the fast tier: tests/tiers.py)
def test_an_update_is_sac_through_one_joint_train_mode_critic_call(getkey):
    agent = CrossQ("Pendulum-v1", **SMALL, policy_delay=1)
    learner, batch, key = _learner(agent, getkey()), update_batch(agent, getkey()), getkey()
    new, td, metrics = _update(agent, learner, batch, key, jnp.zeros((), jnp.int32))
    want = _by_hand(agent, learner, new, batch, key)
    np.testing.assert_allclose(metrics["critic_loss"], want["critic_loss"], rtol=1e-5)
    np.testing.assert_allclose(metrics["q_mean"], want["q_mean"], rtol=1e-5)
    np.testing.assert_allclose(td, want["td"], rtol=1e-4, atol=1e-6)
    # Separate calls would normalise each half with its own statistics: other Q-values.
    assert not np.allclose(want["alone"], want["qs"], atol=1e-4)
    # The statistics are the joint call's, kept in the learner (2b rows seen, one step).
    for got, stats in zip(new.critic_stats, want["stats"]):
        np.testing.assert_allclose(got.mean, stats.mean, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(got.var, stats.var, rtol=1e-5, atol=1e-6)
        assert np.all(np.asarray(got.steps) == 1)
    # The actor's step is SAC's, on the updated critics in eval mode (their new running statistics).
    np.testing.assert_allclose(metrics["actor_loss"], want["actor_loss"], rtol=1e-5)
    assert same_leaves(jax.tree.map(lambda x: np.round(x, 5), eqx.filter(want["actor"], eqx.is_array)),
                       jax.tree.map(lambda x: np.round(x, 5), eqx.filter(new.actor, eqx.is_array)))  # fmt: skip


@eqx.filter_jit
def _by_hand(agent, learner, new, batch, key):
    """CrossQ's update written out: a' from the actor, (s, a) and (s', a') through the critics in
    one train-mode call, split; the actor's step on the updated critics in eval mode."""
    data, b = batch.data, batch.data.obs.shape[0]
    next_key, actor_key = jax.random.split(key)
    next_action, next_log_prob = learner.actor(data.next_obs).sample_and_log_prob(next_key)
    obs2, act2 = jnp.concatenate([data.obs, data.next_obs]), jnp.concatenate([data.action, next_action])
    q_all, stats = ensemble_apply(learner.critic, learner.critic_stats, obs2, act2, train=True)
    qs, next_qs = q_all[:, :b], q_all[:, b:]
    target = clipped_double_q_target(data.reward, data.discount, next_qs, next_log_prob, jnp.exp(learner.log_alpha))
    alone, _ = ensemble_apply(learner.critic, learner.critic_stats, data.obs, data.action, train=True)
    eval_q = lambda o, a: ensemble_apply(new.critic, new.critic_stats, o, a, train=False)[0]  # noqa: E731
    actor_opt, _, alpha_opt = agent.optimizers()
    actor, *_, policy_metrics = sac_policy_update(
        agent, learner.actor, learner.actor_opt, learner.log_alpha, learner.alpha_opt, eval_q, batch, actor_key,
        jnp.zeros(()), actor_opt, alpha_opt,
    )
    return {
        "critic_loss": jnp.mean(0.5 * jnp.sum(jnp.square(qs - target), axis=0)),
        "q_mean": jnp.mean(target),
        "td": jnp.mean(qs - target, axis=0),
        "qs": qs,
        "alone": alone,
        "stats": stats,
        "actor_loss": policy_metrics["actor_loss"],
        "actor": actor,
    }


def test_the_statistics_are_state_beside_the_parameters_not_optimised(getkey):
    agent = CrossQ("Pendulum-v1", **SMALL)
    learner = _learner(agent, getkey())
    is_stats = lambda x: isinstance(x, BatchRenormStats)  # noqa: E731
    assert len(learner.critic_stats) == 3 and all(is_stats(s) for s in learner.critic_stats)
    assert not any(is_stats(x) for x in jax.tree.leaves(learner.critic, is_leaf=is_stats))
    # Adam's moments cover the critics' parameters only.
    n_params = sum(x.size for x in jax.tree.leaves(eqx.filter(learner.critic, eqx.is_inexact_array)))
    sizes = {x.size for x in jax.tree.leaves(learner.critic_opt) if hasattr(x, "size")}
    assert n_params in sizes
    n_stats = sum(x.size for x in jax.tree.leaves(learner.critic_stats))
    assert n_params + n_stats not in sizes


@pytest.mark.slow  # (over 2 s in the fast tier: tests/tiers.py)
def test_the_actor_and_temperature_wait_for_the_policy_delay(getkey):
    agent = CrossQ("Pendulum-v1", **SMALL)  # policy_delay=3: updates 2, 5, ...
    learner, batch, key = _learner(agent, getkey()), update_batch(agent, getkey()), getkey()
    for updates, moves in [(0, False), (1, False), (2, True), (5, True)]:
        new, _, metrics = _update(agent, learner, batch, key, jnp.asarray(updates, jnp.int32))
        assert (not same_leaves(new.actor, learner.actor)) == moves, updates
        assert bool(new.log_alpha != learner.log_alpha) == moves
        assert np.isnan(metrics["actor_loss"]) != moves
        assert not same_leaves(new.critic, learner.critic)  # the critics every update


@pytest.mark.slow  # (over 2 s in the fast tier: tests/tiers.py)
def test_a_batch_renormalised_actor_moves_its_statistics_in_its_own_update_only(getkey):
    """`actor_batch_norm=True` (sbx's actor): train mode in the actor's update (its statistics move
    there, every policy_delay updates), eval mode to act and for the critics' next actions."""
    agent = CrossQ("Pendulum-v1", actor_batch_norm=True, **SMALL)  # policy_delay=3
    learner, batch, key = _learner(agent, getkey()), update_batch(agent, getkey()), getkey()
    assert isinstance(learner.actor, BatchRenormPolicy) and len(learner.actor_stats) == 2  # input + one hidden layer
    assert not any(isinstance(x, BatchRenormStats) for x in jax.tree.leaves(learner.actor, is_leaf=lambda x: isinstance(x, BatchRenormStats)))
    n_params = sum(x.size for x in jax.tree.leaves(eqx.filter(learner.actor, eqx.is_inexact_array)))
    assert n_params in {x.size for x in jax.tree.leaves(learner.actor_opt) if hasattr(x, "size")}  # Adam sees parameters only
    for updates, moves in [(0, False), (2, True)]:
        new, _, _ = _update(agent, learner, batch, key, jnp.asarray(updates, jnp.int32))
        steps = [int(s.steps) for s in new.actor_stats]
        assert steps == ([1, 1] if moves else [0, 0]), (updates, steps)
        assert (not same_leaves(new.actor, learner.actor)) == moves
        # The actor's loss used the train-mode batch statistics: its statistics moved by this batch's.
        if moves:
            _, expected = learner.actor(batch.data.obs, learner.actor_stats, train=True)
            assert same_leaves(new.actor_stats, expected)
    # Acting reads the running statistics (eval mode): the same observation, the same greedy action.
    obs = batch.data.obs[:3]
    a1 = agent.greedy(learner, obs)
    dist, _ = learner.actor(obs, learner.actor_stats, train=False)
    np.testing.assert_array_equal(a1, dist.mode())


@pytest.mark.learning
def test_crossq_with_a_batch_renormalised_actor_learns_pendulum():
    # The learning test's configuration with actor_batch_norm=True and the batch-norm warm-up shortened
    # to the run (sbx's 100,000 steps would keep the running statistics near their start for all of it).
    # Seen on this 2-core Xeon, compiled as users do: -217, -121, -243; the bound -500 sits ~250 under
    # the worst seed (untrained: under -900, the other learning test). About 30 CPU-s.
    agent = CrossQ("Pendulum-v1", critic_hidden_sizes=(64, 64), hidden_sizes=(32, 32), batch_size=128,
                   buffer_size=5_000, policy_delay=1, actor_batch_norm=True, renorm_warmup_steps=1_000)  # fmt: skip
    states, _ = train_seeds(agent, 4_000)
    assert most_above(per_seed_returns(agent, states), -500.0)


def test_crossq_defaults_and_fields():
    agent = CrossQ("Pendulum-v1")
    assert (agent.critic_hidden_sizes, agent.hidden_sizes, agent.policy_delay, agent.learning_starts) == ((1024, 1024), (256, 256), 3, 100)
    assert agent.default_budget() == 20_000 and CrossQ.default_env == "Pendulum-v1"
    assert all(o.b1 == 0.5 for o in agent.optimizers())
    assert "tau" not in agent.hyperparameters() and "tau" not in CrossQ.keywords()  # (no target network: no tau)
    old = {k: v for k, v in eqxrl.runs.agent_config(agent).items()} | {"tau": 0.005}  # (eqxrl 0.2 wrote a tau that set nothing)
    assert eqx.tree_equal(eqxrl.runs.agent_from_config({"agent": "crossq", "env": agent.env.name, "agent_config": old}), agent)
    assert {"actor.optimizer.learning_rate", "critic.optimizer.learning_rate", "alpha_optimizer.learning_rate", "init_alpha"} <= set(agent.hyperparameters())
    assert agent.critic.optimizer.b1 == agent.adam_b1 == 0.5  # (adam_b1 configures every optimizer it builds)


def test_bad_crossq_config_is_named():
    with no_runtime_typecheck():
        for env, kw, message in [
            ("CartPole-v1", {}, r"CrossQ needs a 1-D Box action space, got Discrete\(n=2\) from env 'CartPole-v1'; use DQN"),
            ("Pendulum-v1", dict(critic_torso=MLPTorso((8,))), r"CrossQ\(critic_torso\) must be None: its critics are BatchRenormQHeads"),
            ("Pendulum-v1", dict(critic_hidden_sizes=()), r"CrossQ\(critic_hidden_sizes\) must be a non-empty tuple of positive ints, got \(\)"),
            ("Pendulum-v1", dict(policy_delay=0), r"CrossQ\(policy_delay\) must be a positive int, got 0"),
            ("Pendulum-v1", dict(num_critics=0), r"CrossQ\(num_critics\) must be a positive int, got 0"),
            ("Pendulum-v1", dict(batch_norm_momentum=1.0), r"CrossQ\(batch_norm_momentum\) must be a number in \[0, 1\), got 1.0"),
            ("Pendulum-v1", dict(renorm_r_max=0.5), r"CrossQ\(renorm_r_max\) must be a number >= 1, got 0.5"),
            ("Pendulum-v1", dict(renorm_warmup_steps=-1), r"CrossQ\(renorm_warmup_steps\) must be an int >= 0, got -1"),
            ("Pendulum-v1", dict(adam_b1=1.0), r"CrossQ\(adam_b1\) must be a number in \[0, 1\), got 1.0"),
            ("Pendulum-v1", dict(autotune="yes"), r"CrossQ\(autotune\) must be True or False, got 'yes'"),
            ("Pendulum-v1", dict(init_alpha=0.0), r"CrossQ\(init_alpha\) must be > 0, got 0"),
            ("Pendulum-v1", dict(critic_learning_rate=-1.0), r"CrossQ\(critic_learning_rate\) must be > 0, got -1"),
            ("Pendulum-v1", dict(actor_batch_norm="yes"), r"CrossQ\(actor_batch_norm\) must be True or False, got 'yes'"),
            ("Pendulum-v1", dict(actor_batch_norm=True, actor_torso=MLPTorso((8,))),
             r"CrossQ\(actor_torso\) must be None with actor_batch_norm=True: the actor is then a BatchRenormPolicy"),
        ]:
            with pytest.raises(ValueError, match=message):
                CrossQ(env, **kw)


@pytest.mark.slow  # (over 2 s in the fast tier: tests/tiers.py)
def test_crossq_on_the_command_line(tmp_path):
    from cli_calls import main_output

    run = tmp_path / "run"
    code, _ = main_output(["train", "crossq", "--total-steps", "64", "--learning-starts", "16", "--batch-size", "16",
                           "--critic-hidden-sizes", "16,16", "--hidden-sizes", "16", "--renorm-warmup-steps", "8",
                           "--run-dir", str(run), "--quiet", "--eval-episodes", "1"])  # fmt: skip
    assert code == 0
    import json

    config = json.loads((run / "config.json").read_text())
    fields = config["agent_config"]
    assert config["agent"] == "crossq" and fields["critic_hidden_sizes"] == [16, 16] and fields["renorm_warmup_steps"] == 8


@pytest.mark.learning
def test_crossq_learns_pendulum():
    # Small networks, 4,000 env steps, the actor updated with every critic update, 3 seeds in one
    # program. Seen on this 2-core Xeon, 4 seeds: -225, -121, -252, -178 (compiled as users do, as
    # this test is); -167, -201, -258, -188 with the suite's unoptimised compile (other rounding).
    # Untrained -1283, -950, -1484. The bound -500 sits ~240 under the worst trained seed and ~450
    # over the best untrained one. With the default policy_delay=3 the same budget gave -183, -154,
    # -201, -236, but -1407, -402, -210 under the other rounding: one seed still learning at 4,000
    # steps, too near a bound. 4,000 steps fill no more than the 5,000-transition buffer, so its
    # size changes nothing but the cost of carrying it (33 CPU-s with it, 42 with the default).
    # About 25 CPU-s.
    agent = CrossQ("Pendulum-v1", critic_hidden_sizes=(64, 64), hidden_sizes=(32, 32), batch_size=128,
                   buffer_size=5_000, policy_delay=1)  # fmt: skip
    states, _ = train_seeds(agent, 4_000)
    assert most_above(per_seed_returns(agent, states), -500.0)
    assert np.all(untrained_returns(agent) < -900.0)


@pytest.mark.slow  # (over 2 s in the fast tier: tests/tiers.py)
def test_the_docs_page_runs():
    """docs/agents/crossq.md's example: the critics' statistics in the learner after 200 updates."""
    import pathlib
    import re

    text = (pathlib.Path(__file__).parents[2] / "docs" / "agents" / "crossq.md").read_text()
    (block,) = re.findall(r"^```python\n(.*?)^```", text, re.DOTALL | re.MULTILINE)
    ns = {"__name__": "docs_agents_crossq"}
    exec(compile(block, "docs/agents/crossq.md", "exec"), ns)
    stats = ns["stats"]
    assert stats[0].mean.shape == (2, 4) and np.all(np.asarray(stats[0].steps) == 200)
