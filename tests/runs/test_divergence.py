"""A run that diverges without `--nan-guard` keeps what it did: it stops at the chunk
where the divergence appears, writes its files in forms that read back, marks its
config `diverged` with the last checkpoint of finite parameters, which `evaluate`
reads; `--resume` refuses and says how to go on."""

import csv
import json
import math
import re

import jax.numpy as jnp
import numpy as np
import pytest

import eqxrl
from eqxrl.core import replace_paths
from eqxrl.loop import Checkpoint, divergence
from eqxrl.store import write_json
from cli_calls import main_captured as _main

# SAC with learning rates of 1e3 diverges within a few updates after learning starts
# (iteration 501): the checkpoints at 200 (and 400) env steps hold finite parameters.
DIVERGES = [
    "train", "sac", "--env", "Pendulum-v1", "--total-steps", "2000", "--learning-starts", "500",
    "--hidden-sizes", "32,32", "--batch-size", "32", "--actor-learning-rate", "1e3", "--critic-learning-rate", "1e3",
    "--checkpoint-every", "200", "--eval-episodes", "2", "--quiet",
]  # fmt: skip


def _strict_json(path):
    """JSON as any strict reader takes it: a NaN or Infinity literal is an error."""

    def refuse(name):
        raise ValueError(f"{path} holds the non-JSON literal {name}")

    return json.loads(path.read_text(), parse_constant=refuse)


@pytest.fixture(scope="module")
def diverged(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("divergence") / "sac"
    code, out, err = _main([*DIVERGES, "--run-dir", str(run_dir)])
    return run_dir, code, out, err


@pytest.mark.slow
def test_a_diverging_run_stops_with_one_line_and_keeps_its_files(diverged):
    run_dir, code, _, err = diverged
    assert code == 1
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    match = re.search(r"training diverged: non-finite values after iteration (\d+) of 2000 \(env step ([\d,]+) per member\): metric (\w+)", lines[0])
    assert match is not None, lines[0]
    iteration = int(match.group(1))
    assert 500 < iteration < 600  # right after learning starts, not at the end of the run
    config = _strict_json(run_dir / "config.json")
    assert config["status"] == "diverged"
    record = config["diverged"]
    assert record["iteration"] == iteration and f"metric {match.group(3)} (NaN)" in record["quantities"]
    steps = [c["step"] for c in eqxrl.runs.checkpoint_steps(run_dir)]
    assert record["last_finite_checkpoint"] in steps and record["last_finite_checkpoint"] < iteration
    assert f"last checkpoint with finite parameters is env step {record['last_finite_checkpoint']:,}" in lines[0]
    # Stopped at the chunk boundary where it appeared or the next one (the state's check is
    # read while the next chunk runs): no checkpoint of the diverged state, and the metrics
    # of every iteration done (the chunk is 40 iterations).
    chunk = config["chunk_iterations"]
    boundary = math.ceil(iteration / chunk) * chunk
    assert record["stopped_at"] in (boundary, boundary + chunk) and max(steps) < iteration
    with open(run_dir / "metrics.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == record["stopped_at"]
    assert rows[iteration - 1][match.group(3)] == "nan" and math.isnan(float(rows[-1]["critic_loss"]))
    metrics = eqxrl.runs.load_metrics(run_dir)
    assert metrics["critic_loss"].shape == (record["stopped_at"],) and np.isfinite(metrics["critic_loss"][500])
    assert (run_dir / "learning_curve.png").stat().st_size > 0
    # No final state: it is not finite, and nothing evaluates it.
    assert not (run_dir / "state.eqx").exists() and not (run_dir / "eval.json").exists()
    with pytest.raises(ValueError, match=rf"diverged after iteration {iteration} and has no final state; .*checkpoint={record['last_finite_checkpoint']}"):
        eqxrl.runs.load_run(run_dir)


@pytest.mark.slow
def test_evaluate_reads_the_last_finite_checkpoint_and_says_so(diverged):
    run_dir = diverged[0]
    step = eqxrl.runs.load_config(run_dir)["diverged"]["last_finite_checkpoint"]
    code, out, err = _main(["evaluate", str(run_dir), "--episodes", "2"])
    assert code == 0, err
    first = out.splitlines()[0]
    assert first == f"{run_dir} diverged: evaluating its last checkpoint with finite parameters (env step {step:,})"
    mean = float(re.search(r"mean over 1 seed: (\S+)", out).group(1))
    assert math.isfinite(mean)
    # The same numbers as asking for that checkpoint by its step.
    code, again, _ = _main(["evaluate", str(run_dir), "--episodes", "2", "--checkpoint", str(step)])
    assert code == 0 and f"mean over 1 seed: {out.split('mean over 1 seed: ')[1]}" in again


@pytest.mark.slow
def test_resume_refuses_and_the_way_it_names_works(diverged):
    run_dir = diverged[0]
    config = eqxrl.runs.load_config(run_dir)
    step = config["diverged"]["last_finite_checkpoint"]
    code, _, err = _main(["train", "--resume", str(run_dir), "--quiet"])
    assert code == 2
    line = err.strip().splitlines()[-1]
    assert f"diverged after iteration {config['diverged']['iteration']}" in line
    assert "resuming it would diverge again" in line and f"which={step})" in line and "eqxrl train --config FILE" in line
    with pytest.raises(ValueError, match="resuming it would diverge again"):
        eqxrl.runs.resume_run(run_dir, total_steps=4000)
    assert eqxrl.runs.load_config(run_dir)["status"] == "diverged"  # refused before anything was written

    # The Python route the message gives: the checkpoint, then other hyperparameters.
    agent = eqxrl.runs.load_agent(run_dir)
    checkpoint = eqxrl.runs.load_checkpoint(run_dir, agent, which=step)
    changed = replace_paths(agent, {"actor_learning_rate": 3e-4, "critic_learning_rate": 3e-4})
    state, metrics = eqxrl.train(changed, eqxrl.runs.seed_keys(config["seed"], config["seeds"]), 1000, resume=checkpoint, progress=False)
    assert eqxrl.loop.state_is_finite(state) and np.isfinite(metrics["critic_loss"][600:]).all()


def test_write_json_writes_non_finite_numbers_as_null(tmp_path):
    path = tmp_path / "x.json"
    write_json(path, {"mean": float("nan"), "returns": [[1.0, float("inf")]], "np": np.float32("-inf"), "ok": np.int64(3)})
    assert _strict_json(path) == {"mean": None, "returns": [[1.0, None]], "np": None, "ok": 3}


def _checkpoint(state, metrics, iteration):
    return Checkpoint(state, iteration, 12, 3, {k: np.asarray(v) for k, v in metrics.items()})


def test_divergence_is_a_non_finite_state_or_an_inf_metric():
    nan = float("nan")
    finite = {"w": jnp.ones(3)}
    broken = {"w": jnp.array([1.0, nan, 1.0])}
    steps = np.arange(1, 7)
    # Losses NaN before learning starts (rows 0-1), finite, then NaN from row 4 on.
    loss = np.array([nan, nan, 1.0, 2.0, nan, nan], np.float32)
    returns = np.full(6, nan, np.float32)  # no episode finished: NaN by design, never divergence
    metrics = {"env_steps": steps, "episode_return": returns, "loss": loss}
    # A finite state with NaN losses is not divergence (a warm-up, a skipped actor update).
    assert divergence(_checkpoint(finite, metrics, 6), 3) is None
    assert divergence(_checkpoint(finite, {**metrics, "loss": np.full(6, nan, np.float32)}, 6), 0) is None
    # A NaN state: the iteration is where the chunk's trailing run of non-finite metrics starts.
    iteration, quantities = divergence(_checkpoint(broken, metrics, 6), 3)
    assert iteration == 5 and quantities == ["['w']", "metric loss (NaN)"]
    # ... the chunk's last when no metric shows it.
    assert divergence(_checkpoint(broken, {**metrics, "loss": np.ones(6, np.float32)}, 6), 3)[0] == 6
    # An Inf metric with a finite state (the guard's own rule), at the first Inf.
    inf = np.array([1.0, 1.0, 1.0, 1.0, math.inf, 1.0], np.float32)
    assert divergence(_checkpoint(finite, {**metrics, "loss": inf}, 6), 3) == (5, ["metric loss (Inf)"])
    # Only the chunk's own rows count: an Inf before `since` was the previous chunk's.
    assert divergence(_checkpoint(finite, {**metrics, "loss": inf}, 6), 5) is None
    # A boundary before the checkpoint's (its state's flag read a chunk later): rows [since, upto).
    assert divergence(_checkpoint(finite, metrics, 6), 0, 3, finite=False) == (3, [])  # (the warm-up NaNs end at 2)
    assert divergence(_checkpoint(broken, metrics, 6), 0, 2, finite=False) == (1, ["['w']", "metric loss (NaN)"])
    assert divergence(_checkpoint(finite, metrics, 6), 0, 3, finite=True) is None
    # A batch of seeds: metrics (seeds, iterations), the member named.
    batched = {"env_steps": np.stack([steps, steps]), "episode_return": np.stack([returns, returns]),
               "loss": np.stack([np.ones(6, np.float32), loss])}  # fmt: skip
    iteration, quantities = divergence(_checkpoint({"w": jnp.array([[1.0], [nan]])}, batched, 6), 3)
    assert iteration == 5 and quantities == ["['w'] (member 1)", "metric loss (NaN)"]
