"""One writer per run directory: the lock of a live run (`RUN_DIR/.lock`, `fcntl.flock`).

A second `eqxrl train --run-dir D` or `--resume D` started while the first runs is
refused with one line naming the first's process id (and nothing of the first is
touched); a killed run's lock does not block its resume; Ctrl-C says how to resume;
in Python, `train_run`, `resume_run`, `PBT.run(run_dir=)` and `eqxrl.pbt.resume`
are refused while another process or thread holds the lock.
"""

import contextlib
import importlib
import json
import os
import pathlib
import re
import signal
import subprocess
import sys
import threading
import time

import jax
import pytest

from eqxrl import cli, pbt, runs
from eqxrl.agents import PPO
from cli_calls import main_output as _main, usage_error as _error


TINY = ["--num-envs", "2", "--rollout-length", "16", "--num-epochs", "1", "--num-minibatches", "1", "--hidden-sizes", "8",
        "--eval-episodes", "2", "--quiet"]  # fmt: skip
STEPS = 32  # env steps per iteration of TINY
ROOT = pathlib.Path(__file__).parents[2]


# `python -m eqxrl` with Ctrl-C raising KeyboardInterrupt (as in a terminal) whatever this process
# passes on: a Python started with SIGINT ignored never raises it, so under a pytest worker that
# ignored SIGINT the Ctrl-C test's run went on to the end and exited 0 (seen in fresh-clone runs).
_WITH_CTRL_C = (
    "import runpy, signal; signal.signal(signal.SIGINT, signal.default_int_handler); "
    "runpy.run_module('eqxrl', run_name='__main__', alter_sys=True)"
)


def _start(run_dir: pathlib.Path, total_steps: int, checkpoint_every: int) -> subprocess.Popen:
    argv = [sys.executable, "-c", _WITH_CTRL_C, "train", "ppo", "--run-dir", str(run_dir), "--total-steps", str(total_steps),
            "--checkpoint-every", str(checkpoint_every), *TINY]  # fmt: skip
    with open(_stderr(run_dir), "wb") as err:  # (the child keeps its own handle)
        return subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=err, cwd=ROOT)


def _stderr(run_dir: pathlib.Path) -> pathlib.Path:
    return run_dir.parent / f"{run_dir.name}.stderr"


def _wait_for(condition, proc: subprocess.Popen, run_dir: pathlib.Path, timeout: float = 300.0) -> None:
    end = time.monotonic() + timeout
    while not condition():
        if proc.poll() is not None:
            raise AssertionError(f"the run ended first: {_stderr(run_dir).read_text()[-2000:]}")
        if time.monotonic() > end:
            raise AssertionError("timed out")
        time.sleep(0.005)


def _small_agent():
    return PPO("CartPole-v1", num_envs=2, rollout_length=16, num_epochs=1, num_minibatches=1, hidden_sizes=(8,))


# ----------------------------------------------------------------------- two processes on one --run-dir
@pytest.mark.slow
def test_a_second_command_on_a_live_run_is_refused_naming_its_pid_and_the_first_finishes(tmp_path, capsys):
    run_dir = tmp_path / "r"
    # A budget long enough that the first is still compiling or training when the others start.
    proc = _start(run_dir, 2**19, 2**16)
    try:
        _wait_for(lambda: (run_dir / "config.json").is_file(), proc, run_dir)
        config = (run_dir / "config.json").read_bytes()
        holder = rf"'{re.escape(str(run_dir))}' is in use by process {proc.pid} on \S+, which is writing it: wait for it to end, or stop it"
        again = _error(["train", "ppo", "--run-dir", str(run_dir), "--total-steps", str(4 * STEPS), *TINY], capsys)
        assert re.fullmatch(rf"eqxrl train ppo: error: --run-dir: {holder}", again), again
        resumed = _error(["train", "--resume", str(run_dir), "--quiet"], capsys)
        assert re.fullmatch(rf"eqxrl train ppo: error: --resume: {holder}", resumed), resumed
        continued = _error(["train", "--resume", str(run_dir), "--total-steps", str(2**20), "--quiet"], capsys)
        assert f"process {proc.pid} on" in continued
        assert proc.poll() is None, "the first run ended before the others were refused: the test proves nothing"
        assert (run_dir / "config.json").read_bytes() == config  # nothing of the live run was touched
        proc.wait(timeout=600)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, _stderr(run_dir).read_text()[-2000:]
    config = runs.load_config(run_dir)
    assert config["status"] == "complete" and config["total_steps"] == 2**19
    assert {p.name for p in run_dir.iterdir()} == {"config.json", "metrics.csv", "state.eqx", "learning_curve.png", "eval.json", "checkpoints"}
    assert runs.checkpoint_steps(run_dir)[-1]["step"] == 2**19
    runs.load_run(run_dir)  # reads back
    # The lock is gone with the run: the finished directory continues.
    code, _ = _main(["train", "--resume", str(run_dir), "--total-steps", str(2**19 + 4 * STEPS), "--quiet"])
    assert code == 0


@pytest.mark.slow
def test_a_killed_runs_lock_does_not_block_its_resume(tmp_path, capsys):
    run_dir = tmp_path / "r"
    proc = _start(run_dir, 2**19, 2**14)
    try:
        _wait_for(lambda: bool(runs.checkpoint_steps(run_dir)), proc, run_dir)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait()
    assert proc.returncode == -signal.SIGKILL
    lock = run_dir / ".lock"
    assert lock.is_file() and lock.read_text().split()[0] == str(proc.pid)  # the file stays; the lock went with the process
    code, out = _main(["train", "--resume", str(run_dir), "--quiet"])
    assert code == 0, out
    assert runs.load_config(run_dir)["status"] == "complete" and not lock.exists()


@pytest.mark.slow
def test_ctrl_c_says_how_to_resume(tmp_path):
    run_dir = tmp_path / "r"
    proc = _start(run_dir, 2**19, 2**14)
    try:
        _wait_for(lambda: bool(runs.checkpoint_steps(run_dir)), proc, run_dir)
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    err = _stderr(run_dir).read_text()
    assert proc.returncode == 130, err[-2000:]
    last = err.strip().splitlines()[-1]
    step = runs.checkpoint_steps(run_dir)[-1]["step"]
    assert last == f"eqxrl: interrupted; `eqxrl train --resume {run_dir}` continues the run from its checkpoint at env step {step:,}"
    assert not (run_dir / ".lock").exists()  # released (and removed) on the way out


def test_the_ctrl_c_messages_name_the_resume_command(tmp_path, capsys):
    train = importlib.import_module("eqxrl.cli._train")  # (private: the Ctrl-C messages are built there)
    pbt_cli = importlib.import_module("eqxrl.cli._pbt")  # (private: the Ctrl-C messages are built there)
    run_dir = tmp_path / "r"
    run_dir.mkdir()
    assert train.interrupted_exit(run_dir, None) == 130
    assert capsys.readouterr().err == (
        f"eqxrl: interrupted; `eqxrl train --resume {run_dir}` continues the run from the start: no checkpoint was written\n"
    )
    assert train.interrupted_exit(run_dir, 4096) == 130  # continuing a finished run to a new budget
    assert f"`eqxrl train --resume {run_dir} --total-steps 4096` continues the run" in capsys.readouterr().err
    assert pbt_cli.interrupted_exit(run_dir) == 130
    assert capsys.readouterr().err == (
        f"eqxrl: interrupted before the first generation was saved; run the command again (with `--run-dir {run_dir}` it reuses the directory)\n"
    )
    (run_dir / "population" / "3").mkdir(parents=True)
    (run_dir / "population" / "3" / "commit_success.txt").write_text("")
    assert pbt_cli.interrupted_exit(run_dir) == 130
    assert capsys.readouterr().err == f"eqxrl: interrupted; `eqxrl pbt --resume {run_dir}` continues the run from generation 3\n"


# ----------------------------------------------------------------------- the lock in Python
@contextlib.contextmanager
def _held_by_another_thread(run_dir: pathlib.Path):
    taken, done = threading.Event(), threading.Event()
    errors = []

    def hold():
        try:
            with runs.run_lock(run_dir, "test"):
                taken.set()
                done.wait(60)
        except BaseException as e:  # noqa: BLE001 (reported below)
            errors.append(e)
            taken.set()

    thread = threading.Thread(target=hold)
    thread.start()
    taken.wait(60)
    try:
        assert not errors, errors
        yield
    finally:
        done.set()
        thread.join()


def test_a_second_holder_is_refused_and_the_holder_reenters(tmp_path):
    run_dir = tmp_path / "r"
    with runs.run_lock(run_dir, "first") as root:
        assert root == run_dir.resolve() and (run_dir / ".lock").read_text().split()[0] == str(os.getpid())
        with runs.run_lock(run_dir, "nested"):  # the same thread: re-entered
            pass
        assert (run_dir / ".lock").is_file()  # still held by the outer block
        errors = []
        thread = threading.Thread(target=lambda: _try(lambda: runs.run_lock(run_dir, "second(run_dir)").__enter__(), errors))
        thread.start()
        thread.join()
        (error,) = errors
        assert isinstance(error, runs.RunDirectoryError)
        assert str(error).startswith(f"second(run_dir): '{run_dir}' is in use by process {os.getpid()} on ")
    assert not (run_dir / ".lock").exists()
    with runs.run_lock(run_dir, "again"):  # free again
        pass


def _try(fn, errors):
    try:
        fn()
    except Exception as e:  # noqa: BLE001 (the test looks at it)
        errors.append(e)


@pytest.mark.slow  # (over 2 s in the fast tier: tests/tiers.py)
def test_another_process_holding_the_lock_is_named(tmp_path):
    run_dir = tmp_path / "r"
    code = (
        "import sys; from eqxrl.runs import run_lock\n"
        f"with run_lock({str(run_dir)!r}, 'holder'):\n"
        "    print('held', flush=True); sys.stdin.read()\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        assert proc.stdout.readline().strip() == "held"
        with pytest.raises(runs.RunDirectoryError, match=rf"^train_run\(run_dir\): '{re.escape(str(run_dir))}' is in use by process {proc.pid} on "):
            runs.train_run(run_dir, _small_agent(), total_steps=STEPS, progress=False)
        assert [p.name for p in run_dir.iterdir()] == [".lock"]  # nothing written
    finally:
        proc.communicate("")
    assert proc.returncode == 0 and not (run_dir / ".lock").exists()


def test_train_run_resume_run_pbt_run_and_pbt_resume_are_refused_while_locked(tmp_path):
    agent = _small_agent()
    run_dir = tmp_path / "r"
    population = pbt.PBT(agent, {"learning_rate": pbt.LogUniform(1e-4, 1e-2)}, population_size=2, ready=64, eval_episodes=1)
    with _held_by_another_thread(run_dir):
        calls = {
            "train_run": lambda: runs.train_run(run_dir, agent, total_steps=STEPS, progress=False),
            "resume_run": lambda: runs.resume_run(run_dir, progress=False),
            "PBT.run": lambda: population.run(jax.random.key(0), 64, progress=False, run_dir=run_dir),
            "resume": lambda: pbt.resume(run_dir, progress=False),
        }
        for owner, call in calls.items():
            with pytest.raises(runs.RunDirectoryError, match=rf"^{owner}\(run_dir\): '{re.escape(str(run_dir))}' is in use by process {os.getpid()} on "):
                call()
        assert [p.name for p in run_dir.iterdir()] == [".lock"]
    assert not any(run_dir.iterdir())


def test_the_lock_file_is_not_a_run_file(tmp_path, capsys):
    # A killed run leaves .lock behind: the directory still counts as empty for --run-dir,
    # and as stranded (a config.json alone) for reuse.
    common = importlib.import_module("eqxrl.cli._common")  # (private: the command line's run-directory checks)
    parser = cli.build_parser()
    run_dir = tmp_path / "r"
    run_dir.mkdir()
    (run_dir / ".lock").write_text("12345 elsewhere\n")
    assert common.prepare_run_dir(parser, str(run_dir), "ppo") == run_dir
    (run_dir / "config.json").write_text(json.dumps({"agent": "ppo", "env": "CartPole-v1", "agent_config": {}, "seeds": 1, "total_steps": 1_000,
                                                     "seed": 0, "status": "running"}))  # fmt: skip
    assert common.stranded(run_dir)
    assert common.prepare_run_dir(parser, str(run_dir), "ppo") == run_dir
    assert "reusing" in capsys.readouterr().out and [p.name for p in run_dir.iterdir()] == []
