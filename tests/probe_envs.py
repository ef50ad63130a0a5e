"""The probe environments, now public in `eqxrl.testing.probes` (kept here for the tests that import them)."""

from eqxrl.testing.probes import ActionReward as ActionReward
from eqxrl.testing.probes import ConstantReward as ConstantReward
from eqxrl.testing.probes import ObservationActionReward as ObservationActionReward
from eqxrl.testing.probes import ObservationReward as ObservationReward
from eqxrl.testing.probes import TwoStepDiscounting as TwoStepDiscounting
