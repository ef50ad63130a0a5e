"""Conformance checks, probe environments and hypothesis strategies for eqxrl components:
test your own agent, torso, head, loss term, buffer or env adapter against the contracts
the built-in ones keep.

`eqxrl.testing.strategies` needs hypothesis (`pip install eqxrl[testing]`); the checks
and `eqxrl.testing.probes` do not.
"""

from . import probes as probes
from ._check_agent import check_agent as check_agent
from ._common import ContractError as ContractError
