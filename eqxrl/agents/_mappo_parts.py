"""MAPPO's parts: the team env with a global state in every agent's observation, and the
torso that builds a network on some entries of a `Dict` observation.

- `GlobalState(team, mode)`: every agent's observation becomes a `Dict` whose
  `GLOBAL_STATE` entry is the team's global state (the same for every agent): the JaxMARL
  env's world state (`get_world_state`, SMAX's and JaxNav's and the FACMAC MPE scenarios'), or
  the concatenation of every agent's observation features (the agents' stacked features,
  flattened; their action masks left out). The agent's own observation stays under its own
  entries (a `Dict` one's entries as they were; any other under `"obs"`).
- `SelectTorso(names, inner)`: a torso spec whose network sees only the named entries of a
  `Dict` observation (MAPPO's actor its own entries, its critic the global state and the
  agent's id), built by `inner` on those entries.
"""

from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array

from ..components import AbstractTorso
from ..core import EnvState, Key
from ..envs import AbstractEnv, AbstractWrapper, Box, Dict, JaxMARLEnv, MultiAgentSpace, ObservationLayout, TimeStep

GLOBAL_STATE = "global_state"
"""The entry of every agent's observation (MAPPO's seats) that holds the team's global state."""
GLOBAL_STATE_MODES = ("auto", "world_state", "observations")


def world_state_source(team: AbstractEnv) -> Any:
    """The JaxMARL env whose `get_world_state(state)` gives `team`'s world state: `team` must be
    a `JaxMARLEnv` itself (a wrapper's state is not JaxMARL's), its env one with that method."""
    if not isinstance(team, JaxMARLEnv):
        return None
    inner = team.jaxmarl_env
    return inner if callable(getattr(inner, "get_world_state", None)) else None


def global_state_kind(team: AbstractEnv, mode: str) -> str:
    """**Returns:** `"world_state"` or `"observations"`: what `mode` (`MAPPO.global_state`) uses on `team`."""
    if mode not in GLOBAL_STATE_MODES:
        raise ValueError(f"MAPPO(global_state) must be 'auto', 'world_state' or 'observations', got {mode!r}")
    has = world_state_source(team) is not None
    if mode == "world_state" and not has:
        raise ValueError(
            "MAPPO(global_state='world_state') needs a JaxMARL env with get_world_state (SMAX, JaxNav, "
            f"MPE_simple_facmac_*), got {team.name!r}; use 'observations' (every agent's observation, concatenated)"
        )
    return "world_state" if mode == "world_state" or (mode == "auto" and has) else "observations"


def _own_entries(space: Any) -> dict[str, Any]:
    """An agent's own observation as `Dict` entries (a `Dict` one's, else `{"obs": space}`)."""
    if isinstance(space, Dict):
        if GLOBAL_STATE in space.spaces:
            raise ValueError(f"MAPPO adds a {GLOBAL_STATE!r} entry to every agent's observation, and it has one already")
        return dict(space.spaces)
    return {"obs": space}


class GlobalState(AbstractWrapper):
    """A multi-agent env whose every agent also observes the team's global state (see the
    module's description); `kind` is `"world_state"` or `"observations"`."""

    env: AbstractEnv
    kind: str = eqx.field(static=True, default="observations")

    @property
    def agent_layout(self) -> ObservationLayout:
        team = self.env.observation_space
        return ObservationLayout.of(team.space, self.env.action_space.space, "MAPPO")

    @property
    def state_size(self) -> int:
        if self.kind == "observations":
            return self.env.observation_space.num_agents * self.agent_layout.size
        state = jax.eval_shape(lambda k: self.env.reset(k)[0], jax.random.key(0))
        return int(jax.eval_shape(self._world_state, state).shape[0])

    @property
    def observation_space(self) -> MultiAgentSpace:
        team = self.env.observation_space
        size = self.state_size
        return MultiAgentSpace(Dict({**_own_entries(team.space), GLOBAL_STATE: Box(-np.inf, np.inf, (size,))}), team.num_agents)

    def global_state(self, state: EnvState, obs: Any) -> Array:
        """The team's global state, `(state_size,)`, at env state `state` and team observations `obs`."""
        if self.kind == "world_state":
            return self._world_state(state)
        features = self.agent_layout.split(self.agent_layout.flatten(obs, "MAPPO"))[0]
        return features.reshape(-1)

    def _world_state(self, state: EnvState) -> Array:
        """The JaxMARL world state as one vector: an array flattened (SMAX's is one vector, JaxNav's
        one row per agent), a dict of the agents' (the FACMAC scenarios') concatenated in agent order."""
        world = world_state_source(self.env).get_world_state(state)
        parts = [world[a] for a in self.env.agents] if isinstance(world, dict) else [world]
        return jnp.concatenate([jnp.asarray(p, jnp.float32).reshape(-1) for p in parts])

    def with_state(self, obs: Any, state_vector: Array) -> dict[str, Array]:
        """Team observations `obs` (`(*batch, num_agents, ...)`) with the global state `state_vector`
        (`(*batch, state_size)`) as every agent's `GLOBAL_STATE` entry."""
        n = self.env.observation_space.num_agents
        rows = jnp.broadcast_to(state_vector[..., None, :], (*state_vector.shape[:-1], n, state_vector.shape[-1]))
        own = dict(obs) if isinstance(obs, dict) else {"obs": obs}
        return {**own, GLOBAL_STATE: rows}

    def transform(self, state: EnvState, ts: TimeStep) -> TimeStep:
        obs = self.with_state(ts.obs, self.global_state(state, ts.obs))
        return TimeStep(obs, ts.reward, ts.terminated, ts.truncated, ts.info)  # (auto-resets go outside)


class _Selected(eqx.Module):
    net: Any
    spans: tuple[tuple[int, int], ...] = eqx.field(static=True)

    def __call__(self, x: Array) -> Array:
        if len(self.spans) == 1:
            a, b = self.spans[0]
            return self.net(x[a:b])
        return self.net(jnp.concatenate([x[a:b] for a, b in self.spans]))


class SelectTorso(AbstractTorso):
    """A torso seeing only the entries `names` of a `Dict` observation (in their storage
    order), built by `inner` on them (MAPPO's actor and critic torsos)."""

    names: tuple[str, ...] = eqx.field(static=True, converter=tuple)
    inner: AbstractTorso = eqx.field(static=True)

    def build(self, obs_shape: Any, *, key: Key) -> _Selected:
        chosen, spans, start = [], [], 0
        for name, shape in obs_shape:
            size = int(np.prod(shape))
            if name in self.names or name.split(".")[0] in self.names:
                chosen.append((name, shape))
                if spans and spans[-1][1] == start:  # (adjacent entries: one slice)
                    spans[-1] = (spans[-1][0], start + size)
                else:
                    spans.append((start, start + size))
            start += size
        if not chosen:
            raise ValueError(f"SelectTorso: none of {self.names} among the observation's entries {obs_shape}")
        sub = chosen[0][1] if len(chosen) == 1 else tuple(chosen)
        return _Selected(self.inner.build(sub, key=key), tuple(spans))
