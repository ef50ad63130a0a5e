"""DADS: the point env, the descriptor and skill wrappers, the skill dynamics, the
intrinsic reward, the agent (seeds, sweeps, options, bad input) and skill discovery."""

import math
import types

import equinox as eqx
import hypothesis.strategies as st
import jax
import jax.numpy as jnp
import jaxtyping
import numpy as np
import pytest
from learning import most_above, train_seeds
from hypothesis import given, settings

import eqxrl
from eqxrl.agents import DADS, SAC, DADSLearner, SkillReport
from eqxrl.runs import plot_skill_trajectories
from eqxrl.components import Sample, SkillDynamics, Transition, dads_intrinsic_reward
from eqxrl.envs import (
    AbstractWrapper,
    Box,
    Dict,
    DescriptorWrapper,
    Point2D,
    PointState,
    SkillState,
    SkillWrapper,
    TimeLimit,
    brax_xy,
    innermost_state,
    make,
    resolve_descriptor,
)

TINY = dict(
    num_envs=4,
    rollout_length=2,
    updates_per_step=0.5,
    batch_size=32,
    buffer_size=512,
    learning_starts=32,
    hidden_sizes=(16,),
    dynamics_hidden_sizes=(16,),
)


# ----------------------------------------------------------------------- the point env
def test_point_env_moves_by_its_clipped_action_inside_the_box(getkey):
    env = make("Point2D-v0")
    assert isinstance(env, TimeLimit) and isinstance(env.unwrapped, Point2D)
    assert env.name == "Point2D-v0" and env.max_episode_steps == 50
    assert env.observation_space.shape == (2,) and env.action_space.shape == (2,)
    state, ts = env.reset(getkey())
    np.testing.assert_array_equal(ts.obs, [0.0, 0.0])
    state, ts = env.step(getkey(), state, jnp.array([0.5, -3.0]))
    np.testing.assert_allclose(ts.obs, [0.5, -1.0])  # the action is clipped to [-1, 1]
    assert float(ts.reward) == pytest.approx(0.5)  # the step's x displacement
    assert not bool(ts.done)
    for _ in range(12):
        state, ts = env.step(getkey(), state, jnp.array([1.0, -1.0]))
    np.testing.assert_allclose(ts.obs, [10.0, -10.0])  # stays inside the box
    assert float(ts.reward) == 0.0
    assert isinstance(state.inner, PointState)


def test_point_env_time_limit_noise_and_bad_input(getkey):
    env = make("Point2D-v0", max_episode_steps=3, size=2.0, start_noise=0.5)
    state, ts = env.reset(getkey())
    assert bool(jnp.all(jnp.abs(ts.obs) <= 0.5)) and float(jnp.abs(ts.obs).sum()) > 0
    flags = []
    for _ in range(3):
        state, ts = env.step(getkey(), state, jnp.zeros(2))
        flags.append((bool(ts.truncated), bool(ts.terminated)))
    assert flags == [(False, False), (False, False), (True, False)]
    assert env.observation_space.high[0] == 2.0
    with pytest.raises(ValueError, match=r"Point2D\(size\) must be a number > 0, got -1"):
        Point2D(size=-1.0)
    with pytest.raises(ValueError, match=r"Point2D\(start_noise\) must be in \[0, size=10\], got 11"):
        Point2D(start_noise=11.0)


# ----------------------------------------------------------------------- wrappers
def test_descriptor_wrapper_appends_the_observation_descriptor(getkey):
    env = DescriptorWrapper(make("Point2D-v0"))
    assert env.kind == "observation" and env.descriptor_size == 2 and env.base_obs_size == 2
    assert env.observation_space.shape == (4,) and env.name == "Point2D-v0"
    state, ts = env.reset(getkey())
    state, ts = env.step(getkey(), state, jnp.array([1.0, 0.5]))
    np.testing.assert_allclose(ts.obs, [1.0, 0.5, 1.0, 0.5])


class _DictPoint(AbstractWrapper):
    """Point2D observing `{"y": (y,), "x": (x,)}`: stored (sorted keys) as `[x, y]`."""

    env: eqx.Module

    @property
    def observation_space(self):
        return Dict({"y": Box(-1.0, 1.0, (1,)), "x": Box(-1.0, 1.0, (1,))})

    def reset(self, key):
        state, ts = self.env.reset(key)
        return state, eqx.tree_at(lambda t: t.obs, ts, {"y": ts.obs[1:], "x": ts.obs[:1]})

    def step(self, key, state, action):
        state, ts = self.env.step(key, state, action)
        return state, eqx.tree_at(lambda t: t.obs, ts, {"y": ts.obs[1:], "x": ts.obs[:1]})


def test_wrappers_flatten_a_dict_observation_as_agents_store_it(getkey):
    """A `Dict` observation reaches the skill dynamics and the policy as `ObservationLayout`
    stores it: its entries in sorted key order (the "observation" descriptor too)."""
    env = SkillWrapper(DescriptorWrapper(_DictPoint(make("Point2D-v0")), "observation"), 2)
    assert env.env.base_obs_size == 2 and env.env.descriptor_size == 2 and env.observation_space.shape == (6,)
    state, ts = env.reset(getkey())
    state, ts = env.step(getkey(), state, jnp.array([0.5, -0.25]))
    np.testing.assert_allclose(ts.obs[:4], [0.5, -0.25, 0.5, -0.25])
    assert SkillWrapper(_DictPoint(make("Point2D-v0")), 2).observation_space.shape == (4,)


class _UserSuiteEnv(AbstractWrapper):
    """A new suite's env that declares its state descriptors (no eqxrl class knows it)."""

    env: eqx.Module

    @property
    def descriptors(self):
        return ("observation",)

    @property
    def unwrapped(self):
        return self


def test_auto_descriptor_asks_the_env_not_its_class(getkey):
    """`descriptor="auto"` takes the first of the innermost env's `descriptors` (brax: "xy";
    Point2D: "observation"; a new suite's env: its own declaration), and "xy" needs an env that
    declares it."""
    assert make("Point2D-v0").descriptors == ("observation",)
    assert make("CartPole-v1").descriptors == ()
    user = _UserSuiteEnv(make("CartPole-v1"))
    assert resolve_descriptor(user, "auto") == "observation"
    assert DescriptorWrapper(user).observation_space.shape == (8,)  # [obs, obs]
    with pytest.raises(ValueError, match=r"^DescriptorWrapper\(descriptor='xy'\) needs a brax env \(the torso's x-y\), got env 'CartPole-v1'$"):
        resolve_descriptor(user, "xy")
    with pytest.raises(ValueError, match=r"^DescriptorWrapper\(descriptor='auto'\) knows the descriptors of brax envs"):
        resolve_descriptor(make("CartPole-v1"), "auto")


def test_descriptor_wrapper_with_a_callable_reads_the_innermost_state(getkey):
    env = DescriptorWrapper(make("Point2D-v0"), lambda state, obs: 2.0 * state.pos[:1])
    assert env.descriptor_size == 1
    state, ts = env.reset(getkey())
    state, ts = env.step(getkey(), state, jnp.array([0.5, 0.0]))
    np.testing.assert_allclose(ts.obs, [0.5, 0.0, 1.0])
    assert isinstance(innermost_state(state), PointState)  # below the TimeLimit's state
    assert innermost_state(SkillState(state, jnp.asarray(0))) is state.inner


def test_brax_xy_descriptor():
    # brax_xy on a state shaped like a locomotion env's (bodies, 3) positions: the torso's x-y.
    pos = jnp.arange(9, dtype=jnp.float32).reshape(3, 3)
    fake = types.SimpleNamespace(pipeline_state=types.SimpleNamespace(x=types.SimpleNamespace(pos=pos)))
    np.testing.assert_array_equal(brax_xy(fake, jnp.zeros(3)), [0.0, 1.0])
    with pytest.raises(ValueError, match=r"descriptor='xy'\) needs a brax state with a pipeline_state"):
        brax_xy(types.SimpleNamespace(), jnp.zeros(3))


def test_descriptor_wrapper_on_a_brax_env():
    # brax's `fast` test env moves a body (compiles in a second, unlike ant).
    env = DescriptorWrapper(make("brax/fast", episode_length=5))
    assert env.kind == "xy" and env.descriptor_size == 2 and env.observation_space.shape == (4,)

    @jax.jit
    def run(key):
        state, ts = env.reset(key)
        for _ in range(3):
            state, ts = env.step(key, state, jnp.ones(1))
        return ts.obs, innermost_state(state).pipeline_state.x.pos

    obs, pos = run(jax.random.key(0))
    np.testing.assert_allclose(obs[2:], pos[:2])
    assert float(obs[2]) > 0 and float(obs[2]) == pytest.approx(float(obs[0]))  # fast observes its x position


def test_resolve_descriptor_and_bad_descriptors():
    assert resolve_descriptor(make("Point2D-v0"), "auto") == "observation"
    assert resolve_descriptor(make("Pendulum-v1"), "observation") == "observation"
    with pytest.raises(ValueError, match=r"DescriptorWrapper\(descriptor\) must be one of \['auto', 'observation', 'xy'\].*got 'pos'"):
        DescriptorWrapper(make("Point2D-v0"), "pos")
    with pytest.raises(ValueError, match=r"DescriptorWrapper\(descriptor='xy'\) needs a brax env .*got env 'Point2D-v0'"):
        DescriptorWrapper(make("Point2D-v0"), "xy")
    with pytest.raises(ValueError, match=r"descriptor='auto'\) knows the descriptors of brax envs .*not of env 'Pendulum-v1'"):
        DescriptorWrapper(make("Pendulum-v1"))
    with pytest.raises(ValueError, match=r"DescriptorWrapper\(descriptor\) must return a non-empty vector, got shape \(0,\)"):
        DescriptorWrapper(make("Point2D-v0"), lambda state, obs: obs[:0])


@pytest.mark.slow
def test_skill_wrapper_appends_a_uniform_skill_kept_through_the_episode(getkey):
    env = SkillWrapper(make("Point2D-v0"), 3)
    assert env.observation_space.shape == (5,) and env.num_skills == 3
    np.testing.assert_array_equal(env.observation_space.high[2:], 1.0)
    states, ts = jax.vmap(env.reset)(jax.random.split(getkey(), 3000))
    assert isinstance(states, SkillState)
    counts = np.bincount(np.asarray(states.skill), minlength=3)
    np.testing.assert_allclose(counts / 3000, 1 / 3, atol=0.04)
    np.testing.assert_array_equal(ts.obs[:, 2:], jax.nn.one_hot(states.skill, 3))
    state, ts = env.reset_with_skill(getkey(), jnp.asarray(2))
    for _ in range(3):
        state, ts = env.step(getkey(), state, jnp.ones(2))
    np.testing.assert_allclose(ts.obs, [3.0, 3.0, 0.0, 0.0, 1.0])
    with pytest.raises(ValueError, match=r"SkillWrapper\(num_skills\) must be an int >= 2, got 1"):
        SkillWrapper(make("Point2D-v0"), 1)


# ----------------------------------------------------------------------- skill dynamics and reward
def _linear_dynamics(skill_means, num_experts=1):
    """A one-layer skill dynamics on a 1-D input whose mean for skill z is `skill_means[z]`."""
    num_skills = len(skill_means)
    dyn = SkillDynamics(1, 1, num_skills, num_experts, hidden_sizes=(), key=jax.random.key(0))
    weight = np.zeros((1 + num_skills, num_experts * 2), np.float32)
    weight[1:, num_experts:] = np.asarray(skill_means, np.float32)[:, None]  # every expert alike
    return eqx.tree_at(lambda d: d.mlp.layers[0].weight, dyn, jnp.asarray(weight))


@pytest.mark.slow
def test_intrinsic_reward_is_zero_when_all_skills_predict_alike():
    dyn = _linear_dynamics([0.7, 0.7, 0.7, 0.7], num_experts=2)
    x, delta = jnp.zeros((5, 1)), jnp.linspace(-3.0, 3.0, 5)[:, None]
    log_probs = dyn.log_prob_all_skills(x, delta)
    reward = dads_intrinsic_reward(log_probs, jnp.array([0, 1, 2, 3, 0]))
    np.testing.assert_allclose(reward, 0.0, atol=1e-5)


@pytest.mark.slow
def test_intrinsic_reward_is_positive_when_the_true_skill_predicts_best():
    means = [-2.0, 0.0, 2.0]
    dyn = _linear_dynamics(means)
    x, delta = jnp.zeros((3, 1)), jnp.asarray(means)[:, None]  # each skill's own prediction
    log_probs = dyn.log_prob_all_skills(x, delta)
    expected_lp = -0.5 * (np.asarray(means)[:, None] - np.asarray(means)[None, :]) ** 2 - 0.5 * math.log(2 * math.pi)
    np.testing.assert_allclose(log_probs, expected_lp, rtol=1e-5)
    reward = dads_intrinsic_reward(log_probs, jnp.arange(3))
    lse = np.log(np.exp(expected_lp).sum(axis=1))
    np.testing.assert_allclose(reward, np.diag(expected_lp) - lse + math.log(3), rtol=1e-5)
    assert bool(jnp.all(reward > 0)) and bool(jnp.all(reward <= math.log(3)))
    # the wrong skill is penalised
    assert float(dads_intrinsic_reward(log_probs[:1], jnp.array([2]))[0]) < 0


def test_intrinsic_reward_is_stable_for_extreme_log_probs():
    log_probs = jnp.array([[-1e4, -2e4, -3e4], [5e3, -5e3, 0.0]], jnp.float32)
    reward = dads_intrinsic_reward(log_probs, jnp.array([0, 1]))
    assert bool(jnp.all(jnp.isfinite(reward)))
    np.testing.assert_allclose(reward, [math.log(3), -1e4 + math.log(3)], rtol=1e-5)


@pytest.mark.slow
@settings(max_examples=6, deadline=None)  # every example compiles a program of its own shapes
@given(
    batch=st.lists(st.integers(1, 4), min_size=0, max_size=2).map(tuple),
    num_skills=st.integers(2, 5),
    num_experts=st.integers(1, 3),
    output_size=st.integers(1, 3),
    learn_std=st.booleans(),
)
def test_skill_dynamics_shapes(batch, num_skills, num_experts, output_size, learn_std):
    dyn = SkillDynamics(3, output_size, num_skills, num_experts, (8,), key=jax.random.key(1), learn_std=learn_std)
    x = jnp.ones((*batch, 3)) * 0.3
    delta = jnp.ones((*batch, output_size)) * -0.2
    skill = jax.nn.one_hot(jnp.zeros(batch, jnp.int32), num_skills)

    @eqx.filter_jit  # one compile per example instead of one per eager op
    def run(dyn, x, skill, delta):
        all_lp = dyn.log_prob_all_skills(x, delta)
        reward = dads_intrinsic_reward(all_lp, jnp.zeros(batch, jnp.int32))
        return dyn(x, skill), dyn.log_prob(x, skill, delta), dyn.mean(x, skill), all_lp, reward

    (log_weights, means, stds), lp, mean, all_lp, reward = run(dyn, x, skill, delta)
    assert log_weights.shape == (*batch, num_experts)
    assert means.shape == stds.shape == (*batch, num_experts, output_size)
    assert bool(jnp.all(stds > 0))
    np.testing.assert_allclose(jnp.sum(jnp.exp(log_weights), axis=-1), 1.0, rtol=1e-5)
    assert lp.shape == batch and lp.dtype == jnp.float32
    assert mean.shape == (*batch, output_size)
    assert all_lp.shape == (*batch, num_skills)
    np.testing.assert_allclose(all_lp[..., 0], lp, rtol=1e-5, atol=1e-5)
    assert reward.shape == batch
    assert bool(jnp.all(reward <= math.log(num_skills) + 1e-5))


@pytest.mark.slow
@settings(max_examples=10, deadline=None)  # a compile per example's shapes
@given(
    batch=st.lists(st.integers(1, 5), min_size=0, max_size=3).map(tuple),
    num_skills=st.integers(2, 8),
    seed=st.integers(0, 2**16),
)
def test_intrinsic_reward_shapes_and_bounds(batch, num_skills, seed):
    rng = np.random.default_rng(seed)
    log_probs = jnp.asarray(rng.normal(0.0, 5.0, (*batch, num_skills)), jnp.float32)
    skill = jnp.asarray(rng.integers(0, num_skills, batch), jnp.int32)
    reward = jax.jit(dads_intrinsic_reward)(log_probs, skill)  # one program, not one per eager op
    assert reward.shape == batch and reward.dtype == jnp.float32
    lp = np.asarray(log_probs, np.float64)
    own = np.take_along_axis(lp, np.asarray(skill)[..., None], -1)[..., 0]
    expected = own - np.log(np.mean(np.exp(lp), axis=-1))
    np.testing.assert_allclose(reward, expected, rtol=1e-4, atol=1e-4)
    assert bool(jnp.all(reward <= math.log(num_skills) + 1e-5))


@pytest.mark.slow
def test_skill_dynamics_bad_input():
    with pytest.raises(ValueError, match=r"SkillDynamics\(num_skills\) must be >= 2, got 1"):
        SkillDynamics(2, 2, 1, key=jax.random.key(0))
    with pytest.raises(ValueError, match=r"SkillDynamics\(num_experts\) must be a positive int, got 0"):
        SkillDynamics(2, 2, 3, 0, key=jax.random.key(0))
    dyn = SkillDynamics(2, 2, 3, key=jax.random.key(0))
    with pytest.raises(ValueError, match=r"SkillDynamics: skill must have shape \(\*batch, 3\), got shape \(4, 2\)"):
        dyn.log_prob(jnp.zeros((4, 2)), jnp.zeros((4, 2)), jnp.zeros((4, 2)))
    with pytest.raises(ValueError, match=r"SkillDynamics: delta must have shape \(\*batch, 2\), got shape \(4, 5\)"):
        dyn.log_prob(jnp.zeros((4, 2)), jnp.zeros((4, 3)), jnp.zeros((4, 5)))


# ----------------------------------------------------------------------- the agent
def test_dads_wraps_the_env_and_builds_sac_from_its_fields():
    agent = DADS("Point2D-v0", num_skills=3, **TINY)
    assert isinstance(agent.env, SkillWrapper) and isinstance(agent.env.env, DescriptorWrapper)
    assert agent.env.name == "Point2D-v0" and agent.env.observation_space.shape == (2 + 2 + 3,)
    assert agent.descriptor_env.descriptor_size == 2
    assert isinstance(agent.sac, SAC) and agent.sac.obs_size == 2 + 3
    assert DADS("Point2D-v0", policy_sees_descriptor=True, **TINY).sac.obs_size == 2 + 2 + 4
    # an already-wrapped env, and the env rebuilt from its name, give the same agent
    assert eqx.tree_equal(DADS(agent.env, num_skills=3, **TINY), agent)
    config = {k: v for k, v in agent.config().items() if k not in ("agent", "env")}
    config = {k: eqxrl.core.from_spec(v, k) for k, v in config.items()}  # (lists as tuples, the buffer's spec as the buffer)
    assert eqx.tree_equal(DADS(make(agent.env.name), **config), agent)
    hyper = agent.hyperparameters()
    assert {"dynamics_optimizer.learning_rate", "actor.optimizer.learning_rate", "loop.gamma", "tau", "loop.reward_scale"} <= set(hyper)
    assert all(v.dtype == jnp.float32 and v.shape == () for v in hyper.values())
    x = jnp.arange(7, dtype=jnp.float32)
    obs, desc, skill = agent.split(x)
    np.testing.assert_array_equal(obs, [0, 1]) and np.testing.assert_array_equal(skill, [4, 5, 6])
    np.testing.assert_array_equal(desc, [2, 3])


@pytest.mark.parametrize("dynamics_input", ["descriptor", "observation"])
@pytest.mark.slow
def test_omit_input_dynamics_dim_leaves_the_first_dimensions_out(dynamics_input, getkey):
    # Point2D: observation = descriptor = (x, y). With the first dimension omitted the skill
    # dynamics sees y only: moving both ends of a transition along x (the same change) leaves
    # the intrinsic reward unchanged, as it does not without the option.
    agents = {k: DADS("Point2D-v0", dynamics_input=dynamics_input, omit_input_dynamics_dim=k, **TINY) for k in (0, 1)}
    assert agents[0].omit_input_dynamics_dim == 0  # the default keeps every dimension
    learners = {k: agent.init_learner(getkey()) for k, agent in agents.items()}
    assert learners[1].dynamics.input_size == 1 and learners[0].dynamics.input_size == 2
    assert learners[1].input_stats.mean.shape == (1,)
    position = jax.random.normal(getkey(), (16, 2))
    move = 0.5 * jax.random.normal(getkey(), (16, 2))
    skill = jax.nn.one_hot(jax.random.randint(getkey(), (16,), 0, 4), 4)
    flat = lambda p: jnp.concatenate([p, p, skill], axis=-1)  # noqa: E731
    shift = jnp.asarray([3.0, 0.0], jnp.float32)
    for k, agent in agents.items():
        inputs, delta, _ = agent._dynamics_data(flat(position), flat(position + move))
        np.testing.assert_array_equal(inputs, position[:, k:])
        np.testing.assert_allclose(delta, move, rtol=1e-5, atol=1e-6)
        reward = lambda p: agent.intrinsic_reward(learners[k], flat(p), flat(p + move))[0]  # noqa: E731
        same = np.allclose(reward(position), reward(position + shift), rtol=1e-5, atol=1e-6)
        assert same == (k == 1), k
    # one update trains the dynamics on the shortened input
    agent, learner = agents[1], learners[1]
    batch = Sample(
        Transition(flat(position), jnp.zeros((16, 2)), jnp.zeros((16,)), jnp.full((16,), 0.99), flat(position + move)),
        jnp.arange(16, dtype=jnp.int32), jnp.ones((16,)),
    )
    new, _, metrics = eqx.filter_jit(agent.update)(learner, batch, getkey(), jnp.zeros((), jnp.int32), jnp.float32(0.0))
    assert np.isfinite(float(metrics["dynamics_loss"])) and float(new.input_stats.count) > 0
    assert not np.allclose(new.dynamics.mlp.layers[0].weight, learner.dynamics.mlp.layers[0].weight)


def test_dads_on_a_brax_env_uses_the_torso_xy():
    agent = DADS(make("brax/fast", episode_length=5), **TINY)
    assert agent.descriptor_env.kind == "xy" and agent.descriptor_env.descriptor_size == 2
    assert agent.env.name == "brax/fast"
    with pytest.raises(ValueError, match=r"DADS\(descriptor_size=3\) does not match the descriptor of env 'brax/fast' \(descriptor='xy'\), which has size 2"):
        DADS(make("brax/fast", episode_length=5), descriptor_size=3, **TINY)


@pytest.mark.parametrize(
    "env, kwargs, message",
    [
        ("Point2D-v0", dict(num_skills=1), r"DADS\(num_skills\) must be an int >= 2, got 1"),
        ("Point2D-v0", dict(descriptor_size=3), r"DADS\(descriptor_size=3\) does not match the descriptor of env 'Point2D-v0' \(descriptor='observation'\), which has size 2"),
        ("Point2D-v0", dict(descriptor="xy"), r"DADS\(descriptor='xy'\) needs a brax env"),
        ("Point2D-v0", dict(descriptor="position"), r"DADS\(descriptor\) must be one of \['auto', 'observation', 'xy'\]"),
        ("Pendulum-v1", {}, r"DADS\(descriptor='auto'\) knows the descriptors of brax envs .*descriptor='observation'"),
        ("CartPole-v1", {}, r"DADS needs a 1-D Box action space, got Discrete"),
        ("Point2D-v0", dict(dynamics_input="state"), r"DADS\(dynamics_input\) must be one of \['descriptor', 'observation'\], got 'state'"),
        ("Point2D-v0", dict(omit_input_dynamics_dim=2), r"DADS\(omit_input_dynamics_dim\) must be an int in \[0, 2\), got 2: the skill dynamics' input \(dynamics_input='descriptor'\) has 2 dimensions and at least one must remain"),
        ("Point2D-v0", dict(omit_input_dynamics_dim=-1), r"DADS\(omit_input_dynamics_dim\) must be an int in \[0, 2\), got -1"),
        ("Point2D-v0", dict(omit_input_dynamics_dim=True), r"DADS\(omit_input_dynamics_dim\) must be an int in \[0, 2\), got True"),
        ("Point2D-v0", dict(n_step=3), r"DADS\(n_step\) must be 1 \(the intrinsic reward is a function of one-step transitions\), got 3"),
        ("Point2D-v0", dict(num_experts=0), r"DADS\(num_experts\) must be a positive int, got 0"),
        ("Point2D-v0", dict(dynamics_update_period=0), r"DADS\(dynamics_update_period\) must be a positive int, got 0"),
        ("Point2D-v0", dict(dynamics_learning_rate=-1.0), r"DADS\(dynamics_learning_rate\) must be > 0, got -1"),
        ("Point2D-v0", dict(tau=0.0), r"DADS\(tau\) must be in \(0, 1\], got 0"),
        ("Point2D-v0", dict(gamma=1.5), r"DADS\(gamma\) must be in \[0, 1\], got 1.5"),
        ("Point2D-v0", dict(batch_size=64, buffer_size=32), r"DADS\(batch_size=64\) must not exceed buffer_size=32"),
        (SkillWrapper(DescriptorWrapper(make("Point2D-v0")), 3), {}, r"DADS\(env\) is a SkillWrapper with 3 skills, but num_skills=4"),
        (SkillWrapper(make("Point2D-v0"), 4), {}, r"DADS\(env\): a SkillWrapper env must wrap a DescriptorWrapper, got TimeLimit"),
        (3, {}, r"DADS\(env\) must be an eqxrl AbstractEnv or an env name, got 3"),
    ],
)
def test_bad_dads_config(env, kwargs, message):
    with pytest.raises(ValueError, match=message):
        DADS(env, **kwargs)


def test_dads_custom_descriptor_through_a_descriptor_wrapper(getkey):
    env = DescriptorWrapper(make("Pendulum-v1"), lambda state, obs: obs[:2])
    agent = DADS(env, num_skills=2, **TINY)
    assert agent.descriptor_env is env and agent.env.observation_space.shape == (3 + 2 + 2,)
    with pytest.raises(jaxtyping.TypeCheckError, match="descriptor"):
        DADS("Point2D-v0", descriptor=lambda s, o: o)
    jaxtyping.config.update("jaxtyping_disable", True)  # as a user calls it: eqxrl's own ValueError
    try:
        with pytest.raises(ValueError, match=r"DADS\(descriptor\) must be one of .*pass env=DescriptorWrapper\(env, fn\)"):
            DADS("Point2D-v0", descriptor=lambda s, o: o)
        with pytest.raises(ValueError, match=r"DADS\(num_skills\) must be an int >= 2, got 2.5"):
            DADS("Point2D-v0", num_skills=2.5)
    finally:
        jaxtyping.config.update("jaxtyping_disable", False)


@pytest.mark.slow
def test_dads_trains_seeds_and_reports_every_skill(getkey, tmp_path):
    agent = DADS("Point2D-v0", num_skills=3, **TINY)
    states, metrics = eqxrl.train(agent, jax.random.split(getkey(), 2), 8 * 12, progress=False)
    assert metrics["dynamics_log_likelihood"].shape == (2, 12)
    assert np.all(np.isfinite(metrics["intrinsic_reward"][:, 4:]))
    assert np.all(np.isnan(metrics["intrinsic_reward"][:, :4]))  # warm-up
    assert isinstance(states.learner, DADSLearner)
    report = agent.evaluate_skills(states, getkey(), num_steps=7)
    assert isinstance(report, SkillReport)
    assert report.env_return.shape == report.intrinsic_return.shape == report.lengths.shape == (2, 3)
    assert report.descriptors.shape == (2, 3, 8, 2)
    np.testing.assert_array_equal(report.descriptors[:, :, 0], 0.0)  # Point2D starts at the origin
    np.testing.assert_allclose(report.env_return, report.descriptors[..., -1, 0], atol=1e-5)  # x progress
    assert report.mean_pairwise_distance().shape == (2,) and report.max_distance_from_start().shape == (2,)
    returns = eqxrl.evaluate(agent, states, getkey(), num_episodes=3)
    assert returns.shape == (2, 3)
    single = jax.tree.map(lambda x: x[0], states)
    one = agent.evaluate_skills(single, getkey())
    assert one.descriptors.shape == (3, 51, 2) and int(one.lengths[0]) == 50
    plot_skill_trajectories(report, tmp_path / "seeds.png", title="two seeds")
    plot_skill_trajectories(one, tmp_path / "one.png")
    assert (tmp_path / "seeds.png").stat().st_size > 1000 and (tmp_path / "one.png").stat().st_size > 1000
    with pytest.raises(ValueError, match=r"DADS.evaluate_skills\(num_steps\) must be a positive int, got 0"):
        agent.evaluate_skills(single, getkey(), num_steps=0)
    jaxtyping.config.update("jaxtyping_disable", True)  # a malformed report, as a user could build it
    try:
        bad = SkillReport(jnp.zeros(3), jnp.zeros(3), jnp.zeros((3, 2)), jnp.zeros(3, jnp.int32))
        with pytest.raises(ValueError, match=r"plot_skill_trajectories\(report\) needs descriptors of shape"):
            plot_skill_trajectories(bad, tmp_path / "bad.png")
    finally:
        jaxtyping.config.update("jaxtyping_disable", False)


@pytest.mark.slow
def test_dads_sweep_and_options(getkey):
    options = dict(
        TINY,
        dynamics_update_period=2,
        dynamics_input="observation",
        policy_sees_descriptor=True,
        normalize_policy_observations=True,
        normalize_dynamics=False,
        dynamics_learn_std=True,
        prioritized=True,
    )
    agents = [DADS("Point2D-v0", dynamics_learning_rate=lr, **options) for lr in (1e-3, 3e-3)]
    states, metrics = eqxrl.train(eqxrl.stack(agents), getkey(), 8 * 10, progress=False)
    assert metrics["dynamics_loss"].shape == (2, 10)
    assert np.all(np.isfinite(metrics["dynamics_loss"][:, 4:]))
    assert states.learner.policy_stats.count.shape == (2,) and bool(jnp.all(states.learner.policy_stats.count > 0))
    report = agents[0].evaluate_skills(jax.tree.map(lambda x: x[0], states), getkey(), num_steps=5)
    assert report.descriptors.shape == (4, 6, 2)


# ----------------------------------------------------------------------- learning
@pytest.mark.slow
@pytest.mark.learning
def test_dads_discovers_distinct_skills_on_the_point_env():
    agent = DADS(
        "Point2D-v0",
        num_skills=4,
        num_envs=8,
        rollout_length=2,
        updates_per_step=0.5,
        batch_size=128,
        buffer_size=20_000,
        learning_starts=1_000,
        hidden_sizes=(64, 64),
        dynamics_hidden_sizes=(64, 64),
    )
    keys = jax.random.split(jax.random.key(0), 3)  # (the keys of train_seeds)
    untrained = agent.evaluate_skills(jax.vmap(agent.init)(keys), jax.random.key(1))
    states, metrics = train_seeds(agent, 20_000)
    trained = agent.evaluate_skills(states, jax.random.key(1))
    before, after = np.asarray(untrained.mean_pairwise_distance()), np.asarray(trained.mean_pairwise_distance())
    # An untrained policy barely moves (~0.1); distinct skills head for distinct walls of the box.
    # Bounds (native, 3 seeds: spread margins 2.8, 9.2, 7.9, log-likelihood rises 0.55, 0.55, 0.59, final
    # intrinsic rewards 0.39, 0.59, 0.64; over 4 seeds, natively and with AVX2: 2.8, 10.0, 7.8, 8.7 / 0.55, 0.58,
    # 0.58, 0.50 / 0.41, 0.63, 0.63, 0.54): 2 of 3 seeds spread 3x wider than untrained and at least 10 apart;
    # the dynamics' log-likelihood rises by 0.2 and the intrinsic reward ends above 0.3 on 2 of 3.
    assert most_above(np.minimum(after - 3 * before, after - 10.0), 0.0), (before, after)
    log_lik = np.asarray(metrics["dynamics_log_likelihood"])
    rises = [np.mean(x[np.isfinite(x)][-50:]) - np.mean(x[np.isfinite(x)][:50]) for x in log_lik]
    assert most_above(rises, 0.2), rises
    assert most_above(np.nanmean(np.asarray(metrics["intrinsic_reward"])[:, -50:], axis=1), 0.3), metrics["intrinsic_reward"]
