"""ExponentialSchedule, and DQN's epsilon annealing (`epsilon_decay`): values, exploration, bad input."""

import equinox as eqx
import hypothesis.strategies as st
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings

from eqxrl.agents import DQN, Clock
from eqxrl.components import EpsilonSchedule, ExponentialSchedule, GeometricDecaySchedule, LinearSchedule
from typecheck import no_runtime_typecheck


def test_exponential_schedule_values():
    schedule = ExponentialSchedule(1e-2, 1e-4)
    values = [float(schedule(p)) for p in (0.0, 0.25, 0.5, 1.0)]
    assert values == pytest.approx([1e-2, 10 ** -2.5, 1e-3, 1e-4], rel=1e-5)
    # progress outside [0, 1] is clipped, as for the other schedules; the count is not used
    assert float(schedule(-1.0)) == pytest.approx(1e-2, rel=1e-6)
    assert float(schedule(2.0, count=7)) == pytest.approx(1e-4, rel=1e-5)
    # an end above the start grows; equal ends are constant
    assert float(ExponentialSchedule(1.0, 4.0)(0.5)) == pytest.approx(2.0, rel=1e-6)
    assert float(ExponentialSchedule(0.3, 0.3)(0.7)) == pytest.approx(0.3, rel=1e-6)
    # below the linear schedule between equal ends (a convex decay)
    assert float(schedule(0.5)) < float(LinearSchedule(1e-2, 1e-4)(0.5))


@settings(deadline=None, max_examples=20)
@given(
    init=st.floats(1e-6, 1.0), end=st.floats(1e-6, 1.0), p=st.floats(0.0, 1.0), q=st.floats(0.0, 1.0)
)
def test_exponential_schedule_is_linear_in_log_space(init, end, p, q):
    schedule = ExponentialSchedule(init, end)
    log = lambda x: float(np.log(float(schedule(x))))  # noqa: E731
    expected = np.log(np.float32(init)) + (np.log(np.float32(end)) - np.log(np.float32(init))) * np.array([p, q, (p + q) / 2])
    np.testing.assert_allclose([log(p), log(q), log((p + q) / 2)], expected, rtol=1e-4, atol=1e-5)
    assert min(init, end) * (1 - 1e-5) <= float(schedule(p)) <= max(init, end) * (1 + 1e-5)


def test_exponential_schedule_bad_input():
    with pytest.raises(ValueError, match=r"ExponentialSchedule\(init_value\) must be > 0, got 0"):
        ExponentialSchedule(0.0, 1e-3)
    with pytest.raises(ValueError, match=r"ExponentialSchedule\(end_value\) must be > 0, got -1"):
        ExponentialSchedule(1e-3, -1.0)


def test_dqn_epsilon_linear_and_exponential():
    linear = DQN("CartPole-v1", eps_start=1.0, eps_end=0.01, exploration_fraction=0.5)
    exponential = DQN("CartPole-v1", eps_start=1.0, eps_end=0.01, exploration_fraction=0.5, epsilon_decay="exponential")
    assert linear.epsilon_decay == "linear"  # the default
    progress = (0.0, 0.125, 0.25, 0.5, 0.75, 1.0)
    assert [float(linear.epsilon(p)) for p in progress] == pytest.approx([1.0, 0.7525, 0.505, 0.01, 0.01, 0.01], rel=1e-5)
    # geometric over the first half of training, then eps_end: 1 -> 0.1 at a quarter -> 0.01 at half
    expected = [1.0, 0.1**0.5, 0.1, 0.01, 0.01, 0.01]
    assert [float(exponential.epsilon(p)) for p in progress] == pytest.approx(expected, rel=1e-5)
    assert float(exponential.epsilon(0.25)) == pytest.approx(float(ExponentialSchedule(1.0, 0.01)(0.5)), rel=1e-6)
    # traced progress (as in the training loop)
    assert float(eqx.filter_jit(lambda agent, p: agent.epsilon(p))(exponential, jnp.float32(0.25))) == pytest.approx(0.1, rel=1e-5)


@pytest.mark.slow  # (over 2 s in the fast tier: tests/tiers.py)
@pytest.mark.parametrize("decay, rate", [("linear", 0.525), ("exponential", 0.05**0.5)])
def test_dqn_explores_at_its_epsilon(decay, rate):
    # Halfway through the annealing, the share of uniformly random actions is epsilon; a random
    # action differs from the greedy one with probability 1/2 (two actions).
    agent = DQN("CartPole-v1", hidden_sizes=(8,), eps_start=1.0, eps_end=0.05, exploration_fraction=0.5, epsilon_decay=decay)
    learner = agent.init_learner(jax.random.key(0))
    obs = jax.random.normal(jax.random.key(1), (20_000, 4))
    explore = eqx.filter_jit(lambda p: agent.explore(learner, obs, jax.random.key(2), p))
    assert float(agent.epsilon(0.25)) == pytest.approx(rate, rel=1e-5)
    changed = float(jnp.mean(explore(jnp.float32(0.25)) != agent.greedy(learner, obs)))
    assert changed == pytest.approx(rate / 2, abs=0.015)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(epsilon_decay="cosine"), r"DQN\(epsilon_decay\) must be one of \['linear', 'exponential'\], got 'cosine'"),
        (dict(epsilon_decay="exponential", eps_end=0.0), r"DQN\(eps_end\) must be in \(0, 1\] with epsilon_decay='exponential', got 0"),
        (dict(epsilon_decay="exponential", eps_start=0.0), r"DQN\(eps_start\) must be in \(0, 1\] with epsilon_decay='exponential', got 0"),
    ],
)
def test_dqn_epsilon_decay_bad_input(kwargs, message):
    with pytest.raises(ValueError, match=message):
        DQN("CartPole-v1", **kwargs)
    DQN("CartPole-v1", eps_end=0.0)  # linear decay to 0 stays allowed


def test_dqn_anneals_its_learning_rate_by_default():
    from eqxrl.components import Adam

    agent = DQN("CartPole-v1")
    assert agent.anneal_lr and agent.batch_size == 256
    opt = agent.q_optimizer
    assert isinstance(opt, Adam) and opt.anneal
    assert float(opt.current_learning_rate(0.0)) == pytest.approx(1e-3)
    assert float(opt.current_learning_rate(0.75)) == pytest.approx(2.5e-4)
    assert not DQN("CartPole-v1", anneal_lr=False).q_optimizer.anneal
    from typecheck import no_runtime_typecheck

    with no_runtime_typecheck(), pytest.raises(ValueError, match=r"^DQN\(anneal_lr\) must be True or False, got 'yes'$"):
        DQN("CartPole-v1", anneal_lr="yes")


# ------------------------------------------------------- per-step decay (pytorchrl's DQN exploration)
@pytest.mark.parametrize("initial, decay, minimum", [(1.0, 0.99, 0.05), (0.5, 0.999, 0.0), (0.3, 1.0, 0.1)])
def test_geometric_decay_schedule_is_the_per_step_loop(initial, decay, minimum):
    # pytorchrl: epsilon <- max(epsilon * epsilon_decay, min_epsilon) once per step, in float64.
    steps = 600
    eps, expected = initial, []
    for _ in range(steps):
        expected.append(max(eps, minimum))
        eps = max(eps * decay, minimum)
    schedule = GeometricDecaySchedule(initial, decay, minimum)
    values = jax.jit(jax.vmap(lambda c: schedule(0.3, c)))(jnp.arange(steps, dtype=jnp.int32))
    np.testing.assert_allclose(np.asarray(values, np.float64), expected, rtol=1e-5)
    assert float(schedule(0.9, count=steps)) == pytest.approx(max(initial * decay**steps, minimum), rel=1e-5)  # progress unused


@pytest.mark.parametrize(
    "args, message",
    [
        ((1.0, 0.0), r"GeometricDecaySchedule\(decay\) must be in \(0, 1\], got 0"),
        ((1.0, 1.5), r"GeometricDecaySchedule\(decay\) must be in \(0, 1\], got 1.5"),
        ((0.0, 0.9), r"GeometricDecaySchedule\(initial\) must be > 0, got 0"),
        ((1.0, 0.9, -0.1), r"GeometricDecaySchedule\(minimum\) must be >= 0, got -0.1"),
        ((0.1, 0.9, 0.5), r"GeometricDecaySchedule\(minimum\) must be <= initial \(0.1\), got 0.5"),
    ],
)
def test_geometric_decay_schedule_bad_input(args, message):
    with no_runtime_typecheck(), pytest.raises(ValueError, match=message):
        GeometricDecaySchedule(*args)


def test_dqn_exploration_schedule_values_and_hyperparameters():
    agent = DQN("CartPole-v1", hidden_sizes=(8,), exploration=GeometricDecaySchedule(1.0, 0.99, 0.05))
    assert float(agent.epsilon(0.7, 10)) == pytest.approx(0.99**10, rel=1e-5)  # the count, not progress
    assert float(agent.epsilon(1.0)) == pytest.approx(0.05)  # no count: the end of a long run (act's)
    names = agent.hyperparameters()
    assert {"exploration.initial", "exploration.decay", "exploration.minimum"} <= set(names)
    assert not {"eps_start", "eps_end", "exploration_fraction"} & set(names)  # unused with a schedule
    # a progress schedule works too (count unused); the default is bit-identical to no schedule
    assert float(DQN("CartPole-v1", exploration=LinearSchedule(0.8, 0.2)).epsilon(0.5, 3)) == pytest.approx(0.5)
    assert DQN("CartPole-v1").exploration == EpsilonSchedule(1.0, 0.05, 0.5)  # (built from eps_start, eps_end, ...)
    with no_runtime_typecheck(), pytest.raises(ValueError, match=r"DQN\(exploration\) must be None \(eps_start -> eps_end\) or a schedule"):
        DQN("CartPole-v1", exploration=0.1)


@pytest.mark.slow  # (over 2 s in the fast tier: tests/tiers.py)
def test_dqn_collects_with_the_epsilon_of_each_step():
    # decay 1e-9: epsilon 1 at collection step 0, ~0 from step 1 on. One iteration of two steps of
    # 256 envs, stored in order: step 0's actions are uniform, step 1's greedy (the learner
    # collects before it updates).
    schedule = GeometricDecaySchedule(1.0, 1e-9, 0.0)
    agent = DQN("CartPole-v1", hidden_sizes=(8,), num_envs=256, rollout_length=2, batch_size=8, buffer_size=1024,
                learning_starts=0, exploration=schedule)  # fmt: skip
    state = agent.init(jax.random.key(0))
    clock = Clock(jnp.zeros((), jnp.int32), jnp.asarray(10, jnp.int32))
    new, metrics = eqx.filter_jit(lambda a, s: a.train_iteration(s, clock))(agent, state)
    assert float(metrics["epsilon"]) == pytest.approx(1e-9, rel=1e-4)  # the iteration's last step (1)
    assert int(new.buffer.size) == 512
    data = new.buffer.data
    greedy = agent.greedy(state.learner, data.obs[:512])
    first, second = data.action[:256] == greedy[:256], data.action[256:512] == greedy[256:]
    assert bool(jnp.all(second))
    assert float(jnp.mean(first)) == pytest.approx(0.5, abs=0.1)  # a uniform action is the greedy one half the time


def test_the_epsilon_keywords_build_the_exploration_schedule_the_agent_stores():
    """`eps_start`, `eps_end`, `exploration_fraction` and `epsilon_decay` are init-only keywords that
    build `exploration`, an `EpsilonSchedule` (where the numbers live); their names read and set it,
    and a config of the flat layout still loads."""
    import eqxrl
    from eqxrl.agents import set_hyperparameter

    agent = DQN("CartPole-v1", eps_start=0.8, eps_end=0.1, exploration_fraction=0.25, epsilon_decay="exponential")
    assert agent.exploration == EpsilonSchedule(0.8, 0.1, 0.25, "exponential")
    assert (float(agent.eps_start), float(agent.exploration_fraction), agent.epsilon_decay) == (pytest.approx(0.8), 0.25, "exponential")
    assert float(agent.epsilon(0.5)) == pytest.approx(0.1) and float(agent.epsilon(0.125)) == pytest.approx(0.8 * (0.1 / 0.8) ** 0.5)
    assert {"exploration.start", "exploration.end", "exploration.fraction"} <= set(agent.hyperparameters())
    assert float(set_hyperparameter(agent, "eps_end", 0.2).exploration.end) == pytest.approx(0.2)
    old = {"eps_start": 0.8, "eps_end": 0.1, "exploration_fraction": 0.25, "epsilon_decay": "exponential", "exploration": None}
    assert eqx.tree_equal(eqxrl.runs.agent_from_config({"agent": "dqn", "env": "CartPole-v1", "agent_config": old}), agent)
    with no_runtime_typecheck():
        with pytest.raises(ValueError, match=r"^EpsilonSchedule\(start\) must be in \[0, 1\], got 1.5$"):
            EpsilonSchedule(1.5)
        with pytest.raises(ValueError, match=r"^EpsilonSchedule\(decay\) must be one of \['linear', 'exponential'\], got 'cubic'$"):
            EpsilonSchedule(decay="cubic")
        with pytest.raises(ValueError, match=r"^DQN\(exploration\) is the exploration schedule itself: with it given, \['eps_end'\] must stay unset"):
            DQN("CartPole-v1", exploration=GeometricDecaySchedule(1.0, 0.9, 0.05), eps_end=0.1)
