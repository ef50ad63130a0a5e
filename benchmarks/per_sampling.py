"""Prioritised replay: time per batch of `sample` and `update_priorities` against capacity,
beside flashbax's prioritised buffer.

For capacities 1e4, 1e5 and 1e6 (full buffers of small transitions: 8-float
observations, with random priorities), measures per batch of 256:

- PER `sample` (stratified sum-tree descent, `ceil(log_fanout(capacity))`
  steps, plus the gather of the 256 transitions and the importance weights),
- PER `update_priorities` (256 leaves and their ancestors),
- the same two for flashbax's prioritised item buffer
  (``fbx.make_prioritised_item_buffer``: a prioritised trajectory buffer with
  ``sample_sequence_length=1``, i.e. one stored `Transition` per sum-tree leaf,
  the honest equivalent of ours; ``make_prioritised_flat_buffer`` would store
  single observations and sample pairs of steps) holding the same items and
  raw priorities: its ``sample`` and ``set_priorities(indices, |td| + eps)``
  (flashbax's CPU update, a scan over the batch); ``--no-flashbax`` leaves it out,
- `PrioritizedReplayBuffer(fanout=k)` for each `--fanouts` value (the default
  fan-out is always included), to show why the default is what it is,
- for reference: one jitted `sample` call from Python (dispatch included),
  uniform `ReplayBuffer.sample`, and an O(capacity) inverse-CDF sampler
  (`cumsum` of the priorities + `searchsorted`, recomputed after a priority
  change as training requires).

Each figure is the median (and the minimum) over `--repeats` timings of one
jitted `lax.fori_loop` of `--iterations` batches (so per-call dispatch is
excluded), divided by the number of batches, after a warm-up call. The sampling
loops of all fan-outs and flashbax are timed round-robin (each once per repeat),
as are the update loops, so load changes on a shared machine reach every column
alike; the minimum is the steadier estimate of the cost itself. Run
``pip install -e ".[bench]"`` (flashbax), then ``python benchmarks/per_sampling.py``
(2-5 minutes); the tables are printed and written to
``benchmarks/results/per_sampling.md``.

What to expect on CPU
---------------------
The work per batch is O(batch * fanout * log_fanout(capacity)), but on XLA:CPU
the time is mostly a fixed cost per step of the descent: each level is a
handful of small fused loops over the 256 draws (gather a row of siblings per
draw, running sum, choose a child), and XLA's parallel-task assignment splits
any loop fusion that touches more than 256 KB (a gather from a large tree level,
or from the stored data) across threads (``outer_dimension_partitions`` in the
compiled HLO), so each such gather pays a thread fork/join, which on a loaded
machine costs more than the gather. Fewer levels is what helps: a binary tree
(flashbax's, and eqxrl's before the fan-out) descends 20 levels at 1e6, the
default fan-out 8 descends 7. Wider rows (16, 32) have fewer levels still but
cost more per level (the fused running sum is recomputed per element), so they
are slower. Gathering rows from static per-level slices (not the whole array)
keeps the upper levels' gathers out of the thread split. On the shared 2-core
machine the split is a large part of the time: pinned to one core
(``taskset -c 0``, where XLA splits nothing) at a load average near 3, the same
1e6 descent ran 2-3x faster than on both cores, and eqxrl and flashbax came
closer to each other (both then pay mostly the per-step cost). The O(capacity)
column shows what the sum tree saves.
"""

import functools
import statistics
import time

import equinox as eqx
import jax
import jax.numpy as jnp

from _report import Report, parser, table
from eqxrl.components import PrioritizedReplayBuffer, ReplayBuffer, Transition

BATCH = 256
OBS = 8
ALPHA = 0.6
EPS = 1e-6


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


def flashbax_buffer(capacity: int):
    """flashbax's prioritised item buffer: a prioritised trajectory buffer with one row,
    `sample_sequence_length=1` and `period=1`, so each item is one stored `Transition`
    (the same 8-float `obs` and `next_obs` as ours) and its sum tree has one leaf per item.
    `device="cpu"` selects flashbax's CPU update (`set_batch_scan`)."""
    import flashbax as fbx

    return fbx.make_prioritised_item_buffer(
        max_length=capacity, min_length=1, sample_batch_size=BATCH, add_batches=True, priority_exponent=ALPHA,
        device="cpu",
    )  # fmt: skip


def flashbax_full_state(buffer, capacity: int, key):
    """The same full buffer as `full_state`: the same items, the same raw priorities `|td| + eps`."""
    k1, k2 = jax.random.split(key)
    batch = jax.tree.map(lambda x: jax.random.normal(k1, (capacity, *x.shape)).astype(x.dtype), example())
    state = jax.jit(buffer.add)(buffer.init(example()), batch)
    td = 10.0 ** jax.random.uniform(k2, (capacity,), jnp.float32, -2.0, 2.0)
    state = jax.jit(buffer.set_priorities)(state, jnp.arange(capacity, dtype=jnp.int32), td + EPS)
    return jax.block_until_ready(state)


def flashbax_sample_loop(buffer, iterations: int):
    @jax.jit
    def run(state, key):
        def body(i, acc):
            s = buffer.sample(state, jax.random.fold_in(key, i))
            return acc + jnp.sum(s.indices).astype(jnp.float32) + jnp.sum(s.probabilities) + jnp.sum(s.experience.obs)

        return jax.lax.fori_loop(0, iterations, body, jnp.zeros((), jnp.float32))

    return run


def flashbax_update_loop(buffer, capacity: int, iterations: int):
    def run(state, key):
        def body(i, state):
            k1, k2 = jax.random.split(jax.random.fold_in(key, i))
            indices = jax.random.randint(k1, (BATCH,), 0, capacity, dtype=jnp.int32)
            td = jax.random.normal(k2, (BATCH,), jnp.float32)
            # What `PrioritizedReplayBuffer.update_priorities` does before its tree update.
            return buffer.set_priorities(state, indices, jnp.abs(td) + EPS)

        return jax.lax.fori_loop(0, iterations, body, state)

    return jax.jit(run, donate_argnums=0)


class Stateful:
    """A compiled loop over a donated state: each call replaces the state by the result."""

    def __init__(self, run, state, *args):
        self.run, self.state, self.args = run, state, args
        self()  # warm-up (compile)

    def __call__(self):
        self.state = jax.block_until_ready(self.run(self.state, *self.args))


def interleaved(calls: dict, repeats: int, iterations: int) -> dict:
    """(median, min) seconds per batch of each (already compiled) call, timed round-robin:
    repeat r times every call once before repeat r + 1, so a change of machine load
    reaches every column alike."""
    times = {name: [] for name in calls}
    for _ in range(repeats):
        for name, call in calls.items():
            t0 = time.perf_counter()
            jax.block_until_ready(call())
            times[name].append(time.perf_counter() - t0)
    return {name: per_batch(t, iterations) for name, t in times.items()}


def measure(capacity: int, iterations: int, repeats: int, fanouts: list[int], key, with_flashbax: bool) -> dict:
    default = PrioritizedReplayBuffer(capacity, alpha=ALPHA, eps=EPS)
    fanouts = sorted(set(fanouts) | {default.fanout})
    buffers = {k: PrioritizedReplayBuffer(capacity, alpha=ALPHA, eps=EPS, fanout=k) for k in fanouts}
    states = {k: full_state(buffers[k], capacity, key) for k in fanouts}
    out = {"capacity": capacity, "fanout": default.fanout, "fanouts": fanouts,
           "depth": {k: len(buffers[k]._widths) - 1 for k in fanouts}}  # fmt: skip

    # Sampling: every fan-out and flashbax, interleaved.
    samples = {}
    for k in fanouts:
        run = sample_loop(buffers[k], iterations)
        run(buffers[k], states[k], key)  # warm-up (compile)
        samples[k] = functools.partial(run, buffers[k], states[k], key)
    if with_flashbax:
        fbx_buffer = flashbax_buffer(capacity)
        fbx_state = flashbax_full_state(fbx_buffer, capacity, key)
        run = flashbax_sample_loop(fbx_buffer, iterations)
        run(fbx_state, key)
        samples["flashbax"] = functools.partial(run, fbx_state, key)
    out["sample"] = interleaved(samples, repeats, iterations)
    del samples

    single = eqx.filter_jit(lambda buffer, state, key: buffer.sample(state, key, BATCH, 0.4))
    single(default, states[default.fanout], key)
    out["sample_call"] = per_batch(timed(single, default, states[default.fanout], key, repeats=max(20, 5 * repeats)), 1)

    # Priority updates, in place in donated states, interleaved.
    updates = {
        k: Stateful(functools.partial(update_loop(buffers[k], capacity, iterations), buffers[k]), states.pop(k), key)
        for k in fanouts
    }
    if with_flashbax:
        updates["flashbax"] = Stateful(flashbax_update_loop(fbx_buffer, capacity, iterations), fbx_state, key)
        del fbx_state
    out["update"] = interleaved(updates, repeats, iterations)
    leaves = updates[default.fanout].state.tree[:capacity]
    del updates

    uniform = ReplayBuffer(capacity)
    ustate = full_state(uniform, capacity, key)
    run = sample_loop(uniform, iterations)
    run(uniform, ustate, key)
    out["uniform"] = per_batch(timed(run, uniform, ustate, key, repeats=repeats), iterations)
    del ustate

    run = cumsum_loop(capacity, iterations)
    run(leaves, key)
    out["cumsum"] = per_batch(timed(run, leaves, key, repeats=repeats), iterations)
    return out


def _us(seconds: float) -> str:
    return f"{seconds * 1e6:,.1f}"


def _cell(pair: tuple[float, float]) -> str:
    return f"{_us(pair[0])} ({_us(pair[1])})"


def _ratio(a: tuple[float, float], b: tuple[float, float]) -> str:
    return f"{a[0] / b[0]:.2f} ({a[1] / b[1]:.2f})"


def render(report: Report, rows: list[dict], a) -> str:
    base = rows[0]
    fbx = "flashbax" in base["sample"]
    lines = report.header(
        "Prioritised replay: sampling and priority updates against capacity", packages=("flashbax",) if fbx else ()
    )
    lines += [
        f"- batch {BATCH}; full buffers of `Transition`s with {OBS}-float observations; random priorities "
        f"(|td| log-uniform over 1e-2..1e2), alpha {ALPHA}, beta 0.4",
        f"- eqxrl: `PrioritizedReplayBuffer` with its default fan-out ({base['fanout']})"
        + ("; flashbax: `make_prioritised_item_buffer` (one stored `Transition` per item, binary sum tree, "
           "`device='cpu'`), the same items and raw priorities, `sample` and `set_priorities(|td| + eps)`"
           if fbx else ""),  # fmt: skip
        f"- each figure: median and min of {a.repeats} timings of a jitted `fori_loop` of {a.iterations} batches, "
        "divided by the number of batches (dispatch excluded), after a warm-up call; the sampling loops of every "
        "fan-out and of flashbax are timed round-robin (one loop each per repeat), and so are the update loops; "
        "'one call' is a single jitted `sample` called from Python (dispatch included)",
        "",
        "Each cell: median (min) in µs per batch of 256.",
        "",
    ]
    if fbx:
        lines += table(
            ["capacity", "eqxrl sample", "flashbax sample", "eqxrl / flashbax", "eqxrl update_priorities",
             "flashbax set_priorities", "eqxrl / flashbax"],
            [[f"{r['capacity']:,}", _cell(r["sample"][r["fanout"]]), _cell(r["sample"]["flashbax"]),
              _ratio(r["sample"][r["fanout"]], r["sample"]["flashbax"]), _cell(r["update"][r["fanout"]]),
              _cell(r["update"]["flashbax"]), _ratio(r["update"][r["fanout"]], r["update"]["flashbax"])]
             for r in rows],
        )  # fmt: skip
        lines += [""]
    lines += [f"Reference columns (eqxrl, fan-out {base['fanout']}):", ""]
    columns = ["capacity", "tree depth", "PER sample, one call (µs)", "uniform sample (µs/batch)",
               "O(capacity) cumsum + searchsorted (µs/batch)"]  # fmt: skip
    lines += table(columns, [
        [f"{r['capacity']:,}", r["depth"][r["fanout"]], *(_cell(r[k]) for k in ("sample_call", "uniform", "cumsum"))]
        for r in rows
    ])  # fmt: skip
    lines += ["", "Fan-out sweep (`PrioritizedReplayBuffer(fanout=k)`; depth = steps of the descent):", ""]
    lines += table(
        ["capacity", "fan-out", "depth", "sample (µs/batch)", "update_priorities (µs/batch)"],
        [[f"{r['capacity']:,}", f"**{k}**" if k == r["fanout"] else k, r["depth"][k], _cell(r["sample"][k]),
          _cell(r["update"][k])] for r in rows for k in r["fanouts"]],
    )  # fmt: skip

    def growth(r, k):
        return _ratio(r[k][r["fanout"]] if isinstance(r[k], dict) else r[k],
                      base[k][base["fanout"]] if isinstance(base[k], dict) else base[k])  # fmt: skip

    lines += [
        "",
        "Growth relative to the smallest capacity (ratio of medians, and of minima in parentheses; "
        "the tree-depth ratio is what a purely logarithmic cost would give):",
        "",
        *table(
            ["capacity", "depth ratio", "PER sample", "PER update", "O(capacity) baseline"],
            [[f"{r['capacity']:,}", f"{r['depth'][r['fanout']] / base['depth'][base['fanout']]:.2f}",
              *(growth(r, k) for k in ("sample", "update", "cumsum"))] for r in rows],
        ),  # fmt: skip
    ]
    return "\n".join(lines) + "\n"


def main(argv=None) -> None:
    p = parser(__doc__, "per_sampling")
    p.add_argument("--capacities", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    p.add_argument("--iterations", type=int, default=200, help="batches per timed loop")
    p.add_argument("--repeats", type=int, default=9, help="timed loops per figure (median reported)")
    p.add_argument("--fanouts", type=int, nargs="+", default=[2, 4, 8, 16, 32], help="fan-outs of the sweep")
    p.add_argument("--no-flashbax", action="store_true", help="leave out the flashbax column")
    a = p.parse_args(argv)
    report = Report(__file__, argv)
    rows = []
    for capacity in a.capacities:
        rows.append(measure(capacity, a.iterations, a.repeats, a.fanouts, jax.random.key(capacity), not a.no_flashbax))
        r = rows[-1]
        print(
            f"capacity {capacity:>9,} (median (min) µs): "
            + ", ".join(f"sample[{k}] {_cell(v)}" for k, v in r["sample"].items()) + "; "
            + ", ".join(f"update[{k}] {_cell(v)}" for k, v in r["update"].items())
            + f"; one call {_cell(r['sample_call'])}, uniform {_cell(r['uniform'])}, cumsum {_cell(r['cumsum'])}",
            flush=True,
        )  # fmt: skip
    report.emit(render(report, rows, a), a.out)


if __name__ == "__main__":
    main()
