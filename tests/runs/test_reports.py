"""An agent's results as data (`AbstractAgent.report`), written by the run floor
(`eqxrl.runs.write_reports`): `NAME.json` and, where its type has a plot, `NAME.png`."""

import json

import equinox as eqx
import jax.numpy as jnp
import numpy as np
import pytest

import eqxrl
from eqxrl.agents import PPO, SkillReport
from eqxrl.runs import REPORT_PLOTS, figure, png_bytes, register_report_plot, write_reports
from typecheck import no_runtime_typecheck


def _skills() -> SkillReport:
    descriptors = jnp.stack([jnp.stack([jnp.zeros(2), jnp.ones(2) * k, jnp.ones(2) * 2 * k]) for k in (1.0, -1.0, 0.5)])
    return SkillReport(jnp.array([1.0, 2.0, 3.0]), jnp.array([0.5, 0.0, -0.5]), descriptors, jnp.array([2, 2, 1]))


def test_a_skill_report_is_written_as_its_summary_and_its_plot(tmp_path):
    report = _skills()
    files = write_reports(tmp_path, {"skills": report}, title="DADS on point:")
    assert files == ["skills.png", "skills.json"]
    written = json.loads((tmp_path / "skills.json").read_text())
    assert written == report.summary()
    assert written["env_return"] == [1.0, 2.0, 3.0]
    assert written["final_descriptor"] == [[2.0, 2.0], [-2.0, -2.0], [1.0, 1.0]]
    np.testing.assert_allclose(written["mean_pairwise_distance"], float(report.mean_pairwise_distance()), rtol=1e-6)
    assert (tmp_path / "skills.png").read_bytes().startswith(b"\x89PNG")


class Counts(eqx.Module):
    """A user's report type: a histogram."""

    counts: jnp.ndarray

    def summary(self) -> dict:
        return {"counts": np.asarray(self.counts).tolist()}


def _bars(value: Counts, path, *, title: str) -> None:
    fig = figure((3.0, 2.0))
    fig.add_subplot().bar(range(len(value.counts)), np.asarray(value.counts))
    fig.suptitle(title)
    path.write_bytes(png_bytes(fig))


def test_a_users_report_type_gets_its_registered_plot_and_plain_data_only_json(tmp_path, monkeypatch):
    monkeypatch.setitem(REPORT_PLOTS, Counts, None)  # (restored after the test)
    register_report_plot(Counts, _bars)
    files = write_reports(tmp_path, {"actions": Counts(jnp.array([3, 1])), "notes": {"k": [1, 2]}})
    assert files == ["actions.png", "actions.json", "notes.json"]
    assert json.loads((tmp_path / "actions.json").read_text()) == {"counts": [3, 1]}
    assert json.loads((tmp_path / "notes.json").read_text()) == {"k": [1, 2]}
    assert (tmp_path / "actions.png").read_bytes().startswith(b"\x89PNG")
    assert not (tmp_path / "notes.png").exists()


def test_report_bad_inputs(tmp_path):
    with no_runtime_typecheck():
        with pytest.raises(ValueError, match=r"^register_report_plot\(cls\) must be a class \(the report value's type\), got 'x'$"):
            register_report_plot("x", _bars)
        with pytest.raises(ValueError, match=r"^register_report_plot\(plot\) must be a function plot\(value, path, \*, title\), got 3$"):
            register_report_plot(Counts, 3)
        with pytest.raises(ValueError, match=r"^an agent's report\(state, key\) must return a dict \{name: value\}, got list$"):
            write_reports(tmp_path, [1])
        with pytest.raises(ValueError, match=r"^an agent's report names must be identifiers \(they name files\), got '\.\./x'$"):
            write_reports(tmp_path, {"../x": 1})
    assert list(tmp_path.iterdir()) == []


class ReportingPPO(PPO):
    """PPO whose report is the greedy action of a fixed observation (a user's agent with a report)."""

    def report(self, state, key):
        return {"greedy": {"action": int(self.act(state, jnp.zeros(4), deterministic=True))}}


@pytest.mark.slow  # (over 2 s in the fast tier: tests/tiers.py)
def test_train_run_writes_the_agents_report(tmp_path):
    agent = ReportingPPO("CartPole-v1", num_envs=2, rollout_length=8, num_minibatches=1, hidden_sizes=(8,))
    state, _, _, summary = eqxrl.runs.train_run(tmp_path / "r", agent, total_steps=32, progress=False, eval_episodes=1)
    assert summary["report_files"] == ["greedy.json"]
    action = json.loads((tmp_path / "r" / "greedy.json").read_text())["action"]
    assert action == int(agent.act(state, jnp.zeros(4), deterministic=True))
