"""A PBT run directory: `pbt.json`, `history.csv`, `history.png`, `population/<generation>/`.

Written after every generation, by two sinks (`eqxrl.loop.AbstractSink`) whose `checkpoint` hook
gets the generation (`generation_checkpoint`): `HistorySink`, the files atomically (a temporary
file, then `os.replace`), and `PopulationSink`, the population by `_checkpoint.PopulationWriter`
(orbax, each process writing its own shards, asynchronously), so a crash leaves the previous
generations intact and `eqxrl.pbt.resume(run_dir)` continues exactly as the uninterrupted run
would have.
"""

import contextlib
import csv
import dataclasses
import io
import json
import pathlib
import shutil
from collections.abc import Mapping, Sequence
from typing import Any

import equinox as eqx
import jax
import numpy as np

from ..agents import agent_name, class_path
from ..core import __version__
from ..loop import AbstractSink, Checkpoint, RunInfo
from ..runs import agent_config, figure, png_bytes
from ..store import atomic_write_bytes, read_text_bounded
from ._checkpoint import CHECKPOINTS, PopulationWriter, load_records
from ._generation import EvaluationReturn, Novelty
from ._population import History, Population, history_from_records

__all__ = [
    "CONFIG", "HISTORY", "PLOT", "HistorySink", "PopulationSink", "RunDirectory", "generation_checkpoint", "generation_records",
    "generation_rows", "module_spec", "pbt_config", "plot_history", "read_history_csv", "write_history_csv",
]  # fmt: skip

CONFIG = "pbt.json"
HISTORY = "history.csv"
PLOT = "history.png"


def module_spec(m: eqx.Module) -> dict[str, Any]:
    """A domain or exploit strategy as JSON: its type name and fields."""
    fields = {f.name: getattr(m, f.name) for f in dataclasses.fields(m)}
    return {"type": type(m).__name__, **{k: list(v) if isinstance(v, tuple) else v for k, v in fields.items()}}


def pbt_config(pbt: Any, total_steps: int) -> dict[str, Any]:
    """**Returns:** the JSON description of a PBT run (agent, env, space, exploit, budget)."""
    if isinstance(pbt.fitness, Novelty):
        fitness = module_spec(pbt.fitness)
    elif pbt.fitness is not None and not isinstance(pbt.fitness, EvaluationReturn):
        fitness = {"type": "custom", "repr": repr(pbt.fitness)}
    else:
        fitness = {"type": "EvaluationReturn", "num_episodes": pbt.eval_episodes}
    descriptor = pbt.descriptor
    if callable(descriptor):
        descriptor = {"type": "custom", "repr": repr(descriptor)}
    return {
        "agent": agent_name(pbt.agent),
        "agent_class": class_path(type(pbt.agent)),
        "env": pbt.agent.env.name,
        "agent_config": agent_config(pbt.agent),
        "space": {name: module_spec(d) for name, d in pbt.space.items()},
        "population_size": pbt.population_size,
        "ready": pbt.ready,
        "exploit": module_spec(pbt.exploit),
        "resample_probability": pbt.resample_probability,
        "eval_episodes": pbt.eval_episodes,
        "max_eval_steps": pbt.max_eval_steps,
        "eval_every": pbt.eval_every,
        "fitness": fitness,
        "descriptor": descriptor,
        "total_steps": int(total_steps),
        "devices": jax.device_count(),
        "processes": jax.process_count(),
        "eqxrl_version": __version__,
    }


_FIXED = ("generation", "member", "env_steps", "fitness", "train_return", "parent")
EPISODE_RETURN = "episode_return"
DESCRIPTOR = "descriptor"


def write_history_csv(path: Any, history: History) -> None:
    """One row per (generation, member): `env_steps`, `fitness`, `train_return`, `parent`,
    one column per hyperparameter, then when the history has them `eval_return`,
    `episode_return/<k>` (the return of evaluation episode `k`) and `descriptor/<j>`
    (component `j` of the member's mean final descriptor)."""
    names = list(history.hyperparameters)
    extra: list[tuple[str, np.ndarray]] = []  # (column, values[g, i])
    if history.eval_return is not None:
        extra.append(("eval_return", history.eval_return))
    for prefix, values in ((EPISODE_RETURN, history.episode_returns), (DESCRIPTOR, history.descriptor)):
        if values is not None:
            extra += [(f"{prefix}/{k}", values[..., k]) for k in range(values.shape[-1])]
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow([*_FIXED, *names, *(c for c, _ in extra)])
    for g in range(history.num_generations):
        for i in range(history.fitness.shape[1]):
            writer.writerow(
                [g, i, int(history.env_steps[g]), repr(float(history.fitness[g, i])),
                 repr(float(history.train_return[g, i])), int(history.parent[g, i]),
                 *(repr(float(history.hyperparameters[n][g, i])) for n in names),
                 *(repr(float(v[g, i])) for _, v in extra)]
            )  # fmt: skip
    atomic_write_bytes(pathlib.Path(path), buffer.getvalue().encode())


def read_history_csv(path: Any) -> History:
    """**Returns:** the `History` of a `history.csv` (also one written before the
    `eval_return`, `episode_return/<k>` and `descriptor/<j>` columns existed)."""
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    if not rows:
        raise ValueError(f"{path} has no rows")
    columns = list(rows[0])
    names = [k for k in columns if k not in _FIXED and k != "eval_return" and "/" not in k]
    g = max(int(r["generation"]) for r in rows) + 1
    p = max(int(r["member"]) for r in rows) + 1
    grid = lambda k, t: np.array([t(r[k]) for r in rows]).reshape(g, p)  # noqa: E731

    def stacked(prefix: str) -> np.ndarray | None:
        cols = sorted((int(c.split("/", 1)[1]), c) for c in columns if c.startswith(prefix + "/"))
        return np.stack([grid(c, float) for _, c in cols], axis=-1) if cols else None

    return History(
        env_steps=grid("env_steps", int)[:, 0],
        fitness=grid("fitness", float),
        train_return=grid("train_return", float),
        parent=grid("parent", int),
        hyperparameters={n: grid(n, float) for n in names},
        eval_return=grid("eval_return", float) if "eval_return" in columns else None,
        episode_returns=stacked(EPISODE_RETURN),
        descriptor=stacked(DESCRIPTOR),
    )


def plot_history(path: Any, history: History, title: str | None = None) -> None:
    """Draw fitness and each hyperparameter over generations (one line per member; best in bold)."""
    names = list(history.hyperparameters)
    panels = 1 + len(names)
    fig = figure((6.4, 2.4 * panels))
    axes = fig.subplots(panels, 1, sharex=True, squeeze=False)[:, 0]
    x = history.env_steps
    best = history.best()[0] if history.num_generations else None
    for ax, (label, values) in zip(axes, [("fitness", history.fitness)] + [(n, history.hyperparameters[n]) for n in names]):
        for i in range(values.shape[1]):
            ax.plot(x, values[:, i], lw=2.0 if i == best else 0.8, alpha=1.0 if i == best else 0.5)
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
        if label != "fitness" and np.all(values > 0) and values.max() / max(values.min(), 1e-30) > 20:
            ax.set_yscale("log")
    axes[-1].set_xlabel("env steps per member")
    if title:
        axes[0].set_title(title)
    atomic_write_bytes(pathlib.Path(path), png_bytes(fig))


def generation_checkpoint(population: Population, records: Sequence[Mapping[str, np.ndarray]], num_generations: int) -> Checkpoint:
    """A PBT run after a generation, as sinks' `checkpoint` hook gets it: the `population` as its
    state, the generations done as its iteration (`num_generations` in all, one per chunk), and as
    its metrics every generation's record stacked per member, `(members, generations, ...)`
    (`generation_records` gives the records back)."""
    common = [k for k in records[-1] if all(k in r for r in records)] if records else []
    metrics = {k: np.stack([np.asarray(r[k]) for r in records], axis=1) for k in common}
    return Checkpoint(population, len(records), num_generations, 1, metrics)


def generation_records(metrics: Mapping[str, np.ndarray]) -> list[dict[str, np.ndarray]]:
    """**Returns:** the per-generation records (see `PBT.step`) of `generation_checkpoint`'s metrics."""
    count = min((np.shape(v)[1] for v in metrics.values()), default=0)
    return [{k: v[:, g] for k, v in metrics.items()} for g in range(count)]


class HistorySink(AbstractSink):
    """`history.csv` (`write_history_csv`) and `history.png` (`plot_history`) of a PBT run, written
    whole at every generation (`checkpoint`) by process 0. **Arguments:** the `pbt`, and `run_dir`
    (default: the run's)."""

    required = True

    def __init__(self, pbt: Any, run_dir: Any = None):
        self.pbt, self.run_dir = pbt, None if run_dir is None else pathlib.Path(run_dir)

    def start(self, run: RunInfo) -> None:
        if self.run_dir is None:
            if run.run_dir is None:
                raise ValueError("HistorySink(run_dir) is needed outside a run directory, got None")
            self.run_dir = pathlib.Path(run.run_dir)

    def checkpoint(self, checkpoint: Checkpoint) -> None:
        pbt = self.pbt
        history = history_from_records(pbt, generation_records(checkpoint.metrics))
        if jax.process_index() == 0:
            write_history_csv(self.run_dir / HISTORY, history)
            plot_history(self.run_dir / PLOT, history, title=f"PBT {type(pbt.agent).__name__} on {pbt.agent.env.name}")


class PopulationSink(AbstractSink):
    """A PBT run's population checkpoints (`population/<generation>/`, by a `PopulationWriter`,
    on every process), which `resume` reads: at every generation (`checkpoint`) the write of
    the population and its records starts; `finish` waits for the last (`CheckpointError` if it
    failed, unless the run failed otherwise). **Arguments:** the `run_dir`, the `pbt`, the run's
    `total_steps`."""

    required = True

    def __init__(self, run_dir: Any, pbt: Any, total_steps: int):
        self.run_dir, self.pbt, self.total_steps = pathlib.Path(run_dir), pbt, total_steps
        self.writer: PopulationWriter | None = None

    def start(self, run: RunInfo | None = None) -> None:
        if self.writer is None:  # (RunDirectory.start starts it, once the directory is prepared)
            self.writer = PopulationWriter(self.run_dir, self.pbt, self.total_steps)

    def checkpoint(self, checkpoint: Checkpoint) -> None:
        self.writer.submit(checkpoint.state, generation_records(checkpoint.metrics))

    def close(self) -> None:
        """Wait for the last write (`CheckpointError` if it failed)."""
        if self.writer is not None:
            writer, self.writer = self.writer, None
            writer.close()

    def finish(self, status: str) -> None:
        if status == "complete":
            self.close()
        else:
            with contextlib.suppress(Exception):  # (the run's own error is the one to report)
                self.close()


class RunDirectory:
    """A PBT run directory: `PBT.run(..., run_dir=...)` prepares it (`start`: `pbt.json`, or a
    resumed run's records) and drives its sinks (`outputs`: `HistorySink`, and with `checkpoint`
    `PopulationSink`) with its other sinks after every generation. Called with the population and
    the records (a `PBT.run(callback=...)`), it hands them to those sinks; `close` waits for the
    last checkpoint.

    **Arguments:** the `run_dir`, the `pbt` configuration, the run's `total_steps`, and
    `checkpoint` (also write `population/<generation>/`, which `resume` needs).
    """

    def __init__(self, run_dir: Any, pbt: Any, total_steps: int, checkpoint: bool = True):
        self.run_dir = pathlib.Path(run_dir)
        self.pbt = pbt
        self.total_steps = total_steps
        self.checkpoint = checkpoint
        self.population = PopulationSink(self.run_dir, pbt, total_steps) if checkpoint else None
        self.outputs: list[AbstractSink] = [HistorySink(pbt, self.run_dir), *([self.population] if checkpoint else [])]

    @property
    def writer(self) -> PopulationWriter | None:
        """The population checkpoints' writer (None before `start` or without `checkpoint`)."""
        return None if self.population is None else self.population.writer

    def start(self, population: Population) -> list[dict[str, np.ndarray]]:
        """Prepare the directory for a new run (writes `pbt.json`; removes the checkpoints
        of an earlier run there), or read a resumed one's records. **Returns:** the records
        of the generations done so far."""
        self.run_dir.mkdir(parents=True, exist_ok=True)
        done = int(population.generation)
        if done == 0:
            if jax.process_index() == 0:
                atomic_write_bytes(self.run_dir / CONFIG, (json.dumps(pbt_config(self.pbt, self.total_steps), indent=2) + "\n").encode())
                if self.checkpoint and (self.run_dir / CHECKPOINTS).is_dir():
                    shutil.rmtree(self.run_dir / CHECKPOINTS)
            if jax.process_count() > 1:
                from jax.experimental import multihost_utils

                multihost_utils.sync_global_devices("eqxrl-pbt-start")
            records = []
        else:
            records = load_records(self.run_dir, self.pbt, self.total_steps, done)
        if self.population is not None:
            self.population.start()
        return records

    def __call__(self, population: Population, records: Sequence[Mapping[str, np.ndarray]]) -> None:
        """Write the history (CSV and plot) and, with `checkpoint`, start writing the population."""
        generation = generation_checkpoint(population, records, self.pbt.num_generations(self.total_steps))
        for sink in self.outputs:
            sink.checkpoint(generation)

    def sinks(self) -> tuple[list[str], dict[str, Any]]:
        """**Returns:** the sink names and records `pbt.json` holds (`"log"`, `"sinks"`)."""
        config = json.loads(read_text_bounded(self.run_dir / CONFIG))
        return list(config.get("log", [])), dict(config.get("sinks", {}))

    def record_sinks(self, names: list[str], records: Mapping[str, Any]) -> None:
        """Write the run's sinks into `pbt.json`, so that `resume` logs to them again."""
        config = json.loads(read_text_bounded(self.run_dir / CONFIG))
        config.update(log=names, sinks=dict(records))
        atomic_write_bytes(self.run_dir / CONFIG, (json.dumps(config, indent=2) + "\n").encode())

    def close(self) -> None:
        """Wait for the last checkpoint to be written (`CheckpointError` if it failed)."""
        if self.population is not None:
            self.population.close()


def generation_rows(pbt: Any, record: Mapping[str, np.ndarray], generation: int) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """A generation's record (see `PBT.step`) as one row for `eqxrl.loop.AbstractSink.rows`: at
    env steps `generation * steps_per_generation`, `fitness`, `train_return` (and `eval_return`)
    and `hp/<name>` per member (`scalar_rows` gives their means, and each member's), and
    `best_fitness`."""
    fitness = np.asarray(record["fitness"], np.float64)
    metrics = {"fitness": fitness[:, None], "train_return": np.asarray(record["train_return"], np.float64)[:, None]}
    if "eval_return" in record and getattr(pbt, "eval_every", None):
        metrics["eval_return"] = np.asarray(record["eval_return"], np.float64)[:, None]
    metrics.update({f"hp/{n}": np.asarray(record[f"hp/{n}"], np.float64)[:, None] for n in pbt.space})
    best = np.nanmax(fitness) if np.isfinite(fitness).any() else np.nan
    metrics["best_fitness"] = np.array([[best]])
    return np.array([generation * pbt.steps_per_generation]), metrics
