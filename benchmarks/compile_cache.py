"""The persistent compilation cache (on at `import eqxrl`): compile time of `eqxrl train`, or of
a Python script that calls `eqxrl.train`, with the cache off, cold (an empty cache directory)
and warm (the same command or script run again).

Each run is a fresh process: `python -m eqxrl train ... --quiet`, whose compile time is the one
the command prints in its summary, or (`--python`) `python -c` a script that builds the agent
with its defaults and calls `eqxrl.train(agent, key, total_steps, return_info=True)`, printing
`TrainInfo.compile_seconds` (both: the `init` and chunk programs); beside it the whole process's
wall and CPU time (imports, compile, training; the command's evaluation and files too). Runs are
interleaved (off, cold, warm, off, cold, warm, ...) and the medians reported.

    python benchmarks/compile_cache.py                 # PPO CartPole, 50k steps, 3 runs per arm
    python benchmarks/compile_cache.py --python --out benchmarks/results/compile_cache_python.md
    python benchmarks/compile_cache.py --agent sac --env Pendulum-v1 --total-steps 5000
"""

from __future__ import annotations

import os
import re
import resource
import subprocess
import sys
import tempfile
import time

from _report import Report, median, parser, table

ARMS = ("off", "cold", "warm")


SCRIPT = """
import sys, jax, eqxrl
cls = eqxrl.runs.AGENTS[sys.argv[1]]
agent = cls(sys.argv[2] or cls.default_env)
_, _, info = eqxrl.train(agent, jax.random.key(0), int(sys.argv[3]), progress=False, return_info=True)
print(f"compile time {info.compile_seconds:.3f} s")
"""


def run_once(agent: str, env: str | None, total_steps: int, cache: str, run_dir: str, python: bool = False) -> dict:
    if python:
        argv = [sys.executable, "-c", SCRIPT, agent, env or "", str(total_steps)]
    else:
        argv = [sys.executable, "-m", "eqxrl", "train", agent, "--total-steps", str(total_steps), "--quiet", "--run-dir", run_dir]
        if env:
            argv += ["--env", env]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    out = subprocess.run(argv, env=dict(os.environ, EQXRL_COMPILE_CACHE=cache), capture_output=True, text=True, check=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    compile_s = float(re.search(r"compile time\s+([\d.]+) s", out.stdout).group(1))
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return dict(compile=compile_s, wall=wall, cpu=cpu)


def main(argv=None) -> None:
    p = parser(__doc__, "compile_cache", runs=3, quick="smoke test: 1 run per arm, 10k steps")
    p.add_argument("--agent", default="ppo")
    p.add_argument("--env", default=None)
    p.add_argument("--total-steps", type=int, default=50_000)
    p.add_argument("--python", action="store_true", help="a script calling eqxrl.train instead of the command line")
    a = p.parse_args(argv)
    report = Report(__file__, argv)
    if a.quick:
        a.runs, a.total_steps = 1, 10_000
    results = {arm: [] for arm in ARMS}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(a.runs):
            cache = os.path.join(tmp, f"cache{r}")  # empty for "cold", filled by it for "warm"
            for arm in ARMS:
                setting = "off" if arm == "off" else cache
                res = run_once(a.agent, a.env, a.total_steps, setting, os.path.join(tmp, f"run-{r}-{arm}"), a.python)
                results[arm].append(res)
                print(f"run {r + 1}/{a.runs} {arm:>4}: compile {res['compile']:.1f} s, process wall {res['wall']:.1f} s, "
                      f"CPU {res['cpu']:.1f} s", flush=True)  # fmt: skip
    if a.python:
        what = f"a script: `eqxrl.train({a.agent} on {a.env or 'its default env'}, key, {a.total_steps:,})`"
        lines = report.header(f"The compilation cache for Python users: {what} off, cold and warm")
        compiled = "`TrainInfo.compile_seconds` (init and chunk programs)"
        process = "the whole script (imports, compile, training)"
    else:
        what = f"`eqxrl train {a.agent}{' --env ' + a.env if a.env else ''} --total-steps {a.total_steps:,} --quiet`"
        lines = report.header(f"The CLI's compilation cache: `eqxrl train {a.agent}` off, cold and warm")
        compiled = "the command's own `compile time` line (init and chunk programs)"
        process = "the whole command (imports, compile, training, evaluation, run directory)"
    lines += [
        f"- {what}, a fresh process per run; medians of {a.runs} interleaved runs per arm",
        f"- **compile**: {compiled}; **process**: {process}",
        "",
    ]
    rows = []
    off = median(x["compile"] for x in results["off"])
    for arm in ARMS:
        c = median(x["compile"] for x in results[arm])
        rows.append([arm, f"{c:.2f}", f"{c / off:.2f}", f"{median(x['wall'] for x in results[arm]):.1f}",
                     f"{median(x['cpu'] for x in results[arm]):.1f}"])  # fmt: skip
    lines += table(["cache", "compile (s)", "compile / off", "process wall (s)", "process CPU (s)"], rows)
    report.emit("\n".join(lines) + "\n", a.out)


if __name__ == "__main__":
    main()
