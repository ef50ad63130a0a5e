"""Environments: one functional protocol, gymnax and brax adapters, wrappers."""

from ._base import AbstractEnv as AbstractEnv
from ._base import AbstractWrapper as AbstractWrapper
from ._base import TimeStep as TimeStep
from ._base import first_timestep as first_timestep
from ._base import tree_select as tree_select
from ._brax import BraxEnv as BraxEnv
from ._descriptor import DescriptorWrapper as DescriptorWrapper
from ._descriptor import SkillState as SkillState
from ._descriptor import SkillWrapper as SkillWrapper
from ._descriptor import brax_xy as brax_xy
from ._gymnax import GymnaxEnv as GymnaxEnv
from ._make import make as make
from ._make import register as register
from ._make import registered as registered
from ._point import Point2D as Point2D
from ._point import PointState as PointState
from ._spaces import AbstractSpace as AbstractSpace
from ._spaces import Box as Box
from ._spaces import Discrete as Discrete
from ._wrappers import AutoReset as AutoReset
from ._wrappers import ClipAction as ClipAction
from ._wrappers import EpisodeStatistics as EpisodeStatistics
from ._wrappers import NormalizeObservation as NormalizeObservation
from ._wrappers import RescaleAction as RescaleAction
from ._wrappers import TimeLimit as TimeLimit
from ._wrappers import VectorEnv as VectorEnv
