"""Every built-in single-agent agent on random structured spaces (hypothesis): on the observation
and action spaces it takes, with or without action masks, `init`, `train_iteration` and `act`
run and give actions of the action space, legal under the mask; on the others the agent is
refused when it is built, in one line that names it (docs/components/environments.md, "Which
agent takes what"). IPPO's multi-agent spaces are tested in test_ippo.py."""

import equinox as eqx
import hypothesis.strategies as hs
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, given, settings

from eqxrl.agents import DADS, DDPG, DQN, MPO, PPO, PQN, SAC, TD3, Clock, CrossQ
from eqxrl.envs import ACTION_MASK, AbstractEnv, Box, Dict, Discrete, MultiBinary, MultiDiscrete, TimeStep
from eqxrl.testing import strategies as st
from typecheck import no_runtime_typecheck

ACTION_SPACES = {
    "Discrete": Discrete(3),
    "MultiDiscrete": MultiDiscrete((3, 2)),
    "Box": Box(-1.0, 1.0, (2,)),
    "Box2D": Box(-1.0, 1.0, (2, 2)),
    "MultiBinary": MultiBinary(2),
}
SMALL_OFF = dict(num_envs=2, learning_starts=2, batch_size=4, buffer_size=32, hidden_sizes=(8,))
AGENTS = {
    PPO: dict(num_envs=2, rollout_length=4, num_minibatches=2, num_epochs=1, hidden_sizes=(8,)),
    DQN: SMALL_OFF,
    PQN: dict(num_envs=2, rollout_length=4, num_minibatches=2, num_epochs=1, hidden_sizes=(8,)),
    SAC: SMALL_OFF,
    TD3: SMALL_OFF,
    DDPG: SMALL_OFF,
    MPO: dict(SMALL_OFF, num_action_samples=4),
    DADS: dict(SMALL_OFF, num_skills=2, descriptor="observation"),
    CrossQ: dict(SMALL_OFF, critic_hidden_sizes=(8,)),
}


def takes(agent: type, action: str, masked: bool) -> bool:
    """The table of docs/components/environments.md: every agent takes any observation."""
    actions = {PPO: {"Discrete", "MultiDiscrete", "Box"}, DQN: {"Discrete"}, PQN: {"Discrete"}, SAC: {"Discrete", "Box"},
               MPO: {"Discrete", "Box"}}.get(agent, {"Box"})  # fmt: skip
    return action in actions and (not masked or action in ("Discrete", "MultiDiscrete"))


class _Held:
    """A space held in a static field by identity (a `Box` holds arrays: hashing them is refused,
    and as a pytree leaf its bounds would be traced, where real envs' bounds are constants)."""

    def __init__(self, space):
        self.space = space


class SpaceEnv(AbstractEnv):
    """Observations drawn from `obs_space` at every step (and random action masks, at least one
    legal choice per entry, under `ACTION_MASK` when `masked`), reward 1 for an action legal
    under the step's mask, episodes of 3 steps."""

    held_obs: _Held = eqx.field(static=True)
    held_action: _Held = eqx.field(static=True)
    masked: bool = eqx.field(static=True)

    @property
    def obs_space(self):
        return self.held_obs.space

    @property
    def action_space_(self):
        return self.held_action.space

    @property
    def observation_space(self):
        if not self.masked:
            return self.obs_space
        entries = dict(self.obs_space.spaces) if isinstance(self.obs_space, Dict) else {"obs": self.obs_space}
        return Dict({**entries, ACTION_MASK: MultiBinary(self._nvec_sum())})

    @property
    def action_space(self):
        return self.action_space_

    def _nvec(self) -> tuple[int, ...]:
        space = self.action_space_
        return (space.n,) if isinstance(space, Discrete) else tuple(space.nvec)

    def _nvec_sum(self) -> int:
        return sum(self._nvec()) if isinstance(self.action_space_, (Discrete, MultiDiscrete)) else 2

    def _obs(self, key):
        obs_key, mask_key = jax.random.split(key)
        obs = self.obs_space.sample(obs_key)
        if not self.masked:
            return obs
        parts = []
        for n, k in zip(self._nvec(), jax.random.split(mask_key, len(self._nvec()))):
            mask = jax.random.bernoulli(k, 0.5, (n,))
            parts.append(mask.at[0].set(mask[0] | ~jnp.any(mask)))
        entries = dict(obs) if isinstance(self.obs_space, Dict) else {"obs": obs}
        return {**entries, ACTION_MASK: jnp.concatenate(parts).astype(jnp.int32)}

    def reset(self, key):
        obs = self._obs(key)
        return (jnp.zeros((), jnp.int32), obs), TimeStep(obs, jnp.zeros(()), jnp.asarray(False), jnp.asarray(False), {})

    def step(self, key, state, action):
        t, _ = state
        obs = self._obs(key)
        done = t + 1 >= 3
        return (t + 1, obs), TimeStep(obs, jnp.ones(()), done, jnp.asarray(False), {})


def _legal(env: SpaceEnv, obs, actions) -> bool:
    mask = np.asarray(obs[ACTION_MASK]) > 0
    actions = np.asarray(actions).reshape(mask.shape[0], -1)
    start = 0
    for i, n in enumerate(env._nvec()):
        if not np.take_along_axis(mask[:, start : start + n], actions[:, i, None], axis=1).all():
            return False
        start += n
    return True


def _pair(agent: type, action: str):
    """CI runs every agent's refusals and PPO's, DQN's, PQN's and SAC's runs; TD3's, DDPG's, MPO's,
    DADS's and CrossQ's runs on the action spaces they take are in the exhaustive tier (tests/tiers.py)."""
    runs_here = agent in (PPO, DQN, PQN, SAC) or not takes(agent, action, False)
    marks = () if runs_here else pytest.mark.exhaustive
    return pytest.param(agent, action, marks=marks, id=f"{agent.__name__}-{action}")


@pytest.mark.slow
@pytest.mark.parametrize("agent, action", [_pair(a, x) for a in AGENTS for x in ACTION_SPACES])
# (No shrinking: every example compiles its programs, and a failure's example is small already. One example
# per agent and action space per run, as CI's time allows: each run draws new spaces.)
@settings(max_examples=1, deadline=None, phases=[Phase.explicit, Phase.reuse, Phase.generate],
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])  # fmt: skip
@given(obs_space=hs.one_of(st.dicts(max_entries=3, max_depth=2), st.boxes(max_dims=2)), masked=hs.booleans())
def test_agents_run_on_the_spaces_they_take_and_refuse_the_others(agent, action, obs_space, masked):
    masked = masked and action in ("Discrete", "MultiDiscrete")  # (a mask on other actions: test_observations)
    env = SpaceEnv(_Held(obs_space), _Held(ACTION_SPACES[action]), masked)
    if not takes(agent, action, masked):
        with no_runtime_typecheck(), pytest.raises(ValueError) as info:
            agent(env, **AGENTS[agent])
        message = str(info.value)
        assert "\n" not in message and agent.__name__ in message, message
        return
    built = agent(env, **AGENTS[agent])
    state = built.init(jax.random.key(0))
    step = eqx.filter_jit(lambda a, s, i: a.train_iteration(s, Clock(i, jnp.asarray(4, jnp.int32))))
    for i in range(3):  # (off-policy: past the warm-up, so the later iterations update)
        state, metrics = step(built, state, jnp.asarray(i, jnp.int32))
    # (Metrics of an update an iteration skips are NaN by design: TD3's delayed actor. The state has no
    # NaN; an infinite `max_grad_norm` in an optimizer's state means no clipping.)
    assert not any(np.isnan(np.asarray(v)).any() for v in jax.tree.leaves(eqx.filter(state, eqx.is_inexact_array)))
    # (Observations as the agent acts on them: DADS's carry its skill, through its eval_env.)
    obs = jax.vmap(built.eval_env.reset)(jax.random.split(jax.random.key(1), 5))[1].obs
    space = env.action_space
    for deterministic in (False, True):
        actions = built.act(state, obs, jax.random.key(2), deterministic=deterministic)
        assert actions.shape == (5, *space.shape)
        if isinstance(space, Box):  # (PPO's Gaussian samples are clipped into the bounds by its env wrapper)
            assert np.isfinite(np.asarray(actions)).all(), actions
        else:
            assert all(bool(space.contains(a)) for a in actions), actions
        if masked:
            assert _legal(env, obs, actions), (obs[ACTION_MASK], actions)
