"""PBT's compiled programs: the first population, and one generation (train `ready`
steps with the training loop's own chunk, evaluate fitness, exploit, explore)."""

from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, Int, PyTree

from ..agents import AbstractAgent, Batch, Stacked
from ..core import Key, get_path, is_key
from ..loop import EVAL_STREAM, Chunk, chunk, default_eval_steps, episode_returns, init_state
from ._population import Population

__all__ = ["EvaluationReturn", "exploit_and_explore", "generation", "init_population", "refresh_keys", "run_generation", "run_init_population"]


class EvaluationReturn(eqx.Module):
    """The default fitness: the mean return of `num_episodes` evaluation episodes
    (`eqxrl.evaluate`'s loop, traced into the generation's program)."""

    num_episodes: int = eqx.field(static=True, default=8)
    deterministic: bool = eqx.field(static=True, default=True)
    max_steps: int | None = eqx.field(static=True, default=None)

    def __call__(self, agent: AbstractAgent, state: PyTree, key: Key) -> Float[Array, ""]:
        max_steps = self.max_steps or default_eval_steps(agent)
        returns = episode_returns(agent, state, key, self.num_episodes, self.deterministic, max_steps)
        return jnp.mean(returns)


def refresh_keys(state: PyTree, replaced: Array, key: Key) -> PyTree:
    """New PRNG keys (every key leaf) for the replaced members; the others keep theirs."""
    leaves, treedef = jax.tree.flatten(state)
    out = []
    for j, leaf in enumerate(leaves):
        if not is_key(leaf):
            out.append(leaf)
            continue
        size = leaf.shape[0]
        fresh = jax.vmap(lambda i: jax.random.split(jax.random.fold_in(jax.random.fold_in(key, j), i), leaf.shape[1:]))(
            jnp.arange(size)
        )
        old, new = jax.random.key_data(leaf), jax.random.key_data(fresh)
        mask = replaced.reshape((size,) + (1,) * (old.ndim - 1))
        out.append(jax.random.wrap_key_data(jnp.where(mask, new, old), impl=jax.random.key_impl(leaf)))
    return jax.tree.unflatten(treedef, out)


def exploit_and_explore(
    pbt: Any, key: Key, agent: Stacked, state: PyTree, fitness: Float[Array, " population"], allow: Any = True
) -> tuple[Stacked, PyTree, Int[Array, " population"]]:
    """PBT's exploit and explore step on a stacked population (traceable; no training).

    **Arguments:** the `pbt` configuration (space, exploit strategy, resample
    probability), a PRNG `key`, the stacked `agent` and `state`, each member's
    `fitness` (NaN = worst), and `allow` (a bool: False keeps every member).

    **Returns:** `(agent, state, source)`: members `i` with `source[i] != i` are
    copies of member `source[i]` (every leaf of agent and state) with fresh PRNG
    keys and explored hyperparameters; the others are unchanged.
    """
    size = agent.size
    select_key, fresh_key, explore_key = jax.random.split(key, 3)
    me = jnp.arange(size, dtype=jnp.int32)
    source = jnp.where(allow, pbt.exploit(select_key, fitness), me)
    replaced = source != me
    arrays, static = eqx.partition(agent, eqx.is_array)
    arrays = jax.tree.map(lambda x: x[source], arrays)
    state = jax.tree.map(lambda x: x[source], state)
    state = refresh_keys(state, replaced, fresh_key)
    agent = eqx.combine(arrays, static)
    new_values = []
    for i, (name, domain) in enumerate(pbt.space.items()):
        k_perturb, k_sample, k_coin = jax.random.split(jax.random.fold_in(explore_key, i), 3)
        value = get_path(agent.agent, name)
        explored = jnp.where(
            jax.random.bernoulli(k_coin, pbt.resample_probability, (size,)),
            domain.sample(k_sample, (size,)),
            domain.perturb(k_perturb, value),
        )
        new_values.append(jnp.where(replaced, explored, value).astype(jnp.float32))
    names = list(pbt.space)
    agent = eqx.tree_at(lambda s: [get_path(s.agent, n) for n in names], agent, new_values)
    return agent, state, source


def _constrain(tree: PyTree, sharding: Any) -> PyTree:
    """Keep the member axis of every array leaf sharded (a no-op without a sharding)."""
    if sharding is None:
        return tree
    return jax.tree.map(lambda x: jax.lax.with_sharding_constraint(x, sharding) if eqx.is_array(x) and x.ndim else x, tree)


def generation(config: tuple, agent: Stacked, state: PyTree, key: Key, generation: Int[Array, ""]):
    """One generation (traceable): train every member `pbt.ready_iterations` iterations
    with the training loop's `chunk`, evaluate fitness, then exploit and explore.

    **Arguments:** `config = (pbt, fitness_fn, total_iterations, sharding)`, the stacked
    `agent` and `state`, PBT's `key` and the `generation` index.

    **Returns:** `(agent, state, key, generation + 1, record)`, the record one
    value per member: `fitness`, `train_return`, `source`, `hp/<name>`, and
    `eval_return` (the last in-training evaluation, NaN if none) with `pbt.eval_every`.
    """
    pbt, fitness_fn, total_iterations, sharding = config
    size = agent.size
    iterations = pbt.ready_iterations
    start = generation * iterations
    every = pbt.eval_iterations
    # In-training evaluation keys: a stream of PBT's key that no training draw uses.
    eval_keys = jax.random.split(jax.random.fold_in(key, EVAL_STREAM), size) if every else None
    max_steps = pbt.max_eval_steps or default_eval_steps(agent.agent)
    chunk_config = Chunk(
        Batch.of(agent), start, jnp.asarray(total_iterations, jnp.int32), iterations,
        eval_every=every, eval_episodes=pbt.eval_episodes, eval_max_steps=max_steps, eval_keys=eval_keys,
    )  # fmt: skip
    state, metrics = chunk(chunk_config, state)

    key, fit_key, select_key = jax.random.split(key, 3)
    fitness = eqx.filter_vmap(fitness_fn)(agent.agent, state, jax.random.split(fit_key, size))
    fitness = jnp.asarray(fitness, jnp.float32)
    returns = metrics["episode_return"]  # (iterations, members)
    finite = jnp.isfinite(returns)
    count = finite.sum(axis=0).astype(jnp.float32)
    train_return = jnp.where(count > 0, jnp.sum(jnp.where(finite, returns, 0.0), axis=0) / jnp.maximum(count, 1.0), jnp.nan)
    trained_with = {name: get_path(agent.agent, name) for name in pbt.space}

    # Exploit: no copies after the last generation (the final population is what trained).
    last = generation + 1 >= total_iterations // iterations
    agent, state, source = exploit_and_explore(pbt, select_key, agent, state, fitness, allow=~last)

    agent, state = _constrain((agent, state), sharding)
    record = dict(fitness=fitness, train_return=train_return, source=source, **{f"hp/{n}": v for n, v in trained_with.items()})
    if every:
        # Each member's last evaluation of the generation (the rows evaluated are the same for all).
        rows = jnp.arange(iterations, dtype=jnp.int32)
        last = jnp.max(jnp.where((start + rows + 1) % every == 0, rows, -1))
        record["eval_return"] = jnp.where(last >= 0, metrics["eval_return"][jnp.maximum(last, 0)], jnp.nan)
    return agent, state, key, generation + 1, record


run_generation = eqx.filter_jit(generation, donate="all-except-first")
"""`generation`, compiled; the population is donated."""


def init_population(pbt: Any, key: Key, sharding: Any) -> Population:
    """Generation 0 (traceable): `pbt.population_size` copies of `pbt.agent` with
    hyperparameters sampled from `pbt.space`, and their initial states."""
    size = pbt.population_size
    hp_key, state_key, key = jax.random.split(key, 3)
    arrays, static = eqx.partition(pbt.agent, eqx.is_array)
    arrays = jax.tree.map(lambda x: jnp.broadcast_to(x, (size,) + x.shape), arrays)
    agent = Stacked(eqx.combine(arrays, static), size)
    names = list(pbt.space)
    values = [d.sample(jax.random.fold_in(hp_key, i), (size,)) for i, d in enumerate(pbt.space.values())]
    agent = eqx.tree_at(lambda s: [get_path(s.agent, n) for n in names], agent, values)
    state = init_state(Batch.of(agent), jax.random.split(state_key, size))
    agent, state = _constrain((agent, state), sharding)
    return Population(agent, state, key, jnp.zeros((), jnp.int32))


run_init_population = eqx.filter_jit(init_population)
"""`init_population`, compiled."""
