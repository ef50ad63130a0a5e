"""DQN's `head`: the Q-head kinds (plain, dueling) it builds, trains and checks; bad values."""

import jax
import numpy as np
import pytest

import eqxrl
from eqxrl.agents import DQN
from eqxrl.components import AbstractDiscreteQHead, DiscreteQHead, DuelingQHead
from eqxrl.testing import check_agent
from typecheck import no_runtime_typecheck

TINY = dict(num_envs=2, rollout_length=2, batch_size=8, buffer_size=64, learning_starts=8, hidden_sizes=(8,))


@pytest.mark.parametrize("head, cls", [("plain", DiscreteQHead), ("dueling", DuelingQHead)])
def test_dqn_builds_the_head_it_is_given(head, cls):
    agent = DQN("CartPole-v1", **TINY, head=head)
    learner = agent.init(jax.random.key(0)).learner
    assert type(learner.q) is cls and type(learner.target_q) is cls
    assert isinstance(learner.q, AbstractDiscreteQHead)


def test_dqn_default_head_is_plain():
    assert DQN("CartPole-v1").head == "plain"


@pytest.mark.slow  # (over 2 s in the fast tier: tests/tiers.py)
def test_dueling_dqn_trains_and_passes_check_agent():
    agent = DQN("CartPole-v1", **TINY, head="dueling")
    state, metrics = eqxrl.train(agent, jax.random.key(0), total_steps=64)
    assert np.all(np.isfinite(np.asarray(metrics["q_loss"])[-4:]))
    assert isinstance(state.learner.q, DuelingQHead)
    check_agent(agent)


def test_bad_head_is_one_line_naming_the_argument():
    with no_runtime_typecheck(), pytest.raises(ValueError) as info:
        DQN("CartPole-v1", head="duel")
    assert str(info.value) == "DQN(head) must be one of ['plain', 'dueling', 'categorical', 'dueling_categorical'], got 'duel'"


def test_head_is_a_command_line_flag(capsys):
    from eqxrl import cli
    from cli_calls import usage_error

    assert cli.build_parser().parse_args(["train", "dqn", "--head", "dueling"]).head == "dueling"
    with no_runtime_typecheck():
        message = usage_error(["train", "dqn", "--head", "duel", "--total-steps", "100"], capsys)
    assert "DQN(head) must be one of ['plain', 'dueling', 'categorical', 'dueling_categorical'], got 'duel'" in message
