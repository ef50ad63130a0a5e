"""Action distributions: Categorical, MultiCategorical, Normal and TanhNormal, batched over any leading axes;
`Noise`, the randomness of a sample given as an array (`sample_from_noise`)."""

from ._distributions import AbstractDistribution as AbstractDistribution
from ._distributions import Categorical as Categorical
from ._distributions import MultiCategorical as MultiCategorical
from ._distributions import Normal as Normal
from ._distributions import TanhNormal as TanhNormal
from ._distributions import kl_divergence as kl_divergence
from ._noise import NOISE_KINDS as NOISE_KINDS
from ._noise import Noise as Noise
