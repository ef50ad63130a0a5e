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

What a class path may name (a run directory is data people share: opening one must
never run code it names): eqxrl's own classes, classes registered in this process
(`eqxrl.register_component`, `eqxrl.register_agent`), and classes of the modules
trusted for the call (`trusting`, which `load_run(trust=...)`, `eqxrl.load`,
`resume_run`, `eqxrl.pbt.resume` and the command line's `--trust MODULE` set). The
module is checked before it is imported, and the object must then be a class of
the kind the field expects before anything calls it.
"""

import contextlib
import contextvars
import dataclasses
import importlib
import sys
from collections.abc import Iterable, Iterator
from typing import Any

import equinox as eqx
import jax
import numpy as np

from ._types import is_hyperparameter_field


class Unserializable(Exception):
    pass


RENAMED = {
    "eqxrl.components:Optimizer": "eqxrl.components:Adam",
    "eqxrl.components._optimizers:Optimizer": "eqxrl.components:Adam",
}
"""Class paths that files written by earlier eqxrl versions hold, and the class each names now
(`Optimizer` became `Adam`): `import_class` reads them as the new path, so those run directories
and saves still load."""


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


_TRUSTED: contextvars.ContextVar[tuple[str, ...]] = contextvars.ContextVar("eqxrl_trusted_modules", default=())
"""The modules trusted by the calls in progress (`trusting`); empty outside them."""

_REGISTERED: list[type] = []
"""Classes registered with `register_component` (agents are in `eqxrl.agents.AGENTS`, which `agent_class` passes as `among`)."""


def _is_module_name(name: Any) -> bool:
    return isinstance(name, str) and bool(name) and all(part.isidentifier() for part in name.split("."))


def trust_modules(trust: Any, owner: str = "trust") -> tuple[str, ...]:
    """**Returns:** `trust` (a module name or an iterable of them, like `("my_pkg",)`) as a
    tuple of dotted module names; a ValueError naming `owner` otherwise."""
    names = (trust,) if isinstance(trust, str) else trust
    try:
        names = tuple(names)
    except TypeError:
        raise ValueError(f"{owner} must be module names like ('my_pkg',), got {trust!r}") from None
    for name in names:
        if not _is_module_name(name):
            raise ValueError(f"{owner} must be module names like ('my_pkg',), got {name!r}")
    return names


@contextlib.contextmanager
def trusting(trust: Any, owner: str = "trust") -> Iterator[tuple[str, ...]]:
    """Trust the modules `trust` (and their submodules) for the class paths that the code
    inside the `with` block reads from files: `with trusting(("my_pkg",)): ...`.

    The public loaders take `trust=` and call this; the command line's `--trust MODULE`
    does too, for one command. Nested blocks add to the outer block's modules, and
    leaving a block restores them (a context variable, so threads and tasks do not share it).

    **Yields:** every module trusted inside the block.
    """
    token = _TRUSTED.set(_TRUSTED.get() + trust_modules(trust, owner))
    try:
        yield _TRUSTED.get()
    finally:
        _TRUSTED.reset(token)


def _within(module: str, package: str) -> bool:
    # A prefix test on dotted names: "my_pkg" covers "my_pkg" and "my_pkg.sub", not "my_pkgx".
    return module == package or module.startswith(package + ".")


def is_trusted(module: str) -> bool:
    """Whether a class path's `module` may be imported: eqxrl's own (but not
    `eqxrl.__main__`, which runs the command line), or trusted by `trusting`."""
    if _within(module, "eqxrl") and "__main__" not in module.split("."):
        return True
    return any(_within(module, package) for package in _TRUSTED.get())


def register_component(cls: Any) -> Any:
    """Make a class of yours (a torso, a buffer, a schedule, a loss term, an optimizer:
    any Equinox module an agent's field holds) loadable from run directories and saves
    without trusting its module: `eqxrl.register_component(MyTorso)`, or as a decorator.

    **Returns:** `cls`.
    """
    if not (isinstance(cls, type) and issubclass(cls, eqx.Module)):
        raise ValueError(f"register_component(cls) must be a class (a subclass of equinox.Module), got {cls!r}")
    if cls not in _REGISTERED:
        _REGISTERED.append(cls)
    return cls


def registered_class(path: str, among: Iterable[type] = ()) -> type | None:
    """**Returns:** the registered class (of `register_component`, or of `among`) whose
    class path is `path`, or None."""
    for cls in (*_REGISTERED, *among):
        if path in (class_path(cls), f"{cls.__module__}:{cls.__qualname__}"):
            return cls
    return None


def _not_trusted(path: str, module: str, what: str) -> ValueError:
    return ValueError(
        f"{what} names {path!r}, whose module {module!r} is not trusted: classes in run directories and saves "
        "resolve only to eqxrl's own, registered ones (eqxrl.register_agent, eqxrl.register_component) and trusted "
        f"modules; if you trust it, pass --trust {module} (command line) or trust=({module!r},) (Python)"
    )


def import_class(path: str, what: str = "class", expected: type | tuple[type, ...] | None = None, *,
                 trusted: bool = False, among: Iterable[type] = ()) -> Any:  # fmt: skip
    """The class at `"package.module:Qualified.Name"`, imported only when allowed.

    **Arguments:**

    - `path`: the class path; `what`: what it is, for error messages ("the class of actor_torso").
    - `expected`: the class(es) it must be a subclass of (checked after the import, before
      anyone calls it); None: any class.
    - `trusted`: True where the user named the class themselves (the command line's
      `eqxrl train my_pkg.mod:MyAgent`): its module is then imported whether trusted or not.
    - `among`: more registered classes it may be (the agent registry).

    **Returns:** the class; a ValueError naming `what` when `path` is malformed, its
    module is not trusted (checked before any import), or it is not such a class.
    """
    path = RENAMED.get(str(path), path)
    module, sep, qualname = str(path).partition(":")
    if not sep or not _is_module_name(module) or not all(p.isidentifier() for p in qualname.split(".")):
        raise ValueError(f"{'an agent class' if what == 'agent' else what} must be given as package.module:ClassName, got {path!r}")
    obj: Any = registered_class(path, among)
    if obj is None:
        if not (trusted or is_trusted(module)):
            raise _not_trusted(path, module, what)
        try:
            obj = importlib.import_module(module)
        except ImportError as e:
            raise ValueError(f"cannot import the module of {what} {path!r}: {e}") from None
        for part in qualname.split("."):
            if not hasattr(obj, part):
                raise ValueError(f"module {module!r} has no {qualname!r} ({what} {path!r})")
            obj = getattr(obj, part)
    if not isinstance(obj, type):
        raise ValueError(f"{what} must be a class, got {path!r}, which is a {type(obj).__name__}")
    if expected is not None and not issubclass(obj, expected):
        names = " or ".join(class_path(c) for c in (expected if isinstance(expected, tuple) else (expected,)))
        raise ValueError(f"{what} must be a subclass of {names}, got {path!r}")
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
        return import_class(data["type"], f"the class of {where}", eqx.Module)
    if "class" not in data:
        raise ValueError(f"{where} must be a value, a list or a {{'class': ...}} object, got {data!r}")
    # Only Equinox modules are rebuilt (called with their fields): what a field holds.
    cls = import_class(data["class"], f"the class of {where}", eqx.Module)
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
