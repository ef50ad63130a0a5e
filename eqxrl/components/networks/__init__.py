"""Networks: MLP torsos, policy heads, value and Q heads, ensembles."""

from ._ensemble import Ensemble as Ensemble
from ._heads import CategoricalHead as CategoricalHead
from ._heads import ContinuousQHead as ContinuousQHead
from ._heads import DeterministicHead as DeterministicHead
from ._heads import DiscreteQHead as DiscreteQHead
from ._heads import GaussianHead as GaussianHead
from ._heads import TanhGaussianHead as TanhGaussianHead
from ._heads import ValueHead as ValueHead
from ._mlp import ACTIVATIONS as ACTIVATIONS
from ._mlp import MLP as MLP
from ._mlp import Linear as Linear
from ._mlp import check_last_axis as check_last_axis
from ._mlp import get_activation as get_activation
