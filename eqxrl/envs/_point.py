"""A 2-D point that moves by its action: a seconds-long testbed for skill discovery."""

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float

from ..core import Key
from ._base import AbstractEnv, TimeStep, first_timestep
from ._spaces import Box
from ._wrappers import TimeLimit


class PointState(eqx.Module):
    """The point's position."""

    pos: Float[Array, "2"]


class Point2D(AbstractEnv):
    """A point in the box `[-size, size]^2` that moves by its action clipped to `[-1, 1]^2`.

    The observation is the position (also the state descriptor DADS uses by
    default); episodes start at the origin, plus uniform noise in
    `[-start_noise, start_noise]^2`. The reward is the step's displacement along
    x (a locomotion-like task reward: the return is the final x minus the start x).
    The env never terminates and has no time limit of its own:
    `eqxrl.envs.make("Point2D-v0")` adds a `TimeLimit` (50 steps by default).
    """

    size: float = eqx.field(static=True, default=10.0)
    start_noise: float = eqx.field(static=True, default=0.0)

    def __check_init__(self):
        if isinstance(self.size, bool) or not isinstance(self.size, (int, float)) or not self.size > 0:
            raise ValueError(f"Point2D(size) must be a number > 0, got {self.size!r}")
        noise = self.start_noise
        if isinstance(noise, bool) or not isinstance(noise, (int, float)) or not 0 <= noise <= self.size:
            raise ValueError(f"Point2D(start_noise) must be in [0, size={self.size:g}], got {noise!r}")

    @property
    def name(self) -> str:
        return "Point2D-v0"

    @property
    def descriptors(self) -> tuple[str, ...]:
        """`("observation",)`: the position, which is the observation."""
        return ("observation",)

    @property
    def observation_space(self) -> Box:
        return Box(-self.size, self.size, (2,))

    @property
    def action_space(self) -> Box:
        return Box(-1.0, 1.0, (2,))

    def reset(self, key: Key) -> tuple[PointState, TimeStep]:
        pos = jax.random.uniform(key, (2,), jnp.float32, -self.start_noise, self.start_noise)
        return PointState(pos), first_timestep(pos)

    def step(self, key: Key, state: PointState, action: Array) -> tuple[PointState, TimeStep]:
        del key  # deterministic dynamics
        action = jnp.clip(jnp.asarray(action, jnp.float32).reshape(2), -1.0, 1.0)
        pos = jnp.clip(state.pos + action, -self.size, self.size)
        ts = TimeStep(
            obs=pos,
            reward=pos[0] - state.pos[0],
            terminated=jnp.zeros((), bool),
            truncated=jnp.zeros((), bool),
            info={},
        )
        return PointState(pos), ts


def point2d(max_episode_steps: int = 50, size: float = 10.0, start_noise: float = 0.0) -> TimeLimit:
    """The factory behind `eqxrl.envs.make("Point2D-v0", **kwargs)`.

    **Arguments:** the time limit `max_episode_steps`, and `Point2D`'s `size` and `start_noise`.

    **Returns:** `TimeLimit(Point2D(size, start_noise), max_episode_steps)`.
    """
    return TimeLimit(Point2D(size=size, start_noise=start_noise), max_episode_steps)
