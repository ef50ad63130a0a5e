"""`eqxrl.rundir`: the earlier name of `eqxrl.runs` (run directories), kept so that
code written against it keeps working. New code imports `eqxrl.runs`."""

from .runs import *  # noqa: F403
from .runs import __all__ as __all__  # noqa: F401
