"""Training states on disk (`state.eqx`): saved with PRNG keys as key data, loaded
against the shapes the agent's `init` gives."""

import pathlib
from typing import Any

import equinox as eqx
import jax
from jaxtyping import PyTree

from ..agents import Batch
from ..core import is_key, keys_as_data, one_line
from ._config import config_mismatch, load_config
from ._files import CHECKPOINTS, STATE, PathLike

__all__ = ["deserialise_state", "load_state", "save_state", "template_state", "unflatten_state"]


def save_state(path: PathLike, state: PyTree) -> None:
    """Save a training state with `eqx.tree_serialise_leaves` (PRNG keys as their key data).

    **Arguments:** the file `path` and the `state` (one run's, or a batch's).

    **Returns:** nothing.
    """
    eqx.tree_serialise_leaves(pathlib.Path(path), keys_as_data(state))


def template_state(agent: Any, num_seeds: int = 1) -> PyTree:
    """The shape of `agent`'s training state, with no arrays allocated.

    **Arguments:** the `agent` (or a `Stacked` population: one row per member) and
    `num_seeds`; more than one seed adds a leading axis.

    **Returns:** `eqx.filter_eval_shape` of `agent.init` (vmapped over seeds or members).
    """
    return _batch(agent, num_seeds).template_state()


def _batch(agent: Any, num_seeds: int) -> Batch:
    """The batch of a run directory's state: `num_seeds == 1` is one run (no leading axis)."""
    return Batch.of(agent, None if num_seeds == 1 or isinstance(agent, Batch) else num_seeds)


def load_state(run_dir: PathLike, agent: Any, num_seeds: int | None = None) -> PyTree:
    """Load the final training state of a run directory.

    **Arguments:**

    - `run_dir`: a directory written by `save_run` (or `eqxrl train`).
    - `agent`: the agent the state belongs to (e.g. from `load_agent`).
    - `num_seeds`: the number of seeds (default: `seeds` in `config.json`).

    **Returns:** the state, with a leading seed axis when there are several seeds.
    Raises `ValueError` when `state.eqx` is missing or does not match `agent`.
    """
    run_dir = pathlib.Path(run_dir)
    config = load_config(run_dir)
    if num_seeds is None:
        num_seeds = config["seeds"]
    saved = config.get("members", [config["agent_config"]])
    mismatch = config_mismatch(config["agent"], saved, agent, "the run")
    if mismatch is not None:
        raise ValueError(f"{str(run_dir)!r} does not hold a state of the agent given: {mismatch}")
    path = run_dir / STATE
    if not path.is_file():
        unfinished = (run_dir / CHECKPOINTS).is_dir()
        hint = " (the run did not finish: continue it with `eqxrl train --resume RUN_DIR`)" if unfinished else ""
        raise ValueError(f"{str(run_dir)!r} has no {STATE}{hint}")
    return deserialise_state(path, path, agent, num_seeds)


def _key_data_template(agent: Any, num_seeds: int) -> tuple[Batch, PyTree, PyTree]:
    """The batch, the state's template, and the template with PRNG keys as their key data
    (what `save_state` and `state_arrays` write)."""
    batch = _batch(agent, num_seeds)
    template = batch.template_state()
    return batch, template, jax.tree.map(lambda x: jax.eval_shape(jax.random.key_data, x) if is_key(x) else x, template)


def _wrap_keys(path: Any, template: PyTree, data: PyTree) -> PyTree:
    """`data` with the key data at the template's PRNG-key leaves wrapped as keys; a
    `ValueError` naming `path` when a key's type is not the agent's."""

    def unwrap(t: Any, x: Any) -> Any:
        if not is_key(t):
            return x
        key = jax.random.wrap_key_data(x)
        if key.dtype != t.dtype:
            raise ValueError(f"{path}: PRNG key of type {key.dtype} does not match the agent's {t.dtype}")
        return key

    return jax.tree.map(unwrap, template, data)


def deserialise_state(source: Any, path: Any, agent: Any, num_seeds: int) -> PyTree:
    """Read a state written by `save_state` (from a path or a file object `source`) for
    `agent` and `num_seeds`; a `ValueError` naming `path` when it does not match."""
    batch, template, like = _key_data_template(agent, num_seeds)
    try:
        data = eqx.tree_deserialise_leaves(source, like)
    except (RuntimeError, ValueError, OSError, EOFError) as e:
        cause = "" if e.__cause__ is None or one_line(e.__cause__) in one_line(e) else f": {one_line(e.__cause__)}"
        raise ValueError(f"{path} does not match {batch.name} with {num_seeds} seed(s): {one_line(e)}{cause}") from None
    return _wrap_keys(path, template, data)


def unflatten_state(leaves: list[Any], path: Any, agent: Any, num_seeds: int) -> PyTree:
    """The state of `agent` (and `num_seeds`) from its array leaves in `jax.tree.leaves`
    order, PRNG keys given as key data; a `ValueError` naming `path` when they do not fit."""
    batch, template, like = _key_data_template(agent, num_seeds)
    flat, treedef = jax.tree.flatten(like)
    slots = [i for i, x in enumerate(flat) if hasattr(x, "shape")]  # array leaves (the rest is static)
    if len(slots) != len(leaves):
        raise ValueError(f"{path} does not match {batch.name} with {num_seeds} seed(s): {len(leaves)} arrays, expected {len(slots)}")
    for i, got in zip(slots, leaves):
        want = flat[i]
        if tuple(want.shape) != tuple(got.shape) or want.dtype != got.dtype:
            raise ValueError(
                f"{path} does not match {batch.name} with {num_seeds} seed(s): an array is "
                f"{got.dtype}{list(got.shape)} where {want.dtype}{list(want.shape)} was expected"
            )
        flat[i] = jax.numpy.asarray(got)
    return _wrap_keys(path, template, jax.tree.unflatten(treedef, flat))
