"""Fault injection: what a user's run survives, and the one-line errors for what it cannot.

kill -9 of a real `eqxrl train` process (at a random moment and in the middle of a
checkpoint write) then `--resume` equals the uninterrupted run; a run killed before
its first checkpoint is resumed from the start or its directory reused; two runs
started at once get two directories; damaged checkpoints (truncated, emptied,
bit-flipped), a read-only directory and a full disk (simulated: the tests run as
root on a disk that is never full) give exit 2, one line naming the file and what
to do, and keep every earlier checkpoint; continuing a finished run with a larger
budget equals one run of the whole budget; `eqxrl.save` / `eqxrl.load`.
"""

import datetime
import importlib
import json
import os
import pathlib
import random
import re
import shutil
import signal
import subprocess
import sys
import threading
import time

import equinox as eqx
import jax
import numpy as np
import pytest

import eqxrl
from eqxrl import cli, runs
from eqxrl.agents import PPO
from cli_calls import main_output as _main, usage_error as _error

checkpoint_module = importlib.import_module("eqxrl.runs._checkpoint")  # (private: faults are injected where the code looks names up)
train_run_module = importlib.import_module("eqxrl.runs._train_run")  # (private: faults are injected where the code looks names up)
common_module = importlib.import_module("eqxrl.cli._common")  # (private: faults are injected where the code looks names up)
pbt_checkpoint_module = importlib.import_module("eqxrl.pbt._checkpoint")  # (private: faults are injected where the code looks names up)

TINY = ["--num-envs", "2", "--rollout-length", "16", "--num-epochs", "1", "--num-minibatches", "1", "--hidden-sizes", "8",
        "--eval-episodes", "2", "--quiet"]  # fmt: skip
STEPS = 32  # env steps per iteration of TINY


def _leaves(tree):
    return [np.asarray(x) for x in jax.tree.leaves(eqxrl.core.keys_as_data(eqx.filter(tree, eqx.is_array)))]


def _assert_same(a, b):
    for x, y in zip(_leaves(a), _leaves(b), strict=True):
        np.testing.assert_array_equal(x, y)


def _same_run(a: pathlib.Path, b: pathlib.Path) -> None:
    assert (a / "metrics.csv").read_text() == (b / "metrics.csv").read_text()
    _assert_same(runs.load_run(a)[1], runs.load_run(b)[1])
    assert json.loads((a / "eval.json").read_text())["mean"] == json.loads((b / "eval.json").read_text())["mean"]


class _Crash(Exception):
    pass


def _crash_at_checkpoint(monkeypatch, after: int, write: bool = True) -> None:
    """`train_run` dies at its `after`-th checkpoint: once it is on disk (`write`), or before it is written."""
    calls = []

    class Crashing(runs.CheckpointWriter):
        def submit(self, checkpoint, *, wait=False):
            calls.append(1)
            if len(calls) == after and not write:
                raise _Crash
            super().submit(checkpoint, wait=True)
            self.wait()
            if len(calls) == after:
                raise _Crash
            return True

    monkeypatch.setattr(train_run_module, "CheckpointWriter", Crashing)


# ----------------------------------------------------------------------- kill -9 of a real process
def _start(run_dir: pathlib.Path, total_steps: int) -> subprocess.Popen:
    argv = [sys.executable, "-m", "eqxrl", "train", "ppo", "--run-dir", str(run_dir), "--total-steps", str(total_steps),
            "--checkpoint-every", str(STEPS), "--anneal-lr", "false", *TINY]  # fmt: skip
    with open(run_dir.parent / f"{run_dir.name}.stderr", "wb") as err:  # (the child keeps its own handle)
        return subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=err, cwd=pathlib.Path(__file__).parents[2])


def _wait_for(condition, proc: subprocess.Popen, timeout: float = 300.0) -> bool:
    """Poll `condition` every 2 ms; **returns** False if the process ended first."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if condition():
            return True
        if proc.poll() is not None:
            return False
        time.sleep(0.002)
    raise AssertionError("timed out")


def _writing(run_dir: pathlib.Path) -> bool:
    directory = run_dir / "checkpoints"
    return directory.is_dir() and any(".orbax-checkpoint-tmp" in p.name for p in directory.iterdir())


@pytest.mark.slow
def test_kill_9_at_random_moments_and_during_writes_then_resume_equals_the_uninterrupted_run(tmp_path, capsys):
    total = 160 * STEPS
    assert _main(["train", "ppo", "--run-dir", str(tmp_path / "full"), "--total-steps", str(total),
                  "--checkpoint-every", str(STEPS), "--anneal-lr", "false", *TINY])[0] == 0  # fmt: skip
    rng = random.Random(7)
    kills = {"random": lambda d: bool(runs.checkpoint_steps(d)), "during a write": _writing}
    for name, ready in kills.items():
        run_dir = tmp_path / name.replace(" ", "-")
        proc = _start(run_dir, total)
        try:
            started = _wait_for(lambda: ready(run_dir), proc)
            if name == "random":
                time.sleep(rng.uniform(0.0, 0.5))
            assert started, (run_dir.parent / f"{run_dir.name}.stderr").read_text()[-2000:]
            os.kill(proc.pid, signal.SIGKILL)
        finally:
            proc.wait()
        assert proc.returncode == -signal.SIGKILL, f"{name}: the run ended before the kill"
        code, out = _main(["train", "--resume", str(run_dir), "--quiet"])
        assert code == 0, out
        _same_run(tmp_path / "full", run_dir)
        assert not any(".orbax-checkpoint-tmp" in p.name for p in (run_dir / "checkpoints").iterdir())


# ----------------------------------------------------------------------- a run killed before its first checkpoint
@pytest.mark.slow
def test_a_run_killed_before_its_first_checkpoint_resumes_from_the_start_or_is_reused(tmp_path, monkeypatch, capsys):
    argv = ["train", "ppo", "--total-steps", str(4 * STEPS), "--checkpoint-every", str(2 * STEPS), *TINY]
    for way in ("resume", "reuse"):
        run_dir = tmp_path / way
        _crash_at_checkpoint(monkeypatch, 1, write=False)
        with pytest.raises(_Crash):
            _main([*argv, "--run-dir", str(run_dir)])
        monkeypatch.undo()
        assert runs.load_config(run_dir)["status"] == "running" and not runs.checkpoint_steps(run_dir)
        code, out = _main(["train", "--resume", str(run_dir)] if way == "resume" else [*argv, "--run-dir", str(run_dir)])
        assert code == 0
        assert way == "resume" or f"reusing {run_dir}: it held only the config of a run stopped before its first checkpoint" in out
    # Both ran from the start, as an uninterrupted run does (one of them is that reference).
    _same_run(tmp_path / "resume", tmp_path / "reuse")


# ----------------------------------------------------------------------- concurrent starts
def test_two_runs_started_in_the_same_second_get_two_directories(tmp_path, monkeypatch):
    class Frozen(datetime.datetime):
        @classmethod
        def now(cls, tz=None):
            return datetime.datetime(2026, 1, 1, 12, 0, 0)

    monkeypatch.setattr(common_module.datetime, "datetime", Frozen)
    monkeypatch.chdir(tmp_path)
    parser = cli.build_parser()
    made, barrier = [], threading.Barrier(4)

    def start():
        barrier.wait()
        made.append(common_module.prepare_run_dir(parser, None, "ppo-CartPole-v1"))

    threads = [threading.Thread(target=start) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(made)) == 4 and all(p.is_dir() for p in made)
    assert sorted(p.name for p in made) == ["ppo-CartPole-v1-20260101-120000", *(f"ppo-CartPole-v1-20260101-120000-{i}" for i in (1, 2, 3))]


# ----------------------------------------------------------------------- damaged checkpoints
def _largest_file(directory: pathlib.Path) -> pathlib.Path:
    return max((p for p in directory.rglob("*") if p.is_file()), key=lambda p: p.stat().st_size)


def _flip_a_bit(path: pathlib.Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x10
    path.write_bytes(bytes(data))


DAMAGE = {
    "truncated": lambda p: p.write_bytes(p.read_bytes()[: p.stat().st_size // 2]),
    "emptied": lambda p: p.write_bytes(b""),
    "bit-flipped": _flip_a_bit,
}


@pytest.mark.slow
def test_a_damaged_checkpoint_is_one_line_and_the_one_before_it_is_kept(tmp_path, monkeypatch, capsys):
    argv = ["train", "ppo", "--total-steps", str(6 * STEPS), "--checkpoint-every", str(2 * STEPS), *TINY]
    assert _main([*argv, "--run-dir", str(tmp_path / "full")])[0] == 0
    run_dir = tmp_path / "r"
    _crash_at_checkpoint(monkeypatch, 2)
    with pytest.raises(_Crash):
        _main([*argv, "--run-dir", str(run_dir)])
    monkeypatch.undo()
    newest = run_dir / "checkpoints" / str(4 * STEPS)
    pristine = {p: p.read_bytes() for p in newest.rglob("*") if p.is_file()}
    for damage, target in [(d, "state") for d in DAMAGE] + [("emptied", "history"), ("bit-flipped", "meta")]:
        victim = _largest_file(newest / target)
        DAMAGE[damage](victim)
        message = _error(["train", "--resume", str(run_dir)], capsys)
        assert re.fullmatch(
            rf".*{newest} is damaged \(.*\): delete {newest} to resume from the checkpoint before it "
            r"\(`eqxrl train --resume RUN_DIR`\)", message
        ), (damage, target, message)  # fmt: skip
        assert (run_dir / "checkpoints" / str(2 * STEPS)).is_dir()  # the one before is kept
        for p, data in pristine.items():
            p.write_bytes(data)
    # Deleting the damaged one, as the message says, resumes from the one before.
    for damage in DAMAGE:
        DAMAGE[damage](_largest_file(newest / "state"))
    shutil.rmtree(newest)
    assert _main(["train", "--resume", str(run_dir), "--quiet"])[0] == 0
    _same_run(tmp_path / "full", run_dir)


# ----------------------------------------------------------------------- a read-only directory, a full disk
@pytest.mark.slow
def test_a_checkpoint_that_cannot_be_written_exits_2_and_keeps_the_earlier_ones(tmp_path, monkeypatch, capsys):
    real, calls = checkpoint_module._write, []
    failure = [None]

    def fails_when_told(manager, payload):
        calls.append(payload.step)
        if failure[0] is not None:
            (pathlib.Path(str(manager.directory)) / f"{payload.step}.orbax-checkpoint-tmp-9").mkdir()  # what orbax had written so far
            raise failure[0]
        real(manager, payload)

    monkeypatch.setattr(checkpoint_module, "_write", fails_when_told)
    run_dir = tmp_path / "r"
    argv = ["train", "ppo", "--run-dir", str(run_dir), "--total-steps", str(8 * STEPS), "--checkpoint-every", str(2 * STEPS), *TINY]
    # A full disk at the second checkpoint, then (resumed) a read-only directory at the next one.
    for errno, reason, fix, run in [
        (28, "No space left on device", "Free space on its disk", argv),
        (13, "Permission denied", "Fix the directory's permissions", ["train", "--resume", str(run_dir), "--quiet"]),
    ]:  # fmt: skip
        before = len(calls)
        failure[0] = None

        class FailSecond(runs.CheckpointWriter):  # the first write of the call succeeds, the second fails
            def submit(self, checkpoint, *, wait=False):
                if len(calls) == before + 1:
                    failure[0] = OSError(errno, reason)
                return super().submit(checkpoint, wait=True)

        monkeypatch.setattr(train_run_module, "CheckpointWriter", FailSecond)
        message = _error(run, capsys)
        kept = calls[before]
        assert message.endswith(
            f"error: could not write the checkpoint {run_dir / 'checkpoints' / str(calls[before + 1])}: {reason}; "
            f"the checkpoint of env step {kept:,} is intact. {fix}, then continue with `eqxrl train --resume RUN_DIR`"
        ), message
        assert runs.checkpoint_steps(run_dir)[-1]["step"] == kept  # the newest is the last written
        assert not any(".orbax-checkpoint-tmp" in p.name for p in (run_dir / "checkpoints").iterdir())
    monkeypatch.undo()
    assert _main(["train", "--resume", str(run_dir)])[0] == 0  # fixed: it goes on


def test_a_run_directory_that_cannot_be_written_at_all_exits_2(tmp_path, monkeypatch, capsys):
    def read_only(path, data):
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(train_run_module, "write_json", read_only)
    run_dir = tmp_path / "r"
    message = _error(["train", "ppo", "--run-dir", str(run_dir), "--total-steps", str(STEPS), *TINY], capsys)
    assert message == (
        f"eqxrl train ppo: error: could not write {run_dir / 'config.json'}: Permission denied; the files written "
        "before are intact: fix the directory's permissions, then run the command again"
    )


@pytest.mark.slow
def test_pbt_full_disk_and_a_damaged_population_are_one_line(tmp_path, monkeypatch, capsys):
    real, calls = pbt_checkpoint_module._save, []

    def full_at_the_second_checkpoint(manager, generation, args):
        calls.append(generation)
        if len(calls) == 2:
            raise OSError(28, "No space left on device")
        real(manager, generation, args)

    monkeypatch.setattr(pbt_checkpoint_module, "_save", full_at_the_second_checkpoint)
    run_dir = tmp_path / "p"
    argv = ["pbt", "ppo", "--run-dir", str(run_dir), "--population", "2", "--ready", "64", "--total-steps", "192",
            "--num-envs", "2", "--rollout-length", "16", "--num-epochs", "1", "--num-minibatches", "1",
            "--hidden-sizes", "8", "--eval-episodes", "1", "--quiet"]  # fmt: skip
    message = _error(argv, capsys)
    generations = run_dir / "population"
    assert message == (
        f"eqxrl pbt ppo: error: could not write the checkpoint {generations / '2'}: No space left on device; the checkpoint "
        f"of generation 1 is intact. Free space on its disk, then continue with `eqxrl pbt --resume {run_dir}`"
    )
    assert sorted(p.name for p in generations.iterdir()) == ["1"]  # nothing earlier lost, no temporary directory left
    monkeypatch.undo()
    newest = generations / "1"
    # (orbax's tree metadata, which a load reads and checks. Not the largest file, as before: since
    # PPO's new fields that is orbax's `_sharding` description, which a load does not read.)
    _flip_a_bit(newest / "state" / "_METADATA")
    message = _error(["pbt", "--resume", str(run_dir)], capsys)
    assert message.startswith(f"eqxrl pbt: error: {newest} is damaged (")
    assert message.endswith(f"): delete {newest} to resume from the generation before it (`eqxrl pbt --resume RUN_DIR`)")
    assert "\n" not in message


@pytest.mark.slow
def test_a_pbt_write_failing_in_orbaxs_thread_is_one_checkpoint_error(tmp_path, monkeypatch, capfd):
    # The failure happens in orbax's background write (its final rename), not in the call:
    # it arrives at the next save or at the end of the run, as one CheckpointError and no log.
    from eqxrl.pbt import PBT, LogUniform

    # The configuration `eqxrl pbt` builds in test_pbt_full_disk_and_a_damaged_population_are_one_line
    # (its default space): the same programs.
    agent = PPO("CartPole-v1", num_envs=2, rollout_length=16, num_epochs=1, num_minibatches=1, hidden_sizes=(8,))
    lr = float(np.asarray(agent.learning_rate))
    pbt = PBT(agent, {"learning_rate": LogUniform(lr / 10, lr * 10)}, population_size=2, ready=64, eval_episodes=1)
    real = os.rename

    def full(src, dst, *args, **kwargs):
        if "orbax-checkpoint-tmp" in str(src):
            raise OSError(28, "No space left on device", str(src))
        return real(src, dst, *args, **kwargs)

    monkeypatch.setattr(os, "rename", full)
    capfd.readouterr()
    with pytest.raises(runs.CheckpointError, match=r"could not write the checkpoint .*population.1: No space left on device; no earlier"):
        pbt.run(jax.random.key(0), 2 * 64, progress=False, run_dir=tmp_path)
    assert not list((tmp_path / "population").iterdir())  # no temporary directory left
    assert "orbax" not in capfd.readouterr().err


def test_a_pbt_config_missing_a_key_is_one_line(tmp_path, capsys):
    (tmp_path / "pbt.json").write_text(json.dumps({"agent": "ppo", "env": "CartPole-v1", "agent_config": {}}))
    message = _error(["pbt", "--resume", str(tmp_path)], capsys)
    assert message == (
        f"eqxrl pbt: error: {tmp_path / 'pbt.json'} is missing the key 'space': it was not written by `eqxrl pbt`, or was edited"
    )


# ----------------------------------------------------------------------- bad numbers: refused before training
@pytest.mark.parametrize(
    "flags, message",
    [
        (["--learning-rate", "inf"], r"PPO\(learning_rate\) must be a finite number > 0, got inf"),
        (["--total-steps", "1e13"], r"argument --total-steps: expected a positive integer of at most 2,147,483,647, got '1e13'"),
        (["--total-steps", "1e30"], r"argument --total-steps: expected a positive integer of at most 2,147,483,647, got '1e30'"),
        (["--activation", "foo"], r"PPO\(activation\) must be one of \['elu', .*'tanh'\] or a callable, got 'foo'"),
        (["--eval-episodes", "1e30"], r"argument --eval-episodes: expected a positive integer of at most 100,000, got '1e30'"),
        (["--keep-checkpoints", "0"], r"argument --keep-checkpoints: expected a positive integer, got '0'"),
    ],
)
def test_bad_numbers_are_refused_before_training(flags, message, tmp_path, capsys):
    reason = _error(["train", "ppo", "--run-dir", str(tmp_path / "r"), *flags], capsys)
    assert re.search(message, reason), reason
    assert not (tmp_path / "r").exists() or not any((tmp_path / "r").iterdir())


def test_python_api_bounds(getkey):
    agent = PPO("CartPole-v1", num_envs=2, rollout_length=16, num_minibatches=1, hidden_sizes=(8,))
    with pytest.raises(ValueError, match=r"train\(total_steps\) must be at most 2,147,483,647 \(env steps are counted in int32\)"):
        eqxrl.train(agent, getkey(), 10**13)
    with pytest.raises(ValueError, match=r"evaluate\(num_episodes\) must be at most 100,000 \(the episodes run in parallel\)"):
        eqxrl.evaluate(agent, agent.init(getkey()), getkey(), num_episodes=10**6)
    with pytest.raises(ValueError, match=r"train\(eval_episodes\) must be at most 100,000 \(the episodes run in parallel\), got 1,000,000"):
        eqxrl.train(agent, getkey(), 64, eval_every=32, eval_episodes=10**6)
    with pytest.raises(ValueError, match=r"PPO\(n\) must be a positive int, got 0"):
        eqxrl.loop.check_eval_episodes("PPO", "n", 0)
    assert eqxrl.loop.check_eval_episodes("evaluate", "num_episodes", 3) == 3
    assert eqxrl.loop.default_eval_steps(agent) == 500  # CartPole's time limit
    with pytest.raises(ValueError, match=r"DQN\(learning_rate\) must be a finite number > 0, got inf"):
        eqxrl.agents.DQN("CartPole-v1", learning_rate=float("inf"))


# ----------------------------------------------------------------------- continuing a run
@pytest.mark.slow
def test_n_steps_then_m_more_equal_one_run_of_n_plus_m(tmp_path, getkey, capsys):
    agent = PPO("CartPole-v1", num_envs=2, rollout_length=16, num_epochs=1, num_minibatches=1, hidden_sizes=(8,), anneal_lr=False)
    key = getkey()
    # Chunks of one iteration and TINY's eval_episodes, as the command line's runs below have: one
    # program for the test (eval_episodes is part of the compiled chunk, even with no evaluation).
    same = dict(progress=False, chunk_iterations=1, eval_episodes=2)
    whole = eqxrl.train(agent, key, 10 * STEPS, **same)
    checkpoints = []
    eqxrl.train(agent, key, 6 * STEPS, **same, callback=lambda c: checkpoints.append(c.copy()))
    assert checkpoints[-1].iteration == 6 and checkpoints[-1].num_iterations == 6
    state, metrics = eqxrl.train(agent, key, 10 * STEPS, **same, resume=checkpoints[-1])  # a finished run, continued
    _assert_same(whole[0], state)
    for k in whole[1]:
        np.testing.assert_array_equal(whole[1][k], metrics[k], err_msg=k)
    # The same from the command line: a finished run directory continued with --total-steps.
    argv = ["train", "ppo", "--anneal-lr", "false", "--checkpoint-every", str(4 * STEPS), *TINY]
    assert _main([*argv, "--run-dir", str(tmp_path / "whole"), "--total-steps", str(10 * STEPS)])[0] == 0
    assert _main([*argv, "--run-dir", str(tmp_path / "r"), "--total-steps", str(6 * STEPS)])[0] == 0
    message = _error(["train", "--resume", str(tmp_path / "r")], capsys)
    assert message.endswith(
        f"the run is already complete ({6 * STEPS:,} env steps); give a larger total_steps (`--total-steps N`) to continue it"
    )
    message = _error(["train", "--resume", str(tmp_path / "r"), "--total-steps", str(2 * STEPS)], capsys)
    assert f"resume_run(total_steps) must be an int of at least the run's {6 * STEPS:,}, got {2 * STEPS}" in message
    code, out = _main(["train", "--resume", str(tmp_path / "r"), "--total-steps", str(10 * STEPS), "--quiet"])
    assert code == 0 and f"continuing ppo on CartPole-v1 from {tmp_path / 'r'}" in out
    assert f"{10 * STEPS:,} env steps (10 iterations, {4 * STEPS:,} of them in this call)" in out
    _same_run(tmp_path / "whole", tmp_path / "r")
    config = runs.load_config(tmp_path / "r")
    assert config["total_steps"] == 10 * STEPS and config["continued_from"] == [6 * STEPS] and config["status"] == "complete"


@pytest.mark.slow
def test_a_continued_schedule_goes_on_from_the_new_progress(getkey):
    """The documented rule: the clock's length becomes the new total, so an annealed
    learning rate continues from `1 - iteration / new_total` (it rises again)."""
    agent = PPO("CartPole-v1", num_envs=2, rollout_length=16, num_epochs=1, num_minibatches=1, hidden_sizes=(8,))
    checkpoints = []
    eqxrl.train(agent, getkey(), 4 * STEPS, progress=False, callback=lambda c: checkpoints.append(c.copy()))
    _, metrics = eqxrl.train(agent, getkey(), 8 * STEPS, progress=False, resume=checkpoints[-1])
    lr = agent.learning_rate
    np.testing.assert_allclose(metrics["learning_rate"][:4], lr * (1 - np.arange(4) / 4), rtol=1e-6)
    np.testing.assert_allclose(metrics["learning_rate"][4:], lr * (1 - np.arange(4, 8) / 8), rtol=1e-6)


# ----------------------------------------------------------------------- save / load
def test_save_and_load_without_a_run_directory(tmp_path, getkey):
    agent = PPO("CartPole-v1", num_envs=2, rollout_length=16, num_epochs=1, num_minibatches=1, hidden_sizes=(8,))
    state = agent.init(getkey())  # any state of the agent (trained ones below, in the slow test)
    path = eqxrl.save(tmp_path / "ppo", agent, state)
    loaded_agent, loaded_state = eqxrl.load(path)
    assert loaded_agent == agent
    _assert_same(state, loaded_state)
    with pytest.raises(ValueError, match=r"save\(path\): '.*ppo' already exists; pass overwrite=True to replace it"):
        eqxrl.save(path, agent, state)
    eqxrl.save(path, agent, state, overwrite=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ppo"]  # no temporary directory left
    with pytest.raises(ValueError, match=r"save\(state\) does not match DQN \(OffPolicyState, one run\)"):
        eqxrl.save(tmp_path / "other", eqxrl.agents.DQN("CartPole-v1", hidden_sizes=(8,)), state)
    with pytest.raises(ValueError, match=r"load\(path\): '.*nowhere' is not an eqxrl save \(no agent.json\)"):
        eqxrl.load(tmp_path / "nowhere")
    _flip_a_bit(_largest_file(path / "state"))
    with pytest.raises(ValueError, match=r"state is damaged"):
        eqxrl.load(path)


@pytest.mark.slow
def test_save_and_load_trained_seeds_and_a_sweep(tmp_path, getkey):
    agent = PPO("CartPole-v1", num_envs=2, rollout_length=16, num_epochs=1, num_minibatches=1, hidden_sizes=(8,))
    state, _ = eqxrl.train(agent, jax.random.split(getkey(), 2), 2 * STEPS, progress=False)
    loaded_agent, loaded_state = eqxrl.load(eqxrl.save(tmp_path / "seeds", agent, state))
    _assert_same(state, loaded_state)
    np.testing.assert_array_equal(
        eqxrl.evaluate(agent, state, jax.random.key(1), 2), eqxrl.evaluate(loaded_agent, loaded_state, jax.random.key(1), 2)
    )
    # A stack and its state round-trip too; the env can be given for one `make` cannot build.
    sweep = eqxrl.sweep(agent, {"learning_rate": [1e-3, 3e-3]})
    states, _ = eqxrl.train(sweep, getkey(), STEPS, progress=False)
    loaded_sweep, loaded_states = eqxrl.load(eqxrl.save(tmp_path / "sweep", sweep, states), env=agent.env)
    assert isinstance(loaded_sweep, eqxrl.Stacked) and loaded_sweep.size == 2
    _assert_same(states, loaded_states)


# ----------------------------------------------------------------------- best and last
@pytest.mark.slow
def test_the_best_evaluated_checkpoint_is_kept_and_restored(tmp_path, capsys):
    agent = PPO("CartPole-v1", num_envs=2, rollout_length=16, num_epochs=1, num_minibatches=1, hidden_sizes=(8,))
    run_dir = tmp_path / "r"
    _, metrics, _, _ = runs.train_run(run_dir, agent, total_steps=12 * STEPS, eval_every=3 * STEPS, eval_episodes=2,
                                      checkpoint_every=12 * STEPS, keep_checkpoints=1, progress=False)  # fmt: skip
    evals = metrics["eval_return"]
    evaluated = np.nonzero(np.isfinite(evals))[0] + 1  # iterations after which an evaluation ran
    # config.json: 12 iterations in chunks of 1 (about 50 per run), so every 3rd iteration is evaluated.
    np.testing.assert_array_equal(evaluated, [3, 6, 9, 12])
    kept = runs.checkpoint_steps(run_dir)
    best = max(kept, key=lambda c: -np.inf if c["eval_return"] is None else c["eval_return"])
    assert best["eval_return"] == float(np.nanmax(evals)) and kept[-1]["iteration"] == 12
    assert len(kept) <= 2  # the newest (keep_checkpoints=1) and the best, the others removed
    _, best_state, _ = runs.load_run(run_dir, checkpoint="best")
    # The kept state is the evaluated one: evaluating it again with its key gives the logged return.
    again = eqxrl.evaluate(agent, best_state, eqxrl.loop.eval_key_at(runs.seed_keys(0, 1), best["iteration"]), num_episodes=2)
    assert float(again.mean()) == best["eval_return"]
    _assert_same(runs.load_run(run_dir, checkpoint="last")[1], runs.load_run(run_dir)[1])  # the final state
    code, out = _main(["evaluate", str(run_dir), "--checkpoint", "best", "--episodes", "2"])
    assert code == 0 and f"from {run_dir} (best checkpoint)" in out
    with pytest.raises(ValueError, match=r"checkpoint must be 'last', 'best' or an env step \(int\), got 'worst'"):
        runs.load_run(run_dir, checkpoint="worst")


def test_a_stranded_pbt_directory_is_reused_and_a_started_one_is_not(tmp_path, capsys):
    parser = cli.build_parser()
    run_dir = tmp_path / "p"
    (run_dir / "population" / "1.orbax-checkpoint-tmp-5").mkdir(parents=True)  # killed during its first write
    (run_dir / "pbt.json").write_text("{}")
    assert common_module.prepare_run_dir(parser, str(run_dir), "pbt") == run_dir and not any(run_dir.iterdir())
    assert "reusing" in capsys.readouterr().out
    (run_dir / "population" / "1").mkdir(parents=True)  # a finished generation: not to be thrown away
    (run_dir / "pbt.json").write_text("{}")
    with pytest.raises(SystemExit):
        common_module.prepare_run_dir(parser, str(run_dir), "pbt")
    assert (run_dir / "population" / "1").is_dir()
