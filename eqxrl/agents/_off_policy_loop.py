"""`OffPolicyLoop`: the settings the off-policy loop (`AbstractOffPolicyAgent.train_iteration`)
runs on, as one module a replay agent stores (`agent.loop`). The agent's constructor builds it from
its init-only keywords (`num_envs=4`, `batch_size=128`, `gamma=0.99`, `prioritized=True`), or takes
one given whole (`loop=OffPolicyLoop(...)`); `agent.num_envs`, `agent.gamma` read it, and `--set
gamma=...`, sweeps and PBT spaces name its numbers by their keywords (`AbstractAgent.aliases`)."""

from typing import Any

import equinox as eqx
import numpy as np
from jaxtyping import Array, Float

from ..core import check_hyperparameter, check_positive_int, hyperparameter
from ..components import AbstractReplayBuffer, PrioritizedReplayBuffer, ReplayBuffer, as_buffer
from ._keywords import default_buffer, module_from_keywords

LOOP_KEYWORDS = (
    "num_envs", "rollout_length", "updates_per_step", "batch_size", "learning_starts", "n_step",
    "normalize_observations", "gamma", "reward_scale", "per_beta",
)  # fmt: skip
"""The loop's own settings, each an init-only keyword of the replay agents of the same name."""

BUFFER_KEYWORDS = ("buffer_size", "prioritized", "per_alpha")
"""The init-only keywords that build the loop's `buffer` when none is given."""


class OffPolicyLoop(eqx.Module):
    """How a replay agent collects and learns from its buffer, each setting read by the shared loop:

    - collection: `num_envs` envs stepped `rollout_length` times per iteration, uniform random
      actions until `learning_starts` env steps, observations normalised by running statistics
      with `normalize_observations`;
    - replay: every step's n-step transition (`n_step`) into `buffer` (any
      `eqxrl.components.AbstractReplayBuffer`), then `updates_per_step` gradient updates per env
      step, each on `batch_size` sampled transitions, PER's importance exponent `per_beta` annealed
      to 1 over training;
    - the batch an update sees: rewards multiplied by `reward_scale`, discounted by `gamma`.

    `gamma`, `reward_scale` and `per_beta` are hyperparameters (array leaves: sweeps and PBT tune
    them); the agent checks every setting and names it as its own keyword (`DQN(batch_size) ...`).
    """

    buffer: AbstractReplayBuffer = eqx.field(default_factory=lambda: ReplayBuffer(100_000), converter=as_buffer)
    num_envs: int = eqx.field(static=True, default=1)
    rollout_length: int = eqx.field(static=True, default=1)
    updates_per_step: float = eqx.field(static=True, default=1.0)
    batch_size: int = eqx.field(static=True, default=256)
    learning_starts: int = eqx.field(static=True, default=1_000)
    n_step: int = eqx.field(static=True, default=1)
    normalize_observations: bool = eqx.field(static=True, default=False)
    gamma: Float[Array, ""] = hyperparameter(0.99)
    reward_scale: Float[Array, ""] = hyperparameter(1.0)
    per_beta: Float[Array, ""] = hyperparameter(0.4)


def loop_from_keywords(agent: Any, keywords: dict[str, Any]) -> OffPolicyLoop:
    """The `OffPolicyLoop` a replay agent stores, from its init-only `keywords` (the loop's settings,
    `buffer` and the buffer's keywords): its `loop` when given (then a keyword that disagrees with
    it is refused in one line: `set_hyperparameter` or `eqx.tree_at` change a built agent's loop),
    else one built from them, its buffer `buffer` or (None) built from `buffer_size`,
    `prioritized` and `per_alpha`."""
    owner = type(agent).__name__
    if agent.loop is not None and not isinstance(agent.loop, OffPolicyLoop):
        raise ValueError(f"{owner}(loop) must be an eqxrl.agents.OffPolicyLoop or None (built from the keywords), got {agent.loop!r}")
    if agent.loop is not None:
        return module_from_keywords(agent, "loop", keywords, "the off-policy loop's settings", lambda: None)
    built, given = {name: keywords[name] for name in BUFFER_KEYWORDS}, keywords["buffer"]
    buffer = module_from_keywords(
        agent, "buffer", built, "the replay buffer", lambda: default_buffer(owner, **built), current=given,
        read=lambda name, default: buffer_keyword(given, name, default),
    )
    return OffPolicyLoop(buffer=buffer, **{name: keywords[name] for name in LOOP_KEYWORDS})


def buffer_keyword(buffer: Any, name: str, default: Any) -> Any:
    """What the buffer keyword `name` reads on `buffer`: `buffer_size` its capacity, `prioritized`
    whether it is a `PrioritizedReplayBuffer`, `per_alpha` its `alpha` (else `default`)."""
    if name == "prioritized":
        return isinstance(buffer, PrioritizedReplayBuffer)
    return getattr(buffer, {"buffer_size": "capacity", "per_alpha": "alpha"}[name], default)


def check_loop(agent: Any) -> None:
    """Raise a one-line ValueError, naming the setting as the agent's keyword (`DQN(batch_size)`),
    for a loop `agent.loop` cannot run."""
    owner, loop = type(agent).__name__, agent.loop
    for name in ("num_envs", "rollout_length", "batch_size", "n_step"):
        check_positive_int(owner, name, getattr(loop, name))
    starts = loop.learning_starts
    if isinstance(starts, bool) or not isinstance(starts, (int, np.integer)) or starts < 0:
        raise ValueError(f"{owner}(learning_starts) must be an int >= 0, got {starts!r}")
    if not (isinstance(loop.updates_per_step, (int, float)) and loop.updates_per_step > 0):
        raise ValueError(f"{owner}(updates_per_step) must be > 0, got {loop.updates_per_step!r}")
    steps = loop.num_envs * loop.rollout_length
    exact = loop.updates_per_step * steps
    if abs(exact - round(exact)) > 1e-6:
        raise ValueError(
            f"{owner}(updates_per_step={loop.updates_per_step}) times the env steps per iteration "
            f"(num_envs * rollout_length = {steps}) must be a whole number of updates, "
            f"got {exact:g}; change rollout_length"
        )
    if not isinstance(loop.buffer, AbstractReplayBuffer):
        raise ValueError(
            f"{owner}(buffer) must be an eqxrl.components.AbstractReplayBuffer (ReplayBuffer, "
            f"PrioritizedReplayBuffer, or a subclass) or None, got {loop.buffer!r}"
        )
    if loop.batch_size > loop.buffer.capacity:
        raise ValueError(f"{owner}(batch_size={loop.batch_size}) must not exceed buffer_size={loop.buffer.capacity}")
    check_hyperparameter(owner, "gamma", loop.gamma, lambda v: 0 <= v <= 1, "in [0, 1]")
    check_hyperparameter(owner, "reward_scale", loop.reward_scale, lambda v: v > 0, "> 0")
    check_hyperparameter(owner, "per_beta", loop.per_beta, lambda v: 0 <= v <= 1, "in [0, 1]")
