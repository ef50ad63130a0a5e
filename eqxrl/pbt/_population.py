"""The state PBT hands back: the population between generations and the history of a run."""

import dataclasses
from collections.abc import Mapping
from typing import Any

import equinox as eqx
import jax
import numpy as np
from jaxtyping import Array, Int, PyTree

from ..agents import AbstractAgent, Stacked
from ..core import Key

__all__ = ["History", "Population", "gather", "history_from_records"]


class Population(eqx.Module):
    """A PBT population between generations.

    - `agent`: the stacked agent (`eqxrl.Stacked`): each member's hyperparameters.
    - `state`: the stacked training states (leading axis = member).
    - `key`: PBT's own PRNG key (selection, exploration, fresh keys of copies).
    - `generation`: generations done so far.
    """

    agent: Stacked
    state: PyTree
    key: Key
    generation: Int[Array, ""]

    @property
    def size(self) -> int:
        return self.agent.size

    def member(self, i: int) -> tuple[AbstractAgent, PyTree]:
        """**Returns:** member `i`'s agent and training state, for `eqxrl.evaluate` or `act`."""
        agent = self.agent.member(i)
        state = jax.tree.map(lambda x: x[i], self.state)
        return agent, state


@dataclasses.dataclass(frozen=True)
class History:
    """What PBT did, per generation (rows) and member (columns).

    - `env_steps[g]`: env steps per member at the end of generation `g`.
    - `fitness[g, i]`: member `i`'s fitness after generation `g`'s training.
    - `train_return[g, i]`: its mean training episode return during generation `g`.
    - `parent[g, i]`: the member of generation `g - 1` whose copy member `i`
      trained from in generation `g` (itself when it was kept; -1 in generation 0).
    - `hyperparameters[name][g, i]`: the value member `i` trained with in generation `g`.
    - `eval_return[g, i]`: with `PBT(eval_every=...)`, member `i`'s last in-training
      evaluation return in generation `g` (NaN if none fell in it); None without.
    - `episode_returns[g, i, k]`: the return of episode `k` of member `i`'s evaluation
      after generation `g`'s training (the default fitness is their mean); None when
      PBT ran no evaluation of its own (a custom fitness callable and no descriptor).
    - `descriptor[g, i, :]`: with `PBT(descriptor=...)`, member `i`'s descriptor after
      generation `g`: the mean final state descriptor of those episodes; None without.
    """

    env_steps: np.ndarray
    fitness: np.ndarray
    train_return: np.ndarray
    parent: np.ndarray
    hyperparameters: dict[str, np.ndarray]
    eval_return: np.ndarray | None = None
    episode_returns: np.ndarray | None = None
    descriptor: np.ndarray | None = None

    @property
    def num_generations(self) -> int:
        return int(self.fitness.shape[0])

    def best(self) -> tuple[int, float]:
        """**Returns:** `(member, fitness)` of the best member after the last generation."""
        last = np.where(np.isnan(self.fitness[-1]), -np.inf, self.fitness[-1])
        i = int(np.argmax(last))
        return i, float(self.fitness[-1, i])


def gather(x: Array) -> np.ndarray:
    """A (possibly multi-host sharded) array as a full NumPy array on every process."""
    if jax.process_count() > 1 and not x.is_fully_addressable:
        from jax.experimental import multihost_utils

        return np.asarray(multihost_utils.process_allgather(x, tiled=True))
    return np.asarray(x)


def _episode_returns(records: list[Mapping[str, np.ndarray]], size: int, episodes: int) -> np.ndarray:
    """The records' `episode_returns`; NaN for records from before PBT kept them."""
    nan = np.full((size, episodes), np.nan)
    return np.stack([np.asarray(r["episode_returns"]) if "episode_returns" in r else nan for r in records]).astype(np.float64) if records else np.zeros((0, size, episodes))


def history_from_records(pbt: Any, records: list[Mapping[str, np.ndarray]]) -> History:
    """**Returns:** the `History` of a run from its per-generation records (see `PBT.step`)."""
    size = pbt.population_size
    g = len(records)
    evaluator, describe = pbt.evaluator(), pbt.episode_descriptor()
    stack = lambda k, *tail: np.stack([np.asarray(r[k]) for r in records]) if g else np.zeros((0, size, *tail))  # noqa: E731
    source = stack("source").astype(np.int64)
    parent = np.concatenate([np.full((min(g, 1), size), -1, np.int64), source[:-1]], axis=0) if g else source
    return History(
        env_steps=np.arange(1, g + 1, dtype=np.int64) * pbt.steps_per_generation,
        fitness=stack("fitness").astype(np.float64),
        train_return=stack("train_return").astype(np.float64),
        parent=parent,
        hyperparameters={n: stack(f"hp/{n}").astype(np.float64) for n in pbt.space},
        eval_return=stack("eval_return").astype(np.float64) if getattr(pbt, "eval_every", None) else None,
        episode_returns=_episode_returns(records, size, evaluator.num_episodes) if evaluator is not None else None,
        descriptor=stack("descriptor", describe.size).astype(np.float64) if describe is not None else None,
    )
