"""Conformance checks, probe environments and hypothesis strategies for eqxrl components:
test your own agent, torso, head, loss term, buffer or env adapter against the contracts
the built-in ones keep.

`eqxrl.testing.strategies` needs hypothesis (`pip install eqxrl[testing]`); the checks
and `eqxrl.testing.probes` do not.
"""

from . import probes as probes
from ._check_agent import check_agent as check_agent
from ._check_masks import check_action_masks as check_action_masks
from ._common import ContractError as ContractError
from ._check_buffer import check_buffer as check_buffer
from ._check_env import check_env_steps as check_env_steps
from ._check_networks import check_head as check_head
from ._check_networks import check_loss_term as check_loss_term
from ._check_networks import check_torso as check_torso
from ._check_learns import check_learns_probes as check_learns_probes
from ._check_learns import default_value as default_value
from ._check_skills import check_learns_skills as check_learns_skills
