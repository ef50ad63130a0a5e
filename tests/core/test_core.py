"""eqxrl.core: the checks and helpers every floor shares."""

import dataclasses
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from eqxrl import core
from typecheck import no_runtime_typecheck


def test_is_key_and_keys_as_data():
    key = jax.random.key(0)
    assert core.is_key(key) and core.is_key(jax.eval_shape(lambda: key))
    assert not core.is_key(jnp.zeros(2, jnp.uint32)) and not core.is_key(1.0)
    tree = {"k": jax.random.split(key, 3), "x": jnp.ones(2)}
    data = core.keys_as_data(tree)
    assert data["k"].dtype == jnp.uint32 and data["k"].shape[0] == 3
    np.testing.assert_array_equal(data["x"], tree["x"])


@pytest.mark.parametrize("value", [1, 7, np.int64(3)])
def test_positive_ints_pass(value):
    assert core.is_positive_int(value)
    assert core.check_positive_int("PPO", "num_envs", value) == int(value)


@pytest.mark.parametrize("value", [0, -2, True, 1.0, "4", None])
def test_positive_int_errors_name_the_owner_and_field(value):
    assert not core.is_positive_int(value)
    with pytest.raises(ValueError, match=rf"PPO\(num_envs\) must be a positive int, got {value!r}"):
        core.check_positive_int("PPO", "num_envs", value)


def test_concrete_scalar_skips_traced_and_stacked_values():
    assert core.concrete_scalar(jnp.asarray(0.5)) == 0.5
    assert core.concrete_scalar(jnp.ones(3)) is None
    seen = []
    jax.jit(lambda x: seen.append(core.concrete_scalar(x)) or x)(1.0)
    assert seen == [None]


def test_check_hyperparameter_message():
    core.check_hyperparameter("PPO", "clip_eps", jnp.asarray(0.2), lambda v: 0 < v < 1, "in (0, 1)")
    core.check_hyperparameter("PPO", "clip_eps", jnp.full(3, 5.0), lambda v: 0 < v < 1, "in (0, 1)")  # a stack: skipped
    with pytest.raises(ValueError, match=r"PPO\(clip_eps\) must be in \(0, 1\), got 1.5"):
        core.check_hyperparameter("PPO", "clip_eps", jnp.asarray(1.5), lambda v: 0 < v < 1, "in (0, 1)")


def test_a_hyperparameter_that_is_no_number_is_refused_naming_it():
    """`PPO(gamma="x")` used to say only "could not convert string to float: 'x'"."""
    import equinox as eqx

    class M(eqx.Module):
        rate: float = core.hyperparameter(1e-3)

    for bad in ("x", None, [1.0, "a"]):
        with pytest.raises(ValueError, match=rf"^rate must be a number \(or an array of numbers\), got {re.escape(repr(bad))}$"):
            M(bad)
    with pytest.raises(ValueError, match=r"^PPO\(clip_eps\) must be a number, got 'x'$"):
        core.check_hyperparameter("PPO", "clip_eps", "x", lambda v: 0 < v < 1, "in (0, 1)")

    class N(eqx.Module):  # any converter, named by the field it converts
        count: int = core.named_field(int, "a whole number", default=1)

    assert N("3").count == 3
    with pytest.raises(ValueError, match=r"^count must be a whole number, got 'three'$"):
        N("three")
    assert core.is_float_converter(dataclasses.fields(M)[0].metadata["converter"]) and not core.is_float_converter(int)


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda a: a.PPO("CartPole-v1", gamma="x"), r"gamma must be a number \(or an array of numbers\), got 'x'"),
        (lambda a: a.DQN("CartPole-v1", gamma="x"), r"gamma must be a number \(or an array of numbers\), got 'x'"),
        (lambda a: a.DQN("CartPole-v1", learning_rate="fast"), r"DQN\(learning_rate\) must be a number > 0 or a schedule, got 'fast'"),
        (lambda a: a.SAC("Pendulum-v1", tau=None), r"tau must be a number \(or an array of numbers\), got None"),
    ],
)
def test_an_agent_keyword_that_is_no_number_is_refused_naming_it(make, message):
    from eqxrl import agents
    from eqxrl.components import Adam

    with no_runtime_typecheck(), pytest.raises(ValueError, match=f"^{message}$"):
        make(agents)
    with pytest.raises(ValueError, match=r"^learning_rate must be a number or a schedule, got 'x'$"):
        Adam("x")


def test_tree_select():
    a = {"x": jnp.ones(2), "n": 3}
    b = {"x": jnp.zeros(2), "n": 4}
    np.testing.assert_array_equal(core.tree_select(jnp.asarray(True), a, b)["x"], 1.0)
    out = core.tree_select(jnp.asarray(False), a, b)
    np.testing.assert_array_equal(out["x"], 0.0)
    assert out["n"] == 3  # static leaves come from on_true
    # A Python scalar on one side and an array on the other is selected (gymnax's time=0 at reset).
    mixed = core.tree_select(jnp.asarray(False), {"t": 0}, {"t": jnp.asarray(5)})
    assert int(mixed["t"]) == 5


def test_one_line_and_nanmean():
    assert core.one_line(ValueError("a\n  b\tc")) == "a b c"
    assert core.nanmean([1.0, np.nan, 3.0, np.inf]) == 2.0
    assert np.isnan(core.nanmean([np.nan]))


def test_hyperparameter_is_a_float32_array():
    import equinox as eqx

    class M(eqx.Module):
        rate: float = core.hyperparameter(1e-3)

    assert M().rate.dtype == jnp.float32 and M(2).rate.shape == ()


def test_tree_mismatch_names_the_first_difference():
    a = {"w": jnp.zeros((4, 16)), "b": jnp.zeros(16, jnp.int32)}
    assert core.tree_mismatch(a, a) is None
    assert core.tree_mismatch(a, {"w": jnp.zeros((4, 8)), "b": a["b"]}) == "['w']: shape (4, 16) expected, got (4, 8)"
    assert core.tree_mismatch(a, {"w": a["w"], "b": jnp.zeros(16)}) == "['b']: dtype int32 expected, got float32"
    assert core.tree_mismatch(a, {"w": a["w"]}) == "['b']: expected, missing"
    assert core.tree_mismatch({"w": a["w"]}, a) == "['b']: not expected, present"


def test_version_note_names_another_version_and_adds_nothing_for_this_one_or_none():
    assert core.version_note({"eqxrl_version": core.__version__}) == ""
    assert core.version_note({"eqxrl_version": "0.2.0"}) == f" (written by eqxrl 0.2.0; this is eqxrl {core.__version__})"
    # a config a user wrote names no version, and a damaged record is not a version
    for record in ({}, {"eqxrl_version": None}, {"eqxrl_version": 2}, None, ["0.2.0"]):
        assert core.version_note(record) == ""
