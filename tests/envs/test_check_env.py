"""Tests for `eqxrl.envs.check_env`: an env's reset/step outputs against its spaces, checked
when it is made (`make`), when an agent is built on it (built-in or a user's agent), once."""

import re

import equinox as eqx
import jax
import jax.numpy as jnp
import jaxtyping
import pytest
from jaxtyping import Array

import eqxrl
from eqxrl.agents import DQN, PPO, SAC, AbstractAgent
from eqxrl.envs import (
    AbstractEnv,
    AutoReset,
    Box,
    Dict,
    Discrete,
    EpisodeStatistics,
    MultiBinary,
    MultiDiscrete,
    TimeLimit,
    TimeStep,
    VectorEnv,
    check_env,
    first_timestep,
    make,
    register,
)
from eqxrl.testing import ContractError, check_env_steps
from typecheck import no_runtime_typecheck


def _ok(obs=None, reward=None, terminated=None, truncated=None, info=None):
    return dict(
        obs=jnp.zeros(3, jnp.float32) if obs is None else obs,
        reward=jnp.zeros((), jnp.float32) if reward is None else reward,
        terminated=jnp.zeros((), bool) if terminated is None else terminated,
        truncated=jnp.zeros((), bool) if truncated is None else truncated,
        info={} if info is None else info,
    )


class MyEnv(AbstractEnv):
    """A configurable env: `step_fields` / `reset_fields` build the timestep's fields
    (overriding correct defaults), `next_state` the state `step` returns."""

    step_fields: dict = eqx.field(static=True, default_factory=dict)
    reset_fields: dict = eqx.field(static=True, default_factory=dict)
    next_state: object = eqx.field(static=True, default=None)
    discrete: bool = eqx.field(static=True, default=True)

    def reset(self, key):
        return {"t": jnp.zeros((), jnp.int32)}, TimeStep(**_ok(**{k: f() for k, f in self.reset_fields.items()}))

    def step(self, key, state, action):
        fields = _ok(**{k: f() for k, f in self.step_fields.items()})
        state = {"t": state["t"] + 1} if self.next_state is None else self.next_state(state)
        return state, TimeStep(**fields)

    @property
    def observation_space(self):
        return Box(-1.0, 1.0, (3,))

    @property
    def action_space(self):
        return Discrete(2) if self.discrete else Box(-1.0, 1.0, (2,))


def _int_reward_env(**kw):
    return MyEnv(step_fields={"reward": lambda: jnp.ones((), jnp.int32)}, **kw)


INT_REWARD = r"MyEnv\.step: reward must be a float32 scalar, got int32 with shape \(\)"


# ----------------------------------------------------------------------------- the checks


def test_correct_env_passes_and_is_returned():
    env = MyEnv()
    assert check_env(env) is env


def test_int_reward_under_the_test_hook_and_as_a_user():
    # Under the test hook, TimeStep's own annotation rejects the int reward while step is traced...
    with pytest.raises(jaxtyping.TypeCheckError, match="reward"):
        check_env(_int_reward_env())
    # ...a user (no hook) gets check_env's message.
    with no_runtime_typecheck(), pytest.raises(ValueError, match=INT_REWARD):
        check_env(_int_reward_env())


@pytest.mark.parametrize(
    "fields, message",
    [
        ({"reward": lambda: jnp.zeros((1,), jnp.float32)}, r"reward must be a float32 scalar, got float32 with shape \(1,\)"),
        ({"obs": lambda: jnp.zeros(4, jnp.float32)}, r"obs must be a float or integer array of shape \(3,\) \(the observation_space's\), got float32 with shape \(4,\)"),
        ({"obs": lambda: jnp.zeros(3, bool)}, r"obs must be a float or integer array of shape \(3,\) .*got bool with shape \(3,\)"),
        ({"obs": lambda: {"a": jnp.zeros(3)}}, r"obs must be a float or integer array of shape \(3,\) .*got a dict"),
        ({"terminated": lambda: jnp.zeros((2,), bool)}, r"terminated must be a bool scalar, got bool with shape \(2,\)"),
        ({"info": lambda: ()}, r"info must be a dict, got a tuple"),
    ],
)
def test_step_field_messages(fields, message):
    # As a user sees them: under the test hook, TimeStep's annotations reject some of these
    # (a dtype, or a reward's shape beside the flags') while step is traced.
    with no_runtime_typecheck(), pytest.raises(ValueError, match=r"MyEnv\.step: " + message):
        check_env(MyEnv(step_fields=fields))


def test_dtype_messages_of_the_flags_as_a_user():
    with no_runtime_typecheck():
        env = MyEnv(step_fields={"truncated": lambda: jnp.zeros((), jnp.float32)})
        with pytest.raises(ValueError, match=r"MyEnv\.step: truncated must be a bool scalar, got float32 with shape \(\)"):
            check_env(env)
        env = MyEnv(reset_fields={"terminated": lambda: jnp.zeros((), jnp.int32)})
        with pytest.raises(ValueError, match=r"MyEnv\.reset: terminated must be a bool scalar, got int32 with shape \(\)"):
            check_env(env)


def test_reset_is_checked_too():
    env = MyEnv(reset_fields={"obs": lambda: jnp.zeros((1, 3))})
    with pytest.raises(ValueError, match=r"MyEnv\.reset: obs must be .* shape \(3,\) .*got float32 with shape \(1, 3\)"):
        check_env(env)


def test_python_numbers_pass_as_their_jax_types():
    # A Python float reward and Python bool flags are float32 and bool to JAX (weakly typed).
    env = MyEnv(step_fields={"reward": lambda: 1.0, "terminated": lambda: False})
    with no_runtime_typecheck():
        assert check_env(env) is env
    with no_runtime_typecheck(), pytest.raises(ValueError, match=r"reward must be a float32 scalar, got int32"):
        check_env(MyEnv(step_fields={"reward": lambda: 1}))


def test_integer_observations_pass():
    assert check_env(MyEnv(step_fields={"obs": lambda: jnp.zeros(3, jnp.int32)}))


def test_state_must_keep_its_dtype_and_structure():
    env = MyEnv(next_state=lambda s: {"t": s["t"].astype(jnp.float32)})
    message = r"MyEnv\.step must return a state of the structure, shapes and dtypes reset returns .*\['t'\]: dtype int32 expected, got float32"
    with pytest.raises(ValueError, match=message):
        check_env(env)
    env = MyEnv(next_state=lambda s: {"t": s["t"], "u": s["t"]})
    with pytest.raises(ValueError, match=r"MyEnv\.step must return a state .*\['u'\]: not expected, present"):
        check_env(env)
    env = MyEnv(next_state=lambda s: {"t": jnp.zeros(2, jnp.int32)})
    with pytest.raises(ValueError, match=r"\['t'\]: shape \(\) expected, got \(2,\)"):
        check_env(env)


def test_results_that_are_not_a_state_and_a_timestep():
    class NoPair(MyEnv):
        def reset(self, key):
            return first_timestep(jnp.zeros(3))

    with pytest.raises(ValueError, match=r"NoPair\.reset must return \(state, TimeStep\), got a TimeStep"):
        check_env(NoPair())

    class NoTimeStep(MyEnv):
        def step(self, key, state, action):
            return state, (jnp.zeros(3), jnp.zeros(()))

    with pytest.raises(ValueError, match=r"NoTimeStep\.step must return \(state, TimeStep\), got a tuple as the timestep"):
        check_env(NoTimeStep())


def test_names_the_wrappers_and_the_batch():
    with no_runtime_typecheck():
        with pytest.raises(ValueError, match=r"TimeLimit\(MyEnv\)\.step: reward must be a float32 scalar"):
            check_env(TimeLimit(_int_reward_env(), 5))
        match = r"VectorEnv\(MyEnv\)\.step: reward must be a float32 array of shape \(4,\) \(one per env\), got int32 with shape \(4,\)"
        with pytest.raises(ValueError, match=match):
            check_env(VectorEnv(_int_reward_env(), 4))
    env = VectorEnv(MyEnv(step_fields={"obs": lambda: jnp.zeros(4)}), 2)
    with pytest.raises(ValueError, match=r"obs must be .* of shape \(2, 3\) .*got float32 with shape \(2, 4\)"):
        check_env(env)
    assert check_env(VectorEnv(MyEnv(), 3))


def test_continuous_actions_reach_step_with_the_action_space_shape():
    seen = []

    class Continuous(MyEnv):
        def step(self, key, state, action):
            seen.append((action.shape, action.dtype))
            return super().step(key, state, action)

    check_env(Continuous(discrete=False))
    assert seen == [((2,), jnp.float32)]


def test_not_an_env():
    with pytest.raises(jaxtyping.TypeCheckError):
        check_env("CartPole-v1")
    with no_runtime_typecheck(), pytest.raises(ValueError, match=r"check_env\(env\) must be an eqxrl AbstractEnv, got 'CartPole-v1'"):
        check_env("CartPole-v1")


# ----------------------------------------------------------------------------- where it runs


@pytest.fixture
def clean_registry(monkeypatch):
    monkeypatch.setattr(eqxrl.envs._make, "_registry", {})  # (private: an empty registry of env names for the test)


@pytest.mark.usefixtures("clean_registry")
def test_make_checks_registered_factories():
    register("Bad-v0", lambda: MyEnv(step_fields={"obs": lambda: jnp.zeros(2)}))
    with pytest.raises(ValueError, match=r"MyEnv\.step: obs must be"):
        make("Bad-v0")
    register("NotAnEnv-v0", lambda: 3)
    with no_runtime_typecheck(), pytest.raises(ValueError, match=r"make\('NotAnEnv-v0'\): the registered factory returned 3"):
        make("NotAnEnv-v0")


def test_built_in_agents_check_their_env():
    with no_runtime_typecheck():
        with pytest.raises(ValueError, match=INT_REWARD):
            PPO(_int_reward_env())
        with pytest.raises(ValueError, match=r"TimeLimit\(MyEnv\)\.step: reward must be"):
            DQN(TimeLimit(_int_reward_env(), 10))
        with pytest.raises(ValueError, match=INT_REWARD):
            SAC(_int_reward_env(discrete=False))


class Reinforce(AbstractAgent):
    """A user's own agent (no converter on `env`): the base class checks the env."""

    env: AbstractEnv

    def init(self, key):
        return jnp.zeros(())

    def train_iteration(self, state, clock):
        return state, {}

    def act(self, state, obs, key=None, deterministic=False) -> Array:
        return jnp.zeros(obs.shape[:-1], jnp.int32)

    @property
    def steps_per_iteration(self) -> int:
        return 1


def test_a_users_own_agent_checks_its_env():
    with no_runtime_typecheck(), pytest.raises(ValueError, match=INT_REWARD):
        Reinforce(_int_reward_env())
    assert isinstance(Reinforce(MyEnv()), Reinforce)


TRACES = []


class Counted(AbstractEnv):
    """A correct env with hashable static fields that counts how often its `step` is traced."""

    size: int = eqx.field(static=True, default=3)

    def reset(self, key):
        return jnp.zeros((), jnp.int32), first_timestep(jnp.zeros(self.size))

    def step(self, key, state, action):
        TRACES.append(self.size)
        return state + 1, first_timestep(jnp.zeros(self.size))

    @property
    def observation_space(self):
        return Box(-1.0, 1.0, (self.size,))

    @property
    def action_space(self):
        return Discrete(2)


def test_an_env_is_traced_once_for_many_agents():
    env = Counted(size=5)
    agents = [PPO(env, learning_rate=lr) for lr in (1e-4, 3e-4, 1e-3)]
    assert TRACES.count(5) == 1
    eqxrl.stack(agents)
    # An equal env (same structure, static fields and leaf types) is not traced again...
    DQN(Counted(size=5))
    assert TRACES.count(5) == 1
    # ...a different one is.
    check_env(Counted(size=6))
    assert TRACES.count(6) == 1


@pytest.mark.parametrize("name", ["CartPole-v1", "Pendulum-v1", "Breakout-MinAtar", "Point2D-v0"])
def test_built_in_envs_pass_with_strong_float32_rewards(name):
    env = make(name)
    assert check_env(env) is env
    # Stricter than the check: the adapters cast, so no reward is weakly typed.
    state, _ = env.reset(jax.random.key(0))
    ts = jax.eval_shape(lambda k, s: env.step(k, s, env.action_space.sample(k))[1], jax.random.key(0), state)
    assert ts.reward.dtype == jnp.float32 and not ts.reward.weak_type


def test_an_error_of_the_envs_own_code_says_it_came_from_the_check():
    class Broken(MyEnv):
        def step(self, key, state, action):
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom") as info:
        check_env(TimeLimit(Broken(), 5))
    note = "(raised while eqxrl.envs.check_env traced TimeLimit(Broken).step abstractly, as make and every agent do)"
    assert note in info.value.__notes__


# ----------------------------------------------------------------------------- structured spaces


class GridEnv(AbstractEnv):
    """Dict observations ({"grid": (3, 3, 2) floats in [0, 1], "step": the step count}) and a
    MultiDiscrete action (its sum is the reward); `grid_shape` or `step_dtype` make an obs
    leaf wrong, `action_space_` picks the action space."""

    grid_shape: tuple = eqx.field(static=True, default=(3, 3, 2))
    step_dtype: object = eqx.field(static=True, default=jnp.int32)
    action_space_: object = eqx.field(static=True, default=MultiDiscrete((3, 2)))

    def _obs(self, key, t):
        return {"grid": jax.random.uniform(key, self.grid_shape), "step": t.astype(self.step_dtype)}

    def reset(self, key):
        t = jnp.zeros((), jnp.int32)
        return t, first_timestep(self._obs(key, t))

    def step(self, key, state, action):
        t = state + 1
        reward = jnp.sum(action).astype(jnp.float32)
        return t, TimeStep(self._obs(key, t), reward, t >= 9, jnp.zeros((), bool), {})

    @property
    def observation_space(self):
        return Dict({"grid": Box(0.0, 1.0, (3, 3, 2)), "step": Discrete(10)})

    @property
    def action_space(self):
        return self.action_space_

    @property
    def max_episode_steps(self):
        return 9


@pytest.mark.slow  # (over 2 s in the fast tier: tests/tiers.py)
def test_dict_observations_and_multi_discrete_actions_pass():
    env = GridEnv()
    assert check_env(env) is env
    assert check_env(VectorEnv(GridEnv(action_space_=MultiBinary(3)), 2))
    check_env_steps(env, num_steps=20, num_envs=2, ends_at_limit=True)
    # The wrappers that do not read the observation take dict observations too.
    wrapped = VectorEnv(EpisodeStatistics(AutoReset(TimeLimit(env, 5))), 2)
    assert check_env(wrapped) is wrapped
    state, ts = wrapped.reset(jax.random.key(0))
    state, ts = wrapped.step(jax.random.key(1), state, jnp.ones((2, 2), jnp.int32))
    assert ts.obs["grid"].shape == (2, 3, 3, 2) and ts.info["final_obs"]["step"].shape == (2,)


def test_a_wrong_observation_leaf_is_named():
    match = (r"^GridEnv\.reset: obs\['grid'\] must be a float or integer array of shape \(3, 3, 2\) "
             r"\(the observation_space's\), got float32 with shape \(3, 3\)$")  # fmt: skip
    with pytest.raises(ValueError, match=match):
        check_env(GridEnv(grid_shape=(3, 3)))
    with pytest.raises(ValueError, match=r"^VectorEnv\(GridEnv\)\.reset: obs\['grid'\] must be a float or integer array "
                       r"of shape \(2, 3, 3, 2\) .*got float32 with shape \(2, 3, 3\)$"):  # fmt: skip
        check_env(VectorEnv(GridEnv(grid_shape=(3, 3)), 2))
    with pytest.raises(ValueError, match=r"^GridEnv\.reset: obs\['step'\] must be a float or integer array of shape \(\) "
                       r"\(the observation_space's\), got bool with shape \(\)$"):  # fmt: skip
        check_env(GridEnv(step_dtype=jnp.bool_))


def test_observations_of_another_structure_are_named():
    class Missing(GridEnv):
        def _obs(self, key, t):
            return {"grid": super()._obs(key, t)["grid"]}

    class Flat(GridEnv):
        def _obs(self, key, t):
            return jnp.zeros(3)

    with pytest.raises(ValueError, match=r"^Missing\.reset: obs must be a pytree of structure \{'grid': \*, 'step': \*\} "
                       r"\(the observation_space's\), got \{'grid': \*\}$"):  # fmt: skip
        check_env(Missing())
    with pytest.raises(ValueError, match=r"^Flat\.reset: obs must be a pytree of structure \{'grid': \*, 'step': \*\} "
                       r"\(the observation_space's\), got float32 with shape \(3,\)$"):  # fmt: skip
        check_env(Flat())


@pytest.mark.parametrize("space", [MultiDiscrete((3, 2)), MultiBinary((2, 2))], ids=repr)
def test_multi_actions_reach_step_with_the_action_space_shape(space):
    seen = []

    class Seen(GridEnv):
        def step(self, key, state, action):
            seen.append((action.shape, action.dtype))
            return super().step(key, state, action)

    check_env(Seen(action_space_=space))
    assert seen == [(space.shape, jnp.int32)]


def test_check_env_steps_names_a_dict_observation_outside_its_space():
    class Escaping(GridEnv):
        def _obs(self, key, t):
            return {**super()._obs(key, t), "step": t + 10}

    with pytest.raises(ContractError, match=r"observations and rewards respect the spaces and dtypes: Escaping: a first "
                       r"observation from reset is outside Dict\(\{'grid': Box"):  # fmt: skip
        check_env_steps(Escaping(), num_steps=3, num_envs=1)


def test_built_in_agents_take_dict_observations_and_refuse_multi_actions():
    for agent in (PPO, DQN):  # (tests/agents/test_observations.py trains them on Dict observations)
        built = agent(GridEnv(action_space_=Discrete(3)))
        assert built.obs_shape == (("grid", (3, 3, 2)), ("step", ())) and built.obs_size == 19
    assert isinstance(Reinforce(GridEnv()), Reinforce)

    class MultiActions(MyEnv):
        action_space_: object = eqx.field(static=True, default=None)

        @property
        def action_space(self):
            return self.action_space_

    assert PPO(MultiActions(action_space_=MultiDiscrete((3, 2)))).discrete  # a factorised categorical policy
    with pytest.raises(ValueError, match=r"^PPO needs a Discrete, MultiDiscrete or Box action space, got MultiBinary\(n=2\)$"):
        PPO(MultiActions(action_space_=MultiBinary(2)))
    for space in (MultiDiscrete((3, 2)), MultiBinary(2)):
        with pytest.raises(ValueError, match=rf"^DQN needs a Discrete action space, got {re.escape(repr(space))} from env "
                           r"'MultiActions'; use DDPG, TD3 or SAC for continuous actions$"):  # fmt: skip
            DQN(MultiActions(action_space_=space))
