"""Tests for `eqxrl.components.Adam`: Adam with clipping, array-leaf hyperparameters, annealing."""

import equinox as eqx
import hypothesis.strategies as st
import jax
import jax.numpy as jnp
import jaxtyping
import numpy as np
import optax
import pytest
from hypothesis import given, settings

from eqxrl.components import Adam
from typecheck import no_runtime_typecheck


def _params():
    # A non-array leaf and an integer array must be left alone by the optimizer.
    return {"w": jnp.array([1.0, -2.0, 3.0]), "b": jnp.array(0.5), "n": jnp.array(3), "name": "p"}


def _grads(params, scale):
    return {"w": scale * jnp.array([0.3, -4.0, 1.0]), "b": jnp.asarray(scale * 2.0), "n": None, "name": None}


def _float_part(tree):
    return {k: tree[k] for k in ("w", "b")}


def _run(opt: Adam, scales, progress=0.0):
    params = _params()
    state = opt.init(params)
    for s in scales:
        params, state = opt.update(_grads(params, s), state, params, progress)
    return params, state


def _run_optax(tx: optax.GradientTransformation, scales):
    params = _float_part(_params())
    with jax.numpy_dtype_promotion("standard"):  # optax itself is not strict-promotion clean
        state = tx.init(params)
        for s in scales:
            updates, state = tx.update(_float_part(_grads(params, s)), state, params)
            params = optax.apply_updates(params, updates)
    return params


# Gradients whose size varies a lot from step to step, so that clipping changes Adam's moments.
SCALES = [0.1, 30.0, 0.5, 100.0, 2.0]


@pytest.mark.slow
@pytest.mark.parametrize(
    "clip, reference",
    [
        ("global_norm", lambda c: optax.clip_by_global_norm(c)),
        ("value", lambda c: optax.clip(c)),
        ("none", lambda c: optax.identity()),
    ],
)
def test_clipping_matches_optax(clip, reference):
    lr, c = 0.1, 1.0
    params, _ = _run(Adam(lr, c, clip=clip), SCALES)
    expected = _run_optax(optax.chain(reference(c), optax.adam(lr, eps=1e-5)), SCALES)
    for k in ("w", "b"):
        np.testing.assert_allclose(params[k], expected[k], rtol=1e-5, atol=1e-6)
    # Non-float leaves are untouched.
    assert int(params["n"]) == 3 and params["name"] == "p"


def test_clipping_modes_differ_from_each_other():
    # Guards the test above: on these gradients the three modes really are distinguishable.
    results = {clip: _run(Adam(0.1, 1.0, clip=clip), SCALES)[0]["w"] for clip in ("global_norm", "value", "none")}
    assert not np.allclose(results["global_norm"], results["value"], atol=1e-4)
    assert not np.allclose(results["global_norm"], results["none"], atol=1e-4)
    assert not np.allclose(results["value"], results["none"], atol=1e-4)


def test_infinite_max_grad_norm_disables_clipping():
    clipped_off, _ = _run(Adam(0.1), SCALES)  # default max_grad_norm = inf
    plain = _run_optax(optax.adam(0.1, eps=1e-5), SCALES)
    np.testing.assert_allclose(clipped_off["w"], plain["w"], rtol=1e-5, atol=1e-6)


@settings(max_examples=20, deadline=None)
@given(lr=st.floats(1e-5, 1.0), progress=st.floats(-0.5, 1.5))
def test_annealing_is_linear_in_progress(lr, progress):
    annealed = Adam(lr, anneal=True)
    # lr * (1 - clip(progress, 0, 1)), evaluated in float32 like the optimizer does.
    p32 = np.clip(np.float32(progress), np.float32(0), np.float32(1))
    expected = np.float32(lr) * (np.float32(1) - p32)
    np.testing.assert_allclose(annealed.current_learning_rate(progress), expected, rtol=1e-6, atol=1e-12)
    np.testing.assert_allclose(annealed.current_learning_rate(jnp.float32(progress)), expected, rtol=1e-6, atol=1e-12)
    # Without annealing the learning rate ignores progress.
    np.testing.assert_allclose(Adam(lr).current_learning_rate(progress), lr, rtol=1e-6)


@pytest.mark.slow
@pytest.mark.parametrize("anneal, progress", [(False, 0.0), (False, 0.7), (True, 0.0), (True, 0.25), (True, 1.0)])
def test_state_records_the_learning_rate_in_use(anneal, progress):
    opt = Adam(0.01, 0.5, anneal=anneal)
    _, state = _run(opt, [1.0, 2.0], progress)
    expected = 0.01 * (1 - progress) if anneal else 0.01
    np.testing.assert_allclose(state.hyperparams["learning_rate"], expected, rtol=1e-6)
    np.testing.assert_allclose(state.hyperparams["max_grad_norm"], 0.5)


def test_annealed_step_size_scales_the_update():
    # Adam's first step moves each coordinate by about lr * sign(grad): annealing shrinks it linearly.
    full, _ = _run(Adam(0.1, anneal=True), [1.0], progress=0.0)
    half, _ = _run(Adam(0.1, anneal=True), [1.0], progress=0.5)
    done, _ = _run(Adam(0.1, anneal=True), [1.0], progress=1.0)
    start = _params()["w"]
    np.testing.assert_allclose(start - full["w"], 0.1 * np.sign([0.3, -4.0, 1.0]), rtol=1e-3)
    np.testing.assert_allclose(start - half["w"], 0.05 * np.sign([0.3, -4.0, 1.0]), rtol=1e-3)
    np.testing.assert_allclose(done["w"], start)


def test_learning_rate_is_an_array_leaf_and_does_not_recompile():
    opt = Adam(1e-3, 1.0, anneal=True)
    assert isinstance(opt.learning_rate, jax.Array) and opt.learning_rate.dtype == jnp.float32
    assert isinstance(opt.max_grad_norm, jax.Array)

    @eqx.filter_jit
    @eqx.debug.assert_max_traces(max_traces=1)
    def step(opt, params, state, progress):
        grads = eqx.filter_grad(lambda p: jnp.sum(jnp.square(p["w"])) + jnp.square(p["b"]))(params)
        return opt.update(grads, state, params, progress)

    params = _params()
    state = opt.init(params)
    moved = []
    for lr, max_norm, progress in [(1e-3, 1.0, 0.0), (1e-1, 0.5, 0.0), (1e-1, 0.5, 0.5)]:
        new_opt = eqx.tree_at(
            lambda o: (o.learning_rate, o.max_grad_norm), opt, (jnp.float32(lr), jnp.float32(max_norm))
        )
        new_params, new_state = step(new_opt, params, state, jnp.float32(progress))
        np.testing.assert_allclose(new_state.hyperparams["learning_rate"], lr * (1 - progress), rtol=1e-6)
        np.testing.assert_allclose(new_state.hyperparams["max_grad_norm"], max_norm)
        moved.append(float(jnp.abs(new_params["w"] - params["w"]).max()))
    # A larger learning rate takes a larger step (Adam's first step ~ lr).
    np.testing.assert_allclose(moved, [1e-3, 1e-1, 5e-2], rtol=1e-2)


@pytest.mark.slow
def test_population_of_learning_rates_under_vmap():
    # A PBT population: one compiled program, each member with its own learning rate.
    lrs = jnp.array([1e-3, 1e-2, 1e-1])
    opts = eqx.filter_vmap(lambda lr: Adam(lr, 1.0))(lrs)
    assert opts.learning_rate.shape == (3,)
    params = _float_part(_params())
    grads = {"w": jnp.array([0.3, -4.0, 1.0]), "b": jnp.asarray(2.0)}

    def one(opt):
        state = opt.init(params)
        return opt.update(grads, state, params)

    new_params, states = eqx.filter_vmap(one)(opts)
    np.testing.assert_allclose(states.hyperparams["learning_rate"], lrs, rtol=1e-6)
    step = np.abs(np.asarray(new_params["w"]) - np.asarray(params["w"])).max(axis=1)
    np.testing.assert_allclose(step, lrs, rtol=1e-3)


@pytest.mark.slow
@settings(max_examples=15, deadline=None)
@given(
    target=st.lists(st.floats(0.5, 5.0), min_size=3, max_size=3),
    signs=st.lists(st.sampled_from([-1.0, 1.0]), min_size=3, max_size=3),
    clip=st.sampled_from(["global_norm", "value", "none"]),
    anneal=st.booleans(),
)
def test_steps_reduce_a_quadratic_loss(target, signs, clip, anneal):
    # |target| >= 0.5 > lr / 2: Adam's first step (~lr per coordinate) cannot overshoot.
    target = jnp.asarray(np.multiply(target, signs), jnp.float32)
    opt = Adam(0.1, 1.0, clip=clip, anneal=anneal)

    def loss(p):
        return jnp.sum(jnp.square(p["w"] - target))

    params = {"w": jnp.zeros(3)}
    state = opt.init(params)
    start = float(loss(params))
    losses = []
    for i in range(20):
        grads = jax.grad(loss)(params)
        params, state = opt.update(grads, state, params, i / 40)
        losses.append(float(loss(params)))
    assert losses[0] < start
    # >= 1.5 travelled per coordinate (>= 0.76 of it annealed): each term drops below 0.7x.
    assert losses[-1] < 0.7 * start


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(learning_rate=0.0), r"learning_rate must be > 0, got 0.0"),
        (dict(learning_rate=-1e-3), r"learning_rate must be > 0, got -0.001"),
        (dict(learning_rate=1e-3, max_grad_norm=0.0), r"max_grad_norm must be > 0 \(inf disables clipping\), got 0.0"),
    ],
)
def test_optimizer_rejects_bad_config(kwargs, match):
    with pytest.raises(ValueError, match=match):
        Adam(**kwargs)


def test_optimizer_rejects_unknown_clip_mode():
    # The Literal annotation catches it under the test hook; users get eqxrl's ValueError.
    with pytest.raises(jaxtyping.TypeCheckError, match="clip"):
        Adam(1e-3, clip="norm")
    with no_runtime_typecheck():
        with pytest.raises(ValueError, match=r"Adam\(clip\) must be 'global_norm', 'value' or 'none', got 'norm'"):
            Adam(1e-3, clip="norm")


def test_optimizer_b1_is_adams_and_checked():
    # b1 reaches optax's Adam: after one step from zero moments, m = (1 - b1) * g.
    params = {"w": jnp.ones(3)}
    grads = {"w": jnp.full(3, 2.0)}
    for b1 in (0.9, 0.5):
        opt = Adam(1e-3, b1=b1)
        _, state = opt.update(grads, opt.init(params), params)
        mu = jax.tree.leaves(state.inner_state[1][0].mu)[0]
        np.testing.assert_allclose(mu, (1 - b1) * 2.0, rtol=1e-6)
    with no_runtime_typecheck():
        for bad in (1.0, -0.1, True):
            with pytest.raises(ValueError, match=rf"Adam\(b1\) must be a number in \[0, 1\), got {bad!r}"):
                Adam(1e-3, b1=bad)


def test_adam_moments_are_one_flat_vector():
    # Float leaves of one dtype: Adam's moments are one vector over every float leaf
    # (a few fused kernels per step, not a few per weight matrix), with the same numbers
    # as optax on the tree (test_clipping_matches_optax).
    params, state = _run(Adam(0.1, 1.0), SCALES)
    adam = state.inner_state[1][0]
    assert adam.mu.shape == (4,) and adam.nu.shape == (4,)  # w (3) and b (1); the int leaf is left out
    assert params["w"].shape == (3,) and params["b"].shape == ()


def test_a_file_written_before_the_rename_to_adam_still_loads():
    """eqxrl 0.2's files name the class `eqxrl.components:Optimizer` (now `Adam`): they load."""
    from eqxrl.core import from_spec, to_spec

    spec = to_spec(Adam(3e-4, 0.5))
    assert spec["class"] == "eqxrl.components:Adam"
    old = {k: v for k, v in spec.items() if k != "b1"}  # (0.2 had no b1 field: its default)
    for path in ("eqxrl.components:Optimizer", "eqxrl.components._optimizers:Optimizer"):
        assert from_spec({**old, "class": path}, "critic_optimizer") == Adam(3e-4, 0.5)
