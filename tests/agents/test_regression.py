"""Every built-in agent's numbers after a short run of its default configuration equal the record
(`tests/data/regression.json`, written by `python tests/regression_runs.py --write`), within a
tolerance: another CPU may round differently. On the machine that wrote the record,
`python tests/regression_runs.py --check` compares bit for bit (what a change of structure that
is meant to move no number must show)."""

import json

import pytest
from regression_runs import RECORD, RUNS, differences, run

RECORDED = json.loads(RECORD.read_text())


def test_every_run_is_recorded():
    assert sorted(RECORDED) == sorted(RUNS)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(RECORDED))
def test_a_short_default_run_reproduces_the_record(name):
    # A few updates: ulp-level differences between CPUs stay far below 1e-4 relative.
    gaps = differences(run(name), RECORDED[name], rtol=1e-4, atol=1e-6)
    assert not gaps, f"{name} moved from tests/data/regression.json: " + "; ".join(gaps[:5])
