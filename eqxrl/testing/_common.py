"""What the checks share: the error they raise, the comparison of two pytrees and the agent
built on a probe."""

import dataclasses
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from ..agents import AbstractAgent


class ContractError(AssertionError):
    """A component broke one of the contracts `eqxrl.testing` checks.

    An `AssertionError`, so a check called in a test fails it like an `assert`; the
    message names the contract and the smallest failing example.
    """


def fail(contract: str, detail: str) -> ContractError:
    """**Returns:** the `ContractError` `"<contract>: <detail>"` (for the caller to raise)."""
    return ContractError(f"{contract}: {detail}")


def path_name(path) -> str:
    return jax.tree_util.keystr(path) or "<root>"


def _host(x: Any) -> np.ndarray:
    if isinstance(x, jax.Array) and jnp.issubdtype(x.dtype, jax.dtypes.prng_key):
        x = jax.random.key_data(x)
    return np.asarray(x)


def first_difference(a: Any, b: Any, *, rtol: float, atol: float) -> str | None:
    """The first array leaf where `a` and `b` differ beyond `rtol`/`atol` (NaN equals NaN;
    integers, booleans and keys exactly), or where their structures differ.

    **Returns:** a description (`"leaf .learner.q... : max |a - b| = 0.3 at index (2,)"`) or None.
    """
    la, ta = jax.tree_util.tree_flatten_with_path(eqx.filter(a, eqx.is_array))
    lb, tb = jax.tree_util.tree_flatten_with_path(eqx.filter(b, eqx.is_array))
    if ta != tb:
        return f"the structures differ: {ta} vs {tb}"
    for (path, x), (_, y) in zip(la, lb):
        x, y = _host(x), _host(y)
        if x.shape != y.shape or x.dtype != y.dtype:
            return f"leaf {path_name(path)} is {x.dtype}{list(x.shape)} vs {y.dtype}{list(y.shape)}"
        if np.issubdtype(x.dtype, np.inexact):
            close = np.isclose(x, y, rtol=rtol, atol=atol, equal_nan=True)
        else:
            close = x == y
        if not np.all(close):
            index = tuple(int(i) for i in np.argwhere(~close)[0])
            gap = ""
            if np.issubdtype(x.dtype, np.inexact):
                gap = f", max |a - b| = {float(np.nanmax(np.abs(x.astype(np.float64) - y.astype(np.float64)))):.3g}"
            return f"leaf {path_name(path)}[{', '.join(map(str, index))}] is {x[index]!r} vs {y[index]!r}{gap}"
    return None


def as_key(key: Any, seed: int = 0) -> Any:
    """`key` as a typed PRNG key (None: `jax.random.key(seed)`; an int: that seed)."""
    if key is None:
        return jax.random.key(seed)
    if isinstance(key, (int, np.integer)):
        return jax.random.key(int(key))
    return key


def on_env(agent: Any, env: Any, **settings: Any) -> AbstractAgent:
    """`agent` on `env`, as the checks take it: a class built as `agent(env, **settings)`, an
    instance with its `env` replaced (its own settings kept)."""
    if isinstance(agent, AbstractAgent):
        return dataclasses.replace(agent, env=env)
    return agent(env, **settings)
