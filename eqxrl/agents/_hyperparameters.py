"""Changing one hyperparameter of an agent by dotted path (`set_hyperparameter`): what
`--set PATH=VALUE` applies, and what pytorchrl calls `update_algorithm_parameter`."""

import dataclasses
from typing import Any

from ..core import resolve_path, set_paths
from ._base import AbstractAgent, hyperparameter_hint


def _static_field(agent: Any, path: str) -> bool:
    """Whether `path` (attributes and tuple indices) ends at a static field of a module."""
    obj, parts = agent, path.split(".")
    for part in parts[:-1]:
        if isinstance(obj, (tuple, list)) and part.isdigit() and int(part) < len(obj):
            obj = obj[int(part)]
        elif dataclasses.is_dataclass(obj) and part in {f.name for f in dataclasses.fields(obj)}:
            obj = getattr(obj, part)
        else:
            return False
    if not dataclasses.is_dataclass(obj):
        return False
    fields = {f.name: f for f in dataclasses.fields(obj)}
    return parts[-1] in fields and (parts[-1] == "env" or bool(fields[parts[-1]].metadata.get("static")))


def set_hyperparameter(agent: AbstractAgent, path: str, value: Any) -> AbstractAgent:
    """Return `agent` with one hyperparameter changed, the way `--set PATH=VALUE` and a
    sweep set it (pytorchrl's `update_algorithm_parameter`).

    **Arguments:**

    - `agent`: an eqxrl agent.
    - `path`: one of the dotted paths `agent.hyperparameters()` lists (`gamma`,
      `critic_optimizer.learning_rate`, `learning_rate.init_value`,
      `policy_loss_terms.0.coef`), or a flat name that ends one path only.
    - `value`: the new number (a scalar for a scalar leaf).

    **Returns:** a new agent, rebuilt through the constructors of the modules on the
    path so their checks run (`DQN(tau) must be in (0, 1]`). A training state made
    with the old agent stays valid and is not touched: the next `train_iteration`
    (or `eqxrl.train(new_agent, ..., state=state)`) reads the new value.

    Raises a one-line `ValueError` listing the valid paths for an unknown path, a
    static (structural) field such as `num_envs` (build a new agent instead), or a
    number that is no hyperparameter leaf.
    """
    if not isinstance(agent, AbstractAgent):
        raise ValueError(f"set_hyperparameter(agent) must be an eqxrl agent, got {type(agent).__name__}")
    if not isinstance(path, str) or not path:
        raise ValueError(f"set_hyperparameter(path) must be a dotted path string, got {path!r}")
    name = type(agent).__name__
    tunable = sorted(agent.hyperparameters())
    path = type(agent).aliases.get(path, path)  # (an init-only keyword: the number in its module)
    if path not in tunable:
        if _static_field(agent, path):
            raise ValueError(
                f"set_hyperparameter(path): {path!r} is a static (structural) field of {name}: build a new agent "
                f"with it{hyperparameter_hint(agent, path)}; its hyperparameters: {tunable}"
            )
        resolved = resolve_path(agent, path, f"set_hyperparameter(path): {name}")
        if resolved not in tunable:
            raise ValueError(
                f"set_hyperparameter(path): {name}.{resolved} is not a hyperparameter; its hyperparameters: {tunable}"
            )
        path = resolved
    return set_paths(agent, {path: value}, name)
