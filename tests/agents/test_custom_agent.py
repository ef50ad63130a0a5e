"""A custom agent written with public names only: REINFORCE with a learned baseline (and, at the
end, a replay agent on the shared off-policy loop, `LinearQ`).

It trains, stacks into a sweep, runs in PBT, and once registered works with run
directories, `eqxrl train pkg.mod:Class`, `eqxrl evaluate`, `--resume` and
`eqxrl pbt --resume` exactly like a built-in agent; a process that did not register
it loads its run directories when trusting its module (`--trust`, `trust=`) and not otherwise. Also: the errors a custom
agent's author meets (undeclared hyperparameters, the metrics contract).
"""

import dataclasses
import importlib
import json
import re
from typing import ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import eqxrl
from eqxrl.agents import AbstractAgent
from eqxrl.components import CategoricalHead, Adam, DiscreteQHead, ValueHead
from eqxrl.envs import AbstractEnv, AutoReset, EpisodeStatistics, VectorEnv


class ReinforceState(eqx.Module):
    actor: CategoricalHead
    critic: ValueHead
    opt_state: object
    env_state: object
    obs: jax.Array
    key: jax.Array
    env_steps: jax.Array


class Reinforce(AbstractAgent):
    """REINFORCE with a value baseline (Monte-Carlo returns inside each rollout)."""

    env: AbstractEnv
    num_envs: int = eqx.field(static=True, default=4)
    rollout_length: int = eqx.field(static=True, default=16)
    learning_rate: jax.Array = eqxrl.hyperparameter(3e-3)
    gamma: jax.Array = eqxrl.hyperparameter(0.99)

    @property
    def steps_per_iteration(self) -> int:
        return self.num_envs * self.rollout_length

    @property
    def train_env(self) -> VectorEnv:
        return VectorEnv(EpisodeStatistics(AutoReset(self.env)), self.num_envs)

    def init(self, key):
        k1, k2, k3, key = jax.random.split(key, 4)
        size, n = self.env.observation_space.shape[0], self.env.action_space.n
        actor, critic = CategoricalHead(size, n, hidden_sizes=(16,), key=k1), ValueHead(size, hidden_sizes=(16,), key=k2)
        env_state, ts = self.train_env.reset(k3)
        opt_state = Adam(self.learning_rate).init((actor, critic))
        return ReinforceState(actor, critic, opt_state, env_state, ts.obs, key, jnp.zeros((), jnp.int32))

    def act(self, state, obs, key=None, deterministic=False):
        dist = state.actor(obs)
        return dist.mode() if deterministic else dist.sample(key)

    def train_iteration(self, state, clock):
        def step(carry, _):
            env_state, obs, key = carry
            key, act_key, env_key = jax.random.split(key, 3)
            action = state.actor(obs).sample(act_key)
            env_state, ts = self.train_env.step(env_key, env_state, action)
            return (env_state, ts.obs, key), (obs, action, ts.reward, ts.done, ts.info["episode_return"])

        carry = (state.env_state, state.obs, state.key)
        (env_state, obs, key), (observations, actions, rewards, dones, ep_returns) = jax.lax.scan(
            step, carry, length=self.rollout_length
        )

        def discount(g, x):
            reward, done = x
            g = reward + self.gamma * g * (1.0 - done.astype(jnp.float32))
            return g, g

        _, returns = jax.lax.scan(discount, jnp.zeros(self.num_envs), (rewards, dones), reverse=True)

        def loss_fn(params):
            actor, critic = params
            values = critic(observations)
            advantages = jax.lax.stop_gradient(returns - values)
            policy_loss = -jnp.mean(actor(observations).log_prob(actions) * advantages)
            return policy_loss + 0.5 * jnp.mean(jnp.square(returns - values))

        params = (state.actor, state.critic)
        loss, grads = eqx.filter_value_and_grad(loss_fn)(params)
        (actor, critic), opt_state = Adam(self.learning_rate).update(grads, state.opt_state, params)
        done = dones.astype(jnp.float32)
        mean_return = jnp.sum(done * ep_returns) / jnp.maximum(jnp.sum(done), 1.0)
        env_steps = state.env_steps + self.steps_per_iteration
        metrics = {
            "env_steps": env_steps,
            "episode_return": jnp.where(jnp.sum(done) > 0, mean_return, jnp.nan),
            "loss": loss,
        }
        return ReinforceState(actor, critic, opt_state, env_state, obs, key, env_steps), metrics


ENV = "CartPole-v1"
STEPS = 4 * 64


@pytest.fixture(scope="module")
def agent():
    return Reinforce(eqxrl.envs.make(ENV))


@pytest.fixture
def registered():
    eqxrl.register_agent(Reinforce)
    yield "reinforce"
    eqxrl.agents.AGENTS.pop("reinforce", None)


@pytest.mark.slow
def test_trains_stacks_and_evaluates(agent):
    # Chunks of one iteration and eval_episodes=2, as the run directories of the test below have: its
    # programs (eval_episodes is part of the compiled chunk, even with no evaluation in it).
    state, metrics = eqxrl.train(agent, jax.random.key(0), STEPS, progress=False, chunk_iterations=1, eval_episodes=2)
    assert metrics["loss"].shape == (4,) and np.isfinite(metrics["loss"]).all()
    assert agent.hyperparameters().keys() == {"learning_rate", "gamma"}
    sweep = eqxrl.stack([Reinforce(eqxrl.envs.make(ENV), learning_rate=lr) for lr in (1e-3, 1e-2)])
    _, sweep_metrics = eqxrl.train(sweep, jax.random.key(0), STEPS, progress=False)
    assert sweep_metrics["loss"].shape == (2, 4)
    assert eqxrl.evaluate(agent, state, jax.random.key(1), num_episodes=2).shape == (2,)


@pytest.mark.slow
def test_pbt_and_its_resume(agent, registered, tmp_path):
    pbt = eqxrl.pbt.PBT(agent, {"learning_rate": eqxrl.pbt.LogUniform(1e-4, 1e-2)}, population_size=2, ready=64,
                        eval_episodes=1, max_eval_steps=20)  # fmt: skip
    seen = []
    with pytest.raises(KeyboardInterrupt):
        pbt.run(jax.random.key(0), 3 * 64, progress=False, run_dir=tmp_path,
                callback=lambda population, records: seen.append(1) or (len(seen) == 2 and (_ for _ in ()).throw(KeyboardInterrupt)))  # fmt: skip
    assert json.loads((tmp_path / "pbt.json").read_text())["agent"] == "reinforce"
    population, history = eqxrl.pbt.resume(tmp_path, progress=False)
    assert int(population.generation) == 3 and history.num_generations == 3


@pytest.mark.slow
def test_run_directory_cli_evaluate_and_resume(registered, tmp_path, capsys, monkeypatch):
    from eqxrl import cli

    module = importlib.import_module(__name__)  # `eqxrl train MODULE:Class`, as a user would
    assert module.Reinforce is Reinforce
    run = tmp_path / "run"
    code = cli.main(["train", f"{__name__}:Reinforce", "--env", ENV, "--total-steps", str(STEPS), "--run-dir", str(run),
                     "--quiet", "--eval-episodes", "2", "--learning-rate", "0.005"])  # fmt: skip
    assert code == 0
    config = json.loads((run / "config.json").read_text())
    assert config["agent"] == "reinforce" and config["agent_class"] == f"{__name__}:Reinforce"
    assert config["agent_config"]["learning_rate"] == 0.005
    agent, state, _ = eqxrl.runs.load_run(run)
    assert isinstance(agent, Reinforce)
    # A process that never registered the class imports it from config.json's agent_class only
    # when trusting its module: a run directory is data, and opening one runs no code it names.
    eqxrl.agents.AGENTS.pop("reinforce")
    untrusted = rf"agent_class names '{__name__}:Reinforce', whose module '{__name__}' is not trusted: .*pass --trust {__name__}"
    with pytest.raises(ValueError, match=untrusted):
        eqxrl.runs.load_agent(run)
    with pytest.raises(SystemExit):
        cli.main(["evaluate", str(run), "--episodes", "2"])
    assert re.search(untrusted, capsys.readouterr().err)
    assert isinstance(eqxrl.runs.load_agent(run, trust=(__name__,)), Reinforce) and eqxrl.agents.agent_class("reinforce") is Reinforce
    eqxrl.agents.AGENTS.pop("reinforce")
    assert cli.main(["evaluate", str(run), "--episodes", "2", "--trust", __name__]) == 0
    assert "Reinforce on CartPole-v1" in capsys.readouterr().out
    # Interrupted right after its first checkpoint, then continued from the command line:
    # the same final state as the uninterrupted run above.
    train_run_module = importlib.import_module("eqxrl.runs._train_run")  # (private: a test replaces a name where train_run looks up CheckpointWriter)

    class CrashAfterTheFirst(eqxrl.runs.CheckpointWriter):
        def submit(self, checkpoint, *, wait=False):
            super().submit(checkpoint, wait=True)
            self.wait()
            raise KeyboardInterrupt

    cut = tmp_path / "cut"
    monkeypatch.setattr(train_run_module, "CheckpointWriter", CrashAfterTheFirst)
    with pytest.raises(KeyboardInterrupt):
        eqxrl.runs.train_run(cut, Reinforce(eqxrl.envs.make(ENV), learning_rate=0.005), total_steps=STEPS,
                             progress=False, checkpoint_every=64, eval_episodes=2)  # fmt: skip
    monkeypatch.undo()
    assert not (cut / "state.eqx").exists()
    eqxrl.agents.AGENTS.pop("reinforce")  # (--trust again, in a process that never registered it)
    assert cli.main(["train", "--resume", str(cut), "--quiet", "--trust", __name__]) == 0
    resumed = eqxrl.runs.load_state(cut, agent)
    for a, b in zip(jax.tree.leaves(eqx.filter(state, eqx.is_inexact_array)), jax.tree.leaves(eqx.filter(resumed, eqx.is_inexact_array))):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_a_plain_float_field_says_how_to_declare_it():
    class Plain(Reinforce):
        ent_coef: float = 0.01

    plain = Plain(eqxrl.envs.make(ENV))
    assert "ent_coef" not in plain.hyperparameters()
    hint = r"Plain.ent_coef is a plain float field \(static\): declare it `ent_coef: float = eqxrl.hyperparameter\(0.01\)`"
    with pytest.raises(ValueError, match=r"PBT\(space\) names 'ent_coef', which is not a hyperparameter leaf of Plain.*" + hint):
        eqxrl.pbt.PBT(plain, {"ent_coef": eqxrl.pbt.Uniform(0.0, 0.1)}, population_size=2, ready=64)
    with pytest.raises(ValueError, match=r"differs from agents\[0\] in structure at 'ent_coef'.*" + hint):
        eqxrl.stack([plain, Plain(eqxrl.envs.make(ENV), ent_coef=0.02)])
    with pytest.raises(ValueError, match=r"hyperparameter\(static=True\): a hyperparameter is an array leaf"):
        eqxrl.hyperparameter(1.0, static=True)


def test_the_metrics_contract_is_checked_when_an_iteration_is_traced(agent):
    class NoReturn(Reinforce):
        def train_iteration(self, state, clock):
            state, metrics = super().train_iteration(state, clock)
            return state, {k: v for k, v in metrics.items() if k != "episode_return"}

    class Vector(Reinforce):
        def train_iteration(self, state, clock):
            state, metrics = super().train_iteration(state, clock)
            return state, dict(metrics, loss=jnp.zeros(3))

    missing = r"NoReturn.train_iteration must return the metrics \['env_steps', 'episode_return'\].*missing \['episode_return'\]"
    for run in (lambda a: eqxrl.train(a, jax.random.key(0), 64, progress=False),
                lambda a: jax.jit(eqxrl.make_train(a, 64))(jax.random.key(0))):  # fmt: skip
        with pytest.raises(ValueError, match=missing):
            run(NoReturn(eqxrl.envs.make(ENV)))
    with pytest.raises(ValueError, match=r"Vector.train_iteration: metric 'loss' must be a scalar per run, got shape \(3,\)"):
        eqxrl.train(Vector(eqxrl.envs.make(ENV)), jax.random.key(0), 64, progress=False)


class CountedInit(Reinforce):
    """Reinforce whose init counts its Python runs (traces) and calls the parent's init."""

    runs: list = eqx.field(static=True, default_factory=list)

    def init(self, key):
        self.runs.append(key)
        return super().init(key)


def _array_leaves(state):
    data = lambda x: jax.random.key_data(x) if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key) else x  # noqa: E731
    return [np.asarray(x) for x in jax.tree.leaves(jax.tree.map(data, eqx.filter(state, eqx.is_array)))]


@pytest.mark.slow
@pytest.mark.bitwise
def test_a_custom_agents_init_is_one_compiled_program_with_the_same_weights():
    agent = CountedInit(eqxrl.envs.make(ENV))
    first = agent.init(jax.random.key(0))
    # Traced (once or twice: batched_orthogonal's runs), then reused: no trace for a new key.
    traced = len(agent.runs)
    assert traced in (1, 2)
    second = agent.init(jax.random.key(1))
    assert len(agent.runs) == traced
    assert not all(np.array_equal(a, b) for a, b in zip(_array_leaves(first), _array_leaves(second), strict=True))
    # The weights are the bits that drawing each layer on its own gives (the unwrapped inits, jitted),
    # and no layer is left at the first run's zero placeholders.
    unwrapped = jax.jit(lambda k: Reinforce.init.__wrapped__(agent, k))(jax.random.key(0))
    for a, b in zip(_array_leaves(first), _array_leaves(unwrapped), strict=True):
        np.testing.assert_array_equal(a, b)
    weights = [x for x in _array_leaves(first) if x.ndim == 2]
    assert weights and all(np.abs(w).max() > 0 for w in weights)
    # And so is train's initial state (init traced inside train's own init program).
    initial = eqxrl.loop.run_init(*eqxrl.loop.batch_and_keys(agent, jax.random.key(0)))
    for a, b in zip(_array_leaves(first), _array_leaves(initial), strict=True):
        np.testing.assert_array_equal(a, b)


# ----------------------------------------------------------------------------- a custom replay agent
class LinearQ(eqxrl.agents.AbstractOffPolicyAgent):
    """A user's replay agent on the shared off-policy loop, with public names only: a Q-network
    trained by one-step Q-learning without a target network, epsilon-greedy exploration. It
    declares what `AbstractOffPolicyAgent` names as `AbstractVar`s (`env`, `loop`, `critic`, `tau`)
    and the learning-rate keyword of the critic's optimizer (`rates`), and implements the four
    hooks; the loop's and the network's keywords (and `max_grad_norm`) come from the base."""

    rates: ClassVar[dict[str, str]] = {"critic.optimizer": "learning_rate"}  # (Adam from `learning_rate`, unless given)
    env: AbstractEnv = eqx.field(converter=eqxrl.agents.as_env)
    _: dataclasses.KW_ONLY
    loop: eqxrl.agents.OffPolicyLoop | None = None
    critic: eqxrl.agents.NetworkSpec | None = None
    learning_rate: dataclasses.InitVar[float] = 1e-3
    epsilon: jax.Array = eqxrl.hyperparameter(0.1)
    tau: jax.Array = eqxrl.hyperparameter(1.0)  # (unused: no target network)

    def init_learner(self, key):
        q = DiscreteQHead(self.obs_size, self.action_size, key=key, torso=self.critic.torso_for(self), obs_shape=self.obs_shape)
        return q, self.critic.optimizer.init(q)

    def greedy(self, learner, obs):
        return jnp.argmax(learner[0](obs), axis=-1)

    def explore(self, learner, obs, key, progress):
        explore_key, action_key = jax.random.split(key)
        random = jax.random.randint(action_key, obs.shape[:-1], 0, self.action_size)
        return jnp.where(jax.random.uniform(explore_key, obs.shape[:-1]) < self.epsilon, random, self.greedy(learner, obs))

    def update(self, learner, batch, key, updates, progress):
        q, opt_state = learner
        data = batch.data
        target = data.reward + data.discount * jnp.max(q(data.next_obs), axis=-1)

        def loss(q):
            taken = jnp.take_along_axis(q(data.obs), data.action[:, None], axis=-1)[:, 0]
            return jnp.mean(batch.weights * (taken - jax.lax.stop_gradient(target)) ** 2), taken - target

        (value, td), grads = eqx.filter_value_and_grad(loss, has_aux=True)(q)
        q, opt_state = self.critic.optimizer.update(grads, opt_state, q, progress)
        return (q, opt_state), td, {"q_loss": value}


@pytest.mark.slow  # (over 2 s in the fast tier: tests/tiers.py)
def test_a_custom_replay_agent_runs_on_the_shared_loop_with_its_keywords():
    agent = LinearQ("CartPole-v1", num_envs=4, batch_size=32, buffer_size=1_000, learning_starts=64, hidden_sizes=(16,), gamma=0.9)
    assert (agent.loop.num_envs, agent.loop.batch_size, agent.critic.hidden_sizes, float(agent.gamma)) == (4, 32, (16,), pytest.approx(0.9))
    assert {"loop.gamma", "epsilon", "critic.optimizer.learning_rate"} <= set(agent.hyperparameters())
    assert float(eqxrl.agents.set_hyperparameter(agent, "learning_rate", 3e-4).critic.optimizer.learning_rate) == pytest.approx(3e-4)
    state, metrics = eqxrl.train(agent, jax.random.key(0), total_steps=400, progress=False)
    assert int(metrics["env_steps"][-1]) >= 400 and np.isfinite(np.asarray(metrics["q_loss"])[-1])
    assert agent.act(state, jnp.zeros((3, 4)), deterministic=True).shape == (3,)
    assert float(eqxrl.sweep(agent, {"gamma": [0.8, 0.95]}).agent.loop.gamma[1]) == pytest.approx(0.95)
