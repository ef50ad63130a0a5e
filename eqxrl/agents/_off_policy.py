"""The off-policy training loop shared by the replay agents (DQN, DDPG, TD3, SAC, CrossQ, MPO, DADS): an
agent implements four hooks (`init_learner`, `explore`, `greedy`, `update`) and declares its configuration
fields; this module's `AbstractOffPolicyAgent` supplies `init`, `train_iteration` and `act`:

1. collect `rollout_length` steps from `num_envs` envs (uniform random actions, among the legal ones, until
   `learning_starts` env steps, then `explore`), pushing each step into an n-step window and the window's
   oldest n-step transition into the replay buffer (an `NStepTransition`: raw rewards and flags, no `gamma`);
2. once `learning_starts` steps are in, run `num_updates` gradient updates (`updates_per_step` per env
   step), each on a sampled batch, updating PER priorities from the returned TD errors. `update` receives
   the batch as a `Transition` whose `reward` and `discount` are computed from the stored rewards with
   the agent's *current* `gamma` (and `reward_scale`): a changed `gamma` (PBT) acts on the next update.

Warm-up is decided from the unbatched `Clock`: a real `lax.cond` under vmap (no select copies the buffer).
"""

import abc
from dataclasses import KW_ONLY, InitVar
from typing import Any, ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, Int, PyTree

from ..core import EnvState, Key, Metrics, check_hyperparameter
from ..components import (
    AbstractLossTerm,
    AbstractOptimizer,
    AbstractReplayBuffer,
    AbstractTorso,
    Categorical,
    NStepTransition,
    NStepWindow,
    RunningMeanStd,
    Sample,
    Transition,
)
from ..envs import AbstractEnv, Box, Discrete, RescaleAction
from ._base import AbstractRolloutAgent, Clock, check_no_action_masks
from ._network_spec import NETWORK_KEYWORDS, NetworkSpec, check_spec, optimizers_from_keywords, spec_from_keywords
from ._keywords import init_only_names
from ._off_policy_loop import BUFFER_KEYWORDS, LOOP_KEYWORDS, OffPolicyLoop, buffer_keyword, check_loop, loop_from_keywords
from ._noise import no_noise_sampler


def check_continuous(agent: "AbstractOffPolicyAgent", owner: str) -> None:
    """Raise unless `agent.env` has a bounded 1-D Box action space (an env that is no
    `AbstractEnv` is left to the shared check, which names it)."""
    if not isinstance(agent.env, AbstractEnv):
        return
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
    obs: PyTree  # the env's current observations (arrays, or dicts of them)
    obs_stats: RunningMeanStd | None
    key: Key
    env_steps: Int[Array, ""]
    updates: Int[Array, ""]


class AbstractOffPolicyAgent(AbstractRolloutAgent):
    """Replay-buffer agents: the configuration they share, declared and validated
    here once, and the hooks each implements.

    Shared keywords (a subclass may give one another default by declaring it again):

    - the loop's settings, stored as one module, `loop` (an `OffPolicyLoop`, built from the
      init-only keywords of the same names unless given whole): collection (`num_envs`,
      `rollout_length`, `learning_starts`: uniform random actions until then,
      `normalize_observations`), replay (`buffer`: any `AbstractReplayBuffer`, not given built from
      `buffer_size`, `prioritized` (a `PrioritizedReplayBuffer`) and `per_alpha` (its
      `buffer.alpha`); `n_step`, the n-step window that feeds it; `updates_per_step`,
      `batch_size`, `per_beta`: PER's IS exponent, annealed to 1) and the update's batch
      (`gamma`, `reward_scale`). `agent.gamma` reads `agent.loop.gamma`, and so on;
    - the critic (for DQN: the Q-network), stored as `critic`, a `NetworkSpec` (built from the
      init-only keywords `critic_torso` (None: the MLP of `hidden_sizes` and `activation`),
      `critic_optimizer` (None: Adam with the agent's critic learning rate and `max_grad_norm`; or
      an eqxrl optimizer or any optax transformation) and `critic_loss_terms` (extra loss terms,
      see `eqxrl.components.AbstractLossTerm`), unless given whole);
    - declared by each agent: `env`, `loop`, `critic`, and (an agent with target networks) `tau`,
      their averaging rate; `max_grad_norm` (of the default optimizers) is a keyword.
    """

    env: eqx.AbstractVar[AbstractEnv]
    loop: eqx.AbstractVar[OffPolicyLoop | None]  # (None until `__post_init__` builds it from the keywords below)
    _: KW_ONLY  # (the keywords below come after the final agent's `env`: `DQN(env, *, ...)`)
    num_envs: InitVar[int] = 1
    rollout_length: InitVar[int] = 1
    updates_per_step: InitVar[float] = 1.0
    batch_size: InitVar[int] = 256
    buffer_size: InitVar[int] = 100_000
    learning_starts: InitVar[int] = 1_000
    n_step: InitVar[int] = 1
    prioritized: InitVar[bool] = False
    normalize_observations: InitVar[bool] = False
    buffer: InitVar[AbstractReplayBuffer | Any] = None  # (`| Any`: a wrong value reaches the check that names it)
    gamma: InitVar[float | Array] = 0.99
    reward_scale: InitVar[float | Array] = 1.0
    per_alpha: InitVar[float | Array] = 0.6  # (an array when read back from the buffer: dataclasses.replace)
    per_beta: InitVar[float | Array] = 0.4
    hidden_sizes: InitVar[tuple[int, ...]] = (256, 256)
    activation: InitVar[str] = "relu"
    # (`| Any`: a wrong value reaches the agent's own check, which names the keyword and what it takes)
    critic_torso: InitVar[AbstractTorso | Any] = None
    critic_optimizer: InitVar[AbstractOptimizer | Any] = None
    critic_loss_terms: InitVar[tuple[AbstractLossTerm, ...] | Any] = ()
    max_grad_norm: InitVar[float | Array] = float("inf")
    critic: eqx.AbstractVar[NetworkSpec | None]  # (None until `__post_init__` builds it from its keywords)
    networks: ClassVar[tuple[str, ...]] = ("critic",)
    """The `NetworkSpec`s the agent stores, each built from its keywords (`NETWORK_KEYWORDS`)."""
    rates: ClassVar[dict[str, str]] = {}
    """The optimizers the agent builds when not given, by path (a `NetworkSpec`'s, or an optimizer
    field), each with the init-only keyword of its learning rate: Adam with that rate and
    `max_grad_norm` (and `adam_options`); the keyword names the optimizer's `learning_rate`."""
    aliases: ClassVar[dict[str, str]] = {
        **{name: f"loop.{name}" for name in (*LOOP_KEYWORDS, "buffer")},
        "per_alpha": "loop.buffer.alpha",
        "buffer_size": "loop.buffer.capacity",
        **{keyword: f"critic.{field}" for keyword, field in NETWORK_KEYWORDS["critic"].items()},
    }
    takes_action_masks: ClassVar[bool] = False  # True: the agent honours its env's masks (DQN, MPO)

    def __init_subclass__(cls, **kwargs):
        """Each learning-rate keyword (`rates`) names its optimizer's rate, and `max_grad_norm` the
        critic's optimizer's (every default optimizer is built with it)."""
        rates = {rate: f"{path}.learning_rate" for path, rate in cls.rates.items()}
        cls.aliases = {**cls.aliases, **rates, "max_grad_norm": "critic.optimizer.max_grad_norm"}
        super().__init_subclass__(**kwargs)

    def __post_init__(self, *keywords: Any):  # `loop`, the networks' specs and their optimizers from the init-only keywords
        given = dict(zip(init_only_names(type(self)), keywords))
        resolved = self.resolve_keywords(given)  # (used where a module is built: a given one is checked against `given`)
        self.loop = loop_from_keywords(self, given if self.loop is not None else resolved)
        for network in self.networks:
            setattr(self, network, spec_from_keywords(self, network, given if getattr(self, network) is not None else resolved))
        optimizers_from_keywords(self, given, resolved)

    def adam_options(self, path: str, keywords: dict[str, Any]) -> dict[str, Any]:
        """Further arguments of the Adam built for the optimizer at `path` (`rates`), from the
        init-only `keywords` (DQN: `anneal=anneal_lr`; CrossQ: `b1=adam_b1`). Default: none."""
        return {}

    def resolve_keywords(self, keywords: dict[str, Any]) -> dict[str, Any]:
        """The init-only keywords the modules not given are built from, given those passed; an
        agent whose defaults depend on its env (SAC) fills in its None ones here. Default: as passed."""
        return keywords

    def __check_init__(self):
        owner = type(self).__name__
        if not isinstance(self.env, AbstractEnv):
            raise ValueError(f"{owner}(env) must be an eqxrl AbstractEnv or an env name, got {self.env!r}")
        check_loop(self)
        check_no_action_masks(self, allowed=self.takes_action_masks)  # (and a mask on Box actions: refused)
        for network in self.networks:
            check_spec(self, network)
        if "tau" in self.__dataclass_fields__:  # (the target networks' averaging rate, where there are any)
            check_hyperparameter(owner, "tau", self.tau, lambda v: 0 < v <= 1, "in (0, 1]")



    # ----------------------------------------------------------------- hooks
    @abc.abstractmethod
    def init_learner(self, key: Key) -> PyTree:
        """**Returns:** networks, target networks and optimizer states."""

    @abc.abstractmethod
    def explore(self, learner: PyTree, obs: Array, key: Key, progress: Float[Array, ""]) -> Array:
        """**Returns:** exploratory actions for a batch of (normalised, flat) observations."""

    def explore_at(self, learner: PyTree, obs: Array, key: Key, progress: Float[Array, ""], count: Int[Array, ""]) -> Array:
        """`explore` at collection step `count` (vectorized env steps since training began), for exploration
        decaying per step (DQN's `exploration`). Default: `explore`."""
        return self.explore(learner, obs, key, progress)

    def explore_from_noise(self, learner: PyTree, obs: Array, noise: PyTree, progress: Float[Array, ""]) -> Array:
        """`explore` with its randomness given (`noise` as `noise_spec` describes it). Default: a ValueError."""
        raise ValueError(no_noise_sampler(self, "explore_from_noise"))

    @abc.abstractmethod
    def greedy(self, learner: PyTree, obs: Array) -> Array:
        """**Returns:** the deterministic policy's actions for a batch of observations."""

    @abc.abstractmethod
    def update(
        self, learner: PyTree, batch: Sample, key: Key, updates: Int[Array, ""], progress: Float[Array, ""]
    ) -> tuple[PyTree, Float[Array, " batch"], Metrics]:
        """One gradient update on a sampled batch: `batch.data` is a `Transition`
        (observations already normalised; `reward` and `discount` computed for the
        agent's current `gamma` from the stored raw rewards, `reward` multiplied by
        `reward_scale`; see `batch_for_update`). **Returns:** `(learner, td_errors, metrics)`."""

    # ----------------------------------------------------------------- structure
    @property
    def num_updates(self) -> int:
        """Gradient updates per iteration (static)."""
        return int(round(self.updates_per_step * self.steps_per_iteration))

    @property
    def discrete(self) -> bool:
        """Whether the actions are `Discrete` (replay agents take no `MultiDiscrete`; `env` may be
        anything until the shared check has named it)."""
        return isinstance(self.env, AbstractEnv) and isinstance(self.env.action_space, Discrete)

    @property
    def action_size(self) -> int:
        return self.env.action_space.n if self.discrete else self.env.action_space.shape[0]

    @property
    def eval_env(self) -> AbstractEnv:
        # Continuous policies act in [-1, 1]; the wrapper maps that onto the env's bounds.
        return self.env if self.discrete else RescaleAction(self.env)

    def init_only_value(self, name: str, default: Any) -> Any:
        if self.loop is None:  # (read while `__post_init__` builds it: the class default)
            return default
        if name in BUFFER_KEYWORDS:  # (what the buffer reads as, one rule with the check of a given buffer)
            return buffer_keyword(self.loop.buffer, name, default)
        return super().init_only_value(name, default)

    @property
    def replay_buffer(self) -> AbstractReplayBuffer:
        """The buffer training uses: `loop.buffer` (built from `buffer_size`, `prioritized` and `per_alpha` when not given)."""
        return self.loop.buffer

    def batch_for_update(self, sample: Sample, obs_stats: RunningMeanStd | None) -> Sample:
        """The batch `update` receives, from a `sample` of stored `NStepTransition`s and the
        state's `obs_stats` (None: no normalisation). **Returns:** the `Sample` (same indices and
        weights) of `Transition`s: observations normalised, `reward` and `discount` from
        `reward_and_discount(self.gamma)` (the gamma now, not the one in force when they were
        stored), `reward` multiplied by `reward_scale`."""
        stored = sample.data
        if not isinstance(stored, NStepTransition):
            raise ValueError(
                f"{type(self).__name__}.batch_for_update(sample) must hold NStepTransitions (what the loop "
                f"stores), got {type(stored).__name__}; a custom buffer's sample must return what its add got"
            )
        reward, discount = stored.reward_and_discount(self.gamma)
        normalize = lambda x: self.normalize(obs_stats, x)  # noqa: E731
        data = Transition(normalize(stored.obs), stored.action, reward * self.reward_scale, discount, normalize(stored.next_obs))
        return Sample(data, sample.indices, sample.weights)

    def _random_action(self, key: Key, x: Array) -> Array:
        mask = self.layout.split(x)[1]
        if self.discrete and mask is None:  # (randint, as before masks: unmasked runs keep their numbers)
            return jax.random.randint(key, (self.num_envs,), 0, self.action_size, dtype=jnp.int32)
        if self.discrete:  # among the legal actions
            return Categorical(jnp.zeros((self.num_envs, self.action_size)), mask).sample(key)
        return jax.random.uniform(key, (self.num_envs, self.action_size), minval=-1.0, maxval=1.0)

    # ----------------------------------------------------------------- API
    def init(self, key: Key) -> OffPolicyState:
        learner_key, env_key, fill_key, key = jax.random.split(key, 4)
        env = self.train_env
        env_state, ts = env.reset(env_key)
        obs = self.flatten(ts.obs)
        random_action = self._random_action(fill_key, obs)  # (its dtype and shape)
        example = NStepTransition(
            obs=obs[0],
            action=random_action[0],
            rewards=jnp.zeros((self.n_step,), jnp.float32),
            steps=jnp.zeros((), jnp.int32),
            terminated=jnp.zeros((), bool),
            next_obs=obs[0],
        )
        # Pre-fill the n-step window with n - 1 random steps so that every
        # later step emits a complete n-step transition (none for n = 1).

        def fill(carry, k):
            env_state, obs = carry
            act_key, step_key = jax.random.split(k)
            action = self._random_action(act_key, obs)
            env_state, ts = env.step(step_key, env_state, action)
            final = self.flatten(ts.info["final_obs"])
            step = (obs, action, ts.reward, ts.terminated, ts.truncated, final)
            return (env_state, self.flatten(ts.obs)), (step, ts.obs)

        if self.n_step == 1:  # zero-length steps, not a length-0 scan that traces env.step for nothing
            none = lambda x, dtype=None: jnp.zeros((0, *jnp.shape(x)), dtype or jnp.result_type(x))  # noqa: E731
            flags = none(ts.reward, bool)
            steps = (none(obs), none(random_action), none(ts.reward, jnp.float32), flags, flags, none(obs))
            last_obs = ts.obs
        else:
            (env_state, obs), (steps, raw_obs) = jax.lax.scan(
                fill, (env_state, obs), jax.random.split(fill_key, self.n_step - 1)
            )
            last_obs = raw_obs[-1]
        window = NStepWindow.create(*steps)
        stats = RunningMeanStd((self.obs_size,)).update(self.layout.split(obs)[0]) if self.normalize_observations else None
        return OffPolicyState(
            learner=self.init_learner(learner_key),
            buffer=self.replay_buffer.init(example),
            window=window,
            env_state=env_state,
            obs=last_obs,
            obs_stats=stats,
            key=key,
            env_steps=jnp.asarray((self.n_step - 1) * self.num_envs, jnp.int32),
            updates=jnp.zeros((), jnp.int32),
        )

    def act(self, state: OffPolicyState, obs: PyTree, key: Key | None = None, deterministic: bool = False) -> Array:
        x = self.normalize(state.obs_stats, self.flatten(obs))
        if deterministic:
            return self.greedy(state.learner, x)
        if key is None:
            raise ValueError(f"{type(self).__name__}.act(key) is required unless deterministic=True")
        return self.explore(state.learner, x, key, jnp.ones((), jnp.float32))

    def act_from_noise(self, state: OffPolicyState, obs: PyTree, noise: PyTree) -> Array:
        """`act`'s exploration (`explore_from_noise` at the end of training) from given noise."""
        x = self.normalize(state.obs_stats, self.flatten(obs))
        return self.explore_from_noise(state.learner, x, noise, jnp.ones((), jnp.float32))

    def train_iteration(self, state: OffPolicyState, clock: Clock) -> tuple[OffPolicyState, Metrics]:
        env, buffer = self.train_env, self.replay_buffer
        progress = clock.progress
        # Unbatched: every seed/member has taken the same number of steps.
        start_steps = (self.n_step - 1) * self.num_envs + clock.iteration * self.steps_per_iteration
        warm = start_steps < self.learning_starts
        stats, learner = state.obs_stats, state.learner

        def step(carry, t):
            env_state, obs, window, buffer_state, key = carry
            key, act_key, rand_key, env_key = jax.random.split(key, 4)
            x, count = self.flatten(obs), clock.iteration * self.rollout_length + t
            policy_action = self.explore_at(learner, self.normalize(stats, x), act_key, progress, count)
            action = jnp.where(warm, self._random_action(rand_key, x), policy_action).astype(policy_action.dtype)
            env_state, ts = env.step(env_key, env_state, action)
            final = self.flatten(ts.info["final_obs"])
            window = window.push(x, action, ts.reward, ts.terminated, ts.truncated, final)
            buffer_state = buffer.add(buffer_state, window.emit())
            out = (x, ts.done, ts.info["episode_return"], ts.info["episode_length"])
            return (env_state, ts.obs, window, buffer_state, key), out

        carry = (state.env_state, state.obs, state.window, state.buffer, state.key)
        (env_state, obs, window, buffer_state, key), (xs, done, ep_ret, ep_len) = jax.lax.scan(
            step, carry, jnp.arange(self.rollout_length, dtype=jnp.int32)
        )
        if stats is not None:
            stats = stats.update(self.layout.split(xs)[0])

        @jax.jit  # nested: `eval_shape` below traces it once and `cond` reuses the trace
        def do_updates(operand):
            learner, buffer_state, key, updates = operand

            def one(carry, k):
                learner, buffer_state, updates = carry
                sample_key, update_key = jax.random.split(k)
                beta = self.per_beta + (1.0 - self.per_beta) * progress
                batch = self.batch_for_update(buffer.sample(buffer_state, sample_key, self.batch_size, beta), stats)
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

