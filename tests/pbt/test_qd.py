"""Quality-diversity evaluation: final state descriptors in `evaluate` and in PBT's
history (`history.csv`), per-episode evaluation returns, and the `Novelty` fitness."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import eqxrl
from eqxrl import cli
from eqxrl.agents import DADS, PPO, SAC, TD3
from eqxrl.envs import DescriptorWrapper, NormalizeObservation, make
from eqxrl.loop import EvalResult, TrajectoryDescriptor, episode_descriptor, mean_over_episode
from eqxrl.pbt import (
    PBT,
    History,
    LogUniform,
    Novelty,
    Truncation,
    history_from_records,
    load_records,
    novelty,
    pbt_config,
    pbt_from_config,
    read_history_csv,
    save_population,
    write_history_csv,
)
from eqxrl.cli._pbt import parse_fitness  # (private: the command line's parser of --fitness values)
from typecheck import no_runtime_typecheck

TINY_OFF = dict(num_envs=2, rollout_length=2, batch_size=8, buffer_size=64, learning_starts=8, hidden_sizes=(8,))
TINY_PPO = dict(num_envs=2, rollout_length=16, num_epochs=1, num_minibatches=1, hidden_sizes=(8,))


# ----------------------------------------------------------------------- evaluate
@pytest.mark.slow
def test_evaluate_records_final_descriptors_td3_point():
    # Point2D's return is the final x minus the start x (0): the final descriptor's x.
    agent = TD3("Point2D-v0", **TINY_OFF)
    state = agent.init(jax.random.key(0))
    key = jax.random.key(1)
    result = eqxrl.evaluate(agent, state, key, num_episodes=3, deterministic=False, descriptor="auto")
    assert isinstance(result, EvalResult)
    assert result.returns.shape == (3,) and result.descriptors.shape == (3, 2) and result.descriptor.shape == (2,)
    np.testing.assert_allclose(result.descriptors[:, 0], result.returns, atol=1e-5)
    assert float(jnp.std(result.returns)) > 1e-3  # stochastic episodes differ: the check above can fail
    np.testing.assert_allclose(result.descriptor, result.descriptors.mean(axis=0), atol=1e-6)
    # The returns are those of the plain evaluation with the same key.
    np.testing.assert_array_equal(eqxrl.evaluate(agent, state, key, num_episodes=3, deterministic=False), result.returns)
    # A callable reads the innermost env state (Point2D's position).
    twice = eqxrl.evaluate(agent, state, key, num_episodes=3, deterministic=False, descriptor=lambda s, o: 2 * s.pos)
    np.testing.assert_allclose(twice.descriptors, 2 * result.descriptors, atol=1e-5)


def test_evaluate_descriptor_is_the_state_each_episode_ended_in():
    # CartPole episodes end at different steps; the descriptor `time` of the final
    # state is each episode's length (= its return), not the loop's last step.
    agent = PPO("CartPole-v1", **TINY_PPO)
    state = agent.init(jax.random.key(0))
    result = eqxrl.evaluate(agent, state, jax.random.key(1), num_episodes=6, deterministic=False, descriptor=lambda s, o: s.time)
    assert len(set(np.asarray(result.returns).tolist())) > 1
    np.testing.assert_array_equal(result.descriptors[:, 0], result.returns)


@pytest.mark.slow
def test_evaluate_dads_reads_its_descriptor_wrapper_and_batches():
    agent = DADS("Point2D-v0", num_skills=2, **TINY_OFF)
    states = jax.tree.map(lambda *x: jnp.stack(x), *[agent.init(jax.random.key(i)) for i in range(2)])
    described = episode_descriptor(agent.eval_env, "auto")
    assert described.fn is None and (described.start, described.size, described.kind) == (2, 2, "observation")
    result = eqxrl.evaluate(agent, states, jax.random.key(1), num_episodes=3, descriptor="auto")
    assert result.returns.shape == (2, 3) and result.descriptors.shape == (2, 3, 2) and result.descriptor.shape == (2, 2)
    np.testing.assert_allclose(result.descriptors[..., 0], result.returns, atol=1e-5)


@pytest.mark.parametrize(
    "env, descriptor, match",
    [
        ("Point2D-v0", "z", r"evaluate\(descriptor\) must be one of \['auto', 'observation', 'xy', 'feet_contact'\], a callable"),
        ("Point2D-v0", 3, r"evaluate\(descriptor\) must be one of"),
        ("Point2D-v0", "xy", r"evaluate\(descriptor='xy'\) needs a brax env"),
        ("CartPole-v1", "auto", r"evaluate\(descriptor='auto'\) knows the descriptors of brax envs"),
        ("Point2D-v0", lambda s, o: s.pos[:0], r"evaluate\(descriptor\) must give a non-empty vector, got shape \(0,\)"),
    ],
)
def test_episode_descriptor_bad_input(env, descriptor, match):
    with pytest.raises(ValueError, match=match):
        episode_descriptor(make(env), descriptor)


def test_episode_descriptor_refuses_a_wrapper_that_changes_the_observation():
    env = NormalizeObservation(DescriptorWrapper(make("Point2D-v0")))
    with pytest.raises(ValueError, match=r"evaluate\(descriptor='auto'\) .* but NormalizeObservation above it"):
        episode_descriptor(env, "auto")
    assert episode_descriptor(env, lambda s, o: s.pos).size == 2  # a callable reads the state instead
    assert episode_descriptor(env, lambda s, o: s.pos[0]).size == 1  # a scalar is a descriptor of size 1


def test_evaluate_descriptor_bad_input_names_evaluate():
    agent = PPO("CartPole-v1", **TINY_PPO)
    with pytest.raises(ValueError, match=r"evaluate\(descriptor='auto'\) knows"):
        eqxrl.evaluate(agent, agent.init(jax.random.key(0)), jax.random.key(1), num_episodes=2, descriptor="auto")


# ----------------------------------------------------------------------- novelty
def test_novelty_is_the_mean_distance_to_the_k_nearest_others():
    d = jnp.array([[0.0, 0.0], [1.0, 0.0], [3.0, 0.0], [0.0, 4.0]])
    np.testing.assert_allclose(novelty(d, 1), [1.0, 1.0, 2.0, 4.0])
    np.testing.assert_allclose(novelty(d, 2), [2.0, 1.5, 2.5, (4.0 + np.sqrt(17.0)) / 2], rtol=1e-6)
    nan = d.at[3].set(jnp.nan)  # NaN: its own novelty is NaN and no one's neighbour
    np.testing.assert_allclose(novelty(nan, 1), [1.0, 1.0, 2.0, np.nan])
    returns = jnp.array([[1.0, 3.0], [0.0, 0.0], [2.0, 2.0], [1.0, 1.0]])
    np.testing.assert_allclose(Novelty(k=1).score(returns, d), [1.0, 1.0, 2.0, 4.0])
    np.testing.assert_allclose(Novelty(k=1, novelty_weight=0.5, return_weight=2.0).score(returns, d), [4.5, 0.5, 5.0, 4.0])
    np.testing.assert_allclose(Novelty(k=1, novelty_weight=0.0, return_weight=1.0).score(returns, nan), [2.0, 0.0, 2.0, 1.0])


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(k=0), r"Novelty\(k\) must be a positive int, got 0"),
        (dict(k=2.5), r"Novelty\(k\) must be a positive int, got 2.5"),
        (dict(novelty_weight=-1.0), r"Novelty\(novelty_weight\) must be a finite number >= 0, got -1.0"),
        (dict(return_weight=float("inf")), r"Novelty\(return_weight\) must be a finite number >= 0, got inf"),
        (dict(novelty_weight=0.0), r"Novelty\(novelty_weight, return_weight\) must not both be 0"),
    ],
)
def test_novelty_bad_input(kwargs, match):
    with pytest.raises(ValueError, match=match):
        Novelty(**kwargs)


def _sac_point(**kw):
    args = dict(population_size=3, ready=8, eval_episodes=2, max_eval_steps=10, exploit=Truncation(1, 1))
    args.update(kw)
    return PBT(SAC("Point2D-v0", **TINY_OFF), {"actor_learning_rate": LogUniform(1e-4, 1e-2)}, **args)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(fitness=Novelty()), r"PBT\(fitness=Novelty\(...\)\) needs PBT\(descriptor=...\)"),
        (dict(fitness=Novelty(k=3), descriptor="auto"), r"PBT\(fitness=Novelty\(k=3\)\) must have k <= population_size - 1 = 2"),
        (dict(fitness=3.0), r"PBT\(fitness\) must be None, Novelty\(...\) or a callable"),
        (dict(descriptor="xy"), r"PBT\(descriptor='xy'\) needs a brax env"),
        (dict(descriptor="height"), r"PBT\(descriptor\) must be one of \['auto', 'observation', 'xy', 'feet_contact'\]"),
        (dict(descriptor="feet_contact"), r"PBT\(descriptor='feet_contact'\) needs a brax locomotion env"),
    ],
)
def test_pbt_qd_bad_input(kwargs, match):
    with pytest.raises(ValueError, match=match):
        _sac_point(**kwargs)


def test_evaluation_runs_when_something_reads_it():
    assert _sac_point().evaluator().num_episodes == 2 and _sac_point().episode_descriptor() is None
    custom = lambda a, s, k: a.actor_learning_rate  # noqa: E731
    assert _sac_point(fitness=custom).evaluator() is None  # a custom fitness alone: no extra evaluation
    assert _sac_point(fitness=custom, descriptor="auto").evaluator() is not None
    assert _sac_point(fitness=Novelty(k=2), descriptor="auto").episode_descriptor().size == 2


# ----------------------------------------------------------------------- PBT
@pytest.mark.slow
def test_pbt_sac_novelty_records_descriptors_and_episode_returns(tmp_path):
    fitness = Novelty(k=2, return_weight=1.0)
    pbt = _sac_point(fitness=fitness, descriptor="auto")
    _, history = pbt.run(jax.random.key(0), 2 * pbt.steps_per_generation, progress=False, run_dir=tmp_path / "r")
    assert history.episode_returns.shape == (2, 3, 2) and history.descriptor.shape == (2, 3, 2)
    # Point2D: an episode's return is its final x, so the mean final x is the mean return.
    np.testing.assert_allclose(history.descriptor[..., 0], history.episode_returns.mean(axis=-1), atol=1e-5)
    assert np.ptp(history.descriptor[-1], axis=0).max() > 0  # members differ: the fitness below is not trivial
    for g in range(2):
        expected = fitness.score(jnp.asarray(history.episode_returns[g], jnp.float32), jnp.asarray(history.descriptor[g], jnp.float32))
        np.testing.assert_allclose(history.fitness[g], expected, rtol=1e-5, atol=1e-6)
    # history.csv: the new columns after the old ones, read back as they were.
    with open(tmp_path / "r" / "history.csv") as f:
        header = f.readline().strip().split(",")
    assert header == ["generation", "member", "env_steps", "fitness", "train_return", "parent", "actor_learning_rate",
                      "episode_return/0", "episode_return/1", "descriptor/0", "descriptor/1"]  # fmt: skip
    back = read_history_csv(tmp_path / "r" / "history.csv")
    np.testing.assert_array_equal(back.descriptor, history.descriptor)
    np.testing.assert_array_equal(back.episode_returns, history.episode_returns)
    assert list(back.hyperparameters) == ["actor_learning_rate"] and back.eval_return is None
    # pbt.json describes the fitness and descriptor, and rebuilds them.
    config = json.loads((tmp_path / "r" / "pbt.json").read_text())
    assert config["fitness"] == {"type": "Novelty", "k": 2, "novelty_weight": 1.0, "return_weight": 1.0}
    assert config["descriptor"] == "auto"
    rebuilt = pbt_from_config(config)
    assert rebuilt.fitness == fitness and rebuilt.descriptor == "auto"
    # The checkpoint's records hold them too (what resume reads back).
    records = load_records(tmp_path / "r", pbt, 2 * pbt.steps_per_generation)
    np.testing.assert_array_equal(history_from_records(pbt, records).descriptor, history.descriptor)


@pytest.mark.slow
def test_pbt_dads_default_fitness_is_the_mean_of_the_episode_returns():
    pbt = PBT(DADS("Point2D-v0", num_skills=2, **TINY_OFF), {"dynamics_learning_rate": LogUniform(1e-4, 1e-2)},
              population_size=2, ready=8, eval_episodes=3, max_eval_steps=10, descriptor="auto")  # fmt: skip
    _, history = pbt.run(jax.random.key(0), pbt.steps_per_generation, progress=False)
    assert history.episode_returns.shape == (1, 2, 3) and history.descriptor.shape == (1, 2, 2)
    np.testing.assert_allclose(history.fitness, history.episode_returns.mean(axis=-1), rtol=1e-6)
    np.testing.assert_allclose(history.descriptor[..., 0], history.fitness, atol=1e-5)
    assert np.abs(history.fitness).max() > 0


def _episode_return(transitions, mask):
    return jnp.sum(jnp.where(mask, transitions["reward"], 0.0))


@pytest.mark.slow
def test_pbt_records_trajectory_descriptors():
    # A descriptor of the whole episode: its summed reward over the masked steps is the return.
    pbt = _sac_point(descriptor=TrajectoryDescriptor(_episode_return), fitness=Novelty(k=2))
    assert pbt.episode_descriptor().size == 1
    _, history = pbt.run(jax.random.key(0), 2 * pbt.steps_per_generation, progress=False)
    assert history.descriptor.shape == (2, 3, 1)
    np.testing.assert_allclose(history.descriptor[..., 0], history.episode_returns.mean(axis=-1), atol=1e-5)
    assert np.ptp(history.descriptor[-1]) > 0  # members differ: the check above can fail
    assert pbt_config(pbt, 16)["descriptor"]["type"] == "custom"  # given again on resume, as a callable is


def test_custom_descriptor_must_be_given_again():
    pbt = _sac_point(descriptor=lambda s, o: s.pos)
    config = pbt_config(pbt, 16)
    assert config["descriptor"]["type"] == "custom"
    with pytest.raises(ValueError, match=r"custom descriptor .* resume\(run_dir, descriptor=...\)"):
        pbt_from_config(config)
    assert pbt_from_config(config, descriptor=lambda s, o: s.pos).episode_descriptor().size == 2


def test_checkpoint_without_episode_returns_reads_as_nan(tmp_path):
    # A run directory from before PBT kept per-episode returns: its records lack them.
    custom = _sac_point(fitness=lambda a, s, k: a.actor_learning_rate)
    population = custom.init(jax.random.key(0))
    record = {"fitness": np.zeros(3, np.float32), "train_return": np.zeros(3, np.float32),
              "source": np.arange(3, dtype=np.int32), "hp/actor_learning_rate": np.ones(3, np.float32)}  # fmt: skip
    save_population(tmp_path, custom, 16, population, [record])
    records = load_records(tmp_path, _sac_point(), 16)
    assert records[0]["episode_returns"].shape == (3, 2) and np.isnan(records[0]["episode_returns"]).all()


def test_history_csv_columns_round_trip_and_old_files(tmp_path):
    history = History(
        env_steps=np.array([8, 16]), fitness=np.array([[1.0, 2.0], [3.0, np.nan]]),
        train_return=np.zeros((2, 2)), parent=np.array([[-1, -1], [1, 1]]),
        hyperparameters={"learning_rate": np.full((2, 2), 1e-3)}, eval_return=np.array([[0.5, np.nan], [1.0, 2.0]]),
        episode_returns=np.arange(12.0).reshape(2, 2, 3), descriptor=np.arange(8.0).reshape(2, 2, 2) - 3.5,
    )  # fmt: skip
    write_history_csv(tmp_path / "h.csv", history)
    back = read_history_csv(tmp_path / "h.csv")
    for name in ("fitness", "eval_return", "episode_returns", "descriptor"):
        np.testing.assert_array_equal(getattr(back, name), getattr(history, name))
    assert list(back.hyperparameters) == ["learning_rate"]
    # A history.csv written before these columns: hyperparameters only, the rest None.
    (tmp_path / "old.csv").write_text("generation,member,env_steps,fitness,train_return,parent,lr\n0,0,8,1.0,0.5,-1,0.1\n")
    old = read_history_csv(tmp_path / "old.csv")
    assert list(old.hyperparameters) == ["lr"] and old.episode_returns is None and old.descriptor is None


def test_history_from_records_without_episode_returns_reads_nan():
    # Records from before PBT kept per-episode returns (or written by hand).
    record = {"fitness": np.array([1.0, 2.0], np.float32), "train_return": np.zeros(2, np.float32),
              "source": np.array([0, 1], np.int32), "hp/actor_learning_rate": np.ones(2, np.float32)}  # fmt: skip
    pbt = _sac_point(population_size=2)
    history = history_from_records(pbt, [record, record])
    assert history.episode_returns.shape == (2, 2, 2) and np.isnan(history.episode_returns).all()
    with_returns = dict(record, episode_returns=np.array([[1.0, 2.0], [3.0, 4.0]], np.float32))
    np.testing.assert_array_equal(history_from_records(pbt, [with_returns]).episode_returns, [[[1.0, 2.0], [3.0, 4.0]]])


# ----------------------------------------------------------------------- CLI
def test_parse_fitness():
    assert parse_fitness("return") is None
    assert parse_fitness("novelty") == Novelty()
    assert parse_fitness("novelty:5") == Novelty(k=5)
    assert parse_fitness("novelty:2:0.5") == Novelty(k=2, return_weight=0.5)


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--fitness", "best"], r"argument --fitness: expected return or novelty\[:K\[:RETURN_WEIGHT\]\], got 'best'"),
        (["--fitness", "novelty:0"], r"argument --fitness: 'novelty:0': Novelty\(k\) must be a positive int, got 0"),
        (["--fitness", "novelty:2:x"], r"argument --fitness: 'novelty:2:x': could not convert"),
        (["--fitness", "novelty"], r"PBT\(fitness=Novelty\(...\)\) needs PBT\(descriptor=...\)"),
        (["--eval-descriptor", "z"], r"argument --eval-descriptor: invalid choice: 'z'"),
        (["--eval-descriptor", "xy"], r"PBT\(descriptor='xy'\) needs a brax env"),
        (["--eval-descriptor", "feet_contact"], r"PBT\(descriptor='feet_contact'\) needs a brax locomotion env"),
    ],
)
def test_pbt_cli_qd_bad_arguments(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["pbt", "sac", "--env", "Point2D-v0", *argv])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert __import__("re").search(message, err[-1]), err[-1]


# ------------------------------------------------------- descriptors of the whole episode
def _time_trajectory(transitions, mask):
    # CartPole's `time` after step t of an episode is t + 1: its mean over the episode's
    # steps, the number of steps, and the reward summed over them.
    time = transitions["next_state"].time.astype(jnp.float32)
    m = mask.astype(jnp.float32)
    return jnp.stack([jnp.sum(time * m) / jnp.sum(m), jnp.sum(m), jnp.sum(transitions["reward"] * m)])


def test_trajectory_descriptor_over_a_known_masked_trajectory():
    # Episodes of different lengths L (= the return): the hand-computed descriptor of each is
    # (mean of 1..L, L, L); the mask cuts each episode where it ended, not where the loop did.
    agent = PPO("CartPole-v1", **TINY_PPO)
    state = agent.init(jax.random.key(0))
    described = episode_descriptor(agent.eval_env, TrajectoryDescriptor(_time_trajectory))
    assert isinstance(described, TrajectoryDescriptor) and (described.size, described.kind) == (3, "_time_trajectory")
    result = eqxrl.evaluate(agent, state, jax.random.key(1), num_episodes=6, deterministic=False,
                            descriptor=TrajectoryDescriptor(_time_trajectory))  # fmt: skip
    lengths = np.asarray(result.returns)
    assert len(set(lengths.tolist())) > 1
    np.testing.assert_allclose(result.descriptors, np.stack([(lengths + 1) / 2, lengths, lengths], axis=1), rtol=1e-6)
    # `features` keeps a part of each state; the built-in mean of it over the episode
    kept = TrajectoryDescriptor(mean_over_episode, features=lambda s, o: s.time)
    again = eqxrl.evaluate(agent, state, jax.random.key(1), num_episodes=6, deterministic=False, descriptor=kept)
    np.testing.assert_allclose(again.descriptors[:, 0], (lengths + 1) / 2, rtol=1e-6)
    np.testing.assert_array_equal(again.returns, result.returns)


def test_mean_over_episode_and_the_buffers_by_hand():
    transitions = {"next_state": jnp.array([[1.0, 0.0], [0.0, 0.0], [1.0, 1.0], [5.0, 5.0]])}
    np.testing.assert_allclose(mean_over_episode(transitions, jnp.array([True, True, True, False])), [2 / 3, 1 / 3])
    np.testing.assert_allclose(mean_over_episode(transitions, jnp.zeros(4, bool)), [0.0, 0.0])  # no step
    fn = TrajectoryDescriptor(mean_over_episode)
    carry = fn.start({"next_state": jnp.zeros((2, 1))}, num_episodes=2, max_steps=3)
    for t, (inside, x) in enumerate([([True, True], [1.0, 2.0]), ([True, False], [3.0, 9.0])]):
        carry = fn.step(carry, jnp.int32(t), jnp.array(inside), {"next_state": jnp.array(x)[:, None]})
    np.testing.assert_allclose(fn.finish(carry), [[2.0], [2.0]])  # episode 0: (1 + 3) / 2; episode 1: 2


@pytest.mark.parametrize(
    "descriptor, match",
    [
        (lambda: TrajectoryDescriptor(3), r"TrajectoryDescriptor\(fn\) must be a callable \(transitions, mask\) -> vector, got 3"),
        (lambda: TrajectoryDescriptor(mean_over_episode, features=5), r"TrajectoryDescriptor\(features\) must be None or a callable"),
        (lambda: TrajectoryDescriptor(lambda tr, m: tr["reward"][:0]), r"evaluate\(descriptor\) must give a non-empty vector, got shape \(0,\)"),
        (lambda: TrajectoryDescriptor(lambda tr, m: tr["nope"], kind="mine"),
         r"evaluate\(descriptor\): the TrajectoryDescriptor 'mine' failed on env 'CartPole-v1'.s transitions: 'nope'"),
        (lambda: "feet_contact", r"evaluate\(descriptor='feet_contact'\) needs a brax locomotion env \(brax/ant, .*got env 'CartPole-v1'"),
        (lambda: "feet", r"evaluate\(descriptor\) must be one of \['auto', 'observation', 'xy', 'feet_contact'\], a callable"),
    ],
)  # fmt: skip
def test_trajectory_descriptor_bad_input(descriptor, match):
    with no_runtime_typecheck(), pytest.raises(ValueError, match=match):
        episode_descriptor(make("CartPole-v1"), descriptor())


def _qdax_feet_contact(transitions, mask):
    # The direct computation: QDax's formula (a foot touches when a contact on its link has
    # distance <= 0) on brax's contacts of each step's whole state, averaged over the episode.
    from brax import contact as brax_contact

    sys = make("brax/ant").unwrapped.brax_env.sys
    feet = jnp.array([2, 4, 6, 8])

    def one(x):
        with jax.numpy_dtype_promotion("standard"):
            c = brax_contact.get(sys, x)
        return jnp.any((c.link_idx[1][None, :] == feet[:, None]) & (c.dist[None, :] <= 0), axis=-1)

    touching = jax.vmap(one)(transitions["next_state"].pipeline_state.x).astype(jnp.float32)
    m = mask.astype(jnp.float32)
    return jnp.sum(touching * m[:, None], axis=0) / jnp.sum(m)


@pytest.mark.slow
def test_brax_feet_contact_fractions_on_ant():
    agent = PPO("brax/ant", **TINY_PPO)
    state = agent.init(jax.random.key(0))
    key = jax.random.key(1)
    result = eqxrl.evaluate(agent, state, key, num_episodes=2, deterministic=False, max_steps=25, descriptor="feet_contact")
    assert result.descriptors.shape == (2, 4)
    d = np.asarray(result.descriptors)
    assert np.all((d >= 0) & (d <= 1)) and d.max() > 0  # fractions, and some foot touched the ground
    direct = eqxrl.evaluate(agent, state, key, num_episodes=2, deterministic=False, max_steps=25,
                            descriptor=TrajectoryDescriptor(_qdax_feet_contact))  # fmt: skip
    np.testing.assert_allclose(d, direct.descriptors, atol=1e-6)
    # the named descriptor compiles to the same program each time (its parts compare equal)
    assert episode_descriptor(agent.eval_env, "feet_contact") == episode_descriptor(agent.eval_env, "feet_contact")
