"""`eqxrl.save` / `eqxrl.load`: an agent and its training state in one directory, on the
plain Python path (no run directory, no budget, no metrics)."""

import json
import os
import pathlib
import shutil
from typing import Any

import numpy as np
from jaxtyping import PyTree

from ..agents import agent_name, class_path
from ..core import __version__, one_line, trust_modules, version_note
from ..envs import AbstractEnv
from ..loop import state_batch
from ..store import check_stored, crc32_of, read_text_bounded, temporary_dir
from ._checkpoint import state_arrays
from ._config import agent_from_config, member_configs
from ._files import PathLike
from ._state import state_array_template, unflatten_state

__all__ = ["load", "save"]

AGENT = "agent.json"
STATE = "state"


def save(path: PathLike, agent: Any, state: PyTree, *, overwrite: bool = False) -> pathlib.Path:
    """Save an agent and its training state to the directory `path`.

    ```python
    state, metrics = eqxrl.train(agent, jax.random.key(0), 100_000)
    eqxrl.save("ppo-cartpole", agent, state)
    agent, state = eqxrl.load("ppo-cartpole")
    ```

    **Arguments:**

    - `path`: a directory to create (written complete or not at all: a temporary
      directory beside it, renamed when done).
    - `agent`, `state`: as `eqxrl.train` takes and returns them (one run, a seed
      batch, or a stack and its state).
    - `overwrite`: replace an existing save at `path` (otherwise an error).

    **Returns:** the directory. `agent.json` holds the agent (its class, env name and
    fields), `state/` the state's arrays (orbax), with a CRC-32 that `load` checks.
    """
    path = pathlib.Path(path)
    batch = state_batch("save", agent, state)
    if path.exists() and not overwrite:
        raise ValueError(f"save(path): {str(path)!r} already exists; pass overwrite=True to replace it")
    if path.exists() and not (path / AGENT).is_file():
        raise ValueError(f"save(path): {str(path)!r} exists and is not an eqxrl save; it is left alone")
    if path.is_symlink() and overwrite:  # (replacing it would delete through the link, or fail half-way)
        raise ValueError(f"save(path): {str(path)!r} is a symbolic link; give the directory it points to, or another path")
    arrays = state_arrays(state)
    record = {
        "agent": agent_name(agent),
        "agent_class": class_path(type(batch.agent)),
        "env": batch.agent.env.name,
        "members": member_configs(agent),
        "stacked": batch.stacked,
        "seeds": batch.size if batch.batched and not batch.stacked else 1,
        "state_crc32": crc32_of(arrays),
        "eqxrl_version": __version__,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temporary_dir(path)  # (the umask's mode: mkdtemp's 0700 would stay the save's)
    try:
        import orbax.checkpoint as ocp

        with ocp.StandardCheckpointer() as writer:
            writer.save((tmp / STATE).absolute(), arrays)
        (tmp / AGENT).write_text(json.dumps(record, indent=2) + "\n")
        if path.exists():
            shutil.rmtree(path)
        os.replace(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return path


def load(path: PathLike, env: AbstractEnv | None = None, *, trust: Any = ()) -> tuple[Any, PyTree]:
    """Load what `eqxrl.save` wrote.

    **Arguments:** the `path`; `env`: the environment to rebuild the agent with
    (default: `eqxrl.envs.make` of the saved env name; give it for an env that
    `make` cannot build); and `trust`: the modules whose classes `agent.json` may name
    besides eqxrl's own and registered ones (`trust=("my_pkg",)`; nothing else is imported).

    **Returns:** `(agent, state)`. Raises `ValueError` naming the path when it is not a
    save, when the state does not match its agent, or when an array was damaged.
    """
    path = pathlib.Path(path)
    trust = trust_modules(trust, "load(trust)")
    if not (path / AGENT).is_file():
        raise ValueError(f"load(path): {str(path)!r} is not an eqxrl save (no {AGENT})")
    try:
        record = json.loads(read_text_bounded(path / AGENT))
        config = {"agent": record["agent"], "agent_class": record.get("agent_class"), "env": record["env"], "eqxrl_version": record.get("eqxrl_version")}
        members = record["members"]
        if not isinstance(members, list) or not members or not all(isinstance(m, dict) for m in members):
            raise TypeError(f"'members' must be a non-empty list of objects, got {members!r}")
    except (OSError, ValueError, KeyError, TypeError) as e:  # (too large, not UTF-8, not JSON, not a record)
        raise ValueError(f"{path / AGENT} is damaged: {one_line(e)}") from None
    if record.get("stacked"):
        config["members"] = members
    else:
        config["agent_config"] = members[0]
    try:
        agent = agent_from_config(config, env=env, trust=trust)
    except (ValueError, TypeError) as e:
        raise ValueError(f"{path / AGENT}: {one_line(e)}") from None
    num_seeds = record.get("seeds", 1)
    if isinstance(num_seeds, bool) or not isinstance(num_seeds, int) or num_seeds < 1:
        raise ValueError(f"{path / AGENT} is damaged: 'seeds' must be an int >= 1, got {num_seeds!r}")
    # Restored through the agent's template, checked against what orbax stored first: a
    # file that claims other arrays is refused before any is read.
    template, batch = state_array_template(agent, num_seeds)
    remedy = f"{path} cannot be loaded; save the agent again (`eqxrl.save`)"
    owner = f"{path / STATE}{version_note(record)} does not match {batch.name} with {num_seeds} seed(s)"
    check_stored(path / STATE, template, owner, remedy, item=False)
    try:
        import orbax.checkpoint as ocp

        with ocp.StandardCheckpointer() as reader:
            arrays = {k: np.asarray(v) for k, v in reader.restore((path / STATE).absolute(), template).items()}
    except Exception as e:  # orbax and tensorstore raise many kinds for a damaged file
        raise ValueError(f"{path / STATE} is damaged: {one_line(e)[:200]}") from None
    if crc32_of(arrays) != record.get("state_crc32"):
        raise ValueError(f"{path / STATE} is damaged: its arrays do not match their CRC-32")
    state = unflatten_state([arrays[k] for k in sorted(arrays)], path / STATE, agent, num_seeds)
    return agent, state
