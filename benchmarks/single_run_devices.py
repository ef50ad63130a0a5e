"""One run split over the CPU devices (data parallel) against one device: does it pay?

`eqxrl.train` shards a batch of seeds over the devices; a single run stays on one device (and
the command line goes back to 1 CPU device for one seed). This benchmark prototypes splitting
*one* run over the devices, with no change to the agents: the run's chunk (`eqxrl.loop`'s
`FlatChunk`, the program `train` runs) is lowered with the leaves that carry the env batch axis
(the state's `env_state` and `obs`, leading axis `num_envs`) sharded over a one-axis mesh of the
devices and everything else replicated, and GSPMD partitions the program (the gradient means
become all-reduces). Arms, each run its own process (`EQXRL_CPU_DEVICES`):

- `1`: one CPU device (what `eqxrl train` with one seed does);
- `2`: two devices, nothing sharded (what a Python program gets by default today);
- `2env` (PPO): two devices, the env batch sharded, GSPMD's own choice for everything else;
- `2mb`: two devices, the minibatch constrained to be split over them too
  (`jax.lax.with_sharding_constraint` on the batch the loss sees: `PPO.loss`, and for SAC,
  whose one env cannot be split, the sampled replay batch in `batch_for_update`); PPO's env
  batch sharded as in `2env`.

Cases: PPO CartPole at its defaults (4 envs) and with 64 and 256 envs; SAC Pendulum at its
defaults (batch 256) and with `batch_size=1024` (short budgets: SAC's run is update-bound).
Figures per process: training env steps per second (compile excluded), compile seconds (init and
chunk, compiled concurrently as `train` does), the process's CPU seconds (user + system) for
compile + run, and the collectives in the compiled chunk's HLO (each op counted once where it is
written, not per execution). The arms are interleaved run by run, medians over `--runs`.

Equality: each arm's final state (every floating leaf) and metrics after a short run (`eq_steps`:
a few updates) are compared with the 1-device arm's at rtol 1e-4, atol 1e-6 (the device tests').

The persistent compilation cache is off in every worker (`EQXRL_COMPILE_CACHE=off`): compile
times are cold. Run `python benchmarks/single_run_devices.py` (about 20 minutes on 2 cores;
`--quick`: a smoke test). Writes `benchmarks/results/single_run_devices.md`.
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _report import Report, median, parser, table  # noqa: E402

# case: (label, agent kwargs, timed env steps, equality env steps)
CASES = {
    "ppo4": ("PPO CartPole, defaults (4 envs)", ("PPO", "CartPole-v1", {}), 2**18, 2**12),
    "ppo64": ("PPO CartPole, 64 envs", ("PPO", "CartPole-v1", {"num_envs": 64}), 2**19, 2**15),
    "ppo256": ("PPO CartPole, 256 envs", ("PPO", "CartPole-v1", {"num_envs": 256}), 2**20, 2**17),
    # (ppo1024 and sac4096, larger still for the trend: `--cases ppo1024,sac4096`, not run by default)
    "ppo1024": ("PPO CartPole, 1,024 envs", ("PPO", "CartPole-v1", {"num_envs": 1024}), 2**21, 2**19),
    "sac": ("SAC Pendulum, defaults (batch 256)", ("SAC", "Pendulum-v1", {}), 3_000, 1_050),
    "sac1024": ("SAC Pendulum, batch 1,024", ("SAC", "Pendulum-v1", {"batch_size": 1024}), 1_600, 1_050),
    "sac4096": ("SAC Pendulum, batch 4,096", ("SAC", "Pendulum-v1", {"batch_size": 4096}), 1_300, 1_050),
}
DEFAULT_CASES = ("ppo4", "ppo64", "ppo256", "sac", "sac1024")
ARMS = {"ppo": ("1", "2", "2env", "2mb"), "sac": ("1", "2", "2mb")}
ARM_DESC = {
    "1": "1 device",
    "2": "2 devices, nothing sharded",
    "2env": "2 devices, env batch sharded (GSPMD)",
    "2mb": "2 devices, env batch + minibatch sharded",
    "2mb-sac": "2 devices, replay batch sharded",
}
COLLECTIVES = ("all-reduce", "all-gather", "all-to-all", "collective-permute", "reduce-scatter")
AXIS = "data"
ENV_FIELDS = ("env_state", "obs")


# ============================================================================ the worker (one process, one arm)
def _hints(mesh) -> None:
    """Constrain the batch the loss sees to be split over `mesh` (PPO's minibatch, SAC's replay sample)."""
    import equinox as eqx
    import jax
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    from eqxrl.agents import PPO
    from eqxrl.agents._off_policy import AbstractOffPolicyAgent

    split = NamedSharding(mesh, P(AXIS))
    constrain = lambda tree: jax.tree.map(  # noqa: E731
        lambda x: jax.lax.with_sharding_constraint(x, split) if eqx.is_array(x) and x.ndim else x, tree
    )
    ppo_loss, batch_for_update = PPO.loss, AbstractOffPolicyAgent.batch_for_update
    PPO.loss = lambda self, params, batch, progress: ppo_loss(self, params, constrain(batch), progress)

    def sample(self, s, stats):
        out = batch_for_update(self, s, stats)
        return eqx.tree_at(lambda o: o.data, out, constrain(out.data))

    AbstractOffPolicyAgent.batch_for_update = sample


def worker(case: str, arm: str, steps: int, dump: str) -> dict:
    """One arm of one case in this process: compile and run the single run's chunk; its figures
    as a dict, its final state and metrics saved to `dump` (`.npz`)."""
    import equinox as eqx
    import jax
    import numpy as np
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    import eqxrl
    from eqxrl.loop._chunk import FlatChunk, init_state, placeholder, run_init
    from eqxrl.loop._keys import as_keys, batch_and_keys, num_iterations_for
    from eqxrl.loop._pure import TrainFunction

    name, env, kwargs = CASES[case][1]
    agent = getattr(eqxrl.agents, name)(env, **kwargs)
    usage = lambda: sum(resource.getrusage(resource.RUSAGE_SELF)[:2])  # noqa: E731
    cpu0, t0 = usage(), time.perf_counter()
    mesh = Mesh(np.array(jax.devices()), (AXIS,))
    sharded = arm in ("2env", "2mb")
    if arm == "2mb":
        _hints(mesh)
    key = as_keys(jax.random.key(0))
    batch, key = batch_and_keys(agent, key)
    pure = TrainFunction(agent, num_iterations_for("bench", agent, steps), 0, 10)
    iterations = pure.num_iterations
    config = pure.chunk_config(key, 0, iterations)
    shapes = eqx.filter_eval_shape(init_state, batch, key)
    like = placeholder(shapes, key)
    program = FlatChunk(config, like)
    paths = [p for p, x in jax.tree_util.tree_flatten_with_path(like)[0] if eqx.is_array(x)]
    leaves = program.leaves(like)
    rep, split = NamedSharding(mesh, P()), NamedSharding(mesh, P(AXIS))

    def placement(path, x):  # the env batch axis: a field of ENV_FIELDS, leading axis num_envs
        env_axis = getattr(path[0], "name", None) in ENV_FIELDS and x.ndim and x.shape[0] == agent.num_envs
        return split if env_axis and agent.num_envs % len(jax.devices()) == 0 else rep

    shardings = [placement(p, x) for p, x in zip(paths, leaves)] if sharded else None
    if sharded:
        program.config_leaves = [jax.device_put(x, rep) for x in program.config_leaves]
        leaves = [jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s) for x, s in zip(leaves, shardings)]
    lowered = program.lower(leaves)
    lowered_init = run_init.lower(batch, key)
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        init_done = pool.submit(lowered_init.compile)
        compiled = lowered.compile()
        init_done.result()
    compile_seconds = time.perf_counter() - t0
    hlo = compiled.as_text()
    if os.environ.get("SINGLE_RUN_HLO"):  # (to read what GSPMD did)
        Path(os.environ["SINGLE_RUN_HLO"]).write_text(hlo)
    counts = {c: len(re.findall(rf"\s{c}(?:-start)?\(", hlo)) for c in COLLECTIVES}
    state = run_init(batch, key)  # (the compiled init, from JAX's cache)
    leaves = program.leaves(state)
    if sharded:
        leaves = [jax.device_put(x, s) for x, s in zip(leaves, shardings)]
    jax.block_until_ready(leaves)
    t1 = time.perf_counter()
    out, metrics = compiled(program._config(0), leaves)
    jax.block_until_ready((out, metrics))
    run_seconds = time.perf_counter() - t1
    cpu = usage() - cpu0
    arrays = {f"leaf{i}": np.asarray(x) for i, x in enumerate(out) if jax.dtypes.issubdtype(x.dtype, np.inexact)}
    arrays.update({f"metric_{k}": np.asarray(v) for k, v in metrics.items()})
    np.savez(dump, **arrays)
    env_steps = iterations * agent.steps_per_iteration
    split_leaves = sum(s is split for s in shardings) if sharded else 0
    return dict(devices=jax.device_count(), sps=env_steps / run_seconds, compile=compile_seconds, run=run_seconds,
                cpu=cpu, collectives=counts, split_leaves=split_leaves, iterations=iterations)  # fmt: skip


# ============================================================================ the parent
def run_one(case: str, arm: str, steps: int, dump: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS" or "device_count" not in v}
    env["EQXRL_CPU_DEVICES"] = "1" if arm == "1" else "2"
    env["EQXRL_COMPILE_CACHE"] = "off"
    out = subprocess.run(
        [sys.executable, __file__, "--worker", case, arm, str(steps), dump], env=env, capture_output=True, text=True,
        timeout=1800,
    )  # fmt: skip
    if out.returncode != 0:
        raise RuntimeError(f"{case} {arm}: {out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def max_diff(a_path: str, b_path: str, rtol: float, atol: float) -> tuple[bool, float, float, int]:
    """Whether every array of `b` equals `a`'s within (rtol, atol); the largest absolute and
    relative difference; the number of arrays compared."""
    import numpy as np

    a, b = np.load(a_path), np.load(b_path)
    assert sorted(a.files) == sorted(b.files), (a.files, b.files)
    ok, worst_abs, worst_rel = True, 0.0, 0.0
    for k in a.files:
        x, y = a[k].astype(np.float64), b[k].astype(np.float64)
        fin = np.isfinite(x) & np.isfinite(y)
        ok &= bool(np.array_equal(np.isnan(x), np.isnan(y)) and np.allclose(x[fin], y[fin], rtol=rtol, atol=atol))
        d = np.abs(x[fin] - y[fin])
        if d.size:
            worst_abs = max(worst_abs, float(d.max()))
            worst_rel = max(worst_rel, float((d / np.maximum(np.abs(x[fin]), atol)).max()))
    return ok, worst_abs, worst_rel, len(a.files)


def describe(case: str, arm: str) -> str:
    return ARM_DESC[f"{arm}-sac" if case.startswith("sac") and f"{arm}-sac" in ARM_DESC else arm]


def wait_for_quiet(limit: float, wait: float) -> None:
    """Sleep (up to `wait` seconds) until the 1-minute load average is below `limit`."""
    t0 = time.time()
    while os.getloadavg()[0] >= limit and time.time() - t0 < wait:
        print(f"load {os.getloadavg()[0]:.1f} >= {limit}: waiting", flush=True)
        time.sleep(30)


def main(argv: list[str] | None = None) -> None:
    p = parser(__doc__, "single_run_devices", runs=3, quick="one run per arm, short budgets, no record")
    p.add_argument("--cases", default=",".join(DEFAULT_CASES), help=f"comma-separated cases (of {', '.join(CASES)})")
    p.add_argument("--wait", type=float, default=600, help="seconds to wait for a 1-min load below 1.5 (0: none)")
    a = p.parse_args(argv)
    cases = [c.strip() for c in a.cases.split(",") if c.strip()]
    scale = 8 if a.quick else 1
    if a.quick:
        a.runs = 1
    report = Report(__file__, sys.argv[1:] if argv is None else argv)
    tmp = tempfile.mkdtemp(prefix="single_run_devices_")
    rtol, atol = 1e-4, 1e-6

    # Equality first (short runs), then the timings, arms interleaved run by run.
    equal: dict[str, dict[str, tuple]] = {}
    for case in cases:
        arms = ARMS[CASES[case][1][0].lower()]
        dumps = {arm: f"{tmp}/eq_{case}_{arm}.npz" for arm in arms}
        for arm in arms:
            run_one(case, arm, CASES[case][3], dumps[arm])
        equal[case] = {arm: max_diff(dumps["1"], dumps[arm], rtol, atol) for arm in arms[1:]}
        print("equality", case, equal[case], flush=True)
    if a.wait:
        wait_for_quiet(1.5, a.wait)
    load_timed = "/".join(f"{x:.1f}" for x in os.getloadavg())
    got: dict[str, dict[str, list[dict]]] = {}
    for case in cases:
        arms = ARMS[CASES[case][1][0].lower()]
        got[case] = {arm: [] for arm in arms}
        for r in range(a.runs):
            for arm in arms:
                dump = f"{tmp}/t_{case}_{arm}_{r}.npz"
                got[case][arm].append(run_one(case, arm, max(CASES[case][2] // scale, CASES[case][3]), dump))
                print(case, arm, got[case][arm][-1], f"load {os.getloadavg()[0]:.1f}", flush=True)

    med = lambda runs, k: median(r[k] for r in runs)  # noqa: E731
    lines = report.header("One run split over the CPU devices (data parallel) against one device")
    lines += [
        f"- 1-min load average when the timed runs started: {load_timed} (equality runs before it)",
        "",
        f"Medians of {a.runs} runs per arm, arms interleaved, each run its own process (`EQXRL_CPU_DEVICES`,",
        "compile cache off). sps: training env steps per wall second, compile excluded; compile: init and",
        "chunk compiled concurrently (as `train` does); CPU: the process's user + system seconds for",
        "compile + run; speed-up: sps over the 1-device arm's. Collectives: ops in the compiled chunk's HLO",
        "(each counted once where written; inside the update loop they run once per minibatch/update).",
        "",
    ]
    rows = []
    for case in cases:
        label, (_, _, kwargs), steps, _ = CASES[case]
        one = got[case]["1"]
        for arm, runs in got[case].items():
            c = runs[0]["collectives"]
            coll = ", ".join(f"{v} {k}" for k, v in c.items() if v) or "none"
            rows.append([
                f"{label}, {max(steps // scale, CASES[case][3]):,} steps" if arm == "1" else "", describe(case, arm),
                f"{med(runs, 'sps'):,.0f}", f"{med(runs, 'sps') / med(one, 'sps'):.2f}", f"{med(runs, 'compile'):.1f}",
                f"{med(runs, 'run'):.1f}", f"{med(runs, 'cpu'):.1f}", coll,
            ])  # fmt: skip
    lines += table(["case", "arm", "sps", "speed-up", "compile (s)", "run (s)", "CPU (s)", "collectives in the chunk"], rows, "llrrrrrl")
    lines += [
        "",
        f"Equality with the 1-device arm after a short run (final state's floating leaves and every metric; "
        f"rtol {rtol:g}, atol {atol:g}):",
        "",
    ]
    eq_rows = []
    for case in cases:
        for arm, (ok, dabs, drel, n) in equal[case].items():
            eq_rows.append([CASES[case][0] + f", {CASES[case][3]:,} steps", describe(case, arm), "yes" if ok else "**no**",
                            f"{dabs:.2e}", f"{drel:.2e}", n])  # fmt: skip
    lines += table(["case", "arm", "equal", "max abs diff", "max rel diff (|x| >= atol)", "arrays"], eq_rows, "llrrrr")
    lines.append("")
    lines.append("Per-run figures (sps):")
    lines.append("")
    for case in cases:
        for arm, runs in got[case].items():
            lines.append(f"- {case} {arm}: " + ", ".join(f"{r['sps']:,.0f}" for r in runs))
    report.emit("\n".join(lines) + "\n", "-" if a.quick else a.out)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        print(json.dumps(worker(sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5])))
    else:
        main()
