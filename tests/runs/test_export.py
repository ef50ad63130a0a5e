"""Policy export (`eqxrl.export`, `eqxrl.runs.export_run`, `eqxrl export`): every agent's policy as
serialised StableHLO and ONNX, checked against `eqxrl.runs.load_policy` on 1,000 recorded
observations where eqxrl (StableHLO) or JAX and eqxrl (ONNX) cannot be imported, and its sampling
policy (noise as inputs) against `act_from_noise` on the same noise, drawn by NumPy
(`.ci/export_parity.py`; CI runs it again in a virtual environment without JAX)."""

import importlib.util
import json
import os
import pathlib
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from cli_calls import main_captured
from export_cases import CASES, ENV_NAMES, OFF, ON
from typecheck import no_runtime_typecheck

import eqxrl
from eqxrl.agents import DQN, PPO
from eqxrl.components.distributions import NOISE_KINDS
from eqxrl.envs import ACTION_MASK
from eqxrl.runs import export, export_run, load_policy, read_description, save_run
from eqxrl.runs._export import ONNX_KEY, policy_function  # (private: the exported function and its key input's name, compared with the files)
from eqxrl.testing.probes import MaskedActions

if importlib.util.find_spec("jax2onnx") is None or importlib.util.find_spec("onnxruntime") is None:
    # (found, not imported: importing jax2onnx takes a second in every worker that collects this module)
    pytest.skip("the export tests need eqxrl[export] (jax2onnx, onnxruntime)", allow_module_level=True)
PARITY = pathlib.Path(__file__).parents[2] / ".ci" / "export_parity.py"
ONNX_REFUSED = {"ppo_recurrent": "jnp.split"}
"""The policies jax2onnx cannot express, and the operation its one-line error names."""
STEPS, ENVS = 25, 40  # 1,000 recorded observations


def _run_dir(path, agent, env_name=None):
    """A run directory of `agent`'s initial state (no training: parity needs parameters, not skill)."""
    metrics = {"env_steps": np.zeros(1, np.int32), "episode_return": np.full(1, np.nan, np.float32)}
    return save_run(path, agent, agent.init(jax.random.key(0)), metrics, total_steps=1, env_name=env_name)


def _record(agent, state, policy):
    """1,000 observations of the policy's own episodes (sampled, so they spread), as flat inputs of
    the exported function, and the outputs it must give: `action` from `policy` (load_policy's),
    the rest from the unexported function."""
    fn, inputs, outputs = policy_function(agent, state)
    traj = eqxrl.rollout(agent, state, jax.random.key(1), STEPS, num_envs=ENVS, deterministic=False)
    obs = jax.tree.map(jnp.asarray, traj["obs"])
    flat = lambda x: np.asarray(x).reshape(STEPS * ENVS, *np.shape(x)[2:])  # noqa: E731
    if agent.initial_carry(state, ()) is None:
        actions = np.asarray(policy(jax.tree.map(lambda x: jnp.asarray(flat(x)), obs)))
        args = [flat(x) for x in jax.tree.leaves(obs)]
    else:  # the carry each step starts from, reset where an episode starts
        done = np.asarray(traj["terminated"]) | np.asarray(traj["truncated"])
        reset = np.concatenate([np.ones((1, ENVS), bool), done[:-1]])
        carry, carries, actions = policy.initial_carry((ENVS,)), [], []
        for t in range(STEPS):
            carries.append(carry)
            action, carry = policy.step(jax.tree.map(lambda x: x[t], obs), carry, jnp.asarray(reset[t]))
            actions.append(np.asarray(action))
        stack = lambda *xs: np.stack([np.asarray(x) for x in xs])  # noqa: E731
        actions = flat(np.stack(actions))
        args = [flat(x) for x in jax.tree.leaves(obs)]
        args += [flat(x) for x in jax.tree.leaves(jax.tree.map(stack, *carries))] + [flat(reset)]
    got = jax.jit(fn)(*args)
    data = {f"in:{n}": a for (n, _), a in zip(inputs, args)}
    data.update({f"out:{n}": np.asarray(x) for (n, _), x in zip(outputs, got)})
    data["out:action"] = actions
    assert np.array_equal(np.asarray(got[0]), actions) or np.issubdtype(actions.dtype, np.floating)
    return data


def _draw_noise(description, n, seed):
    """The noise inputs of a sampling policy's `description`, for a batch of `n`, drawn by NumPy with the
    line the description gives (what a user without JAX runs)."""
    rng = np.random.default_rng(seed)
    out = {}
    for i in description["noise"]:
        noise = eval(i["numpy"].replace("batch", str(n)), {"rng": rng, "np": np})  # (the description's own line)
        assert noise.dtype == np.float32 and list(noise.shape) == [n, *i["shape"][1:]], (i, noise.shape)
        out[i["name"]] = noise
    return out


def _gap(z):
    """The gap between the best and the second best of `z` along its last axis."""
    top2 = np.sort(z.astype(np.float64), axis=-1)[..., -2:]
    return top2[..., 1] - top2[..., 0]


def _record_sample(agent, state, data, description, seed):
    """The sampling policy's parity data: `data`'s recorded inputs with noise drawn by NumPy, and the
    outputs eqxrl computes from that noise (`policy_function(with_noise=True)`, `act_from_noise`); for a
    discrete action `margin:action`, the gap of the argmax that picked it (near ties may break either way)."""
    fn, inputs, outputs = policy_function(agent, state, deterministic=False, with_noise=True)
    n = len(next(v for k, v in data.items() if k.startswith("in:")))
    noise = _draw_noise(description, n, seed)
    args = [data[f"in:{name}"] if f"in:{name}" in data else noise[name] for name, _ in inputs]
    out = {f"in:{name}": a for (name, _), a in zip(inputs, args)}
    out.update({f"out:{name}": np.asarray(x) for (name, _), x in zip(outputs, jax.jit(fn)(*args))})
    scores = out.get("out:scores")
    if scores is not None and "in:noise" in out:  # a categorical policy: the Gumbel-max of logits + noise
        out["margin:action"] = _gap(scores + out["in:noise"])
    elif scores is not None:  # epsilon-greedy: the greedy action's, or the random action's
        out["margin:action"] = np.minimum(_gap(scores), _gap(out["in:noise.action"]))
    return out


def _export_every_case(out, tmp_path):
    """Every case trained for no step (its initial state, saved as a run directory and loaded back by
    `load_policy`), exported in both formats into `out` beside its recorded inputs and expected outputs,
    and its sampling policy (noise as inputs) as `<case>-sample.<format>` beside the same observations,
    noise drawn by NumPy and the actions eqxrl samples from it.
    **Returns:** `{(case, format[, "sample"]): description, or the one-line error}`."""
    records = {}
    for i, (name, make) in enumerate(CASES.items()):
        agent = make()
        run_dir = _run_dir(tmp_path / name, agent, ENV_NAMES.get(name))
        policy = load_policy(run_dir)
        data = _record(policy.agent, policy.state, policy)
        np.savez(out / f"{name}.npz", **data)
        for fmt in ("stablehlo", "onnx"):
            for kind, path, flags in [((), f"{name}.{fmt}", {}), (("sample",), f"{name}-sample.{fmt}", dict(deterministic=False, noise=True))]:
                try:
                    records[(name, fmt, *kind)] = export_run(run_dir, out / path, format=fmt, overwrite=True, **flags)
                except ValueError as e:
                    records[(name, fmt, *kind)] = str(e)
        description = records[name, "stablehlo", "sample"]
        np.savez(out / f"{name}-sample.npz", **_record_sample(policy.agent, policy.state, data, description, seed=i))
    return records


def _parity(out, fmt):
    result = subprocess.run([sys.executable, str(PARITY), str(out), "--format", fmt], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout.splitlines()


@pytest.mark.slow  # (over 2 s in the fast tier: tests/tiers.py)
def test_export_parity_of_every_agent(tmp_path):
    """Exported policies give load_policy's actions (and the unexported scores, env actions and carries)
    on 1,000 recorded observations: StableHLO where eqxrl cannot be imported, ONNX where neither JAX nor
    eqxrl can. One test, so that the cases are exported once (CI's -n auto would export them in two
    workers for two tests). Into $EQXRL_EXPORT_PARITY_DIR when set: .ci/run checks the ONNX files
    there again in a virtual environment without JAX."""
    out = pathlib.Path(os.environ.get("EQXRL_EXPORT_PARITY_DIR") or tmp_path / "export")
    out.mkdir(parents=True, exist_ok=True)
    records = _export_every_case(out, tmp_path)
    refused = {k: r for k, r in records.items() if k[1] == "stablehlo" and isinstance(r, str)}
    assert not refused, refused
    lines = _parity(out, "stablehlo")
    assert len(lines) == 2 * len(CASES) and all(line.endswith("ok") for line in lines), "\n".join(lines)
    for name in CASES:
        for record in (records[name, "onnx"], records[name, "onnx", "sample"]):
            if name in ONNX_REFUSED:
                assert isinstance(record, str) and "\n" not in record and ONNX_REFUSED[name] in record, record
                assert "cannot express ppo (recurrent)'s policy" in record, record
            else:
                assert isinstance(record, dict), record
    lines = _parity(out, "onnx")
    assert len(lines) == 2 * (len(CASES) - len(ONNX_REFUSED)) and all(line.endswith("ok") for line in lines), "\n".join(lines)
    print("\n".join(lines))
    _check_descriptions(out)


def _check_descriptions(out):
    ppo = json.loads((out / "ppo.onnx.json").read_text())
    assert ppo["agent"] == "ppo" and ppo["format"] == "onnx" and ppo["converter"].startswith("jax2onnx ")
    assert ppo["action_space"] == {"type": "Discrete", "n": 2} and ppo["observation_space"]["shape"] == [4]
    assert [i["name"] for i in ppo["inputs"]] == ["obs"] and ppo["inputs"][0]["shape"] == ["batch", 4]
    assert [o["name"] for o in ppo["outputs"]] == ["action", "scores"]
    norm = ppo["preprocessing"]["observation_normalization"]["obs_stats"]
    assert len(norm["mean"]) == 4 and norm["clip"] == 10.0
    sac = json.loads((out / "sac.stablehlo.json").read_text())
    assert [o["name"] for o in sac["outputs"]] == ["action", "env_action"]
    assert sac["preprocessing"]["action_to_env"] == [{"op": "rescale", "low": -1.0, "high": 1.0, "to_low": [-2.0], "to_high": [2.0]}]
    sample = json.loads((out / "ppo-sample.onnx.json").read_text())
    assert sample["deterministic"] is False and sample["key"] is None and [i["name"] for i in sample["inputs"]] == ["obs", "noise"]
    assert sample["noise"] == [{"name": "noise", "shape": ["batch", 2], "dtype": "float32", "distribution": "gumbel",
                                "description": NOISE_KINDS["gumbel"], "numpy": "rng.gumbel(size=(batch, 2)).astype(np.float32)"}]  # fmt: skip
    dqn = json.loads((out / "dqn-sample.stablehlo.json").read_text())
    assert [(i["name"], i["distribution"]) for i in dqn["noise"]] == [("noise.action", "gumbel"), ("noise.explore", "uniform")]
    rec = json.loads((out / "ppo_recurrent.stablehlo.json").read_text())
    assert [i["name"] for i in rec["inputs"]] == ["obs", "carry", "reset"] and rec["outputs"][-1]["name"] == "carry"
    assert set(rec["versions"]) == {"eqxrl", "jax"}


@pytest.mark.slow  # (over 2 s in the fast tier: tests/tiers.py)
@pytest.mark.parametrize("make", [CASES["ppo_box"], CASES["sac_discrete"]], ids=["ppo_box", "sac_discrete"])
def test_sampling_policy_takes_the_key(make, tmp_path):
    """StableHLO's sampling policy draws what `act` draws with the key given as data."""
    agent = make()
    state = agent.init(jax.random.key(0))
    record = export(agent, state, tmp_path / "p.stablehlo", deterministic=False)
    assert record["inputs"][-1] == {"name": "key", "shape": [2], "dtype": "uint32"}
    obs = jnp.asarray(eqxrl.rollout(agent, state, jax.random.key(1), 8, num_envs=4)["obs"]).reshape(32, -1)
    key = jax.random.key(5)
    call = jax.export.deserialize(bytearray((tmp_path / "p.stablehlo").read_bytes())).call
    got = call(obs, np.asarray(jax.random.key_data(key)))[0]
    np.testing.assert_allclose(np.asarray(got), np.asarray(agent.act(state, obs, key)), atol=1e-6)


@pytest.mark.slow  # (over 2 s in the fast tier: tests/tiers.py)
@pytest.mark.parametrize("cls", [PPO, DQN])
def test_dict_observations_with_action_masks(cls, tmp_path):
    """A Dict observation is one input per entry (`obs.<name>`), its action mask among them; both formats
    give act's actions and the masked scores (an illegal action's the lowest float), and the ONNX sampling
    policy act_from_noise's (legal) actions."""
    import onnxruntime

    agent = cls(MaskedActions(), **(ON if cls is PPO else OFF))
    state = agent.init(jax.random.key(0))
    obs = jax.vmap(lambda k: agent.eval_env.reset(k)[1].obs)(jax.random.split(jax.random.key(1), 64))
    want = np.asarray(agent.act(state, obs, None, deterministic=True))
    inputs = {"obs.action_mask": np.asarray(obs[ACTION_MASK]), "obs.legal": np.asarray(obs["legal"])}
    for fmt in ("stablehlo", "onnx"):
        # (a fixed batch: the suite's runtime type checks cannot match jaxtyping's *batch to a symbolic one)
        record = export(agent, state, tmp_path / f"p.{fmt}", format=fmt, batch_size=64)
        assert [i["name"] for i in record["inputs"]] == list(inputs), record["inputs"]
        if fmt == "onnx":
            action, scores = onnxruntime.InferenceSession(tmp_path / "p.onnx").run(None, inputs)
        else:
            exported = jax.export.deserialize(bytearray((tmp_path / "p.stablehlo").read_bytes()))
            action, scores = (np.asarray(x) for x in exported.call(*inputs.values()))
        np.testing.assert_array_equal(action, want)
        assert np.all(inputs["obs.action_mask"][np.arange(64), action]), fmt  # every action legal
        assert np.all(scores[inputs["obs.action_mask"] == 0] == np.finfo(np.float32).min), fmt
    # The ONNX sampling policy, noise from NumPy: act_from_noise's actions, every one legal.
    description = export(agent, state, tmp_path / "s.onnx", format="onnx", deterministic=False, batch_size=64)
    noise = _draw_noise(description, 64, seed=0)
    action = onnxruntime.InferenceSession(tmp_path / "s.onnx").run(None, {**inputs, **noise})[0]
    tree = noise["noise"] if "noise" in noise else {k.split(".")[1]: v for k, v in noise.items()}
    np.testing.assert_array_equal(action, np.asarray(agent.act_from_noise(state, obs, jax.tree.map(jnp.asarray, tree))))
    assert np.all(inputs["obs.action_mask"][np.arange(64), action])


def test_bad_arguments(tmp_path):
    agent = DQN("CartPole-v1", **OFF)
    state = None  # (every check comes before the state is read)
    (tmp_path / "there.onnx").write_bytes(b"")
    cases = [
        (dict(path=tmp_path / "p", format="tflite"), "export(format) must be 'stablehlo' or 'onnx', got 'tflite'"),
        (dict(path=tmp_path / "there.onnx", format="onnx"), "export(path) must not exist (overwrite=True, or --force on the command line, replaces it)"),
        (dict(path=tmp_path / "no" / "p", format="onnx"), "export(path) must be in an existing directory"),
        (dict(path=tmp_path / "p", batch_size=0), "export(batch_size) must be None (a symbolic batch) or a positive int, got 0"),
        (dict(path=tmp_path / "p", format="onnx", deterministic=False, noise=False), ONNX_KEY),
        (dict(path=tmp_path / "p", noise=True), "export(noise) must be None or False for a deterministic policy (it draws nothing), got True"),
        (dict(path=tmp_path / "p", deterministic=False, noise="yes"), "export(noise) must be None (the format's default), True or False, got 'yes'"),
    ]
    for kwargs, message in cases:
        with no_runtime_typecheck(), pytest.raises(ValueError) as info:
            export(agent, state, **kwargs)
        assert str(info.value).startswith(message) and "\n" not in str(info.value), str(info.value)


@pytest.mark.slow  # (over 2 s in the fast tier: tests/tiers.py)
def test_agent_without_a_noise_sampler_is_refused(tmp_path):
    """An agent whose act samples from a key only (the tutorial's A2C: no noise_spec or act_from_noise)
    has no ONNX sampling policy: one line naming the agent and the method it lacks. Its StableHLO
    sampling policy takes the key, as before."""
    from tutorial_agent import load_tutorial_agent

    agent = load_tutorial_agent()["A2C"](eqxrl.envs.make("CartPole-v1"), num_envs=2, rollout_length=8)
    state = agent.init(jax.random.key(0))
    for fmt, flags in (("onnx", {}), ("stablehlo", dict(noise=True))):
        with no_runtime_typecheck(), pytest.raises(ValueError) as info:
            export(agent, state, tmp_path / f"p.{fmt}", format=fmt, deterministic=False, **flags)
        assert str(info.value) == (
            "export(deterministic=False, noise=True): A2C.noise_spec: A2C samples its actions from a PRNG key only, so "
            "its sampling policy cannot take its noise as an input (implement noise_spec and act_from_noise; export it "
            "deterministic, or as StableHLO with the key)"
        ), str(info.value)
    assert export(agent, state, tmp_path / "p.stablehlo", deterministic=False)["key"]["input"] == "key"


@pytest.mark.slow  # (over 2 s in the fast tier: tests/tiers.py)
def test_export_takes_one_member(tmp_path):
    agent = DQN("CartPole-v1", **OFF)
    seeds = jax.vmap(agent.init)(jax.random.split(jax.random.key(0), 2))
    stacked = eqxrl.stack([agent, agent])
    cases = [
        (agent, seeds, "export(state) must be one member's state: .learner.q"),
        (stacked, seeds, "export(agent) must be one agent, got a Stacked population of 2: export one member"),
    ]
    for which, state, message in cases:
        with no_runtime_typecheck(), pytest.raises(ValueError) as info:
            export(which, state, tmp_path / "p.stablehlo")
        assert str(info.value).startswith(message) and "\n" not in str(info.value), str(info.value)


@pytest.mark.slow  # (over 2 s in the fast tier: tests/tiers.py)
def test_export_command(tmp_path):
    agent = DQN("CartPole-v1", **OFF)
    run_dir = _run_dir(tmp_path / "run", agent)
    code, out, err = main_captured(["export", str(run_dir), "--format", "onnx"])
    assert code == 0 and (run_dir / "policy.onnx").is_file() and (run_dir / "policy.onnx.json").is_file(), err
    assert "inputs: obs['batch', 4]; outputs: action['batch'], scores['batch', 2]" in out
    code, out, err = main_captured(["export", str(run_dir), "--sample", "--out", str(tmp_path / "s.stablehlo")])
    assert code == 0 and (tmp_path / "s.stablehlo").is_file(), err
    assert "inputs: obs['batch', 4], key[2];" in out
    code, out, err = main_captured(["export", str(run_dir), "--sample", "--format", "onnx"])
    assert code == 0 and (run_dir / "policy-sample.onnx").is_file(), err
    assert "inputs: obs['batch', 4], noise.action['batch', 2], noise.explore['batch'];" in out
    code, out, err = main_captured(["export", str(run_dir), "--sample", "--noise", "--out", str(tmp_path / "n.stablehlo")])
    assert code == 0 and read_description(tmp_path / "n.stablehlo")["noise"][1]["name"] == "noise.explore", err
    bad = [
        (["--format", "onnx"], "export(path) must not exist (overwrite=True, or --force on the command line, replaces it)"),
        (["--noise"], "argument --noise: needs --sample (a deterministic policy draws no noise)"),
        (["--format", "tflite"], "argument --format: invalid choice: 'tflite'"),
        (["--checkpoint", "first"], "argument --checkpoint: must be best, last or an env step"),
    ]
    for flags, message in bad:
        code, _, err = main_captured(["export", str(run_dir), *flags])
        assert code == 2 and message in err.splitlines()[-1], err


@pytest.mark.slow  # (over 2 s in the fast tier: tests/tiers.py)
def test_docs_page_runs(tmp_path, monkeypatch):
    """docs/export.md's Python blocks run, in order, and do what they say."""
    import re

    monkeypatch.chdir(tmp_path)
    text = (pathlib.Path(__file__).parents[2] / "docs" / "export.md").read_text()
    namespace = {"__name__": "docs_export"}
    for i, block in enumerate(re.findall(r"^```python[ \t]*\n(.*?)^```[ \t]*$", text, re.DOTALL | re.MULTILINE)):
        exec(compile(block, f"docs/export.md [python block {i + 1}]", "exec"), namespace)
    assert [o["name"] for o in namespace["description"]["outputs"]] == ["action", "scores"]
    assert namespace["action"].shape == (3,) and namespace["scores"].shape == (3, 2)
    assert (tmp_path / "policy.stablehlo.json").is_file() and (tmp_path / "policy.onnx.json").is_file()
    noise = namespace["description"]["noise"]  # (the sampling block's, as its comments print it)
    assert [(i["name"], i["shape"], i["distribution"]) for i in noise] == [("noise", ["batch", 2], "gumbel")]
    assert noise[0]["numpy"] == "rng.gumbel(size=(batch, 2)).astype(np.float32)"
    assert (tmp_path / "policy-sample.onnx").is_file() and set(np.unique(namespace["action"])) <= {0, 1}
