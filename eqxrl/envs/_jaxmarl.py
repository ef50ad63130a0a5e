"""Adapter from JaxMARL multi-agent environments to eqxrl's multi-agent protocol.

JaxMARL's `step_env(key, state, actions)` takes and returns dicts keyed by agent name
(observations, rewards, dones with an `"__all__"` entry) and does not tell a terminal
state from a time limit. The adapter stacks the dicts along the agent axis in
`env.agents` order, sums the rewards into the team reward (the agents' own are in
`info["agent_rewards"]`), and reports `dones["__all__"]` as `truncated` or
`terminated` as the env's `truncation` says. Every MPE scenario ends its episodes only
by its time limit (`done = step >= max_steps`, tested before the step counter moves, so
an episode has `max_steps + 1` transitions): for MPE the done is a truncation.
"""

import io
import sys
from typing import Any

import equinox as eqx
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array

from ..core import EnvState, Key
from ..core import foreign_promotion as _foreign_promotion
from ._base import TimeStep
from ._multi_agent import AbstractMultiAgentEnv
from ._spaces import AbstractSpace, Box, Discrete
from ._static import StaticHandle

PREFIX = "jaxmarl/"


def import_jaxmarl() -> Any:
    """`import jaxmarl`, without the lines it prints about its optional submodules.

    JaxMARL's MABrax module sets `sys.stdout`/`sys.stderr` to `sys.__stdout__`/`sys.__stderr__`
    while it imports, so those are redirected too, and all four are restored afterwards."""
    saved = sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__
    sink = io.StringIO()
    try:
        sys.stdout = sys.__stdout__ = sink
        sys.stderr = sys.__stderr__ = sink
        import jaxmarl
    finally:
        sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__ = saved
    return jaxmarl


def jaxmarl_ids() -> list[str]:
    """Every `jaxmarl/<id>` name `eqxrl.envs.make` accepts (JaxMARL's registry)."""
    import_jaxmarl()
    from jaxmarl.registration import registered_envs

    return [PREFIX + name for name in registered_envs]


def _space(space: Any, what: str, name: str) -> AbstractSpace:
    kind = type(space).__name__
    if kind == "Discrete":
        return Discrete(int(space.n))
    if kind == "Box":
        return Box(np.asarray(space.low, np.float32), np.asarray(space.high, np.float32), tuple(space.shape))
    raise ValueError(f"JaxMARL env {name!r} has a {kind} {what} space; eqxrl supports Discrete and Box spaces")


def _same(a: AbstractSpace, b: AbstractSpace) -> bool:
    if isinstance(a, Discrete) and isinstance(b, Discrete):
        return a.n == b.n
    if isinstance(a, Box) and isinstance(b, Box):
        return a.shape == b.shape and bool(np.all(a.low == b.low) and np.all(a.high == b.high))
    return False


class JaxMARLEnv(AbstractMultiAgentEnv):
    """A JaxMARL environment behind eqxrl's multi-agent protocol.

    Observations of different sizes (MPE's adversaries and good agents) are padded with
    zeros to the largest, so that they stack; every agent must have the same action space.
    """

    handle: StaticHandle = eqx.field(static=True)
    truncation: bool = eqx.field(static=True)
    env_name: str = eqx.field(static=True)
    agent_list: tuple[str, ...] = eqx.field(static=True)
    obs_sizes: tuple[int, ...] = eqx.field(static=True)
    _action_space: AbstractSpace

    def __init__(self, env: Any, *, truncation: Any = None, key: Any = None, **kwargs: Any):
        """**Arguments:**

        - `env`: a JaxMARL id (`"MPE_simple_spread_v3"`) or a JaxMARL `MultiAgentEnv`.
        - `truncation`: whether JaxMARL's `dones["__all__"]` is a time limit (True: reported
          as `truncated`, value targets bootstrap) or a terminal state (False: `terminated`).
          Default: True for the MPE scenarios, which end only by their time limit; other
          envs must say.
        - `key`: a value identifying `env` for the compilation cache (default: the id and
          `kwargs`, or the instance itself).
        - `**kwargs`: the JaxMARL constructor's keywords (with an id only).
        """
        jaxmarl = import_jaxmarl()
        if isinstance(env, str):
            from jaxmarl.registration import registered_envs

            if env not in registered_envs:
                raise ValueError(f"JaxMARLEnv(env): unknown JaxMARL id {env!r}; JaxMARL has {sorted(registered_envs)}")
            name = env
            with _foreign_promotion():
                env = jaxmarl.make(name, **kwargs)
            key = (name, tuple(sorted(kwargs.items()))) if key is None else key
        else:
            if kwargs:
                raise ValueError(f"JaxMARLEnv: keyword arguments {sorted(kwargs)} need an env id, not an instance")
            if not isinstance(env, jaxmarl.environments.MultiAgentEnv):
                raise ValueError(f"JaxMARLEnv(env) must be a JaxMARL id or MultiAgentEnv, got {env!r}")
            name = type(env).__name__
        mpe = isinstance(env, jaxmarl.environments.SimpleMPE)
        if truncation is None:
            if not mpe:
                raise ValueError(
                    f"JaxMARLEnv(truncation) must be given for {name!r} (True: its dones are time limits, "
                    "False: terminal states); only the MPE scenarios default to True"
                )
            truncation = True
        if not isinstance(truncation, bool):
            raise ValueError(f"JaxMARLEnv(truncation) must be True or False, got {truncation!r}")
        agents = tuple(env.agents)
        with _foreign_promotion():
            obs = [_space(env.observation_space(a), "observation", name) for a in agents]
            acts = [_space(env.action_space(a), "action", name) for a in agents]
        if not all(isinstance(s, Box) and len(s.shape) == 1 for s in obs):
            raise ValueError(f"JaxMARLEnv: {name!r} needs 1-D Box observations for every agent, got {obs}")
        if not all(_same(acts[0], a) for a in acts):
            spaces = {a: s for a, s in zip(agents, acts)}
            raise ValueError(f"JaxMARLEnv: every agent of {name!r} must have the same action space, got {spaces}")
        self.handle = StaticHandle(env, env if key is None else key)
        self.truncation = truncation
        self.env_name = name
        self.agent_list = agents
        self.obs_sizes = tuple(int(s.shape[0]) for s in obs)
        self._action_space = acts[0]

    @property
    def jaxmarl_env(self) -> Any:
        return self.handle.obj

    @property
    def name(self) -> str:
        return PREFIX + self.env_name

    @property
    def agents(self) -> tuple[str, ...]:
        return self.agent_list

    @property
    def agent_observation_space(self) -> Box:
        return Box(-np.inf, np.inf, (max(self.obs_sizes),))

    @property
    def agent_action_space(self) -> AbstractSpace:
        return self._action_space

    @property
    def max_episode_steps(self) -> int | None:
        steps = getattr(self.jaxmarl_env, "max_steps", None)
        if self.truncation and isinstance(steps, (int, np.integer)):
            # JaxMARL ends an episode at the step that starts with `state.step >= max_steps`.
            return int(steps) + 1
        return None

    def _stack(self, obs: dict[str, Array]) -> Array:
        size = max(self.obs_sizes)
        rows = [jnp.asarray(obs[a], jnp.float32) for a in self.agent_list]
        return jnp.stack([jnp.pad(r, (0, size - r.shape[0])) for r in rows])

    def _timestep(self, obs: dict[str, Array], rewards: Array, done: Array) -> TimeStep:
        done = jnp.asarray(done, bool)
        false = jnp.zeros((), bool)
        return TimeStep(
            obs=self._stack(obs),
            reward=jnp.sum(rewards),
            terminated=false if self.truncation else done,
            truncated=done if self.truncation else false,
            info={"agent_rewards": rewards},
        )

    def reset(self, key: Key) -> tuple[EnvState, TimeStep]:
        with _foreign_promotion():
            obs, state = self.jaxmarl_env.reset(key)
        return state, self._timestep(obs, jnp.zeros((len(self.agent_list),), jnp.float32), jnp.zeros((), bool))

    def step(self, key: Key, state: EnvState, action: Array) -> tuple[EnvState, TimeStep]:
        actions = {a: action[i] for i, a in enumerate(self.agent_list)}
        with _foreign_promotion():
            obs, state, rewards, dones, _ = self.jaxmarl_env.step_env(key, state, actions)
        rewards = jnp.stack([jnp.asarray(rewards[a], jnp.float32) for a in self.agent_list])
        return state, self._timestep(obs, rewards, dones["__all__"])
