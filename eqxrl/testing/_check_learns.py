"""`check_learns_probes`: train briefly on each probe environment and compare what was
learned with the known answer."""

from collections.abc import Callable, Sequence
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array

from ..agents import PPO, AbstractAgent, AbstractOffPolicyAgent, stack
from ..core import replace_paths
from ..envs import AbstractEnv, Discrete
from ..loop import train
from . import probes as p
from ._common import as_key, fail, on_env

_CONTRACT = "the agent learns the probe's known answer"
PROBES = ("constant", "observation", "two_step", "action", "observation_action", "time_limit", "n_step")


def _flat(agent: Any, state: Any, obs: Any) -> Any:
    x = jnp.reshape(jnp.asarray(obs, jnp.float32), (obs.shape[0], -1))
    stats = getattr(state, "obs_stats", None)
    return x if stats is None else stats.normalize(x)


def default_value(agent: AbstractAgent, state: Any, obs: Any) -> Any:
    """The state-value estimate `V(obs)` of a built-in agent (PPO: its critic; DQN: the
    largest Q; DDPG, TD3, SAC: the critics' mean Q of the greedy action), shape `(batch,)`;
    None for other agents (pass `check_learns_probes(value=...)`)."""
    x = _flat(agent, state, obs)
    if isinstance(agent, PPO):
        return PPO.value(state, x)
    if isinstance(agent, AbstractOffPolicyAgent):
        learner = state.learner
        if hasattr(learner, "q"):
            return jnp.max(learner.q(x), axis=-1)
        if hasattr(learner, "critic"):
            if agent.discrete:
                q = jnp.max(learner.critic(x), axis=-1)
            else:
                q = learner.critic(x, agent.greedy(learner, x))
            return jnp.mean(q.reshape(-1, x.shape[0]), axis=0)
    return None


def _build(agent: Any, env: Any, gamma: float | None) -> AbstractAgent:
    built = on_env(agent, env)
    path = type(built).aliases.get("gamma", "gamma")  # (where the discount lives: `loop.gamma` on the replay agents)
    if gamma is not None and path in built.hyperparameters():
        built = replace_paths(built, {path: gamma})
    return built


class _OneOfTheProbes(AbstractEnv):
    """The probe `probes[index]`, chosen by an array leaf: agents built on it with different
    indices stack (`eqxrl.stack`), so every probe trains as a member of one program, compiled
    once, instead of one program per probe. Each member steps exactly as its probe does."""

    index: Array
    probes: tuple[p.AbstractProbe, ...]

    def reset(self, key):
        return jax.lax.switch(self.index, [probe.reset for probe in self.probes], key)

    def step(self, key, state, action):
        return jax.lax.switch(self.index, [probe.step for probe in self.probes], key, state, action)

    @property
    def observation_space(self):
        return self.probes[0].observation_space

    @property
    def action_space(self):
        return self.probes[0].action_space

    @property
    def name(self) -> str:
        return "probe"

    @property
    def max_episode_steps(self) -> int:
        return max(probe.max_episode_steps for probe in self.probes)  # (each probe ends its own episodes)


def _trained(agent: Any, envs: list, gammas: list, keys: list, total_steps: int) -> tuple[list, list]:
    """**Returns:** `(agents, states)`: the agent built on each probe and trained on it. As one
    stack of every probe when the built agents stack, else one run per probe."""
    probes = tuple(envs)
    stacked = [_build(agent, _OneOfTheProbes(jnp.asarray(i, jnp.int32), probes), g) for i, g in enumerate(gammas)]
    try:
        population = stack(stacked)
    except ValueError:  # (agents that differ in structure from probe to probe, e.g. built by a function of the env)
        built = [_build(agent, env, g) for env, g in zip(envs, gammas)]
        return built, [train(b, k, total_steps, progress=False)[0] for b, k in zip(built, keys)]
    states, _ = train(population, jnp.stack(keys), total_steps, progress=False)
    member = lambda i: jax.tree.map(lambda x: x[i] if eqx.is_array(x) else x, states)  # noqa: E731
    return stacked, [member(i) for i in range(len(envs))]


def _close(learned: float, want: float, atol: float, rtol: float) -> bool:
    return abs(learned - want) <= atol + rtol * abs(want)


def check_learns_probes(
    agent: AbstractAgent | Callable[[Any], AbstractAgent],
    *,
    total_steps: int = 8_192,
    key: Any = None,
    value: Callable[[Any, Any], Any] | None = None,
    probes: Sequence[str] = PROBES,
    gamma: float = 0.5,
    atol: float = 0.15,
    rtol: float = 0.1,
    action_tolerance: float = 0.2,
) -> dict[str, dict[str, float]]:
    """Train the agent for `total_steps` env steps on each probe of `eqxrl.testing.probes`
    (discrete or continuous actions as the agent's env) and compare what it learned with
    the known answer:

    | name | probe | checked |
    | --- | --- | --- |
    | `"constant"` | `ConstantReward` | `V(0) = 1` |
    | `"observation"` | `ObservationReward` | `V(+-1) = +-1` |
    | `"two_step"` | `TwoStepDiscounting` | `V(0) = gamma`, `V(1) = 1` |
    | `"action"` | `ActionReward` | the greedy action: 1 (continuous: 0.5) |
    | `"observation_action"` | `ObservationActionReward` | the greedy actions at `+1`, `-1` |
    | `"time_limit"` | `TimeLimitBootstrap` | `V(+1) = 1 / (1 - gamma)`, `V(-1) = 1` |
    | `"n_step"` | `DelayedReward` | `V(s_t) = gamma^(4 - t) * 4` for its 5 steps |

    The probes train as the members of one stack (`eqxrl.stack`, one program compiled, the
    probe chosen by an array leaf of the env) when the agents built on them stack, else one
    run after another; either way probe `i` trains with key `jax.random.fold_in(key, i)`.
    The value probes run with the agent's `gamma` hyperparameter set to `gamma` (0.5: a
    discount applied once or twice, or a window one step off, changes the answers by a
    factor of 2) and read the values through `value`; the action probes use
    `agent.act(..., deterministic=True)`.

    **Arguments:**

    - `agent`: an agent (rebuilt on each probe with `dataclasses.replace(agent, env=probe)`)
      or a function `env -> agent`. Configure it to learn fast: small networks, a higher
      learning rate, short warm-up.
    - `total_steps`, `key` (a PRNG key or an int seed; default seed 0).
    - `value`: `value(state, obs) -> V(obs)` for a batch of observations `(batch, 1)`; the
      built-in agents have one (`default_value`). Without one the value probes are refused.
    - `probes`: the names of the probes to run (default: all).
    - `gamma`, and the tolerances: a value passes within `atol + rtol * |answer|`, a
      continuous action within `action_tolerance`.

    **Returns:** `{probe name: {what: learned number}}`.

    **Raises:** `eqxrl.testing.ContractError` naming the probe, the learned and the
    expected numbers, and what a failure usually means.
    """
    unknown = [name for name in probes if name not in PROBES]
    if unknown:
        raise ValueError(f"check_learns_probes(probes) must name probes among {list(PROBES)}, got {unknown}")
    key = as_key(key)
    sample = agent if isinstance(agent, AbstractAgent) else None
    discrete = True if sample is None else isinstance(sample.env.action_space, Discrete)
    report: dict[str, dict[str, float]] = {}
    chosen = [_probe(name, discrete, gamma) for name in probes]
    gammas = [gamma if answers is not None else None for _, answers, _ in chosen]
    keys = [jax.random.fold_in(key, i) for i in range(len(chosen))]
    agents, states = _trained(agent, [env for env, _, _ in chosen], gammas, keys, total_steps)
    for name, (env, answers, meaning), built, state in zip(probes, chosen, agents, states):
        label = f"{type(built).__name__} on probe {type(env).__name__} ({name!r}, {total_steps} steps)"
        report[name] = {}
        if answers is not None:  # a value probe
            read = value if value is not None else (lambda s, o: default_value(built, s, o))
            obs = jnp.stack([o for o, _ in answers])
            learned = read(state, obs)
            if learned is None:
                raise ValueError(f"check_learns_probes(value) is needed for {type(built).__name__}: a function "
                                 "(state, obs) -> V(obs) (the value probes read the learned values through it)")  # fmt: skip
            learned = np.asarray(learned, np.float64).reshape(-1)
            for (o, want), got in zip(answers, learned):
                what = f"V({float(o[0]):+g})"
                report[name][what] = float(got)
                if not _close(float(got), want, atol, rtol):
                    means = meaning.get(what, "") if isinstance(meaning, dict) else meaning
                    raise fail(_CONTRACT, f"{label}: learned {what} = {got:.3f}, expected {want:.3f} (gamma = "
                               f"{gamma}); {means}")  # fmt: skip
        else:
            for o, want in _actions(name, discrete):
                got = np.asarray(built.act(state, jnp.asarray([o], jnp.float32), deterministic=True))[0]
                what = f"greedy action at {float(o[0]):+g}"
                got = float(np.reshape(got, -1)[0])
                report[name][what] = got
                ok = got == want if discrete else abs(got - want) <= action_tolerance
                if not ok:
                    raise fail(_CONTRACT, f"{label}: {what} = {got:.3g}, expected {want:g}; {meaning}")
    return report


def _probe(name: str, discrete: bool, gamma: float) -> tuple[Any, list | None, Any]:
    """**Returns:** `(env, [(obs, value)] or None for an action probe, what a failure means:
    one sentence, or one per value)`."""
    at = lambda x: jnp.asarray([x], jnp.float32)  # noqa: E731
    if name == "constant":
        return p.ConstantReward(discrete), [(at(0.0), 1.0)], "the value loss or its optimiser does not fit a constant"
    if name == "observation":
        return (p.ObservationReward(discrete), [(at(1.0), 1.0), (at(-1.0), -1.0)],
                "the critic does not see the observation (or the gradient does not reach it)")  # fmt: skip
    if name == "two_step":
        return (p.TwoStepDiscounting(discrete), [(at(0.0), gamma), (at(1.0), 1.0)],
                "the discount is applied wrongly (twice, or not at all), or the bootstrap reads the wrong state or "
                "a target network that is never updated")  # fmt: skip
    if name == "time_limit":
        return (p.TimeLimitBootstrap(discrete), [(at(1.0), 1.0 / (1.0 - gamma)), (at(-1.0), 1.0)],
                {"V(+1)": "truncation is treated as termination (the value is not bootstrapped through a time limit "
                 "from info['final_obs'])", "V(-1)": "the value bootstraps through termination"})  # fmt: skip
    if name == "n_step":
        env = p.DelayedReward(discrete)
        values = [(env.observation_at(t), gamma ** (env.delay - 1 - t) * env.reward) for t in range(env.delay)]
        return (env, values, "the n-step return is wrong: a window one step too long or short, the wrong "
                "bootstrap observation, or a discount applied twice")  # fmt: skip
    if name == "action":
        return p.ActionReward(discrete), None, "the policy does not follow the reward (policy gradient or greedy action)"
    return (p.ObservationActionReward(discrete), None,
            "the policy does not condition on the observation, or actions are paired with the wrong observations")  # fmt: skip


def _actions(name: str, discrete: bool) -> list[tuple[list[float], float]]:
    if name == "action":
        return [([0.0], 1.0 if discrete else 0.5)]
    return [([1.0], 1.0 if discrete else 0.5), ([-1.0], 0.0 if discrete else -0.5)]
