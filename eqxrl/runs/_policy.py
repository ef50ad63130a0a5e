"""From a run directory back to Python: the agent and state (`load_run`) or a policy
that acts (`load_policy`)."""

from typing import Any

import equinox as eqx
import jax
from jaxtyping import Array, PyTree

from ..agents import AbstractAgent, Batch
from ..core import Key, trust_modules
from ._checkpoint import load_checkpoint
from ._config import diverged_record, load_agent, load_config
from ._files import PathLike
from ._state import load_state

__all__ = ["Policy", "diverged_checkpoint", "load_policy", "load_run"]


class Policy(eqx.Module):
    """A trained policy: `policy(obs)` acts on a batch of observations.

    A recurrent policy (PPO with a `GRUTorso`) carries a memory instead:
    `carry = policy.initial_carry(batch_shape)`, then `action, carry =
    policy.step(obs, carry, reset)` each step (`reset`: True at an episode's first
    observation). `step` works for a feed-forward policy too (its carry is None).

    Built by `load_policy`; holds the agent and one member's state (or all).
    """

    agent: AbstractAgent
    state: PyTree
    deterministic: bool = eqx.field(static=True, default=True)

    def __call__(self, obs: Array, key: Key | None = None) -> Array:
        """**Returns:** actions for `obs` of shape `(*batch, *obs_shape)`
        (a sampled policy needs a `key`)."""
        return _act(self.agent, self.state, obs, key, self.deterministic)

    def initial_carry(self, batch_shape: tuple[int, ...] = ()) -> PyTree:
        """**Returns:** the memory of fresh episodes for observations of batch shape `batch_shape`
        (None for a feed-forward policy)."""
        return self.agent.initial_carry(self.state, tuple(batch_shape))

    def step(self, obs: Array, carry: PyTree, reset: Array, key: Key | None = None) -> tuple[Array, PyTree]:
        """**Returns:** `(actions, new carry)` for `obs`, the carry first reset where `reset`."""
        return _act_with_carry(self.agent, self.state, obs, carry, reset, key, self.deterministic)


@eqx.filter_jit
def _act(agent, state, obs, key, deterministic):
    return agent.act(state, obs, key, deterministic=deterministic)


@eqx.filter_jit
def _act_with_carry(agent, state, obs, carry, reset, key, deterministic):
    return agent.act_with_carry(state, obs, carry, reset, key, deterministic)


def diverged_checkpoint(run_dir: PathLike) -> int | None:
    """The checkpoint that stands in for a diverged run's final state.

    **Returns:** None for a run that did not diverge; for one that did (`"status":
    "diverged"` in `config.json`), the env step of its last checkpoint with finite
    parameters. Raises `ValueError` when it diverged before any was written.
    """
    record = diverged_record(load_config(run_dir))
    if record is None:
        return None
    step = record.get("last_finite_checkpoint")
    if isinstance(step, bool) or not isinstance(step, int):
        raise ValueError(
            f"{str(run_dir)!r} diverged after iteration {record.get('iteration')} before any checkpoint with finite "
            "parameters was written: it holds no state to evaluate"
        )
    return step


def _load_state(run_dir: PathLike, agent: Any, num_seeds: int, checkpoint: Any) -> PyTree:
    if checkpoint is None:
        return load_state(run_dir, agent, num_seeds)
    return load_checkpoint(run_dir, agent, num_seeds, which=checkpoint).state


def load_policy(
    run_dir: PathLike, member: int = 0, deterministic: bool = True, checkpoint: Any = None, *, trust: Any = ()
) -> Policy:
    """Load a trained policy from a run directory: three lines from disk to actions.

    ```python
    policy = eqxrl.runs.load_policy("runs/ppo-CartPole-v1-...")
    actions = policy(obs)                      # obs: (batch, *obs_shape)
    ```

    **Arguments:** the `run_dir`, which seed/sweep `member` (default 0),
    whether to act with the policy's mode (`deterministic`), and `checkpoint`: None
    for the final state, or `"best"`, `"last"` or an env step (see `load_run`); and
    `trust`, modules whose classes the run directory may name (see `load_run`).
    """
    trust = trust_modules(trust, "load_policy(trust)")
    config = load_config(run_dir)
    agent = load_agent(run_dir, trust=trust)
    state = _load_state(run_dir, agent, config["seeds"], checkpoint)
    size = config["seeds"]
    if not -size <= member < size:
        raise ValueError(f"load_policy(member) must be in [-{size}, {size}) for this run of {size} seed(s), got {member}")
    batch = Batch.of(agent, None if size == 1 else size)
    if batch.batched:
        agent, state = batch.member(member), jax.tree.map(lambda x: x[member], state)
    return Policy(agent, state, bool(deterministic))


def load_run(run_dir: PathLike, checkpoint: Any = None, *, trust: Any = ()) -> tuple[Any, PyTree, dict[str, Any]]:
    """Reload a run: the agent, a training state and its config.

    **Arguments:** `run_dir`, a directory written by `save_run` (or `eqxrl train`),
    and `checkpoint`: None for the final state (`state.eqx`), `"best"` for the
    checkpoint with the highest evaluation return (a run trained with
    `eval_every`), `"last"` for the newest checkpoint (an unfinished run's too),
    or an env step listed by `eqxrl.runs.checkpoint_steps(run_dir)`; and `trust`, the
    modules (and their submodules) whose classes `config.json` may name besides eqxrl's
    own and registered ones (`trust=("my_pkg",)`): a run directory is data, and
    loading it imports nothing else.

    **Returns:** `(agent, state, config)`, ready for `eqxrl.evaluate(agent, state, key)`.
    """
    trust = trust_modules(trust, "load_run(trust)")
    config = load_config(run_dir)
    agent = load_agent(run_dir, trust=trust)
    return agent, _load_state(run_dir, agent, config["seeds"], checkpoint), config
