"""What DADS's skills do: one episode of every skill (`SkillReport`) and a plot of
their descriptor trajectories, for `DADS.evaluate_skills` and `DADS.save_report`."""

import json
import os
import pathlib
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, Int

from ..core import Key, check_positive_int, figure, png_bytes
from ..envs import RescaleAction
from ._base import flatten_obs
from ._off_policy import AbstractOffPolicyAgent, OffPolicyState


class SkillReport(eqx.Module):
    """What each skill does: one episode per skill (and per seed, on a leading axis).

    - `env_return`: the env's (task) return, `(*seeds, skills)`.
    - `intrinsic_return`: the summed DADS reward under the current dynamics, `(*seeds, skills)`.
    - `descriptors`: the descriptor at every step, the start included, `(*seeds, skills, steps + 1, descriptor)`;
      after an episode ends it stays at its last value.
    - `lengths`: the episode lengths (at most `steps`), `(*seeds, skills)`.
    """

    env_return: Float[Array, "*seeds skills"]
    intrinsic_return: Float[Array, "*seeds skills"]
    descriptors: Float[Array, "*seeds skills steps descriptor"]
    lengths: Int[Array, "*seeds skills"]

    @property
    def final_descriptors(self) -> Float[Array, "*seeds skills descriptor"]:
        """The descriptor at the end of each skill's episode."""
        return self.descriptors[..., -1, :]

    def mean_pairwise_distance(self) -> Float[Array, "*seeds"]:
        """**Returns:** the mean Euclidean distance between the final descriptors of distinct skills."""
        final = self.final_descriptors
        diff = final[..., :, None, :] - final[..., None, :, :]
        dist = jnp.sqrt(jnp.sum(jnp.square(diff), axis=-1) + 1e-12)
        num = final.shape[-2]
        off = 1.0 - jnp.eye(num, dtype=jnp.float32)
        return jnp.sum(dist * off, axis=(-2, -1)) / jnp.float32(num * (num - 1))

    def max_distance_from_start(self) -> Float[Array, "*seeds"]:
        """**Returns:** the largest distance of any skill's descriptor from its episode's start."""
        diff = self.descriptors - self.descriptors[..., :1, :]
        return jnp.max(jnp.sqrt(jnp.sum(jnp.square(diff), axis=-1)), axis=(-2, -1))


def evaluate_skills(
    agent: AbstractOffPolicyAgent, state: OffPolicyState, key: Key, num_steps: int | None, deterministic: bool
) -> SkillReport:
    """`DADS.evaluate_skills` for a DADS `agent` (see there)."""
    if num_steps is None:
        num_steps = agent.env.max_episode_steps
        if num_steps is None:
            raise ValueError(f"DADS.evaluate_skills(num_steps) is required: env {agent.env.name!r} has no time limit")
    num_steps = check_positive_int("DADS.evaluate_skills", "num_steps", num_steps)
    if not isinstance(state, OffPolicyState) or state.env_steps.ndim > 1:
        raise ValueError(
            f"DADS.evaluate_skills(state) must be one run's state or a batch of seeds', "
            f"got {type(state).__name__}"
        )
    batched = state.env_steps.ndim == 1
    return _skill_rollouts(agent, state, key, num_steps, bool(deterministic), batched)


def save_skill_report(agent: AbstractOffPolicyAgent, state: OffPolicyState, key: Key, run_dir: Any) -> list[str]:
    """`DADS.save_report` for a DADS `agent`: `skills.png` and `skills.json` in `run_dir`.

    **Returns:** the names of the files written.
    """
    report = agent.evaluate_skills(state, key)
    run_dir = pathlib.Path(run_dir)
    plot_skill_trajectories(report, run_dir / "skills.png", title=f"DADS skills on {agent.env.name}")
    summary = {
        "env_return": np.asarray(report.env_return).tolist(),
        "intrinsic_return": np.asarray(report.intrinsic_return).tolist(),
        "final_descriptor": np.asarray(report.final_descriptors).tolist(),
        "mean_pairwise_distance": np.asarray(report.mean_pairwise_distance()).tolist(),
    }
    (run_dir / "skills.json").write_text(json.dumps(summary, indent=2) + "\n")
    return ["skills.png", "skills.json"]


def _skill_episode(
    agent: AbstractOffPolicyAgent,
    state: OffPolicyState,
    key: Key,
    skill: Int[Array, ""],
    num_steps: int,
    deterministic: bool,
) -> tuple[Array, Array, Array, Array]:
    """One episode of `skill`. **Returns:** `(env_return, intrinsic_return, descriptors, length)`."""
    env = agent.env
    stepper = RescaleAction(env)
    reset_key, key = jax.random.split(key)
    env_state, ts = env.reset_with_skill(reset_key, skill)
    obs = flatten_obs(env, ts.obs, "DADS")
    _, start, _ = agent.split(obs)
    zero = jnp.zeros((), jnp.float32)

    def body(carry, k):
        env_state, obs, alive, env_ret, int_ret, length = carry
        act_key, step_key = jax.random.split(k)
        action = agent.act(state, obs[None], act_key, deterministic=deterministic)[0]
        env_state, ts = stepper.step(step_key, env_state, action)
        next_obs = flatten_obs(env, ts.obs, "DADS")
        reward, _ = agent.intrinsic_reward(state.learner, obs, next_obs)
        env_ret = env_ret + jnp.where(alive, ts.reward, 0.0)
        int_ret = int_ret + jnp.where(alive, reward, 0.0)
        length = length + alive.astype(jnp.int32)
        next_obs = jnp.where(alive, next_obs, obs)
        alive = alive & ~ts.done
        _, desc, _ = agent.split(next_obs)
        return (env_state, next_obs, alive, env_ret, int_ret, length), desc

    carry = (env_state, obs, jnp.ones((), bool), zero, zero, jnp.zeros((), jnp.int32))
    (_, _, _, env_ret, int_ret, length), descs = jax.lax.scan(body, carry, jax.random.split(key, num_steps))
    return env_ret, int_ret, jnp.concatenate([start[None], descs], axis=0), length


@eqx.filter_jit
def _skill_rollouts(
    agent: AbstractOffPolicyAgent, state: OffPolicyState, key: Key, num_steps: int, deterministic: bool, batched: bool
) -> SkillReport:
    def one_run(state, key):
        skills = jnp.arange(agent.num_skills, dtype=jnp.int32)
        keys = jax.random.split(key, agent.num_skills)
        run = lambda k, z: _skill_episode(agent, state, k, z, num_steps, deterministic)  # noqa: E731
        env_ret, int_ret, descs, lengths = jax.vmap(run)(keys, skills)
        return SkillReport(env_ret, int_ret, descs, lengths)

    if batched:
        n = state.env_steps.shape[0]
        return jax.vmap(one_run)(state, jax.random.split(key, n))
    return one_run(state, key)


def plot_skill_trajectories(report: SkillReport, path: str | os.PathLike, *, title: str | None = None) -> None:
    """Draw each skill's descriptor trajectory (the first two descriptor dimensions; a
    1-D descriptor against time) in a PNG, one colour per skill, every seed of a batch.

    **Arguments:**

    - `report`: from `DADS.evaluate_skills` (one run or a batch of seeds).
    - `path`: the image file to write (`.png`).
    - `title`: the figure title.

    **Returns:** nothing.
    """
    from matplotlib import colormaps

    descs = np.asarray(report.descriptors, dtype=np.float64)
    if descs.ndim == 3:
        descs = descs[None]
    if descs.ndim != 4:
        raise ValueError(
            "plot_skill_trajectories(report) needs descriptors of shape (skills, steps, d) or "
            f"(seeds, skills, steps, d), got {descs.shape}"
        )
    num_seeds, num_skills, steps, dim = descs.shape
    fig = figure((5.6, 5.0) if dim > 1 else (6.4, 4.0))
    ax = fig.add_subplot()
    colors = colormaps["tab10" if num_skills <= 10 else "viridis"]
    for z in range(num_skills):
        color = colors(z if num_skills <= 10 else z / max(num_skills - 1, 1))
        for s in range(num_seeds):
            traj = descs[s, z]
            xs, ys = (traj[:, 0], traj[:, 1]) if dim > 1 else (np.arange(steps), traj[:, 0])
            ax.plot(xs, ys, color=color, alpha=0.8, linewidth=1.2, label=f"skill {z}" if s == 0 else None)
            ax.plot(xs[-1:], ys[-1:], marker="o", color=color, markersize=4)
        ax.plot(xs[:1], ys[:1], marker="x", color="black", markersize=5)
    if dim > 1:
        ax.set_xlabel("descriptor 0")
        ax.set_ylabel("descriptor 1")
        ax.set_aspect("equal", adjustable="datalim")
    else:
        ax.set_xlabel("step")
        ax.set_ylabel("descriptor")
    ax.grid(alpha=0.3)
    ax.legend(loc="best", fontsize="small")
    ax.set_title(title or f"DADS skills ({num_seeds} seed{'s' if num_seeds > 1 else ''})")
    pathlib.Path(path).write_bytes(png_bytes(fig))

