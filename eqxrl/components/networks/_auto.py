"""`auto_torso`: the torso an agent builds when it is given none, chosen from its observation space.

The components floor does not import `eqxrl.envs`, so spaces are read by what they have:
a `Dict` or `Tuple` by its `named_spaces()` (entries by name), a `Box` by its `low` and `high` bounds, any space by its `shape`.
"""

from collections.abc import Sequence
from typing import Any

import numpy as np

from ._embedding import EmbeddingTorso
from ._multi_input import MultiInputTorso
from ._torsos import AbstractTorso, Activation, CNNTorso, MLPTorso

ACTION_MASK = "action_mask"  # `eqxrl.envs.ACTION_MASK`: a Dict's action mask is never a torso's entry
MAX_CODES = 256  # an integer grid with more codes than this is an image, not embedded
MIN_SIDE = 3  # `CNNTorso.minatar()`'s kernel: a smaller grid is flattened
NATURE_SIDE = 36  # from this height and width on, `CNNTorso.nature()` (its three convolutions fit)


def _composite(space: Any) -> bool:
    return callable(getattr(space, "named_spaces", None))


def _leaves(space: Any, prefix: str = "") -> list[tuple[str, Any]]:
    """`(name, leaf space)` of a Dict's or Tuple's entries, named as `ObservationLayout` names
    them (`"outer.inner"`, `"0"`), the top-level action mask left out."""
    out = []
    for name, sub in space.named_spaces().items():
        if not prefix and name == ACTION_MASK:
            continue
        if _composite(sub):
            out += _leaves(sub, f"{prefix}{name}.")
        else:
            out.append((prefix + name, sub))
    return out


def integer_codes(space: Any) -> int | None:
    """**Returns:** the number of integer codes of `space` when it holds small non-negative
    integer codes (a `Box` with finite, integral bounds, `low >= 0` and `3 <= max(high) + 1 <= 256`):
    `max(high) + 1`; None otherwise (no bounds, a `[0, 1]` box, real-valued bounds, ...)."""
    low, high = getattr(space, "low", None), getattr(space, "high", None)
    try:
        low, high = np.asarray(low, np.float64), np.asarray(high, np.float64)
    except Exception:  # no bounds, or traced ones
        return None
    if low.size == 0 or high.size == 0 or not (np.all(np.isfinite(low)) and np.all(np.isfinite(high))):
        return None
    if np.any(low != np.round(low)) or np.any(high != np.round(high)) or np.min(low) < 0:
        return None
    codes = int(np.max(high)) + 1
    return codes if 3 <= codes <= MAX_CODES else None


def entry_torso(space: Any, normalized: bool = False) -> AbstractTorso | None:
    """**Returns:** the torso `auto_torso` gives one entry of a `Dict` observation, or None
    for an entry it flattens (see `auto_torso`)."""
    shape = tuple(int(d) for d in getattr(space, "shape", ()))
    if len(shape) not in (2, 3) or min(shape[:2]) < MIN_SIDE or 0 in shape:
        return None
    cnn = CNNTorso.nature() if min(shape[:2]) >= NATURE_SIDE else CNNTorso.minatar()
    codes = None if normalized else integer_codes(space)
    if codes is not None:
        return EmbeddingTorso(codes, 16, cnn)
    return cnn if len(shape) == 3 else None


def auto_torso(
    observation_space: Any,
    hidden_sizes: Sequence[int] = (64, 64),
    activation: Activation = "tanh",
    *,
    normalized: bool = False,
) -> AbstractTorso:
    """**Returns:** the torso the built-in agents build for observations of `observation_space`
    when they are given none (their `hidden_sizes` and `activation`).

    - A single-array observation (`Box`, `Discrete`, ...): `MLPTorso(hidden_sizes, activation)`.
    - A `Dict` or `Tuple` observation: each entry (named `"outer.inner"` in a nested space, `"0"`, `"1"`, ... in a `Tuple`; the
      `"action_mask"` is never an entry) gets
        - an `EmbeddingTorso(max(high) + 1, 16, cnn)` when it is an **integer grid**: a rank-2
          `(H, W)` or rank-3 `(H, W, C)` `Box` with finite integral bounds, `low >= 0` and
          between 3 and 256 codes (`max(high) + 1`), such as Navix's or XLand-MiniGrid's tiles
          (a `[0, 255]` image counts: name a `CNNTorso` for a photograph);
        - `cnn` when it is any other rank-3 `(H, W, C)` entry (a float image, a `[0, 1]` or
          `MultiBinary` grid): channels last;
        - nothing else: it is flattened (vectors, scalars, `Discrete`, `MultiDiscrete`, a
          rank-2 real matrix, an entry with a side under 3, rank 4 and up).

        `cnn` is `CNNTorso.minatar()` (3x3 kernel: both sides at least 3), or `CNNTorso.nature()`
        when both sides are at least 36. When no entry gets a torso, the `Dict` observation goes
        through `MLPTorso(hidden_sizes, activation)` as one flat vector (the entries concatenated
        in key order), exactly as a flat observation would; otherwise through
        `MultiInputTorso({name: torso}, hidden_sizes=hidden_sizes, activation=activation)`: the
        entries' features and the flattened entries concatenated, then the MLP layers.

    - `normalized=True` (the agent normalises its observations): integer codes do not reach
      the torso as codes, so nothing is embedded (an integer `(H, W, C)` grid gets `cnn`).

    Give the agent a torso (`PPO(env, actor_torso=MultiInputTorso({"grid": MyTorso()}))`) to
    choose any entry's torso yourself.
    """
    hidden_sizes = tuple(hidden_sizes)
    if not hasattr(observation_space, "shape"):
        raise ValueError(f"auto_torso(observation_space) must be an eqxrl space (Box, Dict, ...), got {observation_space!r}")
    if not _composite(observation_space):
        return MLPTorso(hidden_sizes, activation)
    chosen = {name: torso for name, leaf in _leaves(observation_space) if (torso := entry_torso(leaf, normalized)) is not None}
    if not chosen:
        return MLPTorso(hidden_sizes, activation)
    return MultiInputTorso(chosen, hidden_sizes=hidden_sizes, activation=activation)


def torso_or_auto(torso: Any, agent: Any) -> Any:
    """**Returns:** `torso`, or (None) the agent's default torso: `auto_torso` of
    `agent.env.observation_space` with the agent's `hidden_sizes` and `activation` (and its
    `normalize_observations`)."""
    if torso is not None:
        return torso
    normalized = bool(getattr(agent, "normalize_observations", False))
    return auto_torso(agent.env.observation_space, agent.hidden_sizes, agent.activation, normalized=normalized)
