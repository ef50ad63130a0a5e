"""SimBaTorso: its computation against the formula written out, its shapes, bad inputs, and PPO, SAC,
DQN and CrossQ training with it as their torsos (observation statistics from their own
`normalize_observations`)."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import eqxrl
from eqxrl.agents import DQN, PPO, SAC, CrossQ
from eqxrl.components import SimBaTorso
from typecheck import no_runtime_typecheck


def _layer_norm(x, norm):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + 1e-5) * np.asarray(norm.weight) + np.asarray(norm.bias)


def test_simba_is_residual_blocks_and_a_final_layer_norm(getkey):
    encoder = SimBaTorso(hidden_size=8, num_blocks=2, expansion=4, activation="relu").make((5,), key=getkey())
    assert encoder.features == 8
    body = encoder.net
    assert [b.up.weight.shape for b in body.blocks] == [(8, 32), (8, 32)]
    # Non-trivial norms, so the test sees where each LayerNorm's scale and shift act.
    rng = np.random.default_rng(0)
    body = jax.tree.map(lambda x: x + 0.1 * rng.standard_normal(x.shape).astype(np.float32), body)
    encoder = eqx.tree_at(lambda e: e.net, encoder, body)
    x = rng.standard_normal((3, 4, 5))
    lin = lambda layer, v: v @ np.asarray(layer.weight) + np.asarray(layer.bias)  # noqa: E731
    h = lin(body.embed, x)
    for block in body.blocks:
        h = h + lin(block.down, np.maximum(lin(block.up, _layer_norm(h, block.norm)), 0.0))
    expected = _layer_norm(h, body.final_norm)
    got = eqx.filter_jit(lambda e, x: e(x))(encoder, jnp.asarray(x, jnp.float32))
    assert got.shape == (3, 4, 8)
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)


def test_no_blocks_is_a_layer_normalised_linear_layer(getkey):
    encoder = SimBaTorso(hidden_size=6, num_blocks=0).make((3,), key=getkey())
    y = eqx.filter_jit(lambda e, x: e(x))(encoder, jnp.ones((2, 3)))
    assert y.shape == (2, 6) and encoder.net.blocks == ()
    np.testing.assert_allclose(y.mean(-1), 0.0, atol=1e-5)


def test_bad_simba_fields_are_named():
    with no_runtime_typecheck():
        for kw, message in [
            (dict(hidden_size=0), r"SimBaTorso\(hidden_size\) must be a positive int, got 0"),
            (dict(expansion=2.5), r"SimBaTorso\(expansion\) must be a positive int, got 2.5"),
            (dict(num_blocks=-1), r"SimBaTorso\(num_blocks\) must be an int >= 0, got -1"),
            (dict(activation="nope"), r"SimBaTorso\(activation\) must be one of"),
        ]:
            with pytest.raises(ValueError, match=message):
                SimBaTorso(**kw)


TORSO = SimBaTorso(hidden_size=16, num_blocks=1)
AGENTS = {
    "ppo": lambda: PPO("CartPole-v1", num_envs=2, rollout_length=16, num_epochs=1, num_minibatches=1, actor_torso=TORSO,
                       critic_torso=TORSO, normalize_observations=True),
    "sac": lambda: SAC("Pendulum-v1", num_envs=2, batch_size=8, buffer_size=64, learning_starts=8, actor_torso=TORSO,
                       critic_torso=TORSO, normalize_observations=True),
    "dqn": lambda: DQN("CartPole-v1", num_envs=2, batch_size=8, buffer_size=64, learning_starts=8, critic_torso=TORSO,
                       normalize_observations=True),
    "crossq": lambda: CrossQ("Pendulum-v1", num_envs=2, batch_size=8, buffer_size=64, learning_starts=8, actor_torso=TORSO,
                             critic_hidden_sizes=(16,), normalize_observations=True),
}  # fmt: skip


@pytest.mark.slow  # (over 2 s in the fast tier: tests/tiers.py)
@pytest.mark.parametrize("name", list(AGENTS))
def test_agents_train_with_a_simba_torso(name):
    agent = AGENTS[name]()
    init = agent.init(jax.random.key(0))
    state, metrics = eqxrl.train(agent, jax.random.key(0), 64, progress=False)
    # The torsos in the learner are SimBa's, trained: their weights moved and stayed finite.
    params = eqx.filter(state, eqx.is_inexact_array)
    assert not any(np.isnan(x).any() for x in jax.tree.leaves(params))  # (max_grad_norm=inf: no clipping)
    is_simba = lambda x: type(x).__name__ == "_SimBaBody"  # noqa: E731
    before = [x for x in jax.tree.leaves(init, is_leaf=is_simba) if is_simba(x)]
    after = [x for x in jax.tree.leaves(state, is_leaf=is_simba) if is_simba(x)]
    assert before and len(before) == len(after)
    assert any(not np.allclose(a.embed.weight, b.embed.weight) for a, b in zip(after, before))
    # The observation statistics are the agent's own (a RunningMeanStd in its state), not the torso's.
    stats = state.obs_stats
    assert float(stats.count) >= 64
