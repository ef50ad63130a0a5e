"""Opening a run directory never runs code it names (issue 28): class paths in `config.json`,
`agent.json` and `pbt.json` resolve only to eqxrl's own classes, registered ones and modules
trusted for the call (`trust=`, `--trust MODULE`); edited configs and bad optimizer specs give
one line; `--flag -inf` reaches the flag's parser.

The planted module writes a marker file when imported and holds a zero-argument function that
writes another when called; it lies inside the run directory, which is put on `sys.path` (in
this process), or is the working directory of `python -m eqxrl` (which puts it on `sys.path`).
"""

import contextlib
import io
import json
import os
import pathlib
import re
import subprocess
import sys
import uuid

import equinox as eqx
import jax
import numpy as np
import pytest

import eqxrl
from eqxrl import cli
from eqxrl.agents import AGENTS
from eqxrl.cli._parse import attach_negative_values  # (private: the command line's handling of negative values, called directly)
from eqxrl.components import MLPTorso
from eqxrl.core import is_trusted, trusting

ROOT = pathlib.Path(__file__).resolve().parents[2]

PLANTED = """
import pathlib

import equinox as eqx

import eqxrl

pathlib.Path(__file__).with_name("IMPORTED").write_text("imported")


def make():
    pathlib.Path(__file__).with_name("CALLED").write_text("called")


class Net(eqx.Module):
    pass


class Torso(eqxrl.components.MLPTorso):
    pass


class Agent(eqxrl.agents.PPO):
    pass
"""


class RegisteredTorso(MLPTorso):
    """A user's torso class, loadable once registered (`eqxrl.register_component`)."""


def _config(field: str, module: str) -> dict:
    """A config naming the planted module in `field` (or, for "os", `os:getcwd` as a torso)."""
    config = {"agent": "ppo", "env": "CartPole-v1", "agent_config": {}, "seeds": 1, "seed": 0,
              "total_steps": 256, "chunk_iterations": 1, "checkpoint_every": 128, "status": "running"}  # fmt: skip
    if field == "agent_class":
        config.update(agent="planted", agent_class=f"{module}:Agent")
    elif field == "class":
        config["agent_config"]["actor_torso"] = {"class": f"{module}:Torso", "hidden_sizes": [8]}
    elif field == "type":
        config["agent_config"]["actor_torso"] = {"class": "eqxrl.components:ModuleTorso", "module": {"type": f"{module}:Net"}}
    elif field == "os":
        config["agent_config"]["actor_torso"] = {"class": "os:getcwd"}
    return config


WHERE = {"agent_class": "agent_class", "class": "the class of actor_torso", "type": "the class of actor_torso.module",
         "os": "the class of actor_torso"}  # fmt: skip


class Planted:
    """A run directory (config.json, pbt.json, and an `eqxrl.save` directory `save/`) whose
    class fields name the module planted in it."""

    def __init__(self, root: pathlib.Path, field: str):
        self.dir = root / "run"
        self.dir.mkdir()
        self.module = f"planted_{uuid.uuid4().hex[:12]}"
        (self.dir / f"{self.module}.py").write_text(PLANTED)
        self.config = _config(field, self.module)
        self.where = WHERE[field]
        self.named = "os" if field == "os" else self.module
        (self.dir / "config.json").write_text(json.dumps(self.config))
        (self.dir / "pbt.json").write_text(json.dumps(self.config))
        (self.dir / "save").mkdir()
        record = {k: self.config[k] for k in ("agent", "env", "agent_class") if k in self.config}
        record.update(members=[self.config["agent_config"]], stacked=False, seeds=1, state_crc32=0)
        (self.dir / "save" / "agent.json").write_text(json.dumps(record))

    def untouched(self) -> bool:
        return not (self.dir / "IMPORTED").exists() and not (self.dir / "CALLED").exists() and self.module not in sys.modules

    def check_refusal(self, message: str) -> None:
        assert "\n" not in message.strip(), message
        assert f"{self.where} names " in message, message
        assert f"--trust {self.named} (command line) or trust=({self.named!r},) (Python)" in message, message
        assert self.untouched()


@pytest.fixture(params=["agent_class", "class", "type", "os"])
def planted(request, tmp_path, monkeypatch):
    run = Planted(tmp_path, request.param)
    monkeypatch.syspath_prepend(str(run.dir))
    yield run
    AGENTS.pop("planted", None)
    sys.modules.pop(run.module, None)


def _main(argv):
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        try:
            code = cli.main(argv)
        except SystemExit as e:
            code = e.code
    return code, err.getvalue()


def _one_error_line(err: str) -> str:
    assert "Traceback" not in err, err
    lines = err.strip().splitlines()
    assert lines and "error: " in lines[-1], err
    return lines[-1]


LOADERS = {
    "load_run": lambda d: eqxrl.runs.load_run(d),
    "load_policy": lambda d: eqxrl.runs.load_policy(d),
    "load_agent": lambda d: eqxrl.runs.load_agent(d),
    "resume_run": lambda d: eqxrl.runs.resume_run(d, progress=False),
    "eqxrl.load": lambda d: eqxrl.load(d / "save"),
    "eqxrl.pbt.resume": lambda d: eqxrl.pbt.resume(d, progress=False),
}


@pytest.mark.parametrize("loader", sorted(LOADERS))
def test_python_loaders_refuse_untrusted_modules_before_importing(planted, loader):
    with pytest.raises(ValueError) as e:
        LOADERS[loader](planted.dir)
    planted.check_refusal(str(e.value))


COMMANDS = {
    "evaluate": lambda d: ["evaluate", str(d)],
    "train --resume": lambda d: ["train", "--resume", str(d), "--quiet"],
    "train --config": lambda d: ["train", "--config", str(d / "config.json"), "--run-dir", str(d / "new"), "--quiet"],
    "pbt --resume": lambda d: ["pbt", "--resume", str(d)],
}


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_commands_refuse_untrusted_modules_with_one_line(planted, command):
    code, err = _main(COMMANDS[command](planted.dir))
    assert code == 2
    planted.check_refusal(_one_error_line(err))
    assert not (planted.dir / "new").exists()


@pytest.mark.slow  # (over 2 s in the fast tier: tests/tiers.py)
@pytest.mark.parametrize("command", ["evaluate", pytest.param("train --resume", marks=pytest.mark.slow),
                                     pytest.param("train --config", marks=pytest.mark.slow),
                                     pytest.param("pbt --resume", marks=pytest.mark.slow)])  # fmt: skip
def test_python_m_eqxrl_in_the_run_directory_imports_nothing(tmp_path, command):
    # `python -m eqxrl` puts its working directory on sys.path: the planted module is importable.
    run = Planted(tmp_path, "agent_class")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    result = subprocess.run([sys.executable, "-m", "eqxrl", *COMMANDS[command](pathlib.Path("."))],
                            cwd=run.dir, env=env, capture_output=True, text=True, timeout=300)  # fmt: skip
    assert result.returncode == 2, result.stderr
    line = _one_error_line(result.stderr)
    assert f"agent_class names '{run.module}:Agent'" in line and f"--trust {run.module}" in line, line
    assert not (run.dir / "IMPORTED").exists() and not (run.dir / "new").exists()


def test_trusted_modules_load_and_zero_argument_callables_are_never_called(tmp_path, monkeypatch):
    run = Planted(tmp_path, "class")
    monkeypatch.syspath_prepend(str(run.dir))
    try:
        agent = eqxrl.runs.load_agent(run.dir, trust=(run.module,))
        assert type(agent.actor_torso).__name__ == "Torso" and agent.actor_torso.hidden_sizes == (8,)
        assert (run.dir / "IMPORTED").exists()  # trusted: imported
        # A trusted module's function is still not a class: refused before anyone calls it.
        for config, where in [
            ({**run.config, "agent": "planted", "agent_class": f"{run.module}:make"}, "agent_class"),
            ({**run.config, "agent_config": {"actor_torso": {"class": f"{run.module}:make"}}}, "the class of actor_torso"),
            ({**run.config, "agent_config": {"actor_torso": {"class": "eqxrl:__version__"}}}, "the class of actor_torso"),
        ]:
            with pytest.raises(ValueError, match=rf"{where} must be a class, got '[\w.]+:\w+', which is a (function|str)"):
                eqxrl.runs.agent_from_config(config, trust=(run.module,))
        with pytest.raises(ValueError, match=r"agent_class must be a subclass of eqxrl.agents:AbstractAgent, got '.*:Net'"):
            eqxrl.runs.agent_from_config({**run.config, "agent": "planted", "agent_class": f"{run.module}:Net"}, trust=(run.module,))
        with pytest.raises(ValueError, match=r"the class of actor_torso must be a class, got 'os:getcwd', which is a builtin"):
            eqxrl.runs.agent_from_config(_config("os", ""), trust=("os",))
        assert not (run.dir / "CALLED").exists()
        # The module trusted for one call is not trusted by the next.
        sys.modules.pop(run.module)
        with pytest.raises(ValueError, match="is not trusted"):
            eqxrl.runs.load_agent(run.dir)
        # A custom agent class from a trusted module loads (and is registered under the run's name).
        run.config.update(agent="planted", agent_class=f"{run.module}:Agent")
        (run.dir / "config.json").write_text(json.dumps(run.config))
        assert type(eqxrl.runs.load_agent(run.dir, trust=run.module)).__name__ == "Agent"
        assert AGENTS["planted"].__name__ == "Agent"
    finally:
        AGENTS.pop("planted", None)
        sys.modules.pop(run.module, None)


def test_registered_components_load_without_trust(tmp_path):
    config = _config("class", "")
    config["agent_config"]["actor_torso"] = {"class": f"{__name__}:RegisteredTorso", "hidden_sizes": [8]}
    # Already imported, but not registered: the module is still not trusted.
    with pytest.raises(ValueError, match=rf"names '{__name__}:RegisteredTorso', whose module '{__name__}' is not trusted"):
        eqxrl.runs.agent_from_config(config)
    assert eqxrl.register_component(RegisteredTorso) is RegisteredTorso
    assert type(eqxrl.runs.agent_from_config(config).actor_torso) is RegisteredTorso
    with pytest.raises(ValueError, match=r"register_component\(cls\) must be a class \(a subclass of equinox.Module\), got <built-in function getcwd>"):
        eqxrl.register_component(os.getcwd)


def test_trust_is_a_prefix_test_on_dotted_names():
    assert is_trusted("eqxrl.components") and is_trusted("eqxrl") and not is_trusted("eqxrl.__main__")
    assert not is_trusted("my_pkg") and not is_trusted("eqxrlx")
    with trusting(("my_pkg",)):
        assert is_trusted("my_pkg") and is_trusted("my_pkg.sub.mod") and not is_trusted("my_pkgx")
        with trusting("other"):
            assert is_trusted("other") and is_trusted("my_pkg")
        assert not is_trusted("other")
    assert not is_trusted("my_pkg")
    for call, owner in [(lambda: eqxrl.runs.load_run("x", trust=("../evil",)), "load_run"),
                        (lambda: eqxrl.load("x", trust=[1]), "load"),
                        (lambda: eqxrl.pbt.resume("x", trust=("a b",)), "resume")]:  # fmt: skip
        with pytest.raises(ValueError, match=rf"{owner}\(trust\) must be module names like \('my_pkg',\), got"):
            call()
    code, err = _main(["evaluate", "x", "--trust", "../evil"])
    assert code == 2 and "argument --trust: expected a module name like my_pkg or my_pkg.sub, got '../evil'" in _one_error_line(err)


# ---- config.json validated on read ----


def _edit_missing(config):
    del config["total_steps"]


def _edit_checkpoint_every(config):
    config["checkpoint_every"] = "abc"


def _edit_non_class(config):
    config["agent_config"]["actor_torso"] = {"class": "eqxrl.components:as_torso"}


def _edit_seeds(config):
    config["seeds"] = 0


EDITS = [
    (_edit_missing, r"is missing the key 'total_steps' \(an integer >= 1\): it was not written by eqxrl, or was edited"),
    (_edit_checkpoint_every, r"'checkpoint_every' must be an integer >= 1, got 'abc'"),
    (_edit_non_class, r"the class of actor_torso must be a class, got 'eqxrl.components:as_torso', which is a function"),
    (_edit_seeds, r"'seeds' must be an integer >= 1, got 0"),
]


@pytest.mark.parametrize("edit, message", EDITS)
def test_edited_configs_give_one_line_naming_the_key(edit, message, tmp_path):
    config = _config("none", "")
    edit(config)
    (tmp_path / "config.json").write_text(json.dumps(config))
    for load in (eqxrl.runs.load_run, lambda d: eqxrl.runs.resume_run(d, progress=False)):
        with pytest.raises(ValueError, match=message):
            load(tmp_path)
    for argv in (["evaluate", str(tmp_path)], ["train", "--resume", str(tmp_path), "--quiet"],
                 ["train", "--config", str(tmp_path / "config.json"), "--run-dir", str(tmp_path / "new"), "--quiet"]):  # fmt: skip
        code, err = _main(argv)
        assert code == 2 and re.search(message, _one_error_line(err)), err
    assert not (tmp_path / "new").exists()


# ---- optimizer specs and negative numbers on the command line ----


@pytest.mark.parametrize(
    "spec, message",
    [
        ("sgd:-1", r"NamedOptimizer\(learning_rate\) must be a finite number > 0, got -1.0"),
        ("adamw:1e-3:nan", r"NamedOptimizer\(weight_decay\) must be a finite number >= 0, got nan"),
        ("rmsprop:inf", r"NamedOptimizer\(learning_rate\) must be a finite number > 0, got inf"),
        ("adam:nan", r"learning_rate must be > 0, got nan"),
    ],
)
def test_bad_optimizer_specs_exit_2(spec, message, tmp_path):
    code, err = _main(["train", "ppo", "--optimizer", spec, "--run-dir", str(tmp_path / "run")])
    assert code == 2 and re.search(rf"argument --optimizer: {message}", _one_error_line(err)), err
    assert not (tmp_path / "run").exists()


def test_negative_infinity_reaches_the_flags_parser(tmp_path):
    # Refused with the field's own message (argparse once read -inf as an unknown option).
    for flag, value, message in [("--vf-coef", "-inf", "PPO(vf_coef) must be >= 0, got -inf"),
                                 ("--ent-coef", "-1e-3", "PPO(ent_coef) must be >= 0, got -0.001"),
                                 ("--gamma", "-nan", "PPO(gamma) must be in [0, 1], got nan")]:  # fmt: skip
        code, err = _main(["train", "ppo", flag, value, "--run-dir", str(tmp_path / "run")])
        assert code == 2 and message in _one_error_line(err), err
    # Accepted where the field allows it: the agent is built, and the budget is what is refused.
    used = tmp_path / "used"
    used.mkdir()
    (used / "file").write_text("")
    code, err = _main(["train", "sac", "--target-entropy-scale", "-inf", "--run-dir", str(used)])
    assert code == 2 and f"--run-dir {str(used)!r} already exists" in _one_error_line(err), err
    assert not (tmp_path / "run").exists()
    args = cli.build_parser().parse_args(attach_negative_values(["train", "ppo", "--vf-coef", "-inf"]))
    assert args.vf_coef == -np.inf


TINY = ["--total-steps", "256", "--num-envs", "2", "--rollout-length", "64", "--num-minibatches", "2",
        "--hidden-sizes", "8", "--eval-episodes", "2", "--checkpoint-every", "128", "--quiet"]  # fmt: skip


@pytest.mark.slow
def test_a_run_made_from_an_optimizer_spec_evaluates_and_resumes(tmp_path):
    run_dir = tmp_path / "run"
    code, err = _main(["train", "ppo", "--optimizer", "adamw:1e-3:1e-4", "--run-dir", str(run_dir), *TINY])
    assert code == 0, err
    config = json.loads((run_dir / "config.json").read_text())
    assert config["agent_config"]["optimizer"] == {"class": "eqxrl.components:NamedOptimizer", "name": "adamw",
                                                   "learning_rate": 0.001, "weight_decay": 0.0001}  # fmt: skip
    agent, state, _ = eqxrl.runs.load_run(run_dir)
    assert agent.optimizer == eqxrl.components.NamedOptimizer("adamw", 1e-3, 1e-4)
    code, err = _main(["evaluate", str(run_dir), "--episodes", "2"])
    assert code == 0, err
    code, err = _main(["train", "--resume", str(run_dir), "--total-steps", "384", "--quiet"])
    assert code == 0, err
    assert json.loads((run_dir / "config.json").read_text())["total_steps"] == 384
    # And it reproduces: --config trains the same run again, to the same parameters.
    again = tmp_path / "again"
    original = {**config, "total_steps": 256}
    (tmp_path / "config.json").write_text(json.dumps(original))
    code, err = _main(["train", "--config", str(tmp_path / "config.json"), "--run-dir", str(again), "--quiet"])
    assert code == 0, err
    _, reproduced, _ = eqxrl.runs.load_run(again)
    for a, b in zip(jax.tree.leaves(eqx.filter(state, eqx.is_inexact_array)), jax.tree.leaves(eqx.filter(reproduced, eqx.is_inexact_array))):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))



def test_named_optimizer_steps_as_optax_does_and_checks_its_numbers():
    import jax.numpy as jnp
    import optax

    from eqxrl.components import NamedOptimizer
    from eqxrl.core import foreign_promotion

    params = {"w": jnp.arange(3.0), "b": jnp.ones(2)}
    grads = {"w": jnp.array([0.5, -1.0, 2.0]), "b": jnp.array([1.0, -3.0])}
    for named, tx in [(NamedOptimizer("adamw", 1e-2, 1e-1), optax.adamw(1e-2, weight_decay=1e-1)),
                      (NamedOptimizer("sgd", 0.1), optax.sgd(0.1)), (NamedOptimizer("rmsprop", 1e-2), optax.rmsprop(1e-2))]:  # fmt: skip
        state, ours, theirs, reference = named.init(params), params, params, tx.init(params)
        for _ in range(3):
            ours, state = named.update(grads, state, ours)
            with foreign_promotion():  # optax itself is not strict-promotion clean
                updates, reference = tx.update(grads, reference, theirs)
            theirs = optax.apply_updates(theirs, updates)
        for a, b in zip(jax.tree.leaves(ours), jax.tree.leaves(theirs)):
            np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match=r"NamedOptimizer\(name\) must be one of \['adamw', 'rmsprop', 'sgd'\], got 'lion'"):
        NamedOptimizer("lion", 1e-3)
    with pytest.raises(ValueError, match=r"NamedOptimizer\(weight_decay\) must be 0 for sgd \(only adamw decays weights\), got 0.1"):
        NamedOptimizer("sgd", 1e-3, 0.1)
