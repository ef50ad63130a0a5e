"""PBT's compiled programs: the first population, and one generation (train `ready`
steps with the training loop's own chunk, evaluate fitness, exploit, explore)."""

from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, Int, PyTree

from ..agents import AbstractAgent, Batch, Stacked
from ..core import Key, get_path, is_key, is_positive_int
from ..loop import EVAL_STREAM, Chunk, EpisodeDescriptor, TrajectoryDescriptor, chunk, default_eval_steps, episode_outcomes, init_state
from ._population import Population

__all__ = [
    "EvaluationReturn",
    "Novelty",
    "exploit_and_explore",
    "generation",
    "init_population",
    "novelty",
    "refresh_keys",
    "run_generation",
    "run_init_population",
]


class EvaluationReturn(eqx.Module):
    """The default fitness: the mean return of `num_episodes` evaluation episodes
    (`eqxrl.evaluate`'s loop, traced into the generation's program)."""

    num_episodes: int = eqx.field(static=True, default=8)
    deterministic: bool = eqx.field(static=True, default=True)
    max_steps: int | None = eqx.field(static=True, default=None)

    def episodes(
        self, agent: AbstractAgent, state: PyTree, key: Key, descriptor: EpisodeDescriptor | TrajectoryDescriptor | None = None
    ) -> tuple[Float[Array, " episodes"], Float[Array, "episodes descriptor"] | None]:
        """**Returns:** `(returns, descriptors)` of the evaluation episodes (see `eqxrl.loop.episode_outcomes`)."""
        max_steps = self.max_steps or default_eval_steps(agent)
        return episode_outcomes(agent, state, key, self.num_episodes, self.deterministic, max_steps, descriptor)

    def __call__(self, agent: AbstractAgent, state: PyTree, key: Key) -> Float[Array, ""]:
        return jnp.mean(self.episodes(agent, state, key)[0])


def novelty(descriptors: Float[Array, "population descriptor"], k: int) -> Float[Array, " population"]:
    """Each member's novelty: the mean Euclidean distance of its descriptor to the `k`
    nearest descriptors of the other members. A member whose descriptor is not finite
    gets NaN; the others ignore it while `k` finite neighbours remain."""
    d = jnp.sqrt(jnp.sum(jnp.square(descriptors[:, None, :] - descriptors[None, :, :]), axis=-1))
    size = descriptors.shape[0]
    d = jnp.where(jnp.eye(size, dtype=bool), jnp.inf, d)
    d = jnp.where(jnp.isnan(d), jnp.inf, d)  # a non-finite neighbour is never among the nearest
    nearest = jnp.sort(d, axis=1)[:, :k]
    score = jnp.mean(nearest, axis=1)
    finite = jnp.all(jnp.isfinite(descriptors), axis=1)
    return jnp.where(finite & jnp.isfinite(score), score, jnp.nan)


class Novelty(eqx.Module):
    """A quality-diversity fitness from PBT's evaluation (needs `PBT(descriptor=...)`):

    `fitness_i = return_weight * mean_return_i + novelty_weight * novelty_i`

    with `mean_return_i` member `i`'s mean evaluation return (the default fitness) and
    `novelty_i` the mean Euclidean distance of its descriptor (the mean final
    descriptor of its evaluation episodes) to the `k` nearest descriptors of the other
    members of the population (novelty search, Lehman & Stanley 2011, with the current
    population as the archive). The default, `return_weight=0`, is pure novelty;
    `return_weight=1` adds the return (novelty search with reward). A term with weight
    0 is left out; NaN (an unfinished or non-finite evaluation) counts as the worst.
    """

    k: Any = eqx.field(static=True, default=3)
    novelty_weight: Any = eqx.field(static=True, default=1.0)
    return_weight: Any = eqx.field(static=True, default=0.0)

    def __check_init__(self):
        if not is_positive_int(self.k):
            raise ValueError(f"Novelty(k) must be a positive int, got {self.k!r}")
        for name in ("novelty_weight", "return_weight"):
            w = getattr(self, name)
            if isinstance(w, bool) or not isinstance(w, (int, float)) or not 0 <= w < float("inf"):
                raise ValueError(f"Novelty({name}) must be a finite number >= 0, got {w!r}")
        if self.novelty_weight == 0 and self.return_weight == 0:
            raise ValueError("Novelty(novelty_weight, return_weight) must not both be 0")

    def score(
        self, returns: Float[Array, "population episodes"], descriptor: Float[Array, "population descriptor"]
    ) -> Float[Array, " population"]:
        """**Returns:** each member's fitness from its evaluation's per-episode `returns`
        and mean final `descriptor` (traceable)."""
        k = min(self.k, descriptor.shape[0] - 1)
        fitness = jnp.zeros(descriptor.shape[0], jnp.float32)
        if self.novelty_weight:
            fitness = fitness + jnp.float32(self.novelty_weight) * novelty(descriptor, k)
        if self.return_weight:
            fitness = fitness + jnp.float32(self.return_weight) * jnp.mean(returns, axis=1)
        return fitness


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
        value = get_path(agent.agent, pbt.space.path(name))
        explored = jnp.where(
            jax.random.bernoulli(k_coin, pbt.resample_probability, (size,)),
            domain.sample(k_sample, (size,)),
            domain.perturb(k_perturb, value),
        )
        new_values.append(jnp.where(replaced, explored, value).astype(jnp.float32))
    paths = [pbt.space.path(n) for n in pbt.space]
    agent = eqx.tree_at(lambda s: [get_path(s.agent, p) for p in paths], agent, new_values)
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
    value per member: `fitness`, `train_return`, `source`, `hp/<name>`,
    `eval_return` (the last in-training evaluation, NaN if none) with `pbt.eval_every`,
    `episode_returns` (each evaluation episode's return, `(members, episodes)`) when
    PBT evaluates (`pbt.evaluator()`), and `descriptor` (the mean final descriptor of
    the evaluation episodes, `(members, descriptor_size)`) with `pbt.descriptor`.
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
    fit_keys = jax.random.split(fit_key, size)
    evaluator, describe = pbt.evaluator(), pbt.episode_descriptor()
    evaluated = {}
    if evaluator is not None:
        # PBT's own evaluation: per-episode returns and final descriptors. The built-in
        # fitnesses read it (with the keys the default fitness always used); a custom
        # fitness keeps those keys and the evaluation draws from another stream.
        eval_keys_fit = fit_keys if isinstance(fitness_fn, (EvaluationReturn, Novelty)) else jax.random.split(jax.random.fold_in(fit_key, 1), size)
        ep_returns, ep_desc = eqx.filter_vmap(lambda a, s, k: evaluator.episodes(a, s, k, describe))(agent.agent, state, eval_keys_fit)
        evaluated["episode_returns"] = jnp.asarray(ep_returns, jnp.float32)
        if describe is not None:
            evaluated["descriptor"] = jnp.mean(ep_desc, axis=1)
    if isinstance(fitness_fn, Novelty):
        fitness = fitness_fn.score(evaluated["episode_returns"], evaluated["descriptor"])
    elif isinstance(fitness_fn, EvaluationReturn):
        fitness = jnp.mean(evaluated["episode_returns"], axis=1)
    else:
        fitness = eqx.filter_vmap(fitness_fn)(agent.agent, state, fit_keys)
    fitness = jnp.asarray(fitness, jnp.float32)
    returns = metrics["episode_return"]  # (iterations, members)
    finite = jnp.isfinite(returns)
    count = finite.sum(axis=0).astype(jnp.float32)
    train_return = jnp.where(count > 0, jnp.sum(jnp.where(finite, returns, 0.0), axis=0) / jnp.maximum(count, 1.0), jnp.nan)
    trained_with = {name: get_path(agent.agent, pbt.space.path(name)) for name in pbt.space}

    # Exploit: no copies after the last generation (the final population is what trained).
    last = generation + 1 >= total_iterations // iterations
    agent, state, source = exploit_and_explore(pbt, select_key, agent, state, fitness, allow=~last)

    agent, state = _constrain((agent, state), sharding)
    record = dict(fitness=fitness, train_return=train_return, source=source, **{f"hp/{n}": v for n, v in trained_with.items()}, **evaluated)
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
    paths = [pbt.space.path(n) for n in pbt.space]
    values = [d.sample(jax.random.fold_in(hp_key, i), (size,)) for i, d in enumerate(pbt.space.values())]
    agent = eqx.tree_at(lambda s: [get_path(s.agent, p) for p in paths], agent, values)
    state = init_state(Batch.of(agent), jax.random.split(state_key, size))
    agent, state = _constrain((agent, state), sharding)
    return Population(agent, state, key, jnp.zeros((), jnp.int32))


run_init_population = eqx.filter_jit(init_population)
"""`init_population`, compiled."""
