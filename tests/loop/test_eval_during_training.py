"""Evaluation during training (`train(eval_every=...)`, `eval_key_at`), metrics moved to the host
once per chunk (`HostMetrics`), and the callbacks that stop or report (`StopAtReturn`, `EvalLogger`)."""

import io

import jax
import numpy as np
import pytest

import eqxrl
from eqxrl.agents import PPO
from eqxrl.loop import EVAL_STREAM, Checkpoint, EvalLogger, HostMetrics, LazyMetrics, StopAtReturn, eval_key_at, latest_value
from eqxrl.runs import load_metrics, plot_learning_curve, save_metrics
from tensorboard_events import summary_values

SMALL = dict(num_envs=4, rollout_length=16, num_epochs=1, num_minibatches=2, hidden_sizes=(16,))
PER_ITER = 64
ITERATIONS = 12
TOTAL = PER_ITER * ITERATIONS
EVERY = PER_ITER * 4  # evaluations after iterations 4, 8 and 12
EPISODES = 3


@pytest.fixture(scope="module")
def agent():
    return PPO("CartPole-v1", **SMALL)


def _train(agent, key, **kwargs):
    kwargs = {"progress": False, "chunk_iterations": 4, "eval_every": EVERY, "eval_episodes": EPISODES, **kwargs}
    return eqxrl.train(agent, key, TOTAL, **kwargs)


def _same_tree(a, b):
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
            x, y = jax.random.key_data(x), jax.random.key_data(y)
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


# ----------------------------------------------------------------- evaluation inside the program
@pytest.mark.slow
@pytest.mark.bitwise
def test_eval_return_equals_evaluate_at_that_iteration_and_leaves_training_unchanged(agent):
    key = jax.random.key(1)
    seen = []
    logger = EvalLogger(verbose=False)
    never = StopAtReturn(1e9)
    state, metrics, info = _train(agent, key, callback=[lambda c: seen.append(c.copy()), logger, never], return_info=True)
    evals = metrics["eval_return"]
    assert evals.shape == (ITERATIONS,) and evals.dtype == np.float32
    assert list(np.nonzero(np.isfinite(evals))[0]) == [3, 7, 11]  # NaN on rows with no evaluation
    assert [c.iteration for c in seen] == [4, 8, 12]
    for checkpoint in seen:
        returns = eqxrl.evaluate(agent, checkpoint.state, eval_key_at(key, checkpoint.iteration), num_episodes=EPISODES)
        assert evals[checkpoint.iteration - 1] == returns.mean()
        assert len(checkpoint.metrics["env_steps"]) == checkpoint.iteration
    assert logger.evaluations == [(4 * PER_ITER, float(evals[3])), (8 * PER_ITER, float(evals[7])), (12 * PER_ITER, float(evals[11]))]
    assert info.stopped_at is None and not info.stopped_early and never.stopped_at is None

    # The same run without evaluation: every training number and the final state bit for bit.
    plain_state, plain = eqxrl.train(agent, key, TOTAL, progress=False, chunk_iterations=4)
    assert set(metrics) - set(plain) == {"eval_return"}
    for name, values in plain.items():
        np.testing.assert_array_equal(metrics[name], values, err_msg=name)
    _same_tree(state, plain_state)


@pytest.mark.slow
def test_eval_return_of_a_seed_batch_equals_evaluate_per_member(agent):
    keys = jax.random.split(jax.random.key(2), 2)
    seen = []
    _, metrics = _train(agent, keys, callback=lambda c: seen.append(c.copy()))
    evals = metrics["eval_return"]
    assert evals.shape == (2, ITERATIONS)
    assert list(np.nonzero(np.isfinite(evals).all(axis=0))[0]) == [3, 7, 11]
    assert not np.isfinite(evals[:, [0, 1, 2, 4]]).any()
    for checkpoint in seen:
        for i in range(2):
            member = jax.tree.map(lambda x: x[i], checkpoint.state)
            key = eval_key_at(keys, checkpoint.iteration)[i]
            returns = eqxrl.evaluate(agent, member, key, num_episodes=EPISODES)
            assert evals[i, checkpoint.iteration - 1] == returns.mean()


@pytest.mark.slow
def test_make_train_of_a_sweep_logs_what_train_logs():
    stacked = eqxrl.stack([PPO("CartPole-v1", **SMALL, learning_rate=lr) for lr in (1e-3, 3e-4)])
    key = jax.random.key(3)
    train_fn = eqxrl.make_train(stacked, TOTAL, eval_every=EVERY, eval_episodes=EPISODES)
    _, pure = jax.jit(train_fn)(key)
    _, metrics = eqxrl.train(stacked, key, TOTAL, progress=False, eval_every=EVERY, eval_episodes=EPISODES)
    assert pure["eval_return"].shape == (2, ITERATIONS)
    # A stack under jax.jit(make_train) fuses differently from train's program (last float bits,
    # as tests/loop/test_pure.py allows): the same rows are evaluated, with the same returns up to that.
    np.testing.assert_array_equal(np.isfinite(pure["eval_return"]), np.isfinite(metrics["eval_return"]))
    assert np.isfinite(metrics["eval_return"][:, [3, 7, 11]]).all() and np.isnan(metrics["eval_return"][:, 0]).all()
    np.testing.assert_array_equal(np.asarray(pure["env_steps"]), metrics["env_steps"])
    np.testing.assert_allclose(np.asarray(pure["loss"]), metrics["loss"], rtol=1e-4, atol=1e-5)


@pytest.mark.slow
def test_a_callback_stops_training_early(agent, capsys):
    key = jax.random.key(1)
    out = io.StringIO()
    stop = StopAtReturn(0.0)  # any evaluation reaches it: stop after the first (iteration 4)
    logger = EvalLogger(file=out)
    state, metrics, info = _train(agent, key, callback=[logger, stop], return_info=True, progress=True)
    assert f"eval={metrics['eval_return'][3]:.1f}" in capsys.readouterr().err  # the bar shows it beside ret=
    assert info.stopped_early and info.stopped_at == 4 and info.num_iterations == ITERATIONS
    assert info.env_steps == 4 * PER_ITER == info.total_env_steps
    assert metrics["env_steps"].tolist() == [PER_ITER * (i + 1) for i in range(4)]
    assert stop.stopped_at == (4, float(metrics["eval_return"][3]))
    assert out.getvalue() == f"env steps 256: eval_return {metrics['eval_return'][3]:.2f}\n"
    # The state is the one after those iterations: evaluating it gives the logged number.
    returns = eqxrl.evaluate(agent, state, eval_key_at(key, 4), num_episodes=EPISODES)
    assert metrics["eval_return"][3] == returns.mean()


@pytest.mark.slow
@pytest.mark.bitwise
def test_pbt_logs_eval_return_without_changing_the_run():
    from eqxrl.pbt import PBT, LogUniform

    base = PPO("CartPole-v1", **SMALL)
    kwargs = dict(population_size=2, ready=PER_ITER * 4, eval_episodes=2)
    space = {"learning_rate": LogUniform(1e-4, 1e-2)}
    _, history = PBT(base, space, eval_every=PER_ITER * 2, **kwargs).run(jax.random.key(0), PER_ITER * 8, progress=False)
    _, plain = PBT(base, space, **kwargs).run(jax.random.key(0), PER_ITER * 8, progress=False)
    assert history.eval_return.shape == (2, 2) and np.isfinite(history.eval_return).all()
    assert plain.eval_return is None
    np.testing.assert_array_equal(history.fitness, plain.fitness)
    np.testing.assert_array_equal(history.train_return, plain.train_return)


# ----------------------------------------------------------------- keys and arguments
def test_eval_key_at_is_a_stream_of_the_run_key():
    key = jax.random.key(7)
    want = jax.random.fold_in(jax.random.fold_in(key, EVAL_STREAM), 5)
    np.testing.assert_array_equal(jax.random.key_data(eval_key_at(key, 5)), jax.random.key_data(want))
    keys = jax.random.split(key, 3)
    batch = eval_key_at(keys, 5)
    assert batch.shape == (3,)
    for i in range(3):
        np.testing.assert_array_equal(jax.random.key_data(batch[i]), jax.random.key_data(eval_key_at(keys[i], 5)))
    # A different iteration, a different key; the training key itself is never returned.
    assert not np.array_equal(jax.random.key_data(eval_key_at(key, 6)), jax.random.key_data(want))
    with pytest.raises(ValueError, match=r"eval_key_at\(key\) must be a PRNG key"):
        eval_key_at(3, 1)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(eval_every=0), r"train\(eval_every\) must be None or an int of at least one iteration \(64 env steps per member\), got 0"),
        (dict(eval_every=63), r"got 63"),
        (dict(eval_every=128.0), r"train\(eval_every\) must be None or an int .* got 128.0"),
        (dict(eval_every=True), r"got True"),
        (dict(eval_every=TOTAL + PER_ITER), rf"train\(eval_every={TOTAL + PER_ITER}\) must be at most total_steps={TOTAL}"),
        (dict(eval_every=EVERY, eval_episodes=0), r"train\(eval_episodes\) must be a positive int, got 0"),
        (dict(callback=[print, 3]), r"train\(callback\) must be a callable f\(checkpoint\) or a list of them .* got int 3"),
    ],
)
def test_bad_evaluation_arguments(agent, kwargs, message):
    with pytest.raises(ValueError, match=message):
        eqxrl.train(agent, jax.random.key(0), TOTAL, progress=False, **kwargs)


def test_bad_make_train_and_pbt_eval_every(agent):
    with pytest.raises(ValueError, match=r"make_train\(eval_every\) must be None or an int of at least one iteration"):
        eqxrl.make_train(agent, TOTAL, eval_every=10)
    from eqxrl.pbt import PBT, LogUniform

    with pytest.raises(ValueError, match=r"PBT\(eval_every\) must be None or an int of at least one iteration of PPO \(64 env steps\), got 32"):
        PBT(agent, {"learning_rate": LogUniform(1e-4, 1e-2)}, population_size=2, ready=128, eval_every=32)


# ----------------------------------------------------------------- host metrics
def test_host_metrics_fill_in_place_and_views_stay_valid():
    host = HostMetrics(5, {}, 0, batched=True)
    chunk = lambda start: {"x": np.arange(start, start + 2, dtype=np.float32)[:, None].repeat(3, 1)}  # noqa: E731
    host.add(chunk(0), 0)
    first = host.view(2)
    assert first["x"].shape == (3, 2)
    host.add(chunk(2), 2)
    host.add(chunk(4), 4)  # the last chunk runs past the budget: its extra row is dropped
    assert host.view(5)["x"].tolist() == [[0, 1, 2, 3, 4]] * 3
    assert first["x"].tolist() == [[0, 1]] * 3  # an earlier view is unchanged


def test_host_metrics_continue_a_resumed_run():
    before = {"x": np.array([1.0, 2.0])}
    host = HostMetrics(4, before, 2, batched=False)
    assert host.view(2)["x"].tolist() == [1.0, 2.0]  # nothing new yet: the checkpoint's rows
    host.add({"x": np.array([3.0, 4.0], np.float32), "nonfinite": np.zeros(2, bool)}, 2)
    out = host.view(4)
    assert out["x"].tolist() == [1.0, 2.0, 3.0, 4.0] and "nonfinite" not in out


def test_lazy_metrics_move_to_the_host_only_when_read():
    host = HostMetrics(4, {}, 0, batched=False)
    host.add({"x": jax.numpy.arange(2.0)}, 0)
    lazy = LazyMetrics(host, 2)
    host.add({"x": jax.numpy.arange(2.0, 4.0)}, 2)
    assert len(host.pending) == 2  # nothing has crossed yet
    assert lazy["x"].tolist() == [0.0, 1.0] and list(lazy) == ["x"] and len(lazy) == 1  # its own rows only
    assert not host.pending and dict(lazy).keys() == {"x"}


# ----------------------------------------------------------------- callbacks on given metrics
def _checkpoint(evals, steps=None):
    evals = np.asarray(evals, np.float32)
    n = evals.shape[-1]
    steps = np.arange(1, n + 1) * 10 if steps is None else steps
    env_steps = np.broadcast_to(steps, evals.shape)
    return Checkpoint(None, n, 10, 1, {"env_steps": env_steps, "eval_return": evals, "episode_return": evals})


def test_latest_value_is_the_mean_over_members_of_the_last_evaluated_rows():
    nan = np.nan
    ckpt = _checkpoint([[nan, 1.0, nan, 4.0], [nan, 3.0, nan, nan]])
    assert latest_value(ckpt) == (4, 4.0)  # a member with no value there is left out
    assert latest_value(ckpt, window=2) == (4, np.mean([1.0, 3.0, 4.0]))
    assert latest_value(_checkpoint([nan, nan])) is None


def test_stop_at_return_rule_and_errors():
    nan = np.nan
    stop = StopAtReturn(2.5)
    assert stop(_checkpoint([[nan, 1.0], [nan, 3.0]])) is False  # mean 2.0
    assert stop(_checkpoint([[nan, 2.0], [nan, 3.0]])) is True and stop.stopped_at == (2, 2.5)
    assert StopAtReturn(2.0, "episode_return", window=2)(_checkpoint([1.0, 3.0])) is True
    with pytest.raises(ValueError, match=r"StopAtReturn\(metric='eval_return'\): the run has no such metric \(pass train\(eval_every=...\)"):
        StopAtReturn(1.0)(Checkpoint(None, 1, 1, 1, {"env_steps": np.array([1]), "episode_return": np.array([1.0])}))
    for kwargs, message in [
        (dict(threshold=float("nan")), r"StopAtReturn\(threshold\) must be a finite number, got nan"),
        (dict(threshold="high"), r"StopAtReturn\(threshold\) must be a finite number, got 'high'"),
        (dict(threshold=1.0, metric=""), r"StopAtReturn\(metric\) must be a metric name"),
        (dict(threshold=1.0, window=0), r"StopAtReturn\(window\) must be a positive int, got 0"),
    ]:
        with pytest.raises(ValueError, match=message):
            StopAtReturn(**kwargs)


def test_eval_logger_reports_each_evaluation_once():
    nan = np.nan
    out = io.StringIO()
    logger = EvalLogger(file=out)
    logger(_checkpoint([[nan, 1.0], [nan, 3.0]]))
    logger(_checkpoint([[nan, 1.0, nan, 5.0], [nan, 3.0, nan, 7.0]]))
    assert logger.evaluations == [(20, 2.0), (40, 6.0)]
    assert [r.tolist() for r in logger.returns] == [[1.0, 3.0], [5.0, 7.0]]
    assert out.getvalue().splitlines() == [
        "env steps 20: eval_return 2.00 (min 1.00, max 3.00 over 2)",
        "env steps 40: eval_return 6.00 (min 5.00, max 7.00 over 2)",
    ]
    with pytest.raises(ValueError, match=r"EvalLogger\(metric\) must be a metric name"):
        EvalLogger(metric=3)
    with pytest.raises(ValueError, match=r"EvalLogger\(verbose\) must be True or False, got 'yes'"):
        EvalLogger(verbose="yes")


# ----------------------------------------------------------------- run-directory outputs
def _metrics_with_evals():
    nan = np.nan
    return {
        "env_steps": np.array([[10, 20, 30, 40]] * 2),
        "episode_return": np.array([[1.0, 2.0, 3.0, 4.0], [2.0, 3.0, 4.0, 5.0]], np.float32),
        "eval_return": np.array([[nan, 5.0, nan, 7.0], [nan, 6.0, nan, 8.0]], np.float32),
        "loss": np.zeros((2, 4), np.float32),
    }


def test_metrics_csv_has_an_eval_return_column(tmp_path):
    save_metrics(tmp_path / "metrics.csv", _metrics_with_evals())
    header = (tmp_path / "metrics.csv").read_text().splitlines()[0]
    assert header == "seed,iteration,env_steps,episode_return,eval_return,loss"
    back = load_metrics(tmp_path)
    np.testing.assert_array_equal(back["eval_return"], _metrics_with_evals()["eval_return"])


def test_learning_curve_shows_evaluations(tmp_path):
    plot_learning_curve(_metrics_with_evals(), tmp_path / "curve.png", title="t")
    plot_learning_curve(_metrics_with_evals(), tmp_path / "members.png", members=["a", "b"])
    for name in ("curve.png", "members.png"):
        assert (tmp_path / name).read_bytes().startswith(b"\x89PNG")


def test_tensorboard_writes_eval_return_only_where_there_is_one(tmp_path):
    pytest.importorskip("tensorboardX")
    from eqxrl.loop import RunInfo
    from eqxrl.runs import TensorBoardSink

    board = TensorBoardSink(tmp_path / "tensorboard")
    board.start(RunInfo("t"))
    board.rows_of(_metrics_with_evals(), 0, 4)
    board.finish("complete")
    steps: dict[str, list[int]] = {}
    for step, value in summary_values(tmp_path / "tensorboard"):
        steps.setdefault(value.tag, []).append(step)
    assert steps["eval_return"] == [20, 40]
    assert steps["eval_return/member_1"] == [20, 40]
    assert steps["episode_return"] == [10, 20, 30, 40]


def test_nonfinite_report_ignores_eval_return_between_evaluations():
    from eqxrl.loop._results import nonfinite_report  # (private: the report of non-finite metrics, called directly)

    metrics = {"eval_return": np.array([np.nan, 1.0]), "loss": np.array([np.inf, 0.0])}
    assert nonfinite_report({}, metrics, 0, batched=False) == ["metric loss (Inf)"]


@pytest.mark.slow
def test_a_resumed_run_evaluates_as_the_uninterrupted_one(agent):
    key = jax.random.key(1)
    saved = []
    _, whole = _train(agent, key, callback=lambda c: saved.append(c.copy()) if c.iteration == 4 else None)
    _, resumed = _train(agent, key, resume=saved[0])
    assert set(resumed) == set(whole)
    for name, values in whole.items():
        np.testing.assert_array_equal(resumed[name], values, err_msg=name)
