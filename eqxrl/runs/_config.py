"""A run's configuration: the agent (by registry name and fields), env, budget and seeds;
`config.json` written and read back, and the agent rebuilt from it."""

import contextlib
import dataclasses
import datetime
import json
import pathlib
from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import jaxtyping
import numpy as np
from jaxtyping import Array

from ..agents import AbstractAgent, Batch, Stacked, agent_class, agent_name, class_path, keyword_types, stack
from ..core import Key, __version__, from_spec, is_hyperparameter_field, one_line, trusting, version_note
from ..envs import make
from ..loop import make_sinks
from ..store import read_text_bounded
from ._files import CONFIG, PathLike

__all__ = ["MAX_SEED", "agent_config", "check_config", "config_mismatch", "agent_from_config", "diverged_record", "eval_key", "float_fields", "load_agent", "load_config", "member_configs", "run_config", "recorded_sinks", "seed_keys", "timings_record", "tracked_config", "versioned_refusal"]

MAX_SEED = 2**31 - 1


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


def float_fields(agent_cls: type) -> set[str]:
    """The names of an agent class's own hyperparameter keywords (numbers, or for learning
    rates also schedules: its fields, and the init-only keywords that take a float, such as
    PPO's `learning_rate`; the modules' nested ones are listed by `agent.hyperparameters()`)."""
    return {name for name, f in agent_cls.keywords().items() if is_hyperparameter_field(f) or _takes_float(f)}


def _takes_float(field: Any) -> bool:
    """Whether an init-only keyword (`dataclasses.InitVar`) takes a float."""
    return isinstance(field.type, dataclasses.InitVar) and float in keyword_types(field)


def member_configs(agent: AbstractAgent | Stacked) -> list[dict[str, Any]]:
    """One `agent_config` per member of a stack (or a list of one)."""
    return [agent_config(member) for member in Batch.of(agent).distinct_members()]


def agent_config(agent: AbstractAgent) -> dict[str, Any]:
    """`agent.config()` without agent/env (float leaves come written losslessly and readably)."""
    for name, value in agent.hyperparameters().items():
        shape = np.shape(value)
        if shape != ():
            raise ValueError(
                f"save_run(agent): {type(agent).__name__}({name}) has shape {shape}; save one agent, not a stack"
            )
    return {k: v for k, v in agent.config().items() if k not in ("agent", "env")}


def config_mismatch(saved_name: str, saved: list[dict[str, Any]], agent: Any, where: str) -> str | None:
    """The first difference between a saved agent (registry name and per-member configs)
    and `agent`, for error messages: `"learning_rate=0.001 in the run, 0.01 in the agent given"`.

    **Returns:** None when they are the same agent.
    """
    if saved_name != agent_name(agent):
        return f"{where} was written for agent {saved_name!r}, got {agent_name(agent)!r}"
    given = member_configs(agent)
    if len(saved) != len(given):
        return f"{len(saved)} member(s) in {where}, {len(given)} in the agent given"
    for i, (a, b) in enumerate(zip(saved, given)):
        if a != b and set(a) - set(b):  # (written by an eqxrl whose agents stored keywords that now build modules)
            a = _as_written_now(a, agent) or a
        a, b = flat_config(a), flat_config(b)  # (a number inside a module named by its path: optimizer.learning_rate)
        for k in list(a) + [k for k in b if k not in a]:
            if a.get(k) != b.get(k):
                member = f"member {i}: " if len(saved) > 1 else ""
                return f"{member}{k}={a.get(k)!r} in {where}, {k}={b.get(k)!r} in the agent given"
    return None


def flat_config(config: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """An agent config with the fields of the modules it holds (`{"class": ..., <fields>}`) as dotted
    keys (`optimizer.learning_rate`, `optimizer.class`): what a difference between two configs is
    named by, in errors and in a sweep's legend."""
    out: dict[str, Any] = {}
    for k, v in config.items():
        if isinstance(v, Mapping) and "class" in v:
            out.update(flat_config(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def _without_retired(cls: type, fields: Mapping[str, Any]) -> dict[str, Any]:
    """A saved agent config without the keywords `cls.retired` names: an earlier eqxrl took them and
    they set nothing (CrossQ's `tau`)."""
    return {k: v for k, v in fields.items() if k not in cls.retired}


def _as_written_now(saved: dict[str, Any], agent: Any) -> dict[str, Any] | None:
    """A member config an earlier eqxrl wrote (`buffer_size`, `prioritized`, `per_alpha` stored
    beside `buffer: null`) as this eqxrl writes it: rebuilt through the agent's class; None when
    it does not rebuild."""
    member = Batch.of(agent).agent
    cls = type(member)
    try:
        kept = _without_retired(cls, saved)
        return agent_config(cls(member.env, **{k: _as_field_value(k, v, float_fields(cls)) for k, v in kept.items()}))
    except (ValueError, TypeError):
        return None


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
    batch = Batch.of(agent)
    members = member_configs(agent)
    config: dict[str, Any] = {
        "agent": agent_name(agent),
        # Where a process that never registered a custom agent finds its class.
        "agent_class": class_path(type(batch.agent)),
        "env": batch.agent.env.name if env_name is None else env_name,
        "agent_config": members[0],
        "total_steps": int(total_steps),
        "seeds": int(num_seeds),
        "seed": int(seed),
        "eqxrl_version": __version__,
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }
    if batch.stacked:
        config["members"] = members
    config.update(extra)
    return config


def load_config(run_dir: PathLike) -> dict[str, Any]:
    """Read a run directory's `config.json`.

    **Arguments:** `run_dir`, a directory written by `save_run` (or `eqxrl train`).

    **Returns:** the config dict. Raises `ValueError` when `run_dir` is not a run directory,
    or when a key of its `config.json` is missing or holds the wrong type (`check_config`).
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
        config = json.loads(read_text_bounded(path))
    except json.JSONDecodeError as e:
        raise ValueError(f"{path} is not valid JSON: {one_line(e)}") from None
    check_config(config, str(path))
    return config


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _positive(value: Any) -> bool:
    return _is_int(value) and value >= 1


# What each key of config.json must hold (`check_config`): its test and, for the
# message, what the test expects. Required keys first.
_REQUIRED: dict[str, tuple[Any, str]] = {
    "agent": (lambda v: isinstance(v, str), "a string"),
    "env": (lambda v: isinstance(v, str), "a string"),
    "agent_config": (lambda v: isinstance(v, dict), "an object"),
    "seeds": (_positive, "an integer >= 1"),
    "seed": (lambda v: _is_int(v) and 0 <= v <= MAX_SEED, f"an integer in [0, {MAX_SEED}]"),
    "total_steps": (_positive, "an integer >= 1"),
}
_OPTIONAL: dict[str, tuple[Any, str]] = {
    "agent_class": (lambda v: isinstance(v, str), "a string like 'my_package.module:MyAgent'"),
    "members": (lambda v: isinstance(v, list) and bool(v) and all(isinstance(m, dict) for m in v), "a non-empty list of objects"),
    "chunk_iterations": (_positive, "an integer >= 1"),
    "checkpoint_every": (_positive, "an integer >= 1"),
    "keep_checkpoints": (_positive, "an integer >= 1"),
    "eval_episodes": (_positive, "an integer >= 1"),
    "eval_every": (lambda v: v is None or _positive(v), "an integer >= 1 or null"),
    "nan_guard": (lambda v: isinstance(v, bool), "true or false"),
    "tensorboard": (lambda v: isinstance(v, bool), "true or false"),
    "log": (lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v), "a list of sink names"),
    "sinks": (lambda v: isinstance(v, dict) and all(isinstance(x, dict) for x in v.values()), "an object of objects"),
    "status": (lambda v: isinstance(v, str), "a string"),
    "command": (lambda v: isinstance(v, str), "a string"),
    "continued_from": (lambda v: isinstance(v, list) and all(_positive(x) for x in v), "a list of integers >= 1"),
    "best": (
        lambda v: (isinstance(v, str) and bool(v)) or (isinstance(v, dict) and isinstance(v.get("function"), str)),
        "a metric name or an object {\"function\": NAME}",
    ),
}


def check_config(config: Any, where: str = CONFIG) -> None:
    """Check a run config (a `config.json`, or the file `eqxrl train --config` reads)
    before anything uses it: every key that readers index must be there, and every
    key must hold its type (`total_steps` a positive int, `checkpoint_every` one or
    absent, ...). An edited or foreign file gets one line naming the key, not a
    `KeyError` or `TypeError` later.

    **Arguments:** `config`, the parsed JSON; `where`, the file, for messages.

    Raises `ValueError` naming `where`, the key, what it must hold and what it holds.
    """
    if not isinstance(config, dict):
        raise ValueError(f"{where} must hold a JSON object, got {type(config).__name__}")
    for key, (ok, expected) in _REQUIRED.items():
        if key not in config:
            raise ValueError(f"{where} is missing the key {key!r} ({expected}): it was not written by eqxrl, or was edited")
        if not ok(config[key]):
            raise ValueError(f"{where}: {key!r} must be {expected}, got {config[key]!r}")
    for key, (ok, expected) in _OPTIONAL.items():
        if key in config and not ok(config[key]):
            raise ValueError(f"{where}: {key!r} must be {expected}, got {config[key]!r}")


_VOLATILE = ("status", "created", "timings", "checkpoints", "videos", "sinks", "continued_from", "diverged")


def tracked_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """A run's `config.json` as experiment trackers record it: without what changes while the
    run goes on (`status`, `timings`, `checkpoints`, `videos`, `sinks`, ...)."""
    return {k: v for k, v in config.items() if k not in _VOLATILE}


def timings_record(info: Any) -> dict[str, Any]:
    """What `config.json` records of a run's `TrainInfo` (`"timings"`): compile and run seconds,
    env steps per second, env steps and iterations (this call's and the run's)."""
    return {
        "compile_seconds": float(info.compile_seconds),
        "run_seconds": float(info.run_seconds),
        "steps_per_second": float(info.steps_per_second),
        "env_steps": int(info.env_steps),
        "num_iterations": int(info.num_iterations),
        "total_env_steps": int(info.total_env_steps),
    }


def recorded_sinks(config: Mapping[str, Any], where: str = CONFIG) -> list[Any]:
    """The sinks a run directory's config records (`"log"`, or `"tensorboard": true` from before
    sinks), each built again from its record (`"sinks"`) by `eqxrl.loop.make_sinks`, for a resumed
    run (`resume_run`, `eqxrl.pbt.resume`). Raises `ValueError` naming `where` for a bad entry."""
    names = config.get("log", ["tensorboard"] if config.get("tensorboard") else [])
    return make_sinks(names, config.get("sinks"), owner=f"{where} 'log'")[0]


def diverged_record(config: Mapping[str, Any]) -> dict[str, Any] | None:
    """**Returns:** None for a run that did not diverge; for one that did (`"status":
    "diverged"`), its `"diverged"` record (`iteration`, `quantities`,
    `last_finite_checkpoint`: an env step, or None when none was written; an empty
    dict when the record is missing or not an object)."""
    if config.get("status") != "diverged":
        return None
    record = config.get("diverged")
    return record if isinstance(record, dict) else {}


def _as_field_value(name: str, value: Any, floats: set[str]) -> Any:
    if name in floats and isinstance(value, str):
        try:
            return float(value)  # "inf", "-inf", "nan"
        except ValueError:
            raise ValueError(f"{name} must be a number, got {value!r}") from None
    # Lists become tuples, {"class": ...} objects the modules they describe.
    return from_spec(value, name)


def agent_from_config(config: Mapping[str, Any], env: Any = None, *, trust: Any = ()) -> AbstractAgent | Stacked:
    """Rebuild an agent from a run config (as returned by `load_config`).

    **Arguments:** `config`, with `agent` (a name in `eqxrl.agents.AGENTS`), `env`
    (a name for `eqxrl.envs.make`) and `agent_config` (the agent's fields), or
    `members` (one dict of fields per member of a stack); `env`, an environment
    to use instead of building the named one; and `trust`, modules whose classes the
    config may name (`("my_pkg",)`; see "Sharing run directories" in the docs).

    **Returns:** the agent. Raises `ValueError` if it cannot be rebuilt, or when it
    names a class that is neither eqxrl's, nor registered, nor in a trusted module.
    """
    with trusting(trust, "agent_from_config(trust)"), versioned_refusal(config, (ValueError, TypeError)):
        return _agent_from_config(config, env)


@contextlib.contextmanager
def versioned_refusal(record: Any, errors: tuple[type[Exception], ...] = (ValueError,)) -> Any:
    """Within it, a refusal (`errors`) of a file another eqxrl wrote (`record`: its config or
    metadata) is raised again as one `ValueError` line ending in `version_note(record)`; a file of
    this eqxrl's, or one that names no version, is refused as it was."""
    note = version_note(record)
    try:
        yield
    except errors as e:
        if not note:
            raise
        raise ValueError(f"{one_line(e)}{note}") from None


def _agent_from_config(config: Mapping[str, Any], env: Any) -> AbstractAgent | Stacked:
    cls = agent_class(config["agent"], config.get("agent_class"))
    env = make(config["env"]) if env is None else env
    floats = float_fields(cls)
    init_fields = set(cls.keywords())

    def build(fields: Mapping[str, Any]) -> AbstractAgent:
        fields = _without_retired(cls, fields)
        unknown = sorted(set(fields) - init_fields)
        if unknown:
            raise ValueError(f"{cls.__name__} has no field(s) {unknown}")
        return cls(env, **{k: _as_field_value(k, v, floats) for k, v in fields.items()})

    if "members" in config:
        return stack([build(m) for m in config["members"]])
    return build(config["agent_config"])


def load_agent(run_dir: PathLike, *, trust: Any = ()) -> AbstractAgent | Stacked:
    """Rebuild the agent of a run directory from its `config.json`.

    **Arguments:** `run_dir`, a directory written by `save_run` (or `eqxrl train`);
    `trust`, as for `agent_from_config`.

    **Returns:** the agent (the env is rebuilt with `eqxrl.envs.make`).
    Raises `ValueError` when it cannot be rebuilt.
    """
    config = load_config(run_dir)
    try:
        return agent_from_config(config, trust=trust)
    except (ValueError, TypeError) as e:
        raise ValueError(f"{pathlib.Path(run_dir) / CONFIG}: {one_line(e)}") from None
