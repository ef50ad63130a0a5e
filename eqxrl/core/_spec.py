"""Configuration as JSON: the fields of an agent and of the modules it holds
(torsos, schedules, optimizers, buffers, loss terms) written as plain values and
rebuilt from them.

A module is written as `{"class": "package.module:Name", <field>: <value>, ...}`
and rebuilt by calling the class with its fields (so its converters and checks
run); a class given as a value (a user's torso class) as `{"type": "package.module:Name"}`.
Scalar float arrays become floats (non-finite ones the strings "inf", "-inf",
"nan", which `float` reads back). What has no such form (a function, a network's
weights, an optax transformation) is written as `{"unserializable": repr}`, and
rebuilding it raises a ValueError naming the field.
"""

import dataclasses
import importlib
import sys
from typing import Any

import equinox as eqx
import jax
import numpy as np

from ._types import is_hyperparameter_field


class Unserializable(Exception):
    pass


def class_path(cls: type) -> str:
    """**Returns:** `"package.module:ClassName"`, where `import_class` finds `cls` again:
    the shallowest package that exports it (`eqxrl.components:MLPTorso`, not the private
    module that defines it), so a config outlives moving a class between private modules."""
    module = cls.__module__
    parts = module.split(".")
    for i in range(1, len(parts)):
        package = sys.modules.get(".".join(parts[:i]))
        if package is not None and getattr(package, cls.__qualname__, None) is cls:
            return f"{package.__name__}:{cls.__qualname__}"
    return f"{module}:{cls.__qualname__}"


def import_class(path: str, what: str = "class") -> Any:
    """**Returns:** the object at `"package.module:Qualified.Name"`; a ValueError naming `what` otherwise."""
    module, sep, qualname = str(path).partition(":")
    if not sep or not module or not qualname:
        raise ValueError(f"{'an agent class' if what == 'agent' else what} must be given as package.module:ClassName, got {path!r}")
    try:
        obj: Any = importlib.import_module(module)
    except ImportError as e:
        raise ValueError(f"cannot import the module of {what} {path!r}: {e}") from None
    for part in qualname.split("."):
        if not hasattr(obj, part):
            raise ValueError(f"module {module!r} has no {qualname!r} ({what} {path!r})")
        obj = getattr(obj, part)
    return obj


def _scalar(value: Any) -> Any:
    value = np.asarray(value)
    if value.ndim != 0:
        raise Unserializable
    if value.dtype == np.float32:
        # Shortest float32 repr (0.00025, not 0.0002500000118743628); JSON has no
        # infinity, so it is written as a string that float() reads back.
        return float(str(value)) if np.isfinite(value) else str(float(value))
    return value.item()


def _to_spec(value: Any) -> Any:
    if isinstance(value, (jax.Array, np.ndarray, np.generic)):
        return _scalar(value)
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if isinstance(value, (tuple, list)):
        return [_to_spec(v) for v in value]
    if isinstance(value, type):
        return {"type": class_path(value)}
    if isinstance(value, eqx.Module) and dataclasses.is_dataclass(value):
        out: dict[str, Any] = {"class": class_path(type(value))}
        for f in dataclasses.fields(value):
            if not f.init:
                raise Unserializable
            out[f.name] = _to_spec(getattr(value, f.name))
        return out
    raise Unserializable


def to_spec(value: Any) -> Any:
    """**Returns:** `value` as JSON-ready data (see the module docstring)."""
    try:
        return _to_spec(value)
    except Unserializable:
        return {"unserializable": repr(value)}


def from_spec(data: Any, where: str) -> Any:
    """**Returns:** the value `to_spec` wrote as `data`; a ValueError naming `where` when
    it cannot be rebuilt."""
    if isinstance(data, list):
        return tuple(from_spec(v, f"{where}[{i}]") for i, v in enumerate(data))
    if not isinstance(data, dict):
        return data
    if "unserializable" in data:
        raise ValueError(
            f"{where} was {' '.join(str(data['unserializable']).split())}, which a config file cannot hold; "
            "build this agent in Python instead of from its config"
        )
    if set(data) == {"type"}:
        return import_class(data["type"], f"the class of {where}")
    if "class" not in data:
        raise ValueError(f"{where} must be a value, a list or a {{'class': ...}} object, got {data!r}")
    cls = import_class(data["class"], f"the class of {where}")
    fields = {f.name: f for f in dataclasses.fields(cls)} if dataclasses.is_dataclass(cls) else {}
    kwargs = {}
    for name, value in data.items():
        if name == "class":
            continue
        if name not in fields:
            raise ValueError(f"{where}: {cls.__name__} has no field {name!r}")
        value = from_spec(value, f"{where}.{name}")
        if is_hyperparameter_field(fields[name]) and isinstance(value, str):
            value = float(value)
        kwargs[name] = value
    try:
        return cls(**kwargs)
    except TypeError as e:
        raise ValueError(f"{where}: cannot rebuild {cls.__name__} from its fields: {e}") from None
