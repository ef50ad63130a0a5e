"""Policy heads, value heads and Q heads: an MLP torso plus an output that means something."""

import math
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from ...core import Key, check_positive_int
from ..distributions import Categorical, MultiCategorical, Normal, TanhNormal
from ._mlp import Linear, ObsShape, as_obs_shape, check_hidden_layers, check_last_axis, check_obs_and_action, check_positive_ints, obs_size_of
from ._noisy import NoisyLinear, noisy_output
from ._torsos import AbstractTorso, Encoder, torso_or_mlp

Activation = str | Callable[[Array], Array]


class AbstractHead(eqx.Module):
    """A torso (`Encoder`) and an output layer whose outputs mean something: every head.

    A head declares `torso`, `out` and `obs_size` as fields, builds them in its `__init__` with
    `build_body` and reads its raw outputs with `body_outputs`, which checks the observation's
    last axis first."""

    torso: eqx.AbstractVar[Encoder]
    out: eqx.AbstractVar[Linear]
    obs_size: eqx.AbstractVar[int]

    def build_body(
        self,
        out_size: int,
        hidden_sizes: Sequence[int],
        activation: Activation,
        torso: AbstractTorso | None,
        key: Key,
        final_scale: float,
        obs_shape: ObsShape | None = None,
        in_shape: ObsShape | None = None,
        noisy: bool = False,
    ) -> None:
        """Set `torso` (the given spec, or the MLP of `hidden_sizes` and `activation`, over
        `obs_shape`, or over `in_shape` where the input is not the observation alone) and `out`
        (`out_size` outputs, orthogonal init with gain `final_scale`; with `noisy=True` a
        `NoisyLinear` of that shape from `fold_in(key, 1)`, Rainbow's noisy nets)."""
        owner = type(self).__name__
        if torso is None:
            hidden_sizes = check_hidden_layers(owner, hidden_sizes, activation)
        elif not isinstance(torso, AbstractTorso):
            raise ValueError(f"{owner}(torso) must be an eqxrl AbstractTorso (MLPTorso, CNNTorso, ...), got {torso!r}")
        if in_shape is None:
            in_shape = (self.obs_size,) if obs_shape is None else as_obs_shape(obs_shape)
            if obs_size_of(in_shape) != self.obs_size:
                raise ValueError(f"{owner}(obs_shape={in_shape}) must have obs_size={self.obs_size} elements")
        torso_key, out_key = jax.random.split(key)
        self.torso = torso_or_mlp(torso, hidden_sizes, activation).make(as_obs_shape(in_shape), key=torso_key)
        out = Linear(self.torso.features, out_size, key=out_key, scale=final_scale)
        self.out = noisy_output(owner, noisy, out, jax.random.fold_in(key, 1))

    def body_outputs(self, obs: Float[Array, "*batch obs"]) -> Float[Array, "*batch out"]:
        check_last_axis(obs, self.obs_size, "obs", type(self).__name__)
        return self.out(self.torso(obs))


def _bounds(low, high, size: int, owner: str) -> tuple[tuple[float, ...], tuple[float, ...]]:
    # Action bounds are constants of the network: static fields, so an optimizer
    # never trains them and stacking never batches them.
    lo = np.broadcast_to(np.asarray(low, np.float32), (size,))
    hi = np.broadcast_to(np.asarray(high, np.float32), (size,))
    if not (np.all(np.isfinite(lo)) and np.all(np.isfinite(hi)) and np.all(lo < hi)):
        raise ValueError(f"{owner}(low, high) must be finite with low < high, got low={lo}, high={hi}")
    return tuple(float(v) for v in lo), tuple(float(v) for v in hi)


class CategoricalHead(AbstractHead):
    """`obs -> Categorical(logits)` over `num_actions` discrete actions."""

    torso: Encoder
    out: Linear
    obs_size: int = eqx.field(static=True)
    num_actions: int = eqx.field(static=True)

    def __init__(
        self,
        obs_size: int,
        num_actions: int,
        hidden_sizes: Sequence[int] = (64, 64),
        activation: Activation = "tanh",
        *,
        key: Key,
        torso: AbstractTorso | None = None,
        obs_shape: ObsShape | None = None,
    ):
        """**Arguments:** `obs_size`, `num_actions`, torso `hidden_sizes` and
        `activation`, and a PRNG `key`. The output layer starts near uniform
        (orthogonal gain 0.01)."""
        self.obs_size = check_positive_int("CategoricalHead", "obs_size", obs_size)
        self.num_actions = check_positive_int("CategoricalHead", "num_actions", num_actions)
        self.build_body(self.num_actions, hidden_sizes, activation, torso, key, 0.01, obs_shape)

    def __call__(self, obs: Float[Array, "*batch obs"]) -> Categorical:
        return Categorical(self.body_outputs(obs))


class MultiCategoricalHead(AbstractHead):
    """`obs -> MultiCategorical(logits, nvec)`: a factorised categorical policy over a
    `MultiDiscrete(nvec)` action, one output per choice of every factor (`sum(nvec)`)."""

    torso: Encoder
    out: Linear
    obs_size: int = eqx.field(static=True)
    nvec: tuple[int, ...] = eqx.field(static=True)

    def __init__(
        self,
        obs_size: int,
        nvec: Sequence[int],
        hidden_sizes: Sequence[int] = (64, 64),
        activation: Activation = "tanh",
        *,
        key: Key,
        torso: AbstractTorso | None = None,
        obs_shape: ObsShape | None = None,
    ):
        """**Arguments:** as `CategoricalHead`, with `nvec` (the choices of each factor, positive
        ints) in place of `num_actions`."""
        self.obs_size = check_positive_int("MultiCategoricalHead", "obs_size", obs_size)
        self.nvec = check_positive_ints("MultiCategoricalHead", "nvec", nvec)
        self.build_body(sum(self.nvec), hidden_sizes, activation, torso, key, 0.01, obs_shape)

    def __call__(self, obs: Float[Array, "*batch obs"]) -> MultiCategorical:
        return MultiCategorical(self.body_outputs(obs), self.nvec)


class GaussianHead(AbstractHead):
    """`obs -> Normal(mean, std)`, with a state-dependent or a state-independent (learned vector) std."""

    torso: Encoder
    out: Linear
    log_std: Float[Array, " action_size"] | None
    obs_size: int = eqx.field(static=True)
    action_size: int = eqx.field(static=True)
    state_dependent_std: bool = eqx.field(static=True)
    min_std: float = eqx.field(static=True)
    _offset: float = eqx.field(static=True)

    def __init__(
        self,
        obs_size: int,
        action_size: int,
        hidden_sizes: Sequence[int] = (64, 64),
        activation: Activation = "tanh",
        *,
        key: Key,
        torso: AbstractTorso | None = None,
        obs_shape: ObsShape | None = None,
        state_dependent_std: bool = False,
        init_std: float = 1.0,
        min_std: float = 1e-3,
    ):
        """**Arguments:**

        - `obs_size`, `action_size`, `hidden_sizes`, `activation`, `key`: as for every head.
        - `state_dependent_std`: if true the torso also outputs the std (softplus);
          otherwise the std is one learned vector shared by all states.
        - `init_std`: the std at initialisation (> 0).
        - `min_std`: a floor on the std.
        """
        self.obs_size = check_positive_int("GaussianHead", "obs_size", obs_size)
        self.action_size = check_positive_int("GaussianHead", "action_size", action_size)
        if not init_std > 0:
            raise ValueError(f"GaussianHead(init_std) must be > 0, got {init_std!r}")
        self.state_dependent_std = bool(state_dependent_std)
        self.min_std = float(min_std)
        out = 2 * self.action_size if self.state_dependent_std else self.action_size
        self.build_body(out, hidden_sizes, activation, torso, key, 0.01, obs_shape)
        if self.state_dependent_std:
            self.log_std = None
            # softplus(raw + offset) = init_std at raw = 0
            self._offset = float(np.log(np.expm1(max(init_std - min_std, 1e-6))))
        else:
            self.log_std = jnp.full((self.action_size,), math.log(init_std), jnp.float32)
            self._offset = 0.0

    def __call__(self, obs: Float[Array, "*batch obs"]) -> Normal:
        out = self.body_outputs(obs)
        if self.log_std is None:
            mean, raw = jnp.split(out, 2, axis=-1)
            std = jax.nn.softplus(raw + self._offset) + self.min_std
        else:
            mean = out
            std = jnp.broadcast_to(jnp.maximum(jnp.exp(self.log_std), self.min_std), mean.shape)
        return Normal(mean, std)


class AbstractBoundedHead(AbstractHead):
    """The constructor of the heads whose outputs become actions in `[low, high]`
    (`TanhGaussianHead`, `DeterministicHead`): `_output_size` is their output layer's width,
    `action_size` unless a head overrides it (with keyword arguments of its own, which the
    constructor passes on)."""

    action_size: eqx.AbstractVar[int]
    low: eqx.AbstractVar[tuple[float, ...]]
    high: eqx.AbstractVar[tuple[float, ...]]

    def __init__(
        self,
        obs_size: int,
        action_size: int,
        hidden_sizes: Sequence[int] = (256, 256),
        activation: Activation = "relu",
        *,
        key: Key,
        torso: AbstractTorso | None = None,
        obs_shape: ObsShape | None = None,
        low: float | Array = -1.0,
        high: float | Array = 1.0,
        **outputs: Any,
    ):
        """**Arguments:** `obs_size`, `action_size`, torso `hidden_sizes` and `activation`, `key`,
        the action bounds `low`, `high`, and `outputs`, the keyword arguments of the head's
        `_output_size` (`TanhGaussianHead`'s log-std range)."""
        owner = type(self).__name__
        self.obs_size = check_positive_int(owner, "obs_size", obs_size)
        self.action_size = check_positive_int(owner, "action_size", action_size)
        self.build_body(self._output_size(**outputs), hidden_sizes, activation, torso, key, 0.01, obs_shape)
        self.low, self.high = _bounds(low, high, self.action_size, owner)

    def _output_size(self) -> int:
        """The output layer's width (called once `obs_size` and `action_size` are set; a head with
        fields of its own sets them here from its keyword arguments)."""
        return self.action_size


class TanhGaussianHead(AbstractBoundedHead):
    """`obs -> TanhNormal(mean, std)` on `[low, high]` (SAC's policy), state-dependent std. Its
    constructor is `DeterministicHead`'s plus `log_std_min=-5.0, log_std_max=2.0`, the range the
    log-std is squashed into (the keyword arguments of `_output_size`)."""

    torso: Encoder
    out: Linear
    low: tuple[float, ...] = eqx.field(static=True)
    high: tuple[float, ...] = eqx.field(static=True)
    obs_size: int = eqx.field(static=True)
    action_size: int = eqx.field(static=True)
    log_std_min: float = eqx.field(static=True)
    log_std_max: float = eqx.field(static=True)

    def _output_size(self, log_std_min: float = -5.0, log_std_max: float = 2.0) -> int:
        """The range `[log_std_min, log_std_max]` the log-std is squashed into; the outputs are the
        mean and the raw log-std of every action."""
        self.log_std_min, self.log_std_max = log_std_range("TanhGaussianHead", log_std_min, log_std_max)
        return 2 * self.action_size

    def __call__(self, obs: Float[Array, "*batch obs"]) -> TanhNormal:
        return tanh_gaussian(self.body_outputs(obs), self.log_std_min, self.log_std_max, self.low, self.high)


def log_std_range(owner: str, log_std_min: Any, log_std_max: Any) -> tuple[float, float]:
    """**Returns:** `(log_std_min, log_std_max)` as floats, a ValueError naming `owner` unless min < max."""
    if not log_std_min < log_std_max:
        raise ValueError(f"{owner} needs log_std_min < log_std_max, got {log_std_min} and {log_std_max}")
    return float(log_std_min), float(log_std_max)


def tanh_gaussian(outputs: Array, log_std_min: float, log_std_max: float, low: Any, high: Any) -> TanhNormal:
    """The `TanhNormal` on `[low, high]` of a policy network's `outputs` (the means, then the raw
    log-stds of every action), the log-std squashed smoothly into `[log_std_min, log_std_max]`."""
    mean, raw = jnp.split(outputs, 2, axis=-1)
    # Smoothly squash the log-std into its range (no dead gradient as with a hard clip).
    log_std = log_std_min + 0.5 * (log_std_max - log_std_min) * (jnp.tanh(raw) + 1.0)
    return TanhNormal(mean, jnp.exp(log_std), jnp.asarray(low), jnp.asarray(high))


class DeterministicHead(AbstractBoundedHead):
    """`obs -> action` in `[low, high]` through a `tanh` output (DDPG and TD3 actors)."""

    torso: Encoder
    out: Linear
    low: tuple[float, ...] = eqx.field(static=True)
    high: tuple[float, ...] = eqx.field(static=True)
    obs_size: int = eqx.field(static=True)
    action_size: int = eqx.field(static=True)

    def __call__(self, obs: Float[Array, "*batch obs"]) -> Float[Array, "*batch action_size"]:
        y = jnp.tanh(self.body_outputs(obs))
        low, high = jnp.asarray(self.low), jnp.asarray(self.high)
        return low + (y + 1.0) * (high - low) / 2.0


class ValueHead(AbstractHead):
    """`obs -> V(obs)`, one scalar per observation."""

    torso: Encoder
    out: Linear
    obs_size: int = eqx.field(static=True)

    def __init__(
        self,
        obs_size: int,
        hidden_sizes: Sequence[int] = (64, 64),
        activation: Activation = "tanh",
        *,
        key: Key,
        torso: AbstractTorso | None = None,
        obs_shape: ObsShape | None = None,
    ):
        """**Arguments:** `obs_size`, torso `hidden_sizes` and `activation`, `key`."""
        self.obs_size = check_positive_int("ValueHead", "obs_size", obs_size)
        self.build_body(1, hidden_sizes, activation, torso, key, 1.0, obs_shape)

    def __call__(self, obs: Float[Array, "*batch obs"]) -> Float[Array, "*batch"]:
        return self.body_outputs(obs)[..., 0]


class AbstractDiscreteQHead(AbstractHead):
    """The constructor of the heads that give `Q(obs, a)` for every one of `num_actions` discrete
    actions (`DiscreteQHead`, `DuelingQHead`, `CategoricalQHead`): `_output_size` is their output
    layer's width, `extra_outputs + num_actions` unless a head overrides it (with keyword arguments
    of its own, which the constructor passes on)."""

    num_actions: eqx.AbstractVar[int]
    extra_outputs: ClassVar[int] = 0

    def __init__(
        self,
        obs_size: int,
        num_actions: int,
        hidden_sizes: Sequence[int] = (64, 64),
        activation: Activation = "relu",
        *,
        key: Key,
        torso: AbstractTorso | None = None,
        obs_shape: ObsShape | None = None,
        noisy: bool = False,
        **outputs: Any,
    ):
        """**Arguments:** `obs_size`, `num_actions`, torso `hidden_sizes` and `activation`, `key`;
        `noisy=True` makes the output layer a `NoisyLinear` (Rainbow's noisy nets: draw its noise
        with `sample_noise`; called directly, the head uses the mean weights); `outputs`, the
        keyword arguments of the head's `_output_size` (none but `CategoricalQHead`'s support)."""
        owner = type(self).__name__
        self.obs_size = check_positive_int(owner, "obs_size", obs_size)
        self.num_actions = check_positive_int(owner, "num_actions", num_actions)
        self.build_body(self._output_size(**outputs), hidden_sizes, activation, torso, key, 1.0, obs_shape, noisy=noisy)

    def _output_size(self) -> int:
        """The output layer's width (called once `obs_size` and `num_actions` are set; a head with
        fields of its own sets them here from its keyword arguments)."""
        return self.extra_outputs + self.num_actions

    @property
    def noisy(self) -> bool:
        """Whether the output layer is a `NoisyLinear`."""
        return isinstance(self.out, NoisyLinear)


class DiscreteQHead(AbstractDiscreteQHead):
    """`obs -> Q(obs, a)` for every discrete action `a` (DQN)."""

    torso: Encoder
    out: Linear
    obs_size: int = eqx.field(static=True)
    num_actions: int = eqx.field(static=True)

    def __call__(self, obs: Float[Array, "*batch obs"]) -> Float[Array, "*batch num_actions"]:
        return self.body_outputs(obs)


class DuelingQHead(AbstractDiscreteQHead):
    """`obs -> Q(obs, a)` for every discrete action through a dueling output (Wang et al. 2016,
    one of Rainbow's parts): a value `V(obs)` and advantages `A(obs, a)` from the same torso,
    `Q = V + A - mean_a A`, so that `V` is identified (the advantages sum to zero). Its
    constructor is `DiscreteQHead`'s."""

    torso: Encoder
    out: Linear  # (1 + num_actions outputs: the value, then the advantages)
    obs_size: int = eqx.field(static=True)
    num_actions: int = eqx.field(static=True)
    extra_outputs: ClassVar[int] = 1

    def __call__(self, obs: Float[Array, "*batch obs"]) -> Float[Array, "*batch num_actions"]:
        out = self.body_outputs(obs)
        value, advantages = out[..., :1], out[..., 1:]
        return value + advantages - jnp.mean(advantages, axis=-1, keepdims=True)


class ContinuousQHead(AbstractHead):
    """`(obs, action) -> Q(obs, action)`, one scalar per pair (DDPG, TD3, SAC critics)."""

    torso: Encoder
    out: Linear
    obs_size: int = eqx.field(static=True)
    action_size: int = eqx.field(static=True)

    def __init__(
        self,
        obs_size: int,
        action_size: int,
        hidden_sizes: Sequence[int] = (256, 256),
        activation: Activation = "relu",
        *,
        key: Key,
        torso: AbstractTorso | None = None,
    ):
        """**Arguments:** `obs_size`, `action_size`, torso `hidden_sizes` and `activation`, `key`."""
        self.obs_size = check_positive_int("ContinuousQHead", "obs_size", obs_size)
        self.action_size = check_positive_int("ContinuousQHead", "action_size", action_size)
        # The critic's torso maps the concatenated flat (observation, action) vector.
        self.build_body(1, hidden_sizes, activation, torso, key, 1.0, in_shape=(self.obs_size + self.action_size,))

    def __call__(
        self, obs: Float[Array, "*batch obs"], action: Float[Array, "*batch action"]
    ) -> Float[Array, "*batch"]:
        check_obs_and_action(obs, action, self.obs_size, self.action_size, "ContinuousQHead")
        return self.out(self.torso(jnp.concatenate([obs, action], axis=-1)))[..., 0]
