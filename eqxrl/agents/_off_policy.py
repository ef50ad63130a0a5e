"""The off-policy training loop shared by DQN, DDPG, TD3 and SAC.

An off-policy agent implements four hooks (`init_learner`, `explore`,
`greedy`, `update`) and declares its configuration fields; this module's
`AbstractOffPolicyAgent` supplies `init`, `train_iteration` and `act`:

1. collect `rollout_length` steps from `num_envs` envs (uniform random actions
   until `learning_starts` env steps, then `explore`), pushing each step into
   an n-step window and the window's oldest n-step transition into the
   replay buffer;
2. once `learning_starts` steps are in, run `num_updates` gradient updates
   (`updates_per_step` per env step), each on a sampled batch, updating PER
   priorities from the returned TD errors.

Warm-up is decided from the unbatched `Clock`, so it is a real `lax.cond`
even when seeds or population members are vmapped, and the replay buffer
is never copied by a select.
"""

import abc

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, Int, PyTree

from ..core import EnvState, Key, Metrics, check_hyperparameter, check_positive_int, is_positive_int
from ..components import NStepWindow, PrioritizedReplayBuffer, ReplayBuffer, RunningMeanStd, Sample, Transition
from ..envs import AbstractEnv, AutoReset, Box, Discrete, EpisodeStatistics, RescaleAction, VectorEnv
from ._base import AbstractAgent, Clock, flatten_obs


def check_continuous(agent: "AbstractOffPolicyAgent", owner: str) -> None:
    """Raise unless `agent.env` has a bounded 1-D Box action space."""
    space = agent.env.action_space
    if not isinstance(space, Box) or len(space.shape) != 1:
        raise ValueError(
            f"{owner} needs a 1-D Box action space, got {space!r} from env {agent.env.name!r}; "
            "use DQN for discrete actions"
        )
    if not space.bounded:
        raise ValueError(f"{owner} needs finite action bounds, got {space!r}")


class OffPolicyState(eqx.Module):
    """Everything an off-policy agent's training changes."""

    learner: PyTree
    buffer: PyTree
    window: NStepWindow
    env_state: EnvState
    obs: Array
    obs_stats: RunningMeanStd | None
    key: Key
    env_steps: Int[Array, ""]
    updates: Int[Array, ""]


class AbstractOffPolicyAgent(AbstractAgent):
    """Replay-buffer agents: configuration shared by all, hooks implemented by each."""

    env: eqx.AbstractVar[AbstractEnv]
    num_envs: eqx.AbstractVar[int]
    rollout_length: eqx.AbstractVar[int]
    updates_per_step: eqx.AbstractVar[float]
    batch_size: eqx.AbstractVar[int]
    buffer_size: eqx.AbstractVar[int]
    learning_starts: eqx.AbstractVar[int]
    n_step: eqx.AbstractVar[int]
    prioritized: eqx.AbstractVar[bool]
    normalize_observations: eqx.AbstractVar[bool]
    gamma: eqx.AbstractVar[Float[Array, ""]]
    reward_scale: eqx.AbstractVar[Float[Array, ""]]
    per_alpha: eqx.AbstractVar[Float[Array, ""]]
    per_beta: eqx.AbstractVar[Float[Array, ""]]

    # ----------------------------------------------------------------- hooks
    @abc.abstractmethod
    def init_learner(self, key: Key) -> PyTree:
        """**Returns:** networks, target networks and optimizer states."""

    @abc.abstractmethod
    def explore(self, learner: PyTree, obs: Array, key: Key, progress: Float[Array, ""]) -> Array:
        """**Returns:** exploratory actions for a batch of (normalised, flat) observations."""

    @abc.abstractmethod
    def greedy(self, learner: PyTree, obs: Array) -> Array:
        """**Returns:** the deterministic policy's actions for a batch of observations."""

    @abc.abstractmethod
    def update(
        self, learner: PyTree, batch: Sample, key: Key, updates: Int[Array, ""], progress: Float[Array, ""]
    ) -> tuple[PyTree, Float[Array, " batch"], Metrics]:
        """One gradient update on a sampled batch (observations already normalised,
        rewards already scaled). **Returns:** `(learner, td_errors, metrics)`."""

    # ----------------------------------------------------------------- structure
    def check_off_policy_config(self, owner: str) -> None:
        """Validate the shared fields; agents call this from `__check_init__`."""
        if not isinstance(self.env, AbstractEnv):
            raise ValueError(f"{owner}(env) must be an eqxrl AbstractEnv or an env name, got {self.env!r}")
        for name in ("num_envs", "rollout_length", "batch_size", "buffer_size", "n_step"):
            check_positive_int(owner, name, getattr(self, name))
        sizes = getattr(self, "hidden_sizes", (1,))
        if not sizes or not all(is_positive_int(h) for h in sizes):
            raise ValueError(f"{owner}(hidden_sizes) must be a non-empty tuple of positive ints, got {sizes!r}")
        if isinstance(self.learning_starts, bool) or not isinstance(self.learning_starts, (int, np.integer)) or self.learning_starts < 0:
            raise ValueError(f"{owner}(learning_starts) must be an int >= 0, got {self.learning_starts!r}")
        if not (isinstance(self.updates_per_step, (int, float)) and self.updates_per_step > 0):
            raise ValueError(f"{owner}(updates_per_step) must be > 0, got {self.updates_per_step!r}")
        exact = self.updates_per_step * self.steps_per_iteration
        if abs(exact - round(exact)) > 1e-6:
            raise ValueError(
                f"{owner}(updates_per_step={self.updates_per_step}) times the env steps per iteration "
                f"(num_envs * rollout_length = {self.steps_per_iteration}) must be a whole number of updates, "
                f"got {exact:g}; change rollout_length"
            )
        if self.batch_size > self.buffer_size:
            raise ValueError(
                f"{owner}(batch_size={self.batch_size}) must not exceed buffer_size={self.buffer_size}"
            )
        check = lambda name, ok, expected: check_hyperparameter(owner, name, getattr(self, name), ok, expected)  # noqa: E731
        check("gamma", lambda v: 0 <= v <= 1, "in [0, 1]")
        check("reward_scale", lambda v: v > 0, "> 0")
        check("per_alpha", lambda v: v >= 0, ">= 0")
        check("per_beta", lambda v: 0 <= v <= 1, "in [0, 1]")

    @property
    def steps_per_iteration(self) -> int:
        return self.num_envs * self.rollout_length

    @property
    def num_updates(self) -> int:
        """Gradient updates per iteration (static)."""
        return int(round(self.updates_per_step * self.steps_per_iteration))

    @property
    def obs_size(self) -> int:
        shape = self.env.observation_space.shape
        return int(np.prod(shape)) if shape else 1

    @property
    def discrete(self) -> bool:
        return isinstance(self.env.action_space, Discrete)

    @property
    def action_size(self) -> int:
        return self.env.action_space.n if self.discrete else self.env.action_space.shape[0]

    @property
    def eval_env(self) -> AbstractEnv:
        # Continuous policies act in [-1, 1]; the wrapper maps that onto the env's bounds.
        return self.env if self.discrete else RescaleAction(self.env)

    @property
    def train_env(self) -> VectorEnv:
        return VectorEnv(EpisodeStatistics(AutoReset(self.eval_env)), self.num_envs)

    @property
    def buffer(self) -> ReplayBuffer | PrioritizedReplayBuffer:
        if self.prioritized:
            return PrioritizedReplayBuffer(self.buffer_size, alpha=self.per_alpha)
        return ReplayBuffer(self.buffer_size)

    def _normalize(self, stats: RunningMeanStd | None, x: Array) -> Array:
        return x if stats is None else stats.normalize(x)

    def _random_action(self, key: Key) -> Array:
        if self.discrete:
            return jax.random.randint(key, (self.num_envs,), 0, self.action_size, dtype=jnp.int32)
        return jax.random.uniform(key, (self.num_envs, self.action_size), minval=-1.0, maxval=1.0)

    # ----------------------------------------------------------------- API
    def init(self, key: Key) -> OffPolicyState:
        learner_key, env_key, fill_key, key = jax.random.split(key, 4)
        env = self.train_env
        env_state, ts = env.reset(env_key)
        obs = flatten_obs(self.env, ts.obs, type(self).__name__)
        example = Transition(
            obs=obs[0],
            action=self._random_action(fill_key)[0],
            reward=jnp.zeros((), jnp.float32),
            discount=jnp.zeros((), jnp.float32),
            next_obs=obs[0],
        )
        # Pre-fill the n-step window with n - 1 random steps so that every
        # later step emits a complete n-step transition (a length-0 scan for n = 1).
        owner = type(self).__name__

        def fill(carry, k):
            env_state, obs = carry
            act_key, step_key = jax.random.split(k)
            action = self._random_action(act_key)
            env_state, ts = env.step(step_key, env_state, action)
            final = flatten_obs(self.env, ts.info["final_obs"], owner)
            step = (obs, action, ts.reward, ts.terminated, ts.truncated, final)
            return (env_state, flatten_obs(self.env, ts.obs, owner)), (step, ts.obs)

        (env_state, obs), (steps, raw_obs) = jax.lax.scan(
            fill, (env_state, obs), jax.random.split(fill_key, self.n_step - 1)
        )
        window = NStepWindow.create(*steps)
        last_obs = ts.obs if self.n_step == 1 else raw_obs[-1]
        stats = RunningMeanStd((self.obs_size,)).update(obs) if self.normalize_observations else None
        return OffPolicyState(
            learner=self.init_learner(learner_key),
            buffer=self.buffer.init(example),
            window=window,
            env_state=env_state,
            obs=last_obs,
            obs_stats=stats,
            key=key,
            env_steps=jnp.asarray((self.n_step - 1) * self.num_envs, jnp.int32),
            updates=jnp.zeros((), jnp.int32),
        )

    def act(self, state: OffPolicyState, obs: Array, key: Key | None = None, deterministic: bool = False) -> Array:
        x = self._normalize(state.obs_stats, flatten_obs(self.env, obs, type(self).__name__))
        if deterministic:
            return self.greedy(state.learner, x)
        if key is None:
            raise ValueError(f"{type(self).__name__}.act(key) is required unless deterministic=True")
        return self.explore(state.learner, x, key, jnp.ones((), jnp.float32))

    def train_iteration(self, state: OffPolicyState, clock: Clock) -> tuple[OffPolicyState, Metrics]:
        owner = type(self).__name__
        env, buffer = self.train_env, self.buffer
        progress = clock.progress
        # Unbatched: every seed/member has taken the same number of steps.
        start_steps = (self.n_step - 1) * self.num_envs + clock.iteration * self.steps_per_iteration
        warm = start_steps < self.learning_starts
        stats, learner = state.obs_stats, state.learner

        def step(carry, _):
            env_state, obs, window, buffer_state, key = carry
            key, act_key, rand_key, env_key = jax.random.split(key, 4)
            x = flatten_obs(self.env, obs, owner)
            policy_action = self.explore(learner, self._normalize(stats, x), act_key, progress)
            action = jnp.where(warm, self._random_action(rand_key), policy_action).astype(policy_action.dtype)
            env_state, ts = env.step(env_key, env_state, action)
            final = flatten_obs(self.env, ts.info["final_obs"], owner)
            window = window.push(x, action, ts.reward, ts.terminated, ts.truncated, final)
            buffer_state = buffer.add(buffer_state, window.emit(self.gamma))
            out = (x, ts.done, ts.info["episode_return"], ts.info["episode_length"])
            return (env_state, ts.obs, window, buffer_state, key), out

        carry = (state.env_state, state.obs, state.window, state.buffer, state.key)
        (env_state, obs, window, buffer_state, key), (xs, done, ep_ret, ep_len) = jax.lax.scan(
            step, carry, length=self.rollout_length
        )
        if stats is not None:
            stats = stats.update(xs)

        @jax.jit  # nested: `eval_shape` below traces it once and `cond` reuses the trace
        def do_updates(operand):
            learner, buffer_state, key, updates = operand

            def one(carry, k):
                learner, buffer_state, updates = carry
                sample_key, update_key = jax.random.split(k)
                beta = self.per_beta + (1.0 - self.per_beta) * progress
                batch = buffer.sample(buffer_state, sample_key, self.batch_size, beta)
                data = batch.data
                data = eqx.tree_at(
                    lambda d: (d.obs, d.next_obs, d.reward),
                    data,
                    (self._normalize(stats, data.obs), self._normalize(stats, data.next_obs), data.reward * self.reward_scale),
                )
                batch = eqx.tree_at(lambda b: b.data, batch, data)
                learner, td, metrics = self.update(learner, batch, update_key, updates, progress)
                buffer_state = buffer.update_priorities(buffer_state, batch.indices, td)
                return (learner, buffer_state, updates + 1), metrics

            keys = jax.random.split(key, self.num_updates)
            (learner, buffer_state, updates), metrics = jax.lax.scan(one, (learner, buffer_state, updates), keys)
            return (learner, buffer_state, updates), jax.tree.map(jnp.mean, metrics)

        key, update_key = jax.random.split(key)
        operand = (learner, buffer_state, update_key, state.updates)
        metric_shapes = jax.eval_shape(do_updates, operand)[1]

        def skip(operand):
            learner, buffer_state, _, updates = operand
            return (learner, buffer_state, updates), jax.tree.map(
                lambda m: jnp.full(m.shape, jnp.nan, m.dtype), metric_shapes
            )

        (learner, buffer_state, updates), metrics = jax.lax.cond(warm, skip, do_updates, operand)
        env_steps = state.env_steps + self.steps_per_iteration
        new_state = OffPolicyState(
            learner=learner,
            buffer=buffer_state,
            window=window,
            env_state=env_state,
            obs=obs,
            obs_stats=stats,
            key=key,
            env_steps=env_steps,
            updates=updates,
        )
        num_done = jnp.sum(done.astype(jnp.float32))
        mean_done = lambda x: jnp.where(  # noqa: E731
            num_done > 0, jnp.sum(jnp.where(done, x.astype(jnp.float32), 0.0)) / jnp.maximum(num_done, 1.0), jnp.nan
        )
        metrics = dict(metrics)
        metrics.update(
            env_steps=env_steps,
            episode_return=mean_done(ep_ret),
            episode_length=mean_done(ep_len),
            num_episodes=num_done.astype(jnp.int32),
            updates=updates,
        )
        return new_state, metrics
