"""Adapter from JaxMARL multi-agent environments to eqxrl's multi-agent protocol.

JaxMARL's `step_env(key, state, actions)` takes and returns dicts keyed by agent name
(observations, rewards, dones with an `"__all__"` entry) and does not tell a terminal
state from a time limit. The adapter stacks the dicts along the agent axis in
`env.agents` order, sums the rewards into the team reward (the agents' own are in
`info["agent_rewards"]`), and reports `dones["__all__"]` as `truncated` or
`terminated` as the env's `truncation` says. Every MPE scenario ends its episodes only
by its time limit (`done = step >= max_steps`, tested before the step counter moves, so
an episode has `max_steps + 1` transitions): for MPE the done is a truncation.

Action masks: a JaxMARL env that implements `get_avail_actions(state)` (SMAX,
HeuristicEnemySMAX) or `get_legal_moves(state)` (Hanabi) gives every agent a `Dict`
observation `{"obs": <its observation>, "action_mask": <its legal actions, 1 = legal>}`, the
mask being the legal actions of the state the observation is of, so IPPO (like PPO on a
single-agent env with masks) only ever takes legal actions. `action_masks=False` keeps the
plain observation; envs without either method (the MPE scenarios) keep it always.

Spaces: JaxMARL's Discrete, MultiDiscrete (switch_riddle's observations), Box, Dict and Tuple
become eqxrl's.
"""

import contextlib
import functools
import io
import sys
from typing import Any, ClassVar

import equinox as eqx
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array

from ..core import EnvState, Key
from ..core import foreign_promotion as _foreign_promotion
from ._base import ACTION_MASK, Renderer, TimeStep
from ._multi_agent import AbstractMultiAgentEnv
from ._spaces import AbstractSpace, Box, Dict, Discrete, MultiBinary, MultiDiscrete, Tuple, as_element, flatten_space
from ._static import StaticHandle, hashable_or
from ._suite import AbstractSuiteEnv, figure_frames

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
    """A JaxMARL space (Discrete, MultiDiscrete, Box, Dict, Tuple; nested) as eqxrl's."""
    kind = type(space).__name__
    if kind == "Discrete":
        return Discrete(int(space.n))
    if kind == "MultiDiscrete":
        return MultiDiscrete(np.asarray(space.num_categories).tolist())
    if kind == "Box":
        shape = (int(space.shape),) if np.ndim(space.shape) == 0 else tuple(space.shape)  # (Hanabi's is an int)
        return Box(np.asarray(space.low, np.float32), np.asarray(space.high, np.float32), shape)
    if kind == "Dict":
        return Dict({key: _space(sub, what, name) for key, sub in space.spaces.items()})
    if kind == "Tuple":
        return Tuple([_space(sub, what, name) for sub in space.spaces])
    raise ValueError(
        f"JaxMARL env {name!r} has a {kind} {what} space; eqxrl supports Discrete, MultiDiscrete, Box, Dict and Tuple spaces"
    )


def _same(a: AbstractSpace, b: AbstractSpace) -> bool:
    """Whether two spaces are equal (a Box's bounds compared by value)."""
    leaves_a, tree_a = flatten_space(a)
    leaves_b, tree_b = flatten_space(b)
    if tree_a != tree_b or len(leaves_a) != len(leaves_b):
        return False
    for x, y in zip(leaves_a, leaves_b):
        if isinstance(x, Box) and isinstance(y, Box):
            if x.shape != y.shape or not (np.all(x.low == y.low) and np.all(x.high == y.high)):
                return False
        elif isinstance(x, Box) or isinstance(y, Box) or x != y:
            return False
    return True


def _padded(spaces: list[AbstractSpace]) -> bool:
    """Whether the agents' observations are 1-D `Box`es, observed as one unbounded `Box` of the
    largest size (smaller ones padded with zeros), as they always were."""
    return all(isinstance(s, Box) and len(s.shape) == 1 for s in spaces)


def _legal_actions_method(env: Any, jaxmarl: Any) -> str | None:
    """The method that gives `env`'s legal actions per agent: `get_avail_actions` (SMAX; the base
    class's raises NotImplementedError), else Hanabi's `get_legal_moves`; None without one."""
    if type(env).get_avail_actions is not jaxmarl.environments.MultiAgentEnv.get_avail_actions:
        return "get_avail_actions"
    return "get_legal_moves" if callable(getattr(env, "get_legal_moves", None)) else None


def _check_masks(env: Any, jaxmarl: Any, name: str, action_masks: Any, action_space: AbstractSpace) -> str | None:
    """**Returns:** the method whose legal actions become the agents' action masks, or None (no
    masks; see the module's description)."""
    if action_masks is not None and not isinstance(action_masks, bool):
        raise ValueError(f"JaxMARLEnv(action_masks) must be None, True or False, got {action_masks!r}")
    method = _legal_actions_method(env, jaxmarl)
    available = method is not None and isinstance(action_space, Discrete)
    if action_masks and not available:
        has = repr(action_space) if method is not None else "neither"
        raise ValueError(
            "JaxMARLEnv(action_masks=True) needs an env with get_avail_actions (or get_legal_moves) and Discrete "
            f"actions, {name!r} has {has}"
        )
    if not (available if action_masks is None else action_masks):
        return None
    import jax

    with _foreign_promotion():
        avail = jax.eval_shape(lambda k: getattr(env, method)(env.reset(k)[1]), jax.random.key(0))
    shapes = {a: tuple(avail[a].shape) for a in env.agents}
    if any(shape != (action_space.n,) for shape in shapes.values()):
        raise ValueError(f"JaxMARLEnv: {name!r}'s {method} must give ({action_space.n},) per agent, got {shapes}")
    return method


class JaxMARLEnv(AbstractMultiAgentEnv, AbstractSuiteEnv):
    """A JaxMARL environment behind eqxrl's multi-agent protocol.

    JaxMARL's Discrete, MultiDiscrete, Box, Dict and Tuple spaces become eqxrl's. 1-D `Box`
    observations are observed as one unbounded `Box` of the largest size, those of different
    sizes (MPE's adversaries and good agents) padded with zeros, so that they stack; otherwise
    every agent must have the same observation space (any space: its leaves stack along the
    agent axis). Every agent must have the same action space. With `action_masks` an agent's
    observation is `{"obs": <its observation>, "action_mask": <legal actions>}`.
    """

    handle: StaticHandle = eqx.field(static=True)
    truncation: bool = eqx.field(static=True)
    env_name: str = eqx.field(static=True)
    agent_list: tuple[str, ...] = eqx.field(static=True)
    obs_sizes: tuple[int, ...] | None = eqx.field(static=True)  # (1-D Box observations padded to the largest)
    legal_actions: str | None = eqx.field(static=True)
    prefix: ClassVar[str] = PREFIX
    jaxmarl_env = AbstractSuiteEnv.suite_env

    def __init__(self, env: Any, *, truncation: Any = None, action_masks: Any = None, key: Any = None, **kwargs: Any):
        """**Arguments:**

        - `env`: a JaxMARL id (`"MPE_simple_spread_v3"`) or a JaxMARL `MultiAgentEnv`.
        - `truncation`: whether JaxMARL's `dones["__all__"]` is a time limit (True: reported
          as `truncated`, value targets bootstrap) or a terminal state (False: `terminated`).
          Default: True for the MPE scenarios, which end only by their time limit; other
          envs must say.
        - `action_masks`: whether every agent's observation is a `Dict` with its legal actions
          (JaxMARL's `get_avail_actions`, or Hanabi's `get_legal_moves`) as an `"action_mask"`
          entry. Default (None): when the env implements one of them and has Discrete actions
          (SMAX, Hanabi); True demands it.
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
            if key is None:
                # (an argument of arrays, SMAX's scenario: compare by the instance)
                key = hashable_or((name, tuple(sorted(kwargs.items()))), None)
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
        if not (_padded(obs) or all(_same(obs[0], o) for o in obs)):
            spaces = {a: s for a, s in zip(agents, obs)}
            raise ValueError(
                f"JaxMARLEnv: every agent of {name!r} must have the same observation space (or 1-D Box ones, "
                f"padded to the largest), got {spaces}"
            )
        if not all(_same(acts[0], a) for a in acts):
            spaces = {a: s for a, s in zip(agents, acts)}
            raise ValueError(f"JaxMARLEnv: every agent of {name!r} must have the same action space, got {spaces}")
        self.legal_actions = _check_masks(env, jaxmarl, name, action_masks, acts[0])
        self.handle = StaticHandle(env, env if key is None else key)
        self.truncation = truncation
        self.env_name = name
        self.agent_list = agents
        self.obs_sizes = tuple(int(s.shape[0]) for s in obs) if _padded(obs) else None

    @property
    def agents(self) -> tuple[str, ...]:
        return self.agent_list

    def _converted(self, which: str) -> AbstractSpace:
        # (Built from the JaxMARL env when asked, not held in a field: a Box's bounds are
        # arrays, and a module holding one could not be hashed by `jax.jit(env.step)`.)
        with _foreign_promotion():
            space = getattr(self.jaxmarl_env, which)(self.agent_list[0])
        return _space(space, which, self.env_name)

    @property
    def _observation_space(self) -> AbstractSpace:
        if self.obs_sizes:
            return Box(-np.inf, np.inf, (max(self.obs_sizes),))
        return self._converted("observation_space")

    @property
    def _action_space(self) -> AbstractSpace:
        return self._converted("action_space")

    @property
    def action_masks(self) -> bool:
        """Whether every agent's observation carries its legal actions (`legal_actions` names
        the JaxMARL method they come from)."""
        return self.legal_actions is not None

    @property
    def agent_observation_space(self) -> AbstractSpace:
        if not self.action_masks:
            return self._observation_space
        return Dict({"obs": self._observation_space, ACTION_MASK: MultiBinary(self._action_space.n)})

    @property
    def agent_action_space(self) -> AbstractSpace:
        return self._action_space

    @property
    def renderer(self) -> Renderer | None:
        """For the MPE scenarios, JaxMARL's `MPEVisualizer` (its matplotlib figure, one draw per
        state, 10 frames a second); None for the others."""
        from jaxmarl.environments.mpe import SimpleMPE

        if isinstance(self.jaxmarl_env, SimpleMPE):
            return Renderer("jaxmarl mpe", functools.partial(_mpe_frames, self))
        return None

    @property
    def max_episode_steps(self) -> int | None:
        steps = getattr(self.jaxmarl_env, "max_steps", None)
        if self.truncation and isinstance(steps, (int, np.integer)):
            # JaxMARL ends an episode at the step that starts with `state.step >= max_steps`.
            return int(steps) + 1
        return None

    def _stack(self, obs: dict[str, Any], state: Any) -> Any:
        if self.obs_sizes:
            size = max(self.obs_sizes)
            rows = [jnp.asarray(obs[a], jnp.float32) for a in self.agent_list]
            features = jnp.stack([jnp.pad(r, (0, size - r.shape[0])) for r in rows])
        else:  # (one space for every agent: each leaf stacked in its space's dtype)
            leaves, treedef = flatten_space(self._observation_space)
            per_agent = [treedef.flatten_up_to(as_element(self._observation_space, obs[a])) for a in self.agent_list]
            features = treedef.unflatten(
                [jnp.stack([jnp.asarray(row[i], leaf.dtype) for row in per_agent]) for i, leaf in enumerate(leaves)]
            )
        if not self.action_masks:
            return features
        with _foreign_promotion():
            avail = getattr(self.jaxmarl_env, self.legal_actions)(state)
        mask = jnp.stack([jnp.asarray(avail[a]) for a in self.agent_list]).astype(jnp.int32)
        return {"obs": features, ACTION_MASK: mask}

    def _timestep(self, obs: dict[str, Array], state: Any, rewards: Array, done: Array) -> TimeStep:
        done = jnp.asarray(done, bool)
        false = jnp.zeros((), bool)
        return TimeStep(
            obs=self._stack(obs, state),
            reward=jnp.sum(rewards),
            terminated=false if self.truncation else done,
            truncated=done if self.truncation else false,
            info={"agent_rewards": rewards},
        )

    def reset(self, key: Key) -> tuple[EnvState, TimeStep]:
        with _foreign_promotion():
            obs, state = self.jaxmarl_env.reset(key)
        return state, self._timestep(obs, state, jnp.zeros((len(self.agent_list),), jnp.float32), jnp.zeros((), bool))

    def step(self, key: Key, state: EnvState, action: Array) -> tuple[EnvState, TimeStep]:
        actions = {a: action[i] for i, a in enumerate(self.agent_list)}
        with _foreign_promotion():
            obs, state, rewards, dones, _ = self.jaxmarl_env.step_env(key, state, actions)
        rewards = jnp.stack([jnp.asarray(rewards[a], jnp.float32) for a in self.agent_list])
        return state, self._timestep(obs, state, rewards, dones["__all__"])


def _mpe_frames(env: JaxMARLEnv, seq: list[Any]) -> list[np.ndarray]:
    from jaxmarl.environments.mpe import MPEVisualizer

    with _foreign_promotion():
        with contextlib.redirect_stdout(io.StringIO()):  # (it prints whether agents communicate)
            vis = MPEVisualizer(env.jaxmarl_env, seq)
        return figure_frames(vis.fig, vis.update, len(seq))
