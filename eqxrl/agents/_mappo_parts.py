"""MAPPO's parts: the team env with a global state in every agent's observation, and the
torso that builds a network on some entries of a `Dict` observation.

- `GlobalState(team, mode)`: every agent's observation becomes a `Dict` whose
  `GLOBAL_STATE` entry is the team's global state (the same for every agent): the JaxMARL
  env's world state (`get_world_state`, SMAX's and JaxNav's and the FACMAC MPE scenarios'), or
  the concatenation of every agent's observation features (the agents' stacked features,
  flattened; their action masks left out). The agent's own observation stays under its own
  entries (a `Dict` one's entries as they were; any other under `"obs"`).
  With `share=True` the team's seats together hold the global state once, not once per
  agent: agent `i`'s entry holds only the `i`-th of `num_agents` equal slices of the world
  state (zero-padded to a multiple of `num_agents`), and the concatenated observations need no
  entry at all (agent `i`'s slice of them is its own observation).
- `SelectTorso(names, inner)`: a torso spec whose network sees only the named entries of a
  `Dict` observation (MAPPO's actor its own entries, its critic the global state and the
  agent's id), built by `inner` on those entries.
- `TeamCriticTorso(num_agents, state_size, inner)`: MAPPO's critic torso over the seats of
  `GlobalState(share=True)`, batches of whole teams (see the class).
"""

import math

from typing import Any, ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array

from ..components import AbstractTorso, Encoder, MLPTorso, get_activation
from ..core import EnvState, Key
from ..envs import AbstractEnv, AbstractWrapper, Box, Dict, JaxMARLEnv, MultiAgentSpace, ObservationLayout, TimeStep
from ._ippo_envs import AGENT_ID

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
    share: bool = eqx.field(static=True, default=False)

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
    def stores_state(self) -> bool:
        """Whether the observations have a `GLOBAL_STATE` entry (all but the concatenated observations with `share`)."""
        return not (self.share and self.kind == "observations")

    @property
    def entry_size(self) -> int:
        """The size of an agent's `GLOBAL_STATE` entry: `state_size`, or its slice with `share`."""
        return math.ceil(self.state_size / self.env.observation_space.num_agents) if self.share else self.state_size

    @property
    def observation_space(self) -> MultiAgentSpace:
        team = self.env.observation_space
        own = _own_entries(team.space)
        if not self.stores_state:
            return MultiAgentSpace(Dict(own), team.num_agents)
        return MultiAgentSpace(Dict({**own, GLOBAL_STATE: Box(-np.inf, np.inf, (self.entry_size,))}), team.num_agents)

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
        (`(*batch, state_size)`) as every agent's `GLOBAL_STATE` entry (with `share`, its slice)."""
        n, lead = self.env.observation_space.num_agents, state_vector.shape[:-1]
        own = dict(obs) if isinstance(obs, dict) else {"obs": obs}
        if not self.stores_state:
            return own
        if self.share:
            pad = [(0, 0)] * len(lead) + [(0, n * self.entry_size - state_vector.shape[-1])]
            rows = jnp.pad(state_vector, pad).reshape((*lead, n, self.entry_size))
        else:
            rows = jnp.broadcast_to(state_vector[..., None, :], (*lead, n, state_vector.shape[-1]))
        return {**own, GLOBAL_STATE: rows}

    def transform(self, state: EnvState, ts: TimeStep) -> TimeStep:
        vector = self.global_state(state, ts.obs) if self.stores_state else jnp.zeros((self.state_size,))
        obs = self.with_state(ts.obs, vector)
        return TimeStep(obs, ts.reward, ts.terminated, ts.truncated, ts.info)  # (auto-resets go outside)


class _Selected(eqx.Module):
    net: Any
    spans: tuple[tuple[int, int], ...] = eqx.field(static=True)

    def __call__(self, x: Array) -> Array:  # (one observation, or a batch of them when net takes batches: an Encoder)
        if len(self.spans) == 1:
            a, b = self.spans[0]
            return self.net(x if (a, b) == (0, x.shape[-1]) else x[..., a:b])
        return self.net(jnp.concatenate([x[..., a:b] for a, b in self.spans], axis=-1))


def _entries(obs_shape: Any) -> tuple[tuple[str, tuple[int, ...]], ...]:
    """A `Dict` observation's `((name, shape), ...)` entries as plain, hashable tuples (an Encoder's static `obs_shape`)."""
    return tuple((str(name), tuple(int(d) for d in shape)) for name, shape in obs_shape)


def _spans(obs_shape: Any, names: tuple[str, ...]) -> tuple[list, list]:
    """The entries of `obs_shape` named in `names` (or whose prefix is), and their spans in the
    flat observation (adjacent ones merged)."""
    chosen, spans, start = [], [], 0
    for name, shape in obs_shape:
        size = int(np.prod(shape))
        if name in names or name.split(".")[0] in names:
            chosen.append((name, shape))
            if spans and spans[-1][1] == start:  # (adjacent entries: one slice)
                spans[-1] = (spans[-1][0], start + size)
            else:
                spans.append((start, start + size))
        start += size
    return chosen, spans


class SelectTorso(AbstractTorso):
    """A torso seeing only the entries `names` of a `Dict` observation (in their storage
    order), built by `inner` on them (MAPPO's actor and critic torsos)."""

    names: tuple[str, ...] = eqx.field(static=True, converter=tuple)
    inner: AbstractTorso = eqx.field(static=True)

    def _select(self, obs_shape: Any) -> tuple[Any, tuple[tuple[int, int], ...]]:
        """The observation shape `inner` is built on (one entry's, or the chosen entries') and their spans."""
        chosen, spans = _spans(obs_shape, self.names)
        if not chosen:
            raise ValueError(f"SelectTorso: none of {self.names} among the observation's entries {obs_shape}")
        return (chosen[0][1] if len(chosen) == 1 else tuple(chosen)), tuple(spans)

    def build(self, obs_shape: Any, *, key: Key) -> _Selected:
        sub, spans = self._select(obs_shape)
        return _Selected(self.inner.build(sub, key=key), spans)

    def make(self, obs_shape: Any, *, key: Key) -> Encoder:
        """The inner torso made as an `Encoder` on the selected entries, which batches as that
        torso does (an MLP takes any batch axes, other nets are vmapped): the slices take any."""
        obs_shape = _entries(obs_shape)
        sub, spans = self._select(obs_shape)
        inner = self.inner.make(sub, key=key)
        return Encoder(_Selected(inner, spans), obs_shape, inner.features, batched=True)


class _TeamCritic(eqx.Module):
    net: Encoder  # (the inner torso, on the global state and the id)
    state: tuple[tuple[int, int], ...] = eqx.field(static=True)  # (the spans of a seat's slice of the state)
    num_agents: int = eqx.field(static=True)
    state_size: int = eqx.field(static=True)
    split: bool = eqx.field(static=True)  # (net is an MLPTorso's plain MLP: its first layer is split)

    def __call__(self, x: Array) -> Array:
        n = self.num_agents
        if x.ndim < 2 or x.shape[-2] % n:
            raise ValueError(
                f"MAPPO's critic takes whole teams (*batch, seats, {x.shape[-1]}), every team's {n} seats adjacent, got shape {x.shape}"
            )
        g = x.reshape((*x.shape[:-2], x.shape[-2] // n, n, x.shape[-1]))
        own = jnp.concatenate([g[..., a:b] for a, b in self.state], axis=-1) if len(self.state) > 1 else g[..., self.state[0][0] : self.state[0][1]]
        s = own.reshape((*g.shape[:-2], -1))[..., : self.state_size]  # (once per team)
        if self.split:  # The first layer is linear: W [s, id] = W_s s + W_id id, W_s s once per team, W_id id row i for seat i.
            body = self.net.net
            act, first = get_activation(body.activation), body.layers[0]
            h = (s @ first.weight[: self.state_size])[..., None, :] + (first.weight[self.state_size :] + first.bias)
            h = act(h.reshape((*x.shape[:-1], h.shape[-1])))  # (the seats' batch again: XLA's CPU products prefer 2-D)
            for layer in body.layers[1:]:
                h = act(layer(h))
            return h
        ids = jnp.broadcast_to(jnp.eye(n, dtype=s.dtype), (*s.shape[:-1], n, n))
        inputs = jnp.concatenate([jnp.broadcast_to(s[..., None, :], (*s.shape[:-1], n, s.shape[-1])), ids], axis=-1)
        return self.net(inputs.reshape((*x.shape[:-1], inputs.shape[-1])))


class TeamCriticTorso(AbstractTorso):
    """MAPPO's critic torso on the seats of `GlobalState(share=True)` with ids: its network takes
    observations `(*batch, seats, size)` whose every `num_agents` adjacent seats are one team's
    (one team env step, in agent order; PPO's minibatches keep them together through the seats'
    `minibatch_group`), rebuilds the team's global state (`state_size` floats) once from their
    slices (the entries `slices`, concatenated), and gives every seat `inner` on `[global state,
    the seat's one-hot id]`, the id being the seat's place in its team. An `MLPTorso`'s first
    layer is split, `W_s s + W_id id`: `W_s s` is computed once per team, and `W_id id` is
    `W_id`'s row of the seat."""

    whole_teams: ClassVar[bool] = True
    num_agents: int = eqx.field(static=True)
    state_size: int = eqx.field(static=True)
    inner: AbstractTorso = eqx.field(static=True)
    slices: tuple[str, ...] = eqx.field(static=True, default=(GLOBAL_STATE,), converter=tuple)

    def build(self, obs_shape: Any, *, key: Key) -> _TeamCritic:
        state = _spans(obs_shape, self.slices)[1]
        sub = ((GLOBAL_STATE, (self.state_size,)), (AGENT_ID, (self.num_agents,)))
        split = isinstance(self.inner, MLPTorso) and not self.inner.layer_norm and bool(self.inner.hidden_sizes)
        return _TeamCritic(self.inner.make(sub, key=key), tuple(state), self.num_agents, self.state_size, split)

    def make(self, obs_shape: Any, *, key: Key) -> Encoder:
        obs_shape = _entries(obs_shape)
        net = self.build(obs_shape, key=key)
        return Encoder(net, obs_shape, net.net.features, batched=True)
