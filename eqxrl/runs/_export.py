"""Policy export: a trained policy as a file another program runs without eqxrl.

Two formats:

- `"stablehlo"`: serialised StableHLO (`jax.export`), loaded with JAX alone
  (`jax.export.deserialize(data).call(*inputs)`); the batch dimension is symbolic. Loading
  it deserialises data (a flatbuffer), it runs no Python code.
- `"onnx"`: an ONNX model, run with onnxruntime (no JAX). Converted by jax2onnx, the
  converter in the registry that takes a jitted JAX function directly (no detour through
  TensorFlow), is maintained against current JAX and names the primitive it cannot convert.
  The batch dimension is symbolic ("batch") unless `batch_size` fixes it.

The exported function is the agent's own `act` (`act_with_carry` for a recurrent policy), so
observation normalisation is baked in; a sampling policy's is `act_from_noise` where it takes its
noise as input. Inputs: the observation leaves (`obs`, or `obs.<name>` for a `Dict`), then for a
recurrent policy `carry` and `reset`, then for a sampling policy either `key` (StableHLO's
default: `jax.random.key_data` of a key, uint32[2]) or its noise (ONNX's, StableHLO's with
`noise=True`: `noise`, or `noise.<name>` for several arrays, float32 of the shapes and
distributions `agent.noise_spec` gives, the batch axis first). Outputs: `action` (what
`eqxrl.runs.load_policy` returns), for `Box` actions `env_action` (the action clipped or
rescaled as the env receives it), for a discrete policy whose scores eqxrl knows `scores`
(logits or Q-values, argmax = the greedy action), and a recurrent policy's new `carry`.
A JSON file beside it (`<path>.json`) records these, the spaces and the preprocessing.
"""

import importlib.metadata
import inspect
import json
import logging
import pathlib
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ..agents import DQN, MPO, PPO, PQN, SAC, Stacked, agent_name
from ..components import Noise, RunningMeanStd
from ..components.distributions import NOISE_KINDS
from ..core import __version__, one_line
from ..envs import Box, ClipAction, Dict, Discrete, MultiBinary, MultiDiscrete, RescaleAction
from ..store import atomic_write_bytes, write_json
from ._files import PathLike

__all__ = ["FORMATS", "export", "export_run", "noise_inputs", "policy_function", "read_description"]

FORMATS = ("stablehlo", "onnx")
SUFFIXES = {"stablehlo": ".stablehlo", "onnx": ".onnx"}
BATCH = "batch"
ONNX_KEY = (
    "export(noise) must be True or None for format='onnx' (a sampling ONNX policy takes its noise as inputs), got False: "
    "ONNX has no counterpart of JAX's random_bits (threefry2x32); use format='stablehlo' for a policy that takes the key"
)


def _names(prefix: str, tree: Any) -> list[str]:
    leaves = jax.tree_util.tree_leaves_with_path(tree, is_leaf=lambda x: isinstance(x, Noise))
    paths = [jax.tree_util.keystr(p, simple=True, separator=".") for p, _ in leaves]
    return [prefix if not p else f"{prefix}.{p}" for p in paths]


def _env_action(agent: Any, action: jax.Array) -> jax.Array | None:
    """The action as the env receives it: `eval_env`'s own action wrappers (clip, rescale)
    applied, None when it has none."""
    steps = _action_steps(agent)
    if not steps:
        return None
    for kind, low, high, to_low, to_high in steps:
        action = jnp.clip(action, low, high)
        if kind == "rescale":
            action = to_low + (action - low) * (to_high - to_low) / (high - low)
    return action


def _action_steps(agent: Any) -> list[tuple]:
    env, steps = agent.eval_env, []
    while env is not agent.env and isinstance(env, (ClipAction, RescaleAction)):
        space = env.env.action_space
        if isinstance(env, ClipAction):
            steps.append(("clip", space.low, space.high, None, None))
        else:
            steps.append(("rescale", env.low, env.high, space.low, space.high))
        env = env.env
    return steps


def _masked(dist: Any) -> jax.Array:
    logits = dist.logits
    return logits if dist.mask is None else jnp.where(dist.mask, logits, jnp.finfo(logits.dtype).min)


def _scores(agent: Any, state: Any, obs: Any, carry: Any, reset: Any) -> jax.Array | None:
    """A discrete policy's logits or Q-values (argmax = its greedy action); None for the
    others (continuous, `MultiDiscrete`, agents eqxrl does not know the scores of)."""
    if not isinstance(getattr(agent.env, "action_space", None), Discrete):
        return None
    if type(agent) is PPO:
        x = agent.normalize(state.obs_stats, agent.flatten(obs))
        if agent.recurrent:  # (as act_with_carry: the torso sees the whole stored observation)
            return _masked(state.actor(state.torso(x, carry, jnp.asarray(reset, bool))[0]))
        features, mask = agent.layout.split(x)
        logits = _masked(agent.policy(state, features))
        return logits if mask is None else jnp.where(mask, logits, jnp.finfo(logits.dtype).min)
    if type(agent) is PQN:
        return agent.q_values(state.q, agent.normalize(state.obs_stats, agent.flatten(obs)))
    x = agent.normalize(state.obs_stats, agent.flatten(obs)) if type(agent) in (DQN, SAC, MPO) else None
    if type(agent) is DQN:
        return agent.q_values(state.learner.q, x)
    if type(agent) is SAC:
        return _masked(agent.policy(state.learner.actor, x))
    if type(agent) is MPO:
        return _masked(agent.categorical(state.learner.policy, x))
    return None


def _is_noise(x: Any) -> bool:
    return isinstance(x, Noise)


def noise_inputs(agent: Any, state: Any) -> list[tuple[str, Noise]]:
    """**Returns:** a sampling policy's noise inputs in order, `(name, Noise)` for a batch of one
    (`noise`, or `noise.<name>` for a dict): `agent.noise_spec(state, (1,))` flattened."""
    spec = agent.noise_spec(state, (1,))
    return list(zip(_names("noise", spec), jax.tree.leaves(spec, is_leaf=_is_noise)))


def policy_function(agent: Any, state: Any, deterministic: bool = True, with_key: bool = False, with_noise: bool = False):
    """The function `export` exports, unexported (the parity tests' reference): with `with_key` the
    sampling policy of the key given as data, with `with_noise` the one of its noise given (`act_from_noise`).

    **Returns:** `(fn, inputs, outputs)`: `fn(*inputs)` returns a tuple of arrays; `inputs` and
    `outputs`, lists of `(name, jax.ShapeDtypeStruct)` for a batch of one (the batch axis first)."""
    if with_key and with_noise:
        raise ValueError("policy_function(with_key, with_noise): a sampling policy takes a key or its noise, not both")
    recurrent = agent.initial_carry(state, ()) is not None
    obs1 = jax.eval_shape(lambda k: agent.eval_env.reset(k)[1].obs, jax.random.key(0))
    obs_leaves, obs_def = jax.tree.flatten(obs1)
    carry1 = agent.initial_carry(state, (1,)) if recurrent else None
    carry_leaves, carry_def = jax.tree.flatten(carry1)
    n_obs, n_carry = len(obs_leaves), len(carry_leaves)
    spec = lambda x, lead=(1,): jax.ShapeDtypeStruct(lead + tuple(x.shape), x.dtype)  # noqa: E731
    inputs = [(n, spec(x)) for n, x in zip(_names("obs", obs1), obs_leaves)]
    if recurrent:
        inputs += [(n, spec(x, ())) for n, x in zip(_names("carry", carry1), carry_leaves)]
        inputs.append(("reset", jax.ShapeDtypeStruct((1,), jnp.bool_)))
    if with_key:
        inputs.append(("key", jax.ShapeDtypeStruct(jax.random.key_data(jax.random.key(0)).shape, jnp.uint32)))
    noise_def = None
    if with_noise:
        spec = agent.noise_spec(state, (1,))
        noise_def = jax.tree.structure(spec, is_leaf=_is_noise)
        inputs += [(n, jax.ShapeDtypeStruct(s.shape, jnp.float32)) for n, s in noise_inputs(agent, state)]
    n_in = n_obs + n_carry + (1 if recurrent else 0)

    def fn(*args):
        obs = jax.tree.unflatten(obs_def, args[:n_obs])
        carry = jax.tree.unflatten(carry_def, args[n_obs : n_obs + n_carry]) if recurrent else None
        reset = args[n_obs + n_carry] if recurrent else None
        key = jax.random.wrap_key_data(args[-1]) if with_key else None
        if with_noise:
            noise = jax.tree.unflatten(noise_def, args[n_in:])
            if recurrent:
                action, new_carry = agent.act_with_carry_from_noise(state, obs, carry, reset, noise)
            else:
                action, new_carry = agent.act_from_noise(state, obs, noise), None
        elif recurrent:
            action, new_carry = agent.act_with_carry(state, obs, carry, reset, key, deterministic)
        else:
            action, new_carry = agent.act(state, obs, key, deterministic=deterministic), None
        out = {"action": action}
        env_action = _env_action(agent, action)
        if env_action is not None:
            out["env_action"] = env_action
        scores = _scores(agent, state, obs, carry, reset)
        if scores is not None:
            out["scores"] = scores
        out.update(zip(_names("carry", new_carry), jax.tree.leaves(new_carry)))
        return tuple(out.values()), tuple(out)

    names: list = []

    def traced(*args):
        out, n = fn(*args)
        names.append(n)
        return out

    shapes = jax.eval_shape(traced, *(s for _, s in inputs))
    return (lambda *a: fn(*a)[0]), inputs, list(zip(names[0], shapes))


def _space(space: Any) -> dict[str, Any]:
    """A JSON record of an action or observation space."""
    kind = type(space).__name__
    if isinstance(space, Discrete):
        return {"type": kind, "n": space.n}
    if isinstance(space, Box):
        return {"type": kind, "shape": list(space.shape), "dtype": str(np.dtype(space.dtype)),
                "low": np.broadcast_to(np.asarray(space.low), space.shape).tolist(),
                "high": np.broadcast_to(np.asarray(space.high), space.shape).tolist()}  # fmt: skip
    if isinstance(space, MultiDiscrete):
        return {"type": kind, "nvec": list(space.nvec)}
    if isinstance(space, MultiBinary):
        return {"type": kind, "n": space.n}
    if isinstance(space, Dict):
        return {"type": kind, "spaces": {n: _space(s) for n, s in zip(space._names, space._spaces)}}
    return {"type": kind, "repr": repr(space)}


def _preprocessing(agent: Any, state: Any) -> dict[str, Any]:
    """What the exported function does besides the networks: the observation normalisation
    (baked in) and the action handling of `eval_env` (in `env_action`)."""
    norm = {}
    defaults = {k: p.default for k, p in inspect.signature(RunningMeanStd.normalize).parameters.items() if k in ("clip", "eps")}
    for where in ("obs_stats", "learner.policy_stats"):
        stats = state
        for part in where.split("."):
            stats = getattr(stats, part, None)
        if isinstance(stats, RunningMeanStd):
            norm[where] = {"mean": np.asarray(stats.mean).tolist(), "var": np.asarray(stats.var).tolist(), **defaults,
                           "formula": "clip((x - mean) / sqrt(var + eps), -clip, clip)"}  # fmt: skip
    actions = []
    for kind, low, high, to_low, to_high in _action_steps(agent):
        step = {"op": kind, "low": np.asarray(low).tolist(), "high": np.asarray(high).tolist()}
        if kind == "rescale":
            step.update(to_low=np.asarray(to_low).tolist(), to_high=np.asarray(to_high).tolist())
        actions.append(step)
    return {"observation_normalization": norm or None, "action_to_env": actions or None}


def _check(path: Any, format: Any, batch_size: Any, overwrite: bool) -> pathlib.Path:
    if format not in FORMATS:
        raise ValueError(f"export(format) must be 'stablehlo' or 'onnx', got {format!r}")
    if batch_size is not None and (isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1):
        raise ValueError(f"export(batch_size) must be None (a symbolic batch) or a positive int, got {batch_size!r}")
    path = pathlib.Path(path)
    if path.exists() and not overwrite:
        raise ValueError(f"export(path) must not exist (overwrite=True, or --force on the command line, replaces it), got {str(path)!r}")
    if not path.parent.is_dir():
        raise ValueError(f"export(path) must be in an existing directory, got {str(path)!r}")
    return path


def _check_one_member(agent: Any, state: Any) -> None:
    """`export` takes one agent and one member's state (what `load_policy` holds), not a population."""
    if isinstance(agent, Stacked):
        raise ValueError(
            f"export(agent) must be one agent, got a Stacked population of {agent.size}: export one member "
            "(eqxrl.runs.export_run(run_dir, member=i), or eqxrl.runs.load_policy(run_dir, member=i).agent and .state)"
        )
    want = jax.eval_shape(agent.init, jax.random.key(0))
    for (where, x), y in zip(jax.tree_util.tree_leaves_with_path(state), jax.tree.leaves(want)):
        if np.shape(x) != y.shape:
            raise ValueError(
                f"export(state) must be one member's state: {jax.tree_util.keystr(where)} has shape {np.shape(x)} "
                f"where {agent_name(agent)}.init gives {y.shape} (a seed batch? pass jax.tree.map(lambda x: x[i], state), "
                "or export_run(run_dir, member=i))"
            )


def _sampling(format: Any, deterministic: Any, noise: Any) -> str | None:
    """**Returns:** how the exported policy gets its randomness: None (deterministic), `"key"` or `"noise"`."""
    if noise not in (None, True, False):
        raise ValueError(f"export(noise) must be None (the format's default), True or False, got {noise!r}")
    if deterministic:
        if noise:
            raise ValueError("export(noise) must be None or False for a deterministic policy (it draws nothing), got True")
        return None
    if format == "onnx" and noise is False:
        raise ValueError(ONNX_KEY)
    return "noise" if (noise or format == "onnx") else "key"


def _noise_record(agent: Any, state: Any, batch: Any) -> list[dict[str, Any]]:
    """The noise inputs' description: name, shape, dtype, distribution and a NumPy line that draws it."""
    out = []
    for n, s in noise_inputs(agent, state):
        shape = [batch, *s.shape[1:]]
        numpy = s.numpy("(" + ", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else "") + ")")
        out.append({"name": n, "shape": shape, "dtype": "float32", "distribution": s.kind, "description": NOISE_KINDS[s.kind],
                    "numpy": numpy})  # fmt: skip
    return out


def export(
    agent: Any, state: Any, path: PathLike, *, format: str = "stablehlo", deterministic: bool = True,
    noise: bool | None = None, batch_size: int | None = None, overwrite: bool = False,
) -> dict[str, Any]:  # fmt: skip
    """Write `agent`'s policy at `state` (one member's) to `path`, and its description to `<path>.json`.

    ```python
    eqxrl.export(agent, state, "policy.onnx", format="onnx")
    ```

    **Arguments:** `format` `"stablehlo"` (runs with JAX, without eqxrl) or `"onnx"` (runs with
    onnxruntime, without JAX); `deterministic` (the policy's mode) or not (a sampling policy);
    `noise`, a sampling policy's randomness: None for the format's default (StableHLO: the key's data
    as its last input; ONNX: its noise), True for its noise as inputs (`agent.act_from_noise`: the
    caller draws it, with NumPy say, as the description says), False for the key (StableHLO only);
    `batch_size`: None for a symbolic batch dimension, or a fixed one; `overwrite` an existing file.

    **Returns:** the description written to `<path>.json`. Raises a one-line `ValueError` for a
    policy the converter cannot express, naming the agent and the operation.
    """
    path = _check(path, format, batch_size, overwrite)
    sampling = _sampling(format, deterministic, noise)
    _check_one_member(agent, state)
    name = agent_name(agent) + (" (recurrent)" if agent.initial_carry(state, ()) is not None else "")
    batch = BATCH if batch_size is None else batch_size
    try:
        noise_record = _noise_record(agent, state, batch) if sampling == "noise" else None
    except ValueError as e:
        raise ValueError(f"export(deterministic=False, noise=True): {one_line(e)}") from None
    fn, inputs, outputs = policy_function(agent, state, bool(deterministic), sampling == "key", sampling == "noise")
    if format == "stablehlo":
        data, converter = _to_stablehlo(fn, inputs, batch_size, name)
    else:
        data, converter = _to_onnx(fn, inputs, outputs, batch_size, name)
    io = lambda items: [  # noqa: E731
        {"name": n, "shape": [batch if (i == 0 and n != "key") else d for i, d in enumerate(s.shape)], "dtype": str(s.dtype)}
        for n, s in items
    ]
    record = {
        "format": format, "file": path.name, "agent": agent_name(agent), "env": getattr(agent.env, "name", None),
        "deterministic": bool(deterministic), "observation_space": _space(agent.eval_env.observation_space),
        "action_space": _space(agent.env.action_space), "inputs": io(inputs), "outputs": io(outputs),
        "preprocessing": _preprocessing(agent, state), "converter": converter,
        "key": {"impl": str(jax.random.key_impl(jax.random.key(0))), "input": "key"} if sampling == "key" else None,
        "noise": noise_record,
        "versions": {"eqxrl": __version__, "jax": jax.__version__},
    }  # fmt: skip
    atomic_write_bytes(path, data)
    write_json(path.with_name(path.name + ".json"), record)
    return record


def _specs(inputs: list, batch_size: int | None) -> list[jax.ShapeDtypeStruct]:
    if batch_size is None:
        (b,) = jax.export.symbolic_shape(BATCH)
    else:
        b = batch_size
    return [s if n == "key" else jax.ShapeDtypeStruct((b, *s.shape[1:]), s.dtype) for n, s in inputs]


def _to_stablehlo(fn: Callable, inputs: list, batch_size: int | None, name: str) -> tuple[bytes, str]:
    try:
        exported = jax.export.export(jax.jit(fn))(*_specs(inputs, batch_size))
    except Exception as e:  # a policy jax.export cannot trace for a symbolic batch
        raise ValueError(f"export: jax.export cannot express {name}'s policy: {one_line(e)[:300]}") from None
    return bytes(exported.serialize()), f"jax.export (serialization version {exported.calling_convention_version})"


def _to_onnx(fn: Callable, inputs: list, outputs: list, batch_size: int | None, name: str) -> tuple[bytes, str]:
    # (jax2onnx's plugins for other libraries warn as they load, onnx_ir of types it leaves unset)
    loggers = {n: logging.getLogger(n) for n in ("jax2onnx", "onnx_ir")}
    levels = {n: logger.level for n, logger in loggers.items()}
    for logger in loggers.values():
        logger.setLevel(logging.ERROR)
    try:
        return _convert(fn, inputs, outputs, batch_size, name)
    finally:
        for n, logger in loggers.items():
            logger.setLevel(levels[n])


def _convert(fn: Callable, inputs: list, outputs: list, batch_size: int | None, name: str) -> tuple[bytes, str]:
    try:
        from jax2onnx import to_onnx
    except ImportError:
        raise ValueError("export(format='onnx') needs jax2onnx: pip install 'eqxrl[export]'") from None
    version = importlib.metadata.version("jax2onnx")
    try:
        model = to_onnx(
            fn, _specs(inputs, batch_size), model_name=f"eqxrl_{name.split()[0]}", input_names=[n for n, _ in inputs],
            output_names=[n for n, _ in outputs],
        )  # fmt: skip
    except Exception as e:
        raise ValueError(f"export(format='onnx'): jax2onnx {version} cannot express {name}'s policy: {one_line(e)[:300]}") from None
    return model.SerializeToString(), f"jax2onnx {version} (opset {model.opset_import[0].version})"


def export_run(
    run_dir: PathLike, path: PathLike | None = None, *, format: str = "stablehlo", checkpoint: Any = None,
    member: int = 0, deterministic: bool = True, noise: bool | None = None, batch_size: int | None = None,
    overwrite: bool = False, trust: Any = (),
) -> dict[str, Any]:  # fmt: skip
    """`export` the policy of a run directory (as `load_policy` loads it: `checkpoint` None for the
    final state, `"best"`, `"last"` or an env step; `member`; `trust`). `path` defaults to
    `<run_dir>/policy.<format>` (`policy-sample.<format>` for a sampling policy; `noise` as `export`'s).

    **Returns:** the description written beside the file (its path under `"path"`)."""
    from ._policy import load_policy

    if format not in FORMATS:
        raise ValueError(f"export(format) must be 'stablehlo' or 'onnx', got {format!r}")
    if path is None:
        stem = "policy" if deterministic else "policy-sample"
        path = pathlib.Path(run_dir) / f"{stem}{SUFFIXES[format]}"
    _check(path, format, batch_size, overwrite)
    _sampling(format, deterministic, noise)
    policy = load_policy(run_dir, member, deterministic, checkpoint, trust=trust)
    record = export(policy.agent, policy.state, path, format=format, deterministic=deterministic, noise=noise,
                    batch_size=batch_size, overwrite=overwrite)  # fmt: skip
    return {**record, "path": str(path)}


def read_description(path: PathLike) -> dict[str, Any]:
    """**Returns:** the JSON description written beside an exported policy at `path`."""
    return json.loads(pathlib.Path(str(path) + ".json").read_text())
