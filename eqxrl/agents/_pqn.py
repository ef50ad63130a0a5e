"""PQN: parallelised Q-learning (Gallici et al. 2024, "Simplifying Deep Temporal Difference Learning").

Q-learning the way PPO trains: many envs step together under an epsilon-greedy policy of the
current Q-network, the rollout's Q(lambda) returns are computed once (bootstrapping from the
greedy value `max_a Q(s', a)` of the same network), and a few epochs of minibatch regressions
fit `Q(s, a)` to them. No replay buffer and no target network: LayerNorm in the Q-network
(`MLPTorso(layer_norm=True)`) is what keeps the bootstrapped regression stable.
"""

from dataclasses import InitVar
from typing import Any, ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, Int, PyTree

from ..components import (
    AbstractLossTerm,
    AbstractOptimizer,
    AbstractTorso,
    Categorical,
    DiscreteQHead,
    MLPTorso,
    Noise,
    OptState,
    RunningMeanStd,
    add_loss_terms,
    as_torso,
    check_loss_terms,
    check_optimizer,
    check_torso,
    get_activation,
    lambda_returns,
    loss_terms,
    optimizer_slot,
    torso_or_auto,
)
from ..core import EnvState, Key, Metrics, check_hyperparameter, check_positive_int, hyperparameter, is_positive_int
from ..envs import AbstractEnv, Discrete
from ._base import AbstractRolloutAgent, Clock, as_env
from ._dqn import masked_q_values
from ._keywords import LearningRate, default_adam, init_only_names, module_from_keywords
from ._noise import epsilon_greedy_from_noise, epsilon_greedy_noise_spec
from ._ppo_update import _Packed, _Rollout, iteration_metrics, shuffled_minibatches


class PQNState(eqx.Module):
    """Everything PQN's training changes: the Q-network, optimizer and env state, statistics, key."""

    q: DiscreteQHead
    opt_state: OptState
    env_state: EnvState
    obs: PyTree  # the env's current observations (arrays, or dicts of them)
    obs_stats: RunningMeanStd | None
    key: Key
    env_steps: Int[Array, ""]
    iteration: Int[Array, ""]


class PQN(AbstractRolloutAgent):
    """PQN on `Discrete` actions (masked by the env's action masks, where it has them).

    Each iteration collects `rollout_length` steps of `num_envs` envs with epsilon-greedy actions
    (epsilon from `eps_start` to `eps_end` over the first `exploration_fraction` of training,
    linearly; random actions uniform among the legal ones), computes Q(lambda) returns of the
    rewards times `reward_scale` (`lambda_returns` with the greedy values `max_a Q(s', a)`, an
    episode's end bootstrapped through a truncation and not through a termination), then runs
    `num_epochs` epochs of `num_minibatches` minibatches of the squared error
    `0.5 (Q(s, a) - G)^2` (plus `critic_loss_terms`). Defaults are PQN's CartPole settings
    (PureJaxQL `pqn_cartpole.yaml`) but for `eps_end` 0.05 and Adam where PureJaxQL uses RAdam.

    Network: `critic_torso` (None: `MLPTorso(hidden_sizes, activation, layer_norm=layer_norm)`,
    or for a `Dict`/`Tuple` observation with image or grid entries the automatic torso) under a
    `DiscreteQHead`. Optimizer: `optimizer`, or Adam with `learning_rate` (annealed linearly to
    0 with `anneal_lr`), clipped at `max_grad_norm`.
    """

    env: AbstractEnv = eqx.field(converter=as_env)
    aliases: ClassVar[dict[str, str]] = {k: f"optimizer.{v}" for k, v in (("learning_rate",) * 2, ("max_grad_norm",) * 2, ("anneal_lr", "anneal"))}
    num_envs: int = eqx.field(static=True, default=32)
    rollout_length: int = eqx.field(static=True, default=64)
    num_epochs: int = eqx.field(static=True, default=4)
    num_minibatches: int = eqx.field(static=True, default=16)
    hidden_sizes: tuple[int, ...] = eqx.field(static=True, default=(256, 256), converter=tuple)
    activation: str = eqx.field(static=True, default="relu")
    layer_norm: bool = eqx.field(static=True, default=True)
    critic_torso: AbstractTorso | None = eqx.field(static=True, default=None, converter=as_torso)
    anneal_lr: InitVar[bool] = True
    normalize_observations: bool = eqx.field(static=True, default=False)
    optimizer: AbstractOptimizer | None = optimizer_slot()
    critic_loss_terms: tuple[AbstractLossTerm, ...] = loss_terms()
    learning_rate: InitVar[LearningRate] = 1e-4
    gamma: Float[Array, ""] = hyperparameter(0.99)
    q_lambda: Float[Array, ""] = hyperparameter(0.95)
    eps_start: Float[Array, ""] = hyperparameter(1.0)
    eps_end: Float[Array, ""] = hyperparameter(0.05)
    exploration_fraction: Float[Array, ""] = hyperparameter(0.2)
    reward_scale: Float[Array, ""] = hyperparameter(0.1)
    max_grad_norm: InitVar[float | Array] = 10.0

    def __post_init__(self, *values: Any):  # `optimizer` from its keywords
        keywords = {name: value for name, value in zip(init_only_names(type(self)), values)}
        if not isinstance(keywords["anneal_lr"], bool):
            raise ValueError(f"PQN(anneal_lr) must be True or False, got {keywords['anneal_lr']!r}")
        self.optimizer = module_from_keywords(self, "optimizer", keywords, "the Q-network's optimizer", lambda: default_adam("PQN", **keywords))

    def __check_init__(self):
        if not isinstance(self.env, AbstractEnv):
            raise ValueError(f"PQN(env) must be an eqxrl AbstractEnv or an env name for eqxrl.envs.make, got {self.env!r}")
        if not isinstance(self.env.action_space, Discrete):
            raise ValueError(
                f"PQN needs a Discrete action space, got {self.env.action_space!r} from env {self.env.name!r}; "
                "use PPO, SAC or TD3 for continuous actions"
            )
        for name in ("num_envs", "rollout_length", "num_epochs", "num_minibatches"):
            check_positive_int("PQN", name, getattr(self, name))
        batch = self.num_envs * self.rollout_length
        if batch % self.num_minibatches:
            raise ValueError(f"PQN(num_minibatches={self.num_minibatches}) must divide num_envs * rollout_length = {batch}")
        if not self.hidden_sizes or not all(is_positive_int(h) for h in self.hidden_sizes):
            raise ValueError(f"PQN(hidden_sizes) must be a non-empty tuple of positive ints, got {self.hidden_sizes!r}")
        get_activation(self.activation, "PQN")
        for name in ("layer_norm", "normalize_observations"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"PQN({name}) must be True or False, got {getattr(self, name)!r}")
        check_torso("PQN", "critic_torso", self.critic_torso)
        check_optimizer("PQN", "optimizer", self.optimizer)
        check_loss_terms("PQN", "critic_loss_terms", self.critic_loss_terms)
        check = lambda name, ok, expected: check_hyperparameter("PQN", name, getattr(self, name), ok, expected)  # noqa: E731
        check("gamma", lambda v: 0 <= v <= 1, "in [0, 1]")
        check("q_lambda", lambda v: 0 <= v <= 1, "in [0, 1]")
        check("eps_start", lambda v: 0 <= v <= 1, "in [0, 1]")
        check("eps_end", lambda v: 0 <= v <= 1, "in [0, 1]")
        check("exploration_fraction", lambda v: 0 < v <= 1, "in (0, 1]")
        check("reward_scale", lambda v: v > 0, "> 0")

    # ----------------------------------------------------------------- structure
    @property
    def action_size(self) -> int:
        return int(self.env.action_space.n)

    @property
    def network_optimizer(self) -> AbstractOptimizer:
        """`optimizer`: given, or Adam with `learning_rate`, `max_grad_norm` and `anneal_lr`."""
        return self.optimizer

    def q_torso(self) -> Any:
        """The Q-network's torso: `critic_torso`, or the default (see the class docs)."""
        auto = torso_or_auto(self.critic_torso, self)
        if self.critic_torso is None and isinstance(auto, MLPTorso):
            return MLPTorso(self.hidden_sizes, self.activation, layer_norm=self.layer_norm)
        return auto

    def epsilon(self, progress: Float[Array, ""] | float) -> Float[Array, ""]:
        """The exploration rate at `progress` in [0, 1] of training."""
        frac = jnp.clip(jnp.asarray(progress, jnp.float32) / self.exploration_fraction, 0.0, 1.0)
        return self.eps_start + (self.eps_end - self.eps_start) * frac

    def q_values(self, q: DiscreteQHead, x: Array) -> Float[Array, "*batch actions"]:
        """**Returns:** `q`'s values at stored (normalised) observations `x`, an illegal action's
        (where the env has action masks) the lowest float, so no max or argmax takes it."""
        return masked_q_values(self.layout, q, x)

    def _explore(self, q: DiscreteQHead, x: Array, key: Key, epsilon: Array) -> Int[Array, "*batch"]:
        coin_key, action_key = jax.random.split(key)
        batch, mask = x.shape[:-1], self.layout.split(x)[1]
        greedy = jnp.argmax(self.q_values(q, x), axis=-1).astype(jnp.int32)
        if mask is None:
            random = jax.random.randint(action_key, batch, 0, self.action_size, dtype=jnp.int32)
        else:  # uniform among the legal actions
            random = Categorical(jnp.zeros(batch + (self.action_size,)), mask).sample(action_key)
        return jnp.where(jax.random.uniform(coin_key, batch) < epsilon, random, greedy)

    def noise_spec(self, state: Any, batch_shape: tuple[int, ...] = ()) -> dict[str, Noise]:
        """Epsilon-greedy's noise: `"explore"`, uniform `(*batch,)`, and `"action"`, Gumbel `(*batch, n)`."""
        return epsilon_greedy_noise_spec(batch_shape, self.action_size)

    def act_from_noise(self, state: PQNState, obs: PyTree, noise: dict[str, Array]) -> Int[Array, "*batch"]:
        """`act`'s epsilon-greedy at `eps_end` from given noise: the greedy action unless `noise["explore"]
        < eps_end`, then the Gumbel-max of `noise["action"]` over the legal actions (a uniform one among them)."""
        x = self._stored(state.obs_stats, obs)
        greedy = jnp.argmax(self.q_values(state.q, x), axis=-1).astype(jnp.int32)
        mask, owner = self.layout.split(x)[1], "PQN.act_from_noise(noise)"
        return epsilon_greedy_from_noise(greedy, self.eps_end, mask, noise, self.action_size, owner)

    def _stored(self, stats: RunningMeanStd | None, obs: Any) -> Array:
        return self.normalize(stats, self.flatten(obs))

    # ----------------------------------------------------------------- API
    def init(self, key: Key) -> PQNState:
        q_key, env_key, key = jax.random.split(key, 3)
        q = DiscreteQHead(self.obs_size, self.action_size, key=q_key, torso=self.q_torso(), obs_shape=self.obs_shape)
        env_state, ts = self.train_env.reset(env_key)
        stats = None
        if self.normalize_observations:
            stats = RunningMeanStd((self.obs_size,)).update(self.layout.split(self.flatten(ts.obs))[0])
        return PQNState(
            q=q, opt_state=self.network_optimizer.init(q), env_state=env_state, obs=ts.obs, obs_stats=stats,
            key=key, env_steps=jnp.zeros((), jnp.int32), iteration=jnp.zeros((), jnp.int32),
        )  # fmt: skip

    def act(self, state: PQNState, obs: PyTree, key: Key | None = None, deterministic: bool = False) -> Array:
        """The greedy action (`deterministic=True`), or epsilon-greedy at `eps_end` (needs `key`)."""
        x = self._stored(state.obs_stats, obs)
        if deterministic:
            return jnp.argmax(self.q_values(state.q, x), axis=-1).astype(jnp.int32)
        if key is None:
            raise ValueError("PQN.act(key) is required unless deterministic=True")
        return self._explore(state.q, x, key, self.eps_end)

    def _collect(self, state: PQNState, epsilon: Array) -> tuple[PQNState, _Rollout]:
        env, stats = self.train_env, state.obs_stats

        def step(carry, _):
            env_state, obs, key = carry
            key, act_key, env_key = jax.random.split(key, 3)
            x = self.flatten(obs)
            action = self._explore(state.q, self.normalize(stats, x), act_key, epsilon)
            env_state, ts = env.step(env_key, env_state, action)
            out = _Rollout.of_step(x, action, None, ts, self.flatten(ts.info["final_obs"]))
            return (env_state, ts.obs, key), out

        (env_state, obs, key), ro = jax.lax.scan(step, (state.env_state, state.obs, state.key), length=self.rollout_length)
        if stats is not None:  # (fixed within a rollout: normalising the stored observations now is what the policy saw)
            raw = ro.obs
            ro = eqx.tree_at(lambda r: (r.obs, r.final_obs), ro, (self.normalize(stats, raw), self.normalize(stats, ro.final_obs)))
            stats = stats.update(self.layout.split(raw)[0])
        state = eqx.tree_at(
            lambda s: (s.env_state, s.obs, s.key, s.obs_stats), state, (env_state, obs, key, stats), is_leaf=lambda x: x is None
        )
        return state, ro

    def loss(self, q: DiscreteQHead, batch: tuple) -> tuple[Float[Array, ""], Metrics]:
        """**Returns:** `(loss, metrics)` on a minibatch `batch = (obs, action, target)`: the mean of
        `0.5 (Q(obs, action) - target)^2` plus the extra loss terms."""
        x, action, target = batch
        q_values = q(self.layout.split(x)[0])
        taken = jnp.take_along_axis(q_values, action[..., None], axis=-1)[..., 0]
        q_loss = 0.5 * jnp.mean(jnp.square(taken - target))
        extra, extra_metrics = add_loss_terms(self.critic_loss_terms, "critic_loss_terms", q, batch, {"obs": x, "q": q_values})
        return q_loss + extra, {"q_loss": q_loss, "q_taken": jnp.mean(taken), **extra_metrics}

    def train_iteration(self, state: PQNState, clock: Clock) -> tuple[PQNState, Metrics]:
        progress = clock.progress
        epsilon = self.epsilon(progress)
        state, ro = self._collect(state, epsilon)
        next_q = jnp.max(self.q_values(state.q, ro.final_obs), axis=-1)
        targets = lambda_returns(ro.reward * self.reward_scale, next_q, ro.terminated, ro.truncated, self.gamma, self.q_lambda)
        targets = jax.lax.stop_gradient(targets)

        size = self.steps_per_iteration
        batch = tuple(x.reshape((size,) + x.shape[2:]) for x in (ro.obs, ro.action, targets))
        optimizer = self.network_optimizer
        grad_fn = eqx.filter_value_and_grad(self.loss, has_aux=True)
        minibatches = shuffled_minibatches(batch, self.num_minibatches)

        def minibatch(carry, mb):
            q, opt_state = carry
            (_, aux), grads = grad_fn(q, mb)
            q, opt_state = optimizer.update(grads, opt_state, q, progress)
            return (q, opt_state), _Packed.of({**aux, "applied": jnp.ones((), jnp.float32)})

        def epoch(carry, key):
            return jax.lax.scan(minibatch, carry, minibatches(key))

        key, epoch_key = jax.random.split(state.key)
        (q, opt_state), packed = jax.lax.scan(epoch, (state.q, state.opt_state), jax.random.split(epoch_key, self.num_epochs))
        env_steps = state.env_steps + size
        state = eqx.tree_at(
            lambda s: (s.q, s.opt_state, s.key, s.env_steps, s.iteration),
            state,
            (q, opt_state, key, env_steps, state.iteration + 1),
        )
        metrics = iteration_metrics(ro, packed, env_steps, optimizer, progress)
        metrics.update(epsilon=epsilon, q_target=jnp.mean(targets))
        return state, metrics
