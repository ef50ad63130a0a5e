"""Batches the devices do not divide, and states handed back from several devices.

`train` pads a batch of seeds or a sweep whose size is not a multiple of the device count
with copies of its first member (`padded_batch`), shards it (`eqxrl.loop.member_sharding`)
and drops the copies from everything the caller sees; the final state comes back on one
device (`on_one_device`).
"""

from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, PyTree

from ..agents import Batch

__all__ = ["devices_padding", "on_one_device", "pad_members", "padded_batch"]


def devices_padding(batch: Batch, shard: Any = None) -> int:
    """Members to add to a batch so that its size is a multiple of the device count (0 for
    one device, one run, `shard=False` or a batch that divides already)."""
    count = len(jax.devices())
    return 0 if shard is False or count == 1 or not batch.batched else -batch.size % count


def _through_host(x: Any, edit: Callable[[np.ndarray], np.ndarray]) -> Any:
    """`x` (a PRNG key array too) copied to the host shard by shard, `edit`ed there, and put
    on the first device: no XLA program runs across devices on the way (see `on_one_device`)."""
    key = jnp.issubdtype(x.dtype, jax.dtypes.prng_key)
    out = jax.device_put(edit(np.asarray(jax.random.key_data(x) if key else x)), jax.devices()[0])
    return jax.random.wrap_key_data(out, impl=jax.random.key_impl(x)) if key else out


def pad_members(tree: PyTree, pad: int) -> PyTree:
    """`tree` with its member axis (every array leaf with a leading axis) extended by `pad`
    copies of member 0, on the first device (through the host, as `on_one_device`: the tree
    may be a sharded run's checkpoint); scalars (shared by every member) as they are."""
    if not pad:
        return tree
    grow = lambda data: np.concatenate([data, np.repeat(data[:1], pad, axis=0)])  # noqa: E731
    return jax.tree.map(lambda x: _through_host(x, grow) if eqx.is_array(x) and x.ndim else x, tree)


def on_one_device(tree: PyTree, members: int | None = None) -> PyTree:
    """`tree` (a sharded run's state) with every array on the first device, its member axis
    cut to `members` (None: kept).

    Through the host, shard by shard: XLA:CPU (jax 0.10.2) deadlocks on eager ops that need a
    collective across CPU devices (slicing the member axis, or a mean over it, applied leaf by
    leaf) once a few are in flight, so a state handed to the user holds no sharded array."""

    def one(x):
        if not isinstance(x, jax.Array) or (members is None and len(x.sharding.device_set) == 1):
            return x
        return _through_host(x, lambda data: data[:members] if members is not None and x.ndim else data)

    return jax.tree.map(one, tree)


def padded_batch(batch: Batch, keys: Array, pad: int) -> tuple[Batch, Array]:
    """The batch and its keys with `pad` more members, copies of member 0 (their results are
    dropped: members never interact, so the others' numbers are those of the batch alone)."""
    if not pad:
        return batch, keys
    agent = pad_members(batch.agent, pad) if batch.stacked else batch.agent
    return Batch(agent, batch.size + pad, batch.stacked), pad_members(keys, pad)
