"""Rebuilding a PBT run from its directory: `pbt_from_config` and `resume`."""

import json
import pathlib
from collections.abc import Mapping
from typing import Any

from ..core import one_line, trust_modules
from ..runs import agent_from_config, holds_run_lock, recorded_sinks
from ..store import read_text_bounded
from ._exploit import Tournament, Truncation
from ._generation import Novelty
from ._pbt import PBT
from ._population import History, Population
from ._checkpoint import load_population
from ._rundir import CONFIG
from ._spaces import Choice, IntLogUniform, IntUniform, LogUniform, Uniform

__all__ = ["pbt_from_config", "resume"]

_DOMAINS = {c.__name__: c for c in (LogUniform, Uniform, IntUniform, IntLogUniform, Choice)}
_EXPLOITS = {c.__name__: c for c in (Truncation, Tournament)}


def _module_from_spec(spec: Mapping[str, Any], known: Mapping[str, type], what: str) -> Any:
    spec = dict(spec)
    name = spec.pop("type", None)
    if name not in known:
        raise ValueError(f"{CONFIG}: unknown {what} {name!r}; known: {sorted(known)}")
    return known[name](**{k: tuple(v) if isinstance(v, list) else v for k, v in spec.items()})


def pbt_from_config(config: Mapping[str, Any], fitness: Any = None, descriptor: Any = None, *, trust: Any = ()) -> PBT:
    """Rebuild the `PBT` of a run directory's `pbt.json` (a custom fitness or descriptor
    callable must be passed again; `trust`: modules whose classes it may name, as for
    `eqxrl.runs.agent_from_config`)."""
    spec = config.get("fitness", {})
    if spec.get("type") == "custom" and fitness is None:
        raise ValueError(
            f"this run used a custom fitness ({config['fitness'].get('repr')}); pass it again: resume(run_dir, fitness=...)"
        )
    if spec.get("type") == "Novelty" and fitness is None:
        fitness = _module_from_spec(spec, {"Novelty": Novelty}, "fitness")
    saved = config.get("descriptor")
    if isinstance(saved, Mapping):  # a custom callable
        if descriptor is None:
            raise ValueError(
                f"this run used a custom descriptor ({saved.get('repr')}); pass it again: resume(run_dir, descriptor=...)"
            )
    elif descriptor is None:
        descriptor = saved
    agent = agent_from_config(config, trust=trust)
    space = {name: _module_from_spec(spec, _DOMAINS, "domain") for name, spec in config["space"].items()}
    return PBT(
        agent,
        space,
        population_size=config["population_size"],
        ready=config["ready"],
        exploit=_module_from_spec(config["exploit"], _EXPLOITS, "exploit"),
        resample_probability=config["resample_probability"],
        fitness=fitness,
        eval_episodes=config["eval_episodes"],
        max_eval_steps=config.get("max_eval_steps"),
        eval_every=config.get("eval_every"),
        descriptor=descriptor,
    )


@holds_run_lock("resume(run_dir)", create=False)
def resume(
    run_dir: Any, *, fitness: Any = None, descriptor: Any = None, progress: bool = True, trust: Any = (), log: Any = ()
) -> tuple[Population, History]:
    """Continue an interrupted PBT run from its run directory, exactly where it stopped
    (its newest checkpoint, `RUN_DIR/population/<generation>/`; in a multi-host run every
    process calls it and reads its own shards).

    **Arguments:** `run_dir` (written by `PBT.run(..., run_dir=...)` or `eqxrl pbt`),
    the custom `fitness` and `descriptor` callables if the run had them, `progress`, and
    `trust`: the modules whose classes `pbt.json` may name besides eqxrl's own and
    registered ones (`trust=("my_pkg",)`; nothing else is imported). The sinks `pbt.json`
    records (`PBT.run(log=)`) are built again and go on where they were; `log` adds sinks.
    A run that another process is writing is refused (`RunDirectoryError`, naming
    its process id), before anything is read.

    **Returns:** `(population, history)` as the uninterrupted `PBT.run` would have.
    """
    run_dir = pathlib.Path(run_dir)
    trust = trust_modules(trust, "resume(trust)")
    path = run_dir / CONFIG
    if not path.is_file():
        raise ValueError(f"{str(run_dir)!r} is not a PBT run directory: it has no {CONFIG}")
    try:
        text = read_text_bounded(path)  # (one line naming the file when it is too large or not UTF-8)
    except OSError as e:
        raise ValueError(f"{path} cannot be read: {one_line(e)}") from None
    try:
        config = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"{path} is not valid JSON: {one_line(e)}") from None
    if not isinstance(config, dict):
        raise ValueError(f"{path} must hold a JSON object, got {type(config).__name__}")
    try:
        pbt = pbt_from_config(config, fitness, descriptor, trust=trust)
        total_steps = config["total_steps"]
        recorded = recorded_sinks(config, CONFIG)
    except KeyError as e:
        raise ValueError(f"{path} is missing the key {e.args[0]!r}: it was not written by `eqxrl pbt`, or was edited") from None
    except (TypeError, ValueError) as e:
        raise ValueError(f"{path}: {one_line(e)}") from None
    population, _ = load_population(run_dir, pbt, total_steps)  # the newest generation
    extra = log if isinstance(log, (list, tuple)) else [log]
    return pbt.run(population, total_steps, progress=progress, run_dir=run_dir, log=[*recorded, *extra])
