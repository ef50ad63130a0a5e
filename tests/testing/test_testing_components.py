"""`eqxrl.testing`'s component checks (buffers, torsos, heads, loss terms, envs) on every
built-in one, their messages on broken ones, and the strategies (with and without hypothesis)."""

import builtins
import importlib
import sys

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings

import eqxrl
from eqxrl.components import (
    CategoricalHead,
    CNNTorso,
    ContinuousQHead,
    DeterministicHead,
    DiscreteQHead,
    DuelingQHead,
    GaussianHead,
    IdentityTorso,
    KLToReference,
    L2Penalty,
    MLPTorso,
    PrioritizedReplayBuffer,
    ReplayBuffer,
    Sample,
    TanhGaussianHead,
    ValueHead,
)
from eqxrl.envs import AbstractWrapper, TimeLimit, TimeStep
from eqxrl.testing import (
    ContractError,
    check_buffer,
    check_env_steps,
    check_head,
    check_loss_term,
    check_torso,
    probes,
)
from eqxrl.testing import strategies as st
from typecheck import no_runtime_typecheck

KEY = jax.random.key(0)


# ----------------------------------------------------------------------- buffers
@pytest.mark.slow  # (over 2 s in the fast tier: tests/tiers.py)
@pytest.mark.parametrize("buffer", [ReplayBuffer(16), ReplayBuffer(5), PrioritizedReplayBuffer(16, alpha=0.6),
                                    PrioritizedReplayBuffer(7, alpha=1.0, fanout=2)])  # fmt: skip
def test_every_buffer_passes_check_buffer(buffer):
    check_buffer(buffer)


@pytest.mark.parametrize("buffer", [ReplayBuffer(16), PrioritizedReplayBuffer(16, alpha=0.6)], ids=repr)
def test_buffers_pass_check_buffer_with_structured_items(buffer):
    """A Dict observation (nested, with an action mask) and a MultiDiscrete action per item."""
    space = eqxrl.envs.Dict({"grid": eqxrl.envs.Box(0.0, 1.0, (3, 3, 2)), "inner": eqxrl.envs.Dict(
        {"step": eqxrl.envs.Discrete(5)}), "action_mask": eqxrl.envs.MultiBinary(5)})  # fmt: skip
    example = {"obs": space.sample(KEY), "action": eqxrl.envs.MultiDiscrete((3, 2)).sample(KEY), "id": jnp.zeros((), jnp.int32)}
    check_buffer(buffer, example=example)


class _NewestFirst(ReplayBuffer):
    """Samples only the newest half of the buffer (a biased sampler)."""

    def sample(self, state, key, batch_size, beta=1.0):
        drawn = super().sample(state, key, batch_size, beta)
        half = jnp.maximum(state.size // 2, 1)
        newest = (state.position - 1 - jnp.arange(batch_size) % half) % jnp.maximum(state.size, 1)
        # (Unbiased until full, so that the shape checks pass and the distribution test catches it.)
        indices = jnp.where(state.size == self.capacity, newest, drawn.indices).astype(jnp.int32)
        data = jax.tree.map(lambda x: x[indices], state.data)
        return Sample(data, indices, drawn.weights)


class _Unweighted(PrioritizedReplayBuffer):
    """PER whose importance weights are all 1."""

    def sample(self, state, key, batch_size, beta=1.0):
        drawn = super().sample(state, key, batch_size, beta)
        return Sample(drawn.data, drawn.indices, jnp.ones_like(drawn.weights))


class _Stuck(ReplayBuffer):
    """Stops writing once full (no wrap-around)."""

    def add(self, state, batch):
        new = super().add(state, batch)
        full = state.size == self.capacity
        return jax.tree.map(lambda a, b: jnp.where(full, a, b), state, new)


def test_check_buffer_names_a_biased_sampler():
    with pytest.raises(ContractError, match=r"sampling follows the buffer's distribution: _NewestFirst\(capacity=16\) "
                       r"should draw every slot uniformly; in \d+ draws slot \d+ came \d+ times, expected \d+ "
                       r"\(chi-square p = .* < 0\.001\)"):  # fmt: skip
        check_buffer(_NewestFirst(16))


def test_check_buffer_names_missing_importance_weights():
    with pytest.raises(ContractError, match=r"importance weights must be proportional to P\(i\)\^\(-beta\) \(beta=0\.5\); "
                       r"draw \d+ \(slot \d+, P = .*\) has weight 1, expected 0\.\d+"):  # fmt: skip
        check_buffer(_Unweighted(16, alpha=0.6))


def test_check_buffer_names_a_buffer_that_does_not_wrap():
    with pytest.raises(ContractError, match=r"the buffer keeps the newest `capacity` items .*: _Stuck\(capacity=6\) after "
                       r"8 items added 2 at a time has size=6, position=0; expected 6, 2"):  # fmt: skip
        check_buffer(_Stuck(6))


def test_check_buffer_arguments():
    with pytest.raises(ValueError, match=r"check_buffer\(buffer\) needs capacity <= 4096 \(a small buffer\), got 100000"):
        check_buffer(ReplayBuffer())
    with pytest.raises(ValueError, match=r"check_buffer\(buffer\) must be an eqxrl AbstractReplayBuffer, got dict"):
        check_buffer({})
    with pytest.raises(ValueError, match=r"check_buffer\(false_alarm_rate\) must be in \(0, 1\), got 0.0"):
        check_buffer(ReplayBuffer(8), false_alarm_rate=0.0)


# ----------------------------------------------------------------------- torsos, heads, loss terms
class LayerNormMLP(eqx.Module):
    """docs/composing.md's own torso: a module class built as cls(obs_shape, key=key)."""

    layers: list

    def __init__(self, obs_shape, *, key):
        self.layers = [eqx.nn.Linear(int(np.prod(obs_shape)), 8, key=key), eqx.nn.LayerNorm(8)]

    def __call__(self, obs):
        return jax.nn.relu(self.layers[1](self.layers[0](obs.reshape(-1))))


@pytest.mark.slow  # (over 2 s in the fast tier: tests/tiers.py)
@pytest.mark.parametrize("torso, obs_shape", [(MLPTorso((8,)), (3,)), (IdentityTorso(), (5,)), (LayerNormMLP, (2, 2)),
                                              (CNNTorso((4,), (3,), (1,), (8,)), (5, 5, 2))])  # fmt: skip
def test_every_torso_passes_check_torso(torso, obs_shape):
    check_torso(torso, obs_shape)


def test_check_torso_refuses_a_recurrent_torso():
    with pytest.raises(ValueError, match=r"check_torso\(torso\) checks feed-forward torsos, got the recurrent GRUTorso"):
        check_torso(eqxrl.components.GRUTorso(), (3,))


def test_check_torso_names_a_torso_that_mixes_the_batch():
    class BatchMean(eqx.Module):
        """Subtracts the mean over the batch: item 0 depends on the others."""

        linear: eqx.nn.Linear

        def __init__(self, obs_shape, *, key):
            self.linear = eqx.nn.Linear(obs_shape[0], 4, key=key)

    class BatchMixing(eqxrl.components.AbstractTorso):
        def build(self, obs_shape, *, key):
            return BatchMean(obs_shape, key=key)

        def make(self, obs_shape, *, key):
            net = self.build(tuple(obs_shape), key=key)
            apply = lambda x: jax.vmap(net.linear)(x.reshape(-1, x.shape[-1])).reshape(x.shape[:-1] + (4,))  # noqa: E731
            mixed = lambda x: apply(x) - jnp.mean(apply(x), axis=tuple(range(x.ndim - 1)), keepdims=True)  # noqa: E731
            return eqxrl.components.Encoder(_Batched(mixed, net), tuple(obs_shape), 4, batched=True)

    with pytest.raises(ContractError, match=r"\(batched = item by item\): BatchMixing built for obs_shape \(3,\): item 0 "
                       r"of a batch \(4,\) vs alone: leaf <root>\[0\] is"):  # fmt: skip
        check_torso(BatchMixing(), (3,))


class _Batched(eqx.Module):
    fn: object = eqx.field(static=True)
    net: eqx.Module

    def __call__(self, x):
        return self.fn(x)


@pytest.mark.parametrize("head, example", [
    (CategoricalHead(3, 2, hidden_sizes=(8,), key=KEY), (jnp.zeros(3),)),
    (GaussianHead(3, 2, hidden_sizes=(8,), key=KEY), (jnp.zeros(3),)),
    (TanhGaussianHead(3, 2, hidden_sizes=(8,), key=KEY), (jnp.zeros(3),)),
    (DeterministicHead(3, 2, hidden_sizes=(8,), key=KEY), (jnp.zeros(3),)),
    (ValueHead(3, hidden_sizes=(8,), key=KEY), (jnp.zeros(3),)),
    (DiscreteQHead(3, 2, hidden_sizes=(8,), key=KEY), (jnp.zeros(3),)),
    (DuelingQHead(3, 2, hidden_sizes=(8,), key=KEY), (jnp.zeros(3),)),
    (ContinuousQHead(3, 2, hidden_sizes=(8,), key=KEY), (jnp.zeros(3), jnp.zeros(2))),
])  # fmt: skip
def test_every_head_passes_check_head(head, example):
    check_head(head, *example)


def test_check_head_names_a_head_with_infinite_gradients():
    class Sqrt(eqx.Module):
        head: ValueHead

        def __call__(self, obs):
            return jnp.sqrt(jnp.abs(self.head(obs)) * 0.0)

    with pytest.raises(ContractError, match=r"\(finite gradients\): Sqrt: the gradient of parameter \.head\..* is not finite"):
        check_head(Sqrt(ValueHead(3, hidden_sizes=(8,), key=KEY)), jnp.zeros(3))


def test_check_head_names_a_head_that_drops_the_batch_shape():
    class Flat(eqx.Module):
        head: ValueHead

        def __call__(self, obs):
            return self.head(obs).reshape(-1)

    with pytest.raises(ContractError, match=r"a head maps inputs of any batch shape alike: Flat on inputs \(4, 3\): "
                       r"output <root> is float32\[4\], expected float32\[4, 1\] \(batch \(4,\) \+ one item's\)"):  # fmt: skip
        check_head(Flat(ValueHead(3, hidden_sizes=(8,), key=KEY)), jnp.zeros(3))


@pytest.mark.slow  # (over 2 s in the fast tier: tests/tiers.py)
@pytest.mark.parametrize("term", [L2Penalty(1e-3), KLToReference(CategoricalHead(3, 2, hidden_sizes=(8,), key=KEY))])
def test_every_loss_term_passes_check_loss_term(term):
    check_loss_term(term)


def test_check_loss_term_names_a_non_scalar_loss():
    class PerItem(eqxrl.components.AbstractLossTerm):
        def __call__(self, network, batch, outputs):
            return outputs["dist"].entropy(), {}

    with pytest.raises(ContractError, match=r"a loss term returns a finite scalar loss and scalar metrics: PerItem on "
                       r"observations \(1, 3\) returned loss float32\[1\]"):  # fmt: skip
        check_loss_term(PerItem())


# ----------------------------------------------------------------------- envs
@pytest.mark.slow  # (over 2 s in the fast tier: tests/tiers.py)
@pytest.mark.parametrize("name", ["CartPole-v1", "Pendulum-v1", "Breakout-MinAtar", "Point2D-v0"])
def test_every_env_adapter_passes_check_env_steps(name):
    check_env_steps(eqxrl.envs.make(name), num_steps=300)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["brax/fast", "jaxmarl/MPE_simple_spread_v3"])
def test_the_brax_and_jaxmarl_adapters_pass_check_env_steps(name):
    check_env_steps(eqxrl.envs.make(name), num_steps=100)


@pytest.mark.parametrize("probe", [probes.ConstantReward(), probes.ObservationReward(), probes.TwoStepDiscounting(),
                                   probes.ActionReward(False), probes.ObservationActionReward(False),
                                   probes.TimeLimitBootstrap(), probes.DelayedReward()])  # fmt: skip
def test_every_probe_passes_check_env_steps(probe):
    check_env_steps(probe, num_steps=50, ends_at_limit=not isinstance(probe, probes.TimeLimitBootstrap))


class _LimitAsTermination(AbstractWrapper):
    """A time limit reported as termination (the bug an env adapter can hand every agent)."""

    env: eqxrl.envs.AbstractEnv

    def step(self, key, state, action):
        state, ts = self.env.step(key, state, action)
        return state, TimeStep(ts.obs, ts.reward, ts.terminated | ts.truncated, jnp.zeros((), bool), ts.info)


def test_check_env_steps_names_a_time_limit_reported_as_termination():
    env = _LimitAsTermination(TimeLimit(eqxrl.envs.make("Point2D-v0"), 20))
    with pytest.raises(ContractError, match=r"termination and truncation are kept apart: Point2D-v0, env copy \d, step 19 "
                       r"\(action .*\): every episode that reaches max_episode_steps = 20 ends terminated, none "
                       r"truncated"):  # fmt: skip
        check_env_steps(env, num_steps=50)


def test_check_env_steps_names_an_observation_outside_its_space():
    class Escaping(AbstractWrapper):
        env: eqxrl.envs.AbstractEnv

        def step(self, key, state, action):
            state, ts = self.env.step(key, state, action)
            return state, eqx.tree_at(lambda t: t.obs, ts, ts.obs + 5.0)

    with pytest.raises(ContractError, match=r"observations and rewards respect the spaces and dtypes: TwoStepDiscounting, "
                       r"env copy \d, step 0 \(action \d\): the observation is outside Box"):  # fmt: skip
        check_env_steps(Escaping(probes.TwoStepDiscounting()), num_steps=5)


def test_check_env_steps_arguments():
    with pytest.raises(ValueError, match=r"check_env_steps\(num_steps\) must be an int >= 1, got 0"):
        check_env_steps(probes.ConstantReward(), num_steps=0)
    with pytest.raises(ValueError, match=r"check_env_steps\(env\) must be an eqxrl AbstractEnv, got str"):
        check_env_steps("CartPole-v1")


# ----------------------------------------------------------------------- strategies
@pytest.mark.slow  # (over 2 s in the fast tier: tests/tiers.py)
@settings(max_examples=25, deadline=None)
@given(st.spaces().flatmap(lambda space: st.batches(space).map(lambda batch: (space, batch))))
def test_batches_are_elements_of_their_space(space_and_batch):
    space, batch = space_and_batch
    assert batch.shape[batch.ndim - len(space.shape):] == tuple(space.shape)
    assert bool(jax.vmap(space.contains)(batch.reshape((-1, *space.shape))).all())


@pytest.mark.slow  # (over 2 s in the fast tier: tests/tiers.py)
@settings(max_examples=20, deadline=None)
@given(st.spaces(structured=True).flatmap(lambda space: st.batches(space).map(lambda batch: (space, batch))))
def test_structured_batches_are_elements_of_their_space(space_and_batch):
    # A Dict's batch is a dict of arrays (JAX's leaf order is flatten_space's), one batch shape
    # for every leaf; MultiDiscrete and MultiBinary batches are int32 arrays in range.
    space, batch = space_and_batch
    leaves, treedef = eqxrl.envs.flatten_space(space)
    assert jax.tree.structure(batch) == treedef
    arrays = jax.tree.leaves(batch)
    lead = arrays[0].shape[: arrays[0].ndim - len(leaves[0].shape)]
    for leaf, x in zip(leaves, arrays):
        assert x.shape == lead + tuple(leaf.shape) and x.dtype == leaf.dtype
    flat = jax.tree.map(lambda x: x.reshape((-1, *x.shape[len(lead) :])), batch)
    assert bool(jax.vmap(space.contains)(flat).all())


def test_spaces_are_one_array_unless_structured():
    from hypothesis import find

    assert isinstance(find(st.spaces(structured=True), lambda s: isinstance(s, eqxrl.envs.Dict)), eqxrl.envs.Dict)
    for kind in (eqxrl.envs.Box, eqxrl.envs.Discrete, eqxrl.envs.MultiDiscrete, eqxrl.envs.MultiBinary):
        assert isinstance(find(st.spaces(), lambda s, kind=kind: isinstance(s, kind)), kind)


@settings(max_examples=25, deadline=None)
@given(st.spaces())
def test_default_spaces_draw_no_dict(space):
    assert not isinstance(space, eqxrl.envs.Dict)


@settings(max_examples=10, deadline=None)
@given(st.trajectories(eqxrl.envs.Dict({"grid": eqxrl.envs.Box(0.0, 1.0, (2, 2)), "step": eqxrl.envs.Discrete(5)}),
                       eqxrl.envs.MultiDiscrete((3, 2))))  # fmt: skip
def test_trajectories_of_dict_observations(trajectory):
    goes_on = ~(trajectory.terminated | trajectory.truncated)[:-1]
    for name in ("grid", "step"):
        obs, next_obs = trajectory.obs[name], trajectory.next_obs[name]
        assert obs.shape[:2] == trajectory.reward.shape and next_obs.shape == obs.shape
        np.testing.assert_array_equal(next_obs[:-1][goes_on], obs[1:][goes_on])
    assert trajectory.action.shape == (*trajectory.reward.shape, 2)


def test_strategies_name_what_they_cannot_draw():
    dict_space = eqxrl.envs.Dict({"a": eqxrl.envs.Discrete(2)})
    with pytest.raises(ValueError, match=r"^transitions\(obs_space\) must be a space of one array \(Transition holds "
                       r"arrays\), got Dict\(\{'a': Discrete\(n=2\)\}\)$"):  # fmt: skip
        st.transitions(dict_space, eqxrl.envs.Discrete(2))
    with pytest.raises(ValueError, match=r"^transitions\(action_space\) must be a space of one array"):
        st.transitions(eqxrl.envs.Discrete(2), dict_space)

    class Odd(eqxrl.envs.AbstractSpace):
        shape = ()

        def sample(self, key):
            return jnp.zeros(())

        def contains(self, x):
            return jnp.asarray(True)

    with pytest.raises(ValueError, match=r"^batches\(space\) must be a Box, Discrete, MultiDiscrete, MultiBinary, "
                       r"Dict or Tuple space, got .*Odd\(\)$"):  # fmt: skip
        st.batches(Odd(), (2,))


@settings(max_examples=15, deadline=None)
@given(st.trajectories(eqxrl.envs.Box(-1.0, 1.0, (2,)), eqxrl.envs.Discrete(3)))
def test_trajectories_keep_termination_and_truncation_apart(trajectory):
    assert not (trajectory.terminated & trajectory.truncated).any()
    goes_on = ~(trajectory.terminated | trajectory.truncated)
    np.testing.assert_array_equal(trajectory.next_obs[:-1][goes_on[:-1]], trajectory.obs[1:][goes_on[:-1]])


@pytest.mark.slow  # (over 2 s in the fast tier: tests/tiers.py)
@settings(max_examples=5, deadline=None)
@given(st.agents(eqxrl.agents.DQN("CartPole-v1", hidden_sizes=(8,))))
def test_agents_strategy_keeps_hyperparameters_in_their_documented_ranges(agent):
    # (set_paths rebuilt each through DQN's own checks; these are two of those ranges)
    assert 0.0 <= float(agent.gamma) <= 1.0 and 0.0 < float(agent.tau) <= 1.0


@settings(max_examples=10, deadline=None)
@given(st.transitions(eqxrl.envs.Box(-1.0, 1.0, (3,)), eqxrl.envs.Discrete(2), gamma=0.9))
def test_transitions_discount_by_gamma_unless_terminated(transition):
    assert transition.obs.shape == (*transition.reward.shape, 3) and transition.action.shape == transition.reward.shape
    assert set(np.unique(np.asarray(transition.discount))) <= {0.0, np.float32(0.9)}


@pytest.mark.slow
def test_strategies_without_hypothesis_name_the_extra(monkeypatch):
    real_import = builtins.__import__

    def no_hypothesis(name, *args, **kwargs):
        if name.split(".")[0] == "hypothesis":
            raise ImportError("No module named 'hypothesis'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_hypothesis)
    monkeypatch.delitem(sys.modules, "eqxrl.testing.strategies")
    with pytest.raises(ImportError, match=r"^eqxrl\.testing\.strategies needs hypothesis: pip install eqxrl\[testing\]$"):
        importlib.import_module("eqxrl.testing.strategies")
    # The checks and the probes import without it.
    for module in [m for m in sys.modules if m.startswith("eqxrl.testing")]:
        monkeypatch.delitem(sys.modules, module)
    testing = importlib.import_module("eqxrl.testing")
    assert callable(testing.check_agent) and testing.probes.TimeLimitBootstrap().max_episode_steps == 1


@pytest.mark.slow  # (over 2 s in the fast tier: tests/tiers.py)
def test_masked_probes_bad_arguments():
    with no_runtime_typecheck():
        for make, name, value, least in (
            (probes.MaskedActions, "num_actions", 1, 2),
            (probes.MaskedActions, "factors", 0, 1),
            (probes.MultiAgentMaskedActions, "team_size", 0, 1),
            (probes.MultiAgentMaskedActions, "factors", True, 1),
        ):
            with pytest.raises(ValueError, match=rf"^{make.__name__}\({name}\) must be an int >= {least}, got {value!r}$"):
                make(**{name: value})


def test_batch_shapes_draws_among_choices_and_names_bad_ones():
    from hypothesis import find

    from eqxrl.testing import strategies as kit

    assert find(kit.batch_shapes(choices=[(), (2, 3)]), lambda shape: len(shape) == 2) == (2, 3)
    with no_runtime_typecheck():
        for bad in ([], [(0,)], "ab", [(2.0,)]):
            with pytest.raises(ValueError, match=r"^batch_shapes\(choices\) must be a non-empty list of shapes \(tuples of positive ints\), got "):
                kit.batch_shapes(choices=bad)
