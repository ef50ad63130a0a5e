"""The run directory's own files as sinks (`eqxrl.runs.MetricsCsvSink`, `LearningCurveSink`,
`EvalJsonSink`, `CheckpointSink`): the same bytes as the functions that wrote them before, used
as bare `train` callbacks, the callbacks of `eqxrl.loop` as sinks in `train_run(log=)`, a required
sink's error ending the run, and every bad input's one-line message."""

import pathlib

import jax
import numpy as np
import pytest

import eqxrl
from eqxrl.agents import PPO
from eqxrl.loop import AbstractSink, EvalLogger, RunInfo, SinkGroup, StopAtReturn
from eqxrl.runs import (
    EvalJsonSink, LearningCurveSink, MetricsCsvSink, evaluation_summary, load_metrics, save_evaluation, save_metrics, train_run,
)  # fmt: skip
from typecheck import no_runtime_typecheck

TINY = dict(num_envs=2, rollout_length=16, num_epochs=1, num_minibatches=1, hidden_sizes=(8,))
STEPS = 32 * 8  # 8 iterations of 32 env steps


def test_the_file_sinks_write_what_the_functions_write(tmp_path: pathlib.Path):
    agent = PPO("CartPole-v1", **TINY)
    csv, curve = MetricsCsvSink(tmp_path / "sink.csv", seed=3), LearningCurveSink(tmp_path / "curve.png", title="t")
    state, metrics = eqxrl.train(agent, jax.random.key(0), STEPS, progress=False, chunk_iterations=2, callback=[csv, curve])
    save_metrics(tmp_path / "function.csv", metrics, seed=3)  # (result: at the chunk that reached the budget)
    assert (tmp_path / "sink.csv").read_bytes() == (tmp_path / "function.csv").read_bytes()
    assert (tmp_path / "curve.png").stat().st_size > 0
    returns = np.array([[1.0, 2.0], [3.0, np.nan]])
    EvalJsonSink(tmp_path / "sink.json").evaluation(evaluation_summary(returns, deterministic=True, seed=5), 64)
    save_evaluation(tmp_path, returns, deterministic=True, seed=5)
    assert (tmp_path / "sink.json").read_bytes() == (tmp_path / "eval.json").read_bytes()


def test_callbacks_are_sinks_and_a_run_directory_takes_them(tmp_path: pathlib.Path):
    logger = EvalLogger(verbose=False)
    assert isinstance(logger, AbstractSink) and isinstance(StopAtReturn(1.0), AbstractSink)
    agent = PPO("CartPole-v1", **TINY)
    train_run(tmp_path / "run", agent, total_steps=STEPS, progress=False, eval_every=64, eval_episodes=2, log=[logger])
    evals = load_metrics(tmp_path / "run")["eval_return"]
    assert [v for _, v in logger.evaluations] == pytest.approx(evals[np.isfinite(evals)].tolist(), rel=1e-6)
    with no_runtime_typecheck(), pytest.raises(ValueError, match=r"^train_run\(log\): the StopAtReturn sink asked to stop") as e:
        train_run(tmp_path / "stop", agent, total_steps=STEPS, progress=False, eval_episodes=2, log=[StopAtReturn(-1.0, "episode_return")])
    assert "\n" not in str(e.value)


def test_a_required_sink_ends_the_run_and_a_tracker_is_left_out(tmp_path: pathlib.Path, capsys):
    class Broken(AbstractSink):
        def rows(self, steps, metrics):
            raise OSError("disk full")

    class Full(Broken):
        required = True

    tracker, calls = Broken(), []

    class Seen(AbstractSink):
        def rows(self, steps, metrics):
            calls.append(len(steps))

    group = SinkGroup([tracker, Seen()])
    group.rows(np.arange(2), {"x": np.zeros((1, 2))})
    assert tracker not in group.sinks
    assert "failed in rows and is left out" in capsys.readouterr().err
    seen = Seen()
    with pytest.raises(OSError, match="disk full"):
        SinkGroup([Full(), seen]).rows(np.arange(2), {"x": np.zeros((1, 2))})
    assert calls == [2, 2]  # (the sinks after the required one still got the rows)
    SinkGroup([Full()]).finish("failed")  # (quiet where the run failed anyway)


def test_bad_inputs_of_the_file_sinks_are_one_line():
    with no_runtime_typecheck():
        for make, match in [
            (lambda: MetricsCsvSink(3), r"^MetricsCsvSink\(path\) must be a file path or None"),
            (lambda: MetricsCsvSink(seed="0"), r"^MetricsCsvSink\(seed\) must be an int or None"),
            (lambda: LearningCurveSink(3), r"^LearningCurveSink\(path\) must be a file path or None"),
            (lambda: EvalJsonSink(3), r"^EvalJsonSink\(path\) must be a file path or None"),
            (lambda: MetricsCsvSink().start(RunInfo("t")), r"^MetricsCsvSink\(path\) is needed outside a run directory"),
            (lambda: EvalJsonSink().start(RunInfo("t")), r"^EvalJsonSink\(path\) is needed outside a run directory"),
        ]:
            with pytest.raises(ValueError, match=match) as e:
                make()
            assert "\n" not in str(e.value)
