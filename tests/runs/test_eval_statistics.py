"""Evaluation statistics (`eval.json`, the end-of-training summary, the sinks' `eval/...`):
mean, std, min, max, median and NaN count over every episode and per seed, against NumPy."""

import json
import math

import numpy as np
import pytest

from eqxrl.cli._common import print_returns  # (private: the printer of the end-of-training summary, given NaN returns no short run makes)
from eqxrl.loop import evaluation_scalars
from eqxrl.runs import load_evaluation, save_evaluation, summarize_returns

RETURNS = np.array([[12.0, 30.0, 7.5, 21.0], [500.0, 9.0, 9.0, 41.0], [3.0, 18.0, 60.0, 2.0]])


def _expected(r: np.ndarray) -> dict:
    kept = r[~np.isnan(r)]
    return {"std": np.std(kept), "min": np.min(kept), "max": np.max(kept), "median": np.median(kept), "nan_count": int(np.isnan(r).sum())}


def test_the_statistics_equal_numpy_over_every_episode_and_per_seed():
    summary = summarize_returns(RETURNS)
    for name, value in _expected(RETURNS).items():
        assert summary[name] == pytest.approx(value, rel=1e-12), name
    assert summary["median_per_seed"] == pytest.approx(np.median(RETURNS, axis=1).tolist())
    assert summary["min_per_seed"] == RETURNS.min(axis=1).tolist() and summary["max_per_seed"] == RETURNS.max(axis=1).tolist()
    assert summary["nan_count_per_seed"] == [0, 0, 0]
    # The keys that were there before are unchanged (the sinks and scripts read them).
    assert summary["mean"] == pytest.approx(RETURNS.mean()) and summary["std_per_seed"] == RETURNS.std(axis=1).tolist()
    assert summary["mean_per_seed"] == RETURNS.mean(axis=1).tolist() and summary["episodes"] == 4
    # One seed's (episodes,) returns: the same statistics.
    one = summarize_returns(RETURNS[1])
    assert one["median"] == 25.0 and one["nan_count"] == 0 and one["median_per_seed"] == [25.0]


def test_nan_episodes_are_counted_and_left_out_of_the_statistics(tmp_path):
    r = RETURNS.copy()
    r[0, 1] = r[2, 0] = np.nan
    r[1] = np.nan  # a seed whose every episode is NaN
    summary = save_evaluation(tmp_path, r, deterministic=True, seed=3)
    for name, value in _expected(r).items():
        assert summary[name] == pytest.approx(value, rel=1e-12), name
    assert summary["nan_count"] == 6 and summary["nan_count_per_seed"] == [1, 4, 1]
    assert summary["median_per_seed"][0] == np.median([12.0, 7.5, 21.0]) and math.isnan(summary["median_per_seed"][1])
    assert math.isnan(summary["mean"])  # (as before: the mean over seeds of each seed's mean)
    # eval.json is strict JSON (NaN written as null) and reads back with the same numbers.
    text = (tmp_path / "eval.json").read_text()
    assert "NaN" not in text and json.loads(text)["min_per_seed"] == [7.5, None, 2.0]
    loaded = load_evaluation(tmp_path)
    assert loaded["median"] == summary["median"] and loaded["nan_count"] == 6 and loaded["seed"] == 3
    # The sinks' scalars take the summary's statistics, and add the median and the NaN count.
    scalars = evaluation_scalars(loaded)
    assert scalars["eval/median"] == summary["median"] and scalars["eval/nan_count"] == 6.0
    assert scalars["eval/std"] == summary["std"] and math.isnan(scalars["eval/mean"])


def test_the_end_of_training_summary_prints_the_statistics(capsys):
    r = RETURNS.copy()
    r[0, 0] = np.nan
    print_returns(summarize_returns(r), 0, deterministic=True)
    kept = r[~np.isnan(r)]
    line = capsys.readouterr().out.splitlines()[-1]
    assert line == (
        f"    all 12 episodes: median {np.median(kept):.2f}, std {np.std(kept):.2f}, "
        f"min {kept.min():.2f}, max {kept.max():.2f}, 1 NaN"
    )
