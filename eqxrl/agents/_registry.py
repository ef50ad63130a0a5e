"""The agent registry: the names under which run directories, `eqxrl.load_run`, PBT
run directories and the command line know agent classes."""

from typing import Any

from ..core import import_class

from ._base import AbstractAgent
from ._crossq import CrossQ
from ._dads import DADS
from ._ddpg import DDPG
from ._dqn import DQN
from ._ippo import IPPO
from ._mappo import MAPPO
from ._mpo import MPO
from ._ppo import PPO
from ._pqn import PQN
from ._sac import SAC
from ._stack import Batch
from ._td3 import TD3

AGENTS: dict[str, type[AbstractAgent]] = {
    "ppo": PPO, "dqn": DQN, "pqn": PQN, "ddpg": DDPG, "td3": TD3, "sac": SAC, "mpo": MPO, "dads": DADS, "ippo": IPPO,
    "mappo": MAPPO, "crossq": CrossQ,
}
"""The agents known by name (`"ppo"` → `PPO`); `register_agent` adds one."""


def register_agent(cls: Any, name: Any = None) -> Any:
    """Make a custom agent class known to run directories and the command line.

    **Arguments:** `cls`, a concrete subclass of `AbstractAgent`; `name`, its
    registry name (default: the class name in lower case). Usable as a decorator.

    **Returns:** `cls`.
    """
    if not (isinstance(cls, type) and issubclass(cls, AbstractAgent)):
        raise ValueError(f"register_agent(cls) must be a subclass of eqxrl.agents.AbstractAgent, got {cls!r}")
    name = cls.__name__.lower() if name is None else name
    if not isinstance(name, str) or not name.isidentifier():
        raise ValueError(f"register_agent(name) must be an identifier like 'reinforce', got {name!r}")
    if AGENTS.get(name, cls) is not cls:
        raise ValueError(f"register_agent: the name {name!r} is taken by {AGENTS[name].__name__}")
    AGENTS[name] = cls
    return cls


def agent_name(agent: Any) -> str:
    """**Returns:** the registry name of `agent`'s class (`"ppo"`; `agent` may also be a
    `Stacked` population or the class itself), or its class name when it is not registered."""
    cls = agent if isinstance(agent, type) else type(Batch.of(agent).agent)
    for name, known in AGENTS.items():
        if known is cls:
            return name
    return cls.__name__


def import_agent(path: str) -> type[AbstractAgent]:
    """Import and register an agent class given as `"package.module:ClassName"` (the
    command line's `eqxrl train package.module:ClassName`).

    The user names the class, so its module is imported whether trusted or not
    (`eqxrl.core.trusting`); it must then be a subclass of `AbstractAgent`.

    **Returns:** the class, registered under its lower-case name (`register_agent`)
    unless it was registered already.
    """
    cls = import_class(path, "agent", AbstractAgent, trusted=True, among=AGENTS.values())
    return cls if any(known is cls for known in AGENTS.values()) else register_agent(cls)


def agent_class(name: str, path: str | None = None) -> type[AbstractAgent]:
    """**Returns:** the agent class registered as `name`, or else the class at `path`
    (`"package.module:ClassName"`, a run directory's record of a custom agent), which is
    then registered as `name`; a `ValueError` listing the known names otherwise.

    `path` is only imported when its module is trusted for the call in progress
    (`eqxrl.core.trusting`, `load_run(trust=...)`, `--trust MODULE`): a run directory
    is data, and naming a module in it must not run that module.
    """
    if name not in AGENTS and path is not None:
        cls = import_class(path, "agent_class", AbstractAgent, among=AGENTS.values())
        if not any(known is cls for known in AGENTS.values()):
            return register_agent(cls, name)
    if name not in AGENTS:
        raise ValueError(
            f"unknown agent {name!r}; known agents: {sorted(AGENTS)} "
            "(register another with eqxrl.register_agent(cls))"
        )
    return AGENTS[name]
