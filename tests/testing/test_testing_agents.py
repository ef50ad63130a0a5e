"""`eqxrl.testing.check_agent` and `check_learns_probes` on every built-in agent and on the
tutorial's custom agent (A2C), and the checks' messages on agents that break a contract."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import eqxrl
from eqxrl import runs
from eqxrl.agents import DADS, DQN, IPPO, MAPPO, PPO, PQN, AbstractAgent
from eqxrl.testing import ContractError, check_agent, check_learns_probes, check_learns_skills
from tutorial_agent import load_tutorial_agent
from tiers import ci_subset

TUTORIAL = load_tutorial_agent()
A2C = TUTORIAL["A2C"]
TINY_PPO = dict(num_envs=2, rollout_length=8, num_epochs=1, num_minibatches=1, hidden_sizes=(8,))
TINY_OFF = dict(num_envs=2, rollout_length=2, batch_size=8, buffer_size=64, learning_starts=8, hidden_sizes=(8,))
# The networks an agent has beside its policy and critics, small too: DADS's skill dynamics
# (256 x 256 by default) took 1.4 s of check_agent's 14 s to initialise and run.
TINY_EXTRA = {"dads": dict(dynamics_hidden_sizes=(8,)), "crossq": dict(critic_hidden_sizes=(8,))}


def tiny(name: str) -> AbstractAgent:
    cls = runs.AGENTS[name]
    on_policy = issubclass(cls, (PPO, PQN, MAPPO, IPPO))
    return cls(cls.default_env, **(TINY_PPO if on_policy else TINY_OFF), **TINY_EXTRA.get(name, {}))


# ----------------------------------------------------------------------- check_agent
# Every built-in agent's check runs in the fast tier: each takes under 10 s on 2 quiet cores
# (serial, the suite's compile settings; figures in the note of the stop that set this).
@pytest.mark.parametrize("name", list(runs.AGENTS))
def test_every_built_in_agent_passes_check_agent(name):
    check_agent(tiny(name))


@pytest.mark.slow
def test_a_recurrent_ppo_passes_check_agent():
    check_agent(PPO("CartPole-v1", **TINY_PPO, actor_torso=eqxrl.components.GRUTorso(8, (8,)), shared_torso=True))


def test_the_tutorial_agent_passes_check_agent():
    check_agent(A2C(eqxrl.envs.make("CartPole-v1"), num_envs=2, rollout_length=8))


@pytest.mark.slow
def test_a_replay_agent_with_hyperparameters_in_its_buffer_passes_check_agent():
    # The user's PER buffer holds `buffer.alpha` and `buffer.eps`: the perturbed copy must be made
    # before check_agent wraps the buffers to reweight samples.
    agent = DQN("CartPole-v1", **{**TINY_OFF, "buffer": eqxrl.components.PrioritizedReplayBuffer(64)})
    assert {"loop.buffer.alpha", "loop.buffer.eps"} <= set(agent.hyperparameters())
    check_agent(agent)


@pytest.mark.slow
def test_prioritized_dqn_passes_check_agent_with_its_flags():
    agent = DQN("CartPole-v1", **TINY_OFF, prioritized=True, n_step=2)
    check_agent(agent, flags=("normalize_observations",))


# ----------------------------------------------------------------------- broken contracts
def test_a_state_that_changes_dtype_is_named():
    class Drifting(A2C):
        def train_iteration(self, state, clock):
            state, metrics = super().train_iteration(state, clock)
            return eqx.tree_at(lambda s: s.env_steps, state, state.env_steps.astype(jnp.float32)), metrics

    with pytest.raises(ContractError, match=r"train_iteration returns state leaf \.env_steps with \(shape, dtype\) "
                       r"\(\(\), 'float32'\), init gave \(\(\), 'int32'\)"):  # fmt: skip
        check_agent(Drifting(eqxrl.envs.make("CartPole-v1"), num_envs=2, rollout_length=8))


def test_missing_metrics_are_named():
    class Quiet(A2C):
        def train_iteration(self, state, clock):
            state, metrics = super().train_iteration(state, clock)
            return state, {k: v for k, v in metrics.items() if k != "episode_return"}

    with pytest.raises(ContractError, match=r"the metrics contract: Quiet's metrics must contain 'episode_return'"):
        check_agent(Quiet(eqxrl.envs.make("CartPole-v1"), num_envs=2, rollout_length=8))


def test_actions_outside_the_space_are_named():
    class Overshoot(A2C):
        def act(self, state, obs, key=None, deterministic=False):
            return super().act(state, obs, key, deterministic) + 2

    with pytest.raises(ContractError, match=r"act maps a batch of observations to valid actions: Overshoot\.act\(state, "
                       r"obs of batch shape \(4,\), deterministic=False\) returned .* outside Discrete\(n=2\)"):  # fmt: skip
        check_agent(Overshoot(eqxrl.envs.make("CartPole-v1"), num_envs=2, rollout_length=8))


def test_a_plain_float_hyperparameter_is_named():
    class Plain(A2C):
        ent_coef: float = 0.01

    with pytest.raises(ContractError, match=r"Plain\.ent_coef = 0\.01 is a Python number, not an array leaf; .*"
                       r"eqxrl\.hyperparameter\(0\.01\)"):  # fmt: skip
        check_agent(Plain(eqxrl.envs.make("CartPole-v1"), num_envs=2, rollout_length=8))


@pytest.mark.slow
def test_a_run_that_depends_on_the_chunking_is_named():
    class Counting(A2C):
        """Reads the iteration from a global Python counter: each compiled chunk bakes in its own."""

        def train_iteration(self, state, clock):
            state, metrics = super().train_iteration(state, clock)
            Counting.traces = getattr(Counting, "traces", 0) + 1
            return state, {**metrics, "loss": metrics["loss"] + Counting.traces}

    with pytest.raises(ContractError, match=r"chunking does not change a run: Counting, 4 iterations of 16 steps: "
                       r"chunks of 2 vs one chunk, metrics leaf \['loss'\]"):  # fmt: skip
        check_agent(Counting(eqxrl.envs.make("CartPole-v1"), num_envs=2, rollout_length=8))


@pytest.mark.slow
def test_a_run_that_differs_in_a_stack_is_named():
    class Peeking(A2C):
        """Adds to its loss the size of what a host callback sees: the whole population in a stack."""

        def train_iteration(self, state, clock):
            state, metrics = super().train_iteration(state, clock)
            seen = jax.pure_callback(lambda x: np.full(x.shape, x.size, np.float32), jax.ShapeDtypeStruct((), jnp.float32),
                                     metrics["loss"], vmap_method="expand_dims")  # fmt: skip
            return state, {**metrics, "loss": metrics["loss"] + seen}

    with pytest.raises(ContractError, match=r"a stack of N agents equals N separate runs \(hyperparameters vmapped as "
                       r"leaves\): Peeking, 4 iterations of 16 steps: member 0 \(the original\) vs its own run, "
                       r"metrics leaf \['loss'\]"):  # fmt: skip
        check_agent(Peeking(eqxrl.envs.make("CartPole-v1"), num_envs=2, rollout_length=8))


def test_bad_arguments():
    with pytest.raises(ValueError, match=r"check_agent\(agent\) must be an eqxrl AbstractAgent, got str"):
        check_agent("ppo")
    with pytest.raises(ValueError, match=r"check_agent\(iterations\) must be an int >= 1, got 0"):
        check_agent(tiny("ppo"), iterations=0)
    with pytest.raises(ValueError, match=r"check_agent\(flags\) must name boolean fields of PPO, got 'num_envs' = 2"):
        check_agent(tiny("ppo"), flags=("num_envs",))
    with pytest.raises(ValueError, match=r"check_learns_probes\(probes\) must name probes among .*, got \['bogus'\]"):
        check_learns_probes(tiny("ppo"), probes=("bogus",))


# ----------------------------------------------------------------------- probes: slow tier
PROBE_PPO = dict(num_envs=8, rollout_length=16, num_epochs=4, num_minibatches=4, hidden_sizes=(16,),
                 learning_rate=3e-3, anneal_lr=False)  # fmt: skip
PROBE_DQN = dict(num_envs=8, rollout_length=2, updates_per_step=0.25, batch_size=32, buffer_size=1024,
                 learning_starts=64, hidden_sizes=(16,), learning_rate=3e-3, tau=0.1, target_update_period=1,
                 exploration_fraction=0.3)  # fmt: skip
PROBE_A2C = dict(num_envs=16, rollout_length=8, learning_rate=3e-3)


def a2c_value(state, obs):
    return state.critic(obs)


@pytest.mark.slow
def test_ppo_learns_every_probe():
    report = check_learns_probes(PPO("CartPole-v1", **PROBE_PPO), total_steps=128 * 60)
    assert set(report) == {"constant", "observation", "two_step", "action", "observation_action", "time_limit", "n_step"}


@pytest.mark.slow
def test_dqn_learns_every_probe():
    check_learns_probes(DQN("CartPole-v1", **PROBE_DQN, n_step=3), total_steps=16 * 400)


@pytest.mark.slow
def test_the_tutorial_agent_learns_every_probe():
    check_learns_probes(A2C(eqxrl.envs.make("CartPole-v1"), **PROBE_A2C), total_steps=128 * 200, value=a2c_value)


@pytest.mark.slow
def test_probes_whose_agents_do_not_stack_run_one_by_one():
    # The agents built for the two probes differ in a static field (their rollout length), so
    # they cannot stack: each probe trains in its own run, with the same answers and messages.
    built = []

    def a2c(env):
        built.append(A2C(env, num_envs=16, rollout_length=8 + 8 * (len(built) % 2), learning_rate=3e-3))
        return built[-1]

    report = check_learns_probes(a2c, total_steps=128 * 40, value=a2c_value, probes=("constant", "observation"))
    assert [type(agent.env).__name__ for agent in built[-2:]] == ["ConstantReward", "ObservationReward"]
    assert report["constant"]["V(+0)"] == pytest.approx(1.0, abs=0.15), report
    assert report["observation"]["V(+1)"] == pytest.approx(1.0, abs=0.15), report


LOOP = dict(num_envs=8, rollout_length=2, updates_per_step=0.25, batch_size=32, buffer_size=1024, learning_starts=64)
PROBE_CONTINUOUS = dict(LOOP, hidden_sizes=(32, 32), tau=0.05, actor_learning_rate=3e-3, critic_learning_rate=3e-3)
PROBE_MPO = dict(LOOP, hidden_sizes=(32, 32), target_update_period=1, tau=0.05, kl_mean=0.05, kl_std=1e-3,
                 kl_categorical=0.05, policy_learning_rate=3e-3, critic_learning_rate=3e-3)  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("name", ci_subset(["ddpg", "td3", "sac", "mpo"]))
def test_continuous_agents_learn_every_probe(name):
    cls = runs.AGENTS[name]
    # SAC's critic learns the soft value: with a near-zero fixed temperature it is the plain return.
    extra = dict(autotune=False, init_alpha=1e-3) if name == "sac" else {}
    config = PROBE_MPO if name == "mpo" else {**PROBE_CONTINUOUS, **extra}
    check_learns_probes(cls("Pendulum-v1", **config), total_steps=16 * 400)


@pytest.mark.slow
@pytest.mark.exhaustive  # (81 s: DADS is a secondary agent, tests/tiers.py; CI runs its check_agent)
def test_dads_learns_skills_on_the_skill_probe():
    """DADS learns only from its intrinsic reward, so the value probes do not apply: its probe is
    Point2D (seen: spreads 16.7, 18.5, 12.3 against an untrained 0.06-0.12, intrinsic rewards 0.54,
    0.40, 0.40; the check needs 2 of 3 seeds at 3x untrained and >= 10, and > 0.3)."""
    report = check_learns_skills(DADS)
    assert len(report["spread_after"]) == 3
