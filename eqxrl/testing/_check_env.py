"""`check_env_steps`: an environment stepped with many random actions, against its contracts."""

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ..envs import AbstractEnv, AutoReset, check_env
from ._common import as_key, fail, first_difference

_SPACES = "observations and rewards respect the spaces and dtypes"
_FLAGS = "termination and truncation are kept apart"
_RESET = "auto-reset keeps the true last observation in info['final_obs']"


def _obs_ok(space, obs) -> Any:
    """Whether `obs` (one array, or a dict for a `Dict` space) is in `space` with finite leaves."""
    finite = [jnp.all(jnp.isfinite(jnp.asarray(leaf, jnp.float32))) for leaf in jax.tree.leaves(obs)]
    return jnp.asarray(space.contains(obs)) & jnp.all(jnp.stack(finite))


def _rollout(env: AbstractEnv, key: Any, num_steps: int, num_envs: int) -> tuple[dict[str, Any], Any]:
    """Per step and env: whether the observation is valid, the reward, the flags, the episode
    length after the step, and whether `final_obs` is right."""
    stepper = env if "final_obs" in jax.eval_shape(env.step, *_first_step_args(env))[1].info else AutoReset(env)
    space = env.observation_space

    def one(key):
        reset_key, key = jax.random.split(key)
        state, ts = stepper.reset(reset_key)

        def step(carry, key):
            state, obs, length = carry
            action_key, step_key = jax.random.split(key)
            action = env.action_space.sample(action_key)
            state, ts = stepper.step(step_key, state, action)
            done = ts.terminated | ts.truncated
            final = ts.info["final_obs"]
            same = jax.tree.map(lambda a, b: jnp.all(a == b), final, ts.obs)
            final_ok = jnp.where(done, _obs_ok(space, final), jnp.all(jnp.stack(jax.tree.leaves(same))))
            length = length + 1
            out = dict(obs_ok=_obs_ok(space, ts.obs), reward=ts.reward, terminated=ts.terminated,
                       truncated=ts.truncated, length=length, final_ok=final_ok, action=action)  # fmt: skip
            return (state, ts.obs, jnp.where(done, 0, length)), out

        keys = jax.random.split(key, num_steps)
        _, out = jax.lax.scan(step, (state, ts.obs, jnp.zeros((), jnp.int32)), keys)
        return out, _obs_ok(space, ts.obs)

    return jax.jit(jax.vmap(one))(jax.random.split(key, num_envs))


def _first_step_args(env: AbstractEnv) -> tuple[Any, Any, Any]:
    key = jax.random.key(0)
    state, _ = jax.eval_shape(env.reset, key)
    action = jax.eval_shape(env.action_space.sample, key)
    return key, state, action


def _first(mask: np.ndarray) -> tuple[int, int]:
    env_index, step = np.argwhere(mask)[np.argmin(np.argwhere(mask)[:, 1])]
    return int(env_index), int(step)


def check_env_steps(
    env: Any, *, key: Any = None, num_steps: int = 1_000, num_envs: int = 4, ends_at_limit: bool = False
) -> None:
    """Step `num_envs` copies of `env` `num_steps` times with uniformly random actions
    (auto-resetting with `eqxrl.envs.AutoReset`, unless the env's own `info` already holds
    `"final_obs"`) and check:

    - `reset` and `step` are pure: the same key and state give the same outputs;
    - every observation (first ones too) lies in `observation_space` and is finite, every
      reward is a finite float32 scalar, `terminated` and `truncated` are bool scalars;
    - termination and truncation are kept apart: no episode runs longer than
      `max_episode_steps`, and when episodes reach that limit without terminating, they
      end `truncated`, never `terminated` (a time limit reported as termination would stop
      every agent's bootstrap there), unless `ends_at_limit=True` (an env whose episodes
      terminate by design after `max_episode_steps` steps, such as most probes);
    - `info["final_obs"]` is the observation on steps that do not end an episode and a
      valid observation on steps that do.

    (`eqxrl.envs.check_env`, the abstract shape check every agent runs, runs first.)

    **Arguments:** `env`; `key` (a PRNG key or an int seed; default seed 0); `num_steps`;
    `num_envs`; `ends_at_limit`.

    **Raises:** `eqxrl.testing.ContractError` naming the contract and the first env copy
    and step that broke it.
    """
    if not isinstance(env, AbstractEnv):
        raise ValueError(f"check_env_steps(env) must be an eqxrl AbstractEnv, got {type(env).__name__}")
    for name, value in (("num_steps", num_steps), ("num_envs", num_envs)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"check_env_steps({name}) must be an int >= 1, got {value!r}")
    check_env(env)
    key = as_key(key)
    label = env.name

    reset_key, step_key, action_key, roll_key = jax.random.split(key, 4)
    state_a, ts_a = env.reset(reset_key)
    state_b, ts_b = env.reset(reset_key)
    if (gap := first_difference((state_a, ts_a), (state_b, ts_b), rtol=0.0, atol=0.0)) is not None:
        raise fail("reset and step are pure functions of their key and state", f"{label}: two reset(key) calls differ at {gap}")
    action = env.action_space.sample(action_key)
    one = env.step(step_key, state_a, action)
    two = env.step(step_key, state_a, action)
    if (gap := first_difference(one, two, rtol=0.0, atol=0.0)) is not None:
        raise fail("reset and step are pure functions of their key and state",
                   f"{label}: two step(key, state, action) calls differ at {gap}")  # fmt: skip
    ts = one[1]
    for flag in ("terminated", "truncated"):
        value = getattr(ts, flag)
        if jnp.shape(value) != () or jnp.result_type(value) != jnp.bool_:
            raise fail(_SPACES, f"{label}: step's {flag} must be a bool scalar, got {jnp.result_type(value)}{list(jnp.shape(value))}")
    if jnp.shape(ts.reward) != () or jnp.result_type(ts.reward) != jnp.float32:
        raise fail(_SPACES, f"{label}: step's reward must be a float32 scalar, got {jnp.result_type(ts.reward)}{list(jnp.shape(ts.reward))}")

    out, first_ok = _rollout(env, roll_key, num_steps, num_envs)
    out = jax.tree.map(np.asarray, out)
    where = lambda e, t: f"{label}, env copy {e}, step {t} (action {out['action'][e, t].tolist()!r})"  # noqa: E731
    if not np.all(np.asarray(first_ok)):
        raise fail(_SPACES, f"{label}: a first observation from reset is outside {env.observation_space!r} or not finite")
    if not out["obs_ok"].all():
        e, t = _first(~out["obs_ok"])
        raise fail(_SPACES, f"{where(e, t)}: the observation is outside {env.observation_space!r} or not finite")
    if not np.isfinite(out["reward"]).all():
        e, t = _first(~np.isfinite(out["reward"]))
        raise fail(_SPACES, f"{where(e, t)}: the reward is {out['reward'][e, t]!r}")
    limit = env.max_episode_steps
    if limit is not None:
        too_long = out["length"] > limit
        if too_long.any():
            e, t = _first(too_long)
            raise fail(_FLAGS, f"{where(e, t)}: the episode is {out['length'][e, t]} steps long, "
                       f"past max_episode_steps = {limit} without being truncated")  # fmt: skip
        at_limit = out["length"] == limit
        cut = at_limit & (out["terminated"] | out["truncated"])
        if not ends_at_limit and cut.any() and not (out["truncated"] & at_limit).any():
            e, t = _first(cut)
            raise fail(_FLAGS, f"{where(e, t)}: every episode that reaches max_episode_steps = {limit} ends "
                       "terminated, none truncated: the time limit is reported as termination")  # fmt: skip
    if not out["final_ok"].all():
        e, t = _first(~out["final_ok"])
        done = bool(out["terminated"][e, t] or out["truncated"][e, t])
        detail = "is outside the observation space" if done else "differs from the observation on a step that ends no episode"
        raise fail(_RESET, f"{where(e, t)}: info['final_obs'] {detail}")
