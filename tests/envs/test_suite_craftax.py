"""The Craftax adapter (`make("craftax/<id>")`, `eqxrl.envs.CraftaxEnv`) against Craftax's own API.

Craftax's step compiles slowly (Classic: ~10 s per program on 2 CPU cores, full Craftax several
times that): what steps an env is in the slow tier."""

import importlib.util

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from eqxrl.core import foreign_promotion
from eqxrl.envs import AutoReset, Box, CraftaxEnv, Discrete, make, registered
from eqxrl.testing import check_env_steps

import suite_equivalence

needs_craftax = pytest.mark.skipif(importlib.util.find_spec("craftax") is None, reason="craftax is not installed")
CLASSIC = "craftax/Craftax-Classic-Symbolic-v1"


@needs_craftax
def test_classic_symbolic_spaces_and_limit():
    env = make(CLASSIC)
    assert isinstance(env, CraftaxEnv) and env.name == CLASSIC
    assert env.action_space == Discrete(17) and env.max_episode_steps == 10_000
    space = env.observation_space
    assert isinstance(space, Box) and space.shape == (1345,)
    assert float(space.low.min()) == 0.0 and float(space.high.max()) == 1.0
    assert make(CLASSIC, max_timesteps=20).max_episode_steps == 20


@needs_craftax
def test_bad_arguments_and_unknown_ids(monkeypatch):
    suite_equivalence.only_suite(monkeypatch, "craftax/")
    with pytest.raises(ValueError, match=r"make\('craftax/Craftax-Classic-Symbolic-v1'\) got unknown parameter\(s\) "
                                         r"\['max_steps'\]; its EnvParams fields are \[.*'max_timesteps'"):  # fmt: skip
        make(CLASSIC, max_steps=20)
    with pytest.raises(ValueError, match=r"unknown environment 'craftax/Craftax-Classic-v1'; did you mean .*"
                                         r"'craftax/Craftax-Classic-Symbolic-v1'"):  # fmt: skip
        make("craftax/Craftax-Classic-v1")
    with pytest.raises(ValueError, match=r"CraftaxEnv\(name\): unknown Craftax id 'Craftax-v1'"):
        CraftaxEnv("Craftax-v1")
    assert CLASSIC in registered() and "craftax/Craftax-Pixels-v1" in registered()


def test_missing_craftax_is_one_import_error_line(monkeypatch):
    match = r"^make\('craftax/Craftax-Symbolic-v1'\) needs the craftax suite: pip install 'eqxrl\[craftax\]'$"
    suite_equivalence.assert_missing_suite(monkeypatch, "craftax/Craftax-Symbolic-v1", match, ["craftax", "craftax.craftax_env"])


@needs_craftax
@pytest.mark.slow
@pytest.mark.exhaustive  # (40 s of CI's 2 cores, tests/tiers.py: the other suites' episode tests run in CI)
def test_classic_matches_craftax_auto_reset_env():
    """80 steps of Craftax-Classic with a 30-step limit through `AutoReset(make(...))` and through
    Craftax's own auto-resetting env (`step(key, state, action, params)`, which splits its key as
    `AutoReset` does): the same observations, rewards and dones, a done at the limit `truncated`;
    and a step from a state with no health left `terminated`."""
    from craftax.craftax_env import make_craftax_env_from_name

    env = make(CLASSIC, max_timesteps=30)
    stepper, suite = AutoReset(env), make_craftax_env_from_name("Craftax-Classic-Symbolic-v1", auto_reset=True)
    params = suite.default_params.replace(max_timesteps=30)

    def run(key):
        reset_key, key = jax.random.split(key)
        state, ts = stepper.reset(reset_key)
        obs, game = suite.reset(reset_key, params)

        def step(carry, key):
            state, game, count = carry
            action = jax.random.randint(jax.random.fold_in(key, 1), (), 0, 17, dtype=jnp.int32)
            state, ts = stepper.step(key, state, action)
            obs, game, reward, done, _ = suite.step(key, game, action, params)
            count = count + 1
            out = dict(ours=(ts.obs, ts.reward, ts.terminated, ts.truncated), suite=(obs, reward, done, count == 30))
            return (state, game, jnp.where(done, 0, count)), out

        _, out = jax.lax.scan(step, (state, game, jnp.zeros((), jnp.int32)), jax.random.split(key, 80))
        dying = state.replace(player_health=jnp.zeros_like(state.player_health))
        _, last = env.step(key, dying, jnp.int32(0))
        return (ts.obs, obs), out, (last.terminated, last.truncated)

    with foreign_promotion():  # (the suite's own code runs under standard promotion)
        first, out, dead = jax.device_get(jax.jit(run)(jax.random.key(0)))
    # (to an ulp: the light level, a cosine of the time, is fused into two different programs)
    np.testing.assert_allclose(first[0], first[1], rtol=1e-6, atol=1e-7)
    obs, reward, terminated, truncated = out["ours"]
    suite_obs, suite_reward, done, at_limit = out["suite"]
    np.testing.assert_allclose(obs, suite_obs, rtol=1e-6, atol=1e-7)
    np.testing.assert_array_equal(reward, suite_reward)
    np.testing.assert_array_equal(terminated | truncated, done)
    np.testing.assert_array_equal(truncated, done & at_limit)
    assert truncated.sum() >= 2
    assert bool(dead[0]) and not bool(dead[1])


@needs_craftax
@pytest.mark.slow
@pytest.mark.parametrize(
    "name",
    [
        # (Classic-Symbolic's stepping is checked against Craftax in the slow tier's equivalence test.)
        pytest.param("Craftax-Classic-Symbolic-v1", marks=pytest.mark.exhaustive),
        # Exhaustive tier only (`-m exhaustive`): 76-101 s each on 2 cores, and a fresh install's first
        # pixels env renders Craftax's texture caches for 1-3.5 minutes.
        *(pytest.param(n, marks=pytest.mark.exhaustive)
          for n in ("Craftax-Symbolic-v1", "Craftax-Classic-Pixels-v1", "Craftax-Pixels-v1")),  # fmt: skip
    ],
)
def test_check_env_steps(name):
    """Every Craftax id, with a 20-step limit so that episodes reach it (random play rarely dies)."""
    env = make("craftax/" + name, max_timesteps=20)
    check_env_steps(env, num_steps=50, num_envs=2)
    shapes = {"Craftax-Symbolic-v1": (8268,), "Craftax-Classic-Pixels-v1": (63, 63, 3), "Craftax-Pixels-v1": (130, 110, 3)}
    assert env.observation_space.shape == shapes.get(name, (1345,))
    assert env.action_space == Discrete(17 if "Classic" in name else 43)
