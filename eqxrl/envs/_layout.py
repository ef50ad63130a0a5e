"""`ObservationLayout`: how the built-in agents store an env's observations, whatever their space.

An agent's rollouts and replay buffers hold one flat float32 vector per observation. For a
single-array observation (a `Box`, `Discrete`, `MultiDiscrete` or `MultiBinary` space) that is
the array flattened, as always. For a `Dict` observation it is every entry but the action mask
flattened and concatenated in the `Dict`'s (sorted) key order, followed by the action mask
(`ACTION_MASK`) as 0/1 floats when the env has one; a `Tuple` observation's entries likewise, in
position order (a `Tuple` has no mask: it lives in a `Dict`). Keeping the mask in the stored vector keeps
it beside the observation it belongs to everywhere an observation goes (a PPO rollout, a
replay buffer's `obs` and `next_obs`, a stack's members), so the action chosen or valued at an
observation is always masked by that observation's own mask, never by a stale one.

Torsos see the features only (`split`); observation normalisation (`normalize`) leaves the mask
alone.
"""

import math
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Bool, Float

from ._base import ACTION_MASK
from ._spaces import AbstractCompositeSpace, AbstractSpace, Dict, Discrete, MultiBinary, MultiDiscrete, Tuple

Entry = tuple[str, tuple[int, ...]]


def _entries(space: AbstractCompositeSpace, prefix: str = "") -> list[Entry]:
    out: list[Entry] = []
    for name, sub in space.named_spaces().items():
        if isinstance(sub, AbstractCompositeSpace):
            out += _entries(sub, f"{prefix}{name}.")
        else:
            out.append((prefix + name, tuple(int(d) for d in sub.shape)))
    return out


def mask_size_for(action_space: AbstractSpace) -> int | None:
    """**Returns:** the size of the action mask of `action_space` (`n` for `Discrete(n)`,
    `sum(nvec)` for `MultiDiscrete(nvec)`), or None for an action space masks do not apply to."""
    if isinstance(action_space, Discrete):
        return int(action_space.n)
    if isinstance(action_space, MultiDiscrete):
        return int(sum(action_space.nvec))  # (a static tuple of ints: no array, so it works under tracing)
    return None


class ObservationLayout(eqx.Module):
    """How one observation of a space is stored as a flat float32 vector (see the module docs).

    - `entries`: `((name, shape), ...)` of the features, in storage order; `name` is `""` for a
      single-array observation, the entry's name for a `Dict` or `Tuple` one (`"grid"`, a
      position `"0"`, or `"outer.inner"` in a nested space).
    - `mask_size`: the length of the action mask stored after the features (0: no mask).
    """

    entries: tuple[Entry, ...] = eqx.field(static=True)
    mask_size: int = eqx.field(static=True, default=0)

    @staticmethod
    def of(space: AbstractSpace, action_space: AbstractSpace | None = None, owner: str = "ObservationLayout") -> "ObservationLayout":
        """**Returns:** the layout of observations of `space`. An `ACTION_MASK` entry of a `Dict`
        is the mask; it must be a `MultiBinary` of the size `action_space` needs, when given."""
        if isinstance(space, Tuple):  # (a Tuple has no mask: it lives in a Dict's ACTION_MASK entry)
            return ObservationLayout(tuple(_entries(space)))
        if not isinstance(space, Dict):
            return ObservationLayout((("", tuple(int(d) for d in space.shape)),))
        spaces = space.spaces
        mask = spaces.get(ACTION_MASK)
        features = {name: sub for name, sub in spaces.items() if name != ACTION_MASK}
        if not features:
            raise ValueError(f"{owner}: the observation space {space!r} has an action mask and nothing else to observe")
        mask_size = 0
        if mask is not None:
            want = None if action_space is None else mask_size_for(action_space)
            if action_space is not None and want is None:
                raise ValueError(
                    f"{owner}: the observation space has an {ACTION_MASK!r} entry, but action masks need Discrete or "
                    f"MultiDiscrete actions, got {action_space!r}"
                )
            if not isinstance(mask, MultiBinary) or len(mask.shape) != 1 or (want is not None and mask.shape[0] != want):
                expected = f"MultiBinary({want})" if want is not None else "a 1-D MultiBinary"
                raise ValueError(
                    f"{owner}: the observation's {ACTION_MASK!r} entry must be {expected} (one flag per action of "
                    f"{action_space!r}), got {mask!r}"
                )
            mask_size = int(mask.shape[0])
        return ObservationLayout(tuple(_entries(Dict(features))), mask_size)

    @property
    def structured(self) -> bool:
        return self.entries[0][0] != ""

    @property
    def size(self) -> int:
        """The number of features (the stored vector less the mask): what a torso takes."""
        return sum(math.prod(shape) for _, shape in self.entries)

    @property
    def stored_size(self) -> int:
        """The length of the stored vector: `size + mask_size`."""
        return self.size + self.mask_size

    @property
    def torso_shape(self) -> Any:
        """What a torso is built for: the shape of a single-array observation, or the
        `((name, shape), ...)` entries of a `Dict` one (`MultiInputTorso` splits by them)."""
        return self.entries[0][1] if not self.structured else self.entries

    def flatten(self, obs: Any, owner: str) -> Float[Array, "*batch stored"]:
        """**Returns:** observations `obs` (leading axes `*batch`) as stored vectors
        `(*batch, stored_size)`. Raises a ValueError naming `owner` when `obs` does not match."""
        if not self.structured:
            shape = self.entries[0][1]
            obs = jnp.asarray(obs) if eqx.is_array_like(obs) else obs
            lead = getattr(obs, "ndim", -1) - len(shape)
            if not isinstance(obs, jax.Array) or lead < 0 or tuple(obs.shape[lead:]) != shape:
                got = tuple(obs.shape) if isinstance(obs, jax.Array) else type(obs).__name__
                raise ValueError(f"{owner}: obs must have shape (*batch, {', '.join(map(str, shape))}), got {got}")
            return obs.reshape(obs.shape[:lead] + (self.size,)).astype(jnp.float32)
        names = [name for name, _ in self.entries] + ([ACTION_MASK] if self.mask_size else [])
        shapes = [shape for _, shape in self.entries] + ([(self.mask_size,)] if self.mask_size else [])
        parts, lead = [], None
        for name, shape in zip(names, shapes):
            value = _lookup(obs, name, owner, names)
            here = value.shape[: value.ndim - len(shape)]
            if value.ndim < len(shape) or tuple(value.shape[len(here):]) != shape or (lead is not None and here != lead):
                want = f"(*batch, {', '.join(map(str, shape))})" if lead is None else str(lead + shape)
                raise ValueError(f"{owner}: obs[{name!r}] must have shape {want}, got {tuple(value.shape)}")
            lead = here
            parts.append(value.reshape(here + (math.prod(shape),)).astype(jnp.float32))
        return jnp.concatenate(parts, axis=-1)

    def split(self, x: Float[Array, "*batch stored"]) -> tuple[Float[Array, "*batch size"], Bool[Array, "*batch mask"] | None]:
        """**Returns:** `(features, mask)` of stored vectors `x`: the mask as bools, None without one.
        A mask with no legal action (some suites' observation after the episode ended) counts as
        all legal, so that no policy or target is ever taken over an empty set."""
        if not self.mask_size:
            return x, None
        mask = x[..., self.size :] > 0.5
        return x[..., : self.size], mask | ~jnp.any(mask, axis=-1, keepdims=True)

    def normalize(self, stats: Any, x: Float[Array, "*batch stored"]) -> Float[Array, "*batch stored"]:
        """**Returns:** `x` with its features normalised by `stats` (a `RunningMeanStd` of the
        features, or None: unchanged) and its mask as it was."""
        if stats is None:
            return x
        if not self.mask_size:
            return stats.normalize(x)
        return jnp.concatenate([stats.normalize(x[..., : self.size]), x[..., self.size :]], axis=-1)


def _lookup(obs: Any, name: str, owner: str, names: list[str]) -> Array:
    value = obs
    for part in name.split("."):
        if isinstance(value, dict) and part in value:
            value = value[part]
        elif isinstance(value, (tuple, list)) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        else:
            got = sorted(obs) if isinstance(obs, dict) else f"a {type(obs).__name__}"
            raise ValueError(f"{owner}: obs must be a dict or tuple with the entries {names}, got {got}")
    return jnp.asarray(value)
