"""The multi-agent protocol (MultiAgentSpace, agent_rewards, ...) and the JaxMARL adapter
against JaxMARL's own step."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from typecheck import no_runtime_typecheck

import eqxrl
from eqxrl.agents import IPPO
from eqxrl.core import foreign_promotion
from eqxrl.envs import (
    ACTION_MASK,
    AbstractWrapper,
    Box,
    Dict,
    Discrete,
    JaxMARLEnv,
    MultiAgentSpace,
    MultiBinary,
    MultiDiscrete,
    TimeStep,
    Tuple,
    agent_names,
    agent_rewards,
    check_env,
    flatten_space,
    is_multi_agent,
    make,
)

SPREAD = "jaxmarl/MPE_simple_spread_v3"


# ----------------------------------------------------------------------- MultiAgentSpace
def test_multi_agent_space_shape_sample_contains():
    space = MultiAgentSpace(Discrete(5), 3)
    assert space.shape == (3,) and space.dtype == jnp.int32
    x = space.sample(jax.random.key(0))
    assert x.shape == (3,) and bool(space.contains(x))
    assert not bool(space.contains(jnp.array([0, 1, 5])))
    assert not bool(space.contains(jnp.array([0, 1])))
    box = MultiAgentSpace(Box(-1.0, 1.0, (2,)), 4)
    assert box.shape == (4, 2) and box.sample(jax.random.key(1)).shape == (4, 2)


@pytest.mark.parametrize(
    "space, n, match",
    [
        ("x", 2, r"MultiAgentSpace\(space\) must be an eqxrl space"),
        (Discrete(2), 0, r"MultiAgentSpace\(num_agents\) must be a positive int, got 0"),
        (MultiAgentSpace(Discrete(2), 2), 2, r"must be one agent's space"),
        (Dict({"a": Discrete(2)}), 0, r"MultiAgentSpace\(num_agents\) must be a positive int, got 0"),
    ],
)
def test_multi_agent_space_rejects_bad_arguments(space, n, match):
    with no_runtime_typecheck(), pytest.raises(ValueError, match=match):
        MultiAgentSpace(space, n)


@pytest.mark.slow  # (over 2 s in the fast tier: tests/tiers.py)
def test_multi_agent_space_of_dicts_stacks_every_entry():
    agent = Dict({"obs": Box(-1.0, 1.0, (5,)), ACTION_MASK: MultiBinary(3), "more": Dict({"k": Discrete(4)})})
    space = MultiAgentSpace(agent, 2)
    assert space.shape == {ACTION_MASK: (2, 3), "more": {"k": (2,)}, "obs": (2, 5)}
    leaves, treedef = flatten_space(space)
    assert leaves == [MultiAgentSpace(MultiBinary(3), 2), MultiAgentSpace(Discrete(4), 2), MultiAgentSpace(Box(-1.0, 1.0, (5,)), 2)]
    x = space.sample(jax.random.key(0))
    assert jax.tree.structure(x) == treedef and x["obs"].shape == (2, 5) and x["more"]["k"].shape == (2,)
    assert bool(space.contains(x))
    assert not bool(space.contains({**x, "obs": x["obs"][:1]}))  # one agent's row missing
    assert not bool(space.contains({**x, "obs": x["obs"] * 3.0}))  # outside the Box
    assert not bool(space.contains({"obs": x["obs"]})) and not bool(space.contains(x["obs"]))


def test_multi_agent_space_of_tuples_stacks_every_entry():
    space = MultiAgentSpace(Tuple((Box(-1.0, 1.0, (5,)), MultiDiscrete((2, 3)))), 4)
    assert space.shape == ((4, 5), (4, 2))
    x = space.sample(jax.random.key(0))
    assert isinstance(x, tuple) and bool(space.contains(x))
    assert not bool(space.contains((x[0],))) and not bool(space.contains((x[0], x[1][:2])))


def test_agent_rewards_split_a_wrappers_change_equally():
    ts = TimeStep(jnp.zeros((2, 1)), jnp.float32(4.0), jnp.array(False), jnp.array(False), {"agent_rewards": jnp.array([1.0, 1.0])})
    np.testing.assert_allclose(agent_rewards(ts), [2.0, 2.0])
    unchanged = eqx.tree_at(lambda t: t.reward, ts, jnp.float32(2.0))
    np.testing.assert_array_equal(agent_rewards(unchanged), [1.0, 1.0])
    with pytest.raises(ValueError, match=r"agent_rewards\(ts\): a multi-agent timestep has info\['agent_rewards'\]"):
        agent_rewards(eqx.tree_at(lambda t: t.info, ts, {}))


class _Scale(AbstractWrapper):
    env: object

    def step(self, key, state, action):
        state, ts = self.env.step(key, state, action)
        return state, eqx.tree_at(lambda t: t.reward, ts, ts.reward * 2.0)


def test_a_wrapped_multi_agent_env_is_still_one():
    env = make(SPREAD)
    wrapped = _Scale(env)
    assert is_multi_agent(env) and is_multi_agent(wrapped)
    assert agent_names(wrapped) == ("agent_0", "agent_1", "agent_2")
    assert not is_multi_agent(make("CartPole-v1")) and not is_multi_agent("CartPole-v1")
    with pytest.raises(ValueError, match=r"agent_names\(env\) needs a multi-agent env"):
        agent_names(make("CartPole-v1"))


# ----------------------------------------------------------------------- the adapter
def _jaxmarl_rollout(name: str, steps: int):
    """The adapter's and JaxMARL's own `step_env` from the same keys and actions."""
    env = make("jaxmarl/" + name)
    raw = env.jaxmarl_env
    key = jax.random.key(3)
    # (closures: the env is a module whose Box bounds are NumPy arrays, not a hashable jit argument)
    state, ts = jax.jit(lambda k: env.reset(k))(key)
    with foreign_promotion():  # JaxMARL's own code mixes dtypes, as the adapter allows it to
        raw_obs, raw_state = jax.jit(raw.reset)(key)
    step, raw_step = jax.jit(lambda k, s, a: env.step(k, s, a)), jax.jit(raw.step_env)
    for i, a in enumerate(env.agents):
        np.testing.assert_array_equal(ts.obs[i, : raw_obs[a].shape[0]], raw_obs[a])
    out = []
    for t in range(steps):
        k = jax.random.fold_in(key, t)
        action = env.action_space.sample(jax.random.fold_in(k, 1))
        state, ts = step(k, state, action)
        with foreign_promotion():
            raw_obs, raw_state, rewards, dones, _ = raw_step(k, raw_state, {a: action[i] for i, a in enumerate(env.agents)})
        out.append((env, ts, raw_obs, rewards, dones))
    return out


@pytest.mark.parametrize("name", ["MPE_simple_spread_v3", "MPE_simple_tag_v3", "MPE_simple_facmac_v1"])
@pytest.mark.slow
def test_adapter_matches_jaxmarls_own_step(name):
    steps = _jaxmarl_rollout(name, 26)  # one whole episode (26 steps, the last truncated)
    for t, (env, ts, raw_obs, rewards, dones) in enumerate(steps):
        want = np.array([rewards[a] for a in env.agents], np.float32)
        np.testing.assert_array_equal(ts.info["agent_rewards"], want)
        np.testing.assert_allclose(ts.reward, want.sum(), rtol=1e-6)
        for i, a in enumerate(env.agents):
            size = raw_obs[a].shape[0]
            np.testing.assert_array_equal(ts.obs[i, :size], raw_obs[a])
            np.testing.assert_array_equal(ts.obs[i, size:], 0.0)  # padded to the largest
        # MPE ends episodes only by the time limit: a truncation, never a termination.
        assert bool(ts.truncated) == bool(dones["__all__"]) and not bool(ts.terminated)
        assert bool(ts.truncated) == (t + 1 == env.max_episode_steps)


def test_make_builds_mpe_scenarios_with_their_spaces():
    env = make(SPREAD)
    assert isinstance(env, JaxMARLEnv) and env.name == SPREAD
    assert env.agents == ("agent_0", "agent_1", "agent_2") and env.num_agents == 3
    assert env.observation_space.shape == (3, 18) and env.action_space == MultiAgentSpace(Discrete(5), 3)
    assert env.max_episode_steps == 26  # JaxMARL's max_steps=25 plus the step that sees it
    tag = make("jaxmarl/MPE_simple_tag_v3")
    assert tag.observation_space.shape == (4, 16)  # adversaries' 16 and the good agent's 14, padded
    # 2 agents, still JaxMARL's default 3 landmarks: 4 own + 6 landmark + 2 other + 2 communication
    assert make("jaxmarl/MPE_simple_spread_v3", num_agents=2).observation_space.shape == (2, 14)
    assert SPREAD in eqxrl.envs.registered()


def test_jaxmarl_env_rejects_what_it_cannot_represent():
    with pytest.raises(ValueError, match=r"every agent of 'MPE_simple_speaker_listener_v4' must have the same action space"):
        make("jaxmarl/MPE_simple_speaker_listener_v4")
    with pytest.raises(ValueError, match=r"JaxMARLEnv\(truncation\) must be given for 'switch_riddle'"):
        make("jaxmarl/switch_riddle")
    with pytest.raises(ValueError, match=r"JaxMARLEnv\(truncation\) must be True or False, got 1"):
        JaxMARLEnv("MPE_simple_spread_v3", truncation=1)
    with pytest.raises(ValueError, match=r"JaxMARLEnv\(env\): unknown JaxMARL id 'MPE_nope'"):
        JaxMARLEnv("MPE_nope")
    with pytest.raises(ValueError, match=r"JaxMARLEnv\(env\) must be a JaxMARL id or MultiAgentEnv, got 3"):
        JaxMARLEnv(3)
    with pytest.raises(ValueError, match=r"keyword arguments \['num_agents'\] need an env id"):
        JaxMARLEnv(make(SPREAD).jaxmarl_env, num_agents=2)
    with pytest.raises(ValueError, match=r"unknown environment 'jaxmarl/MPE_nope'"):
        make("jaxmarl/MPE_nope")


def test_termination_when_the_env_says_its_dones_are_terminal():
    raw = make(SPREAD).jaxmarl_env
    env = JaxMARLEnv(raw, truncation=False)
    assert env.max_episode_steps is None and env.name == "jaxmarl/SimpleSpreadMPE"
    state, _ = env.reset(jax.random.key(0))
    step = jax.jit(lambda k, s, a: env.step(k, s, a))
    for t in range(26):
        state, ts = step(jax.random.key(t), state, jnp.zeros((3,), jnp.int32))
    assert bool(ts.terminated) and not bool(ts.truncated)


def test_the_same_env_compiles_once():
    assert make(SPREAD) == make(SPREAD)
    assert make(SPREAD) != make(SPREAD, num_agents=2)


# ----------------------------------------------------------------------- action masks
def _smax(**kwargs):
    from jaxmarl.environments.smax import map_name_to_scenario

    return make("jaxmarl/HeuristicEnemySMAX", truncation=False, scenario=map_name_to_scenario("3m"), **kwargs)


def test_envs_with_legal_actions_observe_them_as_action_masks():
    env = _smax()
    assert env.action_masks and env.agents == ("ally_0", "ally_1", "ally_2")
    assert env.observation_space == MultiAgentSpace(Dict({"obs": Box(-np.inf, np.inf, (75,)), ACTION_MASK: MultiBinary(8)}), 3)
    plain = _smax(action_masks=False)
    assert not plain.action_masks and plain.observation_space == MultiAgentSpace(Box(-np.inf, np.inf, (75,)), 3)
    assert not make(SPREAD).action_masks  # no get_avail_actions: exactly as before
    assert make(SPREAD).observation_space == MultiAgentSpace(Box(-np.inf, np.inf, (18,)), 3)


def test_action_masks_are_refused_where_jaxmarl_has_no_legal_actions():
    with no_runtime_typecheck():
        with pytest.raises(ValueError, match=r"^JaxMARLEnv\(action_masks=True\) needs an env with get_avail_actions \(or get_legal_moves\) and Discrete actions, 'MPE_simple_spread_v3' has neither$"):
            JaxMARLEnv("MPE_simple_spread_v3", action_masks=True)
        with pytest.raises(ValueError, match=r"^JaxMARLEnv\(action_masks\) must be None, True or False, got 1$"):
            JaxMARLEnv("MPE_simple_spread_v3", action_masks=1)


def _hanabi(**kwargs):
    return make("jaxmarl/hanabi", truncation=False, **kwargs)


def test_hanabi_observes_its_legal_moves_as_action_masks():
    env = _hanabi()
    assert env.legal_actions == "get_legal_moves" and env.agents == ("agent_0", "agent_1")
    assert env.observation_space == MultiAgentSpace(Dict({"obs": Box(-np.inf, np.inf, (658,)), ACTION_MASK: MultiBinary(21)}), 2)
    assert _hanabi(action_masks=False).observation_space == MultiAgentSpace(Box(-np.inf, np.inf, (658,)), 2)


@pytest.mark.slow
@pytest.mark.parametrize("build, method", [(_smax, "get_avail_actions"), (_hanabi, "get_legal_moves")], ids=["SMAX", "hanabi"])
def test_action_masks_are_jaxmarls_own_legal_actions(build, method):
    env = build()
    raw = env.jaxmarl_env
    key = jax.random.key(5)
    state, ts = jax.jit(lambda k: env.reset(k))(key)
    step = jax.jit(lambda k, s, a: env.step(k, s, a))
    with foreign_promotion():
        raw_obs, raw_state = jax.jit(raw.reset)(key)
        raw_step, avail = jax.jit(raw.step_env), jax.jit(getattr(raw, method))
    seen = set()
    for t in range(12):
        with foreign_promotion():
            want = avail(raw_state)
        for i, a in enumerate(env.agents):
            np.testing.assert_array_equal(ts.obs[ACTION_MASK][i], want[a])
            np.testing.assert_array_equal(ts.obs["obs"][i], raw_obs[a])
            seen.add(tuple(np.asarray(want[a]).tolist()))
        assert ts.obs[ACTION_MASK].dtype == jnp.int32 and bool(env.observation_space.contains(ts.obs))
        k = jax.random.fold_in(key, t)
        # A legal action of every agent: the last legal one (SMAX: attacks once the enemies are in
        # range), or a random one (Hanabi: a game that goes on).
        mask = ts.obs[ACTION_MASK]
        if method == "get_legal_moves":
            mask = mask.astype(jnp.float32) * jax.random.uniform(k, mask.shape)
            action = jnp.argmax(mask, axis=-1).astype(jnp.int32)
        else:
            action = jnp.argmax(jnp.cumsum(mask, axis=-1), axis=-1).astype(jnp.int32)
        state, ts = step(k, state, action)
        with foreign_promotion():
            raw_obs, raw_state, _, _, _ = raw_step(k, raw_state, {a: action[i] for i, a in enumerate(env.agents)})
    assert len(seen) > 2  # the masks change as the game goes


@pytest.mark.slow  # (over 2 s in the fast tier: tests/tiers.py)
def test_switch_riddle_observes_a_multi_discrete_space_per_agent():
    env = make("jaxmarl/switch_riddle", truncation=False)
    assert env.observation_space == MultiAgentSpace(MultiDiscrete((2, 2)), 3) and env.action_space.space == Discrete(3)
    check_env(env)
    raw = env.jaxmarl_env
    state, ts = env.reset(jax.random.key(2))
    with foreign_promotion():
        raw_obs, _ = raw.reset(jax.random.key(2))
    assert ts.obs.dtype == jnp.int32 and bool(env.observation_space.contains(ts.obs))
    np.testing.assert_array_equal(ts.obs, np.stack([raw_obs[a] for a in env.agents]))
    # IPPO takes it (with its agents' one-hot ids after their entries: test_ippo's seat_space test).
    agent = IPPO(env, num_envs=6, rollout_length=4, num_minibatches=1, num_epochs=1, hidden_sizes=(8,))
    _, metrics = eqxrl.train(agent, jax.random.key(0), total_steps=48, progress=False)
    assert all(np.all(np.isfinite(metrics[name])) for name in ("policy_loss", "value_loss"))
