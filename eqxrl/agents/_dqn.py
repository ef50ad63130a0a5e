"""DQN (Mnih et al. 2015) with double Q-learning, prioritized replay and n-step returns."""

from dataclasses import KW_ONLY, InitVar
from typing import Any, ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, Int

from ..core import Key, Metrics, check_positive_int, hyperparameter
from ..components import (
    Categorical,
    AbstractOptimizer,
    AbstractDiscreteQHead,
    AbstractSchedule,
    CategoricalQHead,
    DiscreteQHead,
    DuelingQHead,
    EpsilonSchedule,
    Noise,
    NoisyLinear,
    OptState,
    Sample,
    add_loss_terms,
    categorical_q_loss,
    check_categorical_support,
    categorical_q_target,
    huber,
    polyak,
    sample_noise,
    q_learning_target,
    select_q,
)
from ..envs import AbstractEnv, Discrete
from ._noise import epsilon_greedy_from_noise, epsilon_greedy_noise_spec
from ._keywords import EPSILON_KEYWORDS, LearningRate, epsilon_schedule, init_only_names, module_from_keywords
from ._off_policy import AbstractOffPolicyAgent
from ._network_spec import NetworkSpec
from ._off_policy_loop import OffPolicyLoop
from ._base import as_env


HEADS = {"plain": DiscreteQHead, "dueling": DuelingQHead, "categorical": CategoricalQHead, "dueling_categorical": CategoricalQHead}
"""`DQN(head)`'s values and the Q-head class each builds (`"dueling_categorical"`: `dueling=True`)."""


class DQNLearner(eqx.Module):
    """DQN's networks and optimizer state."""

    q: AbstractDiscreteQHead
    target_q: AbstractDiscreteQHead
    opt_state: OptState


def masked_q_values(layout: Any, q: Any, obs: Array) -> Array:
    """**Returns:** `q`'s values at stored observations `obs` (of `layout`), an illegal action's
    (where the env has action masks) the lowest float, so no max or argmax ever takes it (DQN's, PQN's)."""
    features, mask = layout.split(obs)
    values = q(features)
    return values if mask is None else jnp.where(mask, values, jnp.finfo(values.dtype).min)


def _layer_noise(learner: DQNLearner, batch_shape: tuple) -> dict[str, Noise]:
    """A noisy output layer's noise for a batch of `batch_shape`: one draw of the layer per observation."""
    in_size, out_size = learner.q.out.weight.shape
    return {"noisy_in": Noise((*batch_shape, in_size), "normal"), "noisy_out": Noise((*batch_shape, out_size), "normal")}


class DQN(AbstractOffPolicyAgent):
    """Deep Q-learning for discrete actions.

    Double Q-learning (`double=True`: the online network picks the next
    action, the target network values it), proportional prioritized replay
    (`prioritized=True`), n-step returns (`n_step`), epsilon-greedy exploration
    annealed from `eps_start` to `eps_end` over the first `exploration_fraction`
    of training (linearly, or with `epsilon_decay="exponential"` geometrically:
    `ExponentialSchedule`; or any `exploration` schedule of progress and the collection
    step, e.g. pytorchrl's per-step decay `GeometricDecaySchedule(initial, decay, minimum)`),
    a target network updated every
    `target_update_period` updates by `target <- tau * online + (1 - tau) * target`
    (`tau=1` is a hard copy), Huber or squared TD loss, gradient clipping.

    The Q-network is the agent's critic: `critic_torso`, `critic_optimizer` and
    `critic_loss_terms` (see `AbstractOffPolicyAgent`) configure it;
    `learning_rate` is a number or a schedule. `head` picks its output: `"plain"`
    (`DiscreteQHead`, the default), `"dueling"` (`DuelingQHead`, Wang et al. 2016),
    `"categorical"` (C51's `CategoricalQHead`, Bellemare et al. 2017: `num_atoms` returns from
    `v_min` to `v_max`, trained by the cross-entropy to the projected target,
    `categorical_q_target`, instead of `loss`) or `"dueling_categorical"` (both). `noisy=True`
    gives the head a `NoisyLinear` output layer (Fortunato et al. 2018) whose noise is drawn anew
    for every update (independently for the online and the target network) and, for each
    observation, every exploring `act`; greedy acting uses its mean weights. With noisy nets
    epsilon may be 0 (`eps_start=0, eps_end=0`): Rainbow explores by the noise alone.

    Rainbow (Hessel et al. 2018) is this DQN composed: `head="dueling_categorical", noisy=True,
    double=True, prioritized=True, n_step=3` (docs/agents/dqn.md, "Rainbow").
    """

    env: AbstractEnv = eqx.field(converter=as_env)
    _: KW_ONLY
    loop: OffPolicyLoop | None = None
    critic: NetworkSpec | None = None
    num_envs: InitVar[int] = 10
    updates_per_step: InitVar[float] = 0.5
    # Batch 256 and a learning rate annealed to 0 (`anneal_lr`): with batch 128 and a constant rate,
    # 2 of 4 seeds collapsed late on CartPole at 500k and 1M env steps (docs/agents/dqn.md, "Defaults").
    batch_size: InitVar[int] = 256
    buffer_size: InitVar[int] = 50_000
    learning_starts: InitVar[int] = 5_000
    hidden_sizes: InitVar[tuple[int, ...]] = (64, 64)
    double: bool = eqx.field(static=True, default=True)
    loss: str = eqx.field(static=True, default="mse")
    target_update_period: int = eqx.field(static=True, default=5)
    epsilon_decay: InitVar[str] = "linear"
    anneal_lr: InitVar[bool] = True
    head: str = eqx.field(static=True, default="plain")
    num_atoms: int = eqx.field(static=True, default=51)
    v_min: float = eqx.field(static=True, default=-10.0)
    v_max: float = eqx.field(static=True, default=10.0)
    noisy: bool = eqx.field(static=True, default=False)
    takes_action_masks: ClassVar[bool] = True
    rates: ClassVar[dict[str, str]] = {"critic.optimizer": "learning_rate"}
    aliases: ClassVar[dict[str, str]] = {
        **AbstractOffPolicyAgent.aliases, "anneal_lr": "critic.optimizer.anneal",
        **{keyword: f"exploration.{field}" for keyword, field in EPSILON_KEYWORDS.items()},
    }
    learning_rate: InitVar[LearningRate] = 1e-3
    tau: Float[Array, ""] = hyperparameter(0.02)
    eps_start: InitVar[float | Array] = 1.0
    eps_end: InitVar[float | Array] = 0.05
    exploration_fraction: InitVar[float | Array] = 0.5
    max_grad_norm: InitVar[float | Array] = 10.0
    exploration: AbstractSchedule | None = None

    def __check_init__(self):
        if isinstance(self.env, AbstractEnv) and not isinstance(self.env.action_space, Discrete):
            raise ValueError(
                f"DQN needs a Discrete action space, got {self.env.action_space!r} from env {self.env.name!r}; "
                "use DDPG, TD3 or SAC for continuous actions"
            )
        check_positive_int("DQN", "target_update_period", self.target_update_period)
        if self.head not in HEADS:
            raise ValueError(f"DQN(head) must be one of {list(HEADS)}, got {self.head!r}")
        check_categorical_support("DQN", self.num_atoms, self.v_min, self.v_max)
        if not isinstance(self.noisy, bool):
            raise ValueError(f"DQN(noisy) must be True or False, got {self.noisy!r}")
        if self.categorical and self.loss != "mse":
            raise ValueError(
                f"DQN(loss={self.loss!r}) is for the scalar heads; head={self.head!r} is trained by the "
                "cross-entropy to its projected target: leave loss at 'mse'"
            )
        if self.loss not in ("huber", "mse"):
            raise ValueError(f"DQN(loss) must be 'huber' or 'mse', got {self.loss!r}")
        if not isinstance(self.exploration, AbstractSchedule):
            raise ValueError(
                "DQN(exploration) must be None (eps_start -> eps_end) or a schedule such as "
                f"eqxrl.components.GeometricDecaySchedule(1.0, 0.999, 0.05), got {self.exploration!r}"
            )

    @property
    def categorical(self) -> bool:
        """Whether `head` is distributional (C51's `CategoricalQHead`)."""
        return HEADS.get(self.head) is CategoricalQHead

    @property
    def q_optimizer(self) -> AbstractOptimizer:
        """The Q-network's optimizer: `critic_optimizer`, or Adam with `learning_rate` (annealed
        linearly to 0 over training with `anneal_lr`, a number only) and `max_grad_norm`."""
        return self.critic.optimizer

    def __post_init__(self, *keywords: Any):  # the shared part, then `exploration` from its keywords
        super().__post_init__(*keywords)
        given = {name: value for name, value in zip(init_only_names(type(self)), keywords) if name in EPSILON_KEYWORDS}
        self.exploration = module_from_keywords(self, "exploration", given, "the exploration schedule", lambda: epsilon_schedule("DQN", **given))

    def adam_options(self, path: str, keywords: dict[str, Any]) -> dict[str, Any]:
        if not isinstance(keywords["anneal_lr"], bool):
            raise ValueError(f"DQN(anneal_lr) must be True or False, got {keywords['anneal_lr']!r}")
        return {"anneal": keywords["anneal_lr"]}

    def epsilon(self, progress: Float[Array, ""] | float, count: Int[Array, ""] | int | None = None) -> Float[Array, ""]:
        """The exploration rate at `progress` in [0, 1] of training: the `exploration` schedule's
        value (clipped to [0, 1]) at `progress` after `count` collection steps (None: the end of a
        long run, `2**31 - 1` steps, as an exploring `act` uses). Not given, the schedule is
        `EpsilonSchedule(eps_start, eps_end, exploration_fraction, epsilon_decay)`: from `eps_start`
        to `eps_end` over the first `exploration_fraction` (linearly, or geometrically), then `eps_end`."""
        count = jnp.iinfo(jnp.int32).max if count is None else count
        return jnp.clip(jnp.asarray(self.exploration(progress, jnp.asarray(count, jnp.int32)), jnp.float32), 0.0, 1.0)

    def init_learner(self, key: Key) -> DQNLearner:
        support = dict(num_atoms=self.num_atoms, v_min=self.v_min, v_max=self.v_max, dueling=self.head.startswith("dueling"))
        noisy = dict(noisy=True) if self.noisy else {}
        q = HEADS[self.head](
            self.obs_size,
            self.action_size,
            key=key,
            torso=self.critic.torso_for(self),
            obs_shape=self.obs_shape,
            **(support if self.categorical else {}),
            **noisy,
        )
        return DQNLearner(q=q, target_q=q, opt_state=self.q_optimizer.init(q))

    def q_values(self, q: Any, obs: Array) -> Float[Array, "*batch actions"]:
        """**Returns:** `q`'s values at stored observations `obs`, an illegal action's (where the
        env has action masks) the lowest float, so no max or argmax ever takes it."""
        return masked_q_values(self.layout, q, obs)

    def greedy(self, learner: DQNLearner, obs: Array) -> Int[Array, "*batch"]:
        return jnp.argmax(self.q_values(learner.q, obs), axis=-1).astype(jnp.int32)

    def explore(self, learner: DQNLearner, obs: Array, key: Key, progress: Float[Array, ""]) -> Int[Array, "*batch"]:
        return self._epsilon_greedy(learner, obs, key, self.epsilon(progress))

    def explore_at(self, learner: DQNLearner, obs: Array, key: Key, progress: Float[Array, ""], count: Int[Array, ""]) -> Int[Array, "*batch"]:
        """`explore` with the epsilon of collection step `count` (an `exploration` schedule reads it)."""
        return self._epsilon_greedy(learner, obs, key, self.epsilon(progress, count))

    def train_iteration(self, state: Any, clock: Any) -> tuple[Any, Metrics]:
        state, metrics = super().train_iteration(state, clock)
        if not isinstance(self.exploration, EpsilonSchedule):  # a schedule of the step count: the rate of the iteration's last collection step
            last = clock.iteration * self.rollout_length + self.rollout_length - 1
            metrics = {**metrics, "epsilon": self.epsilon(clock.progress, last)}
        return state, metrics

    def _epsilon_greedy(self, learner: DQNLearner, obs: Array, key: Key, epsilon: Float[Array, ""]) -> Int[Array, "*batch"]:
        if self.noisy:  # each observation through its own draw of the output layer, then epsilon-greedy
            key, in_key, out_key, torso_key = jax.random.split(key, 4)
            in_size, out_size = learner.q.out.weight.shape
            batch = obs.shape[:-1]
            noise_in, noise_out = jax.random.normal(in_key, (*batch, in_size)), jax.random.normal(out_key, (*batch, out_size))
            learner = self.with_layer_noise(learner, noise_in, noise_out, torso_key)
        coin_key, action_key = jax.random.split(key)
        batch, mask = obs.shape[:-1], self.layout.split(obs)[1]
        if mask is None:
            random = jax.random.randint(action_key, batch, 0, self.action_size, dtype=jnp.int32)
        else:  # uniform among the legal actions
            random = Categorical(jnp.zeros(batch + (self.action_size,)), mask).sample(action_key)
        explore = jax.random.uniform(coin_key, batch) < epsilon
        return jnp.where(explore, random, self.greedy(learner, obs))

    def with_layer_noise(self, learner: DQNLearner, noise_in: Array, noise_out: Array, key: Key | None = None) -> DQNLearner:
        """The learner whose online head's output layer puts each observation through its own draw
        (`NoisyLinear.call_with_noise` of standard-normal `noise_in` `(*batch, in_size)` and `noise_out`
        `(*batch, out_size)`); with `key`, any noisy layer of the torso (a user's) drawn once from it."""
        q = learner.q
        if key is not None:
            q = eqx.tree_at(lambda q: q.torso, q, sample_noise(q.torso, key))
        q = eqx.tree_at(lambda q: q.out, q, _NoisyDraw(q.out, noise_in, noise_out))
        return DQNLearner(q, learner.target_q, learner.opt_state)

    def noise_spec(self, state: Any, batch_shape: tuple[int, ...] = ()) -> dict[str, Noise]:
        """Epsilon-greedy's noise: `"explore"`, uniform `(*batch,)`, and `"action"`, Gumbel `(*batch, n)`;
        with `noisy`, also the output layer's, standard normal: `"noisy_in"` `(*batch, in_size)` and
        `"noisy_out"` `(*batch, out_size)`, one draw of the layer per observation."""
        spec = epsilon_greedy_noise_spec(batch_shape, self.action_size)
        return {**spec, **_layer_noise(state.learner, batch_shape)} if self.noisy else spec

    def explore_from_noise(
        self, learner: DQNLearner, obs: Array, noise: dict[str, Array], progress: Float[Array, ""]
    ) -> Int[Array, "*batch"]:
        """Epsilon-greedy from given noise: the greedy action unless `noise["explore"] < epsilon`, then
        the Gumbel-max of `noise["action"]` over the legal actions (a uniform one among them). With
        `noisy`, greedy under the output layer drawn from `noise["noisy_in"]`, `noise["noisy_out"]`
        for each observation (`NoisyLinear.call_with_noise`)."""
        mask = self.layout.split(obs)[1]
        owner = "DQN.act_from_noise(noise)"
        if self.noisy:  # each observation through its own draw of the output layer
            # (not self.noise_spec: under jax.export the batch dimension is symbolic, not an int)
            spec = {**epsilon_greedy_noise_spec(obs.shape[:-1], self.action_size), **_layer_noise(learner, obs.shape[:-1])}
            if not isinstance(noise, dict) or set(noise) != set(spec):
                got = sorted(noise) if isinstance(noise, dict) else type(noise).__name__
                raise ValueError(f"{owner} must be a dict of noise arrays {sorted(spec)} (noisy epsilon-greedy), got {got}")
            noise = dict(noise)
            layer_noise = {name: noise.pop(name) for name in ("noisy_in", "noisy_out")}
            for name, value in layer_noise.items():
                spec[name].check(value, f"{owner}[{name!r}]")
            learner = self.with_layer_noise(learner, layer_noise["noisy_in"], layer_noise["noisy_out"])
        return epsilon_greedy_from_noise(self.greedy(learner, obs), self.epsilon(progress), mask, noise, self.action_size, owner)

    def update(
        self, learner: DQNLearner, batch: Sample, key: Key, updates: Int[Array, ""], progress: Float[Array, ""]
    ) -> tuple[DQNLearner, Float[Array, " batch"], Metrics]:
        data = batch.data
        online_key, target_key, next_key = jax.random.split(key, 3)
        draw = lambda q, k: sample_noise(q, k) if self.noisy else q  # noqa: E731
        if self.categorical:
            return self.categorical_update(learner, batch, progress, updates, (online_key, target_key, next_key))
        next_target = self.q_values(draw(learner.target_q, target_key), data.next_obs)
        next_online = self.q_values(draw(learner.q, next_key), data.next_obs) if self.double else None
        target = jax.lax.stop_gradient(q_learning_target(data.reward, data.discount, next_target, next_online))

        def loss_fn(q):
            q_values = draw(q, online_key)(self.layout.split(data.obs)[0])
            td = select_q(q_values, data.action) - target
            per_sample = huber(td) if self.loss == "huber" else 0.5 * jnp.square(td)
            loss = jnp.mean(batch.weights * per_sample)
            extra, extra_metrics = add_loss_terms(
                self.critic_loss_terms, "critic_loss_terms", q, batch, {"obs": data.obs, "q": q_values}
            )
            return loss + extra, (loss, td, extra_metrics)

        (_, (loss, td, extra_metrics)), grads = eqx.filter_value_and_grad(loss_fn, has_aux=True)(learner.q)
        metrics = {"q_loss": loss, "q_mean": jnp.mean(target), "epsilon": self.epsilon(progress), **extra_metrics}
        return self.step_q(learner, grads, updates, progress), td, metrics

    def categorical_update(
        self, learner: DQNLearner, batch: Sample, progress: Float[Array, ""], updates: Int[Array, ""], keys: tuple
    ) -> tuple[DQNLearner, Float[Array, " batch"], Metrics]:
        """`update` with a categorical head: the cross-entropy of each taken action's return
        distribution to `categorical_q_target` (the target network's distribution at the action
        that the online network (`double`) or the target network ranks best, projected onto the
        support), weighted by the PER weights; the per-sample cross-entropy is PER's priority.
        `keys`: the noise of the online, target and next-action-ranking networks (`noisy`)."""
        data, atoms = batch.data, learner.q.atoms
        online_key, target_key, next_key = keys
        draw = lambda q, k: sample_noise(q, k) if self.noisy else q  # noqa: E731
        target_q = draw(learner.target_q, target_key)
        next_logits = target_q.logits(self.layout.split(data.next_obs)[0])
        selector = self.q_values(draw(learner.q, next_key) if self.double else target_q, data.next_obs)
        target = jax.lax.stop_gradient(categorical_q_target(data.reward, data.discount, next_logits, selector, atoms))

        def loss_fn(q):
            logits = draw(q, online_key).logits(self.layout.split(data.obs)[0])
            per_sample = categorical_q_loss(logits, data.action, target)
            loss = jnp.mean(batch.weights * per_sample)
            q_values = jnp.sum(jax.nn.softmax(logits, axis=-1) * atoms, axis=-1)
            extra, extra_metrics = add_loss_terms(
                self.critic_loss_terms, "critic_loss_terms", q, batch, {"obs": data.obs, "q": q_values}
            )
            return loss + extra, (loss, per_sample, extra_metrics)

        (_, (loss, per_sample, extra_metrics)), grads = eqx.filter_value_and_grad(loss_fn, has_aux=True)(learner.q)
        q_mean = jnp.mean(jnp.sum(target * atoms, axis=-1))
        metrics = {"q_loss": loss, "q_mean": q_mean, "epsilon": self.epsilon(progress), **extra_metrics}
        return self.step_q(learner, grads, updates, progress), per_sample, metrics

    def step_q(self, learner: DQNLearner, grads: Any, updates: Int[Array, ""], progress: Float[Array, ""]) -> DQNLearner:
        """One optimizer step of the Q-network on `grads`, and the target network's update when due."""
        q, opt_state = self.q_optimizer.update(grads, learner.opt_state, learner.q, progress)
        sync = (updates + 1) % self.target_update_period == 0
        target_q = jax.tree.map(
            lambda new, old: jnp.where(sync, new, old), polyak(q, learner.target_q, self.tau), learner.target_q
        )
        return DQNLearner(q=q, target_q=target_q, opt_state=opt_state)


class _Learned(eqx.Module):
    """(A state-shaped view of a learner, for `noise_spec`'s sizes.)"""

    learner: DQNLearner


class _NoisyDraw(eqx.Module):
    """A `NoisyLinear` with its noise given per row (`act_from_noise`'s output layer)."""

    layer: NoisyLinear
    noise_in: Array
    noise_out: Array

    def __call__(self, x: Array) -> Array:
        return self.layer.call_with_noise(x, self.noise_in, self.noise_out)
