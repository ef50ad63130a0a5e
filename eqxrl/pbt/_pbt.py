"""Population Based Training (Jaderberg et al. 2017) over any eqxrl agent.

PBT sees only a stacked (agent, state) population (`eqxrl.stack`'s layout:
every array leaf has a leading member axis), a fitness per member and a
search space over named hyperparameter leaves. It knows nothing about the
algorithm: PPO, DQN, TD3, SAC, DADS and custom agents all run unchanged.

One *generation* is one compiled program: train every member for `ready` env
steps (the same `lax.scan` chunk `eqxrl.train` runs), evaluate each member's
fitness, then exploit (replace the worst members by copies of better ones:
parameters, optimizer state, target networks, replay buffer, normalisation
statistics; the copy gets fresh PRNG keys) and explore (perturb or resample the
copies' hyperparameters). With several devices the population axis is sharded
over a `Mesh` of all of them (`jax.sharding`); the exploit gather is part of
the compiled program. Multi-host runs call `jax.distributed.initialize()`
first, then the same code.
"""

import dataclasses
import math
import time
from collections.abc import Callable, Mapping
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P
from jaxtyping import Array, Float, Int, PyTree

from ..agents import Stacked
from ..core import Key
from ..agents import AbstractAgent
from ._exploit import Exploit, Truncation
from ._spaces import Domain

Fitness = Callable[[AbstractAgent, PyTree, Key], Float[Array, ""]]
"""`fitness(agent, state, key) -> scalar` for one member (traced, vmapped over the population)."""

AXIS = "population"


def _train_module():
    import importlib

    return importlib.import_module("eqxrl.train")


def _is_key(x: Any) -> bool:
    return isinstance(x, (jax.Array, jax.ShapeDtypeStruct)) and jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key)


# --------------------------------------------------------------------- population and history
class Population(eqx.Module):
    """A PBT population between generations.

    - `agent`: the stacked agent (`eqxrl.Stacked`): each member's hyperparameters.
    - `state`: the stacked training states (leading axis = member).
    - `key`: PBT's own PRNG key (selection, exploration, fresh keys of copies).
    - `generation`: generations done so far.
    """

    agent: Stacked
    state: PyTree
    key: Key
    generation: Int[Array, ""]

    @property
    def size(self) -> int:
        return self.agent.size

    def member(self, i: int) -> tuple[AbstractAgent, PyTree]:
        """**Returns:** member `i`'s agent and training state, for `eqxrl.evaluate` or `act`."""
        agent = self.agent.member(i)
        state = jax.tree.map(lambda x: x[i], self.state)
        return agent, state


@dataclasses.dataclass(frozen=True)
class History:
    """What PBT did, per generation (rows) and member (columns).

    - `env_steps[g]`: env steps per member at the end of generation `g`.
    - `fitness[g, i]`: member `i`'s fitness after generation `g`'s training.
    - `train_return[g, i]`: its mean training episode return during generation `g`.
    - `parent[g, i]`: the member of generation `g - 1` whose copy member `i`
      trained from in generation `g` (itself when it was kept; -1 in generation 0).
    - `hyperparameters[name][g, i]`: the value member `i` trained with in generation `g`.
    """

    env_steps: np.ndarray
    fitness: np.ndarray
    train_return: np.ndarray
    parent: np.ndarray
    hyperparameters: dict[str, np.ndarray]

    @property
    def num_generations(self) -> int:
        return int(self.fitness.shape[0])

    def best(self) -> tuple[int, float]:
        """**Returns:** `(member, fitness)` of the best member after the last generation."""
        last = np.where(np.isnan(self.fitness[-1]), -np.inf, self.fitness[-1])
        i = int(np.argmax(last))
        return i, float(self.fitness[-1, i])


# --------------------------------------------------------------------- the compiled generation
class EvaluationReturn(eqx.Module):
    """The default fitness: the mean return of `num_episodes` evaluation episodes
    (`eqxrl.evaluate`'s loop, traced into the generation's program)."""

    num_episodes: int = eqx.field(static=True, default=8)
    deterministic: bool = eqx.field(static=True, default=True)
    max_steps: int | None = eqx.field(static=True, default=None)

    def __call__(self, agent: AbstractAgent, state: PyTree, key: Key) -> Float[Array, ""]:
        max_steps = self.max_steps or agent.eval_env.max_episode_steps or 10_000
        returns = _train_module().episode_returns(agent, state, key, self.num_episodes, self.deterministic, max_steps)
        return jnp.mean(returns)


class _Space(Mapping):
    """An immutable, hashable `{name: domain}` (a static field of `PBT`)."""

    def __init__(self, items):
        self._items = tuple(items)

    def __getitem__(self, name):
        for n, d in self._items:
            if n == name:
                return d
        raise KeyError(name)

    def __iter__(self):
        return (n for n, _ in self._items)

    def __len__(self):
        return len(self._items)

    def __hash__(self):
        return hash(self._items)

    def __eq__(self, other):
        return isinstance(other, _Space) and self._items == other._items

    def __repr__(self):
        return repr(dict(self._items))


def _refresh_keys(state: PyTree, replaced: Array, key: Key) -> PyTree:
    """New PRNG keys (every key leaf) for the replaced members; the others keep theirs."""
    leaves, treedef = jax.tree.flatten(state)
    out = []
    for j, leaf in enumerate(leaves):
        if not _is_key(leaf):
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
    pbt: "PBT", key: Key, agent: Stacked, state: PyTree, fitness: Float[Array, " population"], allow: Any = True
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
    state = _refresh_keys(state, replaced, fresh_key)
    agent = eqx.combine(arrays, static)
    new_values = []
    for i, (name, domain) in enumerate(pbt.space.items()):
        k_perturb, k_sample, k_coin = jax.random.split(jax.random.fold_in(explore_key, i), 3)
        value = getattr(agent.agent, name)
        explored = jnp.where(
            jax.random.bernoulli(k_coin, pbt.resample_probability, (size,)),
            domain.sample(k_sample, (size,)),
            domain.perturb(k_perturb, value),
        )
        new_values.append(jnp.where(replaced, explored, value).astype(jnp.float32))
    names = list(pbt.space)
    agent = eqx.tree_at(lambda s: [getattr(s.agent, n) for n in names], agent, new_values)
    return agent, state, source


def _generation_impl(config, agent: Stacked, state: PyTree, key: Key, generation: Int[Array, ""]):
    pbt, fitness_fn, total_iterations, sharding = config
    tr = _train_module()
    size = agent.size
    iterations = pbt.ready_iterations
    layout = tr._Layout(members=True, seeds=True)
    start = generation * iterations
    state, metrics = tr._chunk_impl((agent, start, jnp.asarray(total_iterations, jnp.int32), layout, iterations), state)

    key, fit_key, select_key = jax.random.split(key, 3)
    fitness = eqx.filter_vmap(fitness_fn)(agent.agent, state, jax.random.split(fit_key, size))
    fitness = jnp.asarray(fitness, jnp.float32)
    returns = metrics["episode_return"]  # (iterations, members)
    finite = jnp.isfinite(returns)
    count = finite.sum(axis=0).astype(jnp.float32)
    train_return = jnp.where(count > 0, jnp.sum(jnp.where(finite, returns, 0.0), axis=0) / jnp.maximum(count, 1.0), jnp.nan)
    trained_with = {name: getattr(agent.agent, name) for name in pbt.space}

    # Exploit: no copies after the last generation (the final population is what trained).
    last = generation + 1 >= total_iterations // iterations
    agent, state, source = exploit_and_explore(pbt, select_key, agent, state, fitness, allow=~last)

    if sharding is not None:
        constrain = lambda x: jax.lax.with_sharding_constraint(x, sharding) if eqx.is_array(x) and x.ndim else x  # noqa: E731
        agent, state = jax.tree.map(constrain, (agent, state))
    record = dict(fitness=fitness, train_return=train_return, source=source, **{f"hp/{n}": v for n, v in trained_with.items()})
    return agent, state, key, generation + 1, record


_generation = eqx.filter_jit(_generation_impl, donate="all-except-first")


def _init_population_impl(pbt: "PBT", key: Key, sharding):
    tr = _train_module()
    size = pbt.population_size
    hp_key, state_key, key = jax.random.split(key, 3)
    arrays, static = eqx.partition(pbt.agent, eqx.is_array)
    arrays = jax.tree.map(lambda x: jnp.broadcast_to(x, (size,) + x.shape), arrays)
    agent = Stacked(eqx.combine(arrays, static), size)
    names = list(pbt.space)
    values = [d.sample(jax.random.fold_in(hp_key, i), (size,)) for i, d in enumerate(pbt.space.values())]
    agent = eqx.tree_at(lambda s: [getattr(s.agent, n) for n in names], agent, values)
    layout = tr._Layout(members=True, seeds=True)
    state = tr._init_impl(agent, jax.random.split(state_key, size), layout)
    if sharding is not None:
        constrain = lambda x: jax.lax.with_sharding_constraint(x, sharding) if eqx.is_array(x) and x.ndim else x  # noqa: E731
        agent, state = jax.tree.map(constrain, (agent, state))
    return Population(agent, state, key, jnp.zeros((), jnp.int32))


_init_population = eqx.filter_jit(_init_population_impl)


# --------------------------------------------------------------------- the public PBT
class PBT(eqx.Module):
    """Population Based Training of `population_size` copies of `agent`.

    **Arguments:**

    - `agent`: any eqxrl agent; its values are the defaults of every leaf not in `space`.
    - `space`: `{name: domain}` over the agent's hyperparameter leaves
      (`agent.hyperparameters()` lists them), e.g.
      `{"learning_rate": LogUniform(1e-4, 1e-2)}`.
    - `population_size`: members (a multiple of the device count when sharded).
    - `ready`: env steps per member between two exploit/explore steps.
    - `exploit`: `Truncation(num_replaced, num_parents)` (default: the worst
      and best quarter, at least one each) or `Tournament()`.
    - `resample_probability`: chance that explore resamples a hyperparameter
      from its domain instead of perturbing it.
    - `fitness`: `fitness(agent, state, key) -> scalar` per member (default: the
      mean return of `eval_episodes` evaluation episodes, deterministic policy).
    - `eval_episodes`, `max_eval_steps`: for the default fitness.
    - `shard`: shard the population over all devices (`jax.devices()`) when there
      are several (default True).
    """

    agent: Any
    space: Mapping[str, Any] = eqx.field(static=True)
    population_size: Any = eqx.field(static=True, default=8)
    ready: Any = eqx.field(static=True, default=10_000)
    exploit: Any = eqx.field(static=True, default=None)
    resample_probability: Any = eqx.field(static=True, default=0.25)
    fitness: Fitness | None = eqx.field(static=True, default=None)
    eval_episodes: Any = eqx.field(static=True, default=8)
    max_eval_steps: Any = eqx.field(static=True, default=None)
    shard: bool = eqx.field(static=True, default=True)

    def __post_init__(self):
        if isinstance(self.agent, Stacked) or not isinstance(self.agent, AbstractAgent):
            raise ValueError(
                f"PBT(agent) must be one eqxrl agent (PBT builds the population), got {type(self.agent).__name__}"
            )
        for name in ("population_size", "ready", "eval_episodes"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
                raise ValueError(f"PBT({name}) must be a positive int, got {v!r}")
        if self.population_size < 2:
            raise ValueError(f"PBT(population_size) must be >= 2, got {self.population_size}")
        per_iteration = self.agent.steps_per_iteration
        if self.ready < per_iteration:
            raise ValueError(
                f"PBT(ready={self.ready}) must cover at least one iteration of "
                f"{type(self.agent).__name__} ({per_iteration} env steps)"
            )
        if not isinstance(self.space, Mapping) or not self.space:
            raise ValueError(
                "PBT(space) must be a non-empty dict {name: domain}; tunable names of "
                f"{type(self.agent).__name__}: {sorted(self.agent.hyperparameters())}"
            )
        tunable = self.agent.hyperparameters()
        for name, domain in self.space.items():
            if name not in tunable:
                raise ValueError(
                    f"PBT(space) names {name!r}, which is not a hyperparameter leaf of "
                    f"{type(self.agent).__name__}; tunable names: {sorted(tunable)}"
                )
            if not isinstance(domain, Domain):
                raise ValueError(
                    f"PBT(space[{name!r}]) must be a domain (LogUniform, Uniform, Choice, IntUniform, "
                    f"IntLogUniform), got {type(domain).__name__}"
                )
        self.space = _Space(self.space.items())
        if self.exploit is None:
            quarter = max(1, self.population_size // 4)
            self.exploit = Truncation(quarter, quarter)
        if not isinstance(self.exploit, Exploit):
            raise ValueError(f"PBT(exploit) must be Truncation(...) or Tournament(...), got {self.exploit!r}")
        self.exploit.check(self.population_size)
        p = self.resample_probability
        if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0 <= p <= 1:
            raise ValueError(f"PBT(resample_probability) must be in [0, 1], got {p!r}")
        if self.max_eval_steps is not None and (not isinstance(self.max_eval_steps, int) or self.max_eval_steps < 1):
            raise ValueError(f"PBT(max_eval_steps) must be a positive int or None, got {self.max_eval_steps!r}")

    # ----------------------------------------------------------------- structure
    @property
    def ready_iterations(self) -> int:
        """Training iterations per generation (`ready` rounded down to whole iterations)."""
        return self.ready // self.agent.steps_per_iteration

    @property
    def steps_per_generation(self) -> int:
        """Env steps per member per generation."""
        return self.ready_iterations * self.agent.steps_per_iteration

    def num_generations(self, total_steps: int) -> int:
        """**Returns:** the generations that fit in `total_steps` env steps per member."""
        if isinstance(total_steps, bool) or not isinstance(total_steps, (int, np.integer)):
            raise ValueError(f"PBT.run(total_steps) must be an int, got {total_steps!r}")
        g = int(total_steps) // self.steps_per_generation
        if g < 1:
            raise ValueError(
                f"PBT.run(total_steps={total_steps}) must cover at least one generation "
                f"({self.steps_per_generation} env steps per member)"
            )
        return g

    def sharding(self) -> NamedSharding | None:
        """The population-axis sharding over all devices (None on one device or with `shard=False`)."""
        devices = jax.devices()
        if not self.shard or len(devices) == 1:
            return None
        if self.population_size % len(devices):
            raise ValueError(
                f"PBT(population_size={self.population_size}) must be a multiple of the {len(devices)} devices "
                "to shard the population (or pass shard=False)"
            )
        return NamedSharding(Mesh(np.array(devices), (AXIS,)), P(AXIS))

    def _fitness_fn(self) -> Fitness:
        if self.fitness is not None:
            return self.fitness
        return EvaluationReturn(self.eval_episodes, True, self.max_eval_steps)

    # ----------------------------------------------------------------- API
    def init(self, key: Any) -> Population:
        """**Returns:** generation 0: hyperparameters sampled from `space`, states from `agent.init`."""
        key = _train_module()._as_keys(key)
        if key.ndim != 0:
            raise ValueError(f"PBT.init(key) must be a single key of shape (), got shape {key.shape}")
        return _init_population(self, key, self.sharding())

    def step(self, population: Population, total_steps: int) -> tuple[Population, dict[str, np.ndarray]]:
        """Run one generation (train, evaluate, exploit, explore) as one compiled program.

        **Arguments:** the `population` (donated: do not reuse it) and the run's
        `total_steps` per member (for annealing schedules and to skip exploit
        after the last generation).

        **Returns:** the next population and this generation's record
        (`fitness`, `train_return`, `source`, `hp/<name>`; NumPy arrays, one value per member).
        """
        total_iterations = self.num_generations(total_steps) * self.ready_iterations
        config = (self, self._fitness_fn(), total_iterations, self.sharding())
        agent, state, key, generation, record = _generation(
            config, population.agent, population.state, population.key, population.generation
        )
        population = Population(agent, state, key, generation)
        return population, {k: _gather(v) for k, v in record.items()}

    def run(
        self,
        key: Any,
        total_steps: int,
        *,
        progress: bool = True,
        run_dir: Any = None,
        checkpoint: bool = True,
    ) -> tuple[Population, History]:
        """Train the population for `total_steps` env steps per member.

        **Arguments:**

        - `key`: a PRNG key (a new population), or a `Population` to continue.
        - `total_steps`: env steps per member, in whole generations of `ready` steps.
        - `progress`: a progress bar over generations (best fitness, env steps/s).
        - `run_dir`: if given, `pbt.json`, `history.csv`, `history.png` and (with
          `checkpoint`) `population.eqx` are written there after every generation;
          `eqxrl.pbt.resume(run_dir)` continues an interrupted run exactly.

        **Returns:** `(population, history)`.
        """
        from . import _io

        generations = self.num_generations(total_steps)
        population = key if isinstance(key, Population) else self.init(key)
        records: list[dict[str, np.ndarray]] = []
        if run_dir is not None:
            records = _io.start(run_dir, self, total_steps, population, checkpoint)
        start = int(population.generation)
        bar = _Bar(generations, start, progress, f"PBT {type(self.agent).__name__} {self.agent.env.name}")
        try:
            for _ in range(start, generations):
                t0 = time.perf_counter()
                population, record = self.step(population, total_steps)
                records.append(record)
                if run_dir is not None:
                    _io.save(run_dir, self, total_steps, population, records, checkpoint)
                bar.update(record, self.steps_per_generation * self.population_size / (time.perf_counter() - t0))
        finally:
            bar.close()
        return population, history_from_records(self, records)


def _gather(x: Array) -> np.ndarray:
    """A (possibly multi-host sharded) array as a full NumPy array on every process."""
    if jax.process_count() > 1 and not x.is_fully_addressable:
        from jax.experimental import multihost_utils

        return np.asarray(multihost_utils.process_allgather(x, tiled=True))
    return np.asarray(x)


def history_from_records(pbt: PBT, records: list[Mapping[str, np.ndarray]]) -> History:
    """**Returns:** the `History` of a run from its per-generation records (see `PBT.step`)."""
    size = pbt.population_size
    g = len(records)
    stack = lambda k: np.stack([np.asarray(r[k]) for r in records]) if g else np.zeros((0, size))  # noqa: E731
    source = stack("source").astype(np.int64)
    parent = np.concatenate([np.full((min(g, 1), size), -1, np.int64), source[:-1]], axis=0) if g else source
    return History(
        env_steps=np.arange(1, g + 1, dtype=np.int64) * pbt.steps_per_generation,
        fitness=stack("fitness").astype(np.float64),
        train_return=stack("train_return").astype(np.float64),
        parent=parent,
        hyperparameters={n: stack(f"hp/{n}").astype(np.float64) for n in pbt.space},
    )


class _Bar:
    def __init__(self, total: int, start: int, enabled: bool, desc: str):
        self.bar = None
        if enabled:
            from tqdm.auto import tqdm

            self.bar = tqdm(total=total, initial=start, desc=desc, unit="gen", dynamic_ncols=True)

    def update(self, record: Mapping[str, np.ndarray], sps: float) -> None:
        if self.bar is None:
            return
        fitness = np.asarray(record["fitness"], np.float64)
        best = float(np.nanmax(fitness)) if np.isfinite(fitness).any() else math.nan
        self.bar.update(1)
        self.bar.set_postfix(best=f"{best:.1f}", median=f"{float(np.nanmedian(fitness)):.1f}", sps=f"{sps:,.0f}")

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
