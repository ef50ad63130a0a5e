"""Orthogonal initialisation, with every matrix of one initialisation drawn in one batch.

Why: each random call site in a compiled program becomes its own threefry fusion, and
XLA compiles each separately (~0.25 s apiece, optimised, on a 2-core CPU). An agent's
`init` draws one orthogonal matrix per layer, a dozen or more, so most of its compile
time went into near-identical random-number kernels.

`batched_orthogonal(fn)` runs `fn` twice under tracing. The first run records every
`orthogonal(key, shape, scale)` call made at the trace level of `fn` (and gets zeros
back: that run's outputs are discarded); the recorded matrices are then drawn
together (the normals in one vmapped call per size class) and the second run gets
them back in call order. Draws inside a transformation of `fn` (a `vmap`, a nested
`jit`) are made where they are, in both runs. The result is bit-identical to drawing each matrix on its own with
`jax.nn.initializers.orthogonal`: partitionable threefry's bits for `(n,)` are the
first n of its bits for any longer shape, so a slice of a longer draw is the same draw.

Every QR decomposition here is of one matrix, also under `vmap` (`_orthonormal`): a
batched LAPACK call deadlocks XLA:CPU (see `_orthonormal` and docs/architecture.md,
"Programs that hang: batched LAPACK calls in XLA:CPU").
"""

import contextlib
import contextvars
import dataclasses
import functools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax._src import core as _jax_core  # the trace-state check below; see `_trace_state`

from ...core import Key

# Normals drawn in one call: at most this many float32s of padding-included draws,
# otherwise one call per power-of-two size class.
_ONE_CALL_LIMIT = 1 << 22


def _trace_state() -> Any:
    """An opaque token of the current JAX trace (equal tokens: the same trace level).
    A draw made inside a transformation of the initialisation (a `vmap` building an
    ensemble) cannot be hoisted out of it, so only draws at the level where
    `batched_orthogonal` was entered are batched."""
    return _jax_core.get_opaque_trace_state(convention="eqxrl")


@dataclasses.dataclass
class _Draws:
    state: Any
    recording: bool
    calls: list = dataclasses.field(default_factory=list)  # (key, shape, scale) in call order
    drawn: list = dataclasses.field(default_factory=list)  # matrices, in the same order
    next: int = 0


_ACTIVE: contextvars.ContextVar[_Draws | None] = contextvars.ContextVar("eqxrl_orthogonal_draws", default=None)


@jax.custom_batching.sequential_vmap
def _orthonormal(z: jax.Array) -> jax.Array:
    """The Q of a tall matrix's QR, its columns' signs set so that R's diagonal is positive
    (what `jax.random.orthogonal` computes from its normals, bit for bit).

    Why `sequential_vmap`: batched (under `vmap`: a user's `jax.vmap(agent.init)`, IPPO's
    agents, an ensemble's members), the QR is one LAPACK call with a batch axis, which jaxlib
    0.10.2 splits into tasks on XLA:CPU's intra-op thread pool and then waits for, blocking the
    pool thread it runs on. The concurrency-optimised scheduler runs independent QRs at the
    same time; once every pool thread (two on a 2-core machine) waits inside such a call, the
    tasks they wait for never run and the program hangs with the process idle. A QR of one
    matrix runs on its own thread, so batching loops over the matrices instead (`lax.map`):
    the same LAPACK call per matrix, the same bits.
    """
    q, r = jnp.linalg.qr(z)
    return q * jnp.expand_dims(jnp.sign(jnp.diagonal(r)), -2)


def _draw_one(key: Key, shape: tuple[int, int], scale: float) -> jax.Array:
    """`jax.nn.initializers.orthogonal(scale)(key, shape, jnp.float32)`, with its QR made by
    `_orthonormal` (the same bits)."""
    if 0 in shape:
        return jnp.zeros(shape, jnp.float32)
    rows, cols = shape
    q = _orthonormal(jax.random.normal(key, (max(rows, cols), min(rows, cols)), jnp.float32))
    return jnp.array(scale, jnp.float32) * (q if rows >= cols else q.T)


def orthogonal(key: Key, shape: tuple[int, ...], scale: float) -> jax.Array:
    """An `(in_size, out_size)` float32 matrix with orthonormal columns (or rows, when
    `in_size < out_size`) times `scale`: `jax.nn.initializers.orthogonal(scale)`, drawn
    with the other matrices of the same initialisation inside `batched_orthogonal`."""
    if (
        not isinstance(shape, tuple)
        or len(shape) != 2
        or not all(isinstance(n, (int, np.integer)) and not isinstance(n, bool) and n >= 0 for n in shape)
    ):
        raise ValueError(f"orthogonal(shape) must be (in_size, out_size), two non-negative ints, got {shape!r}")
    draws = _ACTIVE.get()
    if draws is None or draws.state != _trace_state() or 0 in shape:
        # Not batched here: outside `batched_orthogonal`, or inside a transformation of the
        # function (a `vmap`, a nested `jit`) whose trace JAX may cache and reuse. Such a call
        # always draws its matrix, whichever run of the function it is in.
        return _draw_one(key, shape, scale)
    if draws.recording:  # the first run: its values are never used (and this trace is not cached)
        draws.calls.append((key, shape, scale))
        return jnp.zeros(shape, jnp.float32)
    if draws.next >= len(draws.calls) or draws.calls[draws.next][1:] != (shape, scale):
        raise RuntimeError(
            "batched_orthogonal: the function drew different matrices on its second run "
            f"(call {draws.next}: {shape} with scale {scale}); it must be deterministic"
        )
    matrix = draws.drawn[draws.next]
    draws.next += 1
    return matrix


def _draw_all(calls: list) -> list[jax.Array]:
    """Every recorded matrix, as `_draw_one` would draw it (see the module docstring)."""
    # jax.random.orthogonal(key, n=rows, m=cols): QR of normals of shape (max, min).
    tall = [(max(shape), min(shape)) for _, shape, _ in calls]
    sizes = [a * b for a, b in tall]
    classes: dict[int, list[int]] = {}
    one_call = len(calls) * max(sizes) <= _ONE_CALL_LIMIT
    for i, size in enumerate(sizes):
        classes.setdefault(0 if one_call else (size - 1).bit_length(), []).append(i)
    normals: list[Any] = [None] * len(calls)
    for members in classes.values():
        width = max(sizes[i] for i in members)
        keys = jnp.stack([calls[i][0] for i in members])
        flat = jax.vmap(lambda k: jax.random.normal(k, (width,), jnp.float32))(keys)
        for row, i in enumerate(members):
            normals[i] = flat[row, : sizes[i]].reshape(tall[i])
    out: list[Any] = []
    for (_, shape, scale), z in zip(calls, normals, strict=True):
        # One QR per matrix, never a batched one (see `_orthonormal`): a stack of the
        # matrices of one size would be a batched LAPACK call.
        q = _orthonormal(z)
        out.append(jnp.array(scale, jnp.float32) * (q if shape[0] >= shape[1] else q.T))
    return out


@contextlib.contextmanager
def _active(draws: _Draws):
    token = _ACTIVE.set(draws)
    try:
        yield
    finally:
        _ACTIVE.reset(token)


def batched_orthogonal(fn: Callable[..., Any]) -> Callable[..., Any]:
    """`fn` with its `orthogonal` draws made in one batch (see the module docstring).

    `fn` runs twice: it must be deterministic and free of side effects (an `init`).
    Meant for traced code (inside `jax.jit`): run eagerly, the first run's work is done twice.
    A use nested at the same trace level leaves the draws to the enclosing one; one inside a
    nested `jit` batches the draws of that program."""

    @functools.wraps(fn)
    def wrapped(*args, **kwargs):
        state = _trace_state()
        outer = _ACTIVE.get()
        if outer is not None and outer.state == state:
            return fn(*args, **kwargs)  # the enclosing use batches these draws
        if not jax.config.jax_threefry_partitionable:
            return fn(*args, **kwargs)  # a slice of a longer draw would not be the same draw
        record = _Draws(state, recording=True)
        with _active(record):
            first = fn(*args, **kwargs)
        if not record.calls:
            return first
        replay = _Draws(record.state, recording=False, calls=record.calls, drawn=_draw_all(record.calls))
        with _active(replay):
            result = fn(*args, **kwargs)
        if replay.next != len(replay.calls):
            raise RuntimeError(
                f"batched_orthogonal: the function made {replay.next} orthogonal draws on its second "
                f"run and {len(replay.calls)} on its first; it must be deterministic"
            )
        return result

    return wrapped

