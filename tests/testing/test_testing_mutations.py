"""Seeded bugs: each test plants one classic silent RL bug in the tutorial's agent (A2C) or a
built-in agent (by replacing a name the agent looks up, or by subclassing: never by editing
eqxrl) and shows that the `eqxrl.testing` kit fails with a message that points at it. The
correct code passes the same checks in test_testing_agents.py (`*_learns_every_probe`,
`test_every_built_in_agent_passes_check_agent`) and below.

| seeded bug | agent | caught by |
| --- | --- | --- |
| truncation treated as termination | A2C, DQN | check_learns_probes, probe "time_limit" |
| discount applied twice | A2C | check_learns_probes, probe "two_step" |
| n-step window one step too long | DQN (n_step=3) | check_learns_probes, probe "n_step" |
| PER importance weights ignored | DQN (prioritized) | check_agent, importance-weight contract |
| target network never updated | DQN | check_learns_probes, probe "two_step" |
| advantages not normalised though the flag says so | PPO | check_agent(flags=("normalize_advantages",)) |
| a stale action mask (the policy acts on the step before's) | PPO | check_action_masks (illegal actions in training) |
| action masks ignored (greedy action, target max) | DQN | check_action_masks |
| a MultiDiscrete action masked on its first entry only | PPO | check_action_masks(factors=2) |
| action masks ignored (the discrete policy's sampled and greedy actions) | MPO | check_action_masks |
| the policy does not see its skill | DADS | check_learns_skills (skills end together, intrinsic reward ~0) |
"""

import importlib

import equinox as eqx
import jax
import jax.numpy as jnp
import pytest

import eqxrl
from eqxrl.agents import DADS, DQN, MPO, PPO, SAC
from eqxrl.components import NStepTransition, NStepWindow, Sample
from eqxrl.testing import ContractError, check_action_masks, check_agent, check_learns_probes, check_learns_skills
from test_testing_agents import PROBE_A2C, PROBE_DQN, TINY_OFF, TINY_PPO, a2c_value
from tutorial_agent import load_tutorial_agent
from typecheck import no_runtime_typecheck

dqn_module = importlib.import_module("eqxrl.agents._dqn")  # (private: a test replaces a name where DQN looks up `polyak`)
ppo_module = importlib.import_module("eqxrl.agents._ppo")  # (private: a test replaces a name where PPO looks up `normalize_advantages`)
A2C_STEPS, DQN_STEPS = 128 * 200, 16 * 400


@pytest.fixture(autouse=True)
def _fresh_programs():
    """No program traced before a bug was seeded (or after) is reused: JAX caches traces by
    function and arguments, not by the globals a function read."""
    jax.clear_caches()
    yield
    jax.clear_caches()


def _a2c_with(gae):
    """The tutorial's A2C, its `gae` replaced by `gae` (its own namespace: other tests keep theirs)."""
    namespace = load_tutorial_agent()
    namespace["gae"] = gae
    return namespace["A2C"](eqxrl.envs.make("CartPole-v1"), **PROBE_A2C)


# ----------------------------------------------------------------------- truncation as termination
@pytest.mark.slow
def test_a2c_truncation_treated_as_termination_is_caught():
    real = eqxrl.components.gae

    def gae(reward, values, next_values, terminated, truncated, gamma, lam):
        return real(reward, values, next_values, terminated | truncated, jnp.zeros_like(truncated), gamma, lam)

    with pytest.raises(ContractError, match=r"A2C on probe TimeLimitBootstrap .*learned V\(\+1\) = .*expected 2\.000.*"
                       r"truncation is treated as termination \(the value is not bootstrapped through a time limit"):  # fmt: skip
        check_learns_probes(_a2c_with(gae), total_steps=A2C_STEPS, value=a2c_value, probes=("time_limit",))


@pytest.mark.slow
def test_dqn_truncation_treated_as_termination_is_caught(monkeypatch):
    real = NStepWindow.push

    def push(self, obs, action, reward, terminated, truncated, next_obs):
        return real(self, obs, action, reward, terminated | truncated, jnp.zeros_like(truncated), next_obs)

    monkeypatch.setattr(NStepWindow, "push", push)
    with pytest.raises(ContractError, match=r"DQN on probe TimeLimitBootstrap .*learned V\(\+1\) = .*expected 2\.000.*"
                       r"truncation is treated as termination \(the value is not bootstrapped through a time limit"):  # fmt: skip
        check_learns_probes(DQN("CartPole-v1", **PROBE_DQN), total_steps=DQN_STEPS, probes=("time_limit",))


# ----------------------------------------------------------------------- discounting
@pytest.mark.slow
def test_a2c_discount_applied_twice_is_caught():
    real = eqxrl.components.gae

    def gae(reward, values, next_values, terminated, truncated, gamma, lam):
        return real(reward, values, gamma * next_values, terminated, truncated, gamma, lam)

    with pytest.raises(ContractError, match=r"A2C on probe TwoStepDiscounting .*learned V\(\+0\) = .*expected 0\.500 "
                       r"\(gamma = 0\.5\); the discount is applied wrongly"):  # fmt: skip
        check_learns_probes(_a2c_with(gae), total_steps=A2C_STEPS, value=a2c_value, probes=("two_step",))


@pytest.mark.slow
def test_dqn_n_step_window_off_by_one_is_caught(monkeypatch):
    real = NStepTransition.reward_and_discount

    def reward_and_discount(self, gamma):
        # The window counted one step more than it took: gamma^(m + 1) on the bootstrap.
        return real(eqx.tree_at(lambda t: t.steps, self, self.steps + 1), gamma)

    monkeypatch.setattr(NStepTransition, "reward_and_discount", reward_and_discount)
    with pytest.raises(ContractError, match=r"DQN on probe DelayedReward .*expected .*the n-step return is wrong"):
        check_learns_probes(DQN("CartPole-v1", **PROBE_DQN, n_step=3), total_steps=DQN_STEPS, probes=("n_step",))


# ----------------------------------------------------------------------- target network
@pytest.mark.slow
def test_dqn_target_network_never_updated_is_caught(monkeypatch):
    monkeypatch.setattr(dqn_module, "polyak", lambda online, target, tau: target)
    with pytest.raises(ContractError, match=r"DQN on probe TwoStepDiscounting .*learned V\(\+0\) = .*expected 0\.500.*"
                       r"a target network that is never updated"):  # fmt: skip
        check_learns_probes(DQN("CartPole-v1", **PROBE_DQN), total_steps=DQN_STEPS, probes=("two_step",))


# ----------------------------------------------------------------------- fast tier: check_agent
class UnweightedDQN(DQN):
    """DQN whose update never sees the importance weights (all ones)."""

    def update(self, learner, batch, key, updates, progress):
        ones = Sample(batch.data, batch.indices, jnp.ones_like(batch.weights))
        return super().update(learner, ones, key, updates, progress)


@pytest.mark.slow
def test_dqn_ignoring_per_weights_is_caught():
    agent = UnweightedDQN("CartPole-v1", **TINY_OFF, prioritized=True)
    with pytest.raises(ContractError, match=r"updates use the replay buffer's importance weights: UnweightedDQN trained "
                       r"\d+ steps gives the same state when every Sample.weights is multiplied"):  # fmt: skip
        check_agent(agent)


@pytest.mark.slow
def test_ppo_advantages_not_normalised_is_caught(monkeypatch):
    monkeypatch.setattr(ppo_module, "normalize_advantages", lambda advantages: advantages)
    with pytest.raises(ContractError, match=r"PPO\(normalize_advantages\) takes effect: 16 env steps give the same state "
                       r"with normalize_advantages=True and normalize_advantages=False"):  # fmt: skip
        check_agent(PPO("CartPole-v1", **TINY_PPO), flags=("normalize_advantages",))


@pytest.mark.slow
def test_ppo_normalising_its_advantages_passes():
    check_agent(PPO("CartPole-v1", **TINY_PPO), flags=("normalize_advantages",))


# ----------------------------------------------------------------------- stale or ignored action masks
class _StaleState(eqx.Module):
    inner: object  # (the name eqxrl.envs.innermost_state follows)
    mask: jax.Array


class _StaleMask(eqxrl.envs.AbstractWrapper):
    """The seeded bug, in an agent's collection pipeline: the policy is handed each observation
    with the action mask of the step before (the env still judges actions by the current one)."""

    env: eqxrl.envs.AbstractEnv

    def reset(self, key):
        state, ts = self.env.reset(key)
        return _StaleState(state, ts.obs["action_mask"]), ts

    def step(self, key, state, action):
        inner, ts = self.env.step(key, state.inner, action)
        fresh = ts.obs["action_mask"]
        return _StaleState(inner, fresh), eqx.tree_at(lambda t: t.obs["action_mask"], ts, state.mask)


class _PPOWithStaleMasks(PPO):
    @property
    def train_env(self):
        env = eqxrl.envs.VectorEnv(eqxrl.envs.EpisodeStatistics(eqxrl.envs.AutoReset(_StaleMask(self.eval_env))), self.num_envs)
        return env


class _DQNIgnoringMasks(DQN):
    def q_values(self, q, obs):
        return q(self.layout.split(obs)[0])  # the bug: no mask on the greedy action or the target's max


class _MPOIgnoringMasks(MPO):
    def categorical(self, policy, obs):
        return policy(self.layout.split(obs)[0])  # the bug: the policy acts without its mask


# MPO on the masked probe: small networks and batches, targets synced every 25 updates (the
# defaults' 256-wide networks and 100-update hard copies take minutes on 2 cores).
MPO_MASKED = dict(learning_starts=300, hidden_sizes=(64, 64), batch_size=64, target_update_period=25)


@pytest.mark.slow
def test_ppo_acting_on_a_stale_action_mask_is_caught():
    with pytest.raises(ContractError, match=r"an agent that takes action masks never takes an illegal action: "
                       r"_PPOWithStaleMasks took \d+ illegal actions while training on MaskedActions .*stale one"):  # fmt: skip
        check_action_masks(_PPOWithStaleMasks(eqxrl.envs.make("CartPole-v1"), num_envs=8, rollout_length=32), total_steps=2048)


@pytest.mark.slow
def test_dqn_ignoring_its_masks_is_caught():
    with pytest.raises(ContractError, match=r"never takes an illegal action: _DQNIgnoringMasks took \d+ illegal actions"):
        check_action_masks(_DQNIgnoringMasks(eqxrl.envs.make("CartPole-v1"), learning_starts=500), total_steps=2048)


@pytest.mark.slow
def test_mpo_ignoring_its_masks_is_caught():
    with pytest.raises(ContractError, match=r"never takes an illegal action: _MPOIgnoringMasks took \d+ illegal actions"):
        check_action_masks(_MPOIgnoringMasks(eqxrl.envs.make("CartPole-v1"), **MPO_MASKED), total_steps=1500)


@pytest.mark.slow
# (MPO's run in the exhaustive tier, tests/tiers.py: test_mpo_ignoring_its_masks_is_caught covers its check in CI.)
@pytest.mark.parametrize("agent", [PPO, DQN, SAC, pytest.param(MPO, marks=pytest.mark.exhaustive)])
def test_agents_that_honour_their_masks_pass_check_action_masks(agent):
    """(Discrete SAC's masked policy puts -1e9 on illegal logits: exactly 0 probability; discrete
    MPO's is a masked Categorical.)"""
    kwargs = dict(num_envs=8, rollout_length=32) if agent is PPO else dict(learning_starts=500)
    kwargs, steps = (MPO_MASKED, 1500) if agent is MPO else (kwargs, 4000)
    report = check_action_masks(agent(eqxrl.envs.make("CartPole-v1"), **kwargs), total_steps=steps)
    assert report["illegal_in_training"] == 0 and report["best_legal"] >= 0.8


@pytest.mark.slow
def test_ppo_honours_the_masks_of_each_entry_of_a_multi_discrete_action():
    """The factorised categorical on MaskedActions(factors=2): every entry masked on its own."""
    report = check_action_masks(PPO(eqxrl.envs.make("CartPole-v1"), num_envs=8, rollout_length=32), total_steps=8192, factors=2)
    assert report["illegal_in_training"] == 0 and report["best_legal"] >= 0.8


class _PPOMaskingOneEntry(PPO):
    def _dist(self, state, x):
        features, mask = self.layout.split(x)
        dist = self.policy(state, features)  # the bug: only the first entry's mask reaches the policy
        first = jnp.arange(mask.shape[-1]) < dist.nvec[0]
        return eqxrl.components.MultiCategorical(dist.logits, dist.nvec, mask | ~first)


@pytest.mark.slow
def test_ppo_masking_one_entry_of_a_multi_discrete_action_is_caught():
    with pytest.raises(ContractError, match=r"never takes an illegal action: _PPOMaskingOneEntry took \d+ illegal actions"):
        check_action_masks(_PPOMaskingOneEntry(eqxrl.envs.make("CartPole-v1"), num_envs=8, rollout_length=32), total_steps=2048, factors=2)


def test_check_action_masks_bad_arguments():
    with no_runtime_typecheck():
        for name in ("total_steps", "num_seeds", "num_observations", "factors"):
            with pytest.raises(ValueError, match=rf"^check_action_masks\({name}\) must be a positive int, got 0$"):
                check_action_masks(PPO, **{name: 0})
        with pytest.raises(ValueError, match=r"^check_action_masks\(min_best\) must be a fraction in \[0, 1\], got 1.5$"):
            check_action_masks(PPO, min_best=1.5)


class _SkillBlindDADS(DADS):
    """DADS whose policy never sees its skill (the one-hot zeroed in its input): every skill acts alike."""

    def _policy_input(self, stats, x):
        return DADS._policy_input(self, stats, x).at[..., -self.num_skills :].set(0.0)


@pytest.mark.slow
@pytest.mark.exhaustive  # (45 s; DADS itself passes the same check in the exhaustive tier: test_testing_agents.py)
def test_a_dads_whose_policy_does_not_see_its_skill_is_caught():
    msg = r"_SkillBlindDADS on Point2D-v0 after 20000 steps, on fewer than 2 of 3 seeds: its skills end .* apart"
    with pytest.raises(ContractError, match=msg):
        check_learns_skills(_SkillBlindDADS)


def test_check_learns_skills_bad_arguments():
    with no_runtime_typecheck():
        for name in ("total_steps", "num_seeds", "min_passing"):
            with pytest.raises(ValueError, match=rf"^check_learns_skills\({name}\) must be a positive int, got 0$"):
                check_learns_skills(DADS, **{name: 0})
        with pytest.raises(ValueError, match=r"^check_learns_skills\(min_passing=4\) must not exceed num_seeds=3$"):
            check_learns_skills(DADS, min_passing=4)
        with pytest.raises(ValueError, match=r"^check_learns_skills\(min_spread\) must be a finite number, got nan$"):
            check_learns_skills(DADS, min_spread=float("nan"))
        with pytest.raises(ValueError, match=r"^check_learns_skills\(agent\) must be an eqxrl agent class or instance, got 'DADS'$"):
            check_learns_skills("DADS")
        with pytest.raises(ValueError, match=r"^check_learns_skills\(agent\): PPO has no evaluate_skills\(state, key\) method"):
            check_learns_skills(PPO)
