"""`check_torso`, `check_head`, `check_loss_term`: shapes over batch shapes, finite gradients,
and the same numbers batched or item by item, under `jit` and under `vmap`."""

from collections.abc import Callable, Sequence
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from ..components import AbstractDistribution, AbstractLossTerm, CategoricalHead, as_torso, is_recurrent
from ._common import as_key, fail, first_difference, path_name

BATCH_SHAPES = ((), (4,), (2, 3))


def _arrays(out: Any, key: Any) -> Any:
    """A module's output as arrays: a distribution by its mode and the log-probability of the
    mode (its entropy may be a sampled estimate, which differs item by item and batched)."""
    if isinstance(out, AbstractDistribution):
        mode = out.mode()
        return {"mode": mode, "log_prob": out.log_prob(mode)}
    return out


def _scalar(out: Any) -> Any:
    return sum(jnp.sum(x.astype(jnp.float32)) for x in jax.tree.leaves(out) if jnp.issubdtype(x.dtype, jnp.floating))


def _inputs(example: Sequence[Any], batch: tuple[int, ...], key: Any) -> list[Any]:
    out = []
    for i, x in enumerate(example):
        x = jnp.asarray(x)
        k = jax.random.fold_in(key, i)
        if jnp.issubdtype(x.dtype, jnp.floating):
            out.append(x + jax.random.normal(k, batch + x.shape, x.dtype))
        else:
            out.append(jnp.broadcast_to(x, batch + x.shape))
    return out


def _check_module(contract: str, label: str, module: Any, example: Sequence[Any], key: Any, batch_shapes, rtol, atol) -> None:
    eager = lambda m, *xs: _arrays(m(*xs), key)  # noqa: E731
    # Compiled, as agents call it (and an eager call dispatches op by op: ~10x slower here);
    # compared with one eager call below (jit invariance).
    call = eqx.filter_jit(eager)
    single = jax.eval_shape(lambda m: call(m, *example), module)
    for batch in batch_shapes:
        inputs = _inputs(example, batch, jax.random.fold_in(key, len(batch)))
        shapes = ", ".join(str(tuple(x.shape)) for x in inputs)
        try:
            out = call(module, *inputs)
        except Exception as error:  # (any failure here is the contract's to report)
            raise fail(contract, f"{label} on inputs of batch shape {batch} ({shapes}) raised {type(error).__name__}: {error}") from None
        for (path, o), s in zip(jax.tree_util.tree_leaves_with_path(out), jax.tree.leaves(single)):
            want = batch + tuple(s.shape)
            if tuple(o.shape) != want or o.dtype != s.dtype:
                raise fail(contract, f"{label} on inputs {shapes}: output {path_name(path)} is "
                           f"{o.dtype}{list(o.shape)}, expected {s.dtype}{list(want)} (batch {batch} + one item's)")  # fmt: skip
            if jnp.issubdtype(o.dtype, jnp.floating) and not bool(jnp.all(jnp.isfinite(o))):
                raise fail(contract, f"{label} on inputs {shapes}: output {path_name(path)} is not finite")
        if not batch:
            continue
        flat = [x.reshape((-1, *x.shape[len(batch):])) for x in inputs]
        first = call(module, *[x[0] for x in flat])  # (the program of batch ())
        batched_first = jax.tree.map(lambda o: o.reshape((-1, *o.shape[len(batch):]))[0], out)
        if (gap := first_difference(batched_first, first, rtol=rtol, atol=atol)) is not None:
            raise fail(f"{contract} (batched = item by item)", f"{label}: item 0 of a batch {batch} vs alone: {gap}")
        if len(batch) == 1:
            mapped = eqx.filter_jit(jax.vmap(lambda *xs: eager(module, *xs)))(*inputs)
            if (gap := first_difference(mapped, out, rtol=rtol, atol=atol)) is not None:
                raise fail(f"{contract} (vmap invariance)", f"{label}: vmap over a batch {batch} vs one call: {gap}")
            jitted = eager(module, *inputs)
            if (gap := first_difference(jitted, out, rtol=rtol, atol=atol)) is not None:
                raise fail(f"{contract} (jit invariance)", f"{label}: eagerly vs under jit, batch {batch}: {gap}")
    inputs = _inputs(example, (4,), key)
    grads = eqx.filter_jit(eqx.filter_grad(lambda m: _scalar(eager(m, *inputs))))(module)
    for path, g in jax.tree_util.tree_leaves_with_path(grads):
        if g is not None and not bool(jnp.all(jnp.isfinite(g))):
            raise fail(f"{contract} (finite gradients)", f"{label}: the gradient of parameter {jax.tree_util.keystr(path)} is not finite")


def check_torso(
    torso: Any,
    obs_shape: Sequence[int] = (4,),
    *,
    key: Any = None,
    batch_shapes: Sequence[tuple[int, ...]] = BATCH_SHAPES,
    rtol: float = 1e-5,
    atol: float = 1e-6,
) -> None:
    """Check a torso (an `AbstractTorso`, or a module class built as `cls(obs_shape, *,
    key)`): built for `obs_shape` with `make`, it maps flat float32 observations
    `(*batch, obs_size)` to finite float32 features `(*batch, features)` for every batch
    shape in `batch_shapes`, the same numbers batched as item by item, under `vmap` and
    under `jit`, with finite gradients.

    **Raises:** `eqxrl.testing.ContractError` naming the contract and the batch shape.
    """
    key = as_key(key)
    spec = as_torso(torso)
    if is_recurrent(spec):
        raise ValueError(f"check_torso(torso) checks feed-forward torsos, got the recurrent {type(spec).__name__} "
                         "(its carry is checked by check_agent on a recurrent agent)")  # fmt: skip
    encoder = spec.make(tuple(obs_shape), key=jax.random.fold_in(key, 1))
    label = f"{type(spec).__name__} built for obs_shape {tuple(obs_shape)}"
    obs = jnp.zeros((encoder.obs_size,), jnp.float32)
    out = jax.eval_shape(encoder, obs)
    if out.shape != (encoder.features,) or out.dtype != jnp.float32:
        raise fail("a torso maps one flat observation to float32 features (features,)",
                   f"{label} gave {out.dtype}{list(out.shape)}, its features = {encoder.features}")  # fmt: skip
    _check_module("a torso maps observations of any batch shape to features", label, encoder, [obs], key, batch_shapes, rtol, atol)


def check_head(
    head: Callable[..., Any],
    *example: Any,
    key: Any = None,
    batch_shapes: Sequence[tuple[int, ...]] = BATCH_SHAPES,
    rtol: float = 1e-5,
    atol: float = 1e-6,
) -> None:
    """Check a head (a built network: `CategoricalHead`, `ValueHead`, `ContinuousQHead`, ...)
    on `example`, its inputs for ONE item (`check_head(q, obs, action)`): for every batch
    shape, inputs `(*batch, *item_shape)` give outputs `(*batch, *one_item_output)` of the
    same dtypes, finite, the same numbers batched as item by item, under `vmap` and under
    `jit`, with finite gradients. A distribution is checked through its `mode()`,
    and `log_prob(mode)`.

    **Raises:** `eqxrl.testing.ContractError` naming the contract and the batch shape.
    """
    if not example:
        raise ValueError("check_head(head, *example) needs one unbatched input per argument of the head, got none")
    label = type(head).__name__
    _check_module("a head maps inputs of any batch shape alike", label, head, list(example), as_key(key), batch_shapes, rtol, atol)


def _default_outputs(network: Any, obs: Any) -> dict[str, Any]:
    out = network(obs)
    return {"obs": obs, "dist": out} if isinstance(out, AbstractDistribution) else {"obs": obs, "value": out}


def check_loss_term(
    term: Any,
    network: Any = None,
    *,
    obs_size: int = 3,
    outputs: Callable[[Any, Any], dict[str, Any]] = _default_outputs,
    batch: Any = None,
    key: Any = None,
    batch_shapes: Sequence[tuple[int, ...]] = ((1,), (4,), (2, 3)),
    rtol: float = 1e-5,
    atol: float = 1e-6,
) -> None:
    """Check an extra loss term: called as `term(network, batch, outputs(network, obs))` on
    observations `(*batch, obs_size)` of every batch shape, it returns a finite float32
    scalar loss and a dict of scalar metrics, the same under `jit`, with finite gradients
    with respect to the network.

    **Arguments:** `term`; `network` (default: a `CategoricalHead(obs_size, 2)`); `outputs`,
    the agent's outputs from the network and observations (default `{"obs", "dist"}` for a
    network that returns a distribution, else `{"obs", "value"}`); `batch`, passed through.

    **Raises:** `eqxrl.testing.ContractError` naming the contract and the batch shape.
    """
    if not isinstance(term, AbstractLossTerm):
        raise ValueError(f"check_loss_term(term) must be an eqxrl.components.AbstractLossTerm, got {type(term).__name__}")
    key = as_key(key)
    if network is None:
        network = CategoricalHead(obs_size, 2, hidden_sizes=(8,), key=jax.random.fold_in(key, 1))
    label, contract = type(term).__name__, "a loss term returns a finite scalar loss and scalar metrics"

    def loss(net, obs):
        return term(net, batch, outputs(net, obs))

    for shape in batch_shapes:
        obs = jax.random.normal(jax.random.fold_in(key, len(shape)), (*shape, obs_size))
        value, metrics = loss(network, obs)
        if jnp.shape(value) != () or jnp.result_type(value) != jnp.float32 or not bool(jnp.isfinite(value)):
            raise fail(contract, f"{label} on observations {tuple(obs.shape)} returned loss "
                       f"{jnp.result_type(value)}{list(jnp.shape(value))} = {np.asarray(value)!r}")  # fmt: skip
        if not isinstance(metrics, dict) or any(jnp.shape(m) != () for m in metrics.values()):
            raise fail(contract, f"{label} on observations {tuple(obs.shape)} returned metrics {metrics!r}, not a dict of scalars")
        jitted = eqx.filter_jit(loss)(network, obs)
        if (gap := first_difference(jitted, (value, metrics), rtol=rtol, atol=atol)) is not None:
            raise fail(f"{contract} (jit invariance)", f"{label} on observations {tuple(obs.shape)}: {gap}")
        grads = eqx.filter_grad(lambda net: loss(net, obs)[0])(network)
        for path, g in jax.tree_util.tree_leaves_with_path(grads):
            if g is not None and not bool(jnp.all(jnp.isfinite(g))):
                raise fail(f"{contract} (finite gradients)", f"{label} on observations {tuple(obs.shape)}: the gradient "
                           f"of parameter {jax.tree_util.keystr(path)} is not finite")  # fmt: skip
