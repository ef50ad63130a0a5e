"""eqxrl: reinforcement-learning building blocks as Equinox modules."""

from . import agents as agents
from . import components as components
from . import envs as envs
from . import pbt as pbt
from . import rundir as rundir
from .agents import Stacked as Stacked
from .agents import stack as stack
from .train import Checkpoint as Checkpoint
from .train import NonFiniteError as NonFiniteError
from .train import TrainInfo as TrainInfo
from .train import evaluate as evaluate
from .train import rollout as rollout
from .train import train as train

from .core import __version__ as __version__
