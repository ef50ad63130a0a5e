"""Command-line values for module-valued fields (`--actor-torso cnn`, `--buffer prioritized:N`,
`--critic-optimizer adamw:LR`, `--learning-rate cosine:LR`, `--policy-loss-terms l2:C`)
and `--set PATH=VALUE`."""

import contextlib
import io
import json
import re

import pytest

from eqxrl import cli
from eqxrl.cli._specs import (  # (private: the command line's value parsers, tested one by one)
    parse_buffer,
    parse_learning_rate,
    parse_loss_terms,
    parse_optimizer,
    parse_set,
    parse_torso,
)
from eqxrl.components import (
    CNNTorso,
    ConstantSchedule,
    CosineSchedule,
    ExponentialSchedule,
    L2Penalty,
    LinearSchedule,
    MLPTorso,
    ModuleTorso,
    NamedOptimizer,
    Adam,
    PrioritizedReplayBuffer,
    ReplayBuffer,
    WarmupCosineSchedule,
)
from cli_calls import main_captured as _main


def test_presets():
    assert parse_torso("mlp:32,16:relu") == MLPTorso((32, 16), "relu")
    assert parse_torso("mlp") == MLPTorso((64, 64), "tanh")
    assert parse_torso("cnn") == CNNTorso.minatar() and parse_torso("nature-cnn") == CNNTorso.nature()
    assert parse_torso("eqxrl.components:CNNTorso") == CNNTorso()
    assert parse_torso("userpkg.torsos:UserTorso").module.__name__ == "UserTorso"
    assert isinstance(parse_torso("userpkg.torsos:UserTorso"), ModuleTorso)
    assert parse_torso('{"class": "eqxrl.components:MLPTorso", "hidden_sizes": [8]}') == MLPTorso((8,))
    assert parse_buffer("uniform") == ReplayBuffer() and parse_buffer("uniform:500") == ReplayBuffer(500)
    assert parse_buffer("prioritized:500:0.5") == PrioritizedReplayBuffer(500, alpha=0.5)
    assert parse_optimizer("adam:1e-3:0.5") == Adam(1e-3, 0.5)
    assert parse_optimizer("adamw:1e-3:0.01") == NamedOptimizer("adamw", 1e-3, 0.01)
    assert parse_optimizer("adamw:1e-3") == NamedOptimizer("adamw", 1e-3, 1e-4)  # optax's default decay
    assert parse_optimizer("sgd:0.1") == NamedOptimizer("sgd", 0.1) and parse_optimizer("rmsprop:0.1").name == "rmsprop"
    assert parse_loss_terms("l2:1e-4,l2:0.1") == (L2Penalty(1e-4), L2Penalty(0.1)) and parse_loss_terms("none") == ()
    assert parse_learning_rate("3e-4") == 3e-4
    assert parse_learning_rate("cosine:3e-4:0.1") == CosineSchedule(3e-4, 0.1)
    assert parse_learning_rate("linear:1e-3") == LinearSchedule(1e-3)
    assert parse_learning_rate("exponential:1e-3:1e-5") == ExponentialSchedule(1e-3, 1e-5)
    assert parse_learning_rate("constant:1e-3") == ConstantSchedule(1e-3)
    assert parse_learning_rate("warmup-cosine:1e-3:0.1:1e-5") == WarmupCosineSchedule(1e-3, 0.1, end_value=1e-5)
    assert parse_set("buffer.alpha=0.7") == ("buffer.alpha", 0.7)


@pytest.mark.parametrize(
    "parse, text, match",
    [
        (parse_torso, "resnet", r"unknown torso 'resnet'; expected mlp:64,64"),
        (parse_torso, "cnn:3", r"unknown torso 'cnn:3'"),
        (parse_torso, "{bad json", r"torso is not valid JSON"),
        (parse_torso, "no.such_module:Thing", r"cannot import the module of the class of torso 'no.such_module:Thing'"),
        (parse_buffer, "fifo", r"unknown buffer 'fifo'; expected uniform\[:CAPACITY\]"),
        (parse_buffer, "uniform:1:2", r"expected uniform\[:CAPACITY\], got 'uniform:1:2'"),
        (parse_buffer, "prioritized:100:-1", r"PrioritizedReplayBuffer\(alpha\) must be >= 0"),
        (parse_optimizer, "adam", r"expected adam:LR\[:MAX_GRAD_NORM\], got 'adam'"),
        (parse_optimizer, "lion:1e-3", r"unknown optimizer 'lion:1e-3'"),
        (parse_optimizer, "adam:-1", r"learning_rate must be > 0, got -1.0"),
        (parse_optimizer, "adam:inf", r"learning_rate must be finite, got inf"),
        (parse_optimizer, "adam:1e-3:nan", r"max_grad_norm must be > 0 \(inf disables clipping\), got nan"),
        (parse_optimizer, "sgd:-1", r"NamedOptimizer\(learning_rate\) must be a finite number > 0, got -1.0"),
        (parse_optimizer, "rmsprop:nan", r"NamedOptimizer\(learning_rate\) must be a finite number > 0, got nan"),
        (parse_optimizer, "adamw:inf", r"NamedOptimizer\(learning_rate\) must be a finite number > 0, got inf"),
        (parse_optimizer, "adamw:1e-3:nan", r"NamedOptimizer\(weight_decay\) must be a finite number >= 0, got nan"),
        (parse_optimizer, "adamw:1e-3:-1", r"NamedOptimizer\(weight_decay\) must be a finite number >= 0, got -1.0"),
        (parse_optimizer, "sgd:0.1:0.1", r"expected sgd:LR, got 'sgd:0.1:0.1'"),
        (parse_buffer, "os.path:join", r"the class of buffer must be a class, got 'os.path:join', which is a function"),
        (parse_buffer, "eqxrl.components:MLPTorso", r"the class of buffer must be a subclass of eqxrl.components:AbstractReplayBuffer, got .eqxrl.components:MLPTorso."),
        (parse_buffer, '{"class": "os:getcwd"}', r"the class of buffer names 'os:getcwd', whose module 'os' is not trusted: .* pass --trust os \(command line\) or trust=\('os',\) \(Python\)"),
        (parse_loss_terms, "l1:0.1", r"unknown loss term 'l1:0.1'"),
        (parse_learning_rate, "cosine", r"expected cosine:VALUE"),
        (parse_learning_rate, "exponential:1e-3", r"expected exponential:LR:END, got 'exponential:1e-3'"),
        (parse_learning_rate, "exponential:1e-3:0", r"ExponentialSchedule\(end_value\) must be > 0, got 0"),
        (parse_learning_rate, "step:1e-3", r"unknown learning rate 'step:1e-3'"),
        (parse_learning_rate, '{"class": "eqxrl.components:CosineSchedule", "nope": 1}', r"CosineSchedule has no field 'nope'"),
    ],
)
def test_bad_values_name_what_was_expected(parse, text, match):
    with pytest.raises(ValueError, match=match):
        parse(text)


@pytest.mark.slow  # over 5 s in the fast tier (2 cores)
def test_flags_build_the_agent_and_reach_its_config(tmp_path):
    run_dir = tmp_path / "run"
    code, out, err = _main([
        "train", "dqn", "--run-dir", str(run_dir), "--quiet", "--total-steps", "200", "--num-envs", "2",
        "--learning-starts", "20", "--batch-size", "8", "--eval-episodes", "1", "--buffer", "prioritized:100",
        "--critic-torso", "mlp:8:relu", "--learning-rate", "cosine:1e-3", "--critic-loss-terms", "l2:1e-4",
        "--max-grad-norm", "5", "--set", "buffer.alpha=0.7", "--set", "critic_loss_terms.0.coef=0.01",
    ])  # fmt: skip
    assert code == 0, err
    config = json.loads((run_dir / "config.json").read_text())["agent_config"]
    # (each flag's value where it lives: the loop's buffer, the critic's torso, optimizer and loss terms)
    assert config["loop"]["buffer"] == {"class": "eqxrl.components:PrioritizedReplayBuffer", "capacity": 100, "alpha": 0.7, "eps": 1e-06, "fanout": 8}
    assert config["critic"]["torso"] == {"class": "eqxrl.components:MLPTorso", "hidden_sizes": [8], "activation": "relu", "layer_norm": False}
    assert config["critic"]["optimizer"]["learning_rate"] == {"class": "eqxrl.components:CosineSchedule", "init_value": 0.001, "alpha": 0.0}
    assert config["critic"]["optimizer"]["max_grad_norm"] == 5.0
    assert config["critic"]["loss_terms"] == [{"class": "eqxrl.components:L2Penalty", "coef": 0.01}]
    # The run directory rebuilds the same agent: evaluate it.
    code, out, err = _main(["evaluate", str(run_dir), "--episodes", "1"])
    assert code == 0, err


@pytest.mark.parametrize(
    "argv, match",
    [
        (["train", "dqn", "--buffer", "fifo"], r"argument --buffer: unknown buffer 'fifo'"),
        (["train", "dqn", "--learning-rate", "5e-4", "--critic-optimizer", "adam:1e-3"],
         r"DQN\(critic_optimizer\) is the optimizer itself: with it given, \['learning_rate'\] must stay unset \(or agree with it\)"),
        (["train", "ppo", "--set", "nope=1"], r"PPO has no hyperparameter 'nope'; its hyperparameters: \["),
        (["train", "ppo", "--set", "gamma"], r"argument --set: expected PATH=VALUE like buffer.alpha=0.7, got 'gamma'"),
        (["train", "ppo", "--set", "gamma=2"], r"PPO\(gamma\) must be in \[0, 1\], got 2"),
        (["train", "ppo", "--actor-torso", "resnet"], r"argument --actor-torso: unknown torso 'resnet'"),
        (["pbt", "ppo", "--tune", "coef=log:0.1:1", "--policy-loss-terms", "l2:0.1,l2:0.2"], r"'coef' is ambiguous, it could be any of \['policy_loss_terms.0.coef', 'policy_loss_terms.1.coef'\]"),
    ],
)
def test_bad_flags_exit_2_with_a_message(argv, match):
    code, out, err = _main(argv)
    assert code == 2
    assert re.search(match, err), err


def test_help_lists_the_forms():
    parser = cli.build_parser()
    text = io.StringIO()
    with contextlib.redirect_stdout(text), pytest.raises(SystemExit):
        parser.parse_args(["train", "sac", "--help"])
    help_text = " ".join(text.getvalue().split())
    for flag in ("--actor-torso TORSO", "--buffer BUFFER", "--alpha-optimizer OPTIMIZER", "--policy-loss-terms TERMS",
                 "--actor-learning-rate RATE", "--set PATH=VALUE"):  # fmt: skip
        assert flag in help_text
