"""Which members of an every-agent (every-env) parametrisation CI runs.

CI (the README's test command) must finish in 25 minutes on 2 cores. The slow tests of the
SECONDARY_MODULES run in the exhaustive tier only, and a property tested over
every agent runs in CI on a representative subset: PPO (on-policy), DQN (off-policy, discrete
actions) and SAC (off-policy, continuous), plus the agents a test names because the property
goes through code of their own. The exhaustive tier (`python -m pytest -n auto -m exhaustive`)
runs every member; run it before a release and after changing an agent that CI leaves out.
"""

import pytest

REPRESENTATIVE = ("ppo", "dqn", "sac")

SECONDARY_MODULES = ("test_mpo.py", "test_dads.py", "test_ippo.py", "test_qd.py")
"""Modules of the agents CI covers by their fast tests, the regression records of their default
runs (tests/test_regression.py, every agent) and the every-agent checks: MPO, DADS, IPPO and the
quality-diversity runs. Their slow tests (learning runs included) are in the exhaustive tier
(`tests/conftest.py` marks them)."""


def ci_subset(names, keep=REPRESENTATIVE):
    """`names` as pytest params: those in `keep` (compared case-insensitively) run in CI, the
    others only in the exhaustive tier."""
    kept = {str(k).lower() for k in keep}
    return [pytest.param(n, marks=() if str(n).lower() in kept else pytest.mark.exhaustive) for n in names]
