"""Dict observations and action masks through the agents: `ObservationLayout`, `MultiInputTorso`,
PPO's and DQN's masks (the `MaskedActions` probe), and the agents that refuse masks."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as hs

import eqxrl
import eqxrl.testing
from eqxrl.agents import DADS, DQN, MPO, PPO, SAC, TD3
from eqxrl.components import CNNTorso, GRUTorso, MLPTorso, MultiInputTorso, ReplayBuffer
from eqxrl.envs import (
    ACTION_MASK,
    AbstractWrapper,
    Box,
    Dict,
    Discrete,
    MultiBinary,
    ObservationLayout,
    Tuple,
    innermost_state,
    make,
    sample_batch,
)
from eqxrl.testing import strategies as st
from eqxrl.testing.probes import MaskedActions
from typecheck import no_runtime_typecheck


class DictCartPole(AbstractWrapper):
    """CartPole observing `{"a": (x, x_dot), "b": (theta, theta_dot)}`: stored as the flat
    observation in its original order (entries concatenated in sorted key order)."""

    env: eqx.Module

    def _split(self, ts):
        return eqx.tree_at(lambda t: t.obs, ts, {"a": ts.obs[:2], "b": ts.obs[2:]})

    @property
    def observation_space(self):
        box = self.env.observation_space
        return Dict({"a": Box(box.low[:2], box.high[:2], (2,)), "b": Box(box.low[2:], box.high[2:], (2,))})

    def reset(self, key):
        state, ts = self.env.reset(key)
        return state, self._split(ts)

    def step(self, key, state, action):
        state, ts = self.env.step(key, state, action)
        ts = self._split(ts)
        if "final_obs" in ts.info:
            ts.info["final_obs"] = {"a": ts.info["final_obs"][:2], "b": ts.info["final_obs"][2:]}
        return state, ts


class TupleCartPole(DictCartPole):
    """CartPole observing `((x, x_dot), {"theta": (theta, theta_dot)})`: stored as the flat
    observation in its original order (a Tuple's entries in position order)."""

    def _pack(self, obs):
        return (obs[:2], {"theta": obs[2:]})

    def _split(self, ts):
        return eqx.tree_at(lambda t: t.obs, ts, self._pack(ts.obs))

    @property
    def observation_space(self):
        box = self.env.observation_space
        return Tuple((Box(box.low[:2], box.high[:2], (2,)), Dict({"theta": Box(box.low[2:], box.high[2:], (2,))})))

    def step(self, key, state, action):
        state, ts = self.env.step(key, state, action)
        info = dict(ts.info)
        if "final_obs" in info:
            info["final_obs"] = self._pack(info["final_obs"])
        return state, eqx.tree_at(lambda t: (t.obs, t.info), ts, (self._pack(ts.obs), info))


class DictPendulum(DictCartPole):
    """Pendulum observing `{"a": (cos, sin), "b": (theta_dot,)}`."""

    @property
    def observation_space(self):
        box = self.env.observation_space
        return Dict({"a": Box(box.low[:2], box.high[:2], (2,)), "b": Box(box.low[2:], box.high[2:], (1,))})


class MaskedPendulum(AbstractWrapper):
    """Pendulum with an (all-legal) action mask entry: masks on Box actions, which no agent takes."""

    env: eqx.Module

    @property
    def observation_space(self):
        return Dict({"x": self.env.observation_space, ACTION_MASK: MultiBinary(1)})

    def _masked(self, ts):
        return eqx.tree_at(lambda t: t.obs, ts, {"x": ts.obs, ACTION_MASK: jnp.ones((1,), jnp.int32)})

    def reset(self, key):
        state, ts = self.env.reset(key)
        return state, self._masked(ts)

    def step(self, key, state, action):
        state, ts = self.env.step(key, state, action)
        return state, self._masked(ts)


# ----------------------------------------------------------------- ObservationLayout
def test_layout_of_one_array_is_the_flat_observation():
    layout = ObservationLayout.of(Box(-1.0, 1.0, (2, 3)), Discrete(2))
    assert (layout.size, layout.stored_size, layout.torso_shape) == (6, 6, (2, 3))
    x = layout.flatten(jnp.arange(12.0).reshape(2, 2, 3), "T")
    assert x.shape == (2, 6) and layout.split(x)[1] is None


def test_layout_of_a_dict_concatenates_its_entries_in_key_order_and_puts_the_mask_last():
    space = Dict({"z": Box(0.0, 1.0, (2,)), "a": Dict({"q": Box(0.0, 1.0, (1, 2))}), ACTION_MASK: MultiBinary(3)})
    layout = ObservationLayout.of(space, Discrete(3))
    assert layout.torso_shape == (("a.q", (1, 2)), ("z", (2,))) and (layout.size, layout.mask_size) == (4, 3)
    obs = {"z": jnp.array([[5.0, 6.0]]), "a": {"q": jnp.array([[[1.0, 2.0]]])}, ACTION_MASK: jnp.array([[0, 1, 0]])}
    x = layout.flatten(obs, "T")
    np.testing.assert_array_equal(x, [[1.0, 2.0, 5.0, 6.0, 0.0, 1.0, 0.0]])
    features, mask = layout.split(x)
    np.testing.assert_array_equal(features, [[1.0, 2.0, 5.0, 6.0]])
    np.testing.assert_array_equal(mask, [[False, True, False]])


def test_layout_of_a_tuple_concatenates_its_entries_in_position_order():
    space = Tuple((Box(0.0, 1.0, (2,)), Dict({"b": Box(0.0, 1.0, (1,)), "a": Discrete(4)})))
    layout = ObservationLayout.of(space, Discrete(3))
    assert layout.torso_shape == (("0", (2,)), ("1.a", ()), ("1.b", (1,))) and (layout.size, layout.mask_size) == (4, 0)
    x = layout.flatten((jnp.array([[5.0, 6.0]]), {"a": jnp.array([3]), "b": jnp.array([[7.0]])}), "T")
    np.testing.assert_array_equal(x, [[5.0, 6.0, 3.0, 7.0]])
    with no_runtime_typecheck(), pytest.raises(ValueError, match=r"^T: obs must be a dict or tuple with the entries \['0', '1.a', '1.b'\], got a tuple$"):
        layout.flatten((jnp.zeros(2),), "T")


def test_normalisation_leaves_the_mask_alone_and_an_empty_mask_counts_as_all_legal():
    layout = ObservationLayout.of(MaskedActions().observation_space, Discrete(4))
    stats = eqxrl.components.RunningMeanStd((4,)).update(jnp.full((3, 4), 7.0))
    x = layout.flatten({ACTION_MASK: jnp.zeros((4,), jnp.int32), "legal": jnp.full((4,), 7.0)}, "T")
    y = layout.normalize(stats, x)
    np.testing.assert_array_equal(y[4:], 0.0)
    assert np.all(np.abs(y[:4]) < 1e-3)
    assert bool(jnp.all(layout.split(y)[1]))


@no_runtime_typecheck()
@pytest.mark.parametrize(
    "space, actions, message",
    [
        (Dict({ACTION_MASK: MultiBinary(3), "x": Box(0.0, 1.0, (1,))}), Discrete(4), r"'action_mask' entry must be MultiBinary\(4\)"),
        (Dict({ACTION_MASK: Box(0.0, 1.0, (4,)), "x": Box(0.0, 1.0, (1,))}), Discrete(4), r"must be MultiBinary\(4\)"),
        (Dict({ACTION_MASK: MultiBinary(2), "x": Box(0.0, 1.0, (1,))}), Box(-1.0, 1.0, (2,)), r"action masks need Discrete or MultiDiscrete actions"),
        (Dict({ACTION_MASK: MultiBinary(2)}), Discrete(2), r"has an action mask and nothing else to observe"),
    ],
)
def test_bad_mask_spaces_are_named(space, actions, message):
    with pytest.raises(ValueError, match=message):
        ObservationLayout.of(space, actions, "T")


@no_runtime_typecheck()
def test_observations_that_do_not_match_the_layout_are_named():
    layout = ObservationLayout.of(Dict({"a": Box(0.0, 1.0, (2,)), "b": Box(0.0, 1.0, (3,))}))
    with pytest.raises(ValueError, match=r"T: obs\['b'\] must have shape \(5, 3\), got \(5, 2\)"):
        layout.flatten({"a": jnp.zeros((5, 2)), "b": jnp.zeros((5, 2))}, "T")
    with pytest.raises(ValueError, match=r"T: obs must be a dict or tuple with the entries \['a', 'b'\], got \['a'\]"):
        layout.flatten({"a": jnp.zeros((2,))}, "T")


@pytest.mark.slow
@settings(max_examples=8, deadline=None)
@given(space=hs.one_of(st.dicts(), st.tuples()), batch=st.batch_shapes(max_dims=2, max_side=3), seed=hs.integers(0, 2**16))
def test_any_dict_or_tuple_observation_flattens_and_a_buffer_stores_and_samples_it(space, batch, seed):
    """Property: every random `Dict` (`Tuple`) space's batch flattens to `(*batch, size)`, and a
    replay buffer stores the raw observations and samples them back, leaf by leaf."""
    layout = ObservationLayout.of(space)
    obs = sample_batch(space, jax.random.key(seed), batch)
    assert layout.flatten(obs, "T").shape == batch + (layout.size,)
    one = sample_batch(space, jax.random.key(seed), (3,))
    buffer = ReplayBuffer(8)
    state = buffer.add(buffer.init(jax.tree.map(lambda x: x[0], one)), one)
    drawn = buffer.sample(state, jax.random.key(1), 5).data
    assert jax.tree.structure(drawn) == jax.tree.structure(one)
    for leaf, stored in zip(jax.tree.leaves(drawn), jax.tree.leaves(one)):
        assert leaf.shape == (5,) + stored.shape[1:] and leaf.dtype == stored.dtype
        assert all(any(np.array_equal(row, s) for s in np.asarray(stored)) for row in np.asarray(leaf))


# ----------------------------------------------------------------- MultiInputTorso
@pytest.mark.slow  # (over 2 s in the fast tier: tests/tiers.py)
def test_multi_input_torso_gives_each_entry_its_own_torso():
    entries = (("grid", (5, 5, 3)), ("step", (1,)))
    encoder = MultiInputTorso({"grid": CNNTorso.minatar()}, hidden_sizes=(32,)).make(entries, key=jax.random.key(0))
    assert encoder.features == 32 and encoder(jnp.zeros((2, 3, 76))).shape == (2, 3, 32)
    plain = MultiInputTorso().make(entries, key=jax.random.key(0))
    x = jax.random.normal(jax.random.key(1), (4, 76))
    np.testing.assert_array_equal(plain(x), x)  # every entry as it is, concatenated


@no_runtime_typecheck()
def test_multi_input_torso_bad_inputs_are_named():
    entries = (("grid", (5, 5, 3)),)
    with pytest.raises(ValueError, match=r"MultiInputTorso\(torsos\) names entries \['gird'\] the observation does not have"):
        MultiInputTorso({"gird": MLPTorso()}).make(entries, key=jax.random.key(0))
    with pytest.raises(ValueError, match=r"MultiInputTorso needs a Dict observation"):
        MultiInputTorso().make((4,), key=jax.random.key(0))
    with pytest.raises(ValueError, match=r"MultiInputTorso\(torsos\) must be a dict from entry names to torsos"):
        MultiInputTorso({"grid": 3})
    with pytest.raises(ValueError, match=r"CNNTorso needs image observations .* got a Dict observation with entries \['grid'\]"):
        CNNTorso().make(entries, key=jax.random.key(0))


# ----------------------------------------------------------------- agents
@pytest.mark.slow
@pytest.mark.bitwise
# (MPO's off-policy path is DQN's: its run is in the exhaustive tier, 15 s.)
@pytest.mark.parametrize(
    "agent_cls, wrapper",
    [(PPO, DictCartPole), (DQN, DictCartPole), (PPO, TupleCartPole), pytest.param(MPO, DictCartPole, marks=pytest.mark.exhaustive)],
)
def test_a_dict_or_tuple_observation_trains_exactly_as_its_flat_vector(agent_cls, wrapper):
    """CartPole split into a Dict `{"a", "b"}` (a Tuple `((x, x_dot), {"theta": ...})`) is
    stored as the flat observation: the same run (bit for bit under the suite's settings for
    comparing differently structured programs)."""
    kwargs = dict(num_envs=4, rollout_length=16) if agent_cls is PPO else dict(learning_starts=64, batch_size=32)
    if agent_cls is MPO:  # (its discrete mode; smaller networks: the defaults' take a minute here)
        kwargs.update(hidden_sizes=(32,), target_update_period=10)
    flat = agent_cls(make("CartPole-v1"), **kwargs)
    split = agent_cls(wrapper(make("CartPole-v1")), **kwargs)
    entries = (("a", (2,)), ("b", (2,))) if wrapper is DictCartPole else (("0", (2,)), ("1.theta", (2,)))
    assert split.obs_shape == entries
    ours, our_metrics = eqxrl.train(split, jax.random.key(3), total_steps=640, progress=False)
    theirs, their_metrics = eqxrl.train(flat, jax.random.key(3), total_steps=640, progress=False)
    nets = (lambda s: (s.actor, s.critic)) if agent_cls is PPO else (lambda s: s.learner)
    for a, b in zip(jax.tree.leaves(nets(ours)), jax.tree.leaves(nets(theirs))):
        np.testing.assert_array_equal(a, b)
    for name in their_metrics:
        np.testing.assert_array_equal(our_metrics[name], their_metrics[name])
    # Evaluation steps the Dict env and hands `act` its dict observations: the same episodes.
    np.testing.assert_array_equal(
        eqxrl.evaluate(split, ours, jax.random.key(4), num_episodes=3), eqxrl.evaluate(flat, theirs, jax.random.key(4), num_episodes=3)
    )


@pytest.mark.slow
@pytest.mark.bitwise
def test_a_recurrent_ppo_on_a_dict_observation_trains_exactly_as_on_its_flat_vector():
    """The recurrent preset's GRU carries its state over Dict observations as over the flat ones."""
    runs = []
    for env in (DictCartPole(make("CartPole-v1")), make("CartPole-v1")):
        agent = PPO.from_preset("recurrent", env, num_envs=4, rollout_length=16)
        state, metrics = eqxrl.train(agent, jax.random.key(3), total_steps=320, progress=False)
        runs.append((state, metrics, eqxrl.evaluate(agent, state, jax.random.key(4), num_episodes=2)))
    (ours, our_metrics, our_eval), (theirs, their_metrics, their_eval) = runs
    for a, b in zip(jax.tree.leaves(ours.actor), jax.tree.leaves(theirs.actor)):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(our_metrics["loss"], their_metrics["loss"])
    np.testing.assert_array_equal(our_eval, their_eval)


@pytest.mark.slow
def test_an_agent_that_ignores_its_masks_is_caught_by_the_masked_probe(monkeypatch):
    """The seeded bug: PPO acting without its masks (the layout hands back none) takes
    illegal actions on `MaskedActions`, which counts them."""
    monkeypatch.setattr(ObservationLayout, "split", lambda self, x: (x[..., : self.size], None))
    agent = PPO(MaskedActions(), num_envs=8, rollout_length=32)
    state, _ = eqxrl.train(agent, jax.random.key(0), total_steps=2048, progress=False)
    assert int(jnp.sum(innermost_state(state.env_state).illegal)) > 100


@no_runtime_typecheck()
@pytest.mark.parametrize(
    "build, message",
    [
        (lambda env: DADS(env), r"DADS does not take action masks, and env 'MaskedActions' has them"),
        (lambda env: eqxrl.envs.DescriptorWrapper(env, "observation"), r"DescriptorWrapper does not take action masks"),
        (lambda env: eqxrl.envs.SkillWrapper(env, 2), r"SkillWrapper does not take action masks"),
        (lambda env: TD3(env), r"TD3 needs a 1-D Box action space"),
        (
            lambda env: PPO(env, actor_torso=GRUTorso(16), shared_torso=True, num_minibatches=1),
            r"PPO: a recurrent PPO does not take action masks yet",
        ),
    ],
)
def test_agents_that_do_not_honour_masks_refuse_a_masked_env(build, message):
    with pytest.raises(ValueError, match=message):
        build(MaskedActions())


@no_runtime_typecheck()
@pytest.mark.parametrize("agent_cls", [MPO, SAC, TD3])
def test_a_mask_on_box_actions_is_refused_by_agents_that_take_masks_and_those_that_do_not(agent_cls):
    with pytest.raises(ValueError, match=rf"{agent_cls.__name__}: the observation space has an 'action_mask' entry, "
                       r"but action masks need Discrete or MultiDiscrete actions"):  # fmt: skip
        agent_cls(MaskedPendulum(make("Pendulum-v1")))


SMALL = dict(learning_starts=32, batch_size=16, hidden_sizes=(16,))


@pytest.mark.slow
@pytest.mark.parametrize(
    "build",
    [
        pytest.param(lambda: TD3(DictPendulum(make("Pendulum-v1")), learning_starts=32, batch_size=16), marks=pytest.mark.exhaustive),
        pytest.param(lambda: MPO(DictPendulum(make("Pendulum-v1")), num_action_samples=4, **SMALL), marks=pytest.mark.exhaustive),
        lambda: DADS(DictPendulum(make("Pendulum-v1")), descriptor="observation", dynamics_hidden_sizes=(16,), **SMALL),
    ],
    ids=["TD3", "MPO", "DADS"],
)
def test_continuous_agents_take_dict_observations(build):
    agent = build()
    state, metrics = eqxrl.train(agent, jax.random.key(0), total_steps=96, progress=False)
    assert np.isfinite(float(metrics["critic_loss"][-1]))
    obs = {"a": jnp.zeros((5, 2)), "b": jnp.ones((5, 1))}
    if isinstance(agent, DADS):  # (DADS acts on its wrappers' flat [features, descriptor, skill])
        assert agent.descriptor_env.base_obs_size == 3 and agent.descriptor_env.descriptor_size == 3
        assert np.isfinite(float(metrics["dynamics_loss"][-1]))
        obs = jnp.zeros((5, 3 + 3 + agent.num_skills))
    for action in (agent.act(state, obs, jax.random.key(1)), agent.act(state, obs, deterministic=True)):
        assert action.shape == (5, 1) and np.all(np.abs(np.asarray(action)) <= 1.0)


def test_normalize_observation_normalises_a_dict_entry_by_entry_and_leaves_the_mask():
    env = eqxrl.envs.NormalizeObservation(eqxrl.envs.VectorEnv(MaskedActions(), 64))
    state, ts = env.reset(jax.random.key(0))
    for k in jax.random.split(jax.random.key(1), 20):
        state, ts = env.step(k, state, jnp.zeros((64,), jnp.int32))
    assert set(ts.obs) == {ACTION_MASK, "legal"} and ts.obs[ACTION_MASK].dtype == jnp.int32
    assert set(np.unique(np.asarray(ts.obs[ACTION_MASK]))) <= {0, 1}  # the mask as it was
    legal = np.asarray(ts.obs["legal"])
    assert abs(legal.mean()) < 0.3 and 0.5 < legal.std() < 1.5  # the Box entry normalised
    mask_stats, legal_stats = state.stats  # (leaves in sorted key order)
    assert mask_stats is None and legal_stats.mean.shape == (4,)


@pytest.mark.slow  # (over 2 s in the fast tier: tests/tiers.py)
def test_normalize_observation_normalises_a_tuple_entry_by_entry_as_a_dict():
    """The Tuple `((x, x_dot), {"theta": ...})` and the Dict `{"a": (x, x_dot), "b": ...}` of
    CartPole's observation: the same statistics per entry, the same normalised values."""
    runs = []
    for env in (
        eqxrl.envs.NormalizeObservation(eqxrl.envs.VectorEnv(TupleCartPole(make("CartPole-v1")), 16)),
        eqxrl.envs.NormalizeObservation(eqxrl.envs.VectorEnv(DictCartPole(make("CartPole-v1")), 16)),
        eqxrl.envs.VectorEnv(TupleCartPole(make("CartPole-v1")), 16),  # (the raw observations)
    ):
        state, ts = env.reset(jax.random.key(0))
        for k in jax.random.split(jax.random.key(1), 12):
            state, ts = env.step(k, state, jax.random.randint(k, (16,), 0, 2))
        runs.append((ts.obs, getattr(state, "stats", None)))
    (tuple_obs, tuple_stats), (dict_obs, dict_stats), (raw, _) = runs
    assert isinstance(tuple_obs, tuple) and [s.mean.shape for s in tuple_stats] == [(2,), (2,)]
    np.testing.assert_allclose(tuple_obs[0], tuple_stats[0].normalize(raw[0], 10.0), rtol=1e-6)
    np.testing.assert_array_equal(tuple_obs[0], dict_obs["a"])
    np.testing.assert_array_equal(tuple_obs[1]["theta"], dict_obs["b"])
    np.testing.assert_array_equal(tuple_stats[1].mean, dict_stats[1].mean)


@pytest.mark.slow
@pytest.mark.parametrize("agent_cls", [PPO, DQN])
def test_masked_dict_observation_agents_pass_check_agent(agent_cls):
    """The agent contracts of `eqxrl.testing.check_agent` (stacks, chunking, resume, ...) hold on an
    env with Dict observations and action masks too."""
    kwargs = dict(num_envs=4, rollout_length=8) if agent_cls is PPO else dict(learning_starts=16, batch_size=8, buffer_size=64)
    eqxrl.testing.check_agent(agent_cls(MaskedActions(), **kwargs))
