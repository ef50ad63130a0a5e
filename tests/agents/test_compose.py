"""Open agents (issue 11): torsos, schedules, optimizer slots, buffers, loss terms,
hyperparameters by dotted path, and their config round-trip. Small and fast."""

import dataclasses
import json

import equinox as eqx
import hypothesis.strategies as st
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from hypothesis import given, settings

import eqxrl
from eqxrl.agents import DQN, MPO, PPO, SAC, TD3, Clock
from eqxrl.components import (
    CategoricalHead,
    CNNTorso,
    ConstantSchedule,
    ContinuousQHead,
    CosineSchedule,
    DeterministicHead,
    DiscreteQHead,
    GaussianHead,
    KLToReference,
    L2Penalty,
    LinearSchedule,
    MLPTorso,
    ModuleTorso,
    Adam,
    OptaxOptimizer,
    OptaxSchedule,
    PrioritizedReplayBuffer,
    ReplayBuffer,
    TanhGaussianHead,
    ValueHead,
    WarmupCosineSchedule,
    kl_divergence,
)
from eqxrl.components.distributions import Categorical, Normal
from eqxrl.core import get_path, replace_paths, resolve_path, set_paths
from eqxrl.runs import agent_from_config, run_config

TINY_PPO = dict(num_envs=2, rollout_length=8, num_epochs=1, num_minibatches=1, hidden_sizes=(8,))
TINY_OFF = dict(learning_starts=4, buffer_size=64, batch_size=4, hidden_sizes=(8,))


class UserTorso(eqx.Module):
    """A user's torso: built as cls(obs_shape, key=key), maps one observation to features."""

    linear: eqx.nn.Linear

    def __init__(self, obs_shape, *, key):
        self.linear = eqx.nn.Linear(int(np.prod(obs_shape)), 5, key=key)

    def __call__(self, obs):
        return jax.nn.relu(self.linear(obs.reshape(-1)))


def _iterate(agent, state, n):
    step = eqx.filter_jit(lambda a, s, i: a.train_iteration(s, Clock(i, jnp.asarray(n))))
    for i in range(n):
        state, metrics = step(agent, state, jnp.asarray(i))
    return state, metrics


# ----------------------------------------------------------------------------- torsos
@pytest.mark.slow  # over 5 s in the fast tier (2 cores)
@settings(max_examples=6, deadline=None)
@given(batch=st.lists(st.integers(1, 3), min_size=0, max_size=2), image=st.sampled_from([(10, 10, 4), (10, 10), (12, 9, 2)]))
def test_cnn_torso_shapes_over_batch_shapes(batch, image):
    torso = CNNTorso.minatar().make(image, key=jax.random.key(0))
    x = jnp.ones((*batch, int(np.prod(image))), jnp.float32)
    assert torso(x).shape == (*batch, 128)
    # Each observation is encoded on its own: the batched result equals one-by-one.
    if batch:
        flat = x.reshape(-1, x.shape[-1])
        np.testing.assert_allclose(torso(x).reshape(-1, 128)[0], torso(flat[0]), rtol=1e-5, atol=1e-6)


HEADS = [
    (lambda k, t: CategoricalHead(400, 3, key=k, torso=t, obs_shape=(10, 10, 4)), lambda d: d.logits.shape[:-1]),
    (lambda k, t: GaussianHead(400, 2, key=k, torso=t, obs_shape=(10, 10, 4)), lambda d: d.loc.shape[:-1]),
    (lambda k, t: TanhGaussianHead(400, 2, key=k, torso=t, obs_shape=(10, 10, 4)), lambda d: d.loc.shape[:-1]),
    (lambda k, t: DeterministicHead(400, 2, key=k, torso=t, obs_shape=(10, 10, 4)), lambda y: y.shape[:-1]),
    (lambda k, t: ValueHead(400, key=k, torso=t, obs_shape=(10, 10, 4)), lambda y: y.shape),
    (lambda k, t: DiscreteQHead(400, 3, key=k, torso=t, obs_shape=(10, 10, 4)), lambda y: y.shape[:-1]),
]


@pytest.mark.slow
@settings(max_examples=8, deadline=None)
@given(batch=st.lists(st.integers(1, 3), min_size=0, max_size=2), which=st.integers(0, len(HEADS) - 1), cnn=st.booleans())
def test_every_head_on_a_torso_over_batch_shapes(batch, which, cnn):
    make, batch_of = HEADS[which]
    torso = CNNTorso.minatar() if cnn else MLPTorso((8,))
    head = make(jax.random.key(1), torso)
    assert batch_of(head(jnp.zeros((*batch, 400), jnp.float32))) == tuple(batch)


def test_continuous_q_head_torso_maps_obs_and_action():
    q = ContinuousQHead(3, 2, key=jax.random.key(0), torso=MLPTorso((16, 4), "relu"))
    assert q.torso.features == 4 and q.torso.obs_shape == (5,)
    assert q(jnp.zeros((7, 3)), jnp.zeros((7, 2))).shape == (7,)


@pytest.mark.slow  # over 5 s in the fast tier (2 cores)
def test_user_module_class_is_a_torso_with_no_registration():
    agent = PPO("CartPole-v1", actor_torso=UserTorso, **TINY_PPO)
    assert agent.actor_torso == ModuleTorso(UserTorso)
    assert PPO("CartPole-v1", actor_torso=UserTorso, **TINY_PPO) == agent  # value-comparable
    state = agent.init(jax.random.key(0))
    assert isinstance(state.actor.torso.net, UserTorso) and state.actor.torso.features == 5
    state, metrics = _iterate(agent, state, 2)
    assert np.isfinite(float(metrics["loss"]))


def test_torso_errors_name_the_argument():
    with pytest.raises(ValueError, match=r"CNNTorso needs image observations \(H, W, C\) or \(H, W\), got observation shape \(4,\)"):
        PPO("CartPole-v1", actor_torso=CNNTorso.minatar(), **TINY_PPO).init(jax.random.key(0))
    with pytest.raises(ValueError, match=r"kernel size 8, larger than its 4x4 input"):
        CNNTorso((4,), (8,), (1,)).make((4, 4, 1), key=jax.random.key(0))
    with pytest.raises(ValueError, match=r"CNNTorso\(channels, kernel_sizes, strides\) must have one entry per convolution"):
        CNNTorso((4, 8), (3,), (1,))
    with pytest.raises(ValueError, match=r"MLPTorso\(hidden_sizes\) must be a tuple of positive ints, got \(0,\)"):
        MLPTorso((0,))
    with pytest.raises(ValueError, match=r"PPO\(actor_torso\) must be a torso"):
        PPO("CartPole-v1", actor_torso="cnn")
    with pytest.raises(ValueError, match=r"SAC\(critic_torso\) must be a torso"):
        SAC("Pendulum-v1", critic_torso=(64, 64))
    with pytest.raises(ValueError, match=r"PPO\(shared_torso=True\) puts both heads on actor_torso; critic_torso must be None"):
        PPO("CartPole-v1", shared_torso=True, critic_torso=MLPTorso())
    with pytest.raises(ValueError, match=r"a torso must map one observation to a feature vector"):
        ModuleTorso(type("Bad", (eqx.Module,), {"__init__": lambda self, s, key: None, "__call__": lambda self, x: x[None]})).make((3,), key=jax.random.key(0))


@pytest.mark.slow  # (over 2 s in the fast tier: tests/tiers.py)
def test_shared_torso_ppo_trains_one_torso_for_both_heads():
    agent = PPO("CartPole-v1", shared_torso=True, actor_torso=MLPTorso((16,)), **TINY_PPO)
    state = agent.init(jax.random.key(0))
    assert state.torso is not None and state.torso.features == 16
    assert state.actor.torso.features == 16 and not jax.tree.leaves(eqx.filter(state.actor.torso, eqx.is_array))
    before = state.torso.net.layers[0].weight
    state, _ = _iterate(agent, state, 2)
    assert not np.allclose(before, state.torso.net.layers[0].weight)  # the shared torso is trained


def test_separate_actor_and_critic_sizes():
    agent = SAC("Pendulum-v1", actor_torso=MLPTorso((8,), "relu"), critic_torso=MLPTorso((16, 12), "relu"), **{**TINY_OFF, "hidden_sizes": (4,)})
    learner = agent.init(jax.random.key(0)).learner
    assert learner.actor.torso.features == 8
    assert learner.critic.members.torso.net.layers[0].weight.shape == (2, 4, 16)  # 2 critics, obs 3 + action 1


# ----------------------------------------------------------------------------- schedules and optimizers
def test_schedules_values():
    assert float(ConstantSchedule(0.1)(0.7)) == pytest.approx(0.1)
    assert [float(LinearSchedule(1.0, 0.5)(p)) for p in (0.0, 0.5, 1.0)] == pytest.approx([1.0, 0.75, 0.5])
    assert [float(CosineSchedule(1.0)(p)) for p in (0.0, 0.5, 1.0)] == pytest.approx([1.0, 0.5, 0.0], abs=1e-6)
    assert float(CosineSchedule(1.0, alpha=0.2)(1.0)) == pytest.approx(0.2)
    warm = WarmupCosineSchedule(1.0, warmup=0.2, init_value=0.0, end_value=0.1)
    assert [float(warm(p)) for p in (0.0, 0.1, 0.2, 1.0)] == pytest.approx([0.0, 0.5, 1.0, 0.1], abs=1e-6)
    fn = optax.linear_schedule(1.0, 0.0, 10)
    assert float(OptaxSchedule(fn)(0.9, count=5)) == pytest.approx(0.5)
    for bad, match in [
        (lambda: CosineSchedule(0.0), r"CosineSchedule\(init_value\) must be > 0, got 0"),
        (lambda: CosineSchedule(1.0, alpha=2.0), r"CosineSchedule\(alpha\) must be in \[0, 1\], got 2"),
        (lambda: WarmupCosineSchedule(1.0, warmup=1.0), r"WarmupCosineSchedule\(warmup\) must be in \[0, 1\), got 1"),
        (lambda: LinearSchedule(-1.0), r"LinearSchedule\(init_value\) must be > 0, got -1"),
        (lambda: OptaxSchedule(3), r"OptaxSchedule\(fn\) must be a callable"),
    ]:
        with pytest.raises(ValueError, match=match):
            bad()


@pytest.mark.slow  # (over 2 s in the fast tier: tests/tiers.py)
def test_learning_rate_fields_take_schedules_and_optax_schedules():
    agent = PPO("CartPole-v1", learning_rate=CosineSchedule(1e-3), **TINY_PPO)
    state, metrics = _iterate(agent, agent.init(jax.random.key(0)), 2)
    assert float(metrics["learning_rate"]) == pytest.approx(float(CosineSchedule(1e-3)(0.5)), rel=1e-5)
    assert isinstance(SAC("Pendulum-v1", actor_learning_rate=optax.cosine_decay_schedule(3e-4, 100)).actor_learning_rate, OptaxSchedule)
    with pytest.raises(ValueError, match=r"PPO\(learning_rate\) must be > 0, got -0.1 \(or a schedule"):
        PPO("CartPole-v1", learning_rate=-0.1)


@pytest.mark.slow  # compiles training programs: over 10 CPU-s, already at the smallest sizes
def test_optimizer_slots_take_optax_and_eqxrl_optimizers():
    tx = optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(1e-3))
    agent = SAC("Pendulum-v1", critic_optimizer=tx, actor_optimizer=Adam(1e-3, 5.0), alpha_optimizer=optax.sgd(1e-2), **TINY_OFF)
    assert agent.critic_optimizer == OptaxOptimizer(tx)
    assert "actor.optimizer.learning_rate" in agent.hyperparameters()
    # The numbers the slots replace are not hyperparameters any more: nothing reads them.
    assert not {"actor_learning_rate", "critic_learning_rate", "alpha_learning_rate"} & set(agent.hyperparameters())
    with pytest.raises(ValueError, match=r"has no hyperparameter 'critic_learning_rate'"):
        eqxrl.sweep(agent, {"critic_learning_rate": [1e-3, 1e-4]})
    with pytest.raises(ValueError, match=r"PBT\(space\) names 'critic_learning_rate', which is not a hyperparameter leaf"):
        eqxrl.pbt.PBT(agent, {"critic_learning_rate": eqxrl.pbt.LogUniform(1e-4, 1e-3)}, population_size=2, ready=8)
    state, metrics = _iterate(agent, agent.init(jax.random.key(0)), 8)
    assert np.isfinite(float(metrics["critic_loss"]))
    with pytest.raises(ValueError, match=r"SAC\(critic_optimizer\) must be an optax.GradientTransformation, an eqxrl optimizer \(Adam, \.\.\.\) or None"):
        SAC("Pendulum-v1", critic_optimizer="adam")
    with pytest.raises(ValueError, match=r"MPO\(dual_optimizer\) must be an optax.GradientTransformation"):
        MPO("Pendulum-v1", dual_optimizer=1e-3)
    # An optax optimizer in PPO: no learning-rate metric eqxrl could report.
    ppo = PPO("CartPole-v1", optimizer=optax.sgd(1e-3), **TINY_PPO)
    assert "learning_rate" not in _iterate(ppo, ppo.init(jax.random.key(0)), 1)[1]


# ----------------------------------------------------------------------------- buffers
class CountingBuffer(ReplayBuffer):
    """A user buffer: a uniform buffer that also marks every slot its own `add` wrote."""

    def init(self, example):
        return super().init({"item": example, "written": jnp.zeros((), jnp.int32)})

    def add(self, state, batch):
        size = jax.tree.leaves(batch)[0].shape[0]
        return super().add(state, {"item": batch, "written": jnp.ones((size,), jnp.int32)})

    def sample(self, state, key, batch_size, beta=None):
        out = super().sample(state, key, batch_size, beta)
        return eqx.tree_at(lambda s: s.data, out, out.data["item"])


@pytest.mark.slow  # compiles training programs: over 10 CPU-s, already at the smallest sizes
def test_off_policy_agents_use_a_given_buffer():
    agent = DQN("CartPole-v1", buffer=CountingBuffer(64), num_envs=2, **{k: v for k, v in TINY_OFF.items() if k != "buffer_size"})
    assert agent.replay_buffer is agent.buffer
    state, metrics = _iterate(agent, agent.init(jax.random.key(0)), 6)
    assert int(state.buffer.data["written"].sum()) == 12  # 6 iterations x 2 envs went through its add
    assert np.isfinite(float(metrics["q_loss"]))
    prioritized = TD3("Pendulum-v1", buffer=PrioritizedReplayBuffer(64, alpha=0.5), n_step=3, **{k: v for k, v in TINY_OFF.items() if k != "buffer_size"})
    assert float(prioritized.hyperparameters()["loop.buffer.alpha"]) == 0.5
    _iterate(prioritized, prioritized.init(jax.random.key(0)), 8)
    with pytest.raises(ValueError, match=r"DQN\(buffer\) must be an eqxrl.components.AbstractReplayBuffer"):
        DQN("CartPole-v1", buffer="prioritized")
    with pytest.raises(ValueError, match=r"^DQN\(buffer\) is the replay buffer itself: with it given, \['prioritized'\] must stay unset \(or agree with it\)$"):
        DQN("CartPole-v1", buffer=ReplayBuffer(1000), prioritized=True)
    with pytest.raises(ValueError, match=r"DQN\(batch_size=256\) must not exceed buffer_size=64"):
        DQN("CartPole-v1", buffer=ReplayBuffer(64))


def test_the_buffer_keywords_build_the_buffer_the_agent_stores():
    """`buffer_size`, `prioritized` and `per_alpha` are init-only keywords: they build `buffer`, the
    one place their numbers live (`per_alpha` is `buffer.alpha`), and their names still work."""
    import eqxrl.cli
    import eqxrl.pbt
    from eqxrl.agents import set_hyperparameter
    from typecheck import no_runtime_typecheck

    plain, per = DQN("CartPole-v1"), DQN("CartPole-v1", buffer_size=1000, prioritized=True, per_alpha=0.5)
    assert plain.buffer == ReplayBuffer(50_000) and SAC("Pendulum-v1").buffer == ReplayBuffer(100_000)
    assert type(per.buffer) is PrioritizedReplayBuffer and per.buffer.capacity == 1000 and float(per.buffer.alpha) == 0.5
    # not stored: read on the agent, a keyword is what the buffer it built holds, never its default
    assert (per.buffer_size, per.prioritized, float(per.per_alpha)) == (1000, True, 0.5)
    assert (plain.buffer_size, plain.prioritized, plain.per_alpha) == (50_000, False, 0.6)
    assert DQN("CartPole-v1", buffer=PrioritizedReplayBuffer(64, alpha=0.3), batch_size=32).prioritized
    assert "per_alpha" not in {f.name for f in dataclasses.fields(per)} and "per_alpha" in DQN.keywords()
    assert "loop.buffer.alpha" in per.hyperparameters() and "per_alpha" not in per.hyperparameters()
    assert "loop.buffer.alpha" not in plain.hyperparameters()  # (uniform replay has no alpha to tune)
    assert float(set_hyperparameter(per, "per_alpha", 0.25).buffer.alpha) == 0.25  # the old name, for --set, sweeps and PBT
    assert [float(a) for a in eqxrl.sweep(per, {"per_alpha": [0.1, 0.2]}).agent.buffer.alpha] == pytest.approx([0.1, 0.2])
    assert eqxrl.pbt.PBT(per, {"per_alpha": eqxrl.pbt.Uniform(0.0, 1.0)}, population_size=2, ready=64).space
    # config.json records the buffer itself; a config written before (the keywords) builds the same agent
    assert per.config()["loop"]["buffer"]["class"] == "eqxrl.components:PrioritizedReplayBuffer"
    assert not {"per_alpha", "prioritized", "buffer"} & (set(per.config()) | set(per.config()["loop"]) - {"buffer"})
    old = {"buffer": None, "buffer_size": 1000, "prioritized": True, "per_alpha": 0.5}
    assert eqx.tree_equal(eqxrl.runs.agent_from_config({"agent": "dqn", "env": "CartPole-v1", "agent_config": old}), per)
    assert eqx.tree_equal(eqxrl.runs.agent_from_config({"agent": "dqn", "env": "CartPole-v1", "agent_config": eqxrl.runs.agent_config(per)}), per)
    with no_runtime_typecheck():
        with pytest.raises(ValueError, match=r"^DQN\(buffer\) is the replay buffer itself: with it given, \['buffer_size', 'per_alpha'\] must stay unset \(or agree with it\)$"):
            DQN("CartPole-v1", buffer=ReplayBuffer(1000), buffer_size=10, per_alpha=0.1)
        with pytest.raises(ValueError, match=r"^DQN\(buffer_size\) must be a positive int, got 0$"):
            DQN("CartPole-v1", buffer_size=0)
    flags = {f.name for f in eqxrl.cli.agent_flags(DQN)}
    assert {"buffer", "buffer_size", "prioritized", "per_alpha"} <= flags


def test_the_learning_rate_keywords_build_the_optimizers_the_agent_stores():
    """A replay agent's learning rates (and `max_grad_norm`, DQN's `anneal_lr`, CrossQ's `adam_b1`)
    are init-only keywords that build its optimizers (`critic.optimizer`, `alpha_optimizer`), one
    place each number lives; the keywords' names read and set them."""
    from eqxrl.agents import set_hyperparameter
    from typecheck import no_runtime_typecheck

    sac = SAC("Pendulum-v1", critic_learning_rate=1e-3, max_grad_norm=5.0)
    assert sac.critic.optimizer == Adam(1e-3, 5.0) and sac.actor.optimizer == Adam(3e-4, 5.0) and sac.alpha_optimizer == Adam(3e-4, 5.0)
    assert (float(sac.critic_learning_rate), float(sac.max_grad_norm)) == (pytest.approx(1e-3), 5.0)
    assert float(set_hyperparameter(sac, "critic_learning_rate", 2e-4).critic.optimizer.learning_rate) == pytest.approx(2e-4)
    given = DQN("CartPole-v1", critic_optimizer=Adam(1e-3))  # (a given Adam's rate is reached by the keyword too)
    assert float(set_hyperparameter(given, "learning_rate", 1e-4).critic.optimizer.learning_rate) == pytest.approx(1e-4)
    assert DQN("CartPole-v1").critic.optimizer == Adam(1e-3, 10.0, anneal=True) and not DQN("CartPole-v1", anneal_lr=False).anneal_lr
    assert eqx.tree_equal(dataclasses.replace(sac, tau=0.01).critic, sac.critic)  # (the keywords passed back agree)
    with no_runtime_typecheck():
        with pytest.raises(ValueError, match=r"^SAC\(critic_optimizer\) is the optimizer itself: with it given, \['critic_learning_rate'\] must stay unset \(or agree with it\)$"):
            SAC("Pendulum-v1", critic_optimizer=Adam(1e-3), critic_learning_rate=5e-4)
        with pytest.raises(ValueError, match=r"^SAC\(alpha_learning_rate\) must be > 0, got -1"):
            SAC("Pendulum-v1", alpha_learning_rate=-1.0)
        with pytest.raises(ValueError, match=r"^TD3\(max_grad_norm\) must be > 0 \(inf disables clipping\), got 0"):
            TD3("Pendulum-v1", max_grad_norm=0.0)
        with pytest.raises(ValueError, match=r"^DQN\(anneal_lr\) must be True or False, got 'yes'$"):
            DQN("CartPole-v1", anneal_lr="yes")


def test_the_loop_keywords_build_the_loop_the_agent_stores():
    """A replay agent's loop settings (`num_envs`, `batch_size`, `gamma`, ...) are init-only keywords
    that build its `loop`, an `OffPolicyLoop`; read on the agent they give the loop's values, and
    their names work for `--set`, sweeps, PBT, flags and configs of the flat layout."""
    import eqxrl.cli
    import eqxrl.pbt
    from eqxrl.agents import OffPolicyLoop, set_hyperparameter
    from typecheck import no_runtime_typecheck

    agent = DQN("CartPole-v1", num_envs=4, batch_size=32, gamma=0.9, n_step=3, learning_starts=100)
    assert isinstance(agent.loop, OffPolicyLoop) and (agent.loop.num_envs, agent.loop.batch_size, agent.loop.n_step) == (4, 32, 3)
    assert (agent.num_envs, agent.batch_size, float(agent.gamma)) == (4, 32, pytest.approx(0.9))
    assert not {"num_envs", "gamma"} & {f.name for f in dataclasses.fields(agent)} and {"num_envs", "gamma"} <= set(DQN.keywords())
    assert DQN("CartPole-v1").num_envs == 10 and SAC("Pendulum-v1").num_envs == 1 and SAC("CartPole-v1").num_envs == 8  # (each agent's defaults)
    assert "loop.gamma" in agent.hyperparameters() and "gamma" not in agent.hyperparameters()
    assert float(set_hyperparameter(agent, "gamma", 0.5).loop.gamma) == 0.5
    assert [float(g) for g in eqxrl.sweep(agent, {"gamma": [0.8, 0.95]}).agent.loop.gamma] == pytest.approx([0.8, 0.95])
    assert eqxrl.pbt.PBT(agent, {"gamma": eqxrl.pbt.Uniform(0.9, 0.99)}, population_size=2, ready=64).space
    # given whole, or rebuilt (`dataclasses.replace`, a config) from the loop alone
    given = DQN("CartPole-v1", loop=agent.loop)
    assert eqx.tree_equal(given, agent) and eqx.tree_equal(dataclasses.replace(agent, tau=0.5).loop, agent.loop)
    config = eqxrl.runs.agent_config(agent)
    assert config["loop"]["class"] == "eqxrl.agents:OffPolicyLoop" and "num_envs" not in config
    assert eqx.tree_equal(eqxrl.runs.agent_from_config({"agent": "dqn", "env": "CartPole-v1", "agent_config": config}), agent)
    old = {"num_envs": 4, "batch_size": 32, "gamma": 0.9, "n_step": 3, "learning_starts": 100, "buffer": None}  # (eqxrl 0.2's flat layout)
    assert eqx.tree_equal(eqxrl.runs.agent_from_config({"agent": "dqn", "env": "CartPole-v1", "agent_config": old}), agent)
    assert {"num_envs", "batch_size", "gamma", "learning_starts", "normalize_observations"} <= {f.name for f in eqxrl.cli.agent_flags(SAC)}
    with no_runtime_typecheck():
        with pytest.raises(ValueError, match=r"^DQN\(loop\) is the off-policy loop's settings itself: with it given, \['batch_size'\] must stay unset \(or agree with it\)$"):
            DQN("CartPole-v1", loop=agent.loop, batch_size=64)
        with pytest.raises(ValueError, match=r"^DQN\(batch_size\) must be a positive int, got 0$"):
            DQN("CartPole-v1", batch_size=0)
        with pytest.raises(ValueError, match=r"^DQN\(gamma\) must be in \[0, 1\], got 1.5$"):
            DQN("CartPole-v1", loop=OffPolicyLoop(gamma=1.5))
        with pytest.raises(ValueError, match=r"^DQN\(loop\) must be an eqxrl.agents.OffPolicyLoop or None \(built from the keywords\), got 'x'$"):
            DQN("CartPole-v1", loop="x")
        with pytest.raises(ValueError, match=r"^SAC\(actor\) must be an eqxrl.agents.NetworkSpec or None \(built from the keywords\), got 3$"):
            SAC("Pendulum-v1", actor=3)
        with pytest.raises(ValueError, match=r"^DQN\(critic\) is the critic network's spec itself: with it given, \['hidden_sizes'\] must stay unset"):
            DQN("CartPole-v1", critic=eqxrl.agents.NetworkSpec(hidden_sizes=(8,)), hidden_sizes=(16,))


# ----------------------------------------------------------------------------- loss terms
def _ppo_batch(agent, state, key):
    x = jax.random.normal(key, (16, 4))
    action = jnp.arange(16) % 2
    return (x, action, jnp.full((16,), -0.7), jnp.zeros((16,)), jnp.linspace(-1, 1, 16), jnp.ones((16,)))


@pytest.mark.slow  # over 5 s in the fast tier (2 cores)
@pytest.mark.bitwise
def test_an_extra_loss_term_adds_exactly_its_own_gradient():
    plain = PPO("CartPole-v1", **TINY_PPO)
    coef = 0.3
    with_term = dataclasses.replace(plain, policy_loss_terms=(L2Penalty(coef),))
    state = plain.init(jax.random.key(0))
    params = (state.torso, state.actor, state.critic)
    batch = _ppo_batch(plain, state, jax.random.key(1))
    grad = lambda agent: eqx.filter_grad(lambda p: agent.loss(p, batch, 0.0)[0])(params)  # noqa: E731
    g0, g1 = grad(plain), grad(with_term)
    # d/dw coef * sum(w^2) = 2 coef w on the actor's parameters; the critic's gradient is unchanged.
    expected_actor = jax.tree.map(lambda w: 2 * coef * w, eqx.filter(state.actor, eqx.is_inexact_array))
    for a, b, e in zip(jax.tree.leaves(g0[1]), jax.tree.leaves(g1[1]), jax.tree.leaves(expected_actor)):
        np.testing.assert_allclose(b - a, e, rtol=1e-4, atol=1e-6)
    for a, b in zip(jax.tree.leaves(g0[2]), jax.tree.leaves(g1[2])):
        np.testing.assert_array_equal(a, b)
    _, metrics = with_term.loss(params, batch, 0.0)
    l2 = sum(float(jnp.sum(w**2)) for w in jax.tree.leaves(expected_actor)) / (2 * coef) ** 2
    assert float(metrics["policy_loss_terms/l2_penalty/l2"]) == pytest.approx(l2, rel=1e-5)


class _Counts(eqxrl.components.AbstractLossTerm):
    """Adds nothing; logs a float32 scalar, an int32 scalar and a vector."""

    def __call__(self, network, batch, outputs):
        return jnp.zeros((), jnp.float32), {"half": jnp.float32(1.5), "count": jnp.int32(3), "pair": jnp.array([1.0, 2.0])}


@pytest.mark.slow  # over 5 s in the fast tier (2 cores)
def test_ppo_logs_a_loss_terms_metrics_of_any_dtype_and_shape():
    # PPO stacks its float32 scalar metrics into one vector per minibatch; the others pass as they are.
    agent = PPO("CartPole-v1", policy_loss_terms=(_Counts(),), **{**TINY_PPO, "num_minibatches": 2, "num_epochs": 2})
    _, metrics = eqxrl.train(agent, jax.random.key(0), 16 * 2, progress=False)
    for name, value in [("half", 1.5), ("count", 3.0), ("pair", 1.5)]:
        np.testing.assert_allclose(metrics[f"policy_loss_terms/_counts/{name}"], [value, value], err_msg=name)
    assert np.all(np.isfinite(metrics["approx_kl"])) and metrics["approx_kl"].shape == (2,)
    np.testing.assert_array_equal(metrics["updates_applied"], [4, 4])


@pytest.mark.slow
def test_a_loss_term_moves_an_off_policy_update_by_its_gradient():
    # One DQN update with plain SGD (lr 1): the term adds exactly -lr * 2 * coef * w to every weight.
    base = DQN("CartPole-v1", critic_optimizer=optax.sgd(1.0), **TINY_OFF)
    coef = 0.05
    term = DQN("CartPole-v1", critic_optimizer=optax.sgd(1.0), critic_loss_terms=(L2Penalty(coef),), **TINY_OFF)
    learner = base.init_learner(jax.random.key(0))
    data = eqxrl.components.Transition(
        obs=jax.random.normal(jax.random.key(1), (4, 4)), action=jnp.array([0, 1, 0, 1]), reward=jnp.ones(4),
        discount=jnp.full((4,), 0.99), next_obs=jax.random.normal(jax.random.key(2), (4, 4)),
    )  # fmt: skip
    batch = eqxrl.components.Sample(data=data, indices=jnp.arange(4), weights=jnp.ones(4))
    args = (batch, jax.random.key(3), jnp.zeros((), jnp.int32), jnp.zeros(()))
    q0 = base.update(learner, *args)[0].q
    q1, _, metrics = term.update(learner, *args)
    for w, a, b in zip(jax.tree.leaves(learner.q), jax.tree.leaves(q0), jax.tree.leaves(q1.q)):
        np.testing.assert_allclose(b - a, -2 * coef * w, rtol=1e-4, atol=1e-6)
    assert "critic_loss_terms/l2_penalty" in metrics


@pytest.mark.slow  # over 5 s in the fast tier (2 cores)
def test_kl_to_reference():
    agent = PPO("CartPole-v1", **TINY_PPO)
    state = agent.init(jax.random.key(0))
    x = jax.random.normal(jax.random.key(1), (8, 4))
    term = KLToReference(state.actor, coef=2.0)
    loss, metrics = term(state.actor, None, {"obs": x, "dist": state.actor(x)})
    assert float(loss) == pytest.approx(0.0, abs=1e-7)  # the reference itself
    other = agent.init(jax.random.key(5)).actor
    loss, metrics = term(other, None, {"obs": x, "dist": other(x)})
    assert float(loss) == pytest.approx(2.0 * float(jnp.mean(kl_divergence(other(x), state.actor(x)))))
    trained = PPO("CartPole-v1", policy_loss_terms=KLToReference(state.actor, 1.0), **TINY_PPO)
    assert "policy_loss_terms/kl_to_reference/kl" in _iterate(trained, trained.init(jax.random.key(0)), 1)[1]
    with pytest.raises(ValueError, match=r"KLToReference needs a stochastic policy"):
        term(None, None, {"obs": x, "action": x})
    with pytest.raises(ValueError, match=r"PPO\(policy_loss_terms\) must be a tuple of eqxrl.components.AbstractLossTerm"):
        PPO("CartPole-v1", policy_loss_terms=(1.0,))


def test_kl_divergence_closed_forms():
    p, q = Categorical(jnp.log(jnp.array([0.5, 0.5]))), Categorical(jnp.log(jnp.array([0.9, 0.1])))
    assert float(kl_divergence(p, q)) == pytest.approx(0.5 * np.log(0.5 / 0.9) + 0.5 * np.log(0.5 / 0.1), rel=1e-5)
    n1, n2 = Normal(jnp.zeros(1), jnp.ones(1)), Normal(jnp.ones(1), 2 * jnp.ones(1))
    assert float(kl_divergence(n1, n2)) == pytest.approx(np.log(2) + (1 + 1) / 8 - 0.5, rel=1e-5)
    with pytest.raises(ValueError, match=r"two distributions of one kind"):
        kl_divergence(p, n1)


# ----------------------------------------------------------------------------- paths, stacking, PBT, config
def test_hyperparameters_by_dotted_path():
    agent = DQN(
        "CartPole-v1", learning_rate=CosineSchedule(1e-3), buffer=PrioritizedReplayBuffer(1000),
        critic_loss_terms=(L2Penalty(1e-4),),
    )  # fmt: skip
    paths = agent.hyperparameters()
    for path in ("critic.optimizer.learning_rate.init_value", "loop.buffer.alpha", "critic.loss_terms.0.coef", "loop.gamma"):
        assert path in paths and get_path(agent, path) is paths[path]
    assert resolve_path(agent, "init_value") == "critic.optimizer.learning_rate.init_value"  # flat names where unambiguous
    assert resolve_path(agent, "learning_rate.init_value") == "critic.optimizer.learning_rate.init_value"  # (a keyword's prefix)
    with pytest.raises(ValueError, match=r"'alpha' is ambiguous, it could be any of \['loop.buffer.alpha', 'critic.optimizer.learning_rate.alpha'\]"):
        resolve_path(agent, "alpha")
    assert "critic.optimizer.learning_rate" in DQN("CartPole-v1", critic_optimizer=Adam(1e-3)).hyperparameters()
    moved = replace_paths(agent, {"loop.buffer.alpha": 0.3})
    assert float(moved.buffer.alpha) == pytest.approx(0.3)
    with pytest.raises(ValueError, match=r"PrioritizedReplayBuffer\(alpha\) must be >= 0"):
        set_paths(agent, {"buffer.alpha": -1.0})


@pytest.mark.slow  # compiles training programs: over 10 CPU-s, already at the smallest sizes
def test_agents_built_alike_stack_and_sweep_over_paths():
    make = lambda lr: PPO("CartPole-v1", actor_torso=MLPTorso((8,)), learning_rate=CosineSchedule(lr), policy_loss_terms=L2Penalty(1e-4), **TINY_PPO)  # noqa: E731
    stacked = eqxrl.stack([make(1e-3), make(3e-4)])
    np.testing.assert_allclose(stacked.agent.learning_rate.init_value, [1e-3, 3e-4])
    with pytest.raises(ValueError, match=r"differs from agents\[0\] in structure at 'actor_torso'"):
        eqxrl.stack([make(1e-3), dataclasses.replace(make(1e-3), actor_torso=MLPTorso((4,)))])
    swept = eqxrl.sweep(make(1e-3), {"learning_rate.init_value": [1e-3, 1e-4], "policy_loss_terms.0.coef": [0.0, 1e-3]})
    assert swept.size == 4
    np.testing.assert_allclose(swept.agent.policy_loss_terms[0].coef, [0.0, 1e-3, 0.0, 1e-3])
    _, metrics = eqxrl.train(swept, jax.random.key(0), 32, progress=False)
    assert 4 in np.shape(metrics["loss"])  # one curve per member
    with pytest.raises(ValueError, match=r"sweep\(values\[.gamma.\]\) must be a non-empty list of numbers"):
        eqxrl.sweep(make(1e-3), {"gamma": []})
    with pytest.raises(ValueError, match=r"sweep\(grid=False\) needs lists of one length"):
        eqxrl.sweep(make(1e-3), {"gamma": [0.9], "clip_eps": [0.1, 0.2]}, grid=False)


@pytest.mark.slow  # compiles training programs: over 10 CPU-s, already at the smallest sizes
def test_pbt_over_a_nested_path():
    agent = PPO("CartPole-v1", learning_rate=CosineSchedule(1e-3), **TINY_PPO)
    pbt = eqxrl.pbt.PBT(agent, {"learning_rate.init_value": eqxrl.pbt.LogUniform(1e-4, 1e-2)}, population_size=2, ready=16, eval_episodes=1, max_eval_steps=20)
    population, history = pbt.run(jax.random.key(0), 32, progress=False)
    values = np.asarray(population.agent.agent.learning_rate.init_value)
    assert values.shape == (2,) and np.all((values >= 1e-4) & (values <= 1e-2))
    assert set(history.hyperparameters) == {"learning_rate.init_value"}


def test_config_round_trip_of_module_fields():
    agent = SAC(
        "Pendulum-v1", actor_torso=MLPTorso((8,)), critic_torso=UserTorso, buffer=PrioritizedReplayBuffer(500, alpha=0.5),
        actor_learning_rate=WarmupCosineSchedule(1e-3), critic_optimizer=Adam(CosineSchedule(1e-3), 5.0),
        policy_loss_terms=(L2Penalty(1e-4),), max_grad_norm=float("inf"),
    )  # fmt: skip
    config = json.loads(json.dumps(run_config(agent, total_steps=100)))
    assert config["agent_config"]["actor"]["torso"] == {"class": "eqxrl.components:MLPTorso", "hidden_sizes": [8], "activation": "tanh", "layer_norm": False}
    assert config["agent_config"]["critic"]["torso"]["module"] == {"type": f"{__name__}:UserTorso"}
    # A user's class in a config loads only from a trusted module (or once registered).
    with pytest.raises(ValueError, match=rf"the class of critic.torso.module names '{__name__}:UserTorso', whose module '{__name__}' is not trusted"):
        agent_from_config(config)
    assert agent_from_config(config, trust=(__name__,)) == agent
    optax_agent = SAC("Pendulum-v1", critic_optimizer=optax.adam(1e-3))
    config = json.loads(json.dumps(run_config(optax_agent, total_steps=100)))
    assert "unserializable" in config["agent_config"]["critic"]
    with pytest.raises(ValueError, match=r"critic was NetworkSpec\(.*OptaxOptimizer\(.*which a config file cannot hold"):
        agent_from_config(config)


@pytest.mark.slow
def test_cnn_torso_convolutions_match_xla():
    """The torso's slice-and-matmul convolutions compute XLA's 'VALID' convolution (strided too)."""
    torso = CNNTorso((4, 6), (3, 2), (1, 2), (8,)).make((10, 9, 3), key=jax.random.key(0))
    x = jax.random.normal(jax.random.key(1), (10, 9, 3))
    for conv, stride, kernel in zip(torso.net.convs, (1, 2), (3, 2)):
        w = conv.linear.weight.reshape(kernel, kernel, x.shape[-1], -1)
        dims = ("NHWC", "HWIO", "NHWC")
        expected = jax.lax.conv_general_dilated(x[None], w, (stride, stride), "VALID", dimension_numbers=dims)[0]
        np.testing.assert_allclose(conv(x), expected + conv.linear.bias, rtol=1e-5, atol=1e-5)
        x = jax.nn.relu(conv(x))
    assert x.shape == (4, 3, 6)
