"""Tests for `eqxrl.components.networks`: Linear, MLP, every head, Ensemble."""

import functools
import math
import re

import equinox as eqx
import hypothesis.strategies as st
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings

from eqxrl.components import (
    AbstractHead,
    MLP,
    Categorical,
    CategoricalHead,
    ContinuousQHead,
    DeterministicHead,
    DiscreteQHead,
    DuelingQHead,
    Ensemble,
    GaussianHead,
    Linear,
    MultiCategoricalHead,
    Normal,
    TanhGaussianHead,
    TanhNormal,
    ValueHead,
)
from eqxrl.components.networks import ACTIVATIONS, CNNTorso, MLPTorso, MultiInputTorso, batched_orthogonal, get_activation, orthogonal
from eqxrl.components.networks import _init as init_module
from eqxrl.testing import strategies as kit
from typecheck import no_runtime_typecheck

HIDDEN = (8,)
# Few distinct shapes: every new shape is a new compilation.
# The kit's strategy, on three shapes (each shape compiles anew): none, one and two batch axes.
batch_shapes = kit.batch_shapes(choices=[(), (3,), (2, 3)])
# (obs_size, action_size or num_actions): every size 1 (where squeeze bugs live) or all distinct.
sizes = st.sampled_from([(1, 1), (4, 3)])
seeds = st.integers(0, 2**16)
SETTINGS = settings(max_examples=15, deadline=None)


def _obs(seed: int, batch: tuple[int, ...], obs_size: int, scale: float = 3.0) -> jax.Array:
    # NumPy inputs: jax.random.normal would compile once more per shape.
    return jnp.asarray(scale * np.random.default_rng(seed).normal(size=(*batch, obs_size)), jnp.float32)


# Checks run in NumPy: a jnp comparison would compile once more per shape.
def _all_finite(x) -> bool:
    return bool(np.isfinite(np.asarray(x)).all())


def _within(x, low, high) -> bool:
    x = np.asarray(x)
    return bool(((x >= np.asarray(low)) & (x <= np.asarray(high))).all())


# ----------------------------------------------------------------------------- Linear, MLP


@pytest.mark.slow
def test_linear_is_affine_and_orthogonal(getkey):
    layer = Linear(3, 5, key=getkey(), scale=2.0)
    assert layer.weight.shape == (3, 5) and layer.bias.shape == (5,)
    np.testing.assert_array_equal(layer.bias, 0.0)
    # Orthogonal columns-of-rows: W W^T = scale^2 I for in_size <= out_size.
    np.testing.assert_allclose(layer.weight @ layer.weight.T, 4.0 * np.eye(3), atol=1e-5)
    x = jax.random.normal(getkey(), (2, 4, 3))
    np.testing.assert_allclose(layer(x), np.asarray(x) @ np.asarray(layer.weight), rtol=1e-5, atol=1e-6)


def _networks(key):
    """Layers of several shapes (tall, wide, repeated), and an ensemble built under vmap."""
    k1, k2, k3, k4 = jax.random.split(key, 4)
    return (
        MLP(3, 2, (5, 4), key=k1, final_scale=0.01),
        Linear(7, 3, key=k2, scale=0.5),
        MLP(3, 2, (5, 4), key=k3),
        Ensemble(lambda k: MLP(2, 6, (3,), key=k), 2, key=k4),
    )


def _leaves(tree):
    return [np.asarray(x) for x in jax.tree.leaves(eqx.filter(tree, eqx.is_array))]


# (limit 16, the per-size-class path, 5 s: slow tier)
@pytest.mark.slow  # (over 2 s in the fast tier: tests/tiers.py)
@pytest.mark.parametrize("limit", [init_module._ONE_CALL_LIMIT, pytest.param(16, marks=pytest.mark.slow)])
@pytest.mark.bitwise
def test_batched_orthogonal_draws_the_same_bits_with_one_normal_draw(limit, monkeypatch):
    # limit 16: too small for one call, so the normals are drawn per power-of-two size class
    # (3 classes outside the ensemble, 2 inside).
    monkeypatch.setattr(init_module, "_ONE_CALL_LIMIT", limit)
    jax.clear_caches()  # no program traced under another limit (the ensemble's init) is reused
    key = jax.random.key(5)
    plain, batched = jax.jit(_networks)(key), jax.jit(batched_orthogonal(_networks))(key)
    for a, b in zip(_leaves(plain), _leaves(batched), strict=True):
        np.testing.assert_array_equal(a, b)
    # One normal draw per layer (each a kernel XLA compiles), against one per size class
    # plus the ensemble's own (it batches its members' draws under its vmap, per size class too).
    # (The ensemble's 2 classes at limit 16 were hidden while a program traced at the first
    # limit stayed in JAX's cache; the test passed only after the other case, on one worker.)
    assert _normal_draws(_networks, key) == 7 + (1 if limit > 16 else 2)
    assert _normal_draws(batched_orthogonal(_networks), key) == (1 + 1 if limit > 16 else 3 + 2)


def _normal_draws(fn, key) -> int:
    """Calls of `jax.random.normal` in the program XLA gets for `jax.jit(fn)(key)`, each a
    random-number kernel once XLA inlines the module's functions: counted call by call from
    `main` through the functions that call it (the first run's unused draws are not there)."""
    text = jax.jit(fn).lower(key).as_text()
    bodies = dict(re.findall(r"func\.func (?:public |private )?@(\w+)\((.*?)(?=\n  func\.func|\Z)", text, re.DOTALL))

    @functools.cache
    def count(name: str) -> int:
        calls = re.findall(r"call @(\w+)\(", bodies[name])
        return sum(1 if re.fullmatch(r"_normal(_\d+)?", callee) else count(callee) for callee in calls if callee in bodies)

    return count("main")


def test_orthogonal_is_jaxs_orthogonal_initialiser(getkey):
    key = getkey()
    for shape in [(3, 5), (5, 3), (4, 4)]:
        expected = jax.nn.initializers.orthogonal(0.5)(key, shape, jnp.float32)
        np.testing.assert_array_equal(orthogonal(key, shape, 0.5), expected)


@pytest.mark.parametrize("shape", [(4,), (2, 3, 4), (4, -1)])
def test_orthogonal_names_a_bad_shape(shape):
    with pytest.raises(ValueError, match=re.escape(f"orthogonal(shape) must be (in_size, out_size), two non-negative ints, got {shape!r}")):
        orthogonal(jax.random.key(0), shape, 1.0)


@pytest.mark.slow
@pytest.mark.bitwise
def test_batched_orthogonal_under_vmap_and_nested():
    keys = jax.random.split(jax.random.key(1), 3)
    plain = jax.jit(jax.vmap(_networks))(keys)
    nested = jax.jit(jax.vmap(batched_orthogonal(lambda k: batched_orthogonal(_networks)(k))))(keys)
    for a, b in zip(_leaves(plain), _leaves(nested), strict=True):
        np.testing.assert_array_equal(a, b)
    # A function without orthogonal draws runs once and is returned as it is.
    calls = []
    assert batched_orthogonal(lambda x: calls.append(x) or x + 1)(1) == 2 and calls == [1]


@pytest.mark.slow
@pytest.mark.bitwise
def test_a_nested_jit_traced_inside_batched_orthogonal_keeps_real_weights():
    # JAX caches the inner program's trace, made during the outer function's first run: it must
    # hold the real draws (not that run's placeholders) when it is reused, there or later.
    inner = jax.jit(lambda k: MLP(3, 2, (5,), key=k))
    outer = batched_orthogonal(lambda k: (Linear(2, 3, key=k), inner(jax.random.fold_in(k, 1))))
    key = jax.random.key(2)
    (layer, mlp), expected = jax.jit(outer)(key), MLP(3, 2, (5,), key=jax.random.fold_in(key, 1))
    for a, b in zip(_leaves((mlp, inner(jax.random.fold_in(key, 1)))), _leaves((expected, expected)), strict=True):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(layer.weight, Linear(2, 3, key=key).weight)
    assert all(np.linalg.norm(w) > 0.1 for w in (layer.weight, *(x.weight for x in mlp.layers)))


@pytest.mark.slow
@pytest.mark.bitwise
def test_batched_orthogonal_draws_one_by_one_without_partitionable_threefry():
    # Without partitionable threefry a prefix of a longer draw is not the shorter draw: no batching.
    with jax.threefry_partitionable(False):
        key = jax.random.key(4)
        plain, batched = jax.jit(_networks)(key), jax.jit(batched_orthogonal(_networks))(key)
        for a, b in zip(_leaves(plain), _leaves(batched), strict=True):
            np.testing.assert_array_equal(a, b)
        assert _normal_draws(batched_orthogonal(_networks), key) == 7 + 2  # the ensemble draws per layer too


def test_batched_orthogonal_needs_a_deterministic_function():
    sizes = iter([3, 4, 4])
    different = lambda k: Linear(2, next(sizes), key=k)  # noqa: E731
    with pytest.raises(RuntimeError, match=r"batched_orthogonal: the function drew different matrices on its second run"):
        batched_orthogonal(different)(jax.random.key(0))
    counts = iter([2, 1])
    more = lambda k: [Linear(2, 2, key=k) for _ in range(next(counts))]  # noqa: E731
    with pytest.raises(RuntimeError, match=r"made 1 orthogonal draws on its second run and 2 on its first"):
        batched_orthogonal(more)(jax.random.key(0))


@pytest.mark.slow
@pytest.mark.parametrize("activation", sorted(ACTIVATIONS))
def test_mlp_matches_manual_forward(activation, getkey):
    mlp = MLP(3, 2, (5, 4), activation, key=getkey())
    assert len(mlp.layers) == 3
    x = jax.random.normal(getkey(), (6, 3))
    act = ACTIVATIONS[activation]
    h = x
    for layer in mlp.layers[:-1]:
        h = act(h @ layer.weight + layer.bias)
    expected = h @ mlp.layers[-1].weight + mlp.layers[-1].bias
    np.testing.assert_allclose(mlp(x), expected, rtol=1e-5, atol=1e-6)


def test_mlp_activation_is_applied(getkey):
    key = getkey()
    x = jax.random.normal(getkey(), (6, 3))
    # Same weights, different activations give different outputs.
    assert not np.allclose(MLP(3, 2, (5,), "relu", key=key)(x), MLP(3, 2, (5,), "identity", key=key)(x))


@pytest.mark.slow
def test_mlp_without_hidden_layers_is_linear(getkey):
    mlp = MLP(3, 2, (), key=getkey(), final_scale=0.5)
    assert len(mlp.layers) == 1
    x = jax.random.normal(getkey(), (3,))
    np.testing.assert_allclose(mlp(x), x @ mlp.layers[0].weight, rtol=1e-5, atol=1e-6)


@pytest.mark.slow
def test_mlp_accepts_a_callable_activation(getkey):
    mlp = MLP(2, 1, (4,), jnp.sin, key=getkey())
    x = jnp.ones((2,))
    expected = jnp.sin(x @ mlp.layers[0].weight) @ mlp.layers[1].weight
    np.testing.assert_allclose(mlp(x), expected, rtol=1e-5)


def test_get_activation():
    assert get_activation("relu") is jax.nn.relu
    assert get_activation(jnp.sin) is jnp.sin
    with pytest.raises(ValueError, match=r"activation must be one of .*'tanh'.*got 'sigmoidal'"):
        get_activation("sigmoidal")


@pytest.mark.parametrize(
    "args, match",
    [
        ((0, 2, (8,)), r"MLP\(in_size\) must be a positive int, got 0"),
        ((3, -1, (8,)), r"MLP\(out_size\) must be a positive int, got -1"),
        ((3, 2, (8, 0)), r"MLP\(hidden_sizes\) must be positive ints, got \(8, 0\)"),
        ((3, 2, (-4,)), r"MLP\(hidden_sizes\)"),
    ],
)
def test_mlp_rejects_non_positive_sizes(args, match, getkey):
    with pytest.raises(ValueError, match=match):
        MLP(*args, key=getkey())


def test_mlp_rejects_unknown_activation(getkey):
    with pytest.raises(ValueError, match=r"activation must be one of .*got 'relu6'"):
        MLP(3, 2, (8,), "relu6", key=getkey())


@pytest.mark.parametrize("torso", [MLPTorso, lambda h, a: CNNTorso((4,), (2,), (1,), h, a), lambda h, a: MultiInputTorso({}, hidden_sizes=h, activation=a)])
def test_torsos_check_hidden_layers(torso):
    """Every fully connected stack checks its widths and activation by one rule (`MLP`'s, the heads')."""
    with pytest.raises(ValueError, match=r"^\w+Torso\(hidden_sizes\) must be a tuple of positive ints, got \(8, 0\)$"):
        torso((8, 0), "relu")
    with pytest.raises(ValueError, match=r"activation must be one of .*got 'relu6'"):
        torso((8,), "relu6")


@pytest.mark.slow
def test_mlp_rejects_wrong_input_size(getkey):
    mlp = MLP(3, 2, (8,), key=getkey())
    with pytest.raises(ValueError, match=r"MLP: x must have shape \(\*batch, 3\), got shape \(5, 4\)"):
        mlp(jnp.zeros((5, 4)))


# ----------------------------------------------------------------------------- policy heads


@pytest.mark.slow
@SETTINGS
@given(batch=batch_shapes, size=sizes, seed=seeds)
def test_categorical_head(batch, size, seed):
    obs_size, n = size
    key, skey = jax.random.split(jax.random.key(seed))
    head = CategoricalHead(obs_size, n, HIDDEN, key=key)
    dist = head(_obs(seed, batch, obs_size))
    assert isinstance(dist, Categorical)
    assert dist.logits.shape == (*batch, n)
    # Output layer gain 0.01: the initial policy is close to uniform.
    np.testing.assert_allclose(dist.probs, 1.0 / n, atol=0.05)
    action = dist.sample(skey)
    assert action.shape == batch and action.dtype == jnp.int32
    assert _within(action, 0, n - 1)
    logp = dist.log_prob(action)
    assert logp.shape == batch and _all_finite(logp) and bool((np.asarray(logp) <= 0).all())
    assert dist.mode().shape == batch
    ent = dist.entropy()
    assert ent.shape == batch and _within(ent, 0.0, math.log(n) + 1e-5)


@pytest.mark.slow
@SETTINGS
@given(
    batch=batch_shapes,
    size=sizes,
    state_dependent=st.booleans(),
    init_std=st.sampled_from([0.3, 1.0, 2.0]),
    seed=seeds,
)
def test_gaussian_head(batch, size, state_dependent, init_std, seed):
    obs_size, action_size = size
    key, skey = jax.random.split(jax.random.key(seed))
    head = GaussianHead(
        obs_size, action_size, HIDDEN, key=key, state_dependent_std=state_dependent, init_std=init_std
    )
    assert (head.log_std is None) == state_dependent
    dist = head(_obs(seed, batch, obs_size))
    assert isinstance(dist, Normal)
    assert dist.loc.shape == dist.scale.shape == (*batch, action_size)
    if state_dependent:
        # softplus(raw + offset) + min_std starts at init_std (raw is small at init).
        np.testing.assert_allclose(dist.scale, init_std, rtol=0.05)
    else:
        np.testing.assert_allclose(dist.scale, init_std, rtol=1e-5)
    action = dist.sample(skey)
    assert action.shape == (*batch, action_size)
    logp = dist.log_prob(action)
    assert logp.shape == batch and _all_finite(logp)
    assert dist.entropy().shape == batch
    np.testing.assert_array_equal(dist.mode(), dist.loc)


def test_gaussian_head_state_dependent_std_varies_with_obs(getkey):
    head = GaussianHead(2, 1, HIDDEN, key=getkey(), state_dependent_std=True)
    # Push the std output away from its initial value, then it depends on the state.
    head = eqx.tree_at(lambda h: h.out.weight, head, 10.0 * head.out.weight + 1.0)
    scale = head(jnp.array([[3.0, -3.0], [-3.0, 3.0]])).scale
    assert not np.allclose(scale[0], scale[1])
    assert bool((np.asarray(scale) >= head.min_std).all())


def test_gaussian_head_min_std_floor(getkey):
    head = GaussianHead(2, 2, HIDDEN, key=getkey(), init_std=1e-6, min_std=1e-2)
    np.testing.assert_allclose(head(jnp.zeros(2)).scale, 1e-2, rtol=1e-5)


@pytest.mark.slow
@SETTINGS
@given(
    batch=batch_shapes,
    size=sizes,
    bounds=st.sampled_from([(-1.0, 1.0), (0.0, 5.0), (-3.0, -2.0)]),
    seed=seeds,
)
def test_tanh_gaussian_head(batch, size, bounds, seed):
    obs_size, action_size = size
    low, high = bounds
    key, skey = jax.random.split(jax.random.key(seed))
    head = TanhGaussianHead(obs_size, action_size, HIDDEN, key=key, low=low, high=high)
    dist = head(_obs(seed, batch, obs_size))
    assert isinstance(dist, TanhNormal)
    assert dist.loc.shape == dist.scale.shape == (*batch, action_size)
    # log-std squashed into [log_std_min, log_std_max].
    assert _within(dist.scale, math.exp(-5.0) * (1 - 1e-5), math.exp(2.0) * (1 + 1e-5))
    action, logp = dist.sample_and_log_prob(skey)
    assert action.shape == (*batch, action_size) and logp.shape == batch
    assert _within(action, low, high)
    assert _all_finite(logp)
    mode = dist.mode()
    assert mode.shape == (*batch, action_size)
    assert _within(mode, low, high)
    assert dist.entropy(skey).shape == batch


@pytest.mark.slow
def test_tanh_gaussian_head_per_dimension_bounds(getkey):
    low, high = jnp.array([-1.0, 0.0]), jnp.array([1.0, 10.0])
    head = TanhGaussianHead(3, 2, HIDDEN, key=getkey(), low=low, high=high)
    # A zero output layer: pre-tanh mean 0, so each dimension samples around its own midpoint.
    head = eqx.tree_at(lambda h: h.out.weight, head, jnp.zeros_like(head.out.weight))
    actions = jax.vmap(head(jnp.ones((64, 3))).sample)(jax.random.split(getkey(), 5))
    assert actions.shape == (5, 64, 2)
    assert _within(actions, low, high)
    assert float(actions[..., 1].max()) > 1.0  # the second dimension uses its own, wider range


@pytest.mark.parametrize("cls", [TanhGaussianHead, DeterministicHead])
@pytest.mark.parametrize("low, high", [(1.0, 1.0), (2.0, 1.0), (-np.inf, 1.0)])
def test_bounded_heads_reject_bad_bounds(cls, low, high, getkey):
    with pytest.raises(ValueError, match=rf"{cls.__name__}\(low, high\)"):
        cls(2, 1, HIDDEN, key=getkey(), low=low, high=high)


def test_tanh_gaussian_head_rejects_bad_log_std_range(getkey):
    with pytest.raises(ValueError, match=r"log_std_min < log_std_max, got 1.0 and 1.0"):
        TanhGaussianHead(2, 1, HIDDEN, key=getkey(), log_std_min=1.0, log_std_max=1.0)


@pytest.mark.slow
@SETTINGS
@given(
    batch=batch_shapes,
    size=sizes,
    bounds=st.sampled_from([(-1.0, 1.0), (0.0, 5.0), (-3.0, -2.0)]),
    seed=seeds,
)
def test_deterministic_head(batch, size, bounds, seed):
    obs_size, action_size = size
    low, high = bounds
    head = DeterministicHead(obs_size, action_size, HIDDEN, key=jax.random.key(seed), low=low, high=high)
    # Large weights saturate the tanh: the output still stays inside [low, high].
    big = eqx.tree_at(lambda h: h.out.weight, head, 1e4 * head.out.weight)
    for h in (head, big):
        action = h(_obs(seed, batch, obs_size))
        assert action.shape == (*batch, action_size)
        assert _within(action, low, high)
    # Near initialisation the action is near the middle of the range.
    np.testing.assert_allclose(head(_obs(seed, batch, obs_size)), (low + high) / 2, atol=0.1 * (high - low))


# ----------------------------------------------------------------------------- value and Q heads


@SETTINGS
@given(batch=batch_shapes, size=sizes, seed=seeds)
def test_value_head(batch, size, seed):
    obs_size, _ = size
    head = ValueHead(obs_size, HIDDEN, key=jax.random.key(seed))
    obs = _obs(seed, batch, obs_size)
    v = head(obs)
    assert v.shape == batch and v.dtype == jnp.float32 and _all_finite(v)
    np.testing.assert_allclose(v, head.out(head.torso(obs))[..., 0])


@SETTINGS
@given(batch=batch_shapes, size=sizes, seed=seeds)
def test_discrete_q_head(batch, size, seed):
    obs_size, n = size
    head = DiscreteQHead(obs_size, n, HIDDEN, key=jax.random.key(seed))
    q = head(_obs(seed, batch, obs_size))
    assert q.shape == (*batch, n) and _all_finite(q)


@SETTINGS
@given(batch=batch_shapes, size=sizes, seed=seeds)
def test_dueling_q_head_is_value_plus_centred_advantages(batch, size, seed):
    """Q = V + A - mean(A), by hand from the head's own outputs: V is the mean Q over actions."""
    obs_size, n = size
    head = DuelingQHead(obs_size, n, HIDDEN, key=jax.random.key(seed))
    obs = _obs(seed, batch, obs_size)
    q = head(obs)
    raw = np.asarray(head.out(head.torso(obs)), np.float64)
    value, adv = raw[..., :1], raw[..., 1:]
    assert q.shape == (*batch, n) and _all_finite(q)
    np.testing.assert_allclose(q, value + adv - adv.mean(axis=-1, keepdims=True), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.asarray(q).mean(axis=-1), value[..., 0], rtol=1e-5, atol=1e-5)


@SETTINGS
@given(batch=batch_shapes, size=sizes, seed=seeds)
def test_continuous_q_head(batch, size, seed):
    obs_size, action_size = size
    head = ContinuousQHead(obs_size, action_size, HIDDEN, key=jax.random.key(seed))
    obs = _obs(seed, batch, obs_size)
    action = jnp.tanh(_obs(seed + 1, batch, action_size))
    q = head(obs, action)
    assert q.shape == batch and _all_finite(q)
    np.testing.assert_allclose(q, head.out(head.torso(jnp.concatenate([obs, action], -1)))[..., 0])


def test_continuous_q_head_depends_on_the_action(getkey):
    head = ContinuousQHead(2, 2, HIDDEN, key=getkey())
    obs = jnp.ones((2,))
    assert not np.allclose(head(obs, jnp.array([1.0, -1.0])), head(obs, jnp.array([-1.0, 1.0])))


# ----------------------------------------------------------------------------- bad inputs

POLICY_AND_VALUE_HEADS = {
    "CategoricalHead": lambda k: CategoricalHead(3, 2, HIDDEN, key=k),
    "GaussianHead": lambda k: GaussianHead(3, 2, HIDDEN, key=k),
    "GaussianHead(state_dependent_std)": lambda k: GaussianHead(3, 2, HIDDEN, key=k, state_dependent_std=True),
    "TanhGaussianHead": lambda k: TanhGaussianHead(3, 2, HIDDEN, key=k),
    "DeterministicHead": lambda k: DeterministicHead(3, 2, HIDDEN, key=k),
    "ValueHead": lambda k: ValueHead(3, HIDDEN, key=k),
    "DiscreteQHead": lambda k: DiscreteQHead(3, 2, HIDDEN, key=k),
    "DuelingQHead": lambda k: DuelingQHead(3, 2, HIDDEN, key=k),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(POLICY_AND_VALUE_HEADS))
@pytest.mark.parametrize("shape", [(4,), (5, 2), (2, 5, 1)])
def test_heads_reject_wrong_obs_shape(name, shape, getkey):
    head = POLICY_AND_VALUE_HEADS[name](getkey())
    owner = name.split("(")[0]
    match = rf"{owner}: obs must have shape \(\*batch, 3\), got shape {re_tuple(shape)}"
    with pytest.raises(ValueError, match=match):
        head(jnp.zeros(shape))


@pytest.mark.slow
def test_continuous_q_head_rejects_wrong_shapes(getkey):
    head = ContinuousQHead(3, 2, HIDDEN, key=getkey())
    with pytest.raises(ValueError, match=r"ContinuousQHead: obs must have shape \(\*batch, 3\), got shape \(5, 2\)"):
        head(jnp.zeros((5, 2)), jnp.zeros((5, 2)))
    with pytest.raises(ValueError, match=r"ContinuousQHead: action must have shape \(\*batch, 2\), got shape \(5, 3\)"):
        head(jnp.zeros((5, 3)), jnp.zeros((5, 3)))


def re_tuple(shape: tuple[int, ...]) -> str:
    return str(tuple(shape)).replace("(", r"\(").replace(")", r"\)")


@pytest.mark.parametrize(
    "make, match",
    [
        (lambda k: CategoricalHead(0, 2, key=k), r"CategoricalHead\(obs_size\) must be a positive int, got 0"),
        (lambda k: CategoricalHead(2, 0, key=k), r"CategoricalHead\(num_actions\) must be a positive int"),
        (lambda k: GaussianHead(2, -1, key=k), r"GaussianHead\(action_size\) must be a positive int, got -1"),
        (lambda k: GaussianHead(2, 1, key=k, init_std=0.0), r"GaussianHead\(init_std\) must be > 0, got 0.0"),
        (lambda k: TanhGaussianHead(0, 1, key=k), r"TanhGaussianHead\(obs_size\)"),
        (lambda k: DeterministicHead(2, 0, key=k), r"DeterministicHead\(action_size\)"),
        (lambda k: ValueHead(0, key=k), r"ValueHead\(obs_size\)"),
        (lambda k: DiscreteQHead(2, 0, key=k), r"DiscreteQHead\(num_actions\)"),
        (lambda k: DuelingQHead(0, 2, key=k), r"DuelingQHead\(obs_size\) must be a positive int, got 0"),
        (lambda k: ContinuousQHead(2, 0, key=k), r"ContinuousQHead\(action_size\)"),
        (lambda k: ValueHead(2, (8, 0), key=k), r"ValueHead\(hidden_sizes\) must be positive ints"),
        (lambda k: ValueHead(2, (8,), "nope", key=k), r"activation must be one of"),
    ],
)
def test_head_constructors_reject_bad_config(make, match, getkey):
    with pytest.raises(ValueError, match=match):
        make(getkey())


# ----------------------------------------------------------------------------- transformations


@pytest.mark.slow
def test_heads_under_filter_jit_and_vmap_match_batched_call(getkey):
    head = GaussianHead(4, 2, HIDDEN, key=getkey(), state_dependent_std=True)
    obs = jax.random.normal(getkey(), (5, 4))
    batched = head(obs)
    per_obs = eqx.filter_jit(eqx.filter_vmap(lambda o: head(o).loc))(obs)
    np.testing.assert_allclose(per_obs, batched.loc, rtol=1e-5, atol=1e-6)


@pytest.mark.slow
def test_heads_are_differentiable(getkey):
    head = CategoricalHead(4, 3, HIDDEN, key=getkey())
    obs = jax.random.normal(getkey(), (5, 4))
    actions = jnp.array([0, 1, 2, 0, 1])
    grads = eqx.filter_grad(lambda h: -h(obs).log_prob(actions).mean())(head)
    norms = [float(jnp.abs(g).sum()) for g in jax.tree.leaves(grads)]
    assert all(np.isfinite(norms)) and sum(norms) > 0


# ----------------------------------------------------------------------------- Ensemble


@eqx.filter_jit
def _apply(module, *args):
    # One compilation per ensemble and input shape (eager vmap compiles every op separately).
    return module(*args)


@functools.cache
def _q_ensemble(num: int) -> Ensemble:
    # Built once per size: initialising under vmap compiles per shape, and the
    # property under test is the call, not the initialisation.
    return Ensemble(lambda k: ContinuousQHead(4, 3, HIDDEN, key=k), num, key=jax.random.key(num))


@pytest.mark.slow
@settings(max_examples=12, deadline=None)
@given(batch=batch_shapes, num=st.sampled_from([1, 3]), seed=seeds)
def test_ensemble_of_q_heads(batch, num, seed):
    ens = _q_ensemble(num)
    assert ens.num == num
    obs = _obs(seed, batch, 4)
    action = jnp.tanh(_obs(seed + 1, batch, 3))
    q = np.asarray(_apply(ens, obs, action))
    assert q.shape == (num, *batch) and _all_finite(q)
    for i in range(num):
        np.testing.assert_allclose(q[i], _apply(ens.member(i), obs, action), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(q[-1], _apply(ens.member(-1), obs, action), rtol=1e-5, atol=1e-6)
    if num > 1:  # members are initialised independently
        assert not np.allclose(q[0], q[1])


@functools.cache
def _policy_ensembles() -> tuple[Ensemble, Ensemble]:
    key = jax.random.key(0)
    values = Ensemble(lambda k: ValueHead(4, HIDDEN, key=k), 2, key=key)
    policies = Ensemble(lambda k: GaussianHead(4, 2, HIDDEN, key=k), 2, key=key)
    return values, policies


@pytest.mark.slow
@settings(max_examples=8, deadline=None)
@given(batch=batch_shapes, seed=seeds)
def test_ensemble_of_value_and_policy_heads(batch, seed):
    values, policies = _policy_ensembles()
    obs = _obs(seed, batch, 4)
    v = np.asarray(_apply(values, obs))
    assert v.shape == (2, *batch)
    np.testing.assert_allclose(v[1], _apply(values.member(1), obs), rtol=1e-5, atol=1e-6)
    # A distribution-valued member: outputs stack field by field.
    dists = _apply(policies, obs)
    assert isinstance(dists, Normal)
    assert dists.loc.shape == (2, *batch, 2)
    assert dists.sample(jax.random.key(seed)).shape == (2, *batch, 2)
    np.testing.assert_allclose(dists.loc[0], _apply(policies.member(0), obs).loc, rtol=1e-5, atol=1e-6)


def test_ensemble_member_is_a_standalone_module():
    values, _ = _policy_ensembles()
    member = values.member(1)
    assert isinstance(member, ValueHead)
    assert member.torso.net.layers[0].weight.shape == (4, 8)


@pytest.mark.parametrize("num", [0, -1])
def test_ensemble_rejects_non_positive_num(num, getkey):
    with pytest.raises(ValueError, match=rf"Ensemble\(num\) must be a positive int, got {num}"):
        Ensemble(lambda k: ValueHead(3, HIDDEN, key=k), num, key=getkey())


@pytest.mark.parametrize("i", [2, -3])
def test_ensemble_member_index_out_of_range(i):
    ens, _ = _policy_ensembles()
    with pytest.raises(ValueError, match=rf"Ensemble.member\(i\) needs -2 <= i < 2, got {i}"):
        ens.member(i)


@pytest.mark.slow
def test_ensemble_is_differentiable_per_member():
    ens, _ = _policy_ensembles()
    obs = jnp.ones((5, 4))
    # Only member 0 enters the loss: only member 0 gets gradient.
    grads = eqx.filter_grad(lambda e: e(obs)[0].sum())(ens)
    w = grads.members.torso.net.layers[0].weight
    assert w.shape == (2, 4, 8)
    assert float(jnp.abs(w[0]).sum()) > 0 and float(jnp.abs(w[1]).sum()) == 0


def test_multi_categorical_head_gives_a_factorised_categorical_and_names_a_bad_nvec():
    head = MultiCategoricalHead(3, (4, 2), key=jax.random.key(0))
    dist = head(jnp.zeros((5, 3)))
    assert dist.logits.shape == (5, 6) and dist.nvec == (4, 2) and dist.sample(jax.random.key(1)).shape == (5, 2)
    with no_runtime_typecheck():
        for nvec in ((), (3, 0), 4):
            with pytest.raises(ValueError, match=rf"^MultiCategoricalHead\(nvec\) must be a non-empty sequence of positive ints, got {re.escape(repr(nvec))}$"):
                MultiCategoricalHead(3, nvec, key=jax.random.key(0))


def test_a_users_head_on_abstract_head_runs_as_documented():
    """docs/components/networks.md, "Your own head": a head of three fields and two calls
    (`build_body`, `body_outputs`) builds, runs and names itself in the shape error."""
    import pathlib

    page = pathlib.Path(__file__).parents[2] / "docs" / "components" / "networks.md"
    section = page.read_text().split("## Your own head", 1)[1].split("\n## ", 1)[0]
    (block,) = re.findall(r"```python\n(.*?)```", section, re.S)
    ns = {"__name__": "docs_networks_own_head"}
    exec(compile(block, "docs/components/networks.md [Your own head]", "exec"), ns)
    head = ns["head"]
    assert isinstance(head, AbstractHead)
    with pytest.raises(ValueError, match="BoundedValueHead"):
        head(jnp.ones((8, 3)))
