"""Running like a product, for every registered agent: checkpoint and exact resume
(single runs, seed batches, sweeps), crash-safe writes, mismatch errors, the
non-finite guard, determinism, reproducing a run from its config, TensorBoard,
inference from a run directory, and config validation."""

import contextlib
import importlib
import io
import json
import pathlib

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import eqxrl
from eqxrl import cli, runs

# The modules whose names the faults below replace (where the code looks them up).
train_run_module = importlib.import_module("eqxrl.runs._train_run")  # (private: faults are injected where the code looks names up)
checkpoint_module = importlib.import_module("eqxrl.runs._checkpoint")  # (private: faults are injected where the code looks names up)
cli_train_module = importlib.import_module("eqxrl.cli._train")  # (private: faults are injected where the code looks names up)
from eqxrl.agents import IPPO, MAPPO, PPO, PQN, AbstractOffPolicyAgent
from eqxrl.envs import AbstractWrapper, TimeStep
from tensorboard_events import summary_values
from tiers import ci_subset

TINY_PPO = dict(num_envs=2, rollout_length=16, num_epochs=1, num_minibatches=1, hidden_sizes=(8,))
TINY_OFF = dict(num_envs=2, rollout_length=2, batch_size=8, buffer_size=64, learning_starts=8, hidden_sizes=(8,))
NAMES = list(runs.AGENTS)
TINY_EXTRA = {"crossq": dict(critic_hidden_sizes=(8,))}  # (its critics' widths are not hidden_sizes)


def tiny(name: str, env=None, **kw):
    cls = runs.AGENTS[name]
    base = TINY_PPO if issubclass(cls, (PPO, PQN, MAPPO, IPPO)) else TINY_OFF  # (the on-policy agents' sizes)
    return cls(env if env is not None else cls.default_env, **{**base, **TINY_EXTRA.get(name, {}), **kw})


def _leaves(tree) -> list[np.ndarray]:
    tree = jax.tree.map(lambda x: jax.random.key_data(x) if jnp.issubdtype(x.dtype, jax.dtypes.prng_key) else x,
                        eqx.filter(tree, eqx.is_array))  # fmt: skip
    return [np.asarray(x) for x in jax.tree.leaves(tree)]


def _assert_same(a, b) -> None:
    for x, y in zip(_leaves(a), _leaves(b), strict=True):
        np.testing.assert_array_equal(x, y)


def _assert_same_metrics(a: dict, b: dict) -> None:
    assert sorted(a) == sorted(b)
    for k in a:
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)


class _Crash(Exception):
    pass


def crash_after_checkpoints(monkeypatch, after: int, error: type[BaseException] = _Crash) -> None:
    """Make `train_run` die (raising `error`) right after its `after`-th checkpoint is on disk
    (each checkpoint written to the end first, none skipped)."""
    calls = []

    class Crashing(runs.CheckpointWriter):
        def submit(self, checkpoint, *, wait=False):
            super().submit(checkpoint, wait=True)
            self.wait()
            calls.append(1)
            if len(calls) == after:
                raise error
            return True

    monkeypatch.setattr(train_run_module, "CheckpointWriter", Crashing)


def _interrupted_run(monkeypatch, run_dir, agent, after: int, **kw):
    """`train_run` that dies right after writing its `after`-th checkpoint."""
    crash_after_checkpoints(monkeypatch, after)
    with pytest.raises(_Crash):
        runs.train_run(run_dir, agent, progress=False, **kw)
    monkeypatch.undo()


# ----------------------------------------------------------------------- checkpoint and resume
@pytest.mark.slow
@pytest.mark.parametrize("name", ci_subset(NAMES, keep=("ppo", "dqn", "sac", "ippo")))  # (tests/tiers.py)
def test_resume_continues_exactly_and_the_same_key_repeats_the_run(name, tmp_path, monkeypatch):
    agent = tiny(name)
    budget = 12 * agent.steps_per_iteration
    kw = dict(total_steps=budget, seed=3, checkpoint_every=4 * agent.steps_per_iteration, eval_episodes=1)
    full_state, full_metrics, _, full_eval = runs.train_run(tmp_path / "full", agent, progress=False, **kw)
    _interrupted_run(monkeypatch, tmp_path / "cut", agent, after=1, **kw)
    config = runs.load_config(tmp_path / "cut")
    assert config["status"] == "running" and [c["iteration"] for c in runs.checkpoint_steps(tmp_path / "cut")] == [4]
    with pytest.raises(ValueError, match="did not finish: continue it with `eqxrl train --resume RUN_DIR`"):
        runs.load_run(tmp_path / "cut")
    state, metrics, _, evaluation = runs.resume_run(tmp_path / "cut", progress=False)
    _assert_same(full_state, state)  # bit for bit
    _assert_same_metrics(full_metrics, metrics)
    assert evaluation["mean"] == full_eval["mean"]
    assert (tmp_path / "cut" / "metrics.csv").read_text() == (tmp_path / "full" / "metrics.csv").read_text()
    assert runs.load_config(tmp_path / "cut")["status"] == "complete"
    # The newest two checkpoints are kept (the final one holds state.eqx's state too).
    assert [c["iteration"] for c in runs.checkpoint_steps(tmp_path / "cut")] == [8, 12]
    _assert_same(runs.load_checkpoint(tmp_path / "cut", agent).state, state)

    # The same key gives the same result, another key another one. (`train` as train_run called it:
    # chunks of one iteration (its choice for 12 iterations) and eval_episodes=1, which is part of
    # the compiled chunk even when no evaluation runs in it: the programs compiled above.)
    again = [eqxrl.train(agent, jax.random.key(k), budget, progress=False, chunk_iterations=1, eval_episodes=1)
             for k in (3, 3, 4)]  # fmt: skip
    _assert_same(again[0][0], again[1][0])
    _assert_same_metrics(again[0][1], again[1][1])
    assert any(not np.array_equal(x, y) for x, y in zip(_leaves(again[0][0]), _leaves(again[2][0])))


@pytest.mark.slow
def test_resume_a_seed_batch_and_a_sweep(tmp_path, monkeypatch):
    agent = tiny("ppo")
    budget = 8 * agent.steps_per_iteration
    kw = dict(total_steps=budget, checkpoint_every=2 * agent.steps_per_iteration, eval_episodes=1)
    full = runs.train_run(tmp_path / "full", agent, num_seeds=4, progress=False, **kw)
    _interrupted_run(monkeypatch, tmp_path / "cut", agent, after=2, num_seeds=4, **kw)
    resumed = runs.resume_run(tmp_path / "cut", progress=False)
    _assert_same(full[0], resumed[0])
    _assert_same_metrics(full[1], resumed[1])
    assert full[1]["episode_return"].shape == (4, 8)

    sweep = eqxrl.stack([tiny("ppo", learning_rate=lr) for lr in (1e-3, 3e-3)])
    full = runs.train_run(tmp_path / "sweep", sweep, progress=False, **kw)
    _interrupted_run(monkeypatch, tmp_path / "sweep-cut", sweep, after=1, **kw)
    resumed = runs.resume_run(tmp_path / "sweep-cut", progress=False)
    _assert_same(full[0], resumed[0])
    _assert_same_metrics(full[1], resumed[1])
    agent, state, config = runs.load_run(tmp_path / "sweep-cut")
    assert isinstance(agent, eqxrl.Stacked) and [m["optimizer"]["learning_rate"] for m in config["members"]] == [1e-3, 3e-3]
    assert (tmp_path / "sweep" / "learning_curve.png").read_bytes()[:4] == b"\x89PNG"


@pytest.mark.slow
def test_rollout_one_member_or_all(getkey):
    agent = tiny("ppo")
    # The seed batch of test_resume_a_seed_batch_and_a_sweep, trained as its train_run trains it (chunks
    # of one iteration, eval_episodes=1): its programs.
    state, _ = eqxrl.train(agent, jax.random.split(getkey(), 4), 8 * agent.steps_per_iteration, progress=False,
                           chunk_iterations=1, eval_episodes=1)  # fmt: skip
    every = eqxrl.rollout(agent, state, getkey(), 20, num_envs=2)
    assert every["obs"].shape == (4, 20, 2, 4) and every["action"].shape == (4, 20, 2)
    one = eqxrl.rollout(agent, state, getkey(), 20, member=1)
    assert one["reward"].shape == (20, 1) and set(one) == {"obs", "action", "reward", "terminated", "truncated"}
    with pytest.raises(ValueError, match=r"rollout\(member\) must be in \[-4, 4\) for a batch of 4, got 4"):
        eqxrl.rollout(agent, state, getkey(), 5, member=4)
    with pytest.raises(ValueError, match=r"rollout\(num_steps\) must be a positive int, got 0"):
        eqxrl.rollout(agent, state, getkey(), 0)


@pytest.mark.slow
def test_train_resume_argument_checks(getkey):
    agent = tiny("ppo")
    checkpoints = []
    eqxrl.train(agent, getkey(), 64, progress=False, chunk_iterations=1, callback=lambda c: checkpoints.append(c.copy()))
    first = checkpoints[0]
    assert (first.iteration, first.num_iterations, first.chunk_iterations) == (1, 2, 1)
    with pytest.raises(ValueError, match=r"the checkpoint is 2 iterations into its run, past this call's 1 \(total_steps=32\)"):
        eqxrl.train(agent, getkey(), 32, progress=False, resume=checkpoints[-1])
    with pytest.raises(ValueError, match=r"train\(chunk_iterations=2\) must equal the checkpoint's 1"):
        eqxrl.train(agent, getkey(), 64, progress=False, resume=first, chunk_iterations=2)
    with pytest.raises(ValueError, match=r"train\(resume\) must be a Checkpoint, got dict"):
        eqxrl.train(agent, getkey(), 64, progress=False, resume={})
    # Resuming from the last checkpoint has nothing left to do: the run's state and metrics come back.
    last = checkpoints[-1]
    state, metrics = eqxrl.train(agent, getkey(), 64, progress=False, resume=last)
    _assert_same(state, last.state)
    assert metrics["episode_return"].shape == (2,)


@pytest.mark.slow
@pytest.mark.bitwise
def test_chunking_does_not_change_results():
    agent = tiny("ppo")
    budget = 6 * agent.steps_per_iteration
    # (Chunks of one: the program of test_train_resume_argument_checks.)
    a = eqxrl.train(agent, jax.random.key(5), budget, progress=False, chunk_iterations=1)  # six chunks of one
    b = eqxrl.train(agent, jax.random.key(5), budget, progress=False, chunk_iterations=4)  # 4 + 2 (skipped) iterations
    _assert_same(a[0], b[0])
    _assert_same_metrics(a[1], b[1])


@pytest.mark.slow
def test_a_failed_checkpoint_write_keeps_the_previous_one(tmp_path, monkeypatch, getkey):
    agent = tiny("dqn")
    checkpoints = []
    eqxrl.train(agent, getkey(), 8 * agent.steps_per_iteration, progress=False, chunk_iterations=4,
                callback=lambda c: checkpoints.append(c.copy()))  # fmt: skip
    runs.save_checkpoint(tmp_path, agent, checkpoints[0])
    real = checkpoint_module._write

    def disk_full(manager, payload):  # the write gets as far as orbax's temporary directory, then the disk is full
        (tmp_path / "checkpoints" / f"{payload.step}.orbax-checkpoint-tmp-1").mkdir()
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(checkpoint_module, "_write", disk_full)
    with pytest.raises(runs.CheckpointError, match=r"could not write the checkpoint .*checkpoints/32: No space left on device; "
                       r"the checkpoint of env step 16 is intact"):  # fmt: skip
        runs.save_checkpoint(tmp_path, agent, checkpoints[-1])
    monkeypatch.setattr(checkpoint_module, "_write", real)
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["16"]  # no temporary directory left
    loaded = runs.load_checkpoint(tmp_path, agent, num_seeds=1)
    assert loaded.iteration == 4
    _assert_same(loaded.state, checkpoints[0].state)


@pytest.mark.slow
def test_mismatched_agent_names_the_first_field(tmp_path, getkey):
    agent = tiny("ppo", learning_rate=1e-3)
    checkpoints = []
    eqxrl.train(agent, getkey(), 64, progress=False, chunk_iterations=1, callback=lambda c: checkpoints.append(c.copy()))
    runs.save_checkpoint(tmp_path, agent, checkpoints[0])
    with pytest.raises(ValueError, match=r"optimizer.learning_rate=0.001 in the checkpoint, optimizer.learning_rate=0.003 in the agent given"):
        runs.load_checkpoint(tmp_path, tiny("ppo", learning_rate=3e-3), num_seeds=1)
    with pytest.raises(ValueError, match=r"hidden_sizes=\[8\] in the checkpoint, hidden_sizes=\[16\]"):
        runs.load_checkpoint(tmp_path, tiny("ppo", learning_rate=1e-3, hidden_sizes=(16,)), num_seeds=1)
    with pytest.raises(ValueError, match=r"was written for agent 'ppo', got 'sac'"):
        runs.load_checkpoint(tmp_path, tiny("sac"), num_seeds=1)
    with pytest.raises(ValueError, match="does not match PPO with 2 seed"):
        runs.load_checkpoint(tmp_path, agent, num_seeds=2)
    assert runs.load_checkpoint(tmp_path, agent, num_seeds=1).iteration == 1


def test_a_checkpoint_from_another_version_warns(tmp_path, getkey, monkeypatch):
    agent = tiny("ppo")
    # A hand-made checkpoint of an initial state (in the fast tier: no training to compile).
    metrics = {"env_steps": np.array([agent.steps_per_iteration]), "episode_return": np.array([np.nan], np.float32)}
    checkpoint = eqxrl.Checkpoint(agent.init(getkey()), 1, 2, 1, metrics)
    monkeypatch.setattr(checkpoint_module, "__version__", "0.0.1")
    runs.save_checkpoint(tmp_path, agent, checkpoint)
    monkeypatch.undo()
    with pytest.warns(UserWarning, match=r"written by eqxrl 0.0.1, this is eqxrl"):
        runs.load_checkpoint(tmp_path, agent, num_seeds=1)


# ----------------------------------------------------------------------- non-finite guard
class NaNReward(AbstractWrapper):
    """Rewards turn NaN: the injected fault the guard must catch. The factor is an array leaf
    (traced, not static), so a healthy run (`factor=1.0`) is the same compiled program."""

    env: object
    factor: jax.Array = eqx.field(default_factory=lambda: jnp.float32(jnp.nan))

    def step(self, key, state, action):
        state, ts = self.env.step(key, state, action)
        return state, TimeStep(ts.obs, ts.reward * self.factor, ts.terminated, ts.truncated, ts.info)


@pytest.mark.slow
@pytest.mark.parametrize("name", ci_subset(NAMES))
def test_nan_guard_stops_at_the_first_nonfinite_iteration(name, getkey):
    env = eqxrl.envs.make(runs.AGENTS[name].default_env)
    agent = tiny(name, env=NaNReward(env))
    with pytest.raises(eqxrl.NonFiniteError) as info:
        eqxrl.train(agent, getkey(), 40 * agent.steps_per_iteration, progress=False, nan_guard=True)
    err = info.value
    # The NaN enters the state in the first iteration: PPO's (PQN's) losses and parameters at
    # once; an off-policy agent's n-step window (before any update) - caught there.
    assert err.iteration == 1 and err.env_steps == agent.steps_per_iteration
    assert "non-finite values after iteration 1 of 40" in str(err)
    if isinstance(agent, AbstractOffPolicyAgent):
        assert "window.data.reward" in err.quantities, err.quantities
    elif name == "pqn":  # (its one network is the Q-network; its loss is q_loss)
        assert "metric q_loss (NaN)" in err.quantities and "q.torso.net.layers[0].weight" in err.quantities, err.quantities
    else:  # (MAPPO's actor torso is a SelectTorso: its network holds the MLP)
        layer = "actor.torso.net.net.layers[0].weight" if name == "mappo" else "actor.torso.net.layers[0].weight"
        assert "metric loss (NaN)" in err.quantities and layer in err.quantities, err.quantities
    assert err.checkpoint is None  # nothing finite to fall back on in the first chunk

    # The guard is silent on a healthy run (the same program: the factor is traced). For SAC, say,
    # max_grad_norm=inf lives in the optimizer state: not a fault.
    healthy = tiny(name, env=NaNReward(env, jnp.float32(1.0)))
    state, metrics = eqxrl.train(healthy, getkey(), 40 * agent.steps_per_iteration, progress=False, nan_guard=True)
    assert "nonfinite" not in metrics and metrics["episode_return"].shape == (40,)


@pytest.mark.slow
def test_cli_nan_guard_exits_1_with_the_iteration(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(cli_train_module, "make", lambda name: NaNReward(eqxrl.envs.make(name)))
    code = cli.main(["train", "ppo", "--run-dir", str(tmp_path / "r"), "--quiet", "--nan-guard", "--total-steps", "1024",
                     "--num-envs", "2", "--rollout-length", "64", "--num-minibatches", "2", "--hidden-sizes", "8",
                     "--checkpoint-every", "128"])  # fmt: skip  (the programs of the test below)
    assert code == 1
    err = capsys.readouterr().err
    assert "non-finite values after iteration 1 of 8" in err and "metric" in err
    assert "no checkpoint with finite parameters was written before it" in err and len(err.strip().splitlines()) == 1
    # The run directory says so, and keeps what it can (a guarded run too).
    config = runs.load_config(tmp_path / "r")
    assert config["status"] == "diverged" and config["diverged"]["iteration"] == 1
    assert config["diverged"]["last_finite_checkpoint"] is None


@pytest.mark.slow
def test_a_kill_after_the_evaluation_leaves_a_resumable_run(tmp_path, monkeypatch):
    def killed(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(train_run_module, "save_run", killed)  # eval.json written, config.json not yet complete
    code, _ = _main(["train", "ppo", "--run-dir", str(tmp_path / "r"), *CLI_TINY])
    assert code == 130
    monkeypatch.undo()
    assert (tmp_path / "r" / "eval.json").is_file() and runs.load_config(tmp_path / "r")["status"] == "running"
    code, out = _main(["train", "--resume", str(tmp_path / "r"), "--quiet"])
    assert code == 0 and runs.load_config(tmp_path / "r")["status"] == "complete"
    assert (tmp_path / "r" / "state.eqx").is_file() and runs.checkpoint_steps(tmp_path / "r")[-1]["step"] == 512
    # The summary and config.json count the whole run, not only what the resumed call trained.
    assert "512 env steps (4 iterations, 0 of them in this call)" in out
    assert runs.load_config(tmp_path / "r")["timings"]["total_env_steps"] == 512


@pytest.mark.slow
def test_cli_nan_guard_on_resume_exits_1_too(tmp_path, monkeypatch, capsys):
    crash_after_checkpoints(monkeypatch, 1, KeyboardInterrupt)
    code = cli.main(["train", "ppo", "--run-dir", str(tmp_path / "r"), "--quiet", "--nan-guard", "--total-steps", "1024",
                     "--num-envs", "2", "--rollout-length", "64", "--num-minibatches", "2", "--hidden-sizes", "8",
                     "--checkpoint-every", "128"])  # fmt: skip
    assert code == 130
    monkeypatch.undo()
    config_module = importlib.import_module("eqxrl.runs._config")  # (private: a test replaces a name where agent_from_config looks up make)
    monkeypatch.setattr(config_module, "make", lambda name: NaNReward(eqxrl.envs.make(name)))
    capsys.readouterr()
    assert cli.main(["train", "--resume", str(tmp_path / "r"), "--quiet"]) == 1
    err = capsys.readouterr().err
    assert "non-finite values after iteration" in err and "usage:" not in err


# ----------------------------------------------------------------------- the command line
def _main(argv):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = cli.main(argv)
    return code, out.getvalue()


CLI_TINY = ["--total-steps", "512", "--num-envs", "2", "--rollout-length", "64", "--num-minibatches", "2",
            "--hidden-sizes", "8", "--eval-episodes", "2", "--quiet"]  # fmt: skip


@pytest.mark.slow
def test_config_json_reproduces_the_run(tmp_path):
    code, _ = _main(["train", "ppo", "--run-dir", str(tmp_path / "a"), *CLI_TINY, "--seeds", "2", "--learning-rate", "1e-3"])
    assert code == 0
    code, out = _main(["train", "--config", str(tmp_path / "a" / "config.json"), "--run-dir", str(tmp_path / "b"), "--quiet"])
    assert code == 0 and "2 seeds" in out
    assert (tmp_path / "a" / "metrics.csv").read_text() == (tmp_path / "b" / "metrics.csv").read_text()
    _assert_same(runs.load_run(tmp_path / "a")[1], runs.load_run(tmp_path / "b")[1])


@pytest.mark.slow
def test_cli_resume(tmp_path, monkeypatch):
    crash_after_checkpoints(monkeypatch, 1, KeyboardInterrupt)
    code, _ = _main(["train", "ppo", "--run-dir", str(tmp_path / "r"), *CLI_TINY, "--checkpoint-every", "128"])
    assert code == 130  # interrupted
    monkeypatch.undo()
    code, out = _main(["train", "--resume", str(tmp_path / "r"), "--quiet"])
    assert code == 0 and "resuming ppo on CartPole-v1" in out and "evaluation" in out
    code, _ = _main(["train", "ppo", "--run-dir", str(tmp_path / "full"), *CLI_TINY, "--checkpoint-every", "128"])
    assert (tmp_path / "r" / "metrics.csv").read_text() == (tmp_path / "full" / "metrics.csv").read_text()


@pytest.mark.parametrize(
    "argv, message",
    [
        (["train", "--resume", "/nonexistent/run"], r"run directory '/nonexistent/run' does not exist"),
        (["train", "--resume", "RUN", "--learning-rate", "1e-3"], r"--resume RUN_DIR continues a run as it was configured"),
        (["train", "--config", "/nonexistent/config.json"], r"--config '/nonexistent/config.json': "),
        (["train", "--config", "CONFIG", "--gamma", "0.9"], r"--config reproduces a run as it was: do not also set agent fields \(gamma\)"),
        (["train", "--checkpoint-every", "0"], r"argument --checkpoint-every: expected a positive integer, got '0'"),
    ],
)
def test_product_bad_arguments(argv, message, tmp_path, capsys):
    argv = [str(tmp_path / "cfg.json") if a == "CONFIG" else str(tmp_path) if a == "RUN" else a for a in argv]
    with pytest.raises(SystemExit) as exit_info:
        cli.main(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and err[0].startswith("usage:")
    assert __import__("re").search(message, err[1]), err[1]


@pytest.mark.slow
def test_resume_of_a_complete_run_exits_2(tmp_path, capsys):
    assert _main(["train", "ppo", "--run-dir", str(tmp_path / "r"), *CLI_TINY])[0] == 0
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["train", "--resume", str(tmp_path / "r")])
    assert exit_info.value.code == 2
    assert "the run is already complete" in capsys.readouterr().err


# ----------------------------------------------------------------------- logging
def _tensorboard_scalars(directory: pathlib.Path) -> dict[str, list[tuple[int, float]]]:
    """Scalar summaries of TensorBoard event files, by tag."""
    out: dict[str, list[tuple[int, float]]] = {}
    for step, value in summary_values(directory):
        out.setdefault(value.tag, []).append((step, value.simple_value))
    return out


@pytest.mark.slow
def test_tensorboard_event_files(tmp_path):
    code, _ = _main(["train", "ppo", "--run-dir", str(tmp_path / "r"), *CLI_TINY, "--seeds", "2", "--tensorboard"])
    assert code == 0
    scalars = _tensorboard_scalars(tmp_path / "r" / "tensorboard")
    metrics = runs.load_metrics(tmp_path / "r")
    assert {"loss", "entropy", "episode_return"} <= set(scalars)
    steps = [s for s, _ in scalars["loss"]]
    np.testing.assert_array_equal(steps, metrics["env_steps"][0])
    np.testing.assert_allclose([v for _, v in scalars["loss"]], metrics["loss"].mean(axis=0), rtol=1e-5)
    assert "episode_return/member_1" in scalars
    config = json.loads((tmp_path / "r" / "config.json").read_text())
    assert config["tensorboard"] is True and config["status"] == "complete"


# ----------------------------------------------------------------------- inference
@pytest.mark.slow
def test_load_a_policy_and_act_in_three_lines(tmp_path):
    assert _main(["train", "ppo", "--run-dir", str(tmp_path / "r"), *CLI_TINY, "--seeds", "2"])[0] == 0
    policy = runs.load_policy(tmp_path / "r")
    actions = policy(jnp.zeros((5, 4), jnp.float32))
    assert actions.shape == (5,) and actions.dtype == jnp.int32
    second = runs.load_policy(tmp_path / "r", member=1, deterministic=False)
    assert second(jnp.zeros((3, 4), jnp.float32), jax.random.key(0)).shape == (3,)
    with pytest.raises(ValueError, match=r"load_policy\(member\) must be in \[-2, 2\) for this run of 2 seed\(s\), got 2"):
        runs.load_policy(tmp_path / "r", member=2)


# ----------------------------------------------------------------------- config validation, every agent
@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize(
    "field, value, expected",
    [
        ("gamma", 1.5, r"\(gamma\) must be in \[0, 1\], got 1.5"),
        ("num_envs", 0, r"\(num_envs\) must be a positive int, got 0"),
        ("hidden_sizes", (), r"\(hidden_sizes\)"),
    ],
)
def test_every_agent_validates_its_config(name, field, value, expected):
    cls = runs.AGENTS[name]
    with pytest.raises(ValueError, match=rf"^{cls.__name__}{expected}"):
        tiny(name, **{field: value})


@pytest.mark.parametrize("name", NAMES)
def test_every_agent_rejects_non_positive_learning_rates(name):
    cls = runs.AGENTS[name]
    rates = [f for f in runs.float_fields(cls) if f.endswith("learning_rate")]
    assert rates
    for field in rates:
        with pytest.raises(ValueError, match=rf"^{cls.__name__}\({field}\) must be > 0, got -0.1"):
            tiny(name, **{field: -0.1})
