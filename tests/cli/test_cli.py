"""The `eqxrl` command line and run directories (`eqxrl.cli`, `eqxrl.runs`)."""

import contextlib
import csv
import dataclasses
import importlib.metadata
import io
import json
import math
import shutil
import subprocess
import sys

import jax
import numpy as np
import pytest
from cli_calls import main_captured

import eqxrl
from eqxrl import cli, runs
from eqxrl.agents import PPO

# 2 envs x 64 steps = 128 steps per iteration, 8 iterations.
TINY = [
    "--total-steps", "1024", "--num-envs", "2", "--rollout-length", "64",
    "--num-minibatches", "2", "--hidden-sizes", "16", "--eval-episodes", "4",
]  # fmt: skip
ITERATIONS = 8
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _main(argv: list[str]) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = cli.main(argv)
    return code, out.getvalue()


ONE_SEED_FLAGS = ["--learning-rate", "1e-3", "--anneal-lr", "false", "--gamma", "0.98", "--activation", "relu"]


@pytest.fixture(scope="module")
def one_seed(tmp_path_factory):
    """A 1-seed run with a few hyperparameters set by flags (no agent name: the default, ppo)."""
    run_dir = tmp_path_factory.mktemp("cli") / "one"
    code, out = _main(["train", "--run-dir", str(run_dir), "--quiet", *TINY, *ONE_SEED_FLAGS])
    assert code == 0
    return run_dir, out


@pytest.fixture(scope="module")
def two_seeds(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("cli") / "two"
    code, out = _main(["train", "ppo", "--run-dir", str(run_dir), "--quiet", "--seeds", "2", "--seed", "3", *TINY])
    assert code == 0
    return run_dir, out


RUNS = [("one_seed", 1, 0), ("two_seeds", 2, 3)]


@pytest.mark.slow
def test_train_prints_summary(one_seed, two_seeds):
    for (_, out), seeds in ((one_seed, [0]), (two_seeds, [3, 4])):
        for text in ("compile time", "env steps/s", "evaluation (4 episodes per seed, deterministic policy)"):
            assert text in out
        for s in seeds:
            assert f"seed {s} " in out
        assert f"mean over {len(seeds)} seed" in out


@pytest.mark.slow
@pytest.mark.parametrize("fixture, num_seeds, seed", RUNS)
def test_run_directory(request, fixture, num_seeds, seed):
    run_dir, _ = request.getfixturevalue(fixture)
    assert {p.name for p in run_dir.iterdir()} == {
        "config.json", "metrics.csv", "state.eqx", "learning_curve.png", "eval.json", "checkpoints"
    }  # fmt: skip
    # The checkpoints kept: the newest two (the last one at the end of the run).
    assert [c["step"] for c in eqxrl.runs.checkpoint_steps(run_dir)][-1] == 1024

    config = json.loads((run_dir / "config.json").read_text())
    assert config["agent"] == "ppo" and config["env"] == "CartPole-v1"
    assert config["seeds"] == num_seeds and config["seed"] == seed and config["total_steps"] == 1024
    assert config["eqxrl_version"] == eqxrl.__version__
    fields = {f.name for f in dataclasses.fields(PPO)} - {"env"}
    assert set(config["agent_config"]) == fields
    assert config["agent_config"]["target_kl"] == "inf"  # lossless, where agent.config() writes null
    timings = config["timings"]
    assert timings["num_iterations"] == ITERATIONS and timings["env_steps"] == num_seeds * 1024
    assert timings["compile_seconds"] > 0 and timings["steps_per_second"] > 0

    with open(run_dir / "metrics.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == num_seeds * ITERATIONS
    assert [int(r["seed"]) for r in rows] == [seed + i for i in range(num_seeds) for _ in range(ITERATIONS)]
    assert {"env_steps", "episode_return", "entropy", "approx_kl", "iteration"} <= set(rows[0])
    assert [int(r["env_steps"]) for r in rows[:ITERATIONS]] == [128 * (i + 1) for i in range(ITERATIONS)]
    metrics = runs.load_metrics(run_dir)
    shape = (ITERATIONS,) if num_seeds == 1 else (num_seeds, ITERATIONS)
    assert metrics["episode_return"].shape == shape and metrics["env_steps"].dtype == np.int64

    assert (run_dir / "learning_curve.png").read_bytes()[:8] == PNG_MAGIC

    evaluation = json.loads((run_dir / "eval.json").read_text())
    assert np.shape(evaluation["returns"]) == (num_seeds, 4)
    assert evaluation["deterministic"] is True
    assert evaluation["mean"] == pytest.approx(np.mean(evaluation["returns"]))


@pytest.mark.slow
def test_hyperparameter_flags_reach_the_agent(one_seed):
    run_dir, _ = one_seed
    saved = json.loads((run_dir / "config.json").read_text())["agent_config"]
    # --learning-rate and --anneal-lr built the optimizer, which config.json records
    assert saved["optimizer"]["learning_rate"] == 1e-3 and saved["optimizer"]["anneal"] is False and saved["gamma"] == 0.98
    assert "learning_rate" not in saved and saved["activation"] == "relu"
    assert saved["hidden_sizes"] == [16] and saved["num_envs"] == 2 and saved["rollout_length"] == 64
    agent = runs.load_agent(run_dir)
    assert isinstance(agent, PPO)
    assert agent.anneal_lr is False and agent.activation == "relu" and agent.hidden_sizes == (16,)
    assert agent.learning_rate == np.float32(1e-3) and agent.gamma == np.float32(0.98)
    assert math.isinf(float(agent.target_kl))


@pytest.mark.slow
@pytest.mark.parametrize("fixture, num_seeds, seed", RUNS)
def test_load_run_and_evaluate(request, fixture, num_seeds, seed):
    run_dir, _ = request.getfixturevalue(fixture)
    agent, state, config = runs.load_run(run_dir)
    assert config["seeds"] == num_seeds
    leading = () if num_seeds == 1 else (num_seeds,)
    assert state.iteration.shape == leading
    assert np.all(np.asarray(state.iteration) == ITERATIONS)
    assert np.all(np.asarray(state.env_steps) == 1024)
    assert jax.dtypes.issubdtype(state.key.dtype, jax.dtypes.prng_key) and state.key.shape == leading
    # Same agent, state and key as at the end of training: the same returns as eval.json.
    returns = eqxrl.evaluate(agent, state, runs.eval_key(seed), num_episodes=4)
    assert returns.shape == leading + (4,)
    expected = json.loads((run_dir / "eval.json").read_text())["returns"]
    np.testing.assert_allclose(np.atleast_2d(np.asarray(returns)), expected)


@pytest.mark.slow  # (it trains the two module runs when the slow tests that also use them are left out)
def test_evaluate_command(one_seed, two_seeds, capsys):
    run_dir, _ = two_seeds
    assert cli.main(["evaluate", str(run_dir), "--episodes", "4"]) == 0
    out = capsys.readouterr().out
    mean = json.loads((run_dir / "eval.json").read_text())["mean"]
    assert "seed 3 " in out and "seed 4 " in out and "deterministic policy" in out
    assert f"mean over 2 seeds: {mean:.2f}" in out

    run_dir, _ = one_seed
    assert cli.main(["evaluate", str(run_dir), "--episodes", "4", "--stochastic", "--seed", "5"]) == 0
    out = capsys.readouterr().out
    assert "seed 0 " in out and "stochastic policy" in out and "mean over 1 seed: " in out


def _expect_usage_error(argv, message, capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(argv)
    assert exc.value.code == 2
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    last = captured.err.strip().splitlines()[-1]
    assert "error: " in last and message in last, captured.err


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--clip-eps", "1.5"], "PPO(clip_eps) must be in (0, 1), got 1.5"),
        (["--num-minibatches", "3"], "PPO(num_minibatches=3) must divide num_envs * rollout_length = 512"),
        (["--env", "CartPole-v9"], "unknown environment 'CartPole-v9'; did you mean one of ['CartPole-v1'"),
        (["--total-steps", "10"], "--total-steps 10 must cover at least one iteration of PPO (512 env steps)"),
        (["--anneal-lr", "maybe"], "expected true or false, got 'maybe'"),
        (["--hidden-sizes", "64,x"], "expected comma-separated values like 64,64"),
        (["--hidden-sizes", ""], "PPO(hidden_sizes) must be a non-empty tuple of positive ints"),
        (["--seeds", "0"], "expected a positive integer, got '0'"),
        (["--learning-rate", "fast"], "unknown learning rate 'fast'; expected a number, constant:LR"),
        (["--no-such-flag", "1"], "unrecognized arguments: --no-such-flag 1"),
        (["a2c"], "invalid choice: 'a2c'"),
        (["--eval-every", "0"], "argument --eval-every: expected a positive integer, got '0'"),
        (["--eval-every", "100"], "--eval-every 100 must be between one iteration of PPO (512 env steps) and --total-steps"),
        (["--eval-every", "1024", "--total-steps", "512"], "--eval-every 1024 must be between one iteration of PPO (512 env steps) and --total-steps 512"),
    ],
)
def test_train_bad_arguments(argv, message, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    run_dir = tmp_path / "run"
    _expect_usage_error(["train", *argv, "--run-dir", str(run_dir)], message, capsys)
    assert not run_dir.exists() and not (tmp_path / "runs").exists()


def test_train_refuses_a_used_run_dir(tmp_path, capsys):
    run_dir = tmp_path / "used"  # a run directory with a run in it (no training needed to refuse it)
    run_dir.mkdir()
    (run_dir / "config.json").write_text("{}")
    _expect_usage_error(["train", "--run-dir", str(run_dir)], "already exists and is not an empty directory", capsys)


def _break_config(config):
    config["agent_config"]["hidden_sizes"] = [32]


def _break_seeds(config):
    config["seeds"] = 2


def _unknown_agent(config):
    config["agent"] = "a2c"


def _unknown_field(config):
    config["agent_config"]["no_such_field"] = 1


@pytest.mark.slow
@pytest.mark.parametrize(
    "damage, message",
    [
        ("missing", "does not exist"),
        ("empty", "is not an eqxrl run directory: it has no config.json"),
        ("bad json", "config.json is not valid JSON"),
        ("no state", "has no state.eqx"),
        ("truncated state", "state.eqx is damaged: it holds"),
        (_break_config, "state.eqx does not match PPO with 1 seed(s)"),
        (_break_seeds, "state.eqx does not match PPO with 2 seed(s)"),
        (_unknown_agent, f"unknown agent 'a2c'; known agents: {sorted(runs.AGENTS)}"),
        (_unknown_field, "PPO has no field(s) ['no_such_field']"),
    ],
)
def test_evaluate_bad_run_dir(one_seed, damage, message, tmp_path, capsys):
    source, _ = one_seed
    run_dir = tmp_path / "run"
    if damage == "empty":
        run_dir.mkdir()
    elif damage != "missing":
        shutil.copytree(source, run_dir)
        config_path = run_dir / "config.json"
        if damage == "bad json":
            config_path.write_text("{not json")
        elif damage == "no state":
            (run_dir / "state.eqx").unlink()
        elif damage == "truncated state":
            data = (run_dir / "state.eqx").read_bytes()
            (run_dir / "state.eqx").write_bytes(data[: len(data) // 2])
        else:
            config = json.loads(config_path.read_text())
            damage(config)
            config_path.write_text(json.dumps(config))
    with pytest.raises(ValueError, match="."):
        runs.load_run(run_dir)
    _expect_usage_error(["evaluate", str(run_dir)], message, capsys)


def test_flags_are_generated_from_the_dataclass():
    flags = {f.name: f for f in cli.agent_flags(PPO)}
    assert set(flags) == set(PPO.keywords()) - {"vector_env"}  # (its fields and init-only keywords; a batched env has no flag)
    assert {"learning_rate", "anneal_lr"} <= set(flags) - {f.name for f in dataclasses.fields(PPO)}  # (keywords that build the optimizer)
    # an agent composed of a PPO takes PPO's flags as its own (its keywords)
    ippo = [f.name for f in cli.agent_flags(eqxrl.agents.IPPO)]
    assert ippo == [*(n for n in flags), "share_parameters", "agent_ids"]
    parse = cli.build_parser().parse_args
    args = parse(
        ["train", "ppo", "--target-kl", "inf", "--hidden-sizes", "64,32", "--anneal-lr", "False",
         "--normalize-observations", "yes", "--total-steps", "5e5", "--num-envs", "8", "--grad-clip", "none"]
    )  # fmt: skip
    assert args.target_kl == math.inf and args.hidden_sizes == (64, 32) and args.num_envs == 8
    assert args.anneal_lr is False and args.normalize_observations is True
    assert args.total_steps == 500_000 and args.grad_clip == "none"
    # Flags not given do not reach the agent: its own defaults apply.
    assert not hasattr(args, "learning_rate")
    defaults = parse(["train", "ppo"])
    # No --total-steps: None here; the command trains the agent's default_budget() (test_default_budget).
    assert (defaults.env, defaults.total_steps, defaults.seeds, defaults.seed) == ("CartPole-v1", None, 1, 0)
    assert cli.with_default_agent(["train"]) == ["train", "ppo"]
    assert cli.with_default_agent(["train", "--seeds", "2"]) == ["train", "ppo", "--seeds", "2"]


@pytest.mark.slow
def test_console_script(one_seed, tmp_path):
    (entry_point,) = importlib.metadata.entry_points(group="console_scripts", name="eqxrl")
    assert entry_point.value == "eqxrl.cli:main"
    # No --run-dir: the default runs/<agent>-<env>-<timestamp> under the working directory. (The
    # flags of the one_seed run: the same programs, which the subprocess reads from the test run's
    # compilation cache instead of compiling them again.)
    result = subprocess.run(
        [sys.executable, "-m", "eqxrl", "train", *TINY, *ONE_SEED_FLAGS],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "env steps/s" in result.stdout and "mean over 1 seed" in result.stdout
    (run_dir,) = (tmp_path / "runs").iterdir()
    assert run_dir.name.startswith("ppo-CartPole-v1-")
    assert json.loads((run_dir / "config.json").read_text())["agent_config"]["hidden_sizes"] == [16]
    # The progress bar went to stderr.
    assert "PPO CartPole-v1" in result.stderr


OFF_POLICY_TINY = [
    "--total-steps", "256", "--hidden-sizes", "8", "--learning-starts", "64", "--batch-size", "16",
    "--buffer-size", "512", "--eval-episodes", "2", "--quiet",
]  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize(
    "name, env",
    [("dqn", "CartPole-v1"), ("sac", "Pendulum-v1")]
    + [pytest.param(*p, marks=pytest.mark.exhaustive) for p in [("sac", "CartPole-v1"), ("td3", None), ("ddpg", None)]],  # (tests/tiers.py)
)
def test_off_policy_agents_train_and_reload(name, env, tmp_path):
    run_dir = tmp_path / name
    env_flags = ["--env", env] if env else []  # td3 and ddpg: their default env, Pendulum-v1
    code, out = _main(["train", name, "--run-dir", str(run_dir), *env_flags, *OFF_POLICY_TINY])
    assert code == 0
    config = json.loads((run_dir / "config.json").read_text())
    assert config["agent"] == name and config["env"] == (env or "Pendulum-v1")
    assert config["agent_config"]["loop"]["learning_starts"] == 64
    agent, state, _ = runs.load_run(run_dir)
    assert type(agent).__name__ == name.upper()
    returns = eqxrl.evaluate(agent, state, jax.random.key(0), num_episodes=2)
    assert returns.shape == (2,) and np.all(np.isfinite(returns))


def test_discrete_agent_on_continuous_env_exits_2(capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(["train", "dqn", "--env", "Pendulum-v1"])
    assert exc.value.code == 2
    assert "DQN needs a Discrete action space" in capsys.readouterr().err


# ----------------------------------------------------------------------- eqxrl pbt
# The population of tests/runs/test_faults.py's PBT tests (with the default space, the same programs,
# which a worker that ran those reads from the test run's compilation cache).
PBT_TINY = ["--population", "2", "--ready", "64", "--total-steps", "192", "--eval-episodes", "1", "--num-envs", "2",
            "--rollout-length", "16", "--num-epochs", "1", "--num-minibatches", "1", "--hidden-sizes", "8"]  # fmt: skip


@pytest.mark.slow
def test_pbt_command_writes_a_run_directory_and_resumes(tmp_path, monkeypatch):
    run_dir = tmp_path / "pbt"
    code, out = _main(["pbt", "ppo", "--run-dir", str(run_dir), "--quiet", *PBT_TINY,
                       "--tune", "learning_rate=log:1e-4:1e-2", "--tune", "ent_coef=uniform:0:0.02",
                       "--exploit", "truncation:1:1"])  # fmt: skip
    assert code == 0
    assert "PBT PPO on CartPole-v1: 2 members x 192 env steps, 3 generations" in out
    assert "learning_rate" in out and "ent_coef" in out
    for name in ("pbt.json", "history.csv", "history.png", "population/3/meta/metadata"):
        assert (run_dir / name).is_file()
    config = json.loads((run_dir / "pbt.json").read_text())
    assert config["space"]["learning_rate"] == {"type": "LogUniform", "low": 1e-4, "high": 1e-2, "factors": [0.8, 1.2]}
    assert config["exploit"] == {"type": "Truncation", "num_replaced": 1, "num_parents": 1}
    history = eqxrl.pbt.read_history_csv(run_dir / "history.csv")
    assert history.fitness.shape == (3, 2)
    # A finished run resumes to the same history (nothing left to do).
    code, out = _main(["pbt", "--resume", str(run_dir)])
    assert code == 0 and "3 generations" in out
    np.testing.assert_array_equal(eqxrl.pbt.read_history_csv(run_dir / "history.csv").fitness, history.fitness)


@pytest.mark.slow
def test_pbt_default_space_tunes_learning_rates(tmp_path):
    code, out = _main(["pbt", "ppo", "--run-dir", str(tmp_path / "d"), "--quiet", *PBT_TINY])
    assert code == 0
    space = json.loads((tmp_path / "d" / "pbt.json").read_text())["space"]
    assert list(space) == ["learning_rate"]
    assert space["learning_rate"]["low"] == pytest.approx(2.5e-5) and space["learning_rate"]["high"] == pytest.approx(2.5e-3)


@pytest.mark.parametrize(
    "argv, message",
    [
        (["pbt"], r"give an AGENT \(ppo, .*\) or --resume RUN_DIR"),
        (["pbt", "ppo", "--tune", "lr"], r"argument --tune: expected NAME=SPEC like learning_rate=log:1e-4:1e-2, got 'lr'"),
        (["pbt", "ppo", "--tune", "learning_rate=beta:0:1"], r"unknown domain 'beta'"),
        (["pbt", "ppo", "--tune", "learning_rate=log:1:0.1"], r"LogUniform needs low < high, got low=1.0, high=0.1"),
        (["pbt", "ppo", "--tune", "lr=log:1e-4:1e-2"], r"'lr', which is not a hyperparameter leaf of PPO; tunable names"),
        (["pbt", "ppo", "--exploit", "truncation:3:3", "--population", "4"], r"num_replaced \+ num_parents must be <= the population size 4, got 6"),
        (["pbt", "ppo", "--exploit", "best"], r"expected truncation:K:M or tournament\[:MARGIN\], got 'best'"),
        (["pbt", "ppo", "--ready", "0"], r"argument --ready: expected a positive integer, got '0'"),
        (["pbt", "ppo", "--ready", "1000", "--total-steps", "500"], r"must cover at least one generation"),
        (["pbt", "--resume", "/nonexistent/run"], r"is not a PBT run directory"),
    ],
)
def test_pbt_bad_arguments(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and err[0].startswith("usage:")
    assert __import__("re").search(message, err[1]), err[1]


@pytest.mark.slow
def test_train_eval_every_fills_eval_return_and_is_kept_by_config(tmp_path):
    run_dir = tmp_path / "evals"
    code, out = _main(["train", "--run-dir", str(run_dir), "--quiet", *TINY, "--eval-every", "256"])
    assert code == 0, out
    config = json.loads((run_dir / "config.json").read_text())
    assert config["eval_every"] == 256
    metrics = runs.load_metrics(run_dir)
    assert list(metrics)[:4] == ["iteration", "env_steps", "episode_return", "eval_return"]
    assert list(np.nonzero(np.isfinite(metrics["eval_return"]))[0]) == [1, 3, 5, 7]  # every 2 iterations of 128 steps
    # --config repeats the run with its evaluations, bit for bit.
    again = tmp_path / "again"
    code, _ = _main(["train", "--config", str(run_dir / "config.json"), "--run-dir", str(again), "--quiet", "--eval-episodes", "4"])
    assert code == 0
    assert json.loads((again / "config.json").read_text())["eval_every"] == 256
    np.testing.assert_array_equal(runs.load_metrics(again)["eval_return"], metrics["eval_return"])


@pytest.mark.slow  # (4 s: a CLI training run)
def test_train_without_total_steps_runs_the_agents_default_budget(tmp_path, monkeypatch):
    """`eqxrl train AGENT` with no --total-steps trains `agent.default_budget()` env steps: the
    class's `default_total_steps`, or discrete SAC's own."""
    from eqxrl.agents import DQN, MPO, PPO, SAC, TD3

    assert (PPO.default_total_steps, DQN.default_total_steps, TD3.default_total_steps, MPO.default_total_steps) == (
        500_000, 500_000, 50_000, 100_000
    )
    assert SAC("Pendulum-v1").default_budget() == 50_000 and SAC("CartPole-v1").default_budget() == 100_000
    monkeypatch.setattr(PPO, "default_total_steps", 64)
    run = tmp_path / "run"
    assert cli.main(["train", "ppo", "--num-envs", "2", "--rollout-length", "8", "--num-minibatches", "2",
                     "--run-dir", str(run), "--quiet", "--eval-episodes", "1"]) == 0  # fmt: skip
    config = json.loads((run / "config.json").read_text())
    assert config["total_steps"] == 64
    code, out, _ = main_captured(["train", "sac", "--help"])
    assert code == 0 and "default: the agent's budget, 50,000 for SAC, at which its defaults learn Pendulum-v1" in " ".join(out.split())
