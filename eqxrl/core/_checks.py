"""Argument checks and small tree helpers that every floor shares."""

from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Bool, PyTree


def is_key(x: Any) -> bool:
    """Whether `x` is a typed PRNG key array (or the shape of one)."""
    return isinstance(x, (jax.Array, jax.ShapeDtypeStruct)) and jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key)


def keys_as_data(tree: PyTree) -> PyTree:
    """`tree` with every PRNG key leaf replaced by its raw `uint32` key data (for serialisation)."""
    return jax.tree.map(lambda x: jax.random.key_data(x) if is_key(x) else x, tree)


def is_positive_int(value: Any) -> bool:
    """Whether `value` is an `int` (not a `bool`) of at least 1."""
    return bool(not isinstance(value, bool) and isinstance(value, (int, np.integer)) and value >= 1)


def check_positive_int(owner: str, name: str, value: Any) -> int:
    """Raise `ValueError("PPO(num_envs) must be a positive int, got 0")` unless `value` is one.

    **Returns:** `value` as a Python int.
    """
    if not is_positive_int(value):
        raise ValueError(f"{owner}({name}) must be a positive int, got {value!r}")
    return int(value)


def concrete_scalar(value: Any, what: str | None = None, expected: str = "a number") -> float | None:
    """`value` as a Python float when it is a concrete scalar, else None.

    Traced values (inside jit/vmap) and stacked populations (non-scalar leaves)
    are None: they were checked where each member was made. A value that is no number
    (a string, None) is refused: with `what` (`"PPO(gamma)"`) in one line naming it.
    """
    if isinstance(value, jax.core.Tracer) or jnp.ndim(value) != 0:
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        if what is None:
            raise
        raise ValueError(f"{what} must be {expected}, got {value!r}") from None


def check_hyperparameter(owner: str, name: str, value: Any, ok, expected: str) -> None:
    """Raise `ValueError("PPO(clip_eps) must be in (0, 1), got 1.5")` for a bad concrete scalar
    (traced and stacked values are skipped: see `concrete_scalar`)."""
    v = concrete_scalar(value, f"{owner}({name})")
    if v is not None and not ok(v):
        raise ValueError(f"{owner}({name}) must be {expected}, got {v:g}")


def tree_select(pred: Bool[Array, ""], on_true: PyTree, on_false: PyTree) -> PyTree:
    """Leafwise `where(pred, on_true, on_false)` over two trees of one structure.

    A leaf that is an array on either side is selected (gymnax resets some envs with
    a Python int, `time=0`, where the stepped state holds an array); a leaf that is
    an array on neither side (a static part) is taken from `on_true`."""
    return jax.tree.map(
        lambda a, b: jnp.where(pred, a, b) if eqx.is_array(a) or eqx.is_array(b) else a, on_true, on_false
    )


def one_line(e: BaseException) -> str:
    """An exception's message on one line (for command-line errors)."""
    return " ".join(str(e).split())


def nanmean(x: Any) -> float:
    """The mean of the finite entries of `x` (NaN when there are none)."""
    x = np.asarray(x, dtype=np.float64)
    x = x[np.isfinite(x)]
    return float(x.mean()) if x.size else float("nan")


def tree_mismatch(expected: PyTree, got: PyTree) -> str | None:
    """The first difference between two trees of arrays (or shapes), for error messages:
    a leaf path present in one only, or a leaf whose shape or dtype differs.

    **Returns:** e.g. `"actor.layers[0].weight: shape (4, 64) expected, got (4, 128)"`,
    or None when both have the same paths, shapes and dtypes.
    """

    def leaves(tree):
        flat = jax.tree_util.tree_flatten_with_path(tree)[0]
        return {jax.tree_util.keystr(p).lstrip(".") or "<root>": x for p, x in flat if hasattr(x, "shape")}

    want, have = leaves(expected), leaves(got)
    for path in list(want) + [p for p in have if p not in want]:
        if path not in have:
            return f"{path}: expected, missing"
        if path not in want:
            return f"{path}: not expected, present"
        a, b = want[path], have[path]
        if tuple(a.shape) != tuple(b.shape):
            return f"{path}: shape {tuple(a.shape)} expected, got {tuple(b.shape)}"
        if a.dtype != b.dtype:
            return f"{path}: dtype {a.dtype} expected, got {b.dtype}"
    return None
