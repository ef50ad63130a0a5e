"""Nothing outside a run directory is touched, and nothing inside it is lost by accident.

Symbolic links below a run directory (a checkpoint, `checkpoints/` itself, a file)
are refused with one line and never followed by a delete (a marker directory
outside survives), while a link in the run directory's own path works;
`train_run` refuses a finished run directory before writing anything; a directory
named `²` in `checkpoints/` is no checkpoint; every file of a run directory has the
mode the umask gives; the disk remedies name free space or permissions only when
that is the cause, and the `--total-steps` that continuing a finished run needs.
"""

import errno
import importlib
import json
import os
import pathlib
import re
import shutil
import stat

import pytest

import eqxrl
from eqxrl import pbt, runs, store
from eqxrl.agents import PPO
from cli_calls import main_output as _main, usage_error as _error

train_run_module = importlib.import_module("eqxrl.runs._train_run")  # (private: faults are injected where the code looks names up)
checkpoint_module = importlib.import_module("eqxrl.runs._checkpoint")  # (private: faults are injected where the code looks names up)
pbt_checkpoint_module = importlib.import_module("eqxrl.pbt._checkpoint")  # (private: faults are injected where the code looks names up)
common_module = importlib.import_module("eqxrl.cli._common")  # (private: faults are injected where the code looks names up)

TINY = ["--num-envs", "2", "--rollout-length", "16", "--num-epochs", "1", "--num-minibatches", "1", "--hidden-sizes", "8",
        "--eval-episodes", "2", "--quiet"]  # fmt: skip
STEPS = 32  # env steps per iteration of TINY
UMASK = 0o027
LINK = "is a symbolic link (to {target}); eqxrl does not follow links below a run directory, where it deletes and replaces files: put the files themselves there"


def _snapshot(directory: pathlib.Path) -> dict[str, bytes]:
    return {str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A finished run (4 iterations, a checkpoint at each), written under umask 027 through
    a symbolic link in its path (`runs -> real`)."""
    base = tmp_path_factory.mktemp("safety")
    (base / "real").mkdir()
    (base / "runs").symlink_to(base / "real", target_is_directory=True)
    run_dir = base / "runs" / "r"
    old = os.umask(UMASK)
    try:
        code, out = _main(["train", "ppo", "--run-dir", str(run_dir), "--total-steps", str(4 * STEPS),
                           "--checkpoint-every", str(STEPS), "--tensorboard", *TINY])  # fmt: skip
    finally:
        os.umask(old)
    assert code == 0, out
    return run_dir


def _copy(finished: pathlib.Path, tmp_path: pathlib.Path, name: str = "r") -> pathlib.Path:
    run_dir = tmp_path / name
    shutil.copytree(finished, run_dir)
    return run_dir


def _outside(tmp_path: pathlib.Path) -> pathlib.Path:
    """A directory outside the run directory, with a marker that must survive."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "marker").write_text("keep me")
    return outside


# ----------------------------------------------------------------------- file modes
@pytest.mark.slow
def test_every_file_of_a_run_directory_has_the_mode_of_the_umask(finished):
    modes = {str(p.relative_to(finished)): oct(stat.S_IMODE(p.stat().st_mode)) for p in finished.rglob("*") if p.is_file()}
    assert {"config.json", "eval.json", "learning_curve.png", "metrics.csv", "state.eqx"} <= set(modes)
    assert set(modes.values()) == {oct(0o666 & ~UMASK)}, modes


@pytest.mark.parametrize("umask", [0o022, 0o077, 0o002])
def test_atomic_writes_take_the_mode_of_the_umask(tmp_path, umask):
    old = os.umask(umask)
    try:
        store.atomic_write_bytes(tmp_path / "a.png", b"png")
        store.write_json(tmp_path / "config.json", {"a": 1})
    finally:
        os.umask(old)
    for name in ("a.png", "config.json"):
        assert stat.S_IMODE((tmp_path / name).stat().st_mode) == 0o666 & ~umask
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.png", "config.json"]


# ----------------------------------------------------------------------- train_run on a finished run
@pytest.mark.slow
def test_train_run_refuses_a_finished_run_before_writing_anything(finished, tmp_path):
    run_dir = _copy(finished, tmp_path)
    before = _snapshot(run_dir)
    agent = PPO("CartPole-v1", num_envs=2, rollout_length=16, num_epochs=1, num_minibatches=1, hidden_sizes=(8,))
    message = (
        f"train_run(run_dir) must be a new or empty directory, got {str(run_dir)!r}, which holds a run (config.json): "
        "continue it with resume_run(run_dir, total_steps=N) (`eqxrl train --resume RUN_DIR --total-steps N`)"
    )
    with pytest.raises(runs.RunDirectoryError, match=re.escape(message)):
        runs.train_run(run_dir, agent, total_steps=8 * STEPS, progress=False)
    assert _snapshot(run_dir) == before  # config.json (status, budget, timings, command) byte for byte
    # One killed before its first checkpoint (config.json alone) is resume_run's to restart, not train_run's.
    stranded = tmp_path / "stranded"
    stranded.mkdir()
    shutil.copy(run_dir / "config.json", stranded / "config.json")
    with pytest.raises(runs.RunDirectoryError, match=r"which holds a run \(config.json\)"):
        runs.train_run(stranded, agent, total_steps=8 * STEPS, progress=False)
    assert (stranded / "config.json").read_bytes() == before["config.json"]
    assert sorted(p.name for p in stranded.iterdir()) == ["config.json"]


# ----------------------------------------------------------------------- symbolic links
@pytest.mark.slow
def test_a_symlinked_checkpoint_outside_is_refused_and_never_deleted(finished, tmp_path, capsys):
    run_dir = _copy(finished, tmp_path)
    outside = _outside(tmp_path)
    oldest = runs.checkpoint_steps(run_dir)[0]["path"]
    shutil.copytree(oldest, outside, dirs_exist_ok=True)  # a real checkpoint, kept outside
    shutil.rmtree(oldest)
    oldest.symlink_to(outside, target_is_directory=True)
    before, kept = _snapshot(outside), _snapshot(run_dir)
    # Continuing the run would apply retention, which deleted the link's target.
    message = _error(["train", "--resume", str(run_dir), "--total-steps", str(8 * STEPS), "--quiet"], capsys)
    assert message == f"eqxrl train ppo: error: --resume: {oldest} " + LINK.format(target=outside)
    with pytest.raises(runs.RunDirectoryError, match=rf"^resume_run\(run_dir\): {re.escape(str(oldest))} is a symbolic link"):
        runs.resume_run(run_dir, total_steps=8 * STEPS, progress=False)
    assert _snapshot(outside) == before and (outside / "marker").read_text() == "keep me"
    assert _snapshot(run_dir) == kept and oldest.is_symlink()


def test_symlinked_checkpoints_folders_and_files_are_refused(tmp_path, capsys):
    outside = _outside(tmp_path)
    config = {"agent": "ppo", "env": "CartPole-v1", "agent_config": {}, "seeds": 1, "seed": 0, "status": "running",
              "total_steps": 64, "chunk_iterations": 1, "checkpoint_every": 32}  # fmt: skip
    layouts = {"checkpoints": "checkpoints", "a file": "metrics.csv", "tensorboard": "tensorboard"}
    for layout, name in layouts.items():
        run_dir = tmp_path / layout.replace(" ", "-")
        run_dir.mkdir()
        (run_dir / "config.json").write_text(json.dumps(config))
        target = outside / "marker" if layout == "a file" else outside
        (run_dir / name).symlink_to(target)
        # --resume, and reusing it as a run stopped before its first checkpoint: neither deletes through the link.
        message = _error(["train", "--resume", str(run_dir), "--quiet"], capsys)
        assert message == f"eqxrl train ppo: error: --resume: {run_dir / name} " + LINK.format(target=target), layout
        message = _error(["train", "ppo", "--run-dir", str(run_dir), "--total-steps", str(2 * STEPS), *TINY], capsys)
        if layout == "a file":  # (not a stranded run: nothing would be deleted)
            assert message == f"eqxrl train ppo: error: --run-dir {str(run_dir)!r} already exists and is not an empty directory"
        else:
            assert message == f"eqxrl train ppo: error: --run-dir: {run_dir / name} " + LINK.format(target=target), layout
        assert (outside / "marker").read_text() == "keep me" and (run_dir / name).is_symlink()
    # A PBT run directory: its population folder.
    run_dir = tmp_path / "pbt"
    run_dir.mkdir()
    (run_dir / "pbt.json").write_text("{}")
    (run_dir / "population").symlink_to(outside)
    message = _error(["pbt", "--resume", str(run_dir)], capsys)
    assert message == f"eqxrl pbt: error: resume(run_dir): {run_dir / 'population'} " + LINK.format(target=outside)
    message = _error(["pbt", "ppo", "--run-dir", str(run_dir), "--population", "2", "--ready", "64", "--total-steps", "128",
                      "--num-envs", "2", "--rollout-length", "16", "--num-minibatches", "1"], capsys)  # fmt: skip
    assert message == f"eqxrl pbt ppo: error: --run-dir: {run_dir / 'population'} " + LINK.format(target=outside)
    assert sorted(p.name for p in outside.iterdir()) == ["marker"]


def test_a_symlinked_lock_file_is_refused(tmp_path):
    outside = _outside(tmp_path)
    run_dir = tmp_path / "r"
    run_dir.mkdir()
    (run_dir / ".lock").symlink_to(outside / "marker")
    agent = PPO("CartPole-v1", num_envs=2, rollout_length=16, num_epochs=1, num_minibatches=1, hidden_sizes=(8,))
    with pytest.raises(runs.RunDirectoryError, match=r"^train_run\(run_dir\): .*\.lock is a symbolic link"):
        runs.train_run(run_dir, agent, total_steps=STEPS, progress=False)
    assert (outside / "marker").read_text() == "keep me"


def test_removing_temporary_checkpoints_follows_no_link(tmp_path):
    outside = _outside(tmp_path)
    directory = tmp_path / "checkpoints"
    directory.mkdir()
    (directory / "8.orbax-checkpoint-tmp-3").symlink_to(outside)
    store.remove_temporary(directory)
    (tmp_path / "linked").symlink_to(outside)
    (outside / "4.orbax-checkpoint-tmp-1").mkdir()
    store.remove_temporary(tmp_path / "linked")  # the checkpoints folder itself a link: left alone
    assert sorted(p.name for p in outside.iterdir()) == ["4.orbax-checkpoint-tmp-1", "marker"]


def test_save_does_not_replace_through_a_symbolic_link_and_takes_the_umasks_modes(tmp_path, getkey):
    agent = PPO("CartPole-v1", num_envs=2, rollout_length=16, num_epochs=1, num_minibatches=1, hidden_sizes=(8,))
    state = agent.init(getkey())
    old = os.umask(UMASK)
    try:
        eqxrl.save(tmp_path / "real", agent, state)
    finally:
        os.umask(old)
    real = tmp_path / "real"
    modes = {p.is_dir(): set() for p in real.rglob("*")}
    for p in [real, *real.rglob("*")]:
        modes.setdefault(p.is_dir(), set()).add(stat.S_IMODE(p.stat().st_mode))
    assert modes == {True: {0o777 & ~UMASK}, False: {0o666 & ~UMASK}}, modes  # (mkdtemp made the save 0700)
    before = _snapshot(tmp_path / "real")
    (tmp_path / "link").symlink_to(tmp_path / "real")
    with pytest.raises(ValueError, match=rf"^save\(path\): '{re.escape(str(tmp_path / 'link'))}' is a symbolic link; give"):
        eqxrl.save(tmp_path / "link", agent, state, overwrite=True)
    assert _snapshot(tmp_path / "real") == before


# ----------------------------------------------------------------------- names that are no checkpoint
@pytest.mark.slow
def test_a_checkpoint_folder_named_with_other_digits_is_ignored(finished, capsys):
    # Through the link in the path (runs -> real), as the run was written.
    run_dir = finished.parent / "digits"
    shutil.copytree(finished, run_dir)
    steps = [c["step"] for c in runs.checkpoint_steps(run_dir)]
    for name in ("²", "٣", "1²"):  # str.isdigit takes them; int() does not read the first as a step
        (run_dir / "checkpoints" / name).mkdir()
        (run_dir / "checkpoints" / name / "commit_success.txt").write_text("")
    assert [c["step"] for c in runs.checkpoint_steps(run_dir)] == steps
    code, out = _main(["evaluate", str(run_dir), "--checkpoint", "last", "--episodes", "1"])
    assert code == 0, out
    code, out = _main(["train", "--resume", str(run_dir), "--total-steps", str(6 * STEPS), "--quiet"])
    assert code == 0, out
    assert runs.checkpoint_steps(run_dir)[-1]["step"] == 6 * STEPS
    assert (run_dir / "checkpoints" / "²").is_dir()  # not ours: left alone


def test_pbt_generations_and_stranded_directories_read_only_ascii_digits(tmp_path):
    population = tmp_path / "population"
    for name in ("²", "2"):
        (population / name).mkdir(parents=True)
        (population / name / "commit_success.txt").write_text("")
    assert pbt.population_generations(tmp_path) == [2]
    shutil.rmtree(population / "2")
    assert pbt.population_generations(tmp_path) == []
    (tmp_path / "pbt.json").write_text("{}")
    assert common_module.stranded(tmp_path)  # `²` is no finished generation: nothing to keep


# ----------------------------------------------------------------------- the disk remedies
def test_the_remedy_names_free_space_or_permissions_only_when_that_is_the_cause():
    remedy = store.disk_remedy
    assert remedy(OSError(errno.ENOSPC, "No space left on device")) == "free space on its disk"
    assert remedy(OSError(errno.EDQUOT, "Disk quota exceeded")) == "free space on its disk"
    assert remedy(PermissionError(errno.EACCES, "Permission denied")) == "fix the directory's permissions"
    assert remedy(OSError(errno.EROFS, "Read-only file system")) == "make its file system writable"
    try:  # orbax re-raises: the cause counts
        try:
            raise OSError(errno.ENOSPC, "No space left on device")
        except OSError as e:
            raise RuntimeError("write failed") from e
    except RuntimeError as e:
        assert remedy(e) == "free space on its disk"
    assert remedy(OSError("Cannot call rmtree on a symbolic link")) is None
    assert remedy(ValueError("tensorstore: bad chunk")) is None
    directory = pathlib.Path("r/checkpoints")
    message = str(checkpoint_module._write_error(directory, 64, OSError("Cannot call rmtree on a symbolic link"), 32))
    assert message == (
        "could not write the checkpoint r/checkpoints/64: Cannot call rmtree on a symbolic link; the checkpoint of env step 32 "
        "is intact. Continue with `eqxrl train --resume RUN_DIR`"
    )
    message = str(pbt_checkpoint_module._write_error(directory / "2", OSError(errno.EROFS, "Read-only file system"), 1))
    assert message == (
        "could not write the checkpoint r/checkpoints/2: Read-only file system; the checkpoint of generation 1 is intact. "
        "Make its file system writable, then continue with `eqxrl pbt --resume r`"
    )


@pytest.mark.slow
@pytest.mark.parametrize("code, reason, fix", [
    (errno.EACCES, "Permission denied", "fix the directory's permissions"),
    (errno.ENOSPC, "No space left on device", "free space on its disk"),
])  # fmt: skip
def test_continuing_a_finished_run_that_cannot_be_written_names_its_total_steps(finished, tmp_path, monkeypatch, capsys, code, reason, fix):
    run_dir = _copy(finished, tmp_path)
    before = _snapshot(run_dir)

    def fails(path, data):
        raise OSError(code, reason, str(path))

    monkeypatch.setattr(train_run_module, "write_json", fails)
    total = 8 * STEPS
    message = _error(["train", "--resume", str(run_dir), "--total-steps", str(total), "--quiet"], capsys)
    assert message == (
        f"eqxrl train ppo: error: could not write {run_dir / 'config.json'}: {reason}; the files written before are intact: "
        f"{fix}, then continue with `eqxrl train --resume {run_dir} --total-steps {total}`"
    )
    assert _snapshot(run_dir) == before
    monkeypatch.undo()
    assert runs.load_config(run_dir)["status"] == "complete"  # so the plain --resume would have been refused:
    message = _error(["train", "--resume", str(run_dir), "--quiet"], capsys)
    assert "give a larger total_steps (`--total-steps N`)" in message
