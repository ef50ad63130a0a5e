"""Sinks (`eqxrl.loop.AbstractSink`): TensorBoard, W&B and MLflow read back against
`metrics.csv` and `eval.json`; a user's sink as a `train` callback and in `train_run`; resume
going on in the same tracker run; and every bad input's one-line message."""

import contextlib
import glob
import io
import pathlib

import jax
import numpy as np
import pytest

import eqxrl
from eqxrl import cli
from eqxrl.agents import PPO
from eqxrl.loop import SINKS, AbstractSink, RunInfo, SinkGroup, make_sinks, register_sink, scalar_rows
from eqxrl.runs import MlflowSink, TensorBoardSink, WandbSink, load_config, load_evaluation, load_metrics, train_run
from typecheck import no_runtime_typecheck
from tensorboard_events import summary_values

TINY = dict(num_envs=2, rollout_length=16, num_epochs=1, num_minibatches=1, hidden_sizes=(8,))
STEPS = 32 * 8  # 8 iterations of 32 env steps


class Rows(AbstractSink):
    """A user's sink: keeps what it is handed."""

    def __init__(self):
        self.started: list[RunInfo] = []
        self.steps: list[np.ndarray] = []
        self.metrics: list[dict] = []
        self.evaluations: list[tuple] = []
        self.statuses: list[str] = []

    def start(self, run):
        self.started.append(run)

    def rows(self, steps, metrics):
        self.steps.append(np.asarray(steps))
        self.metrics.append({k: np.asarray(v) for k, v in metrics.items()})

    def evaluation(self, summary, env_steps):
        self.evaluations.append((summary["mean"], env_steps))

    def finish(self, status):
        self.statuses.append(status)


def _expected(run_dir: pathlib.Path) -> dict[int, dict[str, float]]:
    """What every tracker should hold, computed from `metrics.csv` alone."""
    metrics = load_metrics(run_dir)
    metrics.pop("iteration")
    steps = np.atleast_2d(metrics.pop("env_steps"))[0]
    # (metrics.csv writes float32's shortest repr: read back as float32, the values are the ones trained)
    return dict(scalar_rows(steps, {k: np.atleast_2d(v).astype(np.float32) for k, v in metrics.items()}))


def _tensorboard(directory: pathlib.Path) -> dict[int, dict[str, float]]:
    out: dict[int, dict[str, float]] = {}
    for step, value in summary_values(directory):
        if value.HasField("simple_value"):
            out.setdefault(step, {})[value.tag] = value.simple_value
    return out


def _close(a: dict[int, dict[str, float]], b: dict[int, dict[str, float]], rtol: float) -> None:
    assert sorted(a) == sorted(b)
    for step in a:
        assert sorted(a[step]) == sorted(b[step]), step
        np.testing.assert_allclose([a[step][k] for k in a[step]], [b[step][k] for k in a[step]], rtol=rtol)


@pytest.mark.slow  # (over 2 s in the fast tier: tests/tiers.py)
def test_every_row_and_the_evaluation_reach_tensorboard_wandb_and_mlflow(tmp_path, monkeypatch):
    pytest.importorskip("mlflow")
    wandb = pytest.importorskip("wandb")
    import mlflow

    monkeypatch.chdir(tmp_path)  # (MLflow's sqlite store keeps artifacts in ./mlruns)
    handed: list[dict] = []
    log = wandb.Run.log
    monkeypatch.setattr(wandb.Run, "log", lambda self, data, *a, **k: (handed.append(dict(data)), log(self, data, *a, **k))[1])
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    mine = Rows()
    run_dir = tmp_path / "run"
    agent = PPO("CartPole-v1", **TINY)
    train_run(run_dir, agent, total_steps=STEPS, num_seeds=2, progress=False, eval_every=64, eval_episodes=2,
              log=["tensorboard", WandbSink(mode="offline", dir=tmp_path), MlflowSink(uri, experiment="t"), mine])  # fmt: skip
    expected = _expected(run_dir)
    assert len(expected) == 8 and "eval_return" in expected[64] and "eval_return" not in expected[32]
    assert "episode_return/member_1" in expected[STEPS] and "loss" in expected[STEPS]
    final = load_evaluation(run_dir)

    # MLflow: read back through its client from the sqlite store.
    client = mlflow.MlflowClient(uri)
    config = load_config(run_dir)
    assert config["log"] == ["tensorboard", "wandb", "mlflow"]
    run = client.get_run(config["sinks"]["mlflow"]["run_id"])
    assert run.info.status == "FINISHED" and run.data.params["agent_config.optimizer.learning_rate"] == "0.00025"
    got: dict[int, dict[str, float]] = {}
    for key in run.data.metrics:
        for m in client.get_metric_history(run.info.run_id, key):
            got.setdefault(m.step, {})[key] = m.value
    evaluation = {k: got[STEPS].pop(k) for k in list(got[STEPS]) if k.startswith("eval/")}
    assert all(got[s].pop("env_steps") == s for s in got)
    _close(got, expected, rtol=1e-12)  # (MLflow keeps float64)
    assert evaluation["eval/mean"] == pytest.approx(final["mean"])
    assert "eval.json" in [a.path for a in client.list_artifacts(run.info.run_id)]

    # W&B: what the sink handed to wandb (W&B has no public reader of offline runs), and the offline run's file.
    rows = {d.pop("env_steps"): d for d in handed if "eval/mean" not in d}
    _close(rows, expected, rtol=1e-12)
    assert [d["eval/mean"] for d in handed if "eval/mean" in d] == [pytest.approx(final["mean"])]
    files = glob.glob(str(tmp_path / "wandb" / "offline-run-*" / f"run-{config['sinks']['wandb']['id']}.wandb"))
    assert len(files) == 1 and pathlib.Path(files[0]).stat().st_size > 0

    # TensorBoard: float32 event values.
    board = _tensorboard(run_dir / "tensorboard")
    board_eval = {k: board[STEPS].pop(k) for k in list(board[STEPS]) if k.startswith("eval/")}
    _close(board, expected, rtol=1e-6)
    assert board_eval["eval/mean"] == pytest.approx(final["mean"], rel=1e-6)

    # A user's sink, beside them: every row once, the evaluation, the end.
    assert mine.started[0].run_dir == run_dir and mine.started[0].steps_per_iteration == 32
    assert np.concatenate(mine.steps).tolist() == sorted(expected)
    assert mine.evaluations == [(pytest.approx(final["mean"]), STEPS)] and mine.statuses == ["complete"]


def test_a_sink_is_a_train_callback():
    agent = PPO("CartPole-v1", **TINY)
    mine = Rows()
    _, metrics = eqxrl.train(agent, jax.random.key(0), STEPS, chunk_iterations=3, callback=mine)
    assert len(mine.started) == 1 and mine.started[0].run_dir is None
    assert np.concatenate(mine.steps).tolist() == np.asarray(metrics["env_steps"]).tolist()
    got = np.concatenate([m["episode_return"] for m in mine.metrics], axis=1)[0]
    np.testing.assert_array_equal(got, np.asarray(metrics["episode_return"]))


def test_a_failing_sink_is_reported_and_left_out(capsys):
    class Broken(Rows):
        def rows(self, steps, metrics):
            raise OSError("disk full")

    broken, fine = Broken(), Rows()
    group = SinkGroup([broken, fine])
    group.start(RunInfo("t"))
    group.rows(np.array([1, 2]), {"x": np.ones((1, 2))})
    group.rows(np.array([3]), {"x": np.ones((1, 1))})
    group.finish("complete")
    assert group.sinks == [fine] and len(fine.steps) == 2 and broken.statuses == []
    assert capsys.readouterr().err.strip() == "eqxrl: the Broken sink failed in rows and is left out of this run: disk full"


def test_a_sink_that_cannot_start_closes_those_started_before_it():
    class NoStart(Rows):
        def start(self, run):
            raise ValueError("no login")

    first, second = Rows(), Rows()
    with pytest.raises(ValueError, match="^no login$"):
        SinkGroup([first, NoStart(), second]).start(RunInfo("t"))
    assert first.statuses == ["failed"] and second.started == [] and second.statuses == []


def test_evaluation_scalars_are_the_mean_and_the_spread_of_every_episode():
    from eqxrl.loop import evaluation_scalars

    summary = {"mean": 4.0, "returns": [[1.0, 3.0], [5.0, 7.0]]}
    assert evaluation_scalars(summary) == {"eval/mean": 4.0, "eval/std": float(np.std([1, 3, 5, 7])), "eval/min": 1.0, "eval/max": 7.0}
    # A summary of this eqxrl (summarize_returns) also gives the median and the NaN count.
    assert evaluation_scalars(eqxrl.runs.summarize_returns(np.array(summary["returns"]))) == {
        "eval/mean": 4.0, "eval/std": float(np.std([1, 3, 5, 7])), "eval/min": 1.0, "eval/max": 7.0, "eval/median": 4.0, "eval/nan_count": 0.0,
    }  # fmt: skip
    with no_runtime_typecheck(), pytest.raises(ValueError) as e:
        evaluation_scalars({"mean": 1.0})
    assert str(e.value) == "evaluation_scalars(summary) must be eval.json's summary, with 'mean' and non-empty 'returns', got {'mean': 1.0}"


def test_scalar_rows_leave_out_values_that_are_not_there():
    steps = np.array([10, 20])
    metrics = {"loss": np.array([[1.0, 3.0], [2.0, np.nan]]), "eval_return": np.array([[np.nan, 5.0], [np.nan, 7.0]])}
    assert list(scalar_rows(steps, metrics)) == [
        (10, {"loss": 1.5}),
        (20, {"loss": 3.0, "eval_return": 6.0, "eval_return/member_0": 5.0, "eval_return/member_1": 7.0}),
    ]


def test_registered_sinks_are_named_in_log_and_built_again_from_their_record(tmp_path):
    @register_sink
    class Mine(Rows):
        name = "mine_for_test"

        @classmethod
        def resume(cls, record):
            sink = cls()
            sink.record = record
            return sink

    try:
        sinks, names = make_sinks(["mine_for_test", "tensorboard", "mine_for_test", Rows()], {"mine_for_test": {"a": 1}})
        assert names == ["mine_for_test", "tensorboard"] and len(sinks) == 3 and sinks[0].record == {"a": 1}
        assert isinstance(sinks[1], TensorBoardSink) and isinstance(sinks[2], Rows)
    finally:
        del SINKS["mine_for_test"]


def test_flat_params_are_what_mlflow_takes():
    from eqxrl.runs import flat_params

    config = {"agent": "ppo", "agent_config": {"hidden_sizes": [64, 64], "lr": 3e-4, "opt": {"class": "Adam"}}, "x": None}
    assert dict(flat_params(config)) == {
        "agent": "ppo", "agent_config.hidden_sizes": "[64, 64]", "agent_config.lr": "0.0003",
        "agent_config.opt.class": "Adam", "x": "null",
    }  # fmt: skip


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: make_sinks(["nope"]), "train_run(log) must name a sink ('mlflow', 'tensorboard', 'wandb'; or register_sink), got 'nope'"),
        (lambda: make_sinks(3), "train_run(log) must be a list of sink names (mlflow, tensorboard, wandb) or sinks, got 3"),
        (lambda: make_sinks([print]), "train_run(log) must hold sink names or eqxrl.loop.AbstractSink instances, got <built-in function print>"),
        (lambda: register_sink(int), "register_sink(cls) must be a subclass of eqxrl.loop.AbstractSink, got <class 'int'>"),
        (lambda: register_sink(Rows), "register_sink(cls): Rows.name must be a lower-case identifier such as 'my_logger', got ''"),
        (lambda: WandbSink(mode="cloud"), "WandbSink(mode) must be one of None, 'online', 'offline', 'disabled', got 'cloud'"),
        (lambda: WandbSink(""), "WandbSink(project) must be a non-empty string or None, got ''"),
        (lambda: WandbSink(tags="a"), "WandbSink(tags) must be a list of strings, got 'a'"),
        (lambda: MlflowSink(3), "MlflowSink(tracking_uri) must be a non-empty string or None, got 3"),
        (lambda: TensorBoardSink(3), "TensorBoardSink(logdir) must be a directory path or None, got 3"),
        (lambda: TensorBoardSink().start(RunInfo("t")), "TensorBoardSink(logdir) is needed outside a run directory (a train callback), got None"),
    ],
)
def test_bad_sink_arguments_are_one_line(call, message):
    with no_runtime_typecheck(), pytest.raises(ValueError) as e:
        call()
    assert str(e.value) == message


def test_train_run_refuses_a_bad_log_before_writing(tmp_path):
    with no_runtime_typecheck(), pytest.raises(ValueError, match=r"^train_run\(log\) must name a sink .* got 'tb'$"):
        train_run(tmp_path / "run", PPO("CartPole-v1", **TINY), total_steps=STEPS, log=["tb"])
    assert not (tmp_path / "run" / "config.json").exists()


def test_an_mlflow_store_that_cannot_start_is_one_line_before_training(tmp_path, monkeypatch):
    pytest.importorskip("mlflow")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match=r"^the mlflow sink could not start an MLflow run at 'nope://x': "):
        train_run(tmp_path / "run", PPO("CartPole-v1", **TINY), total_steps=STEPS, log=[MlflowSink("nope://x")], progress=False)
    assert load_config(tmp_path / "run")["status"] == "running" and not (tmp_path / "run" / "checkpoints").exists()


def test_log_flag_names_the_sinks(capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(["train", "ppo", "--log", "tensorboard,neptune"])
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.endswith(
        "argument --log: expected sink names from mlflow, tensorboard, wandb separated by commas, got 'tensorboard,neptune'"
    )


@pytest.mark.slow  # (over 2 s in the fast tier: tests/tiers.py)
def test_log_flag_trains_with_mlflow_and_resume_goes_on_in_the_same_mlflow_run(tmp_path, monkeypatch):
    pytest.importorskip("mlflow")
    monkeypatch.chdir(tmp_path)  # (MLflow's sqlite store keeps artifacts in ./mlruns)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'm.db'}")
    tiny = ["--num-envs", "2", "--rollout-length", "16", "--num-minibatches", "1", "--hidden-sizes", "8", "--eval-episodes", "2", "--quiet"]
    run_dir = str(tmp_path / "r")
    with contextlib.redirect_stdout(io.StringIO()):
        assert cli.main(["train", "ppo", "--run-dir", run_dir, "--total-steps", "128", "--log", "mlflow", *tiny]) == 0
        monkeypatch.delenv("MLFLOW_TRACKING_URI")  # (the run directory remembers the store)
        assert cli.main(["train", "--resume", run_dir, "--total-steps", "256", "--quiet"]) == 0
    config = load_config(run_dir)
    assert config["log"] == ["mlflow"] and config["tensorboard"] is False
    import mlflow

    client = mlflow.MlflowClient(f"sqlite:///{tmp_path / 'm.db'}")
    history = client.get_metric_history(config["sinks"]["mlflow"]["run_id"], "env_steps")
    assert sorted(m.step for m in history) == list(range(32, 257, 32))


@pytest.mark.slow  # (over 2 s in the fast tier: tests/tiers.py)
def test_pbt_logs_each_generation_and_resume_logs_to_the_recorded_sinks(tmp_path, monkeypatch):
    mlflow = pytest.importorskip("mlflow")
    monkeypatch.chdir(tmp_path)  # (MLflow's sqlite store keeps artifacts in ./mlruns)
    from eqxrl.pbt import PBT, LogUniform, resume

    uri = f"sqlite:///{tmp_path / 'm.db'}"
    pbt = PBT(PPO("CartPole-v1", **TINY), {"learning_rate": LogUniform(1e-4, 1e-2)}, population_size=2, ready=64, eval_episodes=2)
    mine = Rows()
    _, history = pbt.run(jax.random.key(0), 128, progress=False, run_dir=tmp_path / "pbt", log=[MlflowSink(uri), mine])
    assert np.concatenate(mine.steps).tolist() == history.env_steps.tolist() == [64, 128]
    np.testing.assert_array_equal(np.concatenate([m["fitness"] for m in mine.metrics], axis=1), history.fitness.T)
    np.testing.assert_array_equal(
        np.concatenate([m["hp/learning_rate"] for m in mine.metrics], axis=1), history.hyperparameters["learning_rate"].T
    )
    assert mine.statuses == ["complete"] and mine.started[0].steps_per_iteration == 64
    config = __import__("json").loads((tmp_path / "pbt" / "pbt.json").read_text())
    assert config["log"] == ["mlflow"] and config["sinks"]["mlflow"]["tracking_uri"] == uri
    client = mlflow.MlflowClient(uri)
    run_id = config["sinks"]["mlflow"]["run_id"]
    got = {m.step: m.value for m in client.get_metric_history(run_id, "fitness/member_1")}
    assert got == {64: history.fitness[0, 1], 128: history.fitness[1, 1]}
    resume(tmp_path / "pbt", progress=False)  # (finished: no generation to run, but the recorded sink starts and ends again)
    assert client.get_run(run_id).info.status == "FINISHED"
    assert sorted(m.step for m in client.get_metric_history(run_id, "env_steps")) == [64, 128]
