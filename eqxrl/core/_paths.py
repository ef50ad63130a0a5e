"""Hyperparameters by dotted path: `critic_optimizer.learning_rate`, `buffer.alpha`,
`policy_loss_terms.0.coef`.

A hyperparameter is an array leaf held by a field declared with `hyperparameter`
(or marked `metadata={"hyperparameter": True}`), anywhere in a tree of Equinox
modules: an agent's own fields, and the fields of the modules it holds (its
optimizers, schedules, buffer, loss terms), tuples of modules indexed by position.
Static fields and the `env` field are not searched.
"""

import dataclasses
from collections.abc import Mapping
from typing import Any

import equinox as eqx
import jax.numpy as jnp

from ._types import is_hyperparameter_field


def _children(obj: Any, skip: tuple[str, ...]) -> list[tuple[str, Any, bool]]:
    """`(name, value, is_hyperparameter)` for the searchable children of `obj`."""
    if isinstance(obj, eqx.Module) and dataclasses.is_dataclass(obj):
        out = []
        for f in dataclasses.fields(obj):
            if f.name in skip or f.metadata.get("static"):
                continue
            out.append((f.name, getattr(obj, f.name, None), is_hyperparameter_field(f)))
        return out
    if isinstance(obj, (tuple, list)):
        return [(str(i), v, False) for i, v in enumerate(obj)]
    return []


def hyperparameter_paths(obj: Any, *, skip: tuple[str, ...] = ("env",)) -> dict[str, Any]:
    """**Returns:** every hyperparameter leaf under `obj`, by dotted path, in field order."""
    out: dict[str, Any] = {}

    def walk(node: Any, prefix: str) -> None:
        for name, value, hyper in _children(node, skip if not prefix else ()):
            path = f"{prefix}{name}"
            if hyper and eqx.is_array(value):
                out[path] = value
            elif isinstance(value, (eqx.Module, tuple, list)):
                walk(value, path + ".")

    walk(obj, "")
    return out


def resolve_path(obj: Any, name: str, owner: str = "") -> str:
    """The dotted path `name` stands for under `obj`: itself when it is a path, else the path
    `type(obj).aliases` maps it to (an agent's old flat name of a number that moved into a
    module: `per_alpha` is `buffer.alpha`), else the one path whose last part is `name` (a flat
    name kept working where it is unambiguous). Raises a ValueError listing the candidates otherwise."""
    paths = hyperparameter_paths(obj)
    if name in paths:
        return name
    head, _, rest = name.partition(".")  # (an old flat name of a number now in a module, or of a schedule's number there)
    alias = getattr(type(obj), "aliases", {}).get(head)
    if alias is not None and (alias + "." + rest if rest else alias) in paths:
        return alias + "." + rest if rest else alias
    matches = [p for p in paths if p.rsplit(".", 1)[-1] == name or p.endswith("." + name)]
    if len(matches) == 1:
        return matches[0]
    who = owner or type(obj).__name__
    if matches:
        raise ValueError(f"{who}: {name!r} is ambiguous, it could be any of {matches}; give the whole path")
    raise ValueError(f"{who} has no hyperparameter {name!r}; its hyperparameters: {sorted(paths)}")


def get_path(obj: Any, path: str) -> Any:
    """**Returns:** the value at dotted `path` under `obj` (attributes, tuple indices)."""
    for part in path.split("."):
        obj = obj[int(part)] if isinstance(obj, (tuple, list)) else getattr(obj, part)
    return obj


def replace_paths(obj: Any, values: Mapping[str, Any], owner: str = "") -> Any:
    """**Returns:** `obj` with the hyperparameters at the given paths (or unambiguous
    flat names) replaced by `values` (float32 arrays of the old values' shapes are
    not required: a scalar may replace a scalar, a stacked vector a stacked vector)."""
    if not values:
        return obj
    paths = [resolve_path(obj, name, owner) for name in values]
    new = [jnp.asarray(v, jnp.float32) for v in values.values()]
    return eqx.tree_at(lambda o: [get_path(o, p) for p in paths], obj, new)


def _rebuild(obj: Any, parts: list[str], value: Any) -> Any:
    if not parts:
        return value
    head, rest = parts[0], parts[1:]
    if isinstance(obj, (tuple, list)):
        items = list(obj)
        items[int(head)] = _rebuild(items[int(head)], rest, value)
        return type(obj)(items)
    child = _rebuild(getattr(obj, head), rest, value)
    try:
        # Through the constructor: converters and checks run on the new value. Stored fields only:
        # an init-only keyword (an InitVar) keeps its default, so the module it built, now
        # changed (a buffer's alpha), is passed as itself and not checked against the old one's.
        stored = {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj) if f.init}
        return type(obj)(**{**stored, head: child})
    except TypeError:  # a module whose __init__ does not take its fields by name
        return eqx.tree_at(lambda o: getattr(o, head), obj, child)


def set_paths(obj: Any, values: Mapping[str, Any], owner: str = "") -> Any:
    """**Returns:** `obj` with the hyperparameters at the given paths (or unambiguous flat
    names) set to `values`, each module on the way rebuilt through its constructor, so
    its converters and checks run (`PPO(learning_rate) must be > 0`). Outside `jit`;
    see `replace_paths` for traced values."""
    for name, value in values.items():
        path = resolve_path(obj, name, owner)
        obj = _rebuild(obj, path.split("."), value)
    return obj
