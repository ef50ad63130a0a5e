"""`make_train`: the training run as a pure function of a key, for `jax.jit`, `jax.vmap`
and a user's own `lax.scan` (the PureJaxRL idiom). `train` is the host shell around
the same two pieces (`TrainFunction.init` and `TrainFunction.run`)."""

from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, PyTree

from ..agents import Batch
from ._chunk import Chunk, chunk, init_state
from ._evaluate import default_eval_steps
from ._keys import batch_and_keys, eval_iterations_for, num_iterations_for

__all__ = ["TrainFunction", "make_train"]


class TrainFunction(eqx.Module):
    """A whole training run as a pure function: `train_fn(key) -> (state, metrics)`.

    Made by `make_train`. No host side effects: jit it, vmap it over keys or over
    an agent's hyperparameter leaves, or call it inside a larger program.

    - `agent`: the agent, or a `Stacked` population.
    - `num_iterations`: training iterations (static).
    - `eval_every`: iterations between deterministic evaluations (0: none), each of
      `eval_episodes` episodes: the `eval_return` metric (see `train(eval_every=)`).
    """

    agent: Any
    num_iterations: int = eqx.field(static=True)
    eval_every: int = eqx.field(static=True, default=0)
    eval_episodes: int = eqx.field(static=True, default=10)

    def init(self, key: Array) -> PyTree:
        """**Returns:** the initial training state (a stack splits a single key per member)."""
        return init_state(*batch_and_keys(self.agent, key))

    def chunk_config(self, key: Array, start: Any, length: int, guard: bool = False, sharding: Any = None) -> Chunk:
        """The `Chunk` of `length` iterations from iteration `start` (iterations past the
        budget are skipped; `guard`: the non-finite guard of `train(nan_guard=True)`;
        `sharding`: the member axis's, see `eqxrl.loop.member_sharding`)."""
        batch, keys = batch_and_keys(self.agent, key)
        episodes, max_steps = self.eval_episodes, default_eval_steps(batch.agent)
        if not self.eval_every:
            # No evaluation runs: its (static) settings stay at Chunk's defaults, so runs that
            # differ only in an unused `eval_episodes` share one compiled program.
            episodes, max_steps = Chunk.eval_episodes, Chunk.eval_max_steps
        # A concrete start as a NumPy scalar: `jnp.asarray` would dispatch a conversion
        # per chunk (measurable with 1-iteration chunks).
        index = lambda x: np.asarray(x, np.int32) if isinstance(x, (int, np.integer)) else jnp.asarray(x, jnp.int32)  # noqa: E731
        return Chunk(
            batch, index(start), index(self.num_iterations), length, guard,
            self.eval_every, episodes, max_steps, keys if self.eval_every else None, sharding,
        )  # fmt: skip

    def run(self, state: PyTree, key: Array, start: Any, length: int) -> tuple[PyTree, dict[str, Array]]:
        """`length` iterations from iteration `start`. **Returns:** `(state, metrics)`,
        metrics iterations-first."""
        return chunk(self.chunk_config(key, start, length), state)

    def __call__(self, key: Array) -> tuple[PyTree, dict[str, Array]]:
        """**Arguments:** `key`, `jax.random.key(seed)` (or `(n,)` keys for n seeds in one call).

        **Returns:** `(state, metrics)`: the final state and per-iteration metrics of
        shape `(num_iterations,)`, or `(n, num_iterations)` for seeds and stacks, as
        `eqxrl.train` returns them (as arrays, on the device).
        """
        state, metrics = self.run(self.init(key), key, 0, self.num_iterations)
        if batch_and_keys(self.agent, key)[0].batched:
            metrics = jax.tree.map(lambda m: jnp.moveaxis(m, 0, 1), metrics)
        return state, metrics


def make_train(
    agent: Any, total_steps: Any, *, eval_every: Any = None, eval_episodes: Any = 10
) -> Callable[[Array], tuple[PyTree, dict[str, Array]]]:
    """Training as a pure function of a PRNG key (the PureJaxRL idiom).

    ```python
    train_fn = eqxrl.make_train(PPO("CartPole-v1"), 500_000)
    state, metrics = jax.jit(train_fn)(jax.random.key(0))
    states, metrics = jax.jit(jax.vmap(train_fn))(jax.random.split(jax.random.key(0), 16))
    ```

    **Arguments:** `agent` (an agent or `eqxrl.stack([...])`) and `total_steps`, the
    env-step budget (rounded down to whole iterations); `eval_every` and
    `eval_episodes`: periodic deterministic evaluation, the `eval_return` metric, as
    in `eqxrl.train`.

    **Returns:** `train_fn(key) -> (state, metrics)` (see `TrainFunction.__call__`), a
    plain function (so `jax.jit(train_fn)` works) with the same numbers as
    `eqxrl.train(agent, key, total_steps)`. The agent's array leaves are constants
    of `train_fn`; to vmap over a hyperparameter, build the agent inside the
    mapped function (`jax.vmap(lambda lr: make_train(PPO(env, learning_rate=lr), n)(key))`).
    """
    Batch.of(agent, owner="make_train(agent)")
    num_iterations = num_iterations_for("make_train", agent, total_steps)
    every = eval_iterations_for("make_train", agent, total_steps, eval_every, eval_episodes)
    pure = TrainFunction(agent, num_iterations, every, int(eval_episodes))

    def train_fn(key: Array) -> tuple[PyTree, dict[str, Array]]:
        return pure(key)

    train_fn.__doc__ = TrainFunction.__call__.__doc__
    return train_fn
