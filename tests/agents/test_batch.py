"""eqxrl.agents.Batch (one agent, seeds, or a stack), the agent registry and the loop's programs."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from probe_envs import ObservationActionReward

import eqxrl
from eqxrl.agents import PPO, AbstractAgent, Batch, agent_class, agent_name, register_agent
from eqxrl.loop import Chunk, Progress, as_keys, batch_and_keys, num_iterations_for, run_chunk, run_init, state_batch

SMALL = dict(num_envs=2, rollout_length=4, num_epochs=1, num_minibatches=1, hidden_sizes=(4,))


@pytest.fixture(scope="module")
def agents():
    env = ObservationActionReward()
    return [PPO(env, **SMALL, learning_rate=lr) for lr in (1e-3, 2e-3)]


def test_batch_of_one_agent_seeds_and_a_stack(agents):
    one = Batch.of(agents[0])
    assert not one.batched and one.num_members == 1 and one.unwrap() is agents[0] and one.name == "PPO"
    seeds = Batch.of(agents[0], 3)
    assert seeds.batched and not seeds.stacked and seeds.member(2) is agents[0]
    assert seeds.distinct_members() == [agents[0]]
    stack = eqxrl.stack(agents)
    members = Batch.of(stack)
    assert members.stacked and members.size == 2 and isinstance(members.unwrap(), eqxrl.Stacked)
    assert float(members.member(1).learning_rate) == pytest.approx(2e-3)
    assert [float(a.learning_rate) for a in members.distinct_members()] == pytest.approx([1e-3, 2e-3])


def test_batch_template_state_and_vmap(agents):
    shapes = Batch.of(agents[0], 3).template_state()
    single = Batch.of(agents[0]).template_state()
    assert jax.tree.leaves(shapes)[0].shape == (3, *jax.tree.leaves(single)[0].shape)
    lr = Batch.of(eqxrl.stack(agents)).vmap(lambda a, x, shared: a.learning_rate * x + shared)(jnp.ones(2), shared=1.0)
    np.testing.assert_allclose(lr, [1.001, 1.002])


def test_batch_errors(agents):
    with pytest.raises(ValueError, match=r"train\(agent\) must be an eqxrl agent or eqxrl.stack\(\[...\]\), got int"):
        Batch.of(3, owner="train(agent)")
    with pytest.raises(ValueError, match=r"the 2 stacked agents need a batch of 2, got 3"):
        Batch.of(eqxrl.stack(agents), 3)
    with pytest.raises(ValueError, match=r"member\(i\) needs -2 <= i < 2, got 2"):
        Batch.of(eqxrl.stack(agents)).member(2)


def test_register_agent_and_names(agents):
    class Mine(PPO):
        pass

    assert agent_name(agents[0]) == "ppo" and agent_name(eqxrl.stack(agents)) == "ppo"
    assert agent_name(PPO) == "ppo" and agent_name(Mine) == "Mine"
    assert agent_class("ppo") is PPO
    with pytest.raises(ValueError, match=r"unknown agent 'mine'; known agents: .*register another with eqxrl.register_agent"):
        agent_class("mine")
    try:
        assert register_agent(Mine) is Mine and agent_class("mine") is Mine
        assert register_agent(Mine) is Mine  # again: the same class keeps its name
        with pytest.raises(ValueError, match=r"register_agent: the name 'ppo' is taken by PPO"):
            register_agent(Mine, "ppo")
    finally:
        eqxrl.agents.AGENTS.pop("mine", None)
    with pytest.raises(ValueError, match=r"register_agent\(cls\) must be a subclass of eqxrl.agents.AbstractAgent"):
        register_agent(int)
    with pytest.raises(ValueError, match=r"register_agent\(name\) must be an identifier like 'reinforce', got 'a b'"):
        register_agent(Mine, "a b")
    assert issubclass(Mine, AbstractAgent)


def test_keys_and_iterations(agents):
    assert as_keys(jax.random.key(0)).shape == ()
    with pytest.raises(ValueError, match=r"key must be a PRNG key from jax.random.key\(seed\), got int 3"):
        as_keys(3)
    batch, keys = batch_and_keys(eqxrl.stack(agents), jax.random.key(0))
    assert batch.stacked and keys.shape == (2,)
    batch, keys = batch_and_keys(agents[0], jax.random.split(jax.random.key(0), 3))
    assert batch.size == 3 and not batch.stacked
    assert num_iterations_for("train", agents[0], 17) == 2
    with pytest.raises(ValueError, match=r"train\(total_steps\) must be an int, got 1.5"):
        num_iterations_for("train", agents[0], 1.5)


@pytest.mark.slow
def test_chunk_program_runs_iterations_and_skips_past_the_budget(agents):
    batch = Batch.of(agents[0])
    state = run_init(batch, jax.random.key(0))  # (eager init may alias buffers, which the chunk donates)
    config = Chunk(batch, jnp.asarray(0, jnp.int32), jnp.asarray(3, jnp.int32), 4)
    state, metrics = run_chunk(config, state)
    assert int(state.iteration) == 3 and metrics["loss"].shape == (4,) and np.isnan(metrics["loss"][3])
    assert state_batch("evaluate", agents[0], state) == batch
    with pytest.raises(ValueError, match=r"rollout\(state\) does not match PPO \(PPOState, one run\) at .*: shape \(1, 4\) expected, got \(1, 1, 1, 4\)"):
        state_batch("rollout", agents[0], jax.tree.map(lambda x: x[None, None], state))


def test_progress_bar(capsys):
    bar = Progress(100, enabled=True, desc="demo", initial=10)
    bar.update(60, show_rate=True, ret="1.0")
    assert bar.done == 60 and bar.rate > 0
    assert bar.bar.postfix.startswith("sps=") and "sps=0," not in bar.bar.postfix and bar.bar.postfix.endswith("ret=1.0")
    bar.close()
    assert "demo" in capsys.readouterr().err
    off = Progress(5, enabled=False, desc="off", unit="gen")
    off.update(3)
    off.close()
    assert off.done == 3 and off.bar is None


def test_equinox_filter_of_batch_is_a_pytree(agents):
    batch = Batch.of(eqxrl.stack(agents))
    arrays, static = eqx.partition(batch, eqx.is_array)
    assert eqx.combine(arrays, static).size == 2


def test_import_agent_errors():
    from eqxrl.agents import import_agent

    with pytest.raises(ValueError, match=r"an agent class must be given as package.module:ClassName, got 'PPO'"):
        import_agent("PPO")
    with pytest.raises(ValueError, match=r"cannot import the module of agent 'no_such_module:PPO'"):
        import_agent("no_such_module:PPO")
    with pytest.raises(ValueError, match=r"module 'eqxrl.agents' has no 'Nope'"):
        import_agent("eqxrl.agents:Nope")
    assert import_agent("eqxrl.agents:PPO") is PPO  # already registered: stays "ppo"
    assert eqxrl.agents.class_path(PPO).endswith(":PPO")


def test_cli_names_a_bad_agent_path(capsys):
    from eqxrl import cli

    with pytest.raises(SystemExit) as exit_info:
        cli.main(["train", "no_such_module:Agent", "--total-steps", "64"])
    assert exit_info.value.code == 2
    assert "cannot import the module of agent 'no_such_module:Agent'" in capsys.readouterr().err


def test_pbt_fitness_fn_is_the_default_or_the_given(agents):
    from eqxrl.pbt import PBT, EvaluationReturn, LogUniform

    pbt = PBT(agents[0], {"learning_rate": LogUniform(1e-4, 1e-2)}, population_size=2, ready=8, eval_episodes=3)
    assert pbt.fitness_fn() == EvaluationReturn(3, True, None)
    custom = lambda agent, state, key: jnp.zeros(())  # noqa: E731
    assert PBT(agents[0], {"learning_rate": LogUniform(1e-4, 1e-2)}, population_size=2, ready=8, fitness=custom).fitness_fn() is custom
