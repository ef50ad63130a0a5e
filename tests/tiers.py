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
runs (tests/agents/test_regression.py, every agent) and the every-agent checks: MPO, DADS, IPPO and the
quality-diversity runs. Their slow tests (learning runs included) are in the exhaustive tier
(`tests/conftest.py` marks them)."""

OPTIONAL_SUITES_PREFIX = "test_suite_"
"""Test modules of the optional suites' adapters (`eqxrl[suites]`: Jumanji, pgx, Craftax, Navix,
XLand-MiniGrid, MuJoCo Playground; one `tests/test_suite_<suite>.py` each). Every test in them
imports its suite (seconds per worker) and steps it, so all of them are slow-tier (CI runs them):
the fast tier (`-m "not slow"`, under 3 minutes) checks eqxrl's own code on its required
dependencies (`tests/conftest.py` marks them)."""

FAST_TIER_RULE = """The fast tier (`python -m pytest -n auto -m "not slow"`) must stay under 3 minutes on 2
cores; it holds tests that take under about 2 s each there. A test measured over that (its first
compilation, a subprocess, a suite's import) is marked `slow` with the comment "(over 2 s in the
fast tier: tests/tiers.py)" and runs in CI's slow tier instead. The exceptions are the kit's
`check_agent` runs of every built-in agent (each under 10 s on a small configuration) and of the
tutorial's agent, which the fast tier keeps on purpose: users run the same check in their own fast
tests (docs/testing.md; issue 32 asks it of every agent), and the
tests of the SECONDARY_MODULES, whose slow tests run in the exhaustive tier only (marking one slow
would take it out of CI)."""


def ci_subset(names, keep=REPRESENTATIVE):
    """`names` as pytest params: those in `keep` (compared case-insensitively) run in CI, the
    others only in the exhaustive tier."""
    kept = {str(k).lower() for k in keep}
    return [pytest.param(n, marks=() if str(n).lower() in kept else pytest.mark.exhaustive) for n in names]
