"""``offpolicy_throughput.py --breakdown``: where the time of one gradient update goes, and compile variants.

`update_costs`: process-CPU microseconds per gradient update of each piece, measured in isolation (one
jitted ``lax.scan`` of many repetitions, after a warm-up call, the minimum over interleaved rounds).
"Fixed batch" runs each library's own update function on one constant batch (rejax's pieces:
``peers.rejax_adapter.breakdown_jobs``). *Prototype fix*: the same eqxrl update with one change,
written here (not in eqxrl).

`compile_costs`: process-CPU seconds to compile eqxrl's training programs three ways (as ``train`` does,
one after the other, as one fused program), and the peer's. It takes ``train``'s compile apart with
eqxrl's internal loop API (``eqxrl.loop``: ``Chunk``, ``chunk``, ``init_state``, ``run_init``,
``run_chunk``, ``placeholder``, ``compile_train``), which may change between versions.
"""

from __future__ import annotations

import dataclasses
import math
import time

import equinox as eqx
import jax
import jax.numpy as jnp

from _common import fresh_caches
from _offpolicy_pairs import CONFIGS, PAIR_NAMES, make_eqxrl
from _report import table
from eqxrl.agents import SAC


class _SACNoClip(SAC):
    """Prototype fix: no gradient-clipping transform when `max_grad_norm` is inf."""

    def _opt(self, lr):
        from eqxrl.components import Adam

        return Adam(lr, self.max_grad_norm, clip="none")


def _cpu_seconds(fn, *args, reps: int) -> float:
    """Minimum process-CPU seconds of `reps` calls of the compiled `fn(*args)` (warm-up call first)."""
    jax.block_until_ready(fn(*args))
    best = math.inf
    for _ in range(reps):
        c0 = time.process_time()
        jax.block_until_ready(fn(*args))
        best = min(best, time.process_time() - c0)
    return best


def update_costs(pair: str, brax_backend: str, rounds: int = 2, reps: int = 2) -> dict[str, float]:
    """CPU microseconds per gradient update: eqxrl's pieces and (rejax pairs) the peer's."""
    from eqxrl.agents import Clock
    from eqxrl.components import Sample, Transition

    agent = make_eqxrl(pair, brax_backend)
    n_upd = agent.num_updates
    n_it = max(1, (32 if pair == "brax" else 600) // n_upd)
    total = jnp.asarray(10**6, jnp.int32)

    def iterations(agent, start: int, n: int):
        @eqx.filter_jit
        def run(state):
            def body(s, i):
                return agent.train_iteration(s, Clock(jnp.asarray(start, jnp.int32) + i, total))

            return jax.lax.scan(body, state, jnp.arange(n, dtype=jnp.int32))

        return run

    state = eqx.filter_jit(agent.init)(jax.random.key(0))
    n_warm = -(-agent.learning_starts // agent.steps_per_iteration)
    state, _ = iterations(agent, 0, n_warm)(state)
    jax.block_until_ready(state)
    n_w = max(1, min(n_it, n_warm - 1))
    fresh = eqx.filter_jit(agent.init)(jax.random.key(0))

    # A fixed batch for the update-only measurements.
    bs = agent.batch_size
    k1, k2, k3 = jax.random.split(jax.random.key(1), 3)
    obs = jax.random.normal(k1, (bs, agent.obs_size))
    if agent.discrete:
        act = jax.random.randint(k2, (bs,), 0, agent.action_size)
    else:
        act = jax.random.uniform(k2, (bs, agent.action_size), minval=-1.0, maxval=1.0)
    rew = jax.random.normal(k3, (bs,))
    batch = Sample(Transition(obs, act, rew, jnp.full((bs,), 0.99), obs), jnp.arange(bs), jnp.ones((bs,)))
    n_fixed = n_it * n_upd

    def update_only(agent):
        @eqx.filter_jit
        def run(learner):
            def one(c, k):
                l, u = c
                l, _, m = agent.update(l, batch, k, u, jnp.asarray(0.5))
                return (l, u + 1), m

            keys = jax.random.split(jax.random.key(2), n_fixed)
            (l, _), m = jax.lax.scan(one, (learner, jnp.asarray(0, jnp.int32)), keys)
            return l, jax.tree.map(jnp.mean, m)

        return run, (eqx.filter_jit(agent.init_learner)(jax.random.key(3)),), n_fixed

    buffer = agent.buffer

    @eqx.filter_jit
    def sample_only(bstate):
        def one(c, k):
            return c + jnp.sum(buffer.sample(bstate, k, bs, 0.4).data.rewards), None

        return jax.lax.scan(one, jnp.zeros(()), jax.random.split(jax.random.key(4), n_fixed))[0]

    jobs = {
        "eqxrl: full iteration, after warm-up": (iterations(agent, n_warm, n_it), (state,), n_it * n_upd),
        "eqxrl: warm-up iteration (collection only)": (iterations(agent, 0, n_w), (fresh,), n_w * n_upd),
        "eqxrl: update only, fixed batch": update_only(agent),
        "eqxrl: buffer sample only": (sample_only, (state.buffer,), n_fixed),
    }
    if pair in ("sac", "brax"):
        fields = {f.name: getattr(agent, f.name) for f in dataclasses.fields(agent)}
        jobs["eqxrl, prototype fix: update only, no clip transform"] = update_only(_SACNoClip(**fields))
    if pair != "brax":
        from peers import rejax_adapter

        jobs.update(rejax_adapter.breakdown_jobs(pair, CONFIGS[pair], obs, act, rew, agent.discrete, n_fixed))

    best = {name: math.inf for name in jobs}
    for _ in range(rounds):
        for name, (fn, args, count) in jobs.items():
            best[name] = min(best[name], 1e6 * _cpu_seconds(fn, *args, reps=reps) / count)
    return best


def compile_costs(pair: str, brax_backend: str, steps: int, rounds: int = 2) -> dict[str, float]:
    """Process-CPU seconds to compile eqxrl's training programs, three ways, and the peer's."""
    from eqxrl import loop
    from eqxrl.agents import Batch

    agent = make_eqxrl(pair, brax_backend)
    batch = Batch.of(agent)
    key = jax.random.key(0)
    n_it = steps // agent.steps_per_iteration
    cfg = loop.Chunk(batch, jnp.asarray(0, jnp.int32), jnp.asarray(n_it, jnp.int32), n_it)
    fused = eqx.filter_jit(lambda config, k: loop.chunk(config, loop.init_state(config.batch, k)))

    def serial():
        loop.run_init.lower(batch, key).compile()
        shapes = eqx.filter_eval_shape(loop.init_state, batch, key)
        loop.run_chunk.lower(cfg, loop.placeholder(shapes, key)).compile()

    jobs = {"eqxrl `train`: init and chunk programs, compiled concurrently": lambda: loop.compile_train(batch, key, cfg)}
    if pair != "brax":  # (each brax-env compile takes ~25 CPU-s; keep the breakdown short)
        jobs["eqxrl: the same two programs compiled one after the other"] = serial
    jobs["eqxrl, prototype fix: init + chunk as one program"] = lambda: fused.lower(cfg, key).compile()
    if pair != "brax":
        from peers import rejax_adapter

        jobs["rejax: `jax.jit(train).lower(key).compile()`"] = rejax_adapter.train_compile(pair, CONFIGS[pair], steps)
    best = {name: math.inf for name in jobs}
    for _ in range(rounds):
        for name, fn in jobs.items():
            fresh_caches()
            c0 = time.process_time()
            fn()
            best[name] = min(best[name], time.process_time() - c0)
    return best


def _pivot(pairs, values: dict[str, dict[str, float]], first: str, fmt: str) -> list[str]:
    """A table of pieces (rows) by pairs (columns)."""
    cols = [p for p in pairs if p in values]
    names = list(dict.fromkeys(name for p in cols for name in values[p]))
    rows = [[name] + [fmt.format(values[p][name]) if name in values[p] else "" for p in cols] for name in names]
    return table([first] + [" ".join(PAIR_NAMES[p][:2]) for p in cols], rows)


def render(pairs, parts: dict, cparts: dict) -> list[str]:
    """The breakdown's section of the record."""
    return [
        "",
        "## Where the time goes: process-CPU microseconds per gradient update",
        "",
        "Each piece measured in isolation: one jitted `lax.scan` of a few hundred repetitions, minimum over "
        "interleaved rounds, divided by the gradient updates it stands for. *Fixed batch*: each library's own "
        "update function on one constant batch (rejax's driven as its `train_iteration` drives it: target "
        "update once per iteration, a fresh rng per update, so nothing is loop-invariant). *Prototype fix*: "
        "the same eqxrl update with one change, written in the benchmark (not in eqxrl).",
        "",
        *_pivot(pairs, parts, "piece", "{:,.1f}"),
        "",
        "Compile, process-CPU seconds (minimum of 2 rounds, caches cleared before each): eqxrl's `init` "
        "and training chunk (for the run's budget) as `train` compiles them, the same two programs in "
        "series, a one-program prototype, and the peer's program.",
        "",
        *_pivot(pairs, cparts, "compile", "{:.2f}"),
    ]
