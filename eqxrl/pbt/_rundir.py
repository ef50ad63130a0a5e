"""A PBT run directory: `pbt.json`, `history.csv`, `history.png`, `population.eqx`.

Written after every generation, each file atomically (a temporary file, then
`os.replace`): a crash leaves the previous generation's files intact.
`population.eqx` holds the whole population (every member's hyperparameters,
parameters, optimizer and target networks, replay buffer, statistics, keys),
PBT's key and the records of the generations so far, so `eqxrl.pbt.resume(run_dir)`
continues exactly as the uninterrupted run would have.
"""

import csv
import dataclasses
import io
import json
import pathlib
import zlib
from collections.abc import Mapping, Sequence
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from ..agents import agent_name, class_path
from ..core import __version__, figure, is_key, keys_as_data, png_bytes
from ..runs import agent_config, atomic_write_bytes
from ._generation import EvaluationReturn
from ._population import History, Population, gather, history_from_records

__all__ = ["CHECKPOINT", "CONFIG", "HISTORY", "PLOT", "RunDirectory", "load_checkpoint", "module_spec", "pbt_config", "plot_history", "read_history_csv", "save_checkpoint", "write_history_csv"]

CONFIG = "pbt.json"
HISTORY = "history.csv"
PLOT = "history.png"
CHECKPOINT = "population.eqx"
_MAGIC = b"eqxrl-population-1\n"


def module_spec(m: eqx.Module) -> dict[str, Any]:
    """A domain or exploit strategy as JSON: its type name and fields."""
    fields = {f.name: getattr(m, f.name) for f in dataclasses.fields(m)}
    return {"type": type(m).__name__, **{k: list(v) if isinstance(v, tuple) else v for k, v in fields.items()}}


def pbt_config(pbt: Any, total_steps: int) -> dict[str, Any]:
    """**Returns:** the JSON description of a PBT run (agent, env, space, exploit, budget)."""
    if pbt.fitness is not None and not isinstance(pbt.fitness, EvaluationReturn):
        fitness = {"type": "custom", "repr": repr(pbt.fitness)}
    else:
        fitness = {"type": "EvaluationReturn", "num_episodes": pbt.eval_episodes}
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
        "total_steps": int(total_steps),
        "devices": jax.device_count(),
        "processes": jax.process_count(),
        "eqxrl_version": __version__,
    }


def _record_template(pbt: Any, generations: int) -> dict[str, np.ndarray]:
    size = pbt.population_size
    out = {"fitness": np.zeros((generations, size), np.float32), "train_return": np.zeros((generations, size), np.float32)}
    out["source"] = np.zeros((generations, size), np.int32)
    for name in pbt.space:
        out[f"hp/{name}"] = np.zeros((generations, size), np.float32)
    if pbt.eval_every:
        out["eval_return"] = np.zeros((generations, size), np.float32)
    return out


def save_checkpoint(path: Any, pbt: Any, total_steps: int, population: Population, records: Sequence[Mapping[str, np.ndarray]]) -> None:
    """Write `population` and the generation records to one file, atomically."""
    generations = pbt.num_generations(total_steps)
    padded = _record_template(pbt, generations)
    for g, r in enumerate(records):
        for k in padded:
            padded[k][g] = np.asarray(r[k])
    arrays, _ = eqx.partition((population.agent, population.state, population.key, population.generation), eqx.is_array)
    host = jax.tree.map(gather, keys_as_data(arrays))
    buffer = io.BytesIO()
    eqx.tree_serialise_leaves(buffer, (host, padded))
    payload = buffer.getvalue()
    if jax.process_index() == 0:
        # A header of the format's name and the payload's CRC-32: a resume checks both.
        atomic_write_bytes(pathlib.Path(path), _MAGIC + zlib.crc32(payload).to_bytes(4, "big") + payload)


def load_checkpoint(path: Any, pbt: Any, total_steps: int) -> tuple[Population, list[dict[str, np.ndarray]]]:
    """**Returns:** the population and the records saved by `save_checkpoint`."""
    path = pathlib.Path(path)
    template = eqx.filter_eval_shape(pbt.init, jax.random.key(0))
    is_leaf_array = lambda x: isinstance(x, jax.ShapeDtypeStruct) or eqx.is_array(x)  # noqa: E731
    arrays, static = eqx.partition((template.agent, template.state, template.key, template.generation), is_leaf_array)
    like = jax.tree.map(lambda x: jax.eval_shape(jax.random.key_data, x) if is_key(x) else x, arrays)
    like = jax.tree.map(lambda x: np.zeros(x.shape, x.dtype), like)
    padded = _record_template(pbt, pbt.num_generations(total_steps))
    data = path.read_bytes()
    header = len(_MAGIC) + 4
    if not data.startswith(_MAGIC):
        raise ValueError(f"{path} is not an eqxrl PBT checkpoint (damaged, or written by eqxrl before 0.2): it cannot be resumed")
    if zlib.crc32(data[header:]) != int.from_bytes(data[len(_MAGIC) : header], "big"):
        raise ValueError(f"{path} is damaged (its CRC-32 does not match): it cannot be resumed")
    try:
        host, records = eqx.tree_deserialise_leaves(io.BytesIO(data[header:]), (like, padded))
    except Exception as e:  # equinox raises RuntimeError/ValueError/EOFError for a mismatch
        raise ValueError(f"{path} does not match this PBT configuration: {' '.join(str(e).split())}") from None
    keyed = jax.tree.map(
        lambda t, x: jax.random.wrap_key_data(x, impl=getattr(t.dtype, "_impl", None)) if is_key(t) else x,
        arrays,
        host,
        is_leaf=lambda x: x is None,
    )
    sharding = pbt.sharding()
    if sharding is not None:
        keyed = jax.tree.map(lambda x: jax.device_put(x, sharding) if eqx.is_array(x) and x.ndim else x, keyed)
    agent, state, key, generation = eqx.combine(keyed, static)
    population = Population(agent, state, key, jnp.asarray(generation, jnp.int32))
    done = int(generation)
    return population, [{k: v[g] for k, v in records.items()} for g in range(done)]


def write_history_csv(path: Any, history: History) -> None:
    """One row per (generation, member): env_steps, fitness, train_return, parent, hyperparameters."""
    names = list(history.hyperparameters)
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(["generation", "member", "env_steps", "fitness", "train_return", "parent", *names])
    for g in range(history.num_generations):
        for i in range(history.fitness.shape[1]):
            writer.writerow(
                [g, i, int(history.env_steps[g]), repr(float(history.fitness[g, i])),
                 repr(float(history.train_return[g, i])), int(history.parent[g, i]),
                 *(repr(float(history.hyperparameters[n][g, i])) for n in names)]
            )  # fmt: skip
    atomic_write_bytes(pathlib.Path(path), buffer.getvalue().encode())


def read_history_csv(path: Any) -> History:
    """**Returns:** the `History` of a `history.csv`."""
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    if not rows:
        raise ValueError(f"{path} has no rows")
    names = [k for k in rows[0] if k not in ("generation", "member", "env_steps", "fitness", "train_return", "parent")]
    g = max(int(r["generation"]) for r in rows) + 1
    p = max(int(r["member"]) for r in rows) + 1
    grid = lambda k, t: np.array([t(r[k]) for r in rows]).reshape(g, p)  # noqa: E731
    return History(
        env_steps=grid("env_steps", int)[:, 0],
        fitness=grid("fitness", float),
        train_return=grid("train_return", float),
        parent=grid("parent", int),
        hyperparameters={n: grid(n, float) for n in names},
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


class RunDirectory:
    """Writes a PBT run to `run_dir`: `PBT.run(..., run_dir=...)` calls it after every generation.

    **Arguments:** the `run_dir`, the `pbt` configuration, the run's `total_steps`, and
    `checkpoint` (also write `population.eqx`, which `resume` needs).
    """

    def __init__(self, run_dir: Any, pbt: Any, total_steps: int, checkpoint: bool = True):
        self.run_dir = pathlib.Path(run_dir)
        self.pbt = pbt
        self.total_steps = total_steps
        self.checkpoint = checkpoint

    def start(self, population: Population) -> list[dict[str, np.ndarray]]:
        """Prepare the directory for a new run (writes `pbt.json`), or read a resumed
        one's records. **Returns:** the records of the generations done so far."""
        self.run_dir.mkdir(parents=True, exist_ok=True)
        if int(population.generation) == 0:
            if jax.process_index() == 0:
                atomic_write_bytes(self.run_dir / CONFIG, (json.dumps(pbt_config(self.pbt, self.total_steps), indent=2) + "\n").encode())
            return []
        return load_checkpoint(self.run_dir / CHECKPOINT, self.pbt, self.total_steps)[1]

    def __call__(self, population: Population, records: Sequence[Mapping[str, np.ndarray]]) -> None:
        """Write the history (CSV and plot) and, with `checkpoint`, the population."""
        pbt = self.pbt
        history = history_from_records(pbt, records)
        if jax.process_index() == 0:
            write_history_csv(self.run_dir / HISTORY, history)
            plot_history(self.run_dir / PLOT, history, title=f"PBT {type(pbt.agent).__name__} on {pbt.agent.env.name}")
        if self.checkpoint:
            save_checkpoint(self.run_dir / CHECKPOINT, pbt, self.total_steps, population, records)
