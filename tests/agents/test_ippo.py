"""IPPO: configuration, the seat views of a team env, acting, metrics, and learning on MPE."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from learning import most_above, per_seed_returns, train_seeds, untrained_returns
from typecheck import no_runtime_typecheck

import eqxrl
from eqxrl.agents import IPPO, PPO
from eqxrl.envs import make
from eqxrl.testing.probes import MultiAgentMaskedActions

SPREAD = "jaxmarl/MPE_simple_spread_v3"
TINY = dict(num_envs=2, rollout_length=8, num_epochs=1, num_minibatches=1, hidden_sizes=(8,))
seats = __import__("eqxrl.agents._ippo_envs", fromlist=["AgentSeat"])  # (private: IPPO's seat views of a team env are internal)


def test_ippo_is_composed_of_a_ppo_on_a_seat_of_the_team_env():
    agent = IPPO(SPREAD, **TINY)
    assert not isinstance(agent, PPO) and type(agent.ppo) is PPO and agent.share_parameters and agent.agent_ids
    assert agent.ppo.num_envs == 2 and agent.ppo.hidden_sizes == (8,) and agent.ppo.env.agent_ids
    assert agent.team_env == make(SPREAD) and agent.env.name == SPREAD and agent.num_agents == 3
    assert agent.eval_env == make(SPREAD) and agent.steps_per_iteration == 2 * 8
    assert agent.learner.num_envs == 6  # every agent of the 2 team envs is one of PPO's envs
    assert IPPO(SPREAD, **TINY, share_parameters=False).learner is not None
    assert IPPO(SPREAD, **TINY, share_parameters=False).learner.num_envs == 2
    # PPO's names are IPPO's: as keywords, in config.json (flat), and for --set, sweeps and PBT
    assert "ppo.optimizer.learning_rate" in agent.hyperparameters() and agent.config()["env"] == SPREAD
    assert list(IPPO.keywords())[-2:] == ["share_parameters", "agent_ids"] and "num_minibatches" in IPPO.keywords()
    config = agent.config()
    assert config["num_envs"] == 2 and config["share_parameters"] and "ppo" not in config and "vector_env" not in config
    faster = eqxrl.agents.set_hyperparameter(agent, "learning_rate", 1e-3)
    assert float(faster.ppo.optimizer.learning_rate) == pytest.approx(1e-3) and float(agent.ppo.learning_rate) == pytest.approx(2.5e-4)
    given = IPPO(SPREAD, ppo=agent.ppo)
    assert given.ppo is agent.ppo and given.config() == config
    with pytest.raises(ValueError, match=r"^IPPO\(ppo\) is the PPO every agent learns with: give it, or PPO's fields \(\['gamma'\]\), not both$"):
        IPPO(SPREAD, ppo=agent.ppo, gamma=0.9)
    with pytest.raises(ValueError, match=r"^IPPO\(ppo\) must be a PPO on a seat of the team env \(AgentSeat\(team, agent_ids=False\)\)"):
        IPPO(SPREAD, ppo=agent.ppo, agent_ids=False)
    with pytest.raises(TypeError, match=r"IPPO got unexpected keyword argument\(s\) \['vector_env'\]"):
        IPPO(SPREAD, vector_env=None)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(env="CartPole-v1"), r"^IPPO\(env\) must be a multi-agent env"),
        (dict(gamma=1.5), r"^IPPO\(gamma\) must be in \[0, 1\], got 1.5"),
        (dict(num_minibatches=3), r"^IPPO\(num_minibatches=3\) must divide num_envs \* rollout_length = 16"),
        (dict(share_parameters=1), r"^IPPO\(share_parameters\) must be True or False, got 1$"),
    ],
)
def test_ippo_names_bad_configuration(kwargs, match):
    kwargs = {"env": SPREAD, **TINY, **kwargs}
    with no_runtime_typecheck(), pytest.raises(ValueError, match=match):
        IPPO(**kwargs)


def test_agent_ids_need_flat_box_or_dict_observations():
    with no_runtime_typecheck():
        with pytest.raises(ValueError, match=r"^IPPO\(agent_ids=True\) needs 1-D Box, MultiDiscrete, 1-D MultiBinary, Dict or Tuple observations per agent"):
            seats.seat_space(eqxrl.envs.Discrete(3), 2, True)
        taken = eqxrl.envs.Dict({"agent_id": eqxrl.envs.Discrete(2)})
        with pytest.raises(ValueError, match=r"^IPPO\(agent_ids=True\) adds an 'agent_id' entry, and the observations have one already$"):
            seats.seat_space(taken, 2, True)
    assert seats.seat_space(eqxrl.envs.Discrete(3), 2, False) == eqxrl.envs.Discrete(3)
    agent = MultiAgentMaskedActions().agent_observation_space
    assert seats.seat_space(agent, 2, True).spaces == {**agent.spaces, "agent_id": eqxrl.envs.Box(0.0, 1.0, (2,))}
    pair = eqxrl.envs.Tuple((eqxrl.envs.Box(-1.0, 1.0, (3,)), eqxrl.envs.Discrete(4)))
    assert seats.seat_space(pair, 2, True) == eqxrl.envs.Tuple((*pair.spaces, eqxrl.envs.Box(0.0, 1.0, (2,))))
    high = np.array([1.0, 2.0, 1.0, 1.0], np.float32)  # MultiDiscrete entries as floats, then the id
    assert seats.seat_space(eqxrl.envs.MultiDiscrete((2, 3)), 2, True) == eqxrl.envs.Box(0.0, high, (4,))
    ids = seats.with_agent_ids((jnp.zeros((5, 3)), jnp.ones((5,), jnp.int32)), 1, 2, (5,))
    assert len(ids) == 3 and np.array_equal(ids[2], np.tile([0.0, 1.0], (5, 1)))


def test_a_seat_outside_ippos_vmap_is_agent_0_with_every_agent_taking_its_action():
    team = make(SPREAD)
    seat = seats.AgentSeat(team, agent_ids=True)
    assert seat.observation_space.shape == (21,) and seat.action_space == eqxrl.envs.Discrete(5)
    key = jax.random.key(0)
    s, ts = seat.reset(key)
    ts_state, team_ts = team.reset(key)
    np.testing.assert_array_equal(ts.obs, jnp.concatenate([team_ts.obs[0], jnp.array([1.0, 0.0, 0.0])]))
    s, ts = seat.step(key, s, jnp.int32(2))
    _, team_ts = team.step(key, ts_state, jnp.full((3,), 2, jnp.int32))
    np.testing.assert_array_equal(ts.reward, team_ts.info["agent_rewards"][0])


@pytest.mark.slow
def test_seats_under_the_agent_axis_step_one_team_env_with_the_joint_action():
    team = make(SPREAD)
    seat = seats.AgentSeat(team)
    keys = jax.random.split(jax.random.key(1), 3)  # different per lane: lane 0's is used
    actions = jnp.array([0, 3, 4], jnp.int32)

    def lane(key, action):
        s, _ = seat.reset(key)
        return seat.step(key, s, action)

    states, ts = jax.vmap(lane, axis_name=seats.AGENT_AXIS)(keys, actions)
    s0, _ = team.reset(keys[0])
    want_state, want = team.step(keys[0], s0, actions)
    for i in range(3):
        np.testing.assert_array_equal(ts.obs[i], want.obs[i])
        np.testing.assert_array_equal(ts.reward[i], want.info["agent_rewards"][i])
        np.testing.assert_array_equal(states.p_pos[i], want_state.p_pos)


@pytest.mark.slow
def test_shared_seats_flatten_env_major_and_count_finished_episodes():
    team = make(SPREAD)
    env = seats.SharedSeats(team, 2, True)
    state, ts = env.reset(jax.random.key(0))
    assert ts.obs.shape == (6, 21) and ts.reward.shape == (6,)
    np.testing.assert_array_equal(ts.obs[4, 18:], [0.0, 1.0, 0.0])  # env 1, agent 1
    step = jax.jit(lambda k, s, a: env.step(k, s, a))
    total = jnp.zeros((3,))
    for t in range(26):
        state, ts = step(jax.random.key(t), state, jnp.zeros((6,), jnp.int32))
        total = total + ts.reward.reshape(2, 3).sum(0)
    assert bool(ts.truncated.all()) and float(state.finished) == 2.0
    np.testing.assert_allclose(state.finished_return, total, rtol=1e-5)
    np.testing.assert_allclose(ts.info["episode_return"].reshape(2, 3).sum(0), total, rtol=1e-5)
    cleared = state.clear()
    assert float(cleared.finished) == 0.0 and not np.any(np.asarray(cleared.finished_return))


@pytest.mark.parametrize("share", [True, False])
@pytest.mark.slow
def test_act_gives_every_agent_an_action(share, getkey):
    agent = IPPO(SPREAD, **TINY, share_parameters=share)
    state = agent.init(getkey())
    obs = jnp.zeros((4, 3, 18))
    assert agent.act(state, obs, getkey()).shape == (4, 3)
    assert agent.act(state, obs[0], deterministic=True).shape == (3,)
    with pytest.raises(ValueError, match=r"IPPO: obs must have shape \(\*batch, 3, 18\), got \(4, 18\)"):
        agent.act(state, obs[:, 0], getkey())
    with pytest.raises(ValueError, match=r"IPPO.act\(key\) is required unless deterministic=True"):
        agent.act(state, obs)


@pytest.mark.slow
@pytest.mark.parametrize("share", [True, False])
def test_metrics_have_team_and_per_agent_returns(share, getkey):
    agent = IPPO(SPREAD, **{**TINY, "rollout_length": 16}, share_parameters=share, agent_ids=not share)
    state, metrics = eqxrl.train(agent, getkey(), 4 * agent.steps_per_iteration, progress=False)
    np.testing.assert_array_equal(metrics["env_steps"], [32, 64, 96, 128])
    per_agent = np.stack([metrics[f"episode_return_agent_{i}"] for i in range(3)])
    done = ~np.isnan(metrics["episode_return"])
    assert done.any() and np.all(np.isnan(metrics["episode_return"][~done]))
    np.testing.assert_allclose(metrics["episode_return"][done], per_agent[:, done].sum(0), rtol=1e-5)
    if not share:  # one network per agent
        assert jax.tree.leaves(state.actor)[0].shape[0] == 3 and state.opt_state is not None
    returns = eqxrl.evaluate(agent, state, getkey(), num_episodes=3)
    assert returns.shape == (3,) and np.all(np.isfinite(returns))


@pytest.mark.learning
def test_ippo_learns_simple_spread_well_above_random():
    agent = IPPO(SPREAD, num_envs=16, rollout_length=32, num_minibatches=2, hidden_sizes=(64, 64), learning_rate=1e-3)
    trained = per_seed_returns(agent, train_seeds(agent, 150_000)[0], num_episodes=32)
    untrained = untrained_returns(agent, num_episodes=32, deterministic=False)  # the initial policies, sampled
    # Team returns are negative distances: closer to 0 is better. Bound: 2 of 3 seeds 15% closer to
    # 0 than their untrained policy (native, 3 seeds: 0.23, 0.26, 0.27; over 4, natively and with AVX2:
    # 0.24, 0.26, 0.30, 0.29).
    assert most_above((trained - untrained) / np.abs(untrained), 0.15), (untrained, trained)


@pytest.mark.slow
@pytest.mark.parametrize("share", [True, pytest.param(False, marks=pytest.mark.exhaustive)])  # (tests/tiers.py)
def test_recurrent_ippo_trains_and_evaluates_carrying_every_agents_memory(share, getkey):
    from eqxrl.components import GRUTorso

    agent = IPPO(
        SPREAD, num_envs=2, rollout_length=8, num_minibatches=2, share_parameters=share, shared_torso=True,
        actor_torso=GRUTorso(hidden_size=8, encoder_sizes=(8,)),
    )  # fmt: skip
    state, metrics = eqxrl.train(agent, getkey(), 64, progress=False)
    assert np.all(np.isfinite(metrics["entropy"]))
    carry = agent.initial_carry(state, (5,))
    # One hidden state per agent of every team env: (5 envs, 3 agents) shared, agent-major when separate.
    assert carry.shape == ((5, 3, 8) if share else (3, 5, 8))
    team_obs = jnp.zeros((5, *agent.team_env.observation_space.shape))
    actions, carry = agent.act_with_carry(state, team_obs, carry, jnp.ones((5,), bool), getkey())
    assert actions.shape == (5, 3)
    for deterministic in (True, False):
        returns = eqxrl.evaluate(agent, state, getkey(), num_episodes=2, deterministic=deterministic)
        assert returns.shape == (2,) and np.all(np.isfinite(returns))


# ----------------------------------------------------------------------- Dict observations, action masks
PROBE = dict(num_envs=4, rollout_length=16, num_minibatches=2, hidden_sizes=(32,), learning_rate=3e-3)


def _random_team_obs(env, key, n):
    """`n` team observations of `MultiAgentMaskedActions` with random masks (every agent its own)."""
    masks = jax.vmap(env._draw)(jax.random.split(key, n))
    return jax.vmap(env._obs)(masks), masks


def _illegal_actions(agent, state, key, steps=64):
    """Illegal actions: taken in training (the probe's count), by `act` (greedy and sampled) on
    random masked team observations, and in rollouts of `eval_env` (as `evaluate` runs them).
    **Returns:** `({where: count}, the greedy action's best-legal fraction)`."""
    env = agent.team_env
    obs, masks = _random_team_obs(env, key, 256)
    counts = {"training": int(jnp.sum(eqxrl.envs.innermost_state(state.env_state).illegal))}
    best = None
    for deterministic in (True, False):
        how = "greedy" if deterministic else "sampled"
        actions = agent.act(state, obs, jax.random.fold_in(key, 1), deterministic=deterministic)
        legal = env.single.legal(masks, actions)
        counts[f"act, {how}"] = int(jnp.sum(~legal))
        if deterministic:
            best = float(jnp.mean(actions == env.single.best_action(masks)))

        @eqx.filter_jit
        def rollout(key):
            s, ts = agent.eval_env.reset(key)

            def step(carry, k):
                s, obs = carry
                s, ts = agent.eval_env.step(k, s, agent.act(state, obs, jax.random.fold_in(k, 1), deterministic))
                return (s, ts.obs), None

            return jax.lax.scan(step, (s, ts.obs), jax.random.split(key, steps))[0][0].illegal

        counts[f"evaluation, {how}"] = int(jnp.sum(rollout(jax.random.fold_in(key, 2))))
    return counts, best


@pytest.mark.slow
def test_untrained_ippo_acts_legally_on_dict_observations_with_masks(getkey):
    env = MultiAgentMaskedActions()
    for share in (True, False):
        agent = IPPO(env, **TINY, share_parameters=share)
        assert agent.learner.layout.entries == (("agent_id", (2,)), ("legal", (4,))) and agent.learner.layout.mask_size == 4
        state = agent.init(getkey())
        obs, masks = _random_team_obs(env, getkey(), 64)
        for deterministic in (True, False):
            actions = agent.act(state, obs, getkey(), deterministic=deterministic)
            assert actions.shape == (64, 2)
            assert bool(jnp.all(jnp.take_along_axis(masks, actions[..., None], axis=-1) == 1))
        one = jax.tree.map(lambda x: x[0], obs)
        assert agent.act(state, one, deterministic=True).shape == (2,)
    with no_runtime_typecheck():
        with pytest.raises(ValueError, match=r"^IPPO: obs\['legal'\] must have shape \(\*batch, 2, 4\), got \(64, 4\)$"):
            agent.act(state, {**obs, "legal": obs["legal"][:, 0]}, getkey())
        with pytest.raises(ValueError, match=r"^IPPO: obs must be a dict or tuple with the entries \['legal', 'action_mask'\]"):
            agent.act(state, {"legal": obs["legal"]}, getkey())


def test_a_recurrent_ippo_refuses_masks():
    from eqxrl.components import GRUTorso

    with no_runtime_typecheck(), pytest.raises(ValueError, match=r"^IPPO: a recurrent PPO does not take action masks yet"):
        IPPO(MultiAgentMaskedActions(), **TINY, shared_torso=True, actor_torso=GRUTorso(hidden_size=8))


@pytest.mark.slow
@pytest.mark.parametrize("share", [True, False])
def test_ippo_never_takes_an_illegal_action_and_learns_the_best_legal_one(share, getkey):
    agent = IPPO(MultiAgentMaskedActions(), **PROBE, share_parameters=share)
    state, metrics = eqxrl.train(agent, getkey(), 4_096, progress=False)
    counts, best = _illegal_actions(agent, state, getkey())
    assert not any(counts.values()), counts
    # A random legal action is the best one about 47% of the time.
    assert best >= 0.8, best
    returns = eqxrl.evaluate(agent, state, getkey(), num_episodes=4, max_steps=16)
    assert np.all(returns <= 2 * 16)  # 1 per agent and step at most, when every action is legal


@pytest.mark.slow
def test_ippo_with_multi_discrete_actions_honours_every_entrys_mask(getkey):
    """Every agent's action is MultiDiscrete((4, 4)), each entry masked on its own: PPO's factorised policy per seat."""
    env = MultiAgentMaskedActions(factors=2)
    agent = IPPO(env, **PROBE)
    assert agent.team_env.action_space.space == eqxrl.envs.MultiDiscrete((4, 4))
    state, _ = eqxrl.train(agent, getkey(), 4_096, progress=False)
    counts, best = _illegal_actions(agent, state, getkey())
    assert not any(counts.values()), counts
    assert best >= 0.8, best


@pytest.mark.slow
def test_an_ippo_that_ignores_its_masks_is_caught(monkeypatch, getkey):
    import eqxrl.agents._ppo as ppo_module  # (private: the mutation replaces `with_mask` where PPO looks it up)

    monkeypatch.setattr(ppo_module, "with_mask", lambda dist, mask: dist)  # the mutation: masks dropped
    # (a configuration of its own: no other test's compiled program is reused, or reuses this one)
    agent = IPPO(MultiAgentMaskedActions(num_actions=5), **{**PROBE, "rollout_length": 8})
    state, _ = eqxrl.train(agent, getkey(), 1_024, progress=False)
    counts, _ = _illegal_actions(agent, state, getkey())
    assert all(counts.values()), counts


@pytest.mark.slow
@pytest.mark.parametrize("share", [True, False])
def test_ippo_trains_on_dict_observations_without_masks(share, getkey):
    env = MultiAgentMaskedActions(masks=False)
    agent = IPPO(env, **TINY, share_parameters=share)
    assert agent.learner.layout.mask_size == 0
    state = agent.init(getkey())
    state, metrics = eqx.filter_jit(agent.train_iteration)(state, eqxrl.agents.Clock(jnp.int32(0), jnp.int32(2)))
    assert np.isfinite(float(metrics["loss"])) and int(metrics["env_steps"]) == 16
    obs, _ = _random_team_obs(env, getkey(), 3)
    assert agent.act(state, obs, getkey()).shape == (3, 2)
    # Without masks nothing stops the illegal actions the probe pays most for.
    assert int(jnp.sum(eqxrl.envs.innermost_state(state.env_state).illegal)) > 0


@pytest.mark.slow
def test_ippo_trains_and_evaluates_on_smax_with_its_legal_actions(getkey):
    from jaxmarl.environments.smax import map_name_to_scenario

    env = make("jaxmarl/HeuristicEnemySMAX", truncation=False, scenario=map_name_to_scenario("3m"))
    agent = IPPO(env, **TINY)
    state, metrics = eqxrl.train(agent, getkey(), 2 * agent.steps_per_iteration, progress=False)
    assert np.all(np.isfinite(metrics["loss"]))
    assert np.all(metrics["entropy"] < np.log(8))  # never more than the legal actions' entropy
    returns = eqxrl.evaluate(agent, state, getkey(), num_episodes=2, max_steps=20)
    assert returns.shape == (2,) and np.all(np.isfinite(returns))
