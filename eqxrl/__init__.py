"""eqxrl: reinforcement-learning building blocks as Equinox modules.

The floors, each importing only the ones before it: `core` (types, checks), `store`
(atomic files, checkpoint integrity), `components` and `envs`, `agents`, `loop` (train,
evaluate), `runs` (run directories), `pbt`, `cli`.
"""

from .core import configure_compile_cache as _configure_compile_cache
from .core import configure_cpu_devices as _configure_cpu_devices

# One CPU device per available core, before anything starts JAX's backend (eqxrl.core._devices),
# and JAX's persistent compilation cache, so a script run again loads its programs
# (eqxrl.core._compile_cache; EQXRL_COMPILE_CACHE=off opts out).
_configure_cpu_devices()
_configure_compile_cache()

from . import agents as agents  # noqa: E402
from . import components as components
from . import core as core
from . import envs as envs
from . import loop as loop
from . import pbt as pbt
from . import runs as runs
from . import store as store
from .agents import Stacked as Stacked
from .agents import register_agent as register_agent
from .agents import stack as stack
from .agents import sweep as sweep
from .core import __version__ as __version__
from .core import hyperparameter as hyperparameter
from .core import register_component as register_component
from .loop import Checkpoint as Checkpoint
from .loop import EvalLogger as EvalLogger
from .loop import NonFiniteError as NonFiniteError
from .loop import StopAtReturn as StopAtReturn
from .loop import TrainInfo as TrainInfo
from .loop import evaluate as evaluate
from .loop import make_train as make_train
from .loop import render as render
from .loop import rollout as rollout
from .loop import train as train
from .runs import export as export
from .runs import load as load
from .runs import save as save
