"""The abstract agent every algorithm implements."""

import abc
import dataclasses
import functools
from collections.abc import Callable
from typing import Any, ClassVar

import equinox as eqx
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, Int, PyTree

from ..components.distributions import Categorical, MultiCategorical
from ..components.networks import batched_orthogonal
from ..core import Key, Metrics, get_path, hyperparameter_paths, to_spec
from ..envs import AbstractEnv, AutoReset, Discrete, EpisodeStatistics, MultiDiscrete, ObservationLayout, VectorEnv, check_env
from ._noise import no_noise_sampler


class Clock(eqx.Module):
    """Where a run stands: the iteration about to run and the run's length.

    Passed to `train_iteration` unbatched (the same for every seed or member of
    a population, which all advance in lockstep), so agents can branch on it
    with a real `lax.cond` even inside `vmap`.
    """

    iteration: Int[Array, ""]
    num_iterations: Int[Array, ""]

    @property
    def progress(self) -> Float[Array, ""]:
        """The fraction of the run already done, in [0, 1] (for annealing schedules)."""
        return self.iteration.astype(jnp.float32) / jnp.maximum(self.num_iterations, 1).astype(jnp.float32)


class _InitOnly:
    """The class attribute of an agent's init-only keyword: its default, read from the class; read
    on an agent (which does not store it), the value the module it built holds
    (`AbstractAgent.init_only_value`), never the class default."""

    def __init__(self, name: str, default: Any):
        self.name, self.default = name, default

    def __get__(self, obj: Any, owner: Any = None) -> Any:
        return self.default if obj is None else obj.init_only_value(self.name, self.default)


def _compiled_init(init):
    compiled = eqx.filter_jit(batched_orthogonal(init))

    @functools.wraps(init)
    def wrapped(self, *args, **kwargs):
        return compiled(self, *args, **kwargs)

    wrapped._eqxrl_compiled = True
    return wrapped


class AbstractAgent(eqx.Module):
    """An RL algorithm: configuration (static structure + array hyperparameters) and pure methods.

    A concrete agent implements `init`, `train_iteration`, `act` and
    `steps_per_iteration`; `eqxrl.train`, `eqxrl.evaluate`, seed batches,
    sweeps (`eqxrl.stack`) and PBT then work for it with no further code.
    """

    env: eqx.AbstractVar[AbstractEnv]
    default_env: ClassVar[str] = "CartPole-v1"
    """The env the command line trains on when `--env` is not given."""
    default_total_steps: ClassVar[int] = 500_000
    """The env steps per seed `eqxrl train` runs when `--total-steps` is not given (read through
    `default_budget`): a budget at which the defaults learn `default_env`
    (benchmarks/defaults.py measures it for every built-in agent)."""
    retired: ClassVar[frozenset[str]] = frozenset()
    """Keywords an earlier eqxrl's agent took that set nothing (CrossQ's `tau`: it has no target
    network): a `config.json` that holds one still loads, without it."""
    aliases: ClassVar[dict[str, str]] = {}
    """`{keyword: path}`: init-only keywords whose number now lives in a module the agent stores
    (`{"per_alpha": "buffer.alpha"}`); `--set`, sweeps and PBT spaces take the keyword for the path."""
    presets: ClassVar[dict[str, Callable[[], dict[str, Any]]]] = {}
    """Named configurations, `{name: () -> {field: value}}`, for tasks the defaults do not serve
    (PPO's `"recurrent"`): `from_preset(name, env)`, `eqxrl train AGENT --preset NAME`."""

    def __init_subclass__(cls, **kwargs):
        """A subclass's `init` runs as one compiled program, its orthogonal weights drawn in one
        batch (`batched_orthogonal`). Called eagerly, an uncompiled `init` dispatched and
        compiled its operations one by one: TD3's first call took 7.7 s, compiled 3.0 s
        (benchmarks/results/init_compile.md). Inside a
        trace (`eqxrl.train`, `jax.jit`, `vmap`) it is traced inline as before.

        An init-only keyword's default (`buffer_size: InitVar[int] = 100_000`) becomes an
        `_InitOnly`: the dataclass reads the default from the class, and `agent.buffer_size` reads
        the module the keyword built (`init_only_value`), not the class default."""
        for name, annotation in cls.__dict__.get("__annotations__", {}).items():
            if isinstance(annotation, dataclasses.InitVar) and name in cls.__dict__:
                setattr(cls, name, _InitOnly(name, cls.__dict__[name]))
        super().__init_subclass__(**kwargs)
        init = cls.__dict__.get("init")
        if callable(init) and not getattr(init, "__isabstractmethod__", False) and not hasattr(init, "_eqxrl_compiled"):
            cls.init = _compiled_init(init)

    def __check_init__(self):
        # Every agent, built-in or a user's, checks its env's reset/step outputs against its
        # spaces once (abstractly: eqxrl.envs.check_env), so a wrong reward dtype is named
        # here instead of failing as a lax.scan carry mismatch deep in the first iteration.
        # A subclass's own check has already named an env that is no AbstractEnv.
        if isinstance(self.env, AbstractEnv):
            check_env(self.env)

    @abc.abstractmethod
    def init(self, key: Key) -> PyTree:
        """**Returns:** the initial training state (networks, optimizer state, env state, key)."""

    @abc.abstractmethod
    def train_iteration(self, state: PyTree, clock: Clock) -> tuple[PyTree, Metrics]:
        """One iteration: collect `steps_per_iteration` env steps and update.

        **Arguments:** the training `state` and the run's `clock`
        (`clock.progress` in [0, 1] drives annealing schedules).

        **Returns:** `(new_state, metrics)`, metrics a dict of scalars that
        includes `"env_steps"` and `"episode_return"` (mean over episodes finished
        in this iteration, NaN if none).
        """

    @abc.abstractmethod
    def act(self, state: PyTree, obs: PyTree, key: Key | None = None, deterministic: bool = False) -> Array:
        """**Returns:** actions for a batch of observations `(*batch, *obs_shape)`.

        With `deterministic=True` the policy's mode is used and `key` may be None.
        """

    def initial_carry(self, state: PyTree, batch_shape: tuple[int, ...] = ()) -> PyTree:
        """A recurrent policy's memory at the start of episodes, for observations of batch
        shape `batch_shape` (`act_with_carry` steps it). Default: None (no memory)."""
        return None

    def act_with_carry(
        self, state: PyTree, obs: PyTree, carry: PyTree, reset: Array, key: Key | None = None, deterministic: bool = False
    ) -> tuple[Array, PyTree]:
        """`act` for a policy with memory: `carry` (from `initial_carry`) is reset where
        `reset` (an episode's first observation) and stepped. **Returns:** `(actions, new
        carry)`. Default: `act`, with the carry passed through unchanged."""
        return self.act(state, obs, key, deterministic=deterministic), carry

    def noise_spec(self, state: PyTree, batch_shape: tuple[int, ...] = ()) -> PyTree:
        """The noise `act_from_noise` takes for observations of batch shape `batch_shape`: a
        `eqxrl.components.Noise` (or a dict of them) naming each array's shape and distribution.
        Default: a one-line ValueError (an agent whose sampling needs a PRNG key)."""
        raise ValueError(no_noise_sampler(self, "noise_spec"))

    def act_from_noise(self, state: PyTree, obs: PyTree, noise: PyTree) -> Array:
        """`act(deterministic=False)` with its randomness given instead of drawn from a key: a
        deterministic function of `noise` (as `noise_spec` describes it), with the distribution of
        `act`'s samples when the noise has its stated distribution. Default: a one-line ValueError."""
        raise ValueError(no_noise_sampler(self, "act_from_noise"))

    def act_with_carry_from_noise(
        self, state: PyTree, obs: PyTree, carry: PyTree, reset: Array, noise: PyTree
    ) -> tuple[Array, PyTree]:
        """`act_with_carry` sampling from given noise (`act_from_noise`). **Returns:** `(actions, new
        carry)`. Default: `act_from_noise`, with the carry passed through unchanged."""
        return self.act_from_noise(state, obs, noise), carry

    @property
    @abc.abstractmethod
    def steps_per_iteration(self) -> int:
        """Environment steps collected by one `train_iteration` (a static int)."""

    @property
    def layout(self) -> ObservationLayout:
        """How the agent stores `env`'s observations as flat vectors (a `Dict` observation's
        entries concatenated, its action mask last): `eqxrl.envs.ObservationLayout`."""
        return ObservationLayout.of(self.env.observation_space, self.env.action_space, type(self).__name__)

    @property
    def obs_shape(self) -> Any:
        """What a torso is built for: the shape of one observation of `env`, or a `Dict`
        observation's `((name, shape), ...)` entries (`ObservationLayout.torso_shape`)."""
        return self.layout.torso_shape

    @property
    def eval_env(self) -> AbstractEnv:
        """The unbatched environment `eqxrl.evaluate` runs the policy in (with the
        same action handling as in training)."""
        return self.env

    def report(self, state: PyTree, key: Any) -> dict[str, Any]:
        """Agent-specific results of a finished run, as data: `{name: value}` (DADS:
        `{"skills": SkillReport}`). The run floor writes each into the run directory
        (`eqxrl.runs.write_reports`: `NAME.json`, and `NAME.png` for a value whose type has a
        plot); an agent writes no file itself. Default: nothing (`{}`)."""
        return {}

    @classmethod
    def from_preset(cls, name: str, env: Any, **fields: Any) -> "AbstractAgent":
        """**Returns:** `cls(env, **preset, **fields)`: the named preset's field values
        (`cls.presets`), any of them overridden by `fields`."""
        if name not in cls.presets:
            known = ", ".join(repr(n) for n in cls.presets) or "none"
            raise ValueError(f"{cls.__name__}.from_preset(name) must be one of its presets ({known}), got {name!r}")
        return cls(env, **{**cls.presets[name](), **fields})

    def default_budget(self) -> int:
        """**Returns:** the command line's env-step budget per seed for this configuration
        when `--total-steps` is not given: `default_total_steps`, unless an agent's
        defaults adapt to its env (discrete SAC)."""
        return self.default_total_steps

    def init_only_value(self, name: str, default: Any) -> Any:
        """**Returns:** what an init-only keyword reads on this agent: the number at its `aliases`
        path (`per_alpha`: `buffer.alpha`, `buffer_size`: `buffer.capacity`), else its `default`.
        (`dataclasses.replace` passes it back to the constructor: it agrees with the module.)"""
        path = type(self).aliases.get(name)
        try:
            return default if path is None else get_path(self, path)
        except (AttributeError, IndexError):  # (a module without that number: a uniform buffer's alpha)
            return default

    @classmethod
    def keywords(cls) -> dict[str, dataclasses.Field]:
        """**Returns:** the constructor's keyword arguments besides `env`, by name, as the dataclass
        fields that declare them (defaults, types, converters): what the command line makes flags
        of and a run's `config.json` may hold. Default: the agent's own fields, and its init-only
        keywords (`dataclasses.InitVar`s: `buffer_size`, which builds the `buffer` it stores); an
        agent composed of another takes that one's too (IPPO: PPO's)."""
        stored = {f.name for f in dataclasses.fields(cls) if f.init}
        return {
            name: f for name, f in cls.__dataclass_fields__.items()
            if name != "env" and (name in stored or isinstance(f.type, dataclasses.InitVar))
        }  # fmt: skip

    def hyperparameters(self) -> dict[str, Array]:
        """**Returns:** the numeric hyperparameters (array leaves a sweep or PBT may change),
        by dotted path: the agent's own (`tau`) and those of the modules it holds, where each number
        lives (`critic.optimizer.learning_rate`, `loop.buffer.alpha`, `optimizer.learning_rate.init_value`,
        `actor.loss_terms.0.coef`): a plain walk of the leaves (`eqxrl.core.hyperparameter_paths`)."""
        return hyperparameter_paths(self)

    def config(self) -> dict[str, Any]:
        """**Returns:** a JSON-ready description: agent name, env name, every field but the
        env (modules as `{"class": "package.module:Name", <fields>}`, see `eqxrl.core.to_spec`)."""
        out: dict[str, Any] = {"agent": type(self).__name__, "env": self.env.name}
        for f in dataclasses.fields(self):
            if f.name == "env":
                continue
            out[f.name] = to_spec(getattr(self, f.name))
        return out


class AbstractRolloutAgent(AbstractAgent):
    """An agent that collects `rollout_length` steps from each of `num_envs` copies of `env` per
    iteration (PPO, PQN and the replay agents): the env-facing helpers they share, once.
    Observations are stored flat (`layout`); continuous actions leave the policy in [-1, 1]
    unless `eval_env` says otherwise."""

    num_envs: eqx.AbstractVar[int]
    rollout_length: eqx.AbstractVar[int]

    @property
    def steps_per_iteration(self) -> int:
        return self.num_envs * self.rollout_length

    @property
    def discrete(self) -> bool:
        """Whether the actions are discrete (`Discrete` or `MultiDiscrete`; `env` may be anything
        until a check has named it)."""
        return isinstance(self.env, AbstractEnv) and isinstance(self.env.action_space, (Discrete, MultiDiscrete))

    @property
    def obs_size(self) -> int:
        """The number of features of one observation (1 for a scalar; a `Dict` observation's
        entries together, its action mask left out)."""
        return self.layout.size

    @property
    def train_env(self) -> VectorEnv:
        """The batched, auto-resetting env training collects from: `eval_env`'s action handling."""
        return VectorEnv(EpisodeStatistics(AutoReset(self.eval_env)), self.num_envs)

    def flatten(self, obs: PyTree) -> Float[Array, "*batch obs"]:
        """Observations as the agent stores them: one flat vector each (`layout.flatten`)."""
        return self.layout.flatten(obs, type(self).__name__)

    def normalize(self, stats: Any, x: Array) -> Array:
        """Stored observations `x` normalised by `stats` (None: as they are), their mask left alone."""
        return self.layout.normalize(stats, x)


def hyperparameter_hint(agent: Any, name: str) -> str:
    """How to make `name` tunable, when it is a plain numeric field of `agent`
    (static: PBT, sweeps and `--tune` cannot change it); else "".

    **Returns:** e.g. `"; Reinforce.learning_rate is a plain float field: declare it
    `learning_rate: float = eqxrl.hyperparameter(0.001)` to tune or sweep it"`.
    """
    names = {f.name for f in dataclasses.fields(agent)} if dataclasses.is_dataclass(agent) else set()
    value = getattr(agent, name, None) if name in names else None
    if isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, (bool, np.bool_)):
        kind = type(value).__name__
        return (
            f"; {type(agent).__name__}.{name} is a plain {kind} field (static): declare it "
            f"`{name}: float = eqxrl.hyperparameter({value!r})` to tune or sweep it"
        )
    return ""


def flatten_obs(env: AbstractEnv, obs: Any, owner: str) -> Float[Array, "*batch obs"]:
    """Flatten observations of `env` (arrays `(*batch, *obs_shape)`, or dicts of them) to the
    float32 vectors `(*batch, stored_size)` an agent stores (`ObservationLayout.flatten`).

    Raises a ValueError naming `owner` when the trailing axes are not the env's observation shape.
    """
    return ObservationLayout.of(env.observation_space, env.action_space, owner).flatten(obs, owner)


def with_mask(dist: Any, mask: Array | None) -> Any:
    """**Returns:** the distribution `dist` (a `Categorical` or `MultiCategorical`) restricted to
    the legal actions of `mask` (True = legal; None: `dist` as it is)."""
    if mask is None:
        return dist
    if not isinstance(dist, (Categorical, MultiCategorical)):
        raise ValueError(f"an action mask needs a Categorical or MultiCategorical policy, got {type(dist).__name__}")
    mask = mask if dist.mask is None else dist.mask & mask
    if isinstance(dist, MultiCategorical):
        return MultiCategorical(dist.logits, dist.nvec, mask)
    return Categorical(dist.logits, mask)


def check_no_action_masks(agent: Any, hint: str = "", allowed: bool = False) -> None:
    """Raise a ValueError naming `agent`'s class when its env's observations carry an action
    mask (`eqxrl.envs.ACTION_MASK`): for the agents that do not honour one yet. With `allowed`
    (an agent that honours masks) only the layout's checks run: a mask of the wrong size or
    space, or on actions masks do not apply to (`Box`), is refused all the same."""
    layout = agent.layout
    if layout.mask_size and not allowed:
        name = type(agent).__name__
        raise ValueError(
            f"{name} does not take action masks, and env {agent.env.name!r} has them (its observations' "
            f"'action_mask' entry){hint}; PPO, DQN, discrete SAC and discrete MPO honour masks"
        )


def as_env(env: Any) -> Any:
    """Converter for the built-in agents' `env` field: an env name is built with
    `eqxrl.envs.make` (which checks it), an env is checked with `eqxrl.envs.check_env`."""
    if isinstance(env, str):
        from ..envs import make

        env = make(env)
    elif isinstance(env, AbstractEnv):
        check_env(env)
    return env
