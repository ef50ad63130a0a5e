"""Hand-built update batches for tests that call an off-policy agent's `update` directly
(test_sac_discrete.py, test_actor_critic_options.py)."""

import jax
import jax.numpy as jnp

from eqxrl.components import Sample, Transition


def update_batch(agent, key, b: int = 8, weights=None) -> Sample:
    """`b` random transitions for `agent` (its observation and action spaces), as `update`
    receives them: rewards and discounts already computed, PER weights `weights` (default 1)."""
    k1, k2, k3 = jax.random.split(key, 3)
    obs = jax.random.normal(k1, (b, agent.obs_size))
    if agent.discrete:
        action = jax.random.randint(k2, (b,), 0, agent.action_size, dtype=jnp.int32)
    else:
        action = jax.random.uniform(k2, (b, agent.action_size), minval=-1.0, maxval=1.0)
    data = Transition(
        obs=obs, action=action, reward=jax.random.normal(k3, (b,)), discount=jnp.full((b,), 0.99), next_obs=obs[::-1]
    )
    w = jnp.ones((b,)) if weights is None else weights
    return Sample(data, jnp.arange(b, dtype=jnp.int32), w)


def same_leaves(a, b) -> bool:
    """Whether two pytrees hold equal arrays."""
    return all(bool(jnp.array_equal(x, y)) for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)))
