"""Population Based Training (Jaderberg et al. 2017) over any eqxrl agent.

PBT sees only a stacked (agent, state) population (`eqxrl.stack`'s layout:
every array leaf has a leading member axis), a fitness per member and a
search space over named hyperparameter leaves. It knows nothing about the
algorithm: PPO, DQN, TD3, SAC, DADS and custom agents all run unchanged.

One *generation* is one compiled program (`_generation.py`). With several
devices the population axis is sharded over a `Mesh` of all of them
(`jax.sharding`); the exploit gather is part of the compiled program.
Multi-host runs call `jax.distributed.initialize()` first, then the same code.
"""

import math
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import equinox as eqx
import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P
from jaxtyping import Array, Float, PyTree

from ..agents import AbstractAgent, Stacked, hyperparameter_hint
from ..core import Key, check_positive_int, is_positive_int, resolve_path
from ..loop import EpisodeDescriptor, Progress, TrajectoryDescriptor, RunInfo, SinkGroup, as_keys, episode_descriptor, make_sinks
from ..runs import holds_run_lock
from ._exploit import AbstractExploit, Truncation
from ._generation import EvaluationReturn, Novelty, run_generation, run_init_population
from ._population import History, Population, gather, history_from_records
from ._rundir import RunDirectory, generation_checkpoint, generation_rows, pbt_config
from ._spaces import AbstractDomain

__all__ = ["AXIS", "PBT", "Fitness"]

Fitness = Callable[[AbstractAgent, PyTree, Key], Float[Array, ""]]


AXIS = "population"


def _tunable_names(agent: Any) -> list[str]:
    """The names a space may use: the agent's hyperparameter paths, then the keywords that name
    one of them (`learning_rate` for `optimizer.learning_rate`: `type(agent).aliases`)."""
    paths = agent.hyperparameters()
    return sorted(paths) + sorted(k for k, path in getattr(type(agent), "aliases", {}).items() if path in paths)


class _Space(Mapping):
    """An immutable, hashable `{name: domain}` (a static field of `PBT`), each name as the user gave
    it (`learning_rate`: history, records and trackers say `hp/learning_rate`) with the dotted path
    of the leaf it tunes (`path(name)`: `optimizer.learning_rate`)."""

    def __init__(self, items, paths=None):
        self._items = tuple(items)
        self._paths = tuple(paths) if paths is not None else tuple(n for n, _ in self._items)

    def path(self, name):
        """The dotted path of the leaf `name` tunes."""
        return self._paths[list(self).index(name)]

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
        return hash((self._items, self._paths))

    def __eq__(self, other):
        return isinstance(other, _Space) and (self._items, self._paths) == (other._items, other._paths)

    def __repr__(self):
        return repr(dict(self._items))


class PBT(eqx.Module):
    """Population Based Training of `population_size` copies of `agent`.

    **Arguments:**

    - `agent`: any eqxrl agent; its values are the defaults of every leaf not in `space`.
    - `space`: `{name: domain}` over the agent's hyperparameter leaves, by dotted
      path (`agent.hyperparameters()` lists them), by a keyword that names one
      (`type(agent).aliases`: PPO's `learning_rate` is `optimizer.learning_rate`), or by
      a flat name that names one path only, e.g. `{"learning_rate": LogUniform(1e-4, 1e-2)}`
      or `{"critic_optimizer.learning_rate": ..., "buffer.alpha": Uniform(0.4, 0.8)}`. The
      history, the records and the trackers name each as it is given here.
    - `population_size`: members (sharded over the devices that divide it).
    - `ready`: env steps per member between two exploit/explore steps.
    - `exploit`: `Truncation(num_replaced, num_parents)` (default: the worst
      and best quarter, at least one each) or `Tournament()`.
    - `resample_probability`: chance that explore resamples a hyperparameter
      from its domain instead of perturbing it.
    - `fitness`: `fitness(agent, state, key) -> scalar` per member (default: the
      mean return of `eval_episodes` evaluation episodes, deterministic policy), or
      the built-in quality-diversity fitness `Novelty(k, novelty_weight, return_weight)`
      (needs `descriptor`), computed from PBT's evaluation over the whole population.
    - `eval_episodes`, `max_eval_steps`: for PBT's evaluation (the default fitness).
    - `descriptor`: also record each member's descriptor (the mean final state
      descriptor of its evaluation episodes) in the history: `"auto"` (DADS's own,
      a brax env's torso x-y, `Point2D`'s position), `"xy"`, `"observation"`, or a
      callable `(state, obs) -> vector` (see `eqxrl.loop.episode_descriptor`); or one
      of each whole episode: `"feet_contact"` (brax) or a `TrajectoryDescriptor`.
      Default None. With a custom `fitness` callable it adds an evaluation of
      `eval_episodes` episodes per member and generation.
    - `shard`: shard the population over the devices (`jax.devices()`: eqxrl makes
      one CPU device per available core) when there are several (default True): all
      of them when they divide `population_size`, else the most of them that do.
    - `eval_every`: env steps per member (whole iterations, counted over the run)
      between deterministic evaluations of `eval_episodes` episodes inside the
      generation's training chunk, as `eqxrl.train(eval_every=)` (default None: none).
      Each generation's record (and `History.eval_return`) holds each member's last
      one in that generation (NaN if none). Member `i`'s keys are
      `eqxrl.loop.eval_key_at(split(fold_in(key, EVAL_STREAM), size)[i], iteration)`
      with `key` the population's key before the generation: never one training uses.
    """

    agent: Any
    space: Mapping[str, Any] = eqx.field(static=True)
    population_size: Any = eqx.field(static=True, default=8)
    ready: Any = eqx.field(static=True, default=10_000)
    exploit: Any = eqx.field(static=True, default=None)
    resample_probability: Any = eqx.field(static=True, default=0.25)
    fitness: Any = eqx.field(static=True, default=None)  # None, Novelty or a Fitness callable
    eval_episodes: Any = eqx.field(static=True, default=8)
    max_eval_steps: Any = eqx.field(static=True, default=None)
    shard: bool = eqx.field(static=True, default=True)
    eval_every: Any = eqx.field(static=True, default=None)
    descriptor: Any = eqx.field(static=True, default=None)

    def __post_init__(self):
        if isinstance(self.agent, Stacked) or not isinstance(self.agent, AbstractAgent):
            raise ValueError(
                f"PBT(agent) must be one eqxrl agent (PBT builds the population), got {type(self.agent).__name__}"
            )
        for name in ("population_size", "ready", "eval_episodes"):
            check_positive_int("PBT", name, getattr(self, name))
        if self.population_size < 2:
            raise ValueError(f"PBT(population_size) must be >= 2, got {self.population_size}")
        per_iteration = self.agent.steps_per_iteration
        if self.ready < per_iteration:
            raise ValueError(
                f"PBT(ready={self.ready}) must cover at least one iteration of "
                f"{type(self.agent).__name__} ({per_iteration} env steps)"
            )
        if not isinstance(self.space, Mapping) or not self.space:
            names = _tunable_names(self.agent)
            raise ValueError(
                "PBT(space) must be a non-empty dict {name: domain}; tunable names of "
                f"{type(self.agent).__name__}: {names or 'none (declare one with `eqxrl.hyperparameter(default)`)'}"
            )
        tunable = self.agent.hyperparameters()
        resolved = {}
        for name, domain in self.space.items():
            try:
                # A dotted path (`critic_optimizer.learning_rate`), or a flat name that is unambiguous.
                path = resolve_path(self.agent, name, f"PBT(space) over {type(self.agent).__name__}")
                if path not in tunable:  # a leaf that is no hyperparameter
                    raise ValueError(path)
            except ValueError as e:
                if "ambiguous" in str(e):
                    raise
                raise ValueError(
                    f"PBT(space) names {name!r}, which is not a hyperparameter leaf of "
                    f"{type(self.agent).__name__}; tunable names: {_tunable_names(self.agent)}"
                    f"{hyperparameter_hint(self.agent, name)}"
                ) from None
            if not isinstance(domain, AbstractDomain):
                raise ValueError(
                    f"PBT(space[{name!r}]) must be a domain (LogUniform, Uniform, Choice, IntUniform, "
                    f"IntLogUniform), got {type(domain).__name__}"
                )
            if path in resolved.values():
                raise ValueError(f"PBT(space) names {path!r} twice")
            resolved[name] = path
        self.space = _Space(self.space.items(), resolved.values())
        if self.exploit is None:
            quarter = max(1, self.population_size // 4)
            self.exploit = Truncation(quarter, quarter)
        if not isinstance(self.exploit, AbstractExploit):
            raise ValueError(f"PBT(exploit) must be Truncation(...) or Tournament(...), got {self.exploit!r}")
        self.exploit.check(self.population_size)
        p = self.resample_probability
        if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0 <= p <= 1:
            raise ValueError(f"PBT(resample_probability) must be in [0, 1], got {p!r}")
        if self.eval_every is not None and (not is_positive_int(self.eval_every) or self.eval_every < per_iteration):
            raise ValueError(
                f"PBT(eval_every) must be None or an int of at least one iteration of "
                f"{type(self.agent).__name__} ({per_iteration} env steps), got {self.eval_every!r}"
            )
        if self.max_eval_steps is not None and not is_positive_int(self.max_eval_steps):
            raise ValueError(f"PBT(max_eval_steps) must be a positive int or None, got {self.max_eval_steps!r}")
        if self.fitness is not None and not isinstance(self.fitness, Novelty) and not callable(self.fitness):
            raise ValueError(
                f"PBT(fitness) must be None, Novelty(...) or a callable fitness(agent, state, key) -> scalar, got {self.fitness!r}"
            )
        if self.descriptor is not None:
            episode_descriptor(self.agent.eval_env, self.descriptor, owner="PBT")  # raises naming PBT(descriptor)
        if isinstance(self.fitness, Novelty):
            if self.descriptor is None:
                raise ValueError("PBT(fitness=Novelty(...)) needs PBT(descriptor=...), e.g. descriptor='auto'")
            if self.fitness.k > self.population_size - 1:
                raise ValueError(
                    f"PBT(fitness=Novelty(k={self.fitness.k})) must have k <= population_size - 1 = {self.population_size - 1}"
                )

    # ----------------------------------------------------------------- structure
    @property
    def ready_iterations(self) -> int:
        """Training iterations per generation (`ready` rounded down to whole iterations)."""
        return self.ready // self.agent.steps_per_iteration

    @property
    def steps_per_generation(self) -> int:
        """Env steps per member per generation."""
        return self.ready_iterations * self.agent.steps_per_iteration

    @property
    def eval_iterations(self) -> int:
        """Iterations between in-training evaluations (`eval_every` rounded down; 0: none)."""
        return 0 if self.eval_every is None else self.eval_every // self.agent.steps_per_iteration

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
        """The population-axis sharding over the devices (None on one device or with `shard=False`).

        All devices when they divide the population; in one process otherwise the most of
        them that do (a population of 6 on 4 devices: 3 of them; of 3 on 2: one device,
        unsharded). Across processes (`jax.distributed`) every device must hold members:
        a population that does not divide is a `ValueError`."""
        devices = jax.devices()
        if not self.shard or len(devices) == 1:
            return None
        if self.population_size % len(devices):
            if jax.process_count() > 1:
                raise ValueError(
                    f"PBT(population_size={self.population_size}) must be a multiple of the {len(devices)} devices "
                    f"of the {jax.process_count()} processes to shard the population (or pass shard=False)"
                )
            used = max(d for d in range(1, len(devices)) if self.population_size % d == 0)
            if used == 1:
                return None
            devices = devices[:used]
        return NamedSharding(Mesh(np.array(devices), (AXIS,)), P(AXIS))

    def fitness_fn(self) -> Fitness | Novelty:
        """**Returns:** the fitness `run` evaluates: `fitness`, or the default `EvaluationReturn`."""
        if self.fitness is not None:
            return self.fitness
        return EvaluationReturn(self.eval_episodes, True, self.max_eval_steps)

    def evaluator(self) -> EvaluationReturn | None:
        """**Returns:** the evaluation PBT runs every generation, whose per-episode returns
        (and descriptors) the records keep: `fitness` if it is an `EvaluationReturn`, else
        `EvaluationReturn(eval_episodes, True, max_eval_steps)`; None with a custom
        fitness callable and no `descriptor` (nothing to evaluate beyond the fitness)."""
        if isinstance(self.fitness, EvaluationReturn):
            return self.fitness
        if self.fitness is None or isinstance(self.fitness, Novelty) or self.descriptor is not None:
            return EvaluationReturn(self.eval_episodes, True, self.max_eval_steps)
        return None

    def episode_descriptor(self) -> EpisodeDescriptor | TrajectoryDescriptor | None:
        """**Returns:** `descriptor` resolved on the agent's eval env (None without one)."""
        if self.descriptor is None:
            return None
        return episode_descriptor(self.agent.eval_env, self.descriptor, owner="PBT")

    # ----------------------------------------------------------------- API
    def init(self, key: Any) -> Population:
        """**Returns:** generation 0: hyperparameters sampled from `space`, states from `agent.init`."""
        key = as_keys(key)
        if key.ndim != 0:
            raise ValueError(f"PBT.init(key) must be a single key of shape (), got shape {key.shape}")
        return run_init_population(self, key, self.sharding())

    def step(self, population: Population, total_steps: int) -> tuple[Population, dict[str, np.ndarray]]:
        """Run one generation (train, evaluate, exploit, explore) as one compiled program.

        **Arguments:** the `population` (donated: do not reuse it) and the run's
        `total_steps` per member (for annealing schedules and to skip exploit
        after the last generation).

        **Returns:** the next population and this generation's record
        (`fitness`, `train_return`, `source`, `hp/<name>`, `eval_return` with
        `eval_every`, `episode_returns` `(members, episodes)` when `evaluator()` is
        not None, `descriptor` `(members, descriptor_size)` with `descriptor`; NumPy
        arrays, one row per member).
        """
        total_iterations = self.num_generations(total_steps) * self.ready_iterations
        config = (self, self.fitness_fn(), total_iterations, self.sharding())
        agent, state, key, generation, record = run_generation(
            config, population.agent, population.state, population.key, population.generation
        )
        population = Population(agent, state, key, generation)
        return population, {k: gather(v) for k, v in record.items()}

    @holds_run_lock("PBT.run(run_dir)")
    def run(
        self,
        key: Any,
        total_steps: int,
        *,
        progress: bool = True,
        run_dir: Any = None,
        checkpoint: bool = True,
        callback: Callable[[Population, Sequence[Mapping[str, np.ndarray]]], None] | None = None,
        log: Any = (),
    ) -> tuple[Population, History]:
        """Train the population for `total_steps` env steps per member.

        **Arguments:**

        - `key`: a PRNG key (a new population), or a `Population` to continue.
        - `total_steps`: env steps per member, in whole generations of `ready` steps.
        - `progress`: a progress bar over generations (best fitness, env steps/s).
        - `run_dir`: if given, `pbt.json`, `history.csv`, `history.png` and (with
          `checkpoint`) `population/<generation>/` are written there after every generation
          (by `eqxrl.pbt.RunDirectory`); `eqxrl.pbt.resume(run_dir)` continues an
          interrupted run exactly. The directory is locked while the run writes it
          (`RUN_DIR/.lock`): another process writing it is refused with a
          `RunDirectoryError` naming its process id, as is a symbolic link below it.
        - `callback`: called after every generation with the population and the
          records of the generations so far (see `step`), after the sinks. The population is
          donated to the next generation: copy what must outlive the call.
        - `log`: sinks, as for `eqxrl.runs.train_run(log=)` (`["tensorboard", "wandb",
          "mlflow"]` or `eqxrl.loop.AbstractSink` instances): one row per generation at its
          env steps per member (`eqxrl.pbt.generation_rows`: fitness, train return and each
          hyperparameter, their means and each member's, and the best fitness), then the
          generation itself (`checkpoint`: `eqxrl.pbt.generation_checkpoint`, the population and
          every record so far). They go in one `SinkGroup` with the run directory's own sinks
          (`eqxrl.pbt.HistorySink`, `PopulationSink`). With `run_dir`, `pbt.json` records the
          registered ones and `resume` logs to them again. In a multi-host run, only process 0
          logs. A sink that asks to stop (its `checkpoint` returns True) is a one-line error: a
          run trains to its budget.

        **Returns:** `(population, history)`.
        """
        generations = self.num_generations(total_steps)
        population = key if isinstance(key, Population) else self.init(key)
        records: list[dict[str, np.ndarray]] = []
        logged, names = make_sinks(log, owner="PBT.run(log)")
        if jax.process_index() != 0:
            logged, names = [], []  # (one process logs; the run directory's sinks are on every process)
        writer = None
        if run_dir is not None:
            writer = RunDirectory(run_dir, self, total_steps, checkpoint)
            records = writer.start(population)
        start = int(population.generation)
        sinks = SinkGroup([*logged, *(writer.outputs if writer is not None else [])], names)
        if logged:
            saved_names, saved = writer.sinks() if writer is not None else ([], {})
            where = None if writer is None else writer.run_dir
            name = f"PBT {type(self.agent).__name__} {self.agent.env.name}" if where is None else where.name
            info = RunInfo(name, pbt_config(self, total_steps), where, start, self.steps_per_generation, saved)
            started = {**saved, **sinks.start(info)}
            if writer is not None and (started != saved or names != saved_names):
                writer.record_sinks(names, started)
        bar = Progress(generations, enabled=progress, desc=f"PBT {type(self.agent).__name__} {self.agent.env.name}",
                       unit="gen", initial=start)  # fmt: skip
        try:
            for g in range(start, generations):
                t0 = time.perf_counter()
                population, record = self.step(population, total_steps)
                records.append(record)
                sinks.rows(*generation_rows(self, record, len(records)))  # (to the sinks that take rows)
                if sinks.checkpoint(generation_checkpoint(population, records, generations)):
                    label = sinks.stopped_by[0].name or type(sinks.stopped_by[0]).__name__
                    raise ValueError(f"PBT.run(log): the {label} sink asked to stop at generation {len(records)}; a PBT run "
                                     "trains to its budget (total_steps)")  # fmt: skip
                if callback is not None:
                    callback(population, records)
                fitness = np.asarray(record["fitness"], np.float64)
                best = float(np.nanmax(fitness)) if np.isfinite(fitness).any() else math.nan
                sps = self.steps_per_generation * self.population_size / (time.perf_counter() - t0)
                bar.update(g + 1, best=f"{best:.1f}", median=f"{float(np.nanmedian(fitness)):.1f}", sps=f"{sps:,.0f}")
        except BaseException as e:
            sinks.finish("interrupted" if isinstance(e, KeyboardInterrupt) else "failed")
            raise
        finally:
            bar.close()
        sinks.finish("complete")  # (waits for the last checkpoint write: CheckpointError if it failed)
        return population, history_from_records(self, records)
