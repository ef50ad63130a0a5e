"""`check_env`: an environment's `reset` and `step` outputs against its spaces, checked once.

A custom env whose reward is int32, or whose state changes dtype between
`reset` and `step`, otherwise fails deep inside JAX (a `lax.scan` carry type
mismatch). The check traces `reset` and one `step` abstractly
(`jax.eval_shape`: nothing is compiled or run) and remembers the envs that
passed, so building many agents on one env (or on equal envs) costs one trace.
"""

from collections.abc import Hashable
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from ..core import tree_mismatch
from ._base import AbstractEnv, AbstractWrapper, TimeStep
from ._spaces import AbstractSpace, flatten_space

_passed: set[Hashable] = set()  # the `_signature`s of envs that passed


def _signature(env: AbstractEnv) -> Hashable | None:
    """What `reset` and `step`'s abstract outputs depend on: the env's tree structure (class,
    static fields), its array leaves' types and its other leaves' values; None when unhashable.
    This is how `jax.jit` keys its cache, so equal signatures trace to the same outputs."""
    leaves, treedef = jax.tree.flatten(env)
    signature = (treedef, tuple(jax.typeof(x) if eqx.is_array(x) else (type(x), x) for x in leaves))
    try:
        hash(signature)
    except TypeError:
        return None
    return signature


def _label(env: AbstractEnv) -> str:
    """`TimeLimit(MyEnv)`, `GymnaxEnv('CartPole-v1')`: the wrappers around the innermost env."""
    wrappers = []
    while isinstance(env, AbstractWrapper):
        wrappers.append(type(env).__name__)
        env = env.env
    cls, name = type(env).__name__, env.name
    label = cls if name == cls else f"{cls}({name!r})"
    for wrapper in reversed(wrappers):
        label = f"{wrapper}({label})"
    return label


def _batch_shape(env: AbstractEnv) -> tuple[int, ...]:
    """The leading axes a `VectorEnv` (anywhere in the wrapper chain) adds to every output."""
    from ._wrappers import VectorEnv

    shape: tuple[int, ...] = ()
    while isinstance(env, AbstractWrapper):
        if isinstance(env, VectorEnv):
            shape = shape + (env.num_envs,)
        env = env.env
    return shape


def _abstract(x: Any) -> Any:
    """A leaf as a `ShapeDtypeStruct` (Python and NumPy scalars too); other leaves as they are."""
    if isinstance(x, jax.ShapeDtypeStruct):
        return x
    if isinstance(x, (bool, int, float, complex, np.ndarray, np.generic)):
        return jax.ShapeDtypeStruct(np.shape(x), jnp.result_type(x))
    return x


def _describe(x: Any) -> str:
    x = _abstract(x)
    if isinstance(x, jax.ShapeDtypeStruct):
        return f"{x.dtype} with shape {tuple(x.shape)}"
    return f"a {type(x).__name__}"


def _structure(treedef: Any) -> str:
    """`{'grid': *, 'step': *}`: a tree structure as JAX prints it, without the `PyTreeDef(...)`."""
    text = str(treedef)
    return text[len("PyTreeDef(") : -1] if text.startswith("PyTreeDef(") else text


def _check_obs(where: str, obs: Any, space: Any, batch: tuple[int, ...]) -> None:
    """`obs` has the structure of the space's elements, and each leaf is a float or integer
    array of its leaf space's shape (after the batch axes)."""
    # (a space that is no AbstractSpace but has a shape is checked as one array, as it always was)
    leaves, treedef = flatten_space(space) if isinstance(space, AbstractSpace) else ([space], jax.tree.structure(0))
    if jax.tree_util.treedef_is_leaf(treedef):
        named = [("obs", obs, leaves[0])]
    else:
        obs_def = jax.tree.structure(obs)
        if obs_def != treedef:
            got = _describe(obs) if jax.tree_util.treedef_is_leaf(obs_def) else _structure(obs_def)
            raise ValueError(
                f"{where}: obs must be a pytree of structure {_structure(treedef)} (the observation_space's), got {got}"
            )
        paths = jax.tree_util.tree_flatten_with_path(obs)[0]
        named = [(f"obs{jax.tree_util.keystr(path)}", x, leaf) for (path, x), leaf in zip(paths, leaves)]
    for name, x, leaf in named:
        abstract = _abstract(x)
        want = batch + tuple(leaf.shape)
        ok = (
            isinstance(abstract, jax.ShapeDtypeStruct)
            and (jnp.issubdtype(abstract.dtype, jnp.floating) or jnp.issubdtype(abstract.dtype, jnp.integer))
            and tuple(abstract.shape) == want
        )
        if not ok:
            raise ValueError(
                f"{where}: {name} must be a float or integer array of shape {want} (the observation_space's), "
                f"got {_describe(x)}"
            )


def _check_timestep(where: str, ts: Any, obs_space: Any, batch: tuple[int, ...]) -> None:
    if not isinstance(ts, TimeStep):
        raise ValueError(f"{where} must return (state, TimeStep), got a {type(ts).__name__} as the timestep")
    scalar = "scalar" if not batch else f"array of shape {batch} (one per env)"
    _check_obs(where, ts.obs, obs_space, batch)
    reward = _abstract(ts.reward)
    if not (isinstance(reward, jax.ShapeDtypeStruct) and reward.dtype == jnp.float32 and reward.shape == batch):
        raise ValueError(f"{where}: reward must be a float32 {scalar}, got {_describe(ts.reward)}")
    for name in ("terminated", "truncated"):
        flag = _abstract(getattr(ts, name))
        if not (isinstance(flag, jax.ShapeDtypeStruct) and flag.dtype == jnp.bool_ and flag.shape == batch):
            raise ValueError(f"{where}: {name} must be a bool {scalar}, got {_describe(getattr(ts, name))}")
    if not isinstance(ts.info, dict):
        raise ValueError(f"{where}: info must be a dict, got a {type(ts.info).__name__}")


def _pair(where: str, out: Any) -> tuple[Any, Any]:
    if not (isinstance(out, tuple) and len(out) == 2):
        raise ValueError(f"{where} must return (state, TimeStep), got a {type(out).__name__}")
    return out


def _trace(where: str, fn: Any, *args: Any) -> Any:
    """`eqx.filter_eval_shape(fn, *args)`; an error raised by the env's own code while it is
    traced says where it came from."""
    try:
        return eqx.filter_eval_shape(fn, *args)
    except Exception as e:
        e.add_note(f"(raised while eqxrl.envs.check_env traced {where} abstractly, as make and every agent do)")
        raise


def check_env(env: AbstractEnv) -> AbstractEnv:
    """Check that `env.reset` and `env.step` return what the protocol promises.

    Traces `reset(key)` and one `step(key, state, action)` (an action of the
    action space's shapes and dtypes) with `jax.eval_shape`: no compilation, no
    real step. `eqxrl.envs.make` and every agent's construction call it; an env
    that passed (or an equal one: same structure, static fields and leaf types)
    is not traced again.

    Checked, for `reset` and `step`: the result is `(state, TimeStep)`; `obs` is a
    float or integer array of the observation space's shape (for a `Dict` observation
    space: a dict of the same keys, nested alike, each leaf a float or integer array of
    its leaf space's shape, a failure naming the leaf, `obs['grid']`); `reward` is a float32
    scalar; `terminated` and `truncated` are bool scalars (each with a leading
    `num_envs` axis under a `VectorEnv`); `info` is a dict; and `step` returns a
    state of the same structure, shapes and dtypes as `reset`'s (a `lax.scan`
    carries it).

    **Returns:** `env`. Raises a `ValueError` naming the env, the method, the
    field, and what was expected and received, e.g. `MyEnv.step: reward must be
    a float32 scalar, got int32 with shape ()`.
    """
    if not isinstance(env, AbstractEnv):
        raise ValueError(f"check_env(env) must be an eqxrl AbstractEnv, got {env!r}")
    signature = _signature(env)
    if signature is not None and signature in _passed:
        return env
    label, batch = _label(env), _batch_shape(env)
    obs_space = env.observation_space
    key = jax.eval_shape(lambda: jax.random.key(0))
    state, ts = _pair(f"{label}.reset", _trace(f"{label}.reset", env.reset, key))
    _check_timestep(f"{label}.reset", ts, obs_space, batch)
    one = jax.eval_shape(env.action_space.sample, key)
    action = jax.tree.map(lambda a: jax.ShapeDtypeStruct(batch + tuple(a.shape), a.dtype), one)
    next_state, ts = _pair(f"{label}.step", _trace(f"{label}.step", env.step, key, state, action))
    _check_timestep(f"{label}.step", ts, obs_space, batch)
    abstract = lambda tree: jax.tree.map(_abstract, tree)  # noqa: E731
    diff = tree_mismatch(abstract(state), abstract(next_state))
    if diff is not None or jax.tree.structure(state) != jax.tree.structure(next_state):
        diff = diff or f"reset's is {jax.tree.structure(state)}, step's is {jax.tree.structure(next_state)}"
        raise ValueError(
            f"{label}.step must return a state of the structure, shapes and dtypes reset returns "
            f"(lax.scan carries it from step to step): {diff}"
        )
    if signature is not None:
        _passed.add(signature)
    return env
