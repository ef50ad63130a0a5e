"""Run directories written by eqxrl 0.2 before its keywords became init-only (they build the modules an
off-policy agent stores: `loop` with its buffer, `critic` with its optimizer, `exploration`; config.json
now records the modules): their flat configs and checkpoints load, and the run resumes. A file another eqxrl
wrote that does not fit this one is refused in one line that says which version wrote it."""

import json

import pytest

import eqxrl
from eqxrl.agents import DQN, PPO
from eqxrl.store import meta_crc32


def _as_before(config: dict) -> dict:
    """A DQN config as eqxrl 0.2 wrote it: every keyword flat, `buffer`, `critic_optimizer` and
    `exploration` null beside the keywords they were built from."""
    old = {k: v for k, v in config.items() if k not in ("loop", "critic", "exploration")}
    loop = {k: v for k, v in config["loop"].items() if k not in ("class", "buffer")}
    buffer, critic, exploration = config["loop"]["buffer"], config["critic"], config["exploration"]
    optimizer = critic["optimizer"]
    return {
        **old, **loop, "buffer": None, "buffer_size": buffer["capacity"], "prioritized": "alpha" in buffer,
        "per_alpha": buffer.get("alpha", 0.6), "critic_torso": critic["torso"], "hidden_sizes": critic["hidden_sizes"],
        "activation": critic["activation"], "critic_optimizer": None, "critic_loss_terms": critic["loss_terms"],
        "learning_rate": optimizer["learning_rate"], "max_grad_norm": optimizer["max_grad_norm"], "anneal_lr": optimizer["anneal"],
        "exploration": None, "eps_start": exploration["start"], "eps_end": exploration["end"],
        "exploration_fraction": exploration["fraction"], "epsilon_decay": exploration["decay"],
    }  # fmt: skip


@pytest.mark.slow  # (over 2 s in the fast tier: tests/tiers.py)
def test_a_run_directory_written_before_the_buffer_keywords_loads_and_resumes(tmp_path):
    agent = DQN("CartPole-v1", num_envs=2, batch_size=8, buffer_size=64, learning_starts=8, hidden_sizes=(8,), prioritized=True, per_alpha=0.5)
    run_dir = tmp_path / "run"
    eqxrl.runs.train_run(run_dir, agent, total_steps=64, progress=False, eval_episodes=2)
    config = json.loads((run_dir / "config.json").read_text())
    config["agent_config"] = _as_before(config["agent_config"])
    assert config["agent_config"]["per_alpha"] == 0.5 and config["agent_config"]["prioritized"] is True
    (run_dir / "config.json").write_text(json.dumps(config))
    for step in eqxrl.runs.checkpoint_steps(run_dir):
        path = step["path"] / "meta" / "metadata"
        meta = json.loads(path.read_text())
        meta["members"] = [_as_before(m) for m in meta["members"]]
        meta["meta_crc32"] = meta_crc32(meta)
        path.write_text(json.dumps(meta))
    loaded, state, _ = eqxrl.runs.load_run(run_dir)
    assert eqxrl.runs.agent_config(loaded) == eqxrl.runs.agent_config(agent)
    eqxrl.runs.load_run(run_dir, checkpoint="last")
    _, metrics, _, _ = eqxrl.runs.resume_run(run_dir, total_steps=128, progress=False)
    assert int(metrics["env_steps"][-1]) == 128
    # a real difference is still named
    config["agent_config"]["per_alpha"] = 0.25
    (run_dir / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match=r"does not hold a state of the agent given: loop.buffer.alpha=0.25 in the run, loop.buffer.alpha=0.5 in the agent given$"):
        eqxrl.runs.load_state(run_dir, agent)


# ---------------------------------------------------- a file another eqxrl wrote names its version
def _written_by_old(record: dict) -> dict:
    """`record` (a config, a checkpoint's meta or a save's agent.json) as eqxrl 0.2.0 names itself
    (the test then makes the record's agent disagree with the stored arrays: 16 hidden units, 8 stored)."""
    return {**record, "eqxrl_version": "0.2.0"}


def _rewrite(path, change) -> None:
    path.write_text(json.dumps(change(json.loads(path.read_text()))))


def _wider(config: dict) -> dict:
    return {**config, "hidden_sizes": [16]}


@pytest.mark.slow  # (over 2 s in the fast tier: tests/tiers.py)
def test_a_file_another_eqxrl_wrote_is_refused_in_one_line_naming_that_version(tmp_path):
    agent = PPO("CartPole-v1", num_envs=2, rollout_length=64, num_minibatches=2, hidden_sizes=(8,))
    run_dir = tmp_path / "run"
    state, _ = eqxrl.runs.train_run(run_dir, agent, total_steps=256, checkpoint_every=128, progress=False, eval_episodes=2)[:2]
    saved = eqxrl.save(tmp_path / "saved", agent, state)
    note = f"(written by eqxrl 0.2.0; this is eqxrl {eqxrl.__version__})"
    assert eqxrl.__version__ != "0.2.0"

    def refused(call, *match: str) -> str:
        with pytest.raises(ValueError) as info:
            call()
        line = str(info.value)
        assert "\n" not in line and all(m in line for m in match), line
        return line

    # config.json: a field this eqxrl's PPO does not take
    _rewrite(run_dir / "config.json", lambda c: _written_by_old({**c, "agent_config": {**c["agent_config"], "old_flag": True}}))
    refused(lambda: eqxrl.runs.load_agent(run_dir), "PPO has no field(s) ['old_flag']", note)
    # state.eqx: the config builds 16 hidden units, the file holds 8
    _rewrite(run_dir / "config.json", lambda c: {**c, "agent_config": _wider({k: v for k, v in c["agent_config"].items() if k != "old_flag"})})
    refused(lambda: eqxrl.runs.load_run(run_dir), "state.eqx does not match PPO with 1 seed(s): an array is", note)
    # a checkpoint whose meta agrees with the config, and whose arrays do not
    for step in eqxrl.runs.checkpoint_steps(run_dir):
        path = step["path"] / "meta" / "metadata"
        meta = _written_by_old(json.loads(path.read_text()))
        meta["members"] = [_wider(m) for m in meta["members"]]
        meta["meta_crc32"] = meta_crc32(meta)
        path.write_text(json.dumps(meta))
    refused(lambda: eqxrl.runs.load_run(run_dir, checkpoint="last"), f"{note} does not match PPO with 1 seed(s): array", "of state/ is stored as")
    # one that fits is read, with a warning that names the version
    narrow = lambda m: {**m, "hidden_sizes": [8]}  # noqa: E731
    _rewrite(run_dir / "config.json", lambda c: {**c, "agent_config": narrow(c["agent_config"])})
    last = eqxrl.runs.checkpoint_steps(run_dir)[-1]["path"] / "meta" / "metadata"
    meta = json.loads(last.read_text())
    meta["members"] = [narrow(m) for m in meta["members"]]
    meta["meta_crc32"] = meta_crc32(meta)
    last.write_text(json.dumps(meta))
    with pytest.warns(UserWarning, match=f"was written by eqxrl 0.2.0, this is eqxrl {eqxrl.__version__}"):
        eqxrl.runs.load_run(run_dir, checkpoint="last")
    # a save
    _rewrite(saved / "agent.json", lambda r: _written_by_old({**r, "members": [_wider(m) for m in r["members"]]}))
    refused(lambda: eqxrl.load(saved), f"state {note} does not match PPO with 1 seed(s): array")
    # this eqxrl's own files add nothing
    _rewrite(saved / "agent.json", lambda r: {**r, "eqxrl_version": eqxrl.__version__})
    assert "written by" not in refused(lambda: eqxrl.load(saved), "does not match PPO")
