"""The functional environment protocol shared by every backend."""

import abc
import dataclasses
from collections.abc import Callable
from typing import Any, ClassVar

import equinox as eqx
import jax.numpy as jnp
from jaxtyping import Array, Bool, Float, PyTree

from ..core import EnvState, Key
from ._spaces import AbstractSpace


ACTION_MASK = "action_mask"
"""The key under which an env with action masks puts them in its observations: the observation
space is a `Dict` whose `"action_mask"` entry is a `MultiBinary(n)` (1 where an action is legal, at
least one per observation) for `Discrete(n)` actions, or `MultiBinary(sum(nvec))` (the factors'
masks one after another) for `MultiDiscrete(nvec)` actions. Agents that take masks read it there;
torsos see the other entries."""


class TimeStep(eqx.Module):
    """What an environment returns after `reset` or `step`.

    `terminated` means the episode reached a terminal state (no bootstrapping);
    `truncated` means it was cut off (time limit) and value targets still
    bootstrap from `info["final_obs"]` when an auto-reset replaced `obs`.
    """

    obs: PyTree
    reward: Float[Array, "*batch"]
    terminated: Bool[Array, "*batch"]
    truncated: Bool[Array, "*batch"]
    info: dict[str, Any]

    @property
    def done(self) -> Bool[Array, "*batch"]:
        """`terminated | truncated`: the episode ended at this step."""
        return self.terminated | self.truncated


def first_timestep(obs: PyTree, info: dict[str, Any] | None = None) -> TimeStep:
    """The timestep returned by `reset`: zero reward, not done."""
    return TimeStep(
        obs=obs,
        reward=jnp.zeros((), jnp.float32),
        terminated=jnp.zeros((), bool),
        truncated=jnp.zeros((), bool),
        info={} if info is None else info,
    )


@dataclasses.dataclass(frozen=True)
class Renderer:
    """How an env's states become frames, as the env says it (`AbstractEnv.renderer`), for
    `render_frames`, `check_renderable`, `renderer_name` and `frame_rate`.

    - `name`: the renderer's name (`renderer_name`: `"brax"`, `"craftax"`, ...).
    - `draw`: one episode's innermost states to frames. It gets a list of states, one per step,
      or with `stacked=True` the states stacked on a leading time axis (a JAX renderer draws the
      episode in one compiled call); it returns a list of frames (RGB or RGBA arrays, which
      `render_frames` makes `uint8` RGB and stacks), or the finished `uint8` array
      `(time, height, width, 3)`.
    - `fps`: the frame rate of an episode in real time (`frame_rate`).
    - `html`: where the suite has an interactive HTML viewer (brax's), the list of states to the page.
    - `check`: what the renderer needs at hand besides the suite (pgx: CairoSVG), checked before a
      draw: given the caller's name, it raises a one-line `ValueError` naming it.
    """

    name: str
    draw: Callable[[Any], Any]
    fps: int = 10
    stacked: bool = False
    html: Callable[[list[Any]], str] | None = None
    check: Callable[[str], Any] | None = None


class AbstractEnv(eqx.Module):
    """A pure-functional environment: `reset(key)` and `step(key, state, action)`.

    Implementations are Equinox modules: structure (the simulator, sizes) in
    static fields, numbers in array leaves, so an env can sit inside an agent
    that is jitted, vmapped and stacked.
    """

    @abc.abstractmethod
    def reset(self, key: Key) -> tuple[EnvState, TimeStep]:
        """Start an episode. **Returns:** `(env_state, timestep)`."""

    @abc.abstractmethod
    def step(self, key: Key, state: EnvState, action: Array) -> tuple[EnvState, TimeStep]:
        """Advance one step. **Returns:** `(env_state, timestep)`."""

    @property
    @abc.abstractmethod
    def observation_space(self) -> AbstractSpace:
        """The space of one (unbatched) observation."""

    @property
    @abc.abstractmethod
    def action_space(self) -> AbstractSpace:
        """The space of one (unbatched) action."""

    @property
    def name(self) -> str:
        """A human-readable identifier of the environment."""
        return type(self).__name__

    @property
    def max_episode_steps(self) -> int | None:
        """The time limit of an episode, if known."""
        return None

    @property
    def unwrapped(self) -> "AbstractEnv":
        """The innermost environment below every wrapper."""
        return self

    @property
    def descriptors(self) -> tuple[str, ...]:
        """The named state descriptors this env has, the one `descriptor="auto"` picks first
        (`DescriptorWrapper`, `evaluate(descriptor=)`, `PBT(descriptor=)`): brax envs
        `("xy", ...)`, with `"feet_contact"` for the locomotion envs that have feet; `Point2D`
        `("observation",)`. Default: none (`"observation"` and a callable still work). An env
        of a new suite declares its own here; nothing asks for its class."""
        return ()

    @property
    def renderer(self) -> Renderer | None:
        """How this env's states become frames (`render_frames`, `eqxrl.render`), or None
        (the default) where eqxrl knows no renderer for it. An env of a new suite declares its
        own here; nothing asks for its class."""
        return None


class AbstractWrapper(AbstractEnv):
    """An environment that wraps another one and forwards what it does not change."""

    env: eqx.AbstractVar[AbstractEnv]
    keeps_observation_prefix: ClassVar[bool] = False
    """Whether this wrapper's flat observation starts with the flat observation of the env it
    wraps (eqxrl's `TimeLimit`, `AutoReset`, `EpisodeStatistics`, `ClipAction`, `RescaleAction`,
    `SkillWrapper`): a `DescriptorWrapper` below it keeps its descriptor's offset."""

    def reset(self, key: Key) -> tuple[EnvState, TimeStep]:
        state, ts = self.env.reset(key)
        return state, self.transform(state, ts)

    def step(self, key: Key, state: EnvState, action: Array) -> tuple[EnvState, TimeStep]:
        state, ts = self.env.step(key, state, action)
        return state, self.transform(state, ts)

    def transform(self, state: EnvState, ts: TimeStep) -> TimeStep:
        """What this wrapper makes of each time step of the env it wraps (`state`: the env's state
        after it): a wrapper that only changes observations or `info` overrides this alone.
        Default: the time step as it is."""
        return ts

    @property
    def observation_space(self) -> AbstractSpace:
        return self.env.observation_space

    @property
    def action_space(self) -> AbstractSpace:
        return self.env.action_space

    @property
    def name(self) -> str:
        return self.env.name

    @property
    def max_episode_steps(self) -> int | None:
        return self.env.max_episode_steps

    @property
    def unwrapped(self) -> AbstractEnv:
        return self.env.unwrapped

    @property
    def descriptors(self) -> tuple[str, ...]:
        return self.env.descriptors  # (the descriptors are the innermost state's)

    @property
    def renderer(self) -> Renderer | None:
        return self.env.renderer  # (a renderer draws the innermost states)

