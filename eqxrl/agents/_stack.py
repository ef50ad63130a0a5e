"""One agent or a population of agents: `Stacked` (a sweep, a PBT population) and `Batch`,
the one view of "an agent, its seeds, or a stack" that training, evaluation,
run directories, PBT and the CLI share."""

import itertools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import PyTree

from ..core import resolve_path, set_paths
from ._base import AbstractAgent, hyperparameter_hint


class Stacked(eqx.Module):
    """Agents that differ only in array leaves (hyperparameters), stacked on a leading axis.

    `eqxrl.train` runs every member in one compiled program; metrics and
    states gain a leading `size` axis.
    """

    agent: AbstractAgent
    size: int = eqx.field(static=True)

    @property
    def env(self):
        return self.agent.env

    @property
    def steps_per_iteration(self) -> int:
        return self.agent.steps_per_iteration

    def member(self, i: int) -> AbstractAgent:
        """**Returns:** the `i`-th agent of the stack."""
        if not -self.size <= i < self.size:
            raise ValueError(f"Stacked.member(i) needs -{self.size} <= i < {self.size}, got {i}")
        arrays, static = eqx.partition(self.agent, eqx.is_array)
        return eqx.combine(jax.tree.map(lambda x: x[i], arrays), static)


def _describe(path) -> str:
    return jax.tree_util.keystr(path).lstrip(".") or "<root>"


def stack(agents: Sequence[AbstractAgent]) -> Stacked:
    """Stack agents of one type and structure that differ only in numeric hyperparameters.

    **Arguments:** `agents`, a non-empty sequence, e.g.
    `[PPO(env, learning_rate=lr) for lr in (1e-4, 3e-4, 1e-3)]`.

    **Returns:** a `Stacked` population, accepted by `eqxrl.train`, `eqxrl.evaluate`,
    run directories and PBT wherever one agent is.
    """
    agents = list(agents)
    if not agents:
        raise ValueError("stack(agents) needs at least one agent, got an empty sequence")
    first = agents[0]
    for i, agent in enumerate(agents):
        if not isinstance(agent, AbstractAgent):
            raise ValueError(f"stack(agents): agents[{i}] must be an eqxrl agent, got {type(agent).__name__}")
        if type(agent) is not type(first):
            raise ValueError(
                f"stack(agents): agents[{i}] is a {type(agent).__name__}, agents[0] a {type(first).__name__}"
            )
    arrays0, static0 = eqx.partition(first, eqx.is_array)
    leaves0 = jax.tree_util.tree_flatten_with_path(first, is_leaf=lambda x: x is None)[0]
    for i, agent in enumerate(agents[1:], start=1):
        arrays, static = eqx.partition(agent, eqx.is_array)
        if static == static0 and jax.tree.structure(arrays) == jax.tree.structure(arrays0):
            continue
        leaves = jax.tree_util.tree_flatten_with_path(agent, is_leaf=lambda x: x is None)[0]
        field = next(
            (
                _describe(p0)
                for (p0, a), (_, b) in zip(leaves0, leaves)
                if eqx.is_array(a) != eqx.is_array(b) or (not eqx.is_array(a) and a != b)
            ),
            None,
        )
        if field is None:  # differing static fields (sizes, flags) are not leaves: compare fields
            field = next(
                (
                    name
                    for name in first.__dataclass_fields__
                    if not eqx.is_array(getattr(first, name)) and getattr(first, name) != getattr(agent, name)
                ),
                "<structure>",
            )
        raise ValueError(
            f"stack(agents): agents[{i}] differs from agents[0] in structure at {field!r}; "
            f"stacked agents may differ only in array hyperparameters{hyperparameter_hint(first, field)}"
        )
    stacked = jax.tree.map(lambda *xs: jnp.stack(xs), *[eqx.filter(a, eqx.is_array) for a in agents])
    return Stacked(eqx.combine(stacked, static0), len(agents))


class Batch(eqx.Module):
    """What a run trains: one agent, `size` seeds of one agent, or `size` stacked members.

    The one place that tells a `Stacked` population from a single agent; every
    upper floor (`train`, `evaluate`, run directories, PBT, the CLI) goes through it.

    - `agent`: the agent; for stacked members every array leaf has a leading `size` axis.
    - `size`: `None` for one run (the state has no batch axis), else the length of the
      state's leading axis.
    - `stacked`: whether the agent's own leaves carry the member axis.
    """

    agent: AbstractAgent
    size: int | None = eqx.field(static=True, default=None)
    stacked: bool = eqx.field(static=True, default=False)

    @classmethod
    def of(cls, agent: Any, size: int | None = None, owner: str = "agent") -> "Batch":
        """**Arguments:** an agent or `eqxrl.stack([...])`, and for one agent the number
        of seeds (`None`: one run). **Returns:** the batch; a `ValueError` naming
        `owner` for anything else."""
        if isinstance(agent, Stacked):
            if size is not None and size != agent.size:
                raise ValueError(f"{owner}: the {agent.size} stacked agents need a batch of {agent.size}, got {size}")
            return cls(agent.agent, agent.size, True)
        if not isinstance(agent, AbstractAgent):
            raise ValueError(f"{owner} must be an eqxrl agent or eqxrl.stack([...]), got {type(agent).__name__}")
        return cls(agent, size, False)

    @property
    def batched(self) -> bool:
        """Whether the state has a leading axis (seeds or members)."""
        return self.size is not None

    @property
    def num_members(self) -> int:
        """Rows of the state: `size`, or 1 for one run."""
        return 1 if self.size is None else self.size

    @property
    def name(self) -> str:
        """The agent's class name (`"PPO"`)."""
        return type(self.agent).__name__

    def unwrap(self) -> "AbstractAgent | Stacked":
        """**Returns:** what the user passed: the agent, or the `Stacked` population."""
        return Stacked(self.agent, self.size) if self.stacked else self.agent

    def member(self, i: int) -> AbstractAgent:
        """**Returns:** the agent of member `i` (for seeds: the one agent)."""
        if not -self.num_members <= i < self.num_members:
            raise ValueError(f"member(i) needs -{self.num_members} <= i < {self.num_members}, got {i}")
        return Stacked(self.agent, self.size).member(i) if self.stacked else self.agent

    def distinct_members(self) -> list[AbstractAgent]:
        """**Returns:** one agent per stacked member, or `[agent]` for one agent (any seeds)."""
        return [self.member(i) for i in range(self.num_members)] if self.stacked else [self.agent]

    def vmap(self, fn: Callable) -> Callable:
        """`fn(agent, *xs, shared)` mapped over the leading axis of each positional
        argument (and of the agent, when stacked); the keyword `shared` reaches
        every member unbatched."""
        agent = self.agent
        if self.stacked:
            return lambda *args, shared=None: eqx.filter_vmap(lambda a, *xs: fn(a, *xs, shared))(agent, *args)
        if self.batched:
            return lambda *args, shared=None: eqx.filter_vmap(lambda *xs: fn(agent, *xs, shared))(*args)
        return lambda *args, shared=None: fn(agent, *args, shared)

    def template_state(self) -> PyTree:
        """The shape of the batch's training state (`jax.ShapeDtypeStruct` leaves), with no arrays allocated."""
        keys = jax.random.split(jax.random.key(0), self.num_members) if self.batched else jax.random.key(0)
        return eqx.filter_eval_shape(self.vmap(lambda a, k, _: a.init(k)), keys)


def sweep(agent: AbstractAgent, values: Mapping[str, Sequence[Any]], *, grid: bool = True) -> Stacked:
    """A sweep of `agent` over hyperparameters given by dotted path (or unambiguous flat name):
    one member per combination, stacked for one compiled program.

    **Arguments:**

    - `agent`: the agent every member starts from.
    - `values`: `{path: [value, ...]}`, e.g. `{"critic_optimizer.learning_rate": [1e-4, 1e-3],
      "buffer.alpha": [0.4, 0.6]}` (paths as `agent.hyperparameters()` lists them).
    - `grid`: every combination (the default), or else the lists zipped (equal lengths).

    **Returns:** the `Stacked` members, in `itertools.product` order; each member is
    rebuilt through its constructors, so a bad value is named like a bad field.
    """
    if not isinstance(agent, AbstractAgent):
        raise ValueError(f"sweep(agent) must be one eqxrl agent, got {type(agent).__name__}")
    if not isinstance(values, Mapping) or not values:
        raise ValueError(
            f"sweep(values) must be a non-empty dict {{path: [values]}}; paths of {type(agent).__name__}: "
            f"{sorted(agent.hyperparameters())}"
        )
    lists = {}
    for name, vs in values.items():
        if isinstance(vs, (str, bytes)) or not isinstance(vs, Sequence) or not vs:
            raise ValueError(f"sweep(values[{name!r}]) must be a non-empty list of numbers, got {vs!r}")
        lists[name] = list(vs)
    if grid:
        combos = list(itertools.product(*lists.values()))
    else:
        lengths = {len(vs) for vs in lists.values()}
        if len(lengths) != 1:
            raise ValueError(f"sweep(grid=False) needs lists of one length, got lengths {[len(v) for v in lists.values()]}")
        combos = list(zip(*lists.values()))
    owner = f"sweep over {type(agent).__name__}"
    tunable = agent.hyperparameters()
    for name in lists:
        path = resolve_path(agent, name, owner)
        if path not in tunable:
            raise ValueError(
                f"{owner}: {path!r} is not a hyperparameter of this agent; its hyperparameters: {sorted(tunable)}"
            )
    return stack([set_paths(agent, dict(zip(lists, combo)), owner) for combo in combos])
