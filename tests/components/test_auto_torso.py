"""`EmbeddingTorso` (integer grids) and `auto_torso` (the torso an agent builds when given none):
an MLP for flat observations and all-vector Dicts, a CNN or an embedding per image or grid entry."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import eqxrl
from eqxrl.agents import DQN, PPO, Clock
from eqxrl.components import (
    CNNTorso,
    EmbeddingTorso,
    GRUTorso,
    IdentityTorso,
    MLPTorso,
    MultiInputTorso,
    auto_torso,
    networks,
)
from eqxrl.core import from_spec, to_spec
from eqxrl.envs import ACTION_MASK, AbstractEnv, Box, Dict, Discrete, MultiBinary, MultiDiscrete, first_timestep
from eqxrl.envs import TimeStep
from typecheck import no_runtime_typecheck


class GridAndImage(AbstractEnv):
    """One-step episodes observing `grid` (5x5 cells: a tile code 0..3 and a colour code 0..2),
    `image` (4x4x1 floats), `pos` (a vector) and `more.v` (a nested vector), with an action mask
    (every action legal) when `masked`. Reward 1 when the action is the tile code of the grid's
    centre: a policy must read the grid to beat 1/4."""

    masked: bool = eqx.field(static=True, default=False)

    @property
    def observation_space(self) -> Dict:
        spaces = {
            "grid": Box(0.0, np.asarray([3.0, 2.0], np.float32), (5, 5, 2)),
            "image": Box(0.0, 1.0, (4, 4, 1)),
            "pos": Box(-1.0, 1.0, (2,)),
            "more": Dict({"v": Box(-1.0, 1.0, (3,))}),
        }
        return Dict({**spaces, ACTION_MASK: MultiBinary(4)} if self.masked else spaces)

    @property
    def action_space(self) -> Discrete:
        return Discrete(4)

    @property
    def max_episode_steps(self) -> int:
        return 1

    def _obs(self, key):
        g, i, p, v = jax.random.split(key, 4)
        grid = jnp.stack(
            [jax.random.randint(g, (5, 5), 0, 4), jax.random.randint(jax.random.fold_in(g, 1), (5, 5), 0, 3)], axis=-1
        )
        obs = {
            "grid": grid.astype(jnp.float32),
            "image": jax.random.uniform(i, (4, 4, 1)),
            "pos": jax.random.uniform(p, (2,), minval=-1.0, maxval=1.0),
            "more": {"v": jax.random.uniform(v, (3,), minval=-1.0, maxval=1.0)},
        }
        return {**obs, ACTION_MASK: jnp.ones((4,), jnp.int32)} if self.masked else obs

    def reset(self, key):
        obs = self._obs(key)
        return obs, first_timestep(obs)

    def step(self, key, state, action):
        reward = jnp.where(action == state["grid"][2, 2, 0].astype(jnp.int32), 1.0, 0.0)
        obs = self._obs(key)
        return obs, TimeStep(obs, reward.astype(jnp.float32), jnp.asarray(True), jnp.asarray(False), {})


# ----------------------------------------------------------------- EmbeddingTorso
@pytest.mark.slow  # (over 2 s in the fast tier: tests/tiers.py)
@pytest.mark.parametrize("shape, batch", [((5, 5, 2), ()), ((5, 5, 2), (2, 4)), ((6, 4), (3,)), ((7,), (2, 4))])
def test_embedding_torso_takes_any_batch_axes(shape, batch):
    torso = EmbeddingTorso(13, 4, MLPTorso((8,))) if len(shape) == 1 else EmbeddingTorso(13, 4)
    encoder = torso.make(shape, key=jax.random.key(0))
    size = int(np.prod(shape))
    x = jax.random.randint(jax.random.key(1), (*batch, size), 0, 13).astype(jnp.float32)
    y = encoder(x)
    assert y.shape == (*batch, encoder.features) and encoder.features == (8 if len(shape) == 1 else 128)
    if batch:  # each observation alone gives the same features
        np.testing.assert_allclose(encoder(x.reshape(-1, size)[0]), y.reshape(-1, encoder.features)[0], rtol=1e-5, atol=1e-6)


def test_embedding_torso_looks_up_a_table_per_channel_and_concatenates():
    encoder = EmbeddingTorso(5, 3, MLPTorso(())).make((2, 2, 2), key=jax.random.key(0))
    table = encoder.net.table
    assert table.shape == (2, 5, 3)
    codes = jnp.asarray([0, 4, 1, 1, 2, 3, 4, 0], jnp.float32)
    want = jnp.concatenate([table[i % 2, int(c)] for i, c in enumerate(codes)])
    np.testing.assert_array_equal(encoder(codes), want)
    # Floats are rounded and codes clipped into [0, num_embeddings - 1].
    noisy = jnp.asarray([0.2, 9.0, 0.6, 1.4, 2.1, 2.8, 4.4, -3.0], jnp.float32)
    np.testing.assert_array_equal(encoder(noisy), want)


@pytest.mark.slow  # (over 2 s in the fast tier: tests/tiers.py)
def test_embedding_torso_gradients_are_finite_and_reach_the_table():
    encoder = EmbeddingTorso(13).make((5, 5, 2), key=jax.random.key(0))
    x = jax.random.randint(jax.random.key(1), (4, 50), 0, 13).astype(jnp.float32)
    grads = jax.grad(lambda e: jnp.sum(e(x) ** 2))(encoder)
    leaves = jax.tree.leaves(grads)
    assert all(bool(jnp.all(jnp.isfinite(g))) for g in leaves)
    assert float(jnp.abs(grads.net.table).sum()) > 0
    # Codes not seen get no gradient: the table is a lookup.
    seen = np.zeros((2, 13), bool)
    codes = np.asarray(x).reshape(4, 5, 5, 2).astype(int)
    for c in range(2):
        seen[c, np.unique(codes[..., c])] = True
    assert np.all(np.asarray(jnp.abs(grads.net.table).sum(-1) > 0) == seen)


def test_embedding_torso_is_a_spec_that_round_trips_and_jits():
    torso = EmbeddingTorso(13, 8, MLPTorso((16,)))
    assert from_spec(to_spec(torso), "torso") == torso
    assert EmbeddingTorso(13) == EmbeddingTorso(13, 16, CNNTorso.minatar())
    encoder = torso.make((3, 3, 2), key=jax.random.key(0))
    x = jnp.ones((2, 18))
    np.testing.assert_allclose(eqx.filter_jit(lambda e, x: e(x))(encoder, x), encoder(x), rtol=1e-6)


@no_runtime_typecheck()
def test_embedding_torso_bad_arguments_are_named():
    with pytest.raises(ValueError, match=r"^EmbeddingTorso\(num_embeddings\) must be a positive int \(the number of integer codes\), got 0$"):
        EmbeddingTorso(0)
    with pytest.raises(ValueError, match=r"^EmbeddingTorso\(num_embeddings\) must be a positive int .*got 2.5$"):
        EmbeddingTorso(2.5)
    with pytest.raises(ValueError, match=r"^EmbeddingTorso\(embedding_size\) must be a positive int, got -1$"):
        EmbeddingTorso(4, -1)
    with pytest.raises(ValueError, match=r"^EmbeddingTorso\(torso\) must be a feed-forward torso \(CNNTorso, MLPTorso, \.\.\.\), got GRUTorso"):
        EmbeddingTorso(4, 8, GRUTorso(8))
    with pytest.raises(ValueError, match=r"^EmbeddingTorso\(torso\) must be a feed-forward torso .*got 3$"):
        EmbeddingTorso(4, 8, 3)
    with pytest.raises(ValueError, match=r"^EmbeddingTorso needs one integer grid .* got a Dict observation with entries \['grid'\]"):
        EmbeddingTorso(4).make((("grid", (5, 5, 2)),), key=jax.random.key(0))
    with pytest.raises(ValueError, match=r"^EmbeddingTorso needs integer grids of shape \(H, W, C\), \(H, W\) or \(n,\), got observation shape \(2, 2, 2, 2\)$"):
        EmbeddingTorso(4).make((2, 2, 2, 2), key=jax.random.key(0))
    with pytest.raises(ValueError, match=r"^EmbeddingTorso\(torso\) on the embedded grid \(2, 2, 32\): CNNTorso: convolution 0 has kernel size 3"):
        EmbeddingTorso(4).make((2, 2, 2), key=jax.random.key(0))


# ----------------------------------------------------------------- auto_torso
def test_auto_torso_is_todays_mlp_for_flat_observations_and_vector_dicts():
    mlp = MLPTorso((32,), "relu")
    for space in [
        Box(-1.0, 1.0, (4,)),
        Box(0.0, 255.0, (10, 10, 3)),  # a single array, even an image: the MLP, as always
        Discrete(5),
        Dict({"a": Box(-1.0, 1.0, (2,)), "b": Box(-1.0, 1.0, (2,))}),
        Dict({"a": Box(0.0, 1.0, (2, 2, 2)), "m": MultiDiscrete((3, 4)), "d": Discrete(3), ACTION_MASK: MultiBinary(3)}),
        Dict({"matrix": Box(-1.0, 1.0, (6, 6)), "tiny": Box(0.0, 9.0, (2, 2, 2)), "long": Box(0.0, 9.0, (3, 3, 3, 3))}),
    ]:
        assert auto_torso(space, (32,), "relu") == mlp, space


def test_auto_torso_gives_images_a_cnn_and_integer_grids_an_embedding():
    torso = auto_torso(GridAndImage(masked=True).observation_space, (32,), "relu")
    assert torso == MultiInputTorso(
        {"grid": EmbeddingTorso(4, 16, CNNTorso.minatar()), "image": CNNTorso.minatar()}, hidden_sizes=(32,), activation="relu"
    )
    nested = Dict({"outer": Dict({"tiles": Box(0.0, 12.0, (7, 7)), "frame": Box(0.0, 1.0, (40, 40, 3))}), "v": Box(-1.0, 1.0, (2,))})
    assert auto_torso(nested) == MultiInputTorso(
        {"outer.tiles": EmbeddingTorso(13, 16, CNNTorso.minatar()), "outer.frame": CNNTorso.nature()}, hidden_sizes=(64, 64)
    )
    # Codes: a [0, 255] grid is embedded (Navix's uint8 grid), more codes or real bounds are an image.
    assert auto_torso(Dict({"g": Box(0.0, 255.0, (5, 5, 3))})).torsos == (EmbeddingTorso(256),)
    for box in [Box(0.0, 256.0, (5, 5, 3)), Box(0.0, 2.5, (5, 5, 3)), Box(-1.0, 3.0, (5, 5, 3)), Box(0.0, np.inf, (5, 5, 3))]:
        assert auto_torso(Dict({"g": box})).torsos == (CNNTorso.minatar(),), box
    # A normalised observation reaches the torso as floats, not codes: no embedding.
    assert auto_torso(Dict({"g": Box(0.0, 9.0, (5, 5, 3))}), normalized=True).torsos == (CNNTorso.minatar(),)


@pytest.mark.slow  # (over 2 s in the fast tier: tests/tiers.py)
def test_auto_torso_builds_on_the_layouts_entries():
    env = GridAndImage(masked=True)
    agent = PPO(env, num_envs=2, rollout_length=8)
    encoder = auto_torso(env.observation_space, (32,)).make(agent.obs_shape, key=jax.random.key(0))
    assert encoder.features == 32
    assert encoder(jnp.zeros((3, agent.layout.size))).shape == (3, 32)


@no_runtime_typecheck()
def test_auto_torso_bad_space_is_named():
    with pytest.raises(ValueError, match=r"^auto_torso\(observation_space\) must be an eqxrl space \(Box, Dict, \.\.\.\), got 3$"):
        auto_torso(3)


def test_the_components_action_mask_name_is_the_envs():
    assert networks._auto.ACTION_MASK == ACTION_MASK


# ----------------------------------------------------------------- agents
def _run(agent, key=0):
    state = agent.init(jax.random.key(key))
    step = eqx.filter_jit(lambda agent, state, i: agent.train_iteration(state, Clock(i, jnp.asarray(4, jnp.int32))))
    for i in range(2):  # (DQN: the second iteration is past its warm-up and updates)
        state, metrics = step(agent, state, jnp.asarray(i, jnp.int32))
    obs = jax.vmap(agent.env.reset)(jax.random.split(jax.random.key(1), 3))[1].obs
    actions = agent.act(state, obs, jax.random.key(2))
    assert actions.shape == (3,)
    assert all(bool(jnp.all(jnp.isfinite(jnp.asarray(v)))) for v in jax.tree.leaves(metrics))
    return state


@pytest.mark.slow
def test_ppo_builds_the_automatic_torso_and_trains():
    agent = PPO(GridAndImage(masked=True), num_envs=2, rollout_length=8, num_minibatches=2, num_epochs=1, hidden_sizes=(16,))
    state = _run(agent)
    for head in (state.actor, state.critic):
        body = head.torso.net
        assert type(body).__name__ == "_MultiInputBody" and head.torso.features == 16
        assert [type(e.net).__name__ for e in body.encoders] == ["_EmbeddingBody", "_CNNBody", "_MLPBody", "_MLPBody"]


@pytest.mark.slow
def test_dqn_builds_the_automatic_torso_and_trains():
    agent = DQN(GridAndImage(), learning_starts=8, batch_size=8, buffer_size=64, hidden_sizes=(16,))
    _run(agent)


@pytest.mark.slow
def test_a_named_torso_still_replaces_the_automatic_one():
    torso = MultiInputTorso({"grid": EmbeddingTorso(4, 4, MLPTorso((8,)))}, default=IdentityTorso(), hidden_sizes=(8,))
    agent = PPO(GridAndImage(), num_envs=2, rollout_length=8, actor_torso=torso, critic_torso=MLPTorso((8,)))
    state = agent.init(jax.random.key(0))
    assert state.actor.torso.features == 8 and state.critic.torso.features == 8
    assert type(state.critic.torso.net).__name__ == "_MLPBody"


@pytest.mark.learning
@pytest.mark.exhaustive  # (75 s of CI's 2 cores, tests/tiers.py: CI trains the automatic torso in the fast tier's tests)
def test_ppo_with_the_automatic_torso_learns_to_read_an_integer_grid():
    """The reward needs the grid's centre tile (1/4 at random): PPO with the automatic torso
    (an embedding and a CNN) reads it."""
    agent = PPO(GridAndImage(), num_envs=16, rollout_length=8, learning_rate=1e-3)
    states, _ = eqxrl.train(agent, jax.random.split(jax.random.key(0), 2), total_steps=40_000, progress=False)
    returns = np.asarray(eqxrl.evaluate(agent, states, jax.random.key(1), num_episodes=64)).mean(axis=-1)
    print(returns)
    assert np.all(returns > 0.7), returns
