"""`make`: environments by name."""

import difflib
from collections.abc import Callable
from typing import Any

from ._base import AbstractEnv
from ._check import check_env
from ._point import point2d
from ._wrappers import SelectObservation, TimeLimit

_registry: dict[str, Callable[..., AbstractEnv]] = {}
_suites: dict[str, tuple[Callable[..., AbstractEnv], Callable[[], list[str]] | None]] = {}
_registry["Point2D-v0"] = point2d  # a built-in env for skill discovery (eqxrl.envs.Point2D)


def cartpole_no_velocity(**kwargs: Any) -> AbstractEnv:
    """gymnax CartPole-v1 observing only the cart's position and the pole's angle (its two
    velocities hidden): RL Baselines3 Zoo's `CartPoleNoVel-v1`, a memory task for recurrent
    policies. `kwargs` override CartPole's `EnvParams`, as for `make("CartPole-v1", ...)`."""
    return SelectObservation(_make("CartPole-v1", **kwargs), (0, 2))


_registry["CartPoleNoVel-v1"] = cartpole_no_velocity


def register(name: str, factory: Callable[..., AbstractEnv]) -> None:
    """Make `eqxrl.envs.make(name, **kwargs)` return `factory(**kwargs)`."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"register(name) must be a non-empty string, got {name!r}")
    if name in _registry:
        raise ValueError(f"register(name): {name!r} is already registered")
    if not callable(factory):
        raise ValueError(f"register(factory) must be callable, got {factory!r}")
    _registry[name] = factory


def register_suite(
    prefix: str, factory: Callable[..., AbstractEnv], ids: Callable[[], list[str]] | None = None
) -> None:
    """Make `eqxrl.envs.make(prefix + id, **kwargs)` return `factory(id, **kwargs)`: a whole
    suite of environments behind one name prefix (`"brax/"`, `"jumanji/"`).

    **Arguments:**

    - `prefix`: a non-empty string ending in `"/"`.
    - `factory`: `factory(id, **kwargs)` builds the env. It imports its suite itself, so
      that registering costs nothing until the suite is used (a suite that is not installed is
      one `ImportError` line naming the `pip install` that fixes it), and raises `KeyError(id)`
      for an id the suite does not have (`make` then suggests close names).
    - `ids`: optionally, a function returning the suite's ids (without the prefix), listed by
      `registered()` and used to suggest close names; it may raise `ImportError` when the
      suite is not installed (its ids are then not listed).
    """
    if not isinstance(prefix, str) or not prefix.endswith("/") or len(prefix) < 2:
        raise ValueError(f"register_suite(prefix) must be a non-empty string ending in '/', got {prefix!r}")
    if prefix in _suites:
        raise ValueError(f"register_suite(prefix): {prefix!r} is already registered")
    if not callable(factory):
        raise ValueError(f"register_suite(factory) must be callable, got {factory!r}")
    if ids is not None and not callable(ids):
        raise ValueError(f"register_suite(ids) must be None or a function returning the suite's ids, got {ids!r}")
    _suites[prefix] = (factory, ids)


def suites() -> list[str]:
    """**Returns:** the registered suite prefixes (`"brax/"`, `"jaxmarl/"`, ...)."""
    return list(_suites)


def _gymnax_ids() -> list[str]:
    import gymnax

    return list(gymnax.registered_envs)


def _suite_ids(prefix: str) -> list[str]:
    ids = _suites[prefix][1]
    if ids is None:
        return []
    try:
        return [prefix + name for name in ids()]
    except ImportError:  # an optional suite that is not installed
        return []


def _close_names(name: str) -> list[str]:
    """Up to five accepted names close to `name`: among its suite's ids when it has a registered
    prefix, else among gymnax ids and user registrations; only where those have none, among
    every registered name (which imports every installed suite for its ids, seconds each)."""
    prefix = next((p for p in _suites if name.startswith(p)), None)
    first = _suite_ids(prefix) if prefix is not None else _gymnax_ids() + list(_registry)
    return difflib.get_close_matches(name, first, n=5, cutoff=0.5) or difflib.get_close_matches(
        name, registered(), n=5, cutoff=0.5
    )


def registered() -> list[str]:
    """Every name `make` accepts: gymnax ids, the ids of every registered suite whose package is
    installed (`brax/<env>`, `jaxmarl/<id>`, ...) and user registrations."""
    return _gymnax_ids() + [name for prefix in _suites for name in _suite_ids(prefix)] + list(_registry)


def _brax(name: str, episode_length: int = 1000, **kwargs: Any) -> AbstractEnv:
    if name not in _brax_ids():
        raise KeyError(name)
    from ._brax import BraxEnv

    return TimeLimit(BraxEnv(name, **kwargs), episode_length)


def _brax_ids() -> list[str]:
    from brax import envs as brax_envs

    return list(brax_envs._envs)  # brax's own registry


def _jaxmarl(name: str, **kwargs: Any) -> AbstractEnv:
    if name not in _jaxmarl_ids():
        raise KeyError(name)
    from ._jaxmarl import JaxMARLEnv

    return JaxMARLEnv(name, **kwargs)


def _jaxmarl_ids() -> list[str]:
    from ._jaxmarl import PREFIX, jaxmarl_ids

    return [name[len(PREFIX) :] for name in jaxmarl_ids()]


register_suite("brax/", _brax, _brax_ids)
register_suite("jaxmarl/", _jaxmarl, _jaxmarl_ids)


def make(name: str, **kwargs: Any) -> AbstractEnv:
    """Build an environment by name.

    **Arguments:**

    - `name`: a gymnax id (`"CartPole-v1"`, `"Pendulum-v1"`, ...), `"brax/<env>"`
      (`"brax/ant"`), `"jaxmarl/<id>"` (`"jaxmarl/MPE_simple_spread_v3"`: a multi-agent
      `JaxMARLEnv`), `"<prefix><id>"` of a suite given to `eqxrl.envs.register_suite`, or a
      name given to `eqxrl.envs.register`.
    - `**kwargs`: for gymnax, overrides of the env's `EnvParams` fields (for
      example `max_steps_in_episode=200`); for brax, `backend=`,
      `episode_length=` (default 1000) and the env constructor's keywords; for JaxMARL,
      `truncation=` (see `JaxMARLEnv`) and the env constructor's keywords.

    **Returns:** an `AbstractEnv` (brax envs come wrapped in a `TimeLimit`), checked
    by `check_env` (its `reset` and `step` outputs match its spaces).
    """
    return check_env(_make(name, **kwargs))


def _make(name: str, **kwargs: Any) -> AbstractEnv:
    if not isinstance(name, str):
        raise ValueError(f"make(name) must be a string, got {name!r}")
    if name in _registry:
        env = _registry[name](**kwargs)
        if not isinstance(env, AbstractEnv):
            raise ValueError(f"make({name!r}): the registered factory returned {env!r}, not an eqxrl AbstractEnv")
        return env
    for prefix, (factory, _) in _suites.items():
        if name.startswith(prefix):
            try:
                env = factory(name[len(prefix) :], **kwargs)
            except KeyError:  # the suite does not know this id: suggest close names below
                break
            if not isinstance(env, AbstractEnv):
                raise ValueError(f"make({name!r}): suite {prefix!r} returned {env!r}, not an eqxrl AbstractEnv")
            return env
    if name in _gymnax_ids():
        from ._gymnax import GymnaxEnv

        env = GymnaxEnv(name)
        if kwargs:
            fields = set(env.params.__dataclass_fields__)
            unknown = sorted(set(kwargs) - fields)
            if unknown:
                raise ValueError(
                    f"make({name!r}) got unknown parameter(s) {unknown}; "
                    f"its EnvParams fields are {sorted(fields)}"
                )
            params = env.params.replace(**kwargs)
            env = GymnaxEnv(env.gymnax_env, params, key=(name, tuple(sorted(kwargs.items()))))
        return env
    close = _close_names(name)
    hint = f"; did you mean one of {close}?" if close else "; see eqxrl.envs.registered()"
    raise ValueError(f"make(name): unknown environment {name!r}{hint}")
