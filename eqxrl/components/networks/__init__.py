"""Networks: torsos (MLP, CNN, a user's module), policy heads, value and Q heads, ensembles."""

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
from ._torsos import AbstractTorso as AbstractTorso
from ._torsos import CNNTorso as CNNTorso
from ._torsos import Encoder as Encoder
from ._torsos import IdentityTorso as IdentityTorso
from ._torsos import MLPTorso as MLPTorso
from ._torsos import ModuleTorso as ModuleTorso
from ._torsos import as_torso as as_torso
from ._torsos import check_torso as check_torso
from ._torsos import torso_or_mlp as torso_or_mlp
