"""Run directories written by eqxrl 0.2 before its keywords became init-only (they build the modules an
off-policy agent stores: `loop` with its buffer, `critic` with its optimizer, `exploration`; config.json
now records the modules): their flat configs and checkpoints load, and the run resumes."""

import json

import pytest

import eqxrl
from eqxrl.agents import DQN
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
