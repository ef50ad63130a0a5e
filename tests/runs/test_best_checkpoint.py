"""What "best" means for a run's kept checkpoint (`train_run(best=...)`, `eqxrl train --best
METRIC`, jaxagents' `best_fn`): a metric name or a function of the logged row, recorded in
config.json, used by the checkpoint writer and by `load_run(checkpoint="best")`."""

import json

import numpy as np
import pytest

from eqxrl import runs
from eqxrl.agents import PPO
from cli_calls import main_output, usage_error
from typecheck import no_runtime_typecheck

STEPS = 32  # env steps per iteration of TINY
TINY = dict(num_envs=2, rollout_length=16, num_epochs=1, num_minibatches=1, hidden_sizes=(8,))


def _best_step(run_dir) -> int:
    _, state, _ = runs.load_run(run_dir, checkpoint="best")
    return int(state.env_steps)


@pytest.mark.slow  # (over 2 s in the fast tier: tests/tiers.py)
def test_the_best_by_a_chosen_metric_is_kept_recorded_and_loaded(tmp_path):
    # 12 iterations in chunks of 1: every iteration's row can score a checkpoint, every 3rd is evaluated.
    run_dir = tmp_path / "cli"
    code, out = main_output([
        "train", "ppo", "--num-envs", "2", "--rollout-length", "16", "--num-epochs", "1", "--num-minibatches", "1",
        "--hidden-sizes", "8", "--total-steps", str(12 * STEPS), "--eval-every", str(3 * STEPS), "--eval-episodes", "2",
        "--checkpoint-every", str(12 * STEPS), "--keep-checkpoints", "1", "--best=-value_loss", "--run-dir", str(run_dir), "--quiet",
    ])  # fmt: skip
    assert code == 0
    config = runs.load_config(run_dir)
    metrics = runs.load_metrics(run_dir)
    assert config["best"] == "-value_loss"
    # The lowest value loss of the run is the kept best; it is not the best evaluation.
    lowest = int(metrics["env_steps"][np.argmin(metrics["value_loss"])])
    by_eval = int(metrics["env_steps"][np.nanargmax(metrics["eval_return"])])
    assert lowest != by_eval
    assert _best_step(run_dir) == lowest
    kept = runs.checkpoint_steps(run_dir)
    assert len(kept) <= 2 and kept[-1]["iteration"] == 12 and lowest in [c["step"] for c in kept]
    assert max(kept, key=lambda c: c["best"])["best"] == pytest.approx(-float(np.min(metrics["value_loss"])))
    # The same run's eval.json statistics against NumPy on its own returns (eqxrl.runs.summarize_returns).
    evaluation = runs.load_evaluation(run_dir)
    returns = np.asarray(evaluation["returns"], np.float64)
    assert evaluation["median"] == np.median(returns) and evaluation["std"] == pytest.approx(np.std(returns))
    assert (evaluation["min"], evaluation["max"], evaluation["nan_count"]) == (returns.min(), returns.max(), 0)
    assert "all 2 episodes: median" in out

    # A function of the logged row, in Python: the same choice; config.json holds only its name.
    def lowest_value_loss(row: dict[str, float]) -> float:
        return -row["value_loss"]

    agent = PPO("CartPole-v1", **TINY)
    again = tmp_path / "python"
    runs.train_run(again, agent, total_steps=12 * STEPS, eval_every=3 * STEPS, eval_episodes=2, checkpoint_every=12 * STEPS,
                   keep_checkpoints=1, progress=False, best=lowest_value_loss)  # fmt: skip
    assert _best_step(again) == lowest
    record = runs.load_config(again)["best"]
    assert record == {"function": f"{__name__}.test_the_best_by_a_chosen_metric_is_kept_recorded_and_loaded.<locals>.lowest_value_loss"}
    # Resuming needs the function again (a config never runs code); a metric-named run keeps its own.
    with pytest.raises(ValueError) as e:
        runs.resume_run(again, total_steps=24 * STEPS, progress=False)
    assert str(e.value) == (
        f"resume_run(best): the run kept its best checkpoint by a function ({record['function']}), which config.json "
        "cannot hold: give it again, eqxrl.runs.resume_run(run_dir, best=that_function)"
    )
    with no_runtime_typecheck(), pytest.raises(ValueError) as e:
        runs.resume_run(run_dir, total_steps=24 * STEPS, progress=False, best="episode_return")
    assert str(e.value) == "resume_run(best) must be the run's own, '-value_loss' (its config.json), or None, got 'episode_return'"


@pytest.mark.slow  # (over 2 s in the fast tier: tests/tiers.py)
def test_bad_best_metrics_are_refused_before_anything_is_written(tmp_path, capsys):
    agent = PPO("CartPole-v1", **TINY)
    with no_runtime_typecheck(), pytest.raises(ValueError) as e:
        runs.train_run(tmp_path / "r", agent, total_steps=4 * STEPS, progress=False, best="eval_retrun")
    names = runs.metric_names(agent)
    assert "value_loss" in names and "episode_return" in names and "eval_return" not in names
    assert str(e.value) == f"train_run(best) must name a metric of the run, 'eval_return' (with eval_every) or one of {names}, got 'eval_retrun'"
    assert list((tmp_path / "r").iterdir()) == []  # (the lock's directory, nothing of a run)
    for bad in (3, "", "-", "--loss"):
        with no_runtime_typecheck(), pytest.raises(ValueError) as e:
            runs.check_best(bad, agent, evaluating=False)
        assert str(e.value) == (
            "train_run(best) must be a metric name of the run (e.g. 'eval_return', or '-value_loss' for the lowest) or a "
            f"function of its metrics, got {bad!r}"
        )
    line = usage_error(["train", "ppo", "--best", "loss_of_value", "--run-dir", str(tmp_path / "c")], capsys)
    assert line.startswith("eqxrl train ppo: error: --best must name a metric of the run, 'eval_return' (with eval_every) or one of [")
    assert not (tmp_path / "c").exists()
    assert usage_error(["train", "--resume", str(tmp_path), "--best", "loss"], capsys).endswith(
        "--resume RUN_DIR continues a run as it was configured: give no --config, --preset, --best or agent fields"
    )


def test_a_config_records_the_best_as_a_name_or_a_function_name_only(tmp_path):
    config = {"best": {"function": "os.system"}}
    # Reading a recorded function runs nothing: a resume must be handed the function itself.
    with pytest.raises(ValueError, match=r"by a function \(os.system\), which config.json cannot hold"):
        runs.best_of_config(config, None)
    fn = lambda row: row["episode_return"]  # noqa: E731
    assert runs.best_of_config(config, fn) is fn and runs.best_of_config({}, None) == "eval_return"
    with pytest.raises(ValueError, match=r"'best' must be a metric name or an object"):
        runs.check_config({"agent": "ppo", "env": "CartPole-v1", "agent_config": {}, "total_steps": 1, "seed": 0, "seeds": 1, "best": 3}, "c.json")
    json.dumps(config)  # (plain JSON)
