"""Tests for `eqxrl.envs` spaces: `Discrete`, `Box`, `MultiDiscrete`, `MultiBinary`, `Dict`,
and the helpers `flatten_space` and `sample_batch`."""

import equinox as eqx
import hypothesis.strategies as st
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings

from eqxrl.envs import (
    AbstractSpace,
    Box,
    Dict,
    Discrete,
    MultiBinary,
    MultiDiscrete,
    Tuple,
    flatten_space,
    sample_batch,
)
from eqxrl.testing import strategies as est
from typecheck import no_runtime_typecheck


def test_spaces_are_abstract_space():
    assert isinstance(Discrete(3), AbstractSpace)
    assert isinstance(Box(0.0, 1.0, (2,)), AbstractSpace)
    assert isinstance(MultiDiscrete((3, 2)), AbstractSpace)
    assert isinstance(MultiBinary(4), AbstractSpace)
    assert isinstance(Dict({"a": Discrete(2)}), AbstractSpace)
    with pytest.raises(TypeError):
        AbstractSpace()  # abstract: shape, sample and contains are not implemented


# ----------------------------------------------------------------------------- Discrete


@settings(max_examples=20, deadline=None)
@given(n=st.integers(1, 50), seed=st.integers(0, 2**16))
def test_discrete_sample_in_range(n, seed):
    space = Discrete(n)
    assert space.shape == ()
    assert space.dtype == jnp.int32
    samples = jax.vmap(space.sample)(jax.random.split(jax.random.key(seed), 64))
    assert samples.dtype == jnp.int32
    assert samples.shape == (64,)
    assert int(samples.min()) >= 0 and int(samples.max()) < n
    assert bool(jax.vmap(space.contains)(samples).all())


def test_discrete_sample_covers_every_value(getkey):
    samples = jax.vmap(Discrete(4).sample)(jax.random.split(getkey(), 400))
    assert set(np.asarray(samples).tolist()) == {0, 1, 2, 3}


def test_discrete_contains():
    space = Discrete(3)
    assert bool(space.contains(jnp.asarray(0)))
    assert bool(space.contains(jnp.asarray(2)))
    assert not bool(space.contains(jnp.asarray(3)))
    assert not bool(space.contains(jnp.asarray(-1)))
    assert not bool(space.contains(jnp.asarray(1.5)))
    assert bool(space.contains(jnp.asarray(1.0)))  # an integral float counts


@pytest.mark.parametrize("n", [0, -3])
def test_discrete_rejects_non_positive_n(n):
    with pytest.raises(ValueError, match=r"Discrete\(n\) must be a positive int, got n=" + str(n)):
        Discrete(n)


def test_discrete_is_static_structure():
    # n is static: two equal spaces are equal pytrees with no array leaves.
    assert Discrete(3) == Discrete(3)
    assert Discrete(3) != Discrete(4)
    assert jax.tree_util.tree_leaves(Discrete(3)) == []


# ----------------------------------------------------------------------------- Box


def test_box_broadcasts_bounds():
    space = Box(-1.0, 2.0, (3,))
    assert space.shape == (3,)
    assert space.dtype == jnp.float32
    np.testing.assert_array_equal(space.low, [-1.0, -1.0, -1.0])
    np.testing.assert_array_equal(space.high, [2.0, 2.0, 2.0])
    assert space.low.dtype == np.float32
    assert space.bounded


def test_box_infers_shape_from_bounds():
    space = Box(np.zeros((2, 3)), 1.0)
    assert space.shape == (2, 3)
    assert space.high.shape == (2, 3)


def test_box_unbounded():
    space = Box(-np.inf, np.inf, (2,))
    assert not space.bounded
    assert not Box(np.array([0.0, -np.inf]), 1.0).bounded


def test_box_rejects_low_above_high():
    with pytest.raises(ValueError, match=r"Box\(low, high\) needs low <= high"):
        Box(np.array([0.0, 2.0]), np.array([1.0, 1.0]))
    with pytest.raises(ValueError, match=r"Box\(low, high\)"):
        Box(1.0, 0.0, ())


def test_box_contains():
    space = Box(np.array([-1.0, 0.0]), np.array([1.0, 5.0]))
    assert bool(space.contains(jnp.array([0.0, 5.0])))
    assert bool(space.contains(jnp.array([-1.0, 0.0])))
    assert not bool(space.contains(jnp.array([0.0, 5.5])))
    assert not bool(space.contains(jnp.array([-1.1, 1.0])))


_bound = st.one_of(st.floats(-10, 10, width=32), st.just(float("inf")))


@settings(max_examples=25, deadline=None)
@given(a=_bound, b=_bound, lo_inf=st.booleans(), seed=st.integers(0, 2**16))
def test_box_samples_lie_inside_the_box(a, b, lo_inf, seed):
    # Bounded, half-bounded and unbounded boxes: a sample is always an element.
    low, high = sorted([a, b])
    if lo_inf:
        low = -np.inf
    if low == high == np.inf:
        low = 0.0
    space = Box(np.array([low, -np.inf, 0.0]), np.array([high, np.inf, 0.0]))
    samples = jax.vmap(space.sample)(jax.random.split(jax.random.key(seed), 32))
    assert samples.shape == (32, 3)
    assert np.isfinite(np.asarray(samples)).all()
    assert bool(jax.vmap(space.contains)(samples).all()), (low, high, samples)


@pytest.mark.parametrize(
    "low, high",
    [(-np.inf, -5.0), (3.0, np.inf), (-np.inf, np.inf), (-np.inf, 0.5), (-0.5, np.inf), (2.0, 2.0)],
)
def test_box_half_bounded_samples_lie_inside_and_spread(low, high, getkey):
    space = Box(low, high, (2,))
    samples = jax.vmap(space.sample)(jax.random.split(getkey(), 64))
    assert np.isfinite(np.asarray(samples)).all()
    assert bool(jax.vmap(space.contains)(samples).all()), samples
    if low < high:  # not a degenerate point mass on one bound
        assert float(samples.std()) > 0.1


def test_box_bounded_samples_are_uniform(getkey):
    space = Box(np.array([0.0, -4.0]), np.array([1.0, 4.0]))
    samples = jax.vmap(space.sample)(jax.random.split(getkey(), 4000))
    np.testing.assert_allclose(samples.mean(0), [0.5, 0.0], atol=0.1)
    np.testing.assert_allclose(samples.var(0), [1 / 12, 64 / 12], rtol=0.1)
    assert float(samples[:, 0].min()) < 0.05 and float(samples[:, 0].max()) > 0.95


def test_box_with_traced_bounds():
    # Bounds coming from vmapped env params stay traced instead of failing.
    def sample(high, key):
        return Box(0.0, high, (2,)).sample(key)

    highs = jnp.array([1.0, 10.0])
    out = jax.vmap(sample)(highs, jax.random.split(jax.random.key(0), 2))
    assert out.shape == (2, 2)
    assert bool((out >= 0).all()) and bool((out <= highs[:, None]).all())


def test_box_under_filter_jit():
    @eqx.filter_jit
    def f(space, x):
        return space.contains(x)

    assert bool(f(Box(-1.0, 1.0, (2,)), jnp.zeros(2)))
    assert not bool(f(Box(-1.0, 1.0, (2,)), jnp.full(2, 3.0)))


def test_box_repr_is_readable():
    assert repr(Box(-2.0, 2.0, (1,))) == "Box(low=-2, high=2, shape=(1,))"
    assert repr(Box([0.0, -1.0], [1.0, 2.0])) == "Box(low=[ 0. -1.], high=[1. 2.], shape=(2,))"
    assert repr(Box([0.0, -1.0], 1.0)) == "Box(low=[ 0. -1.], high=1, shape=(2,))"


# ----------------------------------------------------------------------------- helpers for the structured spaces


def _batched_shapes(space, batch_shape):
    leaves, treedef = flatten_space(space)
    return treedef.unflatten([batch_shape + tuple(leaf.shape) for leaf in leaves])


def _dtypes(tree):
    return jax.tree.map(lambda x: jnp.asarray(x).dtype, tree)


def _check_samples(space, seed, batch_shape):
    """`sample_batch` gives the declared shapes and dtypes, and every sample is contained
    (checked under vmap, and under jit through `eqx.filter_jit`, which takes Box bounds too)."""
    samples = sample_batch(space, jax.random.key(seed), batch_shape)
    assert jax.tree.map(jnp.shape, samples) == _batched_shapes(space, batch_shape)
    declared = [leaf.dtype for leaf in flatten_space(space)[0]]
    assert [x.dtype for x in jax.tree.leaves(samples)] == declared
    flat = jax.tree.map(lambda x: x.reshape((-1, *x.shape[len(batch_shape) :])), samples)
    contains = eqx.filter_jit(lambda space, x: jax.vmap(space.contains)(x))
    assert bool(contains(space, flat).all())
    return samples


# ----------------------------------------------------------------------------- MultiDiscrete


@pytest.mark.slow
@settings(max_examples=8, deadline=None)  # (each example compiles its sampling: ~0.5 s)
@given(space=est.multi_discretes(max_n=6), batch_shape=est.batch_shapes(), seed=st.integers(0, 2**16))
def test_multi_discrete_samples_are_in_range(space, batch_shape, seed):
    assert space.shape == (len(space.nvec),)
    assert space.dtype == jnp.int32
    samples = np.asarray(_check_samples(space, seed, batch_shape))
    assert (samples >= 0).all() and (samples < np.asarray(space.nvec)).all()
    assert bool(jax.jit(space.contains)(samples.reshape(-1, *space.shape)[0]))  # hashable: jax.jit takes it


@settings(max_examples=15, deadline=None)
@given(space=est.multi_discretes(), data=st.data())
def test_multi_discrete_contains_nothing_outside(space, data):
    x = np.asarray(data.draw(est.elements(space)))
    i = data.draw(st.integers(0, len(space.nvec) - 1))
    assert bool(space.contains(x))
    assert bool(space.contains(x.astype(np.float32)))  # an integral float counts, as for Discrete
    for bad in (space.nvec[i], -1):
        y = x.copy()
        y[i] = bad
        assert not bool(space.contains(y))
    y = x.astype(np.float32)
    y[i] += 0.5
    assert not bool(space.contains(y))
    assert not bool(space.contains(x[None]))  # wrong shapes
    assert not bool(space.contains(np.concatenate([x, x])))
    assert not bool(space.contains(x[0]))


def test_multi_discrete_samples_cover_every_entry_uniformly(getkey):
    samples = np.asarray(sample_batch(MultiDiscrete((4, 2)), getkey(), (800,)))
    assert set(samples[:, 0].tolist()) == {0, 1, 2, 3} and set(samples[:, 1].tolist()) == {0, 1}
    np.testing.assert_allclose(samples.mean(0), [1.5, 0.5], atol=0.15)


def test_multi_discrete_is_static_and_hashable():
    space = MultiDiscrete(np.array([3, 2]))
    assert space.nvec == (3, 2) and all(type(n) is int for n in space.nvec)
    assert space == MultiDiscrete([3, 2]) and hash(space) == hash(MultiDiscrete((3, 2)))
    assert space != MultiDiscrete((3, 3))
    assert jax.tree_util.tree_leaves(space) == []
    assert repr(space) == "MultiDiscrete(nvec=(3, 2))"


@pytest.mark.parametrize(
    "nvec",
    [(), [], (3, 0), [2, -1], (2.5,), (2.0, 3.0), "ab", 3, [True, 2], np.array([[2, 3]]), np.array([2.0]), None],
    ids=repr,
)
def test_multi_discrete_rejects_bad_nvec(nvec):
    with pytest.raises(ValueError, match=r"^MultiDiscrete\(nvec\) must be a non-empty sequence of positive ints, got nvec="):
        MultiDiscrete(nvec)


# ----------------------------------------------------------------------------- MultiBinary


@pytest.mark.slow  # (over 2 s in the fast tier: tests/tiers.py)
@settings(max_examples=8, deadline=None)  # (each example compiles its sampling: ~0.5 s)
@given(space=est.multi_binaries(), batch_shape=est.batch_shapes(), seed=st.integers(0, 2**16))
def test_multi_binary_samples_are_bits(space, batch_shape, seed):
    assert space.dtype == jnp.int32
    assert space.shape == ((space.n,) if isinstance(space.n, int) else space.n)
    samples = np.asarray(_check_samples(space, seed, batch_shape))
    assert set(np.unique(samples).tolist()) <= {0, 1}


@settings(max_examples=15, deadline=None)
@given(space=est.multi_binaries(), data=st.data())
def test_multi_binary_contains_nothing_outside(space, data):
    x = np.asarray(data.draw(est.elements(space)))
    assert bool(space.contains(x)) and bool(space.contains(x.astype(np.float32)))
    index = tuple(data.draw(st.integers(0, side - 1)) for side in space.shape)
    for bad in (2, -1):
        y = x.copy()
        y[index] = bad
        assert not bool(space.contains(y))
    assert not bool(space.contains(x[None]))
    assert not bool(space.contains(x.reshape(-1)[:-1]))


def test_multi_binary_sample_is_balanced_and_shapes(getkey):
    samples = np.asarray(sample_batch(MultiBinary((2, 3)), getkey(), (500,)))
    assert samples.shape == (500, 2, 3)
    np.testing.assert_allclose(samples.mean(0), 0.5, atol=0.1)
    assert MultiBinary(4).shape == (4,) and MultiBinary([2, 3]).shape == (2, 3)


def test_multi_binary_is_static_and_readable():
    assert MultiBinary(3) == MultiBinary(3) and hash(MultiBinary(3)) == hash(MultiBinary(np.int64(3)))
    assert jax.tree_util.tree_leaves(MultiBinary((2, 2))) == []
    assert repr(MultiBinary(4)) == "MultiBinary(n=4)"
    assert repr(MultiBinary((2, 3))) == "MultiBinary(n=(2, 3))"


@pytest.mark.parametrize("n", [0, -2, (), (2, 0), 2.0, True, "4", None, np.array([[2]])], ids=repr)
def test_multi_binary_rejects_bad_n(n):
    with pytest.raises(
        ValueError, match=r"^MultiBinary\(n\) must be a positive int or a non-empty tuple of positive ints, got n="
    ):
        MultiBinary(n)


# ----------------------------------------------------------------------------- Dict


def _grid_space():
    return Dict({"step": Discrete(10), "grid": Box(0.0, 1.0, (3, 3, 2)), "more": Dict({"b": MultiBinary(2), "a": MultiDiscrete((3, 2))})})


@pytest.mark.slow
@settings(max_examples=8, deadline=None)  # (each example compiles its sampling: ~0.5 s)
@given(space=est.dicts(), batch_shape=est.batch_shapes(), seed=st.integers(0, 2**16))
def test_dict_samples_are_contained_dicts_of_the_declared_shapes(space, batch_shape, seed):
    samples = _check_samples(space, seed, batch_shape)
    assert isinstance(samples, dict) and list(samples) == sorted(space.spaces)
    assert space.dtype == _dtypes(samples)


def test_dict_shape_dtype_and_sorted_keys():
    space = _grid_space()
    assert list(space.spaces) == ["grid", "more", "step"]
    assert space.shape == {"grid": (3, 3, 2), "more": {"a": (2,), "b": (2,)}, "step": ()}
    assert space.dtype == {"grid": jnp.float32, "more": {"a": jnp.int32, "b": jnp.int32}, "step": jnp.int32}
    element = space.sample(jax.random.key(0))
    assert list(element) == ["grid", "more", "step"] and list(element["more"]) == ["a", "b"]


@pytest.mark.slow  # (over 2 s in the fast tier: tests/tiers.py)
def test_dict_under_vmap_and_jit(getkey):
    space = _grid_space()
    batch = jax.vmap(space.sample)(jax.random.split(getkey(), 5))
    assert jax.tree.map(jnp.shape, batch) == {"grid": (5, 3, 3, 2), "more": {"a": (5, 2), "b": (5, 2)}, "step": (5,)}
    assert bool(jax.vmap(space.contains)(batch).all())
    assert bool(eqx.filter_jit(lambda s, x: s.contains(x))(space, space.sample(getkey())))
    hashable = Dict({"a": MultiDiscrete((3,)), "b": Discrete(2)})  # no Box bounds: jax.jit hashes it
    assert bool(jax.jit(hashable.contains)(jax.jit(hashable.sample)(getkey())))


def test_dict_sampling_is_deterministic_per_key_and_independent_across_entries(getkey):
    space = Dict({"a": Box(0.0, 1.0, (16,)), "b": Box(0.0, 1.0, (16,)), "c": Discrete(1000)})
    key = getkey()
    one, two = space.sample(key), space.sample(key)
    assert jax.tree.all(jax.tree.map(lambda x, y: bool(jnp.all(x == y)), one, two))
    assert not np.allclose(one["a"], one["b"])  # each entry has its own sub-key
    other = space.sample(getkey())
    assert not np.allclose(one["a"], other["a"])
    # Entry i draws with sub-key i of split(key), in sorted key order.
    keys = jax.random.split(key, 3)
    np.testing.assert_array_equal(one["b"], Box(0.0, 1.0, (16,)).sample(keys[1]))
    # Written in another order, the same space samples the same.
    swapped = Dict({"c": Discrete(1000), "b": Box(0.0, 1.0, (16,)), "a": Box(0.0, 1.0, (16,))})
    np.testing.assert_array_equal(swapped.sample(key)["a"], one["a"])


def test_dict_contains():
    space = _grid_space()
    x = space.sample(jax.random.key(1))
    assert bool(space.contains(x))
    assert not bool(space.contains({k: v for k, v in x.items() if k != "step"}))  # a missing key
    assert not bool(space.contains({**x, "extra": jnp.zeros(())}))  # an extra key
    assert not bool(space.contains({**x, "more": {"a": x["more"]["a"]}}))  # a missing nested key
    assert not bool(space.contains({**x, "grid": x["grid"][0]}))  # a wrong leaf shape
    assert not bool(space.contains({**x, "grid": x["grid"] + 2.0}))  # a leaf outside its space
    assert not bool(space.contains({**x, "step": jnp.asarray(10)}))
    assert not bool(space.contains({**x, "more": {**x["more"], "b": jnp.asarray([0, 2])}}))
    assert not bool(space.contains({**x, "step": {"nested": jnp.asarray(1)}}))  # a dict where an array belongs
    assert not bool(space.contains({**x, "more": jnp.zeros(2)}))  # an array where a dict belongs
    assert not bool(space.contains(x["grid"]))  # not a dict


def test_dict_equality_and_repr():
    assert _grid_space() == _grid_space()
    assert Dict({"a": Discrete(2)}) != Dict({"a": Discrete(3)})
    assert Dict({"a": Discrete(2)}) != Dict({"b": Discrete(2)})
    assert repr(Dict({"b": MultiBinary(2), "a": Discrete(3)})) == "Dict({'a': Discrete(n=3), 'b': MultiBinary(n=2)})"


@pytest.mark.parametrize(
    "spaces, message",
    [
        ({}, r"^Dict\(spaces\) must be a non-empty mapping from str keys to eqxrl spaces, got \{\}$"),
        ([("a", Discrete(2))], r"^Dict\(spaces\) must be a non-empty mapping from str keys to eqxrl spaces, got \["),
        (None, r"^Dict\(spaces\) must be a non-empty mapping from str keys to eqxrl spaces, got None$"),
        ({1: Discrete(2)}, r"^Dict\(spaces\) must have str keys, got the key 1$"),
        ({"a": 3}, r"^Dict\(spaces\)\['a'\] must be an eqxrl space \(such as Box or Discrete\), got 3$"),
        ({"a": Discrete(2), "b": {"c": Discrete(2)}}, r"^Dict\(spaces\)\['b'\] must be an eqxrl space"),
    ],
)
def test_dict_rejects_bad_spaces(spaces, message):
    with pytest.raises(ValueError, match=message):
        Dict(spaces)


# ----------------------------------------------------------------------------- Tuple


def _tuple_space():
    return Tuple((Box(0.0, 1.0, (2, 2)), Dict({"b": MultiBinary(2), "a": Discrete(3)}), Tuple((MultiDiscrete((3, 2)),))))


@pytest.mark.slow
@settings(max_examples=6, deadline=None)  # (each example compiles its sampling)
@given(space=est.tuples(), batch_shape=est.batch_shapes(), seed=st.integers(0, 2**16))
def test_tuple_samples_are_contained_tuples_of_the_declared_shapes(space, batch_shape, seed):
    samples = _check_samples(space, seed, batch_shape)
    assert isinstance(samples, tuple) and len(samples) == len(space.spaces)
    assert space.dtype == _dtypes(samples)


def test_tuple_shape_dtype_names_and_leaf_order():
    space = _tuple_space()
    assert space.shape == ((2, 2), {"a": (), "b": (2,)}, ((2,),))
    assert space.dtype == (jnp.float32, {"a": jnp.int32, "b": jnp.int32}, (jnp.int32,))
    assert list(space.named_spaces()) == ["0", "1", "2"]
    leaves, treedef = flatten_space(space)
    assert leaves == [Box(0.0, 1.0, (2, 2)), Discrete(3), MultiBinary(2), MultiDiscrete((3, 2))]
    element = space.sample(jax.random.key(0))
    assert isinstance(element, tuple) and jax.tree.structure(element) == treedef
    keys = jax.random.split(jax.random.key(0), 3)  # entry i draws with sub-key i
    np.testing.assert_array_equal(element[0], Box(0.0, 1.0, (2, 2)).sample(keys[0]))
    batch = jax.vmap(space.sample)(jax.random.split(jax.random.key(1), 4))
    assert bool(eqx.filter_jit(lambda s, x: jax.vmap(s.contains)(x))(space, batch).all())


def test_tuple_contains_equality_and_repr():
    space = _tuple_space()
    x = space.sample(jax.random.key(1))
    assert bool(space.contains(x)) and bool(space.contains(list(x)))
    assert not bool(space.contains(x[:2]))  # an entry missing
    assert not bool(space.contains((*x, x[0])))  # one too many
    assert not bool(space.contains((x[0] + 2.0, *x[1:])))  # an entry outside its space
    assert not bool(space.contains((x[0][0], *x[1:])))  # a wrong shape
    assert not bool(space.contains((x[0], x[0], x[2])))  # an array where a dict belongs
    assert not bool(space.contains({"0": x[0]}))  # not a tuple
    assert Tuple((Discrete(2),)) == Tuple([Discrete(2)]) != Tuple((Discrete(3),))
    assert repr(Tuple((Discrete(2),))) == "Tuple((Discrete(n=2),))"
    assert repr(Tuple((Discrete(2), MultiBinary(1)))) == "Tuple((Discrete(n=2), MultiBinary(n=1)))"


@pytest.mark.parametrize(
    "spaces, message",
    [
        ((), r"^Tuple\(spaces\) must be a non-empty tuple or list of eqxrl spaces, got \(\)$"),
        (Discrete(2), r"^Tuple\(spaces\) must be a non-empty tuple or list of eqxrl spaces, got Discrete\(n=2\)$"),
        ({"a": Discrete(2)}, r"^Tuple\(spaces\) must be a non-empty tuple or list of eqxrl spaces, got \{"),
        ((Discrete(2), 3), r"^Tuple\(spaces\)\[1\] must be an eqxrl space \(such as Box or Discrete\), got 3$"),
    ],
)
def test_tuple_rejects_bad_spaces(spaces, message):
    with no_runtime_typecheck(), pytest.raises(ValueError, match=message):
        Tuple(spaces)


# ----------------------------------------------------------------------------- flatten_space, sample_batch


def test_flatten_space_follows_jax_leaf_order():
    space = _grid_space()
    leaves, treedef = flatten_space(space)
    assert leaves == [Box(0.0, 1.0, (3, 3, 2)), MultiDiscrete((3, 2)), MultiBinary(2), Discrete(10)]
    element = space.sample(jax.random.key(0))
    assert jax.tree.structure(element) == treedef
    for leaf, x in zip(leaves, jax.tree.leaves(element)):  # the element's leaves, in the same order
        assert bool(leaf.contains(x))
    assert treedef.unflatten([leaf.shape for leaf in leaves])["more"]["a"] == (2,)
    assert flatten_space(Discrete(3)) == ([Discrete(3)], jax.tree.structure(0))


@pytest.mark.parametrize("space", [Discrete(3), MultiDiscrete((2, 4)), MultiBinary((2, 1)), Box(-1.0, 1.0, (2,))], ids=repr)
def test_sample_batch_of_no_axes_is_one_sample(space, getkey):
    key = getkey()
    np.testing.assert_array_equal(sample_batch(space, key), space.sample(key))
    assert sample_batch(space, key, (2, 3)).shape == (2, 3, *space.shape)
    assert sample_batch(space, key, (0,)).shape == (0, *space.shape)


def test_helpers_reject_bad_arguments():
    with no_runtime_typecheck():  # (reach our own messages, not the test hook's annotation checks)
        with pytest.raises(ValueError, match=r"^flatten_space\(space\) must be an eqxrl space, got \(3,\)$"):
            flatten_space((3,))
        with pytest.raises(ValueError, match=r"^sample_batch\(space\) must be an eqxrl space, got 'Discrete'$"):
            sample_batch("Discrete", jax.random.key(0))
        for bad in (3, [2], (2, -1), (2.0,), (True,)):
            with pytest.raises(ValueError, match=r"^sample_batch\(batch_shape\) must be a tuple of non-negative ints, got "):
                sample_batch(Discrete(2), jax.random.key(0), bad)
