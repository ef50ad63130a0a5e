"""Prioritised replay: time per batch of `sample` and `update_priorities` against capacity.

For capacities 1e4, 1e5 and 1e6 (full buffers of small transitions: 8-float
observations, with random priorities), measures per batch of 256:

- PER `sample` (stratified sum-tree descent, `log2(capacity)` steps, plus the
  gather of the 256 transitions and the importance weights),
- PER `update_priorities` (256 leaves and their ancestors),
- for reference: one jitted `sample` call from Python (dispatch included),
  uniform `ReplayBuffer.sample`, and an O(capacity) inverse-CDF sampler
  (`cumsum` of the priorities + `searchsorted`, recomputed after a priority
  change as training requires).

Each figure is the median (and the minimum) over `--repeats` timings of one
jitted `lax.fori_loop` of `--iterations` batches (so per-call dispatch is
excluded), divided by the number of batches, after a warm-up call. On a shared
machine the minimum is the steadier estimate of the cost itself. Run ``python benchmarks/per_sampling.py``
(about a minute); the table is printed and written to
``benchmarks/results/per_sampling.md``.

What to expect on CPU
---------------------
The work per batch is O(batch * log2(capacity)), but on XLA:CPU the wall time
grows faster than the depth between 1e4 and 1e6: XLA's parallel-task
assignment splits any loop fusion whose operand is larger than 256 KB across
threads (``outer_dimension_partitions`` in the compiled HLO), so each
256-element gather from a large tree level (or from the stored data) pays a
thread fork/join, and at 1e6 the 8 MB tree and the stored data no longer fit
in cache. ``PrioritizedReplayBuffer`` gathers from static per-level slices of
the tree to keep the upper levels out of this (about 5x faster at 1e5 than
gathering from the whole array, in an interleaved A/B run on 2 cores); the
O(capacity) column shows what the sum tree saves.
"""

import math
import statistics
import time

import equinox as eqx
import jax
import jax.numpy as jnp

from _report import Report, parser, table
from eqxrl.components import PrioritizedReplayBuffer, ReplayBuffer, Transition

BATCH = 256
OBS = 8


def example() -> Transition:
    return Transition(
        obs=jnp.zeros((OBS,), jnp.float32),
        action=jnp.zeros((), jnp.int32),
        reward=jnp.zeros((), jnp.float32),
        discount=jnp.zeros((), jnp.float32),
        next_obs=jnp.zeros((OBS,), jnp.float32),
    )


def full_state(buffer, capacity: int, key):
    """A full buffer with random (log-uniform over 4 decades) priorities."""
    k1, k2 = jax.random.split(key)
    batch = jax.tree.map(lambda x: jax.random.normal(k1, (capacity, *x.shape)).astype(x.dtype), example())
    state = eqx.filter_jit(buffer.add)(buffer.init(example()), batch)
    if isinstance(buffer, PrioritizedReplayBuffer):
        td = 10.0 ** jax.random.uniform(k2, (capacity,), jnp.float32, -2.0, 2.0)
        state = eqx.filter_jit(buffer.update_priorities)(state, jnp.arange(capacity, dtype=jnp.int32), td)
    return jax.block_until_ready(state)


def timed(fn, *args, repeats: int) -> list[float]:
    """Wall times in seconds of `repeats` calls of `fn(*args)` (already compiled)."""
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - t0)
    return times


def per_batch(times: list[float], iterations: int) -> tuple[float, float]:
    """(median, min) seconds per batch."""
    return statistics.median(times) / iterations, min(times) / iterations


def sample_loop(buffer, iterations: int):
    @eqx.filter_jit
    def run(buffer, state, key):
        def body(i, acc):
            s = buffer.sample(state, jax.random.fold_in(key, i), BATCH, 0.4)
            return acc + jnp.sum(s.indices).astype(jnp.float32) + jnp.sum(s.weights) + jnp.sum(s.data.obs)

        return jax.lax.fori_loop(0, iterations, body, jnp.zeros((), jnp.float32))

    return run


def update_loop(buffer, capacity: int, iterations: int):
    def run(buffer, state, key):
        def body(i, state):
            k1, k2 = jax.random.split(jax.random.fold_in(key, i))
            indices = jax.random.randint(k1, (BATCH,), 0, capacity, dtype=jnp.int32)
            td = jax.random.normal(k2, (BATCH,), jnp.float32)
            return buffer.update_priorities(state, indices, td)

        return jax.lax.fori_loop(0, iterations, body, state)

    # The state is donated: the loop updates the tree in place, as a training loop does.
    return eqx.filter_jit(run, donate="all-except-first")


def cumsum_loop(capacity: int, iterations: int):
    """O(capacity) reference: inverse CDF by cumsum + searchsorted after each priority change."""

    @jax.jit
    def run(leaves, key):
        def body(i, carry):
            leaves, acc = carry
            k1, k2, k3 = jax.random.split(jax.random.fold_in(key, i), 3)
            # One priority changes per batch, so the cumsum cannot be hoisted out of the loop.
            leaves = leaves.at[jax.random.randint(k1, (), 0, capacity)].set(jax.random.uniform(k2, (), jnp.float32))
            cdf = jnp.cumsum(leaves)
            u = (jnp.arange(BATCH, dtype=jnp.float32) + jax.random.uniform(k3, (BATCH,), jnp.float32)) * (
                cdf[-1] / BATCH
            )
            idx = jnp.minimum(jnp.searchsorted(cdf, u, side="right"), capacity - 1)
            return leaves, acc + jnp.sum(idx).astype(jnp.float32)

        return jax.lax.fori_loop(0, iterations, body, (leaves, jnp.zeros((), jnp.float32)))[1]

    return run


def measure(capacity: int, iterations: int, repeats: int, key) -> dict:
    per = PrioritizedReplayBuffer(capacity, alpha=0.6)
    uniform = ReplayBuffer(capacity)
    state = full_state(per, capacity, key)
    out = {"capacity": capacity, "depth": int(math.log2(per._leaves))}

    run = sample_loop(per, iterations)
    run(per, state, key)  # warm-up (compile)
    out["sample"] = per_batch(timed(run, per, state, key, repeats=repeats), iterations)

    single = eqx.filter_jit(lambda buffer, state, key: buffer.sample(state, key, BATCH, 0.4))
    single(per, state, key)
    out["sample_call"] = per_batch(timed(single, per, state, key, repeats=max(20, 5 * repeats)), 1)

    run = update_loop(per, capacity, iterations)
    state = run(per, state, key)  # warm-up (compile); the donated state is replaced by the result
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        state = jax.block_until_ready(run(per, state, key))
        times.append(time.perf_counter() - t0)
    out["update"] = per_batch(times, iterations)

    ustate = full_state(uniform, capacity, key)
    run = sample_loop(uniform, iterations)
    run(uniform, ustate, key)
    out["uniform"] = per_batch(timed(run, uniform, ustate, key, repeats=repeats), iterations)
    del ustate

    leaves = state.tree[per._leaves : per._leaves + capacity]
    run = cumsum_loop(capacity, iterations)
    run(leaves, key)
    out["cumsum"] = per_batch(timed(run, leaves, key, repeats=repeats), iterations)
    return out


def _us(seconds: float) -> str:
    return f"{seconds * 1e6:,.1f}"


def _cell(pair: tuple[float, float]) -> str:
    return f"{_us(pair[0])} ({_us(pair[1])})"


def render(report: Report, rows: list[dict], a) -> str:
    base = rows[0]
    lines = report.header("Prioritised replay: sampling and priority updates against capacity")
    lines += [
        f"- batch {BATCH}; full buffers of `Transition`s with {OBS}-float observations; random priorities "
        "(|td| log-uniform over 1e-2..1e2), alpha 0.6, beta 0.4",
        f"- each figure: median and min of {a.repeats} timings of a jitted `fori_loop` of {a.iterations} batches, "
        "divided by the number of batches (dispatch excluded), after a warm-up call; "
        "'one call' is a single jitted `sample` called from Python (dispatch included)",
        "",
        "Each cell: median (min) in µs.",
        "",
    ]
    columns = ["capacity", "tree depth", "PER sample (µs/batch)", "PER update_priorities (µs/batch)",
               "PER sample, one call (µs)", "uniform sample (µs/batch)", "O(capacity) cumsum + searchsorted (µs/batch)"]  # fmt: skip
    lines += table(columns, [
        [f"{r['capacity']:,}", r["depth"], *(_cell(r[k]) for k in ("sample", "update", "sample_call", "uniform", "cumsum"))]
        for r in rows
    ])  # fmt: skip

    def ratio(r, k):
        return f"{r[k][0] / base[k][0]:.2f} ({r[k][1] / base[k][1]:.2f})"

    lines += [
        "",
        "Growth relative to the smallest capacity (ratio of medians, and of minima in parentheses; "
        "the tree-depth ratio is what a purely logarithmic cost would give):",
        "",
        *table(
            ["capacity", "depth ratio", "PER sample", "PER update", "O(capacity) baseline"],
            [[f"{r['capacity']:,}", f"{r['depth'] / base['depth']:.2f}", *(ratio(r, k) for k in ("sample", "update", "cumsum"))]
             for r in rows],
        ),  # fmt: skip
    ]
    return "\n".join(lines) + "\n"


def main(argv=None) -> None:
    p = parser(__doc__, "per_sampling")
    p.add_argument("--capacities", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    p.add_argument("--iterations", type=int, default=200, help="batches per timed loop")
    p.add_argument("--repeats", type=int, default=9, help="timed loops per figure (median reported)")
    a = p.parse_args(argv)
    report = Report(__file__, argv)
    rows = []
    for capacity in a.capacities:
        rows.append(measure(capacity, a.iterations, a.repeats, jax.random.key(capacity)))
        r = rows[-1]
        print(
            f"capacity {capacity:>9,} (median (min) µs): sample {_cell(r['sample'])}, update {_cell(r['update'])}, "
            f"one call {_cell(r['sample_call'])}, uniform {_cell(r['uniform'])}, cumsum {_cell(r['cumsum'])}",
            flush=True,
        )
    report.emit(render(report, rows, a), a.out)


if __name__ == "__main__":
    main()
