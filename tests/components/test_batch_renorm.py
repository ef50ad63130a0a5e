"""BatchRenorm against Ioffe's formula computed by hand in NumPy (train and eval modes, the clipping of r
and d active and not, the warm-up and the relaxation), its statistics as explicit state, the
batch-renormalised MLP and Q-network, and every bad input's one-line message."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from eqxrl.components import BatchRenorm, BatchRenormMLP, BatchRenormPolicy, BatchRenormQHead, BatchRenormStats, Ensemble, ensemble_apply, ensemble_stats
from typecheck import no_runtime_typecheck


def reference(x, mean, var, steps, weight, bias, *, train, momentum=0.99, eps=1e-3, r_max=3.0, d_max=5.0, warmup=0, relax=0):
    """Ioffe (2017), Algorithm 1, in NumPy (float64): the output and the new (mean, var, steps)."""
    x, mean, var = (np.asarray(a, np.float64) for a in (x, mean, var))
    sigma = np.sqrt(var + eps)
    if not train:
        return (x - mean) / sigma * weight + bias, (mean, var, steps)
    flat = x.reshape(-1, x.shape[-1])
    mu_b, var_b = flat.mean(0), flat.var(0)
    sigma_b = np.sqrt(var_b + eps)
    frac = 0.0 if steps < warmup else (1.0 if relax == 0 else min((steps - warmup) / relax, 1.0))
    rm, dm = 1.0 + (r_max - 1.0) * frac, d_max * frac
    r = np.clip(sigma_b / sigma, 1.0 / rm, rm)
    d = np.clip((mu_b - mean) / sigma, -dm, dm)
    y = ((x - mu_b) / sigma_b * r + d) * weight + bias
    return y, (momentum * mean + (1 - momentum) * mu_b, momentum * var + (1 - momentum) * var_b, steps + 1)


def _stats(mean, var, steps):
    return BatchRenormStats(jnp.asarray(mean, jnp.float32), jnp.asarray(var, jnp.float32), jnp.asarray(steps, jnp.int32))


def _check(norm, x, mean, var, steps, train, **kw):
    weight = np.linspace(0.5, 1.5, norm.size)
    bias = np.linspace(-0.2, 0.3, norm.size)
    norm = eqx.tree_at(lambda n: (n.weight, n.bias), norm, (jnp.asarray(weight, jnp.float32), jnp.asarray(bias, jnp.float32)))
    y, new = norm(jnp.asarray(x, jnp.float32), _stats(mean, var, steps), train=train)
    y_ref, (m_ref, v_ref, s_ref) = reference(x, mean, var, steps, weight, bias, train=train, **kw)
    np.testing.assert_allclose(y, y_ref, rtol=2e-5, atol=2e-5)
    np.testing.assert_allclose(new.mean, m_ref, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(new.var, v_ref, rtol=1e-5, atol=1e-6)
    assert int(new.steps) == s_ref
    return y


RNG = np.random.default_rng(0)
X = RNG.normal(size=(32, 4)) * np.array([0.5, 1.0, 2.0, 8.0]) + np.array([0.0, 1.0, -3.0, 20.0])


def test_train_mode_with_r_and_d_clipped_matches_the_formula():
    # Running statistics far from the batch's: r (up to 8) and d (up to 20) exceed r_max=3, d_max=5.
    y = _check(BatchRenorm(4, warmup_steps=0), X, np.zeros(4), np.ones(4), 7, True, warmup=0)
    sigma_b = X.std(0)
    assert np.any(sigma_b > 3.0) and np.any(np.abs(X.mean(0)) > 5.0)  # (the clipping is active)
    assert np.all(np.isfinite(y))


def test_train_mode_inside_the_limits_matches_the_formula_and_is_the_running_normalisation():
    mean, var = X.mean(0) + 0.1 * X.std(0), X.var(0) * 1.2  # r, d within their limits
    y = _check(BatchRenorm(4, warmup_steps=0), X, mean, var, 3, True, warmup=0)
    # Unclipped, (x - mu_B) / sigma_B * r + d is (x - mean) / sigma: the running normalisation.
    weight, bias = np.linspace(0.5, 1.5, 4), np.linspace(-0.2, 0.3, 4)
    np.testing.assert_allclose(y, (X - mean) / np.sqrt(var + 1e-3) * weight + bias, rtol=1e-4, atol=1e-4)


def test_eval_mode_uses_the_running_statistics_and_leaves_them():
    mean, var = np.array([0.1, -0.2, 0.3, 5.0]), np.array([1.0, 2.0, 0.5, 9.0])
    _check(BatchRenorm(4), X, mean, var, 11, False)
    # One observation (no batch) is fine in eval mode.
    y, stats = BatchRenorm(4)(jnp.ones(4), _stats(mean, var, 0), train=False)
    assert y.shape == (4,) and int(stats.steps) == 0


@pytest.mark.parametrize("steps", [0, 99, 100])
def test_warm_up_is_batch_normalisation_until_warmup_steps(steps):
    y = _check(BatchRenorm(4, warmup_steps=100), X, np.zeros(4), np.ones(4), steps, True, warmup=100)
    if steps < 100:  # r = 1, d = 0: plain batch normalisation
        weight, bias = np.linspace(0.5, 1.5, 4), np.linspace(-0.2, 0.3, 4)
        np.testing.assert_allclose(y, (X - X.mean(0)) / np.sqrt(X.var(0) + 1e-3) * weight + bias, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("steps", [10, 15, 20, 40])
def test_relaxation_grows_the_limits_linearly(steps):
    norm = BatchRenorm(4, warmup_steps=10, relax_steps=10, r_max=2.0, d_max=1.0)
    _check(norm, X, np.zeros(4), np.ones(4), steps, True, warmup=10, relax=10, r_max=2.0, d_max=1.0)
    r, d = norm.limits(jnp.asarray(steps))
    frac = min((steps - 10) / 10, 1.0)
    np.testing.assert_allclose([r, d], [1.0 + frac, frac], rtol=1e-6)


def test_r_and_d_carry_no_gradient():
    # The gradient of sum(y * g) through train mode is batch norm's gradient scaled by r (a constant).
    norm = BatchRenorm(4, warmup_steps=0)
    stats = _stats(X.mean(0), X.var(0) * 4.0, 1)  # r about 1/2 for every feature, d = 0
    g = jnp.asarray(RNG.normal(size=X.shape), jnp.float32)
    grad = jax.grad(lambda x: jnp.sum(norm(x, stats, train=True)[0] * g))(jnp.asarray(X, jnp.float32))
    bn = BatchRenorm(4, warmup_steps=10)  # (plain batch norm at step 1)
    grad_bn = jax.grad(lambda x: jnp.sum(bn(x, stats, train=True)[0] * g))(jnp.asarray(X, jnp.float32))
    r = np.sqrt(X.var(0) + 1e-3) / np.sqrt(4.0 * X.var(0) + 1e-3)
    np.testing.assert_allclose(grad, r * grad_bn, rtol=1e-4, atol=1e-6)


def test_the_statistics_are_state_not_parameters(getkey):
    head = BatchRenormQHead(3, 1, (8,), key=getkey())
    stats = head.init_stats()
    # The network holds no statistics (an optimizer over it never sees them): 2 norms' weight and
    # bias, 2 linear layers' weight and bias.
    is_stats = lambda x: isinstance(x, BatchRenormStats)  # noqa: E731
    assert not any(is_stats(x) for x in jax.tree.leaves(head, is_leaf=is_stats))
    assert len(jax.tree.leaves(eqx.filter(head, eqx.is_inexact_array))) == 8
    obs, action = jnp.asarray(RNG.normal(size=(16, 3)), jnp.float32), jnp.ones((16, 1))
    q, new = head(obs, action, stats, train=True)
    assert q.shape == (16,) and all(int(s.steps) == 1 for s in new)
    assert not np.allclose(new[0].mean, stats[0].mean)
    q_eval, same = head(obs, action, new, train=False)
    assert q_eval.shape == (16,)
    for a, b in zip(jax.tree.leaves(same), jax.tree.leaves(new)):
        np.testing.assert_array_equal(a, b)


def test_the_policy_is_a_squashed_gaussian_on_its_batch_renormalised_features(getkey):
    """`BatchRenormPolicy` (CrossQ's batch-renormalised actor): its body's features through a linear
    output, squashed as `TanhGaussianHead`'s; train mode moves its statistics, eval mode reads them."""
    from eqxrl.components.networks._heads import tanh_gaussian  # (private: the squash TanhGaussianHead uses)

    policy = BatchRenormPolicy(3, 2, (8,), key=getkey(), log_std_min=-4.0, log_std_max=1.0)
    assert not any(isinstance(x, BatchRenormStats) for x in jax.tree.leaves(policy, is_leaf=lambda x: isinstance(x, BatchRenormStats)))
    stats = policy.init_stats()
    obs = jnp.asarray(RNG.normal(size=(16, 3)), jnp.float32)
    dist, new = policy(obs, stats, train=True)
    features, expected = policy.body(obs, stats, train=True)
    for a, b in zip(jax.tree.leaves(new), jax.tree.leaves(expected)):
        np.testing.assert_array_equal(a, b)
    want = tanh_gaussian(policy.out(features), -4.0, 1.0, -1.0, 1.0)
    np.testing.assert_allclose(dist.mode(), want.mode(), rtol=1e-6)
    assert dist.mode().shape == (16, 2) and np.all(np.abs(dist.sample(getkey())) <= 1.0)
    one, same = policy(obs[0], new, train=False)  # (eval mode takes one observation)
    assert one.mode().shape == (2,)
    for a, b in zip(jax.tree.leaves(same), jax.tree.leaves(new)):
        np.testing.assert_array_equal(a, b)


def test_an_ensemble_keeps_each_members_statistics(getkey):
    ens = Ensemble(lambda k: BatchRenormQHead(3, 2, (8, 8), key=k), 2, key=getkey())
    stats = ensemble_stats(ens)
    obs, action = jnp.asarray(RNG.normal(size=(16, 3)), jnp.float32), jnp.zeros((16, 2))
    qs, new = ensemble_apply(ens, stats, obs, action, train=True)
    assert qs.shape == (2, 16) and new[1].mean.shape == (2, 8)
    # The members differ, so their hidden layers' statistics do.
    assert not np.allclose(new[1].mean[0], new[1].mean[1])
    one, _ = ens.member(1)(obs, action, jax.tree.map(lambda s: s[1], stats), train=True)
    np.testing.assert_allclose(one, qs[1], rtol=1e-5, atol=1e-5)


def test_bad_inputs_are_named():
    with no_runtime_typecheck():
        for kw, message in [
            (dict(momentum=1.0), r"BatchRenorm\(momentum\) must be a number in \[0, 1\), got 1.0"),
            (dict(eps=0.0), r"BatchRenorm\(eps\) must be a number > 0, got 0.0"),
            (dict(r_max=0.5), r"BatchRenorm\(r_max\) must be a number >= 1, got 0.5"),
            (dict(d_max=-1), r"BatchRenorm\(d_max\) must be a number >= 0, got -1"),
            (dict(warmup_steps=1.5), r"BatchRenorm\(warmup_steps\) must be an int >= 0, got 1.5"),
            (dict(relax_steps=-1), r"BatchRenorm\(relax_steps\) must be an int >= 0, got -1"),
        ]:
            with pytest.raises(ValueError, match=message):
                BatchRenorm(4, **kw)
        with pytest.raises(ValueError, match=r"BatchRenorm\(size\) must be"):
            BatchRenorm(0)
        norm = BatchRenorm(4)
        with pytest.raises(ValueError, match=r"BatchRenorm: x must have shape \(\*batch, 4\), got shape \(8, 3\)"):
            norm(jnp.zeros((8, 3)), norm.init_stats(), train=True)
        with pytest.raises(ValueError, match=r"BatchRenorm: train mode needs a batch x of shape \(\*batch, 4\), got shape \(4,\)"):
            norm(jnp.zeros(4), norm.init_stats(), train=True)
        with pytest.raises(ValueError, match=r"BatchRenorm\(stats\) must be the BatchRenormStats of init_stats\(\) \(mean of shape \(4,\)\), got mean of shape \(3,\)"):
            norm(jnp.zeros((8, 4)), BatchRenorm(3).init_stats(), train=True)
        with pytest.raises(ValueError, match=r"BatchRenorm\(train\) must be True or False, got 1"):
            norm(jnp.zeros((8, 4)), norm.init_stats(), train=1)
        with pytest.raises(ValueError, match=r"BatchRenormMLP\(hidden_sizes\) must be a non-empty sequence of positive ints, got \(\)"):
            BatchRenormMLP(3, (), key=jax.random.key(0))
        with pytest.raises(ValueError, match=r"BatchRenormMLP\(stats\) must be the tuple of 2 BatchRenormStats"):
            BatchRenormMLP(3, (4,), key=jax.random.key(0))(jnp.zeros((2, 3)), BatchRenorm(3).init_stats(), train=True)
        head = BatchRenormQHead(3, 2, (4,), key=jax.random.key(0))
        with pytest.raises(ValueError, match=r"BatchRenormQHead: action must have shape \(5, 2\)"):
            head(jnp.zeros((5, 3)), jnp.zeros((4, 2)), head.init_stats(), train=True)
        with pytest.raises(ValueError, match=r"^BatchRenormPolicy needs log_std_min < log_std_max, got 2.0 and 1.0$"):
            BatchRenormPolicy(3, 2, key=jax.random.key(0), log_std_min=2.0, log_std_max=1.0)
        with pytest.raises(ValueError, match=r"^BatchRenormPolicy\(action_size\) must be a positive int, got 0$"):
            BatchRenormPolicy(3, 0, key=jax.random.key(0))
        policy = BatchRenormPolicy(3, 2, (4,), key=jax.random.key(0))
        with pytest.raises(ValueError, match=r"BatchRenormPolicy: obs must have shape \(\*batch, 3\)"):
            policy(jnp.zeros((5, 4)), policy.init_stats(), train=True)


def test_the_docs_example_runs():
    """docs/components/networks.md's batch renormalisation example."""
    import pathlib
    import re

    text = (pathlib.Path(__file__).parents[2] / "docs" / "components" / "networks.md").read_text()
    (block,) = [b for b in re.findall(r"^```python\n(.*?)^```", text, re.DOTALL | re.MULTILINE) if "BatchRenorm(" in b]
    ns = {"__name__": "docs_components_networks"}
    exec(compile(block, "docs/components/networks.md [Batch renormalisation]", "exec"), ns)
    assert int(ns["stats"].steps) == 1 and ns["y_eval"].shape == (64, 3)
