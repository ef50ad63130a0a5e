"""MAPPO: the centralised critic's input (concatenated observations, or the env's world state),
acting on the team's own observations, configuration messages, and learning on MPE."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from learning import most_above, per_seed_returns, train_seeds, untrained_returns
from typecheck import no_runtime_typecheck

import eqxrl

from eqxrl.agents import IPPO, MAPPO, PPO
from eqxrl.components import MLPTorso

SPREAD = "jaxmarl/MPE_simple_spread_v3"
TINY = dict(num_envs=2, rollout_length=8, num_epochs=1, num_minibatches=1, hidden_sizes=(8,))


def _first_layer(head):
    torso = head.torso.net  # (Encoder -> SelectTorso's network -> the MLP; the team critic's -> its Encoder -> the MLP)
    return (torso.net.net if isinstance(torso.net, eqxrl.components.Encoder) else torso.net).layers[0].weight


def test_the_critic_sees_every_agents_observation_and_the_actor_its_own():
    agent = MAPPO(SPREAD, **TINY)
    assert agent.global_state_kind == "observations" and agent.num_agents == 3
    assert isinstance(agent.ippo, IPPO) and agent.learner.num_envs == 6  # every agent's seat, parameters shared
    # composed of a PPO on a seat of the plain team env, whose fields are MAPPO's keywords (config.json: flat)
    assert type(agent.ppo) is PPO and agent.ppo.num_envs == 2 and agent.ppo.actor_torso is None
    assert "actor_epochs" not in MAPPO.keywords() and list(MAPPO.keywords())[-1] == "global_state"
    assert agent.config()["hidden_sizes"] == [8] and "ppo.optimizer.learning_rate" in agent.hyperparameters()
    # shared parameters: a seat stores what IPPO's does (the team's seats together hold the global state)
    assert agent.whole_teams and agent.learner.train_env.minibatch_group == 3
    seat = agent.learner.env.observation_space.spaces
    assert {k: v.shape for k, v in seat.items()} == {"obs": (18,), "agent_id": (3,)}
    state = jax.eval_shape(agent.init, jax.random.key(0))  # (shapes only: nothing compiled)
    assert _first_layer(state.critic).shape == (54 + 3, 8)  # the 3 agents' observations, and the agent's id
    assert _first_layer(state.actor).shape == (18 + 3, 8)  # its own observation and id
    no_ids = jax.eval_shape(MAPPO(SPREAD, **TINY, agent_ids=False).init, jax.random.key(0))
    assert _first_layer(no_ids.actor).shape == (18, 8) and _first_layer(no_ids.critic).shape == (57, 8)
    # separate parameters (one PPO per agent) or normalised observations: the whole state in every seat
    for other in (MAPPO(SPREAD, **TINY, share_parameters=False), MAPPO(SPREAD, **TINY, normalize_observations=True)):
        assert not other.whole_teams and getattr(other.learner.train_env, "minibatch_group", 1) == 1
        seat = other.learner.env.observation_space.spaces
        assert {k: v.shape for k, v in seat.items()} == {"obs": (18,), "global_state": (54,), "agent_id": (3,)}
        assert _first_layer(jax.eval_shape(other.init, jax.random.key(0)).critic).shape[-2:] == (57, 8)
    assert IPPO(SPREAD, **TINY).learner.train_env.minibatch_group == 1  # (IPPO's minibatches: single seats)


def test_the_global_state_is_the_concatenation_and_the_critic_reads_it():
    full = MAPPO(SPREAD, **TINY, share_parameters=False).central_team  # (the whole state in every seat)
    _, ts = full.reset(jax.random.key(1))
    np.testing.assert_array_equal(ts.obs["global_state"], jnp.broadcast_to(ts.obs["obs"].reshape(-1), (3, 54)))
    x = {"obs": ts.obs["obs"], "agent_id": jnp.eye(3)}  # (one team's 3 seats)
    inputs = jnp.concatenate([jnp.broadcast_to(ts.obs["obs"].reshape(-1), (3, 54)), jnp.eye(3)], axis=-1)
    for torso in (MLPTorso((8,), layer_norm=True), None):  # (another torso sees the whole input; an MLP's first layer is split)
        agent = MAPPO(SPREAD, **TINY, critic_torso=torso)
        state = agent.init(jax.random.key(0))
        value = agent.learner.value(state, agent.learner.flatten(x))
        # what the critic's torso gives on [every agent's observation, the agent's id]
        expected = state.critic.out(state.critic.torso.net.net(inputs))[..., 0]
        np.testing.assert_allclose(value, expected, rtol=1e-5, atol=1e-6)
    x = agent.learner.flatten(x)
    assert len(set(np.asarray(value).tolist())) == 3  # (each agent its own value: the ids)
    moved = agent.learner.flatten({"obs": ts.obs["obs"].at[2].add(1.0), "agent_id": jnp.eye(3)})  # agent 2's observation
    assert not np.any(np.isclose(agent.learner.value(state, moved), value))  # changes every agent's value
    two = jnp.stack([x, moved])  # (any batch axes before the seats)
    np.testing.assert_allclose(agent.learner.value(state, two)[0], value, rtol=1e-6)
    with pytest.raises(ValueError, match=r"^MAPPO's critic takes whole teams \(\*batch, seats, 21\), every team's 3 seats adjacent, got shape \(2, 21\)$"):
        agent.learner.value(state, x[:2])


def test_the_team_critic_reads_dict_observations_features():
    from eqxrl.agents._mappo_parts import GlobalState  # (private: the global state as MAPPO computes it, the reference)
    from eqxrl.testing.probes import MultiAgentMaskedActions

    agent = MAPPO(MultiAgentMaskedActions(), **TINY)  # ("obs" and "action_mask" entries: the mask is no feature)
    state = agent.init(jax.random.key(0))
    env_state, ts = agent.team_env.reset(jax.random.key(1))
    world = GlobalState(agent.team_env).global_state(env_state, ts.obs)  # (every agent's features, concatenated)
    seats = agent.learner.flatten({**ts.obs, "agent_id": jnp.eye(2)})
    value = agent.learner.value(state, agent.learner.layout.split(seats)[0])
    inputs = jnp.concatenate([jnp.broadcast_to(world, (2, world.shape[0])), jnp.eye(2)], axis=-1)
    np.testing.assert_allclose(value, state.critic.out(state.critic.torso.net.net(inputs))[..., 0], rtol=1e-5, atol=1e-6)


def test_minibatches_keep_every_team_step_whole():
    from eqxrl.agents._ppo_update import minibatch_permutation  # (private: PPO's update order, with and without groups)

    key = jax.random.key(4)
    np.testing.assert_array_equal(minibatch_permutation(key, 12), jax.random.permutation(key, 12))  # (PPO's own)
    assert MAPPO(SPREAD, **TINY).learner.minibatch_group == 3 and IPPO(SPREAD, **TINY).learner.minibatch_group == 1
    blocks = np.asarray(minibatch_permutation(key, 12, 3)).reshape(4, 3)
    assert np.all(blocks[:, 0] % 3 == 0) and np.all(np.diff(blocks, axis=1) == 1)  # a team's 3 seats, in order
    assert sorted(blocks[:, 0].tolist()) == [0, 3, 6, 9] and blocks[:, 0].tolist() != [0, 3, 6, 9]  # shuffled


def test_the_world_state_where_the_env_gives_one():
    agent = MAPPO("jaxmarl/MPE_simple_facmac_v1", **TINY)
    assert agent.global_state_kind == "world_state"
    central = agent.central_team
    env_state, ts = central.reset(jax.random.key(0))
    world = central.env.jaxmarl_env.get_world_state(env_state)
    flat = jnp.concatenate([jnp.ravel(world[a]) for a in central.env.agents])
    # shared parameters: agent i's entry is the i-th slice of the world state (zero-padded)
    size, n = flat.shape[0], agent.num_agents
    assert ts.obs["global_state"].shape == (n, -(-size // n))
    np.testing.assert_allclose(ts.obs["global_state"].reshape(-1)[:size], flat)
    assert not np.any(ts.obs["global_state"].reshape(-1)[size:])
    full = MAPPO("jaxmarl/MPE_simple_facmac_v1", **TINY, share_parameters=False).central_team
    np.testing.assert_allclose(full.reset(jax.random.key(0))[1].obs["global_state"][2], flat)
    assert MAPPO("jaxmarl/MPE_simple_facmac_v1", **TINY, global_state="observations").global_state_kind == "observations"


@pytest.mark.parametrize("share", [True, False])
def test_acts_on_the_team_observations(share):
    agent = MAPPO(SPREAD, **TINY, share_parameters=share)
    state = agent.init(jax.random.key(0))
    obs = agent.team_env.reset(jax.random.key(1))[1].obs
    assert agent.act(state, obs, jax.random.key(2)).shape == (3,)
    assert agent.act(state, jnp.stack([obs, obs]), deterministic=True).shape == (2, 3)
    noise = jax.random.gumbel(jax.random.key(3), agent.noise_spec(state, (2,)).shape)
    assert agent.act_from_noise(state, jnp.stack([obs, obs]), noise).shape == (2, 3)
    with pytest.raises(ValueError, match=r"^MAPPO.act\(key\) is required unless deterministic=True$"):
        agent.act(state, obs)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(env="CartPole-v1"), r"^MAPPO\(env\) must be a multi-agent env"),
        (dict(global_state="world"), r"^MAPPO\(global_state\) must be 'auto', 'world_state' or 'observations', got 'world'$"),
        (dict(global_state="world_state"), r"^MAPPO\(global_state='world_state'\) needs a JaxMARL env with get_world_state"),
        (dict(shared_torso=True), r"^MAPPO\(shared_torso\) must be False \(the critic sees the global state, the actor only its own observation\), got True$"),
        (dict(gamma=1.5), r"^MAPPO\(gamma\) must be in \[0, 1\], got 1.5$"),
        (dict(agent_ids=1), r"^MAPPO\(agent_ids\) must be True or False, got 1$"),
        (dict(num_minibatches=3), r"^MAPPO\(num_minibatches=3\) must divide num_envs \* rollout_length = 16"),
    ],
)
def test_mappo_names_bad_configuration(kwargs, match):
    with no_runtime_typecheck():
        with pytest.raises(ValueError, match=match) as info:
            MAPPO(**{"env": SPREAD, **TINY, **kwargs})
    assert "\n" not in str(info.value)


def test_a_recurrent_actor_is_named():
    from eqxrl.components import GRUTorso

    with pytest.raises(ValueError, match=r"^MAPPO\(actor_torso\) must be a feed-forward torso \(a recurrent one needs shared_torso=True\), got GRUTorso$"):
        MAPPO(SPREAD, **TINY, actor_torso=GRUTorso(8))


@pytest.mark.slow  # (over 2 s in the fast tier: tests/tiers.py)
@pytest.mark.parametrize(
    "env, kwargs",
    [
        (SPREAD, dict(share_parameters=False)),  # one actor and one critic per agent, vmapped
        (SPREAD, dict(normalize_observations=True)),  # the whole state in every seat, normalised
        ("jaxmarl/MPE_simple_facmac_v1", {}),  # continuous actions, the world state
        ("masked", {}),  # Dict observations with every agent's action mask
    ],
    ids=["separate", "normalized", "world_state", "masked"],
)
def test_trains_and_evaluates(env, kwargs):
    from eqxrl.testing.probes import MultiAgentMaskedActions

    env = MultiAgentMaskedActions() if env == "masked" else env
    agent = MAPPO(env, **{**TINY, "rollout_length": 16}, **kwargs)
    state, metrics = eqxrl.train(agent, jax.random.key(0), 2 * agent.steps_per_iteration, progress=False)
    assert np.all(np.isfinite(metrics["loss"])) and list(metrics["env_steps"]) == [32, 64]
    assert np.all(np.isfinite(np.asarray(eqxrl.evaluate(agent, state, jax.random.key(1), num_episodes=2))))
    if isinstance(env, MultiAgentMaskedActions):  # every agent's action legal under its own mask
        obs = env.reset(jax.random.key(2))[1].obs
        actions = agent.act(state, obs, jax.random.key(3))
        assert agent.learner.layout.mask_size == 4
        assert bool(jnp.all(obs["action_mask"][jnp.arange(2), actions] == 1))


@pytest.mark.slow  # (over 2 s in the fast tier: tests/tiers.py)
def test_mappo_learns_simple_spread_well_above_its_start():
    agent = MAPPO(SPREAD, num_envs=16, rollout_length=32, num_minibatches=2, hidden_sizes=(64, 64), learning_rate=2.5e-3)
    trained = per_seed_returns(agent, train_seeds(agent, 60_000)[0], num_episodes=32)
    untrained = untrained_returns(agent, num_episodes=32, deterministic=False)  # the initial policies, sampled
    # Team returns are negative distances: closer to 0 is better. Bound: 2 of 3 seeds 12% closer to 0
    # than their untrained policy. Over 5 other seeds (keys split 5 ways, 2 quiet-ish cores) they were
    # 0.22, 0.18, 0.23, 0.27, 0.27 closer at 60k steps (with learning_rate=1e-3: 0.15, 0.21, 0.09, 0.22, 0.26);
    # these 3: 0.23, 0.26, 0.25. About 27 s serially, most of it compiling.
    assert most_above((trained - untrained) / np.abs(untrained), 0.12), (untrained, trained)
