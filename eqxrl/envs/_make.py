"""`make`: environments by name."""

import difflib
from collections.abc import Callable
from typing import Any

from ._base import AbstractEnv
from ._check import check_env
from ._jaxmarl import PREFIX as JAXMARL_PREFIX
from ._point import point2d
from ._wrappers import SelectObservation, TimeLimit

_BRAX_PREFIX = "brax/"
_registry: dict[str, Callable[..., AbstractEnv]] = {}
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


def _gymnax_ids() -> list[str]:
    import gymnax

    return list(gymnax.registered_envs)


def _brax_ids() -> list[str]:
    from brax import envs as brax_envs

    return [_BRAX_PREFIX + name for name in brax_envs._envs]  # brax's own registry


def registered() -> list[str]:
    """Every name `make` accepts: gymnax ids, `brax/<env>`, `jaxmarl/<env>` and user registrations."""
    from ._jaxmarl import jaxmarl_ids

    return _gymnax_ids() + _brax_ids() + jaxmarl_ids() + list(_registry)


def make(name: str, **kwargs: Any) -> AbstractEnv:
    """Build an environment by name.

    **Arguments:**

    - `name`: a gymnax id (`"CartPole-v1"`, `"Pendulum-v1"`, ...), `"brax/<env>"`
      (`"brax/ant"`), `"jaxmarl/<id>"` (`"jaxmarl/MPE_simple_spread_v3"`: a multi-agent
      `JaxMARLEnv`), or a name given to `eqxrl.envs.register`.
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
    if name.startswith(_BRAX_PREFIX) and name in _brax_ids():
        from ._brax import BraxEnv

        episode_length = kwargs.pop("episode_length", 1000)
        return TimeLimit(BraxEnv(name[len(_BRAX_PREFIX) :], **kwargs), episode_length)
    if name.startswith(JAXMARL_PREFIX):
        from ._jaxmarl import JaxMARLEnv, jaxmarl_ids

        if name in jaxmarl_ids():
            return JaxMARLEnv(name[len(JAXMARL_PREFIX) :], **kwargs)
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
    close = difflib.get_close_matches(name, registered(), n=5, cutoff=0.5)
    hint = f"; did you mean one of {close}?" if close else "; see eqxrl.envs.registered()"
    raise ValueError(f"make(name): unknown environment {name!r}{hint}")
