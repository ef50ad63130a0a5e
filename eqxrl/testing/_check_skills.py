"""`check_learns_skills`: a skill-discovery agent (DADS, or a user's with the same two
methods) learns skills that are distinct and that its skill dynamics tell apart."""

from typing import Any

import jax
import numpy as np

from ..agents import AbstractAgent
from ..core import check_positive_int
from ..envs import make
from ..loop import train
from ._common import as_key, fail, on_env

_CONTRACT = "a skill-discovery agent learns distinct, predictable skills on the skill probe"
# The probe's answer: with nothing to gain but its intrinsic reward, a learned skill policy on
# Point2D (the action moves the point; the descriptor is its position) sends its skills to
# different places, and its skill dynamics predict each skill's moves better than the mixture's.
PROBE = "Point2D-v0"


def check_learns_skills(
    agent: Any,
    key: Any = 0,
    *,
    total_steps: int = 20_000,
    num_seeds: int = 3,
    min_passing: int = 2,
    min_spread: float = 10.0,
    min_intrinsic_reward: float = 0.3,
) -> dict[str, list[float]]:
    """Train `agent` on the skill probe, `eqxrl.envs.make("Point2D-v0")` (a point in a 20 x 20
    box moved by its action, its position the descriptor), and check what skill discovery
    must learn there, on at least `min_passing` of `num_seeds` seeds trained in one program:

    - the skills end apart: the mean pairwise distance of their final positions (one
      deterministic episode each, `agent.evaluate_skills`) is at least 3 times the untrained
      policy's and at least `min_spread`;
    - the skill dynamics tell them apart: the mean intrinsic reward (DADS: `log q(s'|s, z)`
      of the acting skill against the mixture of all skills) over the last tenth of training
      is above `min_intrinsic_reward` (0 when every skill predicts alike).

    A policy that does not see its skill, skill dynamics that ignore it, or an intrinsic reward
    that never reaches the policy fails here. The defaults hold for `DADS` with the settings
    `DADS("Point2D-v0", num_envs=8, rollout_length=2, batch_size=128, buffer_size=20_000,
    learning_starts=1_000, hidden_sizes=(64, 64), dynamics_hidden_sizes=(64, 64))` (spreads of
    2.8 to 10 times the untrained one and intrinsic rewards of 0.39 to 0.64 over 7 seeds).

    **Arguments:** `agent`: a class (built on the probe with those settings, which a DADS-like
    class must accept) or an instance (its `env` replaced by the probe); it needs
    `evaluate_skills(state, key)` returning a report with `mean_pairwise_distance()` (as DADS
    does) and an `"intrinsic_reward"` metric. `key`: an int or a JAX key.

    **Returns:** `{"spread_before", "spread_after", "intrinsic_reward"}`, one value per seed.
    Raises a `ContractError` that names the seeds and which half failed.
    """
    for name, value in (("total_steps", total_steps), ("num_seeds", num_seeds), ("min_passing", min_passing)):
        check_positive_int("check_learns_skills", name, value)
    if min_passing > num_seeds:
        raise ValueError(f"check_learns_skills(min_passing={min_passing}) must not exceed num_seeds={num_seeds}")
    for name, value in (("min_spread", min_spread), ("min_intrinsic_reward", min_intrinsic_reward)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not np.isfinite(value):
            raise ValueError(f"check_learns_skills({name}) must be a finite number, got {value!r}")
    is_class = isinstance(agent, type) and issubclass(agent, AbstractAgent)
    if not (is_class or isinstance(agent, AbstractAgent)):
        raise ValueError(f"check_learns_skills(agent) must be an eqxrl agent class or instance, got {agent!r}")
    if not callable(getattr(agent, "evaluate_skills", None)):
        raise ValueError(
            f"check_learns_skills(agent): {(agent if is_class else type(agent)).__name__} has no "
            "evaluate_skills(state, key) method (what DADS reports its skills with)"
        )
    env = make(PROBE)
    built = on_env(
        agent, env, num_envs=8, rollout_length=2, batch_size=128, buffer_size=20_000, learning_starts=1_000,
        hidden_sizes=(64, 64), dynamics_hidden_sizes=(64, 64),
    )  # fmt: skip
    name = type(built).__name__
    train_key, eval_key = jax.random.split(as_key(key))
    keys = jax.random.split(train_key, num_seeds)
    before = np.asarray(built.evaluate_skills(jax.vmap(built.init)(keys), eval_key).mean_pairwise_distance())
    states, metrics = train(built, keys, total_steps, progress=False)
    after = np.asarray(built.evaluate_skills(states, eval_key).mean_pairwise_distance())
    if "intrinsic_reward" not in metrics:
        raise fail(_CONTRACT, f"{name}'s metrics have no 'intrinsic_reward' (it has {sorted(metrics)})")
    rewards = np.asarray(metrics["intrinsic_reward"])
    tail = rewards[:, -max(1, rewards.shape[1] // 10) :]
    reward = np.array([np.nanmean(r) if np.isfinite(r).any() else np.nan for r in tail])
    spread_ok = (after >= 3 * before) & (after >= min_spread)
    reward_ok = reward > min_intrinsic_reward
    report = {"spread_before": before.tolist(), "spread_after": after.tolist(), "intrinsic_reward": reward.tolist()}
    if int(np.sum(spread_ok & reward_ok)) < min_passing:
        fmt = lambda xs: ", ".join(f"{x:.2f}" for x in xs)  # noqa: E731
        parts = []
        if int(np.sum(spread_ok)) < min_passing:
            parts.append(
                f"its skills end {fmt(after)} apart (untrained: {fmt(before)}; needs 3x that and >= {min_spread:g}): "
                "the skills do not reach the policy, or the reward does not reward telling them apart"
            )
        if int(np.sum(reward_ok)) < min_passing:
            parts.append(
                f"its intrinsic reward over the last tenth is {fmt(reward)} (needs > {min_intrinsic_reward:g}): the "
                "skill dynamics do not predict each skill's moves better than the mixture's"
            )
        if not parts:
            parts.append(f"no {min_passing} seeds pass both halves (spreads {fmt(after)}, rewards {fmt(reward)})")
        raise fail(_CONTRACT, f"{name} on {PROBE} after {total_steps} steps, on fewer than {min_passing} of "
                   f"{num_seeds} seeds: " + "; ".join(parts))  # fmt: skip
    return report
