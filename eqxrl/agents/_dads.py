"""DADS: Dynamics-Aware unsupervised Discovery of Skills (Sharma et al. 2019), off-policy, on SAC.

The env is wrapped as `SkillWrapper(DescriptorWrapper(env), num_skills)`: every
observation is the flat vector `[obs, descriptor, one_hot(skill)]`, and each
episode draws its skill uniformly at each reset. The shared off-policy loop
stores these vectors in the replay buffer like any observation; DADS's
`update` splits them back into the policy's input `[obs, one_hot(skill)]`
(`[obs, descriptor, one_hot(skill)]` with `policy_sees_descriptor=True`), the
skill, and the descriptor's change `delta = descriptor' - descriptor`. It then

1. trains the skill dynamics `q(delta | x, z)` (a mixture of Gaussian experts,
   `x` the descriptor or the observation, less its first
   `omit_input_dynamics_dim` dimensions) by maximum likelihood on the batch,
   every `dynamics_update_period`-th update;
2. relabels the batch with the intrinsic reward
   `log q(delta|x,z) - log (1/L) sum_z' q(delta|x,z')` over all `L` skills
   (computed with the current dynamics, so old transitions get current rewards);
3. runs one SAC update (`eqxrl.agents.SAC`'s own `update`) with that reward in
   place of the env's.
"""

from dataclasses import KW_ONLY, InitVar
from typing import Any, ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, Int

from ..core import Key, Metrics, check_hyperparameter, check_positive_int, hyperparameter, is_positive_int
from ..components import (
    AbstractOptimizer,
    Noise,
    OptState,
    RunningMeanStd,
    Sample,
    SkillDynamics,
    Transition,
    check_optimizer,
    dads_intrinsic_reward,
    optimizer_slot,
)
from ..envs import ACTION_MASK, AbstractEnv, Box, DescriptorWrapper, SkillWrapper, resolve_descriptor
from ._base import as_env
from ._keywords import LearningRate
from ._dads_report import SkillReport, evaluate_skills
from ._actor_critic import AbstractActorCriticAgent
from ._off_policy import OffPolicyState, check_continuous
from ._network_spec import NetworkSpec
from ._off_policy_loop import OffPolicyLoop
from ._sac import SAC, SAC_RATES, SACLearner

DYNAMICS_INPUTS = ("descriptor", "observation")


class DADSLearner(eqx.Module):
    """DADS's SAC learner, skill dynamics, dynamics optimizer state and running statistics."""

    sac: SACLearner
    dynamics: SkillDynamics
    dynamics_opt: OptState
    input_stats: RunningMeanStd
    target_stats: RunningMeanStd
    policy_stats: RunningMeanStd | None


class DADS(AbstractActorCriticAgent):
    """DADS on SAC: `num_skills` one-hot skills, a mixture-of-experts skill dynamics
    over the change of a state descriptor, and SAC trained on DADS's intrinsic
    reward (the env reward is ignored in training, and reported by `evaluate`
    and `evaluate_skills`).

    The env (an `AbstractEnv` or a name) is wrapped on construction in
    `SkillWrapper(DescriptorWrapper(env, descriptor), num_skills)`; `agent.env`
    is that wrapper and `agent.env.name` the original name. `descriptor`:
    `"auto"` (a brax env's torso x-y, `Point2D`'s position), `"xy"` (brax),
    `"observation"` (the whole observation), or pass an env already wrapped in a
    `DescriptorWrapper` (any callable descriptor). `descriptor_size`, if given,
    must match.

    The skill dynamics predicts `delta` from `x` = the descriptor
    (`dynamics_input="descriptor"`, DADS's x-y prior) or the observation, with
    its first `omit_input_dynamics_dim` dimensions left out (as DADS and QDax
    leave out the x-y position: the predicted change then cannot depend on
    where the agent is), and is updated once every `dynamics_update_period` SAC updates (1: on every
    sampled batch, before the SAC update that uses its rewards). With
    `normalize_dynamics`, its input and target are normalised by running
    statistics of the sampled batches (the reward does not change with the
    target's scale: the same affine map applies to every skill).

    The shared loop's observation normalisation is off for DADS (it would also
    normalise the one-hot skill and the descriptor);
    `normalize_policy_observations=True` normalises the policy's observation
    part by running statistics kept in the learner (updated from each sampled
    batch). The intrinsic reward is multiplied by `reward_scale`. `n_step` must be 1.
    """

    default_env: ClassVar[str] = "Point2D-v0"
    default_total_steps: ClassVar[int] = 50_000
    rates: ClassVar[dict[str, str]] = {**SAC_RATES, "dynamics_optimizer": "dynamics_learning_rate"}
    env: AbstractEnv = eqx.field(converter=as_env)
    _: KW_ONLY
    num_skills: int = eqx.field(static=True, default=4)
    num_experts: int = eqx.field(static=True, default=4)
    descriptor: str = eqx.field(static=True, default="auto")
    descriptor_size: int | None = eqx.field(static=True, default=None)
    dynamics_input: str = eqx.field(static=True, default="descriptor")
    omit_input_dynamics_dim: int = eqx.field(static=True, default=0)
    policy_sees_descriptor: bool = eqx.field(static=True, default=False)
    normalize_policy_observations: bool = eqx.field(static=True, default=False)
    normalize_dynamics: bool = eqx.field(static=True, default=True)
    dynamics_learn_std: bool = eqx.field(static=True, default=False)
    dynamics_update_period: int = eqx.field(static=True, default=1)
    dynamics_hidden_sizes: tuple[int, ...] = eqx.field(static=True, default=(256, 256), converter=tuple)
    loop: OffPolicyLoop | None = None
    critic: NetworkSpec | None = None
    actor: NetworkSpec | None = None
    num_envs: InitVar[int] = 4
    updates_per_step: InitVar[float] = 0.5
    autotune: bool = eqx.field(static=True, default=True)
    alpha_optimizer: AbstractOptimizer | None = optimizer_slot()
    dynamics_optimizer: AbstractOptimizer | None = optimizer_slot()
    num_critics: int = eqx.field(static=True, default=2)
    actor_learning_rate: InitVar[LearningRate] = 3e-4
    critic_learning_rate: InitVar[LearningRate] = 3e-4
    alpha_learning_rate: InitVar[LearningRate] = 3e-4
    dynamics_learning_rate: InitVar[LearningRate] = 3e-4
    init_alpha: Float[Array, ""] = hyperparameter(0.1)
    target_entropy_scale: Float[Array, ""] = hyperparameter(1.0)
    tau: Float[Array, ""] = hyperparameter(0.005)

    def __post_init__(self, *keywords):
        # Runs before the converters and `__check_init__`: wrap the env once, here,
        # so that the shared loop sees the skill-and-descriptor observation; then the shared
        # part (the buffer from its `keywords`).
        super().__post_init__(*keywords)
        env = as_env(self.env)
        if not isinstance(env, AbstractEnv):
            return  # the shared off-policy check names the problem
        if not is_positive_int(self.num_skills) or self.num_skills < 2:
            raise ValueError(f"DADS(num_skills) must be an int >= 2, got {self.num_skills!r}")
        if isinstance(env, SkillWrapper):
            if env.num_skills != self.num_skills:
                raise ValueError(
                    f"DADS(env) is a SkillWrapper with {env.num_skills} skills, but num_skills={self.num_skills}"
                )
            if not isinstance(env.env, DescriptorWrapper):
                raise ValueError(
                    f"DADS(env): a SkillWrapper env must wrap a DescriptorWrapper, got {type(env.env).__name__}"
                )
            env = env.env
        if ACTION_MASK in getattr(env.observation_space, "spaces", {}):  # (its actions are continuous)
            raise ValueError(f"DADS does not take action masks, and env {env.name!r} has them (its observations' 'action_mask' entry)")
        space = env.action_space
        if not isinstance(space, Box) or len(space.shape) != 1:
            raise ValueError(f"DADS needs a 1-D Box action space, got {space!r} from env {env.name!r}")
        if not isinstance(env, DescriptorWrapper):
            if not isinstance(self.descriptor, str):
                raise ValueError(
                    f"DADS(descriptor) must be one of 'auto', 'observation', 'xy', got {self.descriptor!r}; "
                    "for a custom descriptor pass env=DescriptorWrapper(env, fn)"
                )
            resolve_descriptor(env, self.descriptor, owner="DADS")
            env = DescriptorWrapper(env, self.descriptor)
        if self.descriptor_size is not None and self.descriptor_size != env.descriptor_size:
            raise ValueError(
                f"DADS(descriptor_size={self.descriptor_size!r}) does not match the descriptor of env "
                f"{env.name!r} (descriptor={env.kind!r}), which has size {env.descriptor_size}"
            )
        if self.dynamics_input not in DYNAMICS_INPUTS:
            raise ValueError(f"DADS(dynamics_input) must be one of {list(DYNAMICS_INPUTS)}, got {self.dynamics_input!r}")
        self.env = SkillWrapper(env, self.num_skills)

    def __check_init__(self):
        check_continuous(self, "DADS")
        if self.normalize_observations:
            raise ValueError(
                "DADS(normalize_observations) must be False: it would also normalise the one-hot skill and "
                "the descriptor; use normalize_policy_observations=True"
            )
        check_optimizer("DADS", "alpha_optimizer", self.alpha_optimizer)
        check_optimizer("DADS", "dynamics_optimizer", self.dynamics_optimizer)
        if not isinstance(self.env, SkillWrapper):
            raise ValueError(f"DADS(env) must be an eqxrl AbstractEnv or an env name, got {self.env!r}")
        for name in ("num_experts", "num_critics", "dynamics_update_period"):
            check_positive_int("DADS", name, getattr(self, name))
        width = self._full_dynamics_input_size
        k = self.omit_input_dynamics_dim
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not 0 <= k < width:
            raise ValueError(
                f"DADS(omit_input_dynamics_dim) must be an int in [0, {width}), got {k!r}: the skill dynamics' input "
                f"(dynamics_input={self.dynamics_input!r}) has {width} dimensions and at least one must remain"
            )
        if self.n_step != 1:
            raise ValueError(
                f"DADS(n_step) must be 1 (the intrinsic reward is a function of one-step transitions), got {self.n_step!r}"
            )
        check_hyperparameter("DADS", "init_alpha", self.init_alpha, lambda v: v > 0, "> 0")

    # ----------------------------------------------------------------- layout
    @property
    def descriptor_env(self) -> DescriptorWrapper:
        """The env below the skill wrapper: observations `[obs, descriptor]`."""
        return self.env.env

    @property
    def _sizes(self) -> tuple[int, int, int]:
        """`(observation, descriptor, skills)` widths of the flat observation."""
        return self.descriptor_env.base_obs_size, self.descriptor_env.descriptor_size, self.num_skills

    def split(
        self, x: Float[Array, "*batch full"]
    ) -> tuple[Float[Array, "*batch obs"], Float[Array, "*batch descriptor"], Float[Array, "*batch skills"]]:
        """Split flat observations into `(observation, descriptor, one_hot(skill))`."""
        o, d, _ = self._sizes
        return x[..., :o], x[..., o : o + d], x[..., o + d :]

    @property
    def _policy_obs_size(self) -> int:
        o, d, _ = self._sizes
        return o + d if self.policy_sees_descriptor else o

    @property
    def _full_dynamics_input_size(self) -> int:
        o, d, _ = self._sizes
        return d if self.dynamics_input == "descriptor" else o

    @property
    def _dynamics_input_size(self) -> int:
        return self._full_dynamics_input_size - self.omit_input_dynamics_dim

    @property
    def sac(self) -> SAC:
        """The SAC configuration DADS's policy and critics are trained with (built on the fly
        from DADS's fields, over an env whose observation is the policy's input)."""
        inner = self.descriptor_env if self.policy_sees_descriptor else self.descriptor_env.env
        return SAC(
            SkillWrapper(inner, self.num_skills),
            batch_size=self.batch_size,
            buffer=self.buffer,
            autotune=self.autotune,
            critic=self.critic,
            actor=self.actor,
            alpha_optimizer=self.alpha_optimizer,
            num_critics=self.num_critics,
            gamma=self.gamma,
            tau=self.tau,
            init_alpha=self.init_alpha,
            target_entropy_scale=self.target_entropy_scale,
        )

    def _dynamics_opt(self) -> AbstractOptimizer:
        return self.dynamics_optimizer

    def _policy_input(self, stats: RunningMeanStd | None, x: Float[Array, "*batch full"]) -> Float[Array, "*batch policy"]:
        obs, desc, skill = self.split(x)
        seen = jnp.concatenate([obs, desc], axis=-1) if self.policy_sees_descriptor else obs
        if stats is not None:
            seen = stats.normalize(seen)
        return jnp.concatenate([seen, skill], axis=-1)

    # ----------------------------------------------------------------- hooks
    def init_learner(self, key: Key) -> DADSLearner:
        sac_key, dynamics_key = jax.random.split(key)
        _, d, _ = self._sizes
        dynamics = SkillDynamics(
            self._dynamics_input_size, d, self.num_skills, self.num_experts, self.dynamics_hidden_sizes, self.activation,
            key=dynamics_key, learn_std=self.dynamics_learn_std,
        )  # fmt: skip
        policy_stats = RunningMeanStd((self._policy_obs_size,)) if self.normalize_policy_observations else None
        return DADSLearner(
            sac=self.sac.init_learner(sac_key),
            dynamics=dynamics,
            dynamics_opt=self._dynamics_opt().init(dynamics),
            input_stats=RunningMeanStd((self._dynamics_input_size,)),
            target_stats=RunningMeanStd((d,)),
            policy_stats=policy_stats,
        )

    def explore(self, learner: DADSLearner, obs: Array, key: Key, progress: Float[Array, ""]) -> Float[Array, "*batch action"]:
        return self.sac.explore(learner.sac, self._policy_input(learner.policy_stats, obs), key, progress)

    def noise_spec(self, state: Any, batch_shape: tuple[int, ...] = ()) -> Noise:
        return self.sac.noise_spec(state, batch_shape)

    def explore_from_noise(self, learner: DADSLearner, obs: Array, noise: Array, progress: Float[Array, ""]) -> Array:
        return self.sac.explore_from_noise(learner.sac, self._policy_input(learner.policy_stats, obs), noise, progress)

    def greedy(self, learner: DADSLearner, obs: Array) -> Float[Array, "*batch action"]:
        return self.sac.greedy(learner.sac, self._policy_input(learner.policy_stats, obs))

    def _dynamics_data(self, x: Float[Array, "*batch full"], next_x: Float[Array, "*batch full"]):
        obs, desc, skill = self.split(x)
        _, next_desc, _ = self.split(next_x)
        inputs = desc if self.dynamics_input == "descriptor" else obs
        return inputs[..., self.omit_input_dynamics_dim :], next_desc - desc, skill

    def _normalize_dynamics(self, learner: DADSLearner, inputs: Array, delta: Array) -> tuple[Array, Array]:
        if not self.normalize_dynamics:
            return inputs, delta
        return learner.input_stats.normalize(inputs), learner.target_stats.normalize(delta)

    def intrinsic_reward(
        self, learner: DADSLearner, obs: Float[Array, "*batch full"], next_obs: Float[Array, "*batch full"]
    ) -> tuple[Float[Array, "*batch"], Float[Array, "*batch"]]:
        """DADS's reward for transitions between flat observations `[obs, descriptor, one_hot(skill)]`.

        **Returns:** `(reward, log_prob)`: the intrinsic reward under the learner's
        skill dynamics and `log q(delta | x, z)` of the skill that acted
        (in the normalised target's units when `normalize_dynamics`).
        """
        inputs, delta, skill = self._dynamics_data(obs, next_obs)
        inputs, delta = self._normalize_dynamics(learner, inputs, delta)
        log_probs = learner.dynamics.log_prob_all_skills(inputs, delta)
        index = jnp.argmax(skill, axis=-1).astype(jnp.int32)
        own = jnp.take_along_axis(log_probs, index[..., None], axis=-1)[..., 0]
        return dads_intrinsic_reward(log_probs, index), own

    def update(
        self, learner: DADSLearner, batch: Sample, key: Key, updates: Int[Array, ""], progress: Float[Array, ""]
    ) -> tuple[DADSLearner, Float[Array, " batch"], Metrics]:
        data = batch.data
        inputs, delta, skill = self._dynamics_data(data.obs, data.next_obs)
        if self.normalize_dynamics:
            learner = eqx.tree_at(
                lambda l: (l.input_stats, l.target_stats),
                learner,
                (learner.input_stats.update(inputs), learner.target_stats.update(delta)),
            )
        policy_stats = learner.policy_stats
        if policy_stats is not None:
            policy_stats = policy_stats.update(self._policy_input(None, data.obs)[..., : self._policy_obs_size])
        norm_inputs, norm_delta = self._normalize_dynamics(learner, inputs, delta)

        def dynamics_loss(dynamics):
            return -jnp.mean(dynamics.log_prob(norm_inputs, skill, norm_delta))

        def train_dynamics(operand):
            dynamics, opt_state = operand
            loss, grads = eqx.filter_value_and_grad(dynamics_loss)(dynamics)
            dynamics, opt_state = self._dynamics_opt().update(grads, opt_state, dynamics, progress)
            return dynamics, opt_state, loss

        def keep(operand):
            dynamics, opt_state = operand
            return dynamics, opt_state, dynamics_loss(dynamics)

        operand = (learner.dynamics, learner.dynamics_opt)
        if self.dynamics_update_period == 1:
            dynamics, dynamics_opt, loss = train_dynamics(operand)
        else:
            due = updates % self.dynamics_update_period == 0
            dynamics, dynamics_opt, loss = jax.lax.cond(due, train_dynamics, keep, operand)
        learner = DADSLearner(
            sac=learner.sac,
            dynamics=dynamics,
            dynamics_opt=dynamics_opt,
            input_stats=learner.input_stats,
            target_stats=learner.target_stats,
            policy_stats=policy_stats,
        )
        reward, _ = self.intrinsic_reward(learner, data.obs, data.next_obs)
        reward = jax.lax.stop_gradient(reward)
        sac_data = Transition(
            obs=self._policy_input(policy_stats, data.obs),
            action=data.action,
            reward=self.reward_scale * reward,
            discount=data.discount,
            next_obs=self._policy_input(policy_stats, data.next_obs),
        )
        sac_learner, td, metrics = self.sac.update(
            learner.sac, Sample(sac_data, batch.indices, batch.weights), key, updates, progress
        )
        learner = eqx.tree_at(lambda l: l.sac, learner, sac_learner)
        metrics = dict(metrics)
        metrics.update(
            dynamics_loss=loss,
            dynamics_log_likelihood=-loss,
            intrinsic_reward=jnp.mean(reward),
        )
        return learner, td, metrics

    # ----------------------------------------------------------------- skills
    def evaluate_skills(
        self, state: OffPolicyState, key: Key, num_steps: int | None = None, deterministic: bool = True
    ) -> SkillReport:
        """Run one episode of every skill and record what it does.

        **Arguments:**

        - `state`: a training state from `eqxrl.train` (one run, or a batch of
          seeds: the report then has a leading seed axis).
        - `key`: a PRNG key (split per seed and per skill).
        - `num_steps`: episode length cap (default: the env's time limit).
        - `deterministic`: act with the policy's mode (True) or sample.

        **Returns:** a `SkillReport` (env return, intrinsic return and descriptor
        trajectory per skill).
        """
        return evaluate_skills(self, state, key, num_steps, deterministic)

    def report(self, state: OffPolicyState, key: Key) -> dict[str, Any]:
        """`{"skills": evaluate_skills(state, key)}`: one episode of every skill, which a run
        directory keeps as `skills.json` and `skills.png` (`eqxrl.runs.write_reports`)."""
        return {"skills": self.evaluate_skills(state, key)}
