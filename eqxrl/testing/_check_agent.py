"""`check_agent`: the contracts every eqxrl agent keeps, checked on a small configuration."""

import dataclasses
import functools
from collections.abc import Sequence
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array

from ..agents import AbstractAgent, Clock, hyperparameter_hint, stack
from ..components import AbstractReplayBuffer, Sample
from ..core import get_path, replace_paths
from ..loop import train
from ._common import as_key, fail, first_difference, path_name

_METRICS = "the metrics contract"
_SHAPES = "train_iteration keeps the state's structure, shapes and dtypes"


def _abstract(tree: Any) -> list[tuple[str, Any]]:
    """`(path, (shape, dtype))` for every array leaf and `(path, value)` for every other
    leaf: what `filter_jit` keys its cache on, but weak typing (an env's reset may give a
    weak-typed leaf that a step makes strong; `lax.scan`, which runs the iterations,
    promotes such a carry once instead of failing or recompiling)."""
    out = []
    for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]:
        if isinstance(leaf, (jax.Array, jax.ShapeDtypeStruct, np.ndarray)):
            out.append((path_name(path), (tuple(leaf.shape), str(leaf.dtype))))
        else:
            out.append((path_name(path), leaf))
    return out


def _check_state_signature(agent: AbstractAgent, init_key: Any, clock: Clock) -> Any:
    """The state `train_iteration` returns has the signature of the one `init(init_key)`
    gives it, so a compiled iteration is reused (no retrace) and `lax.scan` can carry it
    (traced only). **Returns:** the abstract metrics."""
    name = type(agent).__name__
    state, out = eqx.filter_eval_shape(lambda k: (s := agent.init(k), agent.train_iteration(s, clock)), init_key)
    if not (isinstance(out, tuple) and len(out) == 2):
        raise fail(_SHAPES, f"{name}.train_iteration must return (state, metrics), got {type(out).__name__}")
    new_state, metrics = out
    before = _abstract(state)
    after = _abstract(new_state)
    if [p for p, _ in before] != [p for p, _ in after]:
        missing = sorted({p for p, _ in before} ^ {p for p, _ in after})
        raise fail(_SHAPES, f"{name}.train_iteration changes the state's structure (leaves {missing[:3]} differ)")
    for (path, a), (_, b) in zip(before, after):
        if a != b:
            what = "(shape, dtype)" if isinstance(a, tuple) else "static value"
            raise fail(
                _SHAPES,
                f"{name}.train_iteration returns state leaf {path} with {what} {b}, init gave {a}; "
                "the next iteration would be traced and compiled again",
            )
    return metrics


def _check_metrics(agent: AbstractAgent, metrics: Any) -> None:
    name = type(agent).__name__
    if not isinstance(metrics, dict):
        raise fail(_METRICS, f"{name}.train_iteration must return metrics as a dict, got {type(metrics).__name__}")
    for needed in ("env_steps", "episode_return"):
        if needed not in metrics:
            raise fail(_METRICS, f"{name}'s metrics must contain {needed!r}, got {sorted(metrics)}")
    for key, value in metrics.items():
        if not isinstance(key, str) or jnp.shape(value) != ():
            raise fail(_METRICS, f"{name}'s metric {key!r} must be a scalar, got shape {jnp.shape(value)}")
    if not jnp.issubdtype(metrics["episode_return"].dtype, jnp.floating):
        raise fail(_METRICS, f"{name}'s metric 'episode_return' must be a float (NaN when no episode ended), "
                   f"got {metrics['episode_return'].dtype}")  # fmt: skip


_BATCHES = ((4,), (2, 3))


@eqx.filter_jit
def _policy_at_reset(agent: AbstractAgent, init_key: Any, key: Any) -> list:
    """The initial state's policy at the first observations of `prod(batch)` episodes,
    shaped `(*batch, *obs_shape)`, for each batch shape of `_BATCHES`, sampled and
    deterministic, in one program (an agent's init and act run op by op take seconds).
    **Returns:** `[(initial carry or None, new carry or None, [sampled actions,
    deterministic actions])]` in the order of `_BATCHES` (a list: a jitted dict comes back in
    sorted key order); a policy with memory acts through its carry, from the start of
    episodes."""
    state = agent.init(init_key)
    out = []
    for batch in _BATCHES:
        obs = jax.vmap(lambda k: agent.eval_env.reset(k)[1].obs)(jax.random.split(key, int(np.prod(batch))))
        obs = jax.tree.map(lambda x: x.reshape(batch + x.shape[1:]), obs)  # noqa: B023
        carry = agent.initial_carry(state, batch)
        actions, new_carry = [], None
        for deterministic in (False, True):
            act_key = None if deterministic else key
            if carry is None:
                actions.append(agent.act(state, obs, act_key, deterministic=deterministic))
            else:
                reset = jnp.ones(batch, bool)
                action, new_carry = agent.act_with_carry(state, obs, carry, reset, act_key, deterministic=deterministic)
                actions.append(action)
        out.append((carry, new_carry, actions))
    return out


def _check_act(agent: AbstractAgent, init_key: Any, key: Any) -> None:
    """`act` maps observations `(*batch, *obs_shape)` to actions `(*batch, *action_shape)` of
    `agent.eval_env`'s action space, sampled or deterministic (at `init(init_key)`'s state)."""
    name, contract = type(agent).__name__, "act maps a batch of observations to valid actions"
    space = agent.eval_env.action_space
    for batch, (carry, new_carry, both) in zip(_BATCHES, _policy_at_reset(agent, init_key, key)):
        for deterministic, actions in zip((False, True), both):
            if carry is None:
                call = f"{name}.act(state, obs of batch shape {batch}, deterministic={deterministic})"
            else:
                call = f"{name}.act_with_carry(state, obs of batch shape {batch}, deterministic={deterministic})"
                if _abstract(carry) != _abstract(new_carry):
                    raise fail(contract, f"{call} returned a carry {_abstract(new_carry)}, initial_carry gave "
                               f"{_abstract(carry)}")  # fmt: skip
            want = batch + tuple(space.shape)
            if tuple(jnp.shape(actions)) != want:
                raise fail(contract, f"{call} returned shape {tuple(jnp.shape(actions))}, expected {want}")
            dtype = getattr(space, "dtype", None)  # (every eqxrl space has one; a user's may not)
            if dtype is not None and jnp.result_type(actions) != dtype:
                raise fail(contract, f"{call} returned dtype {jnp.result_type(actions)}, expected {jnp.dtype(dtype)}")
            flat = jnp.reshape(actions, (-1, *space.shape))
            inside = np.asarray(jax.vmap(space.contains)(flat))
            if not inside.all():
                bad = int(np.argmin(inside))
                raise fail(contract, f"{call} returned {np.asarray(flat[bad])!r}, outside {space!r}")


def _check_hyperparameters(agent: AbstractAgent) -> dict[str, Any]:
    name, contract = type(agent).__name__, "hyperparameters are array leaves at the paths hyperparameters() gives"
    for f in dataclasses.fields(agent):
        value = getattr(agent, f.name, None)
        if f.metadata.get("static", False) or isinstance(value, (bool, np.bool_)):
            continue
        hint = hyperparameter_hint(agent, f.name)
        if hint:
            raise fail(contract, f"{name}.{f.name} = {value!r} is a Python number, not an array leaf{hint}")
    paths = agent.hyperparameters()
    for path, value in paths.items():
        try:
            found = get_path(agent, path)
        except (AttributeError, IndexError, ValueError, TypeError) as error:
            raise fail(contract, f"{name}.hyperparameters() lists {path!r}, which does not resolve ({error})") from None
        if found is not value or not eqx.is_inexact_array(found):
            raise fail(contract, f"{name}.hyperparameters()[{path!r}] must be the float array at that path, got {found!r}")
    return paths


def _perturbed(agent: AbstractAgent, paths: dict[str, Any]) -> AbstractAgent:
    """The agent with every hyperparameter multiplied by 0.99 (a value in every documented
    range the original is in: [0, 1], (0, 1], > 0, >= 0)."""
    return replace_paths(agent, {p: jnp.asarray(v) * 0.99 for p, v in paths.items()})


def _runs(agent: AbstractAgent, key: Any, paths: dict[str, Any], iterations: int, rtol: float, atol: float) -> None:
    """Chunking, resume, stacking and importance weights, from two compiled runs: a stack of
    the agent, a perturbed copy and (a replay agent) the agent whose samples are reweighted,
    run in chunks of `iterations` (and resumed halfway), and each of the first two members
    alone in one chunk. A member of the chunked stack that differs from its own one-chunk
    run is then run alone in chunks too, to say which of the two contracts it breaks."""
    name = type(agent).__name__
    budget = 2 * iterations * agent.steps_per_iteration
    members = (agent, _perturbed(agent, paths))  # (perturbed first: a hyperparameter may live in the buffer)
    key0, key1 = jax.random.split(key, 2)
    run_keys = [key0, key1]
    if (buffer := _replay(agent)) is not None:
        # Every member samples through `Reweighted`: with strength 0 it multiplies the weights
        # by exactly 1 (the agent's own numbers), with strength 1 by random factors; a third
        # member, with the first one's key, then shows whether the updates use the weights.
        members = tuple(_with_buffer(m, Reweighted(_replay(m), 0.0)) for m in members)
        members, run_keys = members + (_with_buffer(agent, Reweighted(buffer, 1.0)),), run_keys + [key0]
    keys = jnp.stack(run_keys)
    try:
        population = stack(list(members))
    except ValueError as error:
        raise fail("a stack of N agents equals N separate runs", f"eqxrl.stack([{name}, same with "
                   f"hyperparameters x 0.99]) failed: {error}") from None  # fmt: skip
    kept = []
    keep = lambda checkpoint: kept.append(checkpoint.copy())  # noqa: E731
    # (The stack on one device: the contracts checked are the agent's; sharding members over
    # devices is train's, and would cost the check a partitioned compile and padding.)
    stacked = train(population, keys, budget, progress=False, chunk_iterations=iterations, callback=keep, shard=False)
    alone = [train(m, keys[i], budget, progress=False, chunk_iterations=2 * iterations)
             for i, m in enumerate(members[:2])]  # fmt: skip
    steps = np.asarray(alone[0][1]["env_steps"])
    if not np.all(np.diff(steps) == agent.steps_per_iteration):
        raise fail(_METRICS, f"{name}'s metric 'env_steps' must grow by steps_per_iteration = "
                   f"{agent.steps_per_iteration} per iteration, got {steps.tolist()}")  # fmt: skip
    where = lambda run: f"{name}, {2 * iterations} iterations of {agent.steps_per_iteration} steps: {run}"  # noqa: E731
    member_state = lambda i: jax.tree.map(lambda x: x[i] if eqx.is_array(x) else x, stacked[0])  # noqa: E731
    for i, member in enumerate(members[:2]):
        member_metrics = {k: v[i] for k, v in stacked[1].items()}
        for label, a, b in (("state", member_state(i), alone[i][0]), ("metrics", member_metrics, alone[i][1])):
            if first_difference(a, b, rtol=rtol, atol=atol) is None:
                continue
            # Which contract: the member alone in the stack's chunks equals its one-chunk run, or not.
            chunked = train(member, keys[i], budget, progress=False, chunk_iterations=iterations)
            for part, x, y in (("state", chunked[0], alone[i][0]), ("metrics", chunked[1], alone[i][1])):
                if (gap := first_difference(x, y, rtol=rtol, atol=atol)) is not None:
                    raise fail("chunking does not change a run",
                               where(f"chunks of {iterations} vs one chunk, {part} {gap}"))  # fmt: skip
            what, gap = "the original" if i == 0 else "hyperparameters x 0.99", first_difference(a, b, rtol=rtol, atol=atol)
            raise fail("a stack of N agents equals N separate runs (hyperparameters vmapped as leaves)",
                       where(f"member {i} ({what}) vs its own run, {label} {gap}"))  # fmt: skip
    resumed = train(population, keys, budget, progress=False, chunk_iterations=iterations, resume=kept[0], shard=False)
    for label, a, b in (("state", resumed[0], stacked[0]), ("metrics", resumed[1], stacked[1])):
        if (gap := first_difference(a, b, rtol=rtol, atol=atol)) is not None:
            raise fail("resume does not change a run",
                       where(f"resumed after iteration {iterations} vs uninterrupted, {label} {gap}"))  # fmt: skip
    if buffer is not None and first_difference(member_state(2), member_state(0), rtol=0.0, atol=0.0) is None:
        raise fail("updates use the replay buffer's importance weights",
                   f"{name} trained {budget} steps gives the same state when every Sample.weights "
                   "is multiplied by a random factor in [0.1, 1]: its loss ignores the weights, so prioritized "
                   "replay's bias is never corrected")  # fmt: skip


class Reweighted(AbstractReplayBuffer):
    """Another buffer whose samples' importance weights are multiplied by random factors in
    `[1 - 0.9 * strength, 1]` (`check_agent`'s test that an agent's updates use
    `Sample.weights`): strength 0 leaves them exactly as they are, 1 draws from `[0.1, 1]`."""

    inner: AbstractReplayBuffer
    strength: Array
    capacity: int = eqx.field(static=True)

    def __init__(self, inner: AbstractReplayBuffer, strength: float = 1.0):
        self.inner = inner
        self.strength = jnp.asarray(strength, jnp.float32)
        self.capacity = inner.capacity

    def init(self, example):
        return self.inner.init(example)

    def add(self, state, batch):
        return self.inner.add(state, batch)

    def sample(self, state, key, batch_size, beta=1.0):
        drawn = self.inner.sample(state, key, batch_size, beta)
        factor = jax.random.uniform(jax.random.fold_in(key, 1), (batch_size,), minval=0.1, maxval=1.0)
        return Sample(drawn.data, drawn.indices, drawn.weights * (1.0 - self.strength * (1.0 - factor)))

    def update_priorities(self, state, indices, td_errors):
        return self.inner.update_priorities(state, indices, td_errors)


def _replay(agent: AbstractAgent) -> AbstractReplayBuffer | None:
    """The agent's replay buffer (`replay_buffer`: the built-in replay agents' `loop.buffer`, or a
    `buffer` field of the agent's own), else None."""
    buffer = getattr(agent, "replay_buffer", None)
    return buffer if isinstance(buffer, AbstractReplayBuffer) else None


def _warmup_iterations(agent: AbstractAgent) -> int:
    """Iterations until an agent with `learning_starts` has updated at least once (else 0)."""
    starts = getattr(agent, "learning_starts", 0)
    return -(-int(starts) // agent.steps_per_iteration) + 1 if isinstance(starts, (int, np.integer)) else 0


def _with_buffer(agent: AbstractAgent, buffer: AbstractReplayBuffer) -> AbstractAgent:
    """The agent with `buffer` where its `replay_buffer` is (`loop.buffer`, or its `buffer` field)."""
    return eqx.tree_at(lambda a: a.replay_buffer, agent, buffer)


def _with_setting(agent: AbstractAgent, name: str, value: Any) -> AbstractAgent:
    """The agent with a static setting changed: a field, or an init-only keyword's number in the
    module that holds it (`normalize_observations`: `loop.normalize_observations`, rebuilt)."""
    *parents, last = type(agent).aliases.get(name, name).split(".")
    if not parents:
        return dataclasses.replace(agent, **{last: value})
    holder = functools.reduce(getattr, parents, agent)
    return eqx.tree_at(lambda a: functools.reduce(getattr, parents, a), agent, dataclasses.replace(holder, **{last: value}))


def _check_flags(agent: AbstractAgent, key: Any, flags: Sequence[str]) -> None:
    """Each named static boolean field changes the state after one iteration when flipped."""
    name = type(agent).__name__
    budget = max(1, _warmup_iterations(agent)) * agent.steps_per_iteration  # (past any warm-up)
    base = train(agent, key, budget, progress=False)[0]
    for flag in flags:
        value = getattr(agent, flag)
        flipped = _with_setting(agent, flag, not value)
        other = train(flipped, key, budget, progress=False)[0]
        if first_difference(base, other, rtol=0.0, atol=0.0) is None:
            raise fail(f"{name}({flag}) takes effect",
                       f"{budget} env steps give the same state with {flag}={value} and {flag}={not value}; "
                       "the code the flag selects never runs")  # fmt: skip


def check_agent(
    agent: Any,
    *,
    key: Any = None,
    iterations: int = 2,
    flags: Sequence[str] = (),
    rtol: float = 1e-4,
    atol: float = 1e-6,
) -> None:
    """Check the contracts of an agent on its configuration (make it small: a few envs,
    short rollouts, small networks, a small buffer; it compiles two training programs and
    the policy).

    - `init`/`train_iteration`: `train_iteration` returns `(state, metrics)` with the
      state's structure, shapes, dtypes and static values unchanged (so no iteration is
      traced twice and `lax.scan` can carry the state);
    - the metrics contract: a dict of scalars with `"env_steps"` (growing by
      `steps_per_iteration` per iteration) and a float `"episode_return"`;
    - `act`: observations of batch shapes `(4,)` and `(2, 3)` give actions of those batch
      shapes, of the action space's dtype and inside it (`agent.eval_env`'s), sampled and
      deterministic;
    - hyperparameters: no numeric field is a plain Python number, and every path
      `hyperparameters()` lists resolves to the float array there;
    - `2 * iterations` iterations run in chunks of `iterations` equal one chunk (chunking),
      resuming from the checkpoint after `iterations` equals the uninterrupted run
      (resume), and a stack of the agent and a copy with every hyperparameter times 0.99
      (vmapped over them) equals the two separate runs;
    - an agent with a replay buffer (`replay_buffer`: the replay agents' `loop.buffer`) uses the
      importance weights: its state changes when every `Sample.weights` is multiplied by a random factor (a third
      member of the stack, with the first one's key; the runs are then long enough to pass
      `learning_starts`; every member samples through the wrapper that scales the
      weights, the first two by exactly 1);
    - each static boolean field named in `flags` changes the state after one iteration
      (past `learning_starts`) when flipped (a flag whose code never runs, e.g. advantage
      normalisation). Name flags that act from the first update: DQN's `double` changes
      nothing while the target network still equals the online one.

    The runs compared are differently compiled programs (XLA may round differently, by an
    ulp, in each), so they are compared with `rtol` and `atol`, after a few iterations.

    **Arguments:** `agent`; `key` (a PRNG key or an int seed; default seed 0);
    `iterations`; `flags`; `rtol`, `atol`.

    **Raises:** `eqxrl.testing.ContractError` (an `AssertionError`) naming the broken
    contract and the first leaf or metric that shows it.
    """
    if not isinstance(agent, AbstractAgent):
        raise ValueError(f"check_agent(agent) must be an eqxrl AbstractAgent, got {type(agent).__name__}")
    if isinstance(iterations, bool) or not isinstance(iterations, int) or iterations < 1:
        raise ValueError(f"check_agent(iterations) must be an int >= 1, got {iterations!r}")
    for flag in flags:  # (before the runs: a wrong name is known at once)
        if not isinstance(value := getattr(agent, flag, None), bool):
            raise ValueError(f"check_agent(flags) must name boolean fields of {type(agent).__name__}, "
                             f"got {flag!r} = {value!r}")  # fmt: skip
    if _replay(agent) is not None:
        # (the runs compared must reach the updates: past `learning_starts`)
        iterations = max(iterations, -(-_warmup_iterations(agent) // 2))
    key = as_key(key)
    spi = agent.steps_per_iteration
    if isinstance(spi, bool) or not isinstance(spi, (int, np.integer)) or spi < 1:
        raise fail("steps_per_iteration is a positive static int", f"{type(agent).__name__} gave {spi!r}")
    paths = _check_hyperparameters(agent)
    init_key, act_key, run_key = jax.random.split(key, 3)
    clock = Clock(jnp.zeros((), jnp.int32), jnp.asarray(2 * iterations, jnp.int32))
    _check_metrics(agent, _check_state_signature(agent, init_key, clock))
    _check_act(agent, init_key, act_key)
    _runs(agent, run_key, paths, iterations, rtol, atol)
    if flags:
        _check_flags(agent, run_key, flags)
