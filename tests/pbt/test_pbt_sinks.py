"""PBT's run directory as sinks (`eqxrl.pbt.HistorySink`, `PopulationSink`) in one `SinkGroup`
with those of `log=`: each sink gets every generation as a `Checkpoint` (the population, the
records stacked per member), the records come back unchanged, and a sink that asks to stop, or a
history sink without a directory, is a one-line error."""

import jax
import numpy as np
import pytest

from eqxrl.agents import PPO
from eqxrl.loop import AbstractSink, RunInfo, StopAtReturn
from eqxrl.pbt import PBT, HistorySink, LogUniform, Population, Truncation, generation_records
from typecheck import no_runtime_typecheck


def _pbt():
    agent = PPO("CartPole-v1", num_envs=2, rollout_length=16, num_epochs=1, num_minibatches=1, hidden_sizes=(8,))
    return PBT(agent, {"learning_rate": LogUniform(1e-4, 1e-2)}, population_size=2, ready=32, eval_episodes=1,
               max_eval_steps=20, exploit=Truncation(1, 1))  # fmt: skip


def test_each_sink_gets_each_generation_and_its_records_back(tmp_path):
    seen = []

    class Generations(AbstractSink):
        def checkpoint(self, checkpoint):
            seen.append((checkpoint.iteration, checkpoint.num_iterations, isinstance(checkpoint.state, Population),
                         checkpoint.metrics["fitness"].shape, generation_records(checkpoint.metrics)))  # fmt: skip

    records = []
    _pbt().run(jax.random.key(0), 2 * 32, progress=False, run_dir=tmp_path / "r", log=[Generations()],
               callback=lambda population, so_far: records.append([dict(r) for r in so_far]))  # fmt: skip
    assert [s[:4] for s in seen] == [(1, 2, True, (2, 1)), (2, 2, True, (2, 2))]  # (members, generations)
    for (*_, back), given in zip(seen, records):
        assert len(back) == len(given)
        for b, g in zip(back, given):
            assert sorted(b) == sorted(g)
            for k in g:
                np.testing.assert_array_equal(b[k], g[k])
                assert b[k].dtype == np.asarray(g[k]).dtype
    assert (tmp_path / "r" / "history.csv").is_file() and (tmp_path / "r" / "history.png").is_file()


def test_a_sink_that_asks_pbt_to_stop_and_a_history_without_a_directory_are_one_line(tmp_path):
    with no_runtime_typecheck():
        with pytest.raises(ValueError, match=r"^PBT\.run\(log\): the StopAtReturn sink asked to stop at generation 1") as e:
            _pbt().run(jax.random.key(0), 2 * 32, progress=False, log=[StopAtReturn(-1e9, "fitness")])
        assert "\n" not in str(e.value)
        with pytest.raises(ValueError, match=r"^HistorySink\(run_dir\) is needed outside a run directory, got None"):
            HistorySink(_pbt()).start(RunInfo("t"))
