"""Learning tests over seeds: every seed of a batch trained in one program (`eqxrl.train`'s seed
axis), evaluated deterministically, and a bound checked on most of them, so that a result one
CPU rounds differently from another cannot fail the suite alone.

Each test says in a comment how its bound was set: the per-seed results it saw on the project's
2-core Intel Xeon (AVX-512), and the margin left. The bounds were set over 4 seeds, 3 of 4 above
them, with the same numbers natively and with `XLA_FLAGS=--xla_cpu_max_isa=AVX2` (XLA emits the
same code for these programs there), and the learning tier also passed with
`--xla_cpu_max_isa=SSE4_2`, whose code rounds differently. To keep CI's time, the tests now train 3
seeds (the first three of those keys: `jax.random.split` draws the same keys for any count) and
ask 2 of 3, the same tolerance of one seed that falls; a batch of 3 can round differently from a
batch of 4, so some comments give both.
"""

import jax
import numpy as np

import eqxrl


def train_seeds(agent, total_steps: int, num_seeds: int = 3, seed: int = 0):
    """`eqxrl.train` over `num_seeds` keys split from `jax.random.key(seed)`, in one program."""
    return eqxrl.train(agent, jax.random.split(jax.random.key(seed), num_seeds), total_steps, progress=False)


def per_seed_returns(agent, states, num_episodes: int = 16, deterministic: bool = True) -> np.ndarray:
    """Each seed's mean evaluation return (evaluation key 1)."""
    returns = eqxrl.evaluate(agent, states, jax.random.key(1), num_episodes=num_episodes, deterministic=deterministic)
    return np.asarray(returns).mean(axis=-1)


def untrained_returns(agent, num_seeds: int = 3, num_episodes: int = 8, deterministic: bool = True) -> np.ndarray:
    """Each seed's mean evaluation return at initialisation (the same keys as `train_seeds`)."""
    states = jax.vmap(agent.init)(jax.random.split(jax.random.key(0), num_seeds))
    return per_seed_returns(agent, states, num_episodes, deterministic)


def most_above(values: np.ndarray, bound: float, need: int = 2) -> bool:
    """At least `need` of `values` are above `bound` (2 of 3 by default). Prints them, for the
    record of what each seed reached (`pytest -rP` shows it for passing tests)."""
    print(f"per seed: {np.round(np.asarray(values, np.float64), 3).tolist()}; bound {bound} on {need}")
    return int(np.sum(np.asarray(values) > bound)) >= need
