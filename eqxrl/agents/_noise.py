"""What the agents' noise-driven samplers share (`noise_spec`, `act_from_noise`): the noise of a
policy distribution over an action space, and epsilon-greedy exploration from given noise."""

from typing import Any

import jax.numpy as jnp
from jaxtyping import Array, Bool, Float, Int

from ..components.distributions import Categorical, Noise
from ..envs import Box, Discrete, MultiDiscrete


def no_noise_sampler(agent: Any, method: str) -> str:
    """The one-line error of an agent whose sampling cannot be driven by given noise."""
    name = type(agent).__name__
    return (
        f"{name}.{method}: {name} samples its actions from a PRNG key only, so its sampling policy cannot take its "
        "noise as an input (implement noise_spec and act_from_noise; export it deterministic, or as StableHLO with the key)"
    )


def policy_noise_spec(space: Any, batch_shape: tuple, owner: str) -> Noise:
    """**Returns:** the noise of one draw of a policy distribution over `space`'s actions for a batch
    of `batch_shape`: a `Categorical`'s over `Discrete(n)` (Gumbel `(*batch, n)`), a
    `MultiCategorical`'s over `MultiDiscrete(nvec)` (Gumbel `(*batch, len(nvec), max(nvec))`),
    a Gaussian's (`Normal`, `TanhNormal`) over a `Box` (standard normal `(*batch, *shape)`)."""
    batch = tuple(batch_shape)
    if isinstance(space, Discrete):
        return Noise(batch + (space.n,), "gumbel")
    if isinstance(space, MultiDiscrete):
        return Noise(batch + (len(space.nvec), max(space.nvec)), "gumbel")
    if isinstance(space, Box):
        return Noise(batch + tuple(space.shape), "normal")
    raise ValueError(f"{owner}: no noise-driven sampler for actions of {type(space).__name__}")


def epsilon_greedy_noise_spec(batch_shape: tuple, num_actions: int) -> dict[str, Noise]:
    """**Returns:** the noise of epsilon-greedy exploration: `"explore"`, uniform `(*batch,)` (explore
    where below epsilon), and `"action"`, Gumbel `(*batch, num_actions)` (the random action: the
    Gumbel-max of equal logits, uniform among the legal actions)."""
    batch = tuple(batch_shape)
    return {"action": Noise(batch + (num_actions,), "gumbel"), "explore": Noise(batch, "uniform")}


def epsilon_greedy_from_noise(
    greedy: Int[Array, "*batch"], epsilon: Float[Array, ""] | float, mask: Bool[Array, "*batch n"] | None,
    noise: dict[str, Array], num_actions: int, owner: str,
) -> Int[Array, "*batch"]:  # fmt: skip
    """**Returns:** `greedy` where `noise["explore"] >= epsilon`, else a uniform random action among
    the legal ones of `mask` (None: all), the Gumbel-max of `noise["action"]`."""
    spec = epsilon_greedy_noise_spec(tuple(greedy.shape), num_actions)
    if not isinstance(noise, dict) or set(noise) != set(spec):
        got = sorted(noise) if isinstance(noise, dict) else type(noise).__name__
        raise ValueError(f"{owner} must be a dict of noise arrays {sorted(spec)} (epsilon-greedy), got {got}")
    for name, s in spec.items():
        s.check(noise[name], f"{owner}[{name!r}]")
    random = Categorical(jnp.zeros(spec["action"].shape), mask).sample_from_noise(noise["action"])
    return jnp.where(noise["explore"] < epsilon, random, greedy)
