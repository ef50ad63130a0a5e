"""Action distributions as Equinox modules (batched over any leading axes)."""

import abc
import math

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Bool, Float, Int

from ...core import Key
from ._noise import Noise

_LOG_2PI = math.log(2.0 * math.pi)


def _check_event_value(owner: str, value: Array, shape: tuple[int, ...]) -> None:
    """`value` for a distribution of batch-and-event `shape` (the last axis the event): the event
    size must match; a batch axis of `value` may be 1, and extra leading axes (samples) broadcast,
    but never give a batch axis a new size (`(8,)` against `(8, 1)` would broadcast to `(8, 8)`)."""
    got = tuple(np.shape(value))
    ok = len(got) >= 1 and got[-1] == shape[-1] and all(g in (1, s) for g, s in zip(got[-2::-1], shape[-2::-1]))
    if not ok:
        raise ValueError(
            f"{owner}.log_prob(value) must have shape {shape} (the distribution's batch and event shape; "
            f"size-1 and extra leading axes broadcast), got {got}"
        )


class AbstractDistribution(eqx.Module):
    """A batch of distributions over actions; every method works on all leading axes."""

    @abc.abstractmethod
    def sample(self, key: Key) -> Array:
        """**Returns:** one sample per distribution in the batch."""

    @abc.abstractmethod
    def log_prob(self, value: Array) -> Float[Array, "*batch"]:
        """**Returns:** the log-density (or log-mass) of `value`."""

    @abc.abstractmethod
    def entropy(self, key: Key | None = None) -> Float[Array, "*batch"]:
        """**Returns:** the entropy (exact, or a one-sample estimate where noted)."""

    @abc.abstractmethod
    def mode(self) -> Array:
        """**Returns:** the most likely action (used for deterministic evaluation)."""

    def sample_and_log_prob(self, key: Key) -> tuple[Array, Float[Array, "*batch"]]:
        """**Returns:** `(sample, log_prob(sample))`, fused where that is more stable."""
        value = self.sample(key)
        return value, self.log_prob(value)

    def noise_spec(self) -> Noise:
        """**Returns:** the noise `sample_from_noise` takes (its shape and distribution): what
        `sample(key)` draws, so that `sample(key) == sample_from_noise(noise_spec().draw(key))`.
        Default: a ValueError (a distribution that samples from a key only)."""
        raise ValueError(f"{type(self).__name__}.noise_spec: this distribution samples from a PRNG key only (no sample_from_noise)")

    def sample_from_noise(self, noise: Array) -> Array:
        """**Returns:** the sample that `noise` (as `noise_spec()` describes it) gives: a
        deterministic, reparameterised sampler for a program that draws the noise itself."""
        raise ValueError(f"{type(self).__name__}.sample_from_noise: this distribution samples from a PRNG key only")


class Categorical(AbstractDistribution):
    """A categorical distribution over `0, ..., n - 1` from unnormalised logits.

    With an action `mask` (True where an action is legal, at least one per distribution,
    broadcastable to the logits) the illegal actions have probability exactly 0: `sample`
    and `mode` never return one, `log_prob` is `-inf` for one, and `probs`, `entropy` and
    `kl_divergence` are those of the distribution over the legal actions (finite, with
    zero gradient to an illegal action's logit). `Categorical(zeros, mask).sample(key)` is a
    uniform draw among the legal actions.
    """

    logits: Float[Array, "*batch n"]
    mask: Bool[Array, "*#batch n"] | None = None

    def __check_init__(self):
        if self.mask is not None and np.shape(self.mask)[-1:] != np.shape(self.logits)[-1:]:
            raise ValueError(
                f"Categorical(mask) must have the logits' last axis ({np.shape(self.logits)[-1]} actions), "
                f"got shape {tuple(np.shape(self.mask))}"
            )

    def _masked_logits(self) -> Float[Array, "*batch n"]:
        if self.mask is None:
            return self.logits
        # The most negative float, not -inf: exp gives exactly 0 and no inf - inf = NaN anywhere.
        return jnp.where(self.mask, self.logits, jnp.finfo(self.logits.dtype).min)

    def _log_probs(self) -> Float[Array, "*batch n"]:
        return jax.nn.log_softmax(self._masked_logits(), axis=-1)

    def sample(self, key: Key) -> Int[Array, "*batch"]:
        return jax.random.categorical(key, self._masked_logits(), axis=-1).astype(jnp.int32)

    def noise_spec(self) -> Noise:
        """Gumbel noise, one per logit: `(*batch, n)`."""
        return Noise(tuple(self.logits.shape), "gumbel")

    def sample_from_noise(self, noise: Float[Array, "*batch n"]) -> Int[Array, "*batch"]:
        """The Gumbel-max trick: `argmax(logits + noise)` over the legal actions (what
        `jax.random.categorical` computes from its own Gumbel draw)."""
        self.noise_spec().check(noise, "Categorical.sample_from_noise(noise)")
        return jnp.argmax(self._masked_logits() + noise, axis=-1).astype(jnp.int32)

    def log_prob(self, value: Int[Array, "*batch"]) -> Float[Array, "*batch"]:
        """**Returns:** the log-mass of `value`, integer actions of exactly the logits' batch
        shape (a `(batch, 1)` column is rejected: it would broadcast to `(batch, batch)`);
        NaN for an action outside `0, ..., n - 1`, `-inf` for an illegal one."""
        batch = tuple(self.logits.shape[:-1])
        if tuple(np.shape(value)) != batch:
            raise ValueError(
                f"Categorical.log_prob(value) must have shape {batch} (the batch shape of the logits), "
                f"got {tuple(np.shape(value))}"
            )
        logp = self._log_probs()
        value = jnp.asarray(value).astype(jnp.int32)
        n = self.logits.shape[-1]
        # A one-hot select rather than a gather: the same number (one term and zeros), and its
        # gradient is elementwise (a gather's is a scatter-add, a kernel of its own on a GPU).
        one_hot = value[..., None] == jnp.arange(n)
        chosen = jnp.sum(jnp.where(one_hot, logp, 0.0), axis=-1)
        if self.mask is not None:
            legal = jnp.any(one_hot & self.mask, axis=-1)
            chosen = jnp.where(legal, chosen, -jnp.inf)
        return jnp.where((value >= 0) & (value < n), chosen, jnp.nan)  # an action out of range: NaN

    def entropy(self, key: Key | None = None) -> Float[Array, "*batch"]:
        logp = self._log_probs()
        terms = jnp.exp(logp) * logp
        if self.mask is not None:
            terms = jnp.where(self.mask, terms, 0.0)
        return -jnp.sum(terms, axis=-1)

    def mode(self) -> Int[Array, "*batch"]:
        return jnp.argmax(self._masked_logits(), axis=-1).astype(jnp.int32)

    @property
    def probs(self) -> Float[Array, "*batch n"]:
        return jax.nn.softmax(self._masked_logits(), axis=-1)


class MultiCategorical(AbstractDistribution):
    """Independent categoricals, one per entry of a `MultiDiscrete(nvec)` action: factor `i`
    chooses one of `0, ..., nvec[i] - 1`, its logits the `nvec[i]` entries of `logits`' last
    axis after those of the factors before it (`sum(nvec)` in all).

    Samples and modes are int32 vectors `(*batch, len(nvec))`; `log_prob` and `entropy` are
    sums over the factors, and `kl_divergence` of two is the sum of the factors' KLs. An action
    `mask` (`(*batch, sum(nvec))`, the factors' masks one after another, True where legal) masks
    each factor as `Categorical(mask)` does; a factor with no legal choice counts as all legal,
    so that no factor is ever sampled from an empty set.
    """

    logits: Float[Array, "*batch total"]
    nvec: tuple[int, ...] = eqx.field(static=True)
    mask: Bool[Array, "*#batch total"] | None = None

    def __init__(self, logits: Array, nvec: tuple[int, ...], mask: Array | None = None):
        nvec = tuple(int(n) for n in nvec)
        if not nvec or not all(n >= 1 for n in nvec):
            raise ValueError(f"MultiCategorical(nvec) must be a non-empty tuple of positive ints, got {nvec!r}")
        if np.shape(logits)[-1:] != (sum(nvec),):
            raise ValueError(
                f"MultiCategorical(logits) must have a last axis of sum(nvec) = {sum(nvec)}, got shape {tuple(np.shape(logits))}"
            )
        if mask is not None and np.shape(mask)[-1:] != (sum(nvec),):
            raise ValueError(
                f"MultiCategorical(mask) must have a last axis of sum(nvec) = {sum(nvec)}, got shape {tuple(np.shape(mask))}"
            )
        self.logits, self.nvec, self.mask = logits, nvec, mask

    def factors(self) -> Categorical:
        """**Returns:** the factors as one `Categorical` of batch shape `(*batch, len(nvec))` over
        `max(nvec)` choices (a factor's choices past its own `nvec[i]` masked out)."""
        width, starts = max(self.nvec), [sum(self.nvec[:i]) for i in range(len(self.nvec))]
        index = [[start + min(j, n - 1) for j in range(width)] for start, n in zip(starts, self.nvec)]
        valid = jnp.asarray([[j < n for j in range(width)] for n in self.nvec])
        index = jnp.asarray(index, jnp.int32)
        legal = valid if self.mask is None else valid & self.mask[..., index]
        legal = jnp.where(jnp.any(legal, axis=-1, keepdims=True), legal, valid)
        return Categorical(self.logits[..., index], legal)

    def sample(self, key: Key) -> Int[Array, "*batch k"]:
        return self.factors().sample(key)

    def noise_spec(self) -> Noise:
        """Gumbel noise for the factors' `Categorical`: `(*batch, len(nvec), max(nvec))`."""
        return self.factors().noise_spec()

    def sample_from_noise(self, noise: Float[Array, "*batch k m"]) -> Int[Array, "*batch k"]:
        return self.factors().sample_from_noise(noise)

    def log_prob(self, value: Int[Array, "*batch k"]) -> Float[Array, "*batch"]:
        """**Returns:** the log-mass of `value`, integer actions of shape `(*batch, len(nvec))`."""
        batch = tuple(self.logits.shape[:-1]) + (len(self.nvec),)
        if tuple(np.shape(value)) != batch:
            raise ValueError(
                f"MultiCategorical.log_prob(value) must have shape {batch} (the batch shape and one entry "
                f"per factor), got {tuple(np.shape(value))}"
            )
        return jnp.sum(self.factors().log_prob(value), axis=-1)

    def entropy(self, key: Key | None = None) -> Float[Array, "*batch"]:
        return jnp.sum(self.factors().entropy(), axis=-1)

    def mode(self) -> Int[Array, "*batch k"]:
        return self.factors().mode()


class Normal(AbstractDistribution):
    """A diagonal Gaussian over vectors (the last axis is the event)."""

    loc: Float[Array, "*batch d"]
    scale: Float[Array, "*batch d"]

    def sample(self, key: Key) -> Float[Array, "*batch d"]:
        return self.loc + self.scale * jax.random.normal(key, self.loc.shape, self.loc.dtype)

    def noise_spec(self) -> Noise:
        """Standard normal noise of the mean's shape `(*batch, d)`."""
        return Noise(tuple(self.loc.shape), "normal")

    def sample_from_noise(self, noise: Float[Array, "*batch d"]) -> Float[Array, "*batch d"]:
        """`loc + scale * noise`."""
        self.noise_spec().check(noise, "Normal.sample_from_noise(noise)")
        return self.loc + self.scale * noise

    def log_prob(self, value: Float[Array, "*batch d"]) -> Float[Array, "*batch"]:
        """**Returns:** the log-density of `value`, of shape `(*batch, d)` (size-1 batch axes and
        extra leading axes broadcast); any other shape raises a `ValueError`."""
        _check_event_value("Normal", value, tuple(jnp.broadcast_shapes(self.loc.shape, self.scale.shape)))
        z = (value - self.loc) / self.scale
        return jnp.sum(-0.5 * jnp.square(z) - jnp.log(self.scale) - 0.5 * _LOG_2PI, axis=-1)

    def entropy(self, key: Key | None = None) -> Float[Array, "*batch"]:
        return jnp.sum(0.5 + 0.5 * _LOG_2PI + jnp.log(self.scale), axis=-1)

    def mode(self) -> Float[Array, "*batch d"]:
        return self.loc


def _log1m_tanh_sq(u: Array) -> Array:
    # log(1 - tanh(u)^2) = 2 * (log 2 - u - softplus(-2u)), exact and finite for large |u|.
    return 2.0 * (math.log(2.0) - u - jax.nn.softplus(-2.0 * u))


class TanhNormal(AbstractDistribution):
    """A diagonal Gaussian squashed by `tanh` and rescaled onto `[low, high]`.

    `log_prob` includes the change-of-variables term in its numerically stable
    form. The entropy has no closed form: `entropy(key)` returns a one-sample
    estimate `-log_prob(sample)`.
    """

    loc: Float[Array, "*batch d"]
    scale: Float[Array, "*batch d"]
    low: Float[Array, "..."] = eqx.field(default=-1.0, converter=jnp.asarray)
    high: Float[Array, "..."] = eqx.field(default=1.0, converter=jnp.asarray)

    def _half_range(self) -> Array:
        return (self.high - self.low) / 2.0

    def _squash(self, u: Array) -> Array:
        return self.low + (jnp.tanh(u) + 1.0) * self._half_range()

    def _log_prob_pre(self, u: Array) -> Float[Array, "*batch"]:
        base = Normal(self.loc, self.scale).log_prob(u)
        correction = _log1m_tanh_sq(u) + jnp.log(jnp.broadcast_to(self._half_range(), u.shape))
        return base - jnp.sum(correction, axis=-1)

    def sample(self, key: Key) -> Float[Array, "*batch d"]:
        return self._squash(Normal(self.loc, self.scale).sample(key))

    def noise_spec(self) -> Noise:
        """Standard normal noise of the mean's shape `(*batch, d)` (the Gaussian's, squashed after)."""
        return Noise(tuple(self.loc.shape), "normal")

    def sample_from_noise(self, noise: Float[Array, "*batch d"]) -> Float[Array, "*batch d"]:
        """`low + (tanh(loc + scale * noise) + 1) * (high - low) / 2`."""
        self.noise_spec().check(noise, "TanhNormal.sample_from_noise(noise)")
        return self._squash(self.loc + self.scale * noise)

    def sample_and_log_prob(self, key: Key) -> tuple[Float[Array, "*batch d"], Float[Array, "*batch"]]:
        u = Normal(self.loc, self.scale).sample(key)
        return self._squash(u), self._log_prob_pre(u)

    def log_prob(self, value: Float[Array, "*batch d"]) -> Float[Array, "*batch"]:
        _check_event_value("TanhNormal", value, tuple(jnp.broadcast_shapes(self.loc.shape, self.scale.shape)))
        y = 2.0 * (value - self.low) / (self.high - self.low) - 1.0
        # Actions on the boundary (clipped, or float32 tanh saturation) would give atanh(+-1) = inf.
        y = jnp.clip(y, -1.0 + 1e-6, 1.0 - 1e-6)
        return self._log_prob_pre(jnp.arctanh(y))

    def entropy(self, key: Key | None = None) -> Float[Array, "*batch"]:
        if key is None:
            raise ValueError(
                "TanhNormal.entropy(key) needs a PRNG key: its entropy has no closed form "
                "and is estimated from one sample"
            )
        return -self.sample_and_log_prob(key)[1]

    def mode(self) -> Float[Array, "*batch d"]:
        return self._squash(self.loc)


def kl_divergence(p: AbstractDistribution, q: AbstractDistribution) -> Float[Array, "*batch"]:
    """`KL(p || q)` in closed form, per batch element, for two distributions of one kind.

    Categorical, MultiCategorical and Normal (diagonal) are exact; for TanhNormal it is the KL of the
    underlying Normals, which the (invertible) squashing leaves unchanged.
    """
    if type(p) is not type(q):
        raise ValueError(f"kl_divergence(p, q) needs two distributions of one kind, got {type(p).__name__} and {type(q).__name__}")
    if isinstance(p, Categorical):
        logp, logq = p._log_probs(), q._log_probs()
        terms = jnp.exp(logp) * (logp - logq)
        if p.mask is not None:  # (an action legal under p only: a huge, finite KL)
            terms = jnp.where(p.mask, terms, 0.0)
        return jnp.sum(terms, axis=-1)
    if isinstance(p, MultiCategorical):
        if p.nvec != q.nvec:
            raise ValueError(f"kl_divergence(p, q) needs two MultiCategorical of one nvec, got {p.nvec} and {q.nvec}")
        return jnp.sum(kl_divergence(p.factors(), q.factors()), axis=-1)
    if isinstance(p, (Normal, TanhNormal)):
        var_ratio = jnp.square(p.scale / q.scale)
        mahalanobis = jnp.square((p.loc - q.loc) / q.scale)
        return 0.5 * jnp.sum(var_ratio + mahalanobis - 1.0 - jnp.log(var_ratio), axis=-1)
    raise ValueError(f"kl_divergence has no closed form for {type(p).__name__}")
