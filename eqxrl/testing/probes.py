"""Probe environments with known values and known optimal actions (after Andy Jones'
"debugging RL" probes).

Each episode is a few steps long and the right answer is known in closed form, so an
agent that learns anything learns a probe in seconds, and a probe it fails points at
one part of the agent:

| probe | right answer | a failure points at |
| --- | --- | --- |
| `ConstantReward` | `V = 1` | the value loss or its optimiser |
| `ObservationReward` | `V(s) = s` | the critic's input (backprop through the torso) |
| `TwoStepDiscounting` | `V(0) = gamma`, `V(1) = 1` | the discount and the bootstrap |
| `ActionReward` | action 1 (continuous: 0.5) | the policy gradient / the greedy action |
| `ObservationActionReward` | action 1 at `+1`, 0 at `-1` (continuous: `s / 2`) | the policy's input, or actions paired with the wrong observations |
| `TimeLimitBootstrap` | `V(+1) = 1 / (1 - gamma)`, `V(-1) = 1` | truncation treated as termination, or termination bootstrapped |
| `DelayedReward` | `V(s_t) = gamma^(T-1-t) * reward` | n-step returns: an off-by-one window, a discount applied twice |
| `MaskedActions` | the highest legal action; never an illegal one | action masks ignored, or a stale mask (`state.illegal` counts) |
| `MultiAgentMaskedActions` | each agent: its highest legal action; never an illegal one | a multi-agent agent (IPPO) ignoring an agent's mask, or taking another agent's |

Observations are float32 vectors of shape `(1,)`; with `discrete_actions=True`
(the default) the action space is `Discrete(2)`, else `Box(-1, 1, (1,))`. `MaskedActions`
(a `Dict` observation with an action mask, `Discrete(num_actions)` actions) and its
multi-agent twin `MultiAgentMaskedActions` are the exceptions.
"""

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array

from ..envs import (
    ACTION_MASK,
    AbstractEnv,
    AbstractMultiAgentEnv,
    Box,
    Dict,
    Discrete,
    MultiBinary,
    MultiDiscrete,
    TimeStep,
    first_timestep,
)


class ProbeState(eqx.Module):
    """A probe's state: the current observation and the step within the episode."""

    obs: Array
    t: Array


def _ts(obs, reward, terminated, truncated=False) -> TimeStep:
    return TimeStep(
        obs=obs,
        reward=jnp.asarray(reward, jnp.float32),
        terminated=jnp.asarray(terminated, bool),
        truncated=jnp.asarray(truncated, bool),
        info={},
    )


def _start(obs) -> tuple[ProbeState, TimeStep]:
    return ProbeState(obs, jnp.zeros((), jnp.int32)), first_timestep(obs)


def _sign(key) -> Array:
    """`+1` or `-1` with equal probability, as an observation of shape `(1,)`."""
    return jnp.where(jax.random.bernoulli(key), 1.0, -1.0).reshape(1).astype(jnp.float32)


class AbstractProbe(AbstractEnv):
    """A probe environment: one-dimensional observations in `[-1, 1]`, two actions (or one
    continuous action in `[-1, 1]`)."""

    discrete_actions: eqx.AbstractVar[bool]

    @property
    def observation_space(self) -> Box:
        return Box(-1.0, 1.0, (1,))

    @property
    def action_space(self) -> Discrete | Box:
        return Discrete(2) if self.discrete_actions else Box(-1.0, 1.0, (1,))

    @property
    def max_episode_steps(self) -> int:
        return 2


class ConstantReward(AbstractProbe):
    """One step, reward +1 whatever happens: `V(s) = 1`."""

    discrete_actions: bool = eqx.field(static=True, default=True)

    def reset(self, key):
        return _start(jnp.zeros((1,), jnp.float32))

    def step(self, key, state, action):
        return state, _ts(state.obs, 1.0, True)


class ObservationReward(AbstractProbe):
    """One step, observation +-1 at random, reward = observation: `V(s) = s`."""

    discrete_actions: bool = eqx.field(static=True, default=True)

    def reset(self, key):
        return _start(_sign(key))

    def step(self, key, state, action):
        return state, _ts(state.obs, state.obs[0], True)


class TwoStepDiscounting(AbstractProbe):
    """Two steps (observation 0 then 1), reward 1 at the second only: `V(0) = gamma`, `V(1) = 1`."""

    discrete_actions: bool = eqx.field(static=True, default=True)

    def reset(self, key):
        return _start(jnp.zeros((1,), jnp.float32))

    def step(self, key, state, action):
        last = state.t >= 1
        obs = jnp.ones((1,), jnp.float32)
        return ProbeState(obs, state.t + 1), _ts(obs, jnp.where(last, 1.0, 0.0), last)


class ActionReward(AbstractProbe):
    """One step. Discrete: reward 1 for action 1, else 0. Continuous: reward `1 - (a - 0.5)^2`."""

    discrete_actions: bool = eqx.field(static=True, default=True)

    def reset(self, key):
        return _start(jnp.zeros((1,), jnp.float32))

    def step(self, key, state, action):
        if self.discrete_actions:
            reward = jnp.where(action == 1, 1.0, 0.0)
        else:
            reward = 1.0 - jnp.square(action[0] - 0.5)
        return state, _ts(state.obs, reward, True)


class ObservationActionReward(AbstractProbe):
    """One step, observation +-1. An integer action: reward 1 when it matches the observation
    (1 for +1, 0 for -1), else 0. A continuous one: reward `1 - (a - s / 2)^2`."""

    discrete_actions: bool = eqx.field(static=True, default=True)

    def reset(self, key):
        return _start(_sign(key))

    def step(self, key, state, action):
        # By the action's dtype, not the flag: a subclass with another action space may map its
        # actions to 0/1 and call this step.
        if jnp.issubdtype(jnp.result_type(action), jnp.integer):
            want = jnp.where(state.obs[0] > 0, 1, 0)
            reward = jnp.where(action == want, 1.0, 0.0)
        else:
            reward = 1.0 - jnp.square(action[0] - 0.5 * state.obs[0])
        return state, _ts(state.obs, reward, True)


class TimeLimitBootstrap(AbstractProbe):
    """Reward 1 on every step, observation +-1 at random at reset. At `+1` the episode is
    truncated after one step (a time limit of 1) in a state that goes on forever; at `-1`
    it terminates. So `V(+1) = 1 / (1 - gamma)` (bootstrapped through the truncation from
    `info["final_obs"] = +1`) and `V(-1) = 1` (nothing after a termination).

    An agent that treats truncation as termination learns `V(+1) = 1`; one that bootstraps
    through termination learns `V(-1) = 1 / (1 - gamma)`.
    """

    discrete_actions: bool = eqx.field(static=True, default=True)

    @property
    def max_episode_steps(self) -> int:
        return 1

    def reset(self, key):
        return _start(_sign(key))

    def step(self, key, state, action):
        continuing = state.obs[0] > 0
        return state, _ts(state.obs, 1.0, ~continuing, continuing)


class DelayedReward(AbstractProbe):
    """`delay` steps whatever the actions, observations `-1 .. 1` evenly spaced (step `t` of
    the episode), `reward` on the last step only and 0 before:
    `V(s_t) = gamma^(delay - 1 - t) * reward`.

    An n-step window (n < delay - 1) bootstraps from the middle of the chain, so a window
    one step too long or too short, or a discount applied twice, gets the early values
    wrong by a factor of `gamma`.
    """

    discrete_actions: bool = eqx.field(static=True, default=True)
    delay: int = eqx.field(static=True, default=5)
    reward: float = eqx.field(static=True, default=4.0)

    def __check_init__(self):
        if isinstance(self.delay, bool) or not isinstance(self.delay, int) or self.delay < 2:
            raise ValueError(f"DelayedReward(delay) must be an int >= 2, got {self.delay!r}")

    @property
    def max_episode_steps(self) -> int:
        return self.delay

    def observation_at(self, t) -> Array:
        """**Returns:** the observation of step `t` (0-based) of an episode, shape `(1,)`."""
        return (2.0 * jnp.asarray(t, jnp.float32) / (self.delay - 1) - 1.0).reshape(1)

    def reset(self, key):
        return _start(self.observation_at(0))

    def step(self, key, state, action):
        last = state.t >= self.delay - 1
        t = jnp.minimum(state.t + 1, self.delay - 1)  # (the observation after the last step is never used)
        obs = self.observation_at(t)
        return ProbeState(obs, t), _ts(obs, jnp.where(last, self.reward, 0.0), last)


class MaskedState(eqx.Module):
    """`MaskedActions`' state: the legal actions now, and how many illegal actions were taken."""

    mask: Array
    illegal: Array


class MaskedActions(AbstractEnv):
    """`num_actions` actions, a random non-empty set of them legal at every step (the
    observation's `ACTION_MASK` entry; its `"legal"` entry is the same flags as floats, so the
    policy can see them). A legal action earns 1 when it is the highest legal action and 0
    otherwise; an illegal one earns 2, so a policy that ignores its masks, or acts on a stale
    one, learns to take them. The episode never ends; `state.illegal` counts the illegal
    actions taken since `reset` (the count a test asserts is 0).

    With `factors=k > 1` the action is `MultiDiscrete((num_actions,) * k)`, each entry with a
    legal set of its own (the mask: the entries' flags one after another, `k * num_actions`),
    the reward the entries' rewards averaged, and every illegal entry counted.
    """

    num_actions: int = eqx.field(static=True, default=4)
    factors: int = eqx.field(static=True, default=1)

    def __check_init__(self):
        for name, low in (("num_actions", 2), ("factors", 1)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f"MaskedActions({name}) must be an int >= {low}, got {value!r}")

    @property
    def observation_space(self) -> Dict:
        size = self.num_actions * self.factors
        return Dict({ACTION_MASK: MultiBinary(size), "legal": Box(0.0, 1.0, (size,))})

    @property
    def action_space(self) -> Discrete | MultiDiscrete:
        return Discrete(self.num_actions) if self.factors == 1 else MultiDiscrete((self.num_actions,) * self.factors)

    def draw_masks(self, key, batch_shape: tuple[int, ...] = ()) -> Array:
        """**Returns:** action masks (int32 0/1, `(*batch_shape, factors * num_actions)`): each
        entry's legal set uniform among the non-empty ones."""
        mask = jax.random.bernoulli(key, 0.5, (*batch_shape, self.factors, self.num_actions))
        # A uniform non-empty subset: redraw the all-illegal pattern as "only the last legal".
        mask = mask.at[..., -1].set(mask[..., -1] | ~jnp.any(mask, axis=-1))
        return mask.astype(jnp.int32).reshape(*batch_shape, self.factors * self.num_actions)

    def observation(self, mask) -> dict:
        """**Returns:** the observation of action masks `mask` (any leading axes)."""
        return {ACTION_MASK: mask, "legal": mask.astype(jnp.float32)}

    def _factored(self, mask: Array, action: Array) -> tuple[Array, Array]:
        mask = mask.reshape(*mask.shape[:-1], self.factors, self.num_actions)
        action = jnp.asarray(action).reshape(*mask.shape[:-2], self.factors)
        return mask, action

    def best_action(self, mask) -> Array:
        """**Returns:** the highest legal action of `mask` (any leading axes; one per entry
        `(..., factors)` when `factors > 1`)."""
        n = self.num_actions
        mask = mask.reshape(*mask.shape[:-1], self.factors, n)
        best = (n - 1 - jnp.argmax(jnp.flip(mask, axis=-1), axis=-1)).astype(jnp.int32)
        return best[..., 0] if self.factors == 1 else best

    def legal(self, mask, action) -> Array:
        """**Returns:** per entry, whether `action` is legal under `mask` (any leading axes;
        `(..., factors)`)."""
        mask, action = self._factored(mask, action)
        return jnp.take_along_axis(mask, action[..., None], axis=-1)[..., 0] > 0

    def pay(self, mask, action) -> tuple[Array, Array]:
        """**Returns:** `(reward, illegal)` of `action` under `mask` (any leading axes): the
        entries' rewards averaged (1 for the best legal, 0 for another legal, 2 for an illegal
        choice), and the number of illegal entries."""
        legal = self.legal(mask, action)
        best = self.best_action(mask).reshape(legal.shape) == jnp.asarray(action).reshape(legal.shape)
        reward = jnp.mean(jnp.where(legal, jnp.where(best, 1.0, 0.0), 2.0), axis=-1).astype(jnp.float32)
        return reward, jnp.sum((~legal).astype(jnp.int32), axis=-1)

    def reset(self, key):
        mask = self.draw_masks(key)
        return MaskedState(mask, jnp.zeros((), jnp.int32)), first_timestep(self.observation(mask))

    def step(self, key, state, action):
        reward, illegal = self.pay(state.mask, action)
        mask = self.draw_masks(key)
        return MaskedState(mask, state.illegal + illegal), _ts(self.observation(mask), reward, False)

class MultiAgentMaskedActions(AbstractMultiAgentEnv):
    """`MaskedActions` for a team of `team_size` agents (`eqxrl.envs.AbstractMultiAgentEnv`):
    every agent has its own random non-empty set of legal actions at every step (its `Dict`
    observation's `ACTION_MASK` entry, and the same flags as floats in `"legal"`) and its own
    reward: 1 for its highest legal action, 0 for another legal one, 2 for an illegal one, so
    an agent that ignores its mask, or acts on a stale one or another agent's, learns to take
    illegal actions. With `masks=False` the observation is `{"legal": ...}` alone (no mask:
    nothing stops the illegal actions). The episode never ends; `state.illegal` counts each
    agent's illegal actions since `reset`. With `factors=k > 1` every agent's action is
    `MultiDiscrete((num_actions,) * k)`, each entry masked on its own (as `MaskedActions`).
    """

    team_size: int = eqx.field(static=True, default=2)
    num_actions: int = eqx.field(static=True, default=4)
    masks: bool = eqx.field(static=True, default=True)
    factors: int = eqx.field(static=True, default=1)

    def __check_init__(self):
        for name, least in (("team_size", 1), ("num_actions", 2), ("factors", 1)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                raise ValueError(f"MultiAgentMaskedActions({name}) must be an int >= {least}, got {value!r}")

    @property
    def agents(self) -> tuple[str, ...]:
        return tuple(f"agent_{i}" for i in range(self.team_size))

    @property
    def single(self) -> MaskedActions:
        """One agent's `MaskedActions` (its spaces, masks and rewards)."""
        return MaskedActions(self.num_actions, self.factors)

    @property
    def agent_observation_space(self) -> Dict:
        space = self.single.observation_space
        return space if self.masks else Dict({"legal": space.spaces["legal"]})

    @property
    def agent_action_space(self) -> Discrete | MultiDiscrete:
        return self.single.action_space

    def _draw(self, key) -> Array:
        return self.single.draw_masks(key, (self.team_size,))

    def _obs(self, mask) -> dict:
        legal = mask.astype(jnp.float32)
        return {ACTION_MASK: mask, "legal": legal} if self.masks else {"legal": legal}

    def reset(self, key):
        mask = self._draw(key)
        ts = first_timestep(self._obs(mask), {"agent_rewards": jnp.zeros((self.team_size,), jnp.float32)})
        return MaskedState(mask, jnp.zeros((self.team_size,), jnp.int32)), ts

    def step(self, key, state, action):
        rewards, illegal = self.single.pay(state.mask, action)  # (team,) each
        mask = self._draw(key)
        new = MaskedState(mask, state.illegal + illegal)
        ts = TimeStep(self._obs(mask), jnp.sum(rewards), jnp.zeros((), bool), jnp.zeros((), bool), {"agent_rewards": rewards})
        return new, ts
