"""Run directories: save a training run to disk and load it back.

A run directory holds

- `config.json`: the agent (registry name), the env name, every agent field,
  the budget, the seeds, the eqxrl version and the timings;
- `metrics.csv`: one row per (seed, iteration), one column per metric;
- `state.eqx`: the final training state (`eqx.tree_serialise_leaves`);
- `learning_curve.png`: mean training episode return against env steps;
- `eval.json`: evaluation returns (written by `save_evaluation`).

```python
import jax, eqxrl, eqxrl.rundir

agent, state, config = eqxrl.rundir.load_run("runs/ppo-CartPole-v1-20250101-120000")
returns = eqxrl.evaluate(agent, state, jax.random.key(0), num_episodes=32)
```
"""

import csv
import dataclasses
import datetime
import io
import json
import os
import pathlib
import math
import warnings
from collections.abc import Mapping
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import jaxtyping
from jaxtyping import Array, PyTree

from .core import Key, as_float
from .agents import DADS, DDPG, DQN, MPO, PPO, SAC, TD3, AbstractAgent
from .envs import make
from .agents import Stacked, stack
from .train import Checkpoint, TrainInfo, evaluate, train

AGENTS: dict[str, type[AbstractAgent]] = {"ppo": PPO, "dqn": DQN, "ddpg": DDPG, "td3": TD3, "sac": SAC, "mpo": MPO, "dads": DADS}
"""The agents the command line and `load_agent` know, by name. A new agent
plugs in by adding one entry."""

CONFIG = "config.json"
METRICS = "metrics.csv"
STATE = "state.eqx"
CURVE = "learning_curve.png"
EVAL = "eval.json"
CHECKPOINT = "checkpoint.npz"
TENSORBOARD = "tensorboard"

PathLike = str | os.PathLike
MAX_SEED = 2**31 - 1


# --------------------------------------------------------------------- helpers
def agent_name(agent: AbstractAgent | Stacked) -> str:
    """**Returns:** the `AGENTS` name of `agent`'s class (`"ppo"`), or the class name if unregistered."""
    if isinstance(agent, Stacked):
        agent = agent.agent
    for name, cls in AGENTS.items():
        if type(agent) is cls:
            return name
    return type(agent).__name__


def seed_keys(seed: int, num_seeds: int) -> jaxtyping.Key[Array, "*seeds"]:
    """The training keys of a run: `jax.random.key(seed + i)` for each of `num_seeds` seeds.

    Seed `s` gets the same key alone or as a member of a batch.

    **Returns:** one key of shape `()` when `num_seeds == 1`, else keys of shape `(num_seeds,)`.
    """
    if num_seeds < 1 or seed < 0 or seed + num_seeds - 1 > MAX_SEED:
        raise ValueError(f"seed_keys needs num_seeds >= 1 and seeds in [0, {MAX_SEED}], got {seed=}, {num_seeds=}")
    if num_seeds == 1:
        return jax.random.key(seed)
    return jax.vmap(jax.random.key)(jnp.arange(seed, seed + num_seeds, dtype=jnp.int32))


def eval_key(seed: int) -> Key:
    """The evaluation key of a run with base seed `seed` (a stream separate from training's)."""
    return jax.random.fold_in(jax.random.key(seed), 1)


def _float_fields(agent_cls: type) -> set[str]:
    return {f.name for f in dataclasses.fields(agent_cls) if f.metadata.get("converter") is as_float}


def _member_configs(agent: AbstractAgent | Stacked) -> list[dict[str, Any]]:
    """One `_agent_config` per member of a stack (or a list of one)."""
    if isinstance(agent, Stacked):
        return [_agent_config(agent.member(i)) for i in range(agent.size)]
    return [_agent_config(agent)]


def _agent_config(agent: AbstractAgent) -> dict[str, Any]:
    """`agent.config()` without agent/env (float leaves come written losslessly and readably)."""
    for name in _float_fields(type(agent)):
        shape = np.shape(getattr(agent, name))
        if shape != ():
            raise ValueError(
                f"save_run(agent): {type(agent).__name__}({name}) has shape {shape}; save one agent, not a stack"
            )
    return {k: v for k, v in agent.config().items() if k not in ("agent", "env")}


def _is_key(x: Any) -> bool:
    return isinstance(x, (jax.Array, jax.ShapeDtypeStruct)) and jax.dtypes.issubdtype(
        x.dtype, jax.dtypes.prng_key
    )


def _batch_size(metrics: Mapping[str, Any]) -> int | None:
    steps = np.asarray(metrics["env_steps"])
    if steps.ndim == 1:
        return None
    if steps.ndim == 2:
        return steps.shape[0]
    raise ValueError(f"metrics['env_steps'] must have shape (iterations,) or (seeds, iterations), got {steps.shape}")


def _write_json(path: pathlib.Path, data: Any) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, allow_nan=False) + "\n")
    os.replace(tmp, path)


def _one_line(e: BaseException) -> str:
    return " ".join(str(e).split())


# --------------------------------------------------------------------- saving
def save_metrics(path: PathLike, metrics: Mapping[str, Any], seed: int = 0) -> None:
    """Write per-iteration metrics as CSV: one row per (seed, iteration).

    **Arguments:**

    - `path`: the CSV file to write.
    - `metrics`: as returned by `eqxrl.train`: arrays of shape `(iterations,)`
      or `(seeds, iterations)`.
    - `seed`: the base seed; row `i` of a batch gets seed `seed + i`.

    **Returns:** nothing. The columns are `seed`, `iteration` (1-based), `env_steps`,
    `episode_return`, then the other metrics in alphabetical order.
    """
    if "env_steps" not in metrics or "episode_return" not in metrics:
        raise ValueError(f"metrics must include 'env_steps' and 'episode_return', got {sorted(metrics)}")
    arrays = {k: np.asarray(v) for k, v in metrics.items()}
    if _batch_size(arrays) is None:
        arrays = {k: v[None] for k, v in arrays.items()}
    shape = arrays["env_steps"].shape
    for k, v in arrays.items():
        if v.shape != shape:
            raise ValueError(f"metrics[{k!r}] has shape {v.shape}, metrics['env_steps'] {shape}")
    names = ["env_steps", "episode_return"] + sorted(k for k in arrays if k not in ("env_steps", "episode_return"))
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["seed", "iteration", *names])
        for s in range(shape[0]):
            for i in range(shape[1]):
                # str of a NumPy scalar: the shortest repr of its own dtype (float32: 19.666666).
                writer.writerow([seed + s, i + 1, *(str(arrays[k][s, i]) for k in names)])


def plot_learning_curve(
    metrics: Mapping[str, Any],
    path: PathLike,
    *,
    title: str | None = None,
    seed: int = 0,
    members: list[str] | None = None,
) -> None:
    """Plot the mean training episode return against env steps, with the min–max band over seeds.

    NaN returns (no episode finished in that iteration) are ignored.

    **Arguments:**

    - `metrics`: as returned by `eqxrl.train` (`env_steps` and `episode_return`,
      shape `(iterations,)` or `(seeds, iterations)`).
    - `path`: the image file to write (`.png`).
    - `title`: the figure title.
    - `seed`: the base seed, for the legend of a single-seed run.
    - `members`: for a sweep, one label per member: one line each instead of
      the mean and band over seeds.

    **Returns:** nothing.
    """
    # The object-oriented API renders with Agg and leaves pyplot's global backend alone.
    from matplotlib.figure import Figure

    steps = np.atleast_2d(np.asarray(metrics["env_steps"], dtype=np.float64))
    returns = np.atleast_2d(np.asarray(metrics["episode_return"], dtype=np.float64))
    num_seeds = returns.shape[0]
    finite = np.isfinite(returns)
    count = finite.sum(axis=0)
    keep = count > 0
    x = steps[0][keep]
    mean = np.where(finite, returns, 0.0).sum(axis=0)[keep] / count[keep]
    low = np.where(finite, returns, np.inf).min(axis=0)[keep]
    high = np.where(finite, returns, -np.inf).max(axis=0)[keep]

    fig = Figure(figsize=(6.4, 4.0), layout="constrained")
    ax = fig.add_subplot()
    if members is not None:
        for i, label in enumerate(members):
            ok = finite[i]
            ax.plot(steps[i][ok], returns[i][ok], label=label)
    elif num_seeds > 1:
        ax.fill_between(x, low, high, alpha=0.25, linewidth=0, label=f"min–max over {num_seeds} seeds")
        ax.plot(x, mean, label=f"mean over {num_seeds} seeds")
    else:
        ax.plot(x, mean, label=f"seed {seed}")
    if not keep.any():
        ax.text(0.5, 0.5, "no episode finished", ha="center", va="center", transform=ax.transAxes)
    else:
        ax.legend(loc="best")
    ax.set_xlabel("env steps")
    ax.set_ylabel("mean episode return (training)")
    ax.grid(alpha=0.3)
    if title:
        ax.set_title(title)
    fig.savefig(path, dpi=100)


def save_state(path: PathLike, state: PyTree) -> None:
    """Save a training state with `eqx.tree_serialise_leaves` (PRNG keys as their key data).

    **Arguments:** the file `path` and the `state` (one run's, or a batch's).

    **Returns:** nothing.
    """
    data = jax.tree.map(lambda x: jax.random.key_data(x) if _is_key(x) else x, state)
    eqx.tree_serialise_leaves(pathlib.Path(path), data)


def save_run(
    run_dir: PathLike,
    agent: AbstractAgent | Stacked,
    state: PyTree,
    metrics: Mapping[str, Any],
    *,
    total_steps: int,
    seed: int = 0,
    env_name: str | None = None,
    info: TrainInfo | None = None,
    command: str | None = None,
) -> pathlib.Path:
    """Save a finished training run: `config.json`, `metrics.csv`, `state.eqx`, `learning_curve.png`.

    **Arguments:**

    - `run_dir`: the directory to write (created if missing; files in it are replaced).
    - `agent`: the agent that was trained (one agent, not `eqxrl.stack`).
    - `state`, `metrics`: as returned by `eqxrl.train`; a leading seed axis on
      both means a batch of seeds.
    - `total_steps`: the env-step budget passed to `eqxrl.train`.
    - `seed`: the base seed; the keys were `eqxrl.rundir.seed_keys(seed, num_seeds)`.
    - `env_name`: the name `eqxrl.envs.make` builds the env from (default `agent.env.name`).
    - `info`: the `TrainInfo` of `train(..., return_info=True)`, for the timings.
    - `command`: the command line that made the run, recorded for reference.

    **Returns:** the run directory as a `pathlib.Path`.
    """
    if not isinstance(agent, (AbstractAgent, Stacked)):
        raise ValueError(f"save_run(agent) must be an eqxrl agent or eqxrl.stack([...]), got {type(agent).__name__}")
    run_dir = pathlib.Path(run_dir)
    if "env_steps" not in metrics or "episode_return" not in metrics:
        raise ValueError(f"save_run(metrics) must include 'env_steps' and 'episode_return', got {sorted(metrics)}")
    batch = _batch_size(metrics)
    num_seeds = 1 if batch is None else batch
    if isinstance(agent, Stacked) and num_seeds != agent.size:
        raise ValueError(f"save_run(metrics) must have a leading axis of {agent.size} for the stacked agents, got {num_seeds}")
    template = template_state(agent, num_seeds)
    got, want = jax.tree.leaves(state), jax.tree.leaves(template)
    if len(got) != len(want) or tuple(got[0].shape) != tuple(want[0].shape):
        raise ValueError(
            f"save_run(state) does not match the agent and the {num_seeds} seed(s) of the metrics: "
            f"first leaf has shape {tuple(got[0].shape) if got else None}, expected {tuple(want[0].shape)}"
        )
    run_dir.mkdir(parents=True, exist_ok=True)
    env_name = agent.env.name if env_name is None else env_name
    config = run_config(agent, env_name=env_name, total_steps=total_steps, seed=seed, num_seeds=num_seeds)
    if (run_dir / CONFIG).is_file():  # keep what train_run recorded at the start (chunking, flags)
        try:
            earlier = json.loads((run_dir / CONFIG).read_text())
            config = {**earlier, **{k: v for k, v in config.items() if k != "created"}}
        except (json.JSONDecodeError, UnicodeDecodeError):
            pass
    config["status"] = "complete"
    if info is not None:
        config["timings"] = {
            "compile_seconds": float(info.compile_seconds),
            "run_seconds": float(info.run_seconds),
            "steps_per_second": float(info.steps_per_second),
            "env_steps": int(info.env_steps),
            "num_iterations": int(info.num_iterations),
        }
    if command is not None:
        config["command"] = command
    save_state(run_dir / STATE, state)
    save_metrics(run_dir / METRICS, metrics, seed=int(seed))
    base = agent.agent if isinstance(agent, Stacked) else agent
    if isinstance(agent, Stacked):
        seeds = f"{num_seeds} members"
        labels = _member_labels(config["members"])
    else:
        seeds = f"{num_seeds} seeds" if num_seeds > 1 else f"seed {seed}"
        labels = None
    title = f"{type(base).__name__} on {env_name} ({seeds})"
    plot_learning_curve(metrics, run_dir / CURVE, title=title, seed=int(seed), members=labels)
    # config.json last: "status": "complete" marks a finished run directory.
    _write_json(run_dir / CONFIG, config)
    return run_dir


def _member_labels(members: list[dict[str, Any]]) -> list[str]:
    """Legend labels for sweep members: the fields in which they differ."""
    keys = [k for k in members[0] if any(m.get(k) != members[0].get(k) for m in members)]
    return [", ".join(f"{k}={m[k]}" for k in keys) or f"member {i}" for i, m in enumerate(members)]


def run_config(
    agent: AbstractAgent | Stacked,
    *,
    env_name: str | None = None,
    total_steps: int,
    seed: int = 0,
    num_seeds: int = 1,
    **extra: Any,
) -> dict[str, Any]:
    """The `config.json` of a run: agent name, env, every field (per member for a
    sweep), budget, seeds, the eqxrl version, and `extra` entries (chunking, flags).

    **Returns:** the JSON-ready dict; `agent_from_config` rebuilds the agent from it.
    """
    members = _member_configs(agent)
    base = agent.agent if isinstance(agent, Stacked) else agent
    config: dict[str, Any] = {
        "agent": agent_name(agent),
        "env": base.env.name if env_name is None else env_name,
        "agent_config": members[0],
        "total_steps": int(total_steps),
        "seeds": int(num_seeds),
        "seed": int(seed),
        "eqxrl_version": _version(),
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }
    if isinstance(agent, Stacked):
        config["members"] = members
    config.update(extra)
    return config


def save_evaluation(
    run_dir: PathLike, returns: Array | np.ndarray, *, deterministic: bool, seed: int
) -> dict[str, Any]:
    """Write `eval.json`: evaluation returns per seed, their means and the overall mean.

    **Arguments:**

    - `run_dir`: the run directory.
    - `returns`: from `eqxrl.evaluate`, shape `(episodes,)` or `(seeds, episodes)`.
    - `deterministic`: whether the policy's mode was used.
    - `seed`: the seed of the evaluation key (`eqxrl.rundir.eval_key(seed)`).

    **Returns:** the dict written (`returns`, `mean_per_seed`, `std_per_seed`, `mean`, ...).
    """
    summary = summarize_returns(returns)
    summary.update(deterministic=bool(deterministic), seed=int(seed))
    _write_json(pathlib.Path(run_dir) / EVAL, summary)
    return summary


def summarize_returns(returns: Array | np.ndarray) -> dict[str, Any]:
    """**Returns:** `{"episodes", "returns", "mean_per_seed", "std_per_seed", "mean"}` for
    returns of shape `(episodes,)` or `(seeds, episodes)` (lists are per seed)."""
    r = np.atleast_2d(np.asarray(returns, dtype=np.float64))
    if r.ndim != 2:
        raise ValueError(f"returns must have shape (episodes,) or (seeds, episodes), got {np.shape(returns)}")
    per_seed = r.mean(axis=1)
    return {
        "episodes": int(r.shape[1]),
        "returns": r.tolist(),
        "mean_per_seed": per_seed.tolist(),
        "std_per_seed": r.std(axis=1).tolist(),
        "mean": float(per_seed.mean()),
    }


def _version() -> str:
    from .core import __version__

    return __version__


# --------------------------------------------------------------------- loading
def load_config(run_dir: PathLike) -> dict[str, Any]:
    """Read a run directory's `config.json`.

    **Arguments:** `run_dir`, a directory written by `save_run` (or `eqxrl train`).

    **Returns:** the config dict. Raises `ValueError` when `run_dir` is not a run directory.
    """
    run_dir = pathlib.Path(run_dir)
    if not run_dir.exists():
        raise ValueError(f"run directory {str(run_dir)!r} does not exist")
    if not run_dir.is_dir():
        raise ValueError(f"run directory {str(run_dir)!r} is not a directory")
    path = run_dir / CONFIG
    if not path.is_file():
        raise ValueError(f"{str(run_dir)!r} is not an eqxrl run directory: it has no {CONFIG}")
    try:
        config = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ValueError(f"{path} is not valid JSON: {_one_line(e)}") from None
    if not isinstance(config, dict):
        raise ValueError(f"{path} must hold a JSON object, got {type(config).__name__}")
    for key, kind in (("agent", str), ("env", str), ("agent_config", dict), ("seeds", int), ("seed", int)):
        if not isinstance(config.get(key), kind) or isinstance(config.get(key), bool):
            raise ValueError(f"{path} must have {key!r} ({kind.__name__}), got {config.get(key)!r}")
    if config["seeds"] < 1:
        raise ValueError(f"{path}: 'seeds' must be >= 1, got {config['seeds']}")
    return config


def _as_field_value(name: str, value: Any, floats: set[str]) -> Any:
    if name in floats and isinstance(value, str):
        try:
            return float(value)  # "inf", "-inf", "nan"
        except ValueError:
            raise ValueError(f"{name} must be a number, got {value!r}") from None
    if isinstance(value, list):
        return tuple(_as_field_value(name, v, set()) for v in value)
    return value


def agent_from_config(config: Mapping[str, Any]) -> AbstractAgent | Stacked:
    """Rebuild an agent from a run config (as returned by `load_config`).

    **Arguments:** `config`, with `agent` (a name in `eqxrl.rundir.AGENTS`), `env`
    (a name for `eqxrl.envs.make`) and `agent_config` (the agent's fields).

    **Returns:** the agent. Raises `ValueError` if it cannot be rebuilt.
    """
    name = config["agent"]
    if name not in AGENTS:
        raise ValueError(
            f"unknown agent {name!r}; known agents: {sorted(AGENTS)} "
            "(for another agent, build it yourself and call load_state(run_dir, agent))"
        )
    cls = AGENTS[name]
    env = make(config["env"])
    floats = _float_fields(cls)
    init_fields = {f.name for f in dataclasses.fields(cls) if f.init and f.name != "env"}

    def build(fields: Mapping[str, Any]) -> AbstractAgent:
        unknown = sorted(set(fields) - init_fields)
        if unknown:
            raise ValueError(f"{cls.__name__} has no field(s) {unknown}")
        return cls(env, **{k: _as_field_value(k, v, floats) for k, v in fields.items()})

    if "members" in config:
        return stack([build(m) for m in config["members"]])
    return build(config["agent_config"])


def load_agent(run_dir: PathLike) -> AbstractAgent | Stacked:
    """Rebuild the agent of a run directory from its `config.json`.

    **Arguments:** `run_dir`, a directory written by `save_run` (or `eqxrl train`).

    **Returns:** the agent (the env is rebuilt with `eqxrl.envs.make`).
    Raises `ValueError` when it cannot be rebuilt.
    """
    config = load_config(run_dir)
    try:
        return agent_from_config(config)
    except (ValueError, TypeError) as e:
        raise ValueError(f"{pathlib.Path(run_dir) / CONFIG}: {_one_line(e)}") from None


def template_state(agent: AbstractAgent | Stacked, num_seeds: int = 1) -> PyTree:
    """The shape of `agent`'s training state, with no arrays allocated.

    **Arguments:** the `agent` and `num_seeds`; more than one seed adds a leading axis.

    **Returns:** `eqx.filter_eval_shape` of `agent.init` (vmapped over seeds when `num_seeds > 1`).
    """
    if isinstance(agent, Stacked):
        return eqx.filter_eval_shape(eqx.filter_vmap(lambda a, k: a.init(k)), agent.agent, seed_keys(0, agent.size))
    if num_seeds == 1:
        return eqx.filter_eval_shape(agent.init, jax.random.key(0))
    return eqx.filter_eval_shape(eqx.filter_vmap(agent.init), seed_keys(0, num_seeds))


def load_state(run_dir: PathLike, agent: AbstractAgent | Stacked, num_seeds: int | None = None) -> PyTree:
    """Load the final training state of a run directory.

    **Arguments:**

    - `run_dir`: a directory written by `save_run` (or `eqxrl train`).
    - `agent`: the agent the state belongs to (e.g. from `load_agent`).
    - `num_seeds`: the number of seeds (default: `seeds` in `config.json`).

    **Returns:** the state, with a leading seed axis when there are several seeds.
    Raises `ValueError` when `state.eqx` is missing or does not match `agent`.
    """
    run_dir = pathlib.Path(run_dir)
    if num_seeds is None:
        num_seeds = load_config(run_dir)["seeds"]
    path = run_dir / STATE
    if not path.is_file():
        unfinished = (run_dir / CHECKPOINT).is_file()
        hint = " (the run did not finish: continue it with `eqxrl train --resume RUN_DIR`)" if unfinished else ""
        raise ValueError(f"{str(run_dir)!r} has no {STATE}{hint}")
    return _deserialise_state(path, path, agent, num_seeds)


def _deserialise_state(source: Any, path: Any, agent: AbstractAgent | Stacked, num_seeds: int) -> PyTree:
    template = template_state(agent, num_seeds)
    like = jax.tree.map(lambda x: jax.eval_shape(jax.random.key_data, x) if _is_key(x) else x, template)
    name = type(agent.agent if isinstance(agent, Stacked) else agent).__name__
    try:
        data = eqx.tree_deserialise_leaves(source, like)
    except (RuntimeError, ValueError, OSError, EOFError) as e:
        cause = f": {_one_line(e.__cause__)}" if e.__cause__ is not None else ""
        raise ValueError(f"{path} does not match {name} with {num_seeds} seed(s): {_one_line(e)}{cause}") from None

    def unwrap(t: Any, x: Any) -> Any:
        if not _is_key(t):
            return x
        key = jax.random.wrap_key_data(x)
        if key.dtype != t.dtype:
            raise ValueError(f"{path}: PRNG key of type {key.dtype} does not match the agent's {t.dtype}")
        return key

    return jax.tree.map(unwrap, template, data)


# --------------------------------------------------------------------- checkpoints and resume
def _atomic_write_bytes(path: pathlib.Path, data: bytes) -> None:
    """Write `data` to `path` so that a crash leaves either the old file or the new one."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _first_mismatch(saved: list[dict[str, Any]], given: list[dict[str, Any]]) -> str | None:
    if len(saved) != len(given):
        return f"{len(saved)} member(s) saved, {len(given)} given"
    for i, (a, b) in enumerate(zip(saved, given)):
        for k in list(a) + [k for k in b if k not in a]:
            if a.get(k) != b.get(k):
                where = f"member {i}: " if len(saved) > 1 else ""
                return f"{where}{k}={a.get(k)!r} in the checkpoint, {k}={b.get(k)!r} in the agent given"
    return None


def save_checkpoint(run_dir: PathLike, agent: AbstractAgent | Stacked, checkpoint: Checkpoint) -> None:
    """Write `checkpoint.npz` atomically: the state, the metrics so far, where the run
    stands, the agent's config and the eqxrl version.

    **Arguments:** the `run_dir`, the `agent` being trained, and a `Checkpoint`
    from `eqxrl.train(..., callback=...)`.
    """
    state_bytes = io.BytesIO()
    eqx.tree_serialise_leaves(state_bytes, jax.tree.map(lambda x: jax.random.key_data(x) if _is_key(x) else x, checkpoint.state))
    meta = {
        "iteration": checkpoint.iteration,
        "num_iterations": checkpoint.num_iterations,
        "chunk_iterations": checkpoint.chunk_iterations,
        "agent": agent_name(agent),
        "members": _member_configs(agent),
        "eqxrl_version": _version(),
    }
    arrays = {f"metrics/{k}": np.asarray(v) for k, v in checkpoint.metrics.items()}
    buffer = io.BytesIO()
    np.savez(buffer, state=np.frombuffer(state_bytes.getvalue(), np.uint8), meta=np.array(json.dumps(meta)), **arrays)
    _atomic_write_bytes(pathlib.Path(run_dir) / CHECKPOINT, buffer.getvalue())


def load_checkpoint(run_dir: PathLike, agent: AbstractAgent | Stacked, num_seeds: int | None = None) -> Checkpoint:
    """Read `checkpoint.npz` back for `agent`.

    Raises `ValueError` naming the first mismatched field when the checkpoint was
    written for another configuration; warns when it was written by another eqxrl version.

    **Returns:** a `Checkpoint` for `eqxrl.train(..., resume=...)`.
    """
    run_dir = pathlib.Path(run_dir)
    path = run_dir / CHECKPOINT
    if not path.is_file():
        raise ValueError(f"{str(run_dir)!r} has no {CHECKPOINT} to resume from")
    if num_seeds is None:
        num_seeds = load_config(run_dir)["seeds"]
    try:
        with np.load(path, allow_pickle=False) as data:
            meta = json.loads(str(data["meta"]))
            state_bytes = data["state"].tobytes()
            metrics = {k.split("/", 1)[1]: data[k] for k in data.files if k.startswith("metrics/")}
    except (OSError, ValueError, KeyError, json.JSONDecodeError) as e:
        raise ValueError(f"{path} is not a readable eqxrl checkpoint: {_one_line(e)}") from None
    if meta["agent"] != agent_name(agent):
        raise ValueError(f"{path} was written for agent {meta['agent']!r}, got {agent_name(agent)!r}")
    mismatch = _first_mismatch(meta["members"], _member_configs(agent))
    if mismatch is not None:
        raise ValueError(f"{path} does not match the agent: {mismatch}")
    if meta["eqxrl_version"] != _version():
        warnings.warn(f"{path} was written by eqxrl {meta['eqxrl_version']}, this is eqxrl {_version()}", stacklevel=2)
    state = _deserialise_state(io.BytesIO(state_bytes), path, agent, num_seeds)
    return Checkpoint(state, meta["iteration"], meta["num_iterations"], meta["chunk_iterations"], metrics)


class _TensorBoard:
    """TensorBoard event files (tensorboardX) with every metric against env steps
    (the mean over seeds/members, and `episode_return` per seed/member)."""

    def __init__(self, run_dir: pathlib.Path, start: int, start_step: int):
        from tensorboardX import SummaryWriter

        # On resume, events a crashed run wrote past its last checkpoint are purged.
        self.writer = SummaryWriter(str(run_dir / TENSORBOARD), purge_step=start_step or None)
        self.done = start

    def write(self, metrics: Mapping[str, np.ndarray], iteration: int) -> None:
        steps = np.atleast_2d(np.asarray(metrics["env_steps"]))
        for i in range(self.done, iteration):
            step = int(steps[0, i])
            for k, v in metrics.items():
                if k == "env_steps":
                    continue
                col = np.atleast_2d(np.asarray(v, np.float64))[:, i]
                if np.isfinite(col).any():
                    self.writer.add_scalar(k, float(np.nanmean(col)), step)
                if k == "episode_return" and col.size > 1:
                    for s, x in enumerate(col):
                        if np.isfinite(x):
                            self.writer.add_scalar(f"episode_return/member_{s}", float(x), step)
        self.done = iteration
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


def train_run(
    run_dir: PathLike,
    agent: AbstractAgent | Stacked,
    *,
    total_steps: int,
    seed: int = 0,
    num_seeds: int = 1,
    checkpoint_every: int | None = None,
    nan_guard: bool = False,
    tensorboard: bool = False,
    progress: bool = True,
    eval_episodes: int = 32,
    env_name: str | None = None,
    command: str | None = None,
    _resume: Checkpoint | None = None,
) -> tuple[PyTree, dict[str, np.ndarray], TrainInfo, dict[str, Any]]:
    """Train with a run directory: `config.json` first, `checkpoint.npz` every
    `checkpoint_every` env steps (atomically), TensorBoard events if asked, then
    the final state, metrics, learning curve and evaluation (`eval.json`).

    **Arguments:**

    - `run_dir`: the directory (created; it must not hold another run).
    - `agent`: an agent, or `eqxrl.stack([...])` (a sweep, one key per member).
    - `total_steps`, `seed`, `num_seeds`: the budget per seed/member and the keys
      (`seed_keys(seed, num_seeds)`; a sweep uses one seed per member).
    - `checkpoint_every`: env steps between checkpoints (default: about 10 per run).
    - `nan_guard`, `progress`: as for `eqxrl.train`; `tensorboard`: write event files
      under `RUN_DIR/tensorboard`.
    - `eval_episodes`: deterministic evaluation episodes per seed at the end.

    **Returns:** `(state, metrics, info, evaluation summary)`.
    `resume_run(run_dir)` continues an interrupted call exactly.
    """
    run_dir = pathlib.Path(run_dir)
    base = agent.agent if isinstance(agent, Stacked) else agent
    if isinstance(agent, Stacked):
        num_seeds = agent.size
    keys = seed_keys(seed, num_seeds)
    per_iteration = base.steps_per_iteration
    num_iterations = int(total_steps) // per_iteration
    if num_iterations < 1:
        raise ValueError(
            f"train_run(total_steps={total_steps}) must cover at least one iteration of "
            f"{type(base).__name__} ({per_iteration} env steps)"
        )
    if _resume is None:
        every = max(1, num_iterations // 10) if checkpoint_every is None else max(1, int(checkpoint_every) // per_iteration)
        chunk = max(1, min(math.ceil(num_iterations / 50), every))
        config = run_config(
            agent, env_name=env_name, total_steps=total_steps, seed=seed, num_seeds=num_seeds,
            chunk_iterations=chunk, checkpoint_every=every * per_iteration, nan_guard=bool(nan_guard),
            tensorboard=bool(tensorboard), eval_episodes=int(eval_episodes), status="running",
        )  # fmt: skip
        if command is not None:
            config["command"] = command
        run_dir.mkdir(parents=True, exist_ok=True)
        _write_json(run_dir / CONFIG, config)
    else:
        config = load_config(run_dir)
        chunk, every = config["chunk_iterations"], max(1, config["checkpoint_every"] // per_iteration)
    done = _resume.iteration if _resume is not None else 0
    board = _TensorBoard(run_dir, done, done * per_iteration + 1 if done else 0) if tensorboard else None
    last_saved = [done]

    def on_chunk(checkpoint: Checkpoint) -> None:
        if board is not None:
            board.write(checkpoint.metrics, checkpoint.iteration)
        # A checkpoint at the first chunk boundary past each multiple of `every` iterations.
        if checkpoint.iteration // every > last_saved[0] // every or checkpoint.iteration == checkpoint.num_iterations:
            save_checkpoint(run_dir, agent, checkpoint)
            last_saved[0] = checkpoint.iteration

    try:
        state, metrics, info = train(
            agent, keys, int(total_steps), progress=progress, chunk_iterations=chunk, return_info=True,
            nan_guard=nan_guard, callback=on_chunk, resume=_resume,
        )  # fmt: skip
    finally:
        if board is not None:
            board.close()
    save_run(run_dir, agent, state, metrics, total_steps=total_steps, seed=seed, env_name=config["env"], info=info,
             command=config.get("command"))  # fmt: skip
    returns = evaluate(agent, state, eval_key(seed), num_episodes=int(config.get("eval_episodes", eval_episodes)))
    summary = save_evaluation(run_dir, returns, deterministic=True, seed=seed)
    if not isinstance(agent, Stacked):
        summary["report_files"] = agent.save_report(state, eval_key(seed), run_dir)
    # The run is complete and state.eqx holds its final state: the checkpoint has served.
    (run_dir / CHECKPOINT).unlink(missing_ok=True)
    return state, metrics, info, summary


def resume_run(run_dir: PathLike, *, progress: bool = True) -> tuple[PyTree, dict[str, np.ndarray], TrainInfo, dict[str, Any]]:
    """Continue an interrupted `train_run` (or `eqxrl train`) from its last checkpoint.

    The resumed run ends with the same metrics and parameters as the
    uninterrupted one (on CPU, bit for bit). **Returns:** as `train_run`.
    """
    config = load_config(run_dir)
    if "chunk_iterations" not in config:
        raise ValueError(f"{str(run_dir)!r} was not written with checkpoints (no 'chunk_iterations' in {CONFIG})")
    try:
        agent = agent_from_config(config)
    except (ValueError, TypeError) as e:
        raise ValueError(f"{pathlib.Path(run_dir) / CONFIG}: {_one_line(e)}") from None
    checkpoint = load_checkpoint(run_dir, agent, config["seeds"])
    return train_run(
        run_dir, agent, total_steps=config["total_steps"], seed=config["seed"], num_seeds=config["seeds"],
        nan_guard=config.get("nan_guard", False), tensorboard=config.get("tensorboard", False), progress=progress,
        _resume=checkpoint,
    )  # fmt: skip


# --------------------------------------------------------------------- inference
class Policy(eqx.Module):
    """A trained policy: `policy(obs)` acts on a batch of observations.

    Built by `load_policy`; holds the agent and one member's state (or all).
    """

    agent: AbstractAgent
    state: PyTree
    deterministic: bool = eqx.field(static=True, default=True)

    def __call__(self, obs: Array, key: Key | None = None) -> Array:
        """**Returns:** actions for `obs` of shape `(*batch, *obs_shape)`
        (a sampled policy needs a `key`)."""
        return _act(self.agent, self.state, obs, key, self.deterministic)


@eqx.filter_jit
def _act(agent, state, obs, key, deterministic):
    return agent.act(state, obs, key, deterministic=deterministic)


def load_policy(run_dir: PathLike, member: int = 0, deterministic: bool = True) -> Policy:
    """Load a trained policy from a run directory: three lines from disk to actions.

    ```python
    policy = eqxrl.rundir.load_policy("runs/ppo-CartPole-v1-...")
    actions = policy(obs)                      # obs: (batch, *obs_shape)
    ```

    **Arguments:** the `run_dir`, which seed/sweep `member` (default 0), and
    whether to act with the policy's mode (`deterministic`).
    """
    config = load_config(run_dir)
    agent = load_agent(run_dir)
    state = load_state(run_dir, agent, config["seeds"])
    size = config["seeds"]
    if not -size <= member < size:
        raise ValueError(f"load_policy(member) must be in [-{size}, {size}) for this run of {size} seed(s), got {member}")
    if isinstance(agent, Stacked):
        agent, state = agent.member(member), jax.tree.map(lambda x: x[member], state)
    elif size > 1:
        state = jax.tree.map(lambda x: x[member], state)
    return Policy(agent, state, bool(deterministic))


def load_run(run_dir: PathLike) -> tuple[AbstractAgent | Stacked, PyTree, dict[str, Any]]:
    """Reload a run: the agent, its final training state and its config.

    **Arguments:** `run_dir`, a directory written by `save_run` (or `eqxrl train`).

    **Returns:** `(agent, state, config)`, ready for `eqxrl.evaluate(agent, state, key)`.
    """
    config = load_config(run_dir)
    agent = load_agent(run_dir)
    return agent, load_state(run_dir, agent, config["seeds"]), config


def load_metrics(run_dir: PathLike) -> dict[str, np.ndarray]:
    """Read a run directory's `metrics.csv` back into arrays.

    **Arguments:** `run_dir`, a directory written by `save_run` (or `eqxrl train`).

    **Returns:** a dict of arrays of shape `(iterations,)` for one seed or
    `(seeds, iterations)`, as `eqxrl.train` returned them (plus `iteration`).
    """
    path = pathlib.Path(run_dir) / METRICS
    if not path.is_file():
        raise ValueError(f"{str(run_dir)!r} has no {METRICS}")
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    if not rows or "seed" not in rows[0]:
        raise ValueError(f"{path} has no rows or no 'seed' column")
    seeds = list(dict.fromkeys(row["seed"] for row in rows))
    columns: dict[str, np.ndarray] = {}
    for name in rows[0]:
        if name == "seed":
            continue
        values = [row[name] for row in rows]
        try:
            array = np.array([int(v) for v in values], dtype=np.int64)
        except ValueError:
            array = np.array([float(v) for v in values], dtype=np.float64)
        columns[name] = array
    if len(rows) % len(seeds):
        raise ValueError(f"{path}: {len(rows)} rows do not split evenly over {len(seeds)} seeds")
    per_seed = len(rows) // len(seeds)
    if len(seeds) == 1:
        return columns
    return {k: v.reshape(len(seeds), per_seed) for k, v in columns.items()}


def load_evaluation(run_dir: PathLike) -> dict[str, Any]:
    """**Returns:** the contents of a run directory's `eval.json`."""
    path = pathlib.Path(run_dir) / EVAL
    if not path.is_file():
        raise ValueError(f"{str(run_dir)!r} has no {EVAL}")
    return json.loads(path.read_text())


__all__ = [
    "AGENTS",
    "Policy",
    "load_checkpoint",
    "load_policy",
    "resume_run",
    "run_config",
    "save_checkpoint",
    "train_run",
    "MAX_SEED",
    "agent_from_config",
    "agent_name",
    "eval_key",
    "load_agent",
    "load_config",
    "load_evaluation",
    "load_metrics",
    "load_run",
    "load_state",
    "plot_learning_curve",
    "save_evaluation",
    "save_metrics",
    "save_run",
    "save_state",
    "seed_keys",
    "summarize_returns",
    "template_state",
]

