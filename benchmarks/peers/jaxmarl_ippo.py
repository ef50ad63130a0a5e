"""JaxMARL's own IPPO (``baselines/IPPO/ippo_ff_mpe.py``) as a peer, for ``ippo_mpe.py``.

The script and its config (``config/ippo_ff_mpe.yaml``) are read from the JaxMARL git mirror at
run time, not vendored: the module is executed from the mirror's text with ``hydra``, ``wandb``
and ``omegaconf`` stubbed in ``sys.modules`` (none is installed; only ``main`` uses hydra and
omegaconf, and ``wandb.log`` is the metrics callback inside the program, here a no-op). The
config's keys are used as the script defines them; ``make_train(config)`` is timed as
``jax.jit(train).lower(key).compile()``, then one call of the compiled program.
"""

from __future__ import annotations

import os
import subprocess
import sys
import types

import yaml

from _common import compile_and_run

MIRROR = os.environ.get("JAXMARL_MIRROR", "/work/.mirror/FLAIROx+JaxMARL/repo")
# A plain directory holding the two files at the same relative paths (a copy taken along to a
# machine without the mirror, e.g. a GPU machine), with JAXMARL_REVISION naming the revision.
SOURCE_DIR = os.environ.get("JAXMARL_SOURCE_DIR")
SCRIPT = "baselines/IPPO/ippo_ff_mpe.py"
CONFIG = "baselines/IPPO/config/ippo_ff_mpe.yaml"


def _show(path: str) -> str:
    if SOURCE_DIR:
        with open(os.path.join(SOURCE_DIR, path)) as f:
            return f.read()
    return subprocess.run(["git", "-C", MIRROR, "show", f"HEAD:{path}"], check=True, capture_output=True, text=True).stdout


def revision() -> str:
    if SOURCE_DIR:
        return os.environ.get("JAXMARL_REVISION", "unknown")
    return subprocess.run(["git", "-C", MIRROR, "rev-parse", "--short", "HEAD"], check=True, capture_output=True, text=True).stdout.strip()


def _stub_modules() -> None:
    hydra = types.ModuleType("hydra")
    hydra.main = lambda **kw: (lambda fn: fn)  # only decorates `main`, which is never called
    wandb = types.ModuleType("wandb")
    wandb.log = lambda metric: None  # the in-program metrics callback
    omegaconf = types.ModuleType("omegaconf")
    omegaconf.OmegaConf = types.SimpleNamespace(to_container=lambda c: c)
    for name, module in (("hydra", hydra), ("wandb", wandb), ("omegaconf", omegaconf)):
        sys.modules.setdefault(name, module)


def load() -> types.ModuleType:
    """The peer's module, executed from the mirror's text."""
    _stub_modules()
    module = types.ModuleType("ippo_ff_mpe")
    module.__file__ = f"{MIRROR}:{SCRIPT}"
    sys.modules[module.__name__] = module  # dataclasses (flax modules) look their module up there
    exec(compile(_show(SCRIPT), module.__file__, "exec"), module.__dict__)
    return module


def config(**overrides) -> dict:
    """The peer's yaml config (keys as its script reads them), with `overrides`."""
    out = yaml.safe_load(_show(CONFIG))
    out["TOTAL_TIMESTEPS"] = int(float(out["TOTAL_TIMESTEPS"]))
    out.update(overrides)
    return out


def time_train(cfg: dict, key) -> tuple[dict, dict]:
    """Compile and run the peer's ``make_train(cfg)`` on one key: ``(output, timings)``; timings add
    ``steps`` (team env steps: updates x NUM_STEPS x NUM_ENVS) and ``team_return`` (the last update's
    mean ``returned_episode_returns``: each agent's reward times the number of agents, summed over
    the episode and averaged over agents, i.e. the sum of the agents' returns)."""
    import numpy as np

    module = load()
    cfg = dict(cfg)
    train = module.make_train(cfg)
    out, timings = compile_and_run(train, key)
    metrics = out["metrics"]
    timings["steps"] = cfg["NUM_UPDATES"] * cfg["NUM_STEPS"] * cfg["NUM_ENVS"]
    timings["team_return"] = float(np.asarray(metrics["returned_episode_returns"])[-1])
    return out, timings
