"""`check_action_masks`: an agent that takes action masks never takes an illegal action."""

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ..core import check_positive_int
from ..envs import innermost_state
from ..loop import train
from ._common import as_key, fail, on_env
from .probes import MaskedActions

_CONTRACT = "an agent that takes action masks never takes an illegal action"


def check_action_masks(
    agent: Any,
    key: Any = 0,
    *,
    total_steps: int = 4_000,
    num_seeds: int = 2,
    num_observations: int = 2_000,
    min_best: float = 0.8,
    factors: int = 1,
) -> dict[str, float]:
    """Train `agent` on `eqxrl.testing.probes.MaskedActions` (a random set of legal actions at
    every step; an illegal action pays more than any legal one) and check that it honours its
    masks: no illegal action in training (the probe counts them), none from `act` (sampled or
    greedy) on `num_observations` masked observations, and the greedy action is the best legal
    one on at least `min_best` of them (it learned from the masks, not around them).

    **Arguments:** `agent`: an agent class (built as `agent(env)`) or instance (its `env`
    replaced by the probe); `key`: an int or a JAX key; `total_steps` per seed; `num_seeds`
    seeds trained in one program; `factors`: 1 for a `Discrete` action, `k > 1` for the probe's
    `MultiDiscrete` action of `k` entries, each masked on its own (an agent with a factorised
    policy: PPO).

    **Returns:** `{"illegal_in_training": 0, "illegal_when_acting": 0, "best_legal": fraction}`.
    Raises a `ContractError` naming the failing part: a stale mask (the previous observation's),
    or masks ignored somewhere on the way to an action, shows up here.
    """
    for name, value in (("total_steps", total_steps), ("num_seeds", num_seeds), ("num_observations", num_observations), ("factors", factors)):
        check_positive_int("check_action_masks", name, value)
    if isinstance(min_best, bool) or not isinstance(min_best, (int, float)) or not 0 <= min_best <= 1:
        raise ValueError(f"check_action_masks(min_best) must be a fraction in [0, 1], got {min_best!r}")
    env = MaskedActions(factors=factors)
    built = on_env(agent, env)
    name = type(built).__name__
    key = as_key(key)
    train_key, mask_key, act_key = jax.random.split(key, 3)
    state, _ = train(built, jax.random.split(train_key, num_seeds), total_steps, progress=False)
    illegal = int(jnp.sum(innermost_state(state.env_state).illegal))
    if illegal:
        raise fail(_CONTRACT, f"{name} took {illegal} illegal actions while training on MaskedActions "
                   f"({num_seeds} seeds x {total_steps} steps): its collection ignores the masks, or acts on a stale one")  # fmt: skip
    masks = env.draw_masks(mask_key, (num_observations,))
    obs = env.observation(masks)
    best = []
    for seed in range(num_seeds):
        member = jax.tree.map(lambda x: x[seed], state)
        for how, actions in (
            ("greedy", built.act(member, obs, deterministic=True)),
            ("sampled", built.act(member, obs, jax.random.fold_in(act_key, seed))),
        ):
            legal = np.asarray(env.legal(masks, actions)).reshape(num_observations, -1).all(axis=1)
            if not np.all(legal):
                i = int(np.argmin(legal))
                raise fail(_CONTRACT, f"{name}.act ({how}, seed {seed}) chose the illegal action {np.asarray(actions[i]).tolist()} "
                           f"at the mask {np.asarray(masks[i]).tolist()}")  # fmt: skip
            if how == "greedy":
                best.append(float(jnp.mean(actions == env.best_action(masks))))
    if min(best) < min_best:
        raise fail("an agent that takes action masks learns the best legal action", f"{name} chose the best legal action on {min(best):.0%} of masked observations "
                   f"(at least {min_best:.0%} expected after {total_steps} steps; a random legal action: about 47%)")  # fmt: skip
    return {"illegal_in_training": 0.0, "illegal_when_acting": 0.0, "best_legal": min(best)}
