"""Run directories written before `buffer_size`, `prioritized` and `per_alpha` became init-only
keywords (they build the `buffer` an off-policy agent stores; config.json now records the buffer
itself): their configs and checkpoints load, and the run resumes."""

import json

import pytest

import eqxrl
from eqxrl.agents import DQN
from eqxrl.store import meta_crc32


def _as_before(config: dict) -> dict:
    """An agent config as eqxrl wrote it before: `buffer: null` and the three keywords beside it."""
    buffer = config["buffer"]
    old = {k: v for k, v in config.items() if k != "buffer"}
    alpha = buffer.get("alpha", 0.6)
    return {**old, "buffer": None, "buffer_size": buffer["capacity"], "prioritized": "alpha" in buffer, "per_alpha": alpha}


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
    with pytest.raises(ValueError, match=r"does not hold a state of the agent given: buffer.alpha=0.25 in the run, buffer.alpha=0.5 in the agent given$"):
        eqxrl.runs.load_state(run_dir, agent)
