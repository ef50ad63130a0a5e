"""DADS on brax ant with the torso x-y descriptor: throughput and skill coverage on CPU.

One run of eqxrl's DADS (``eqxrl.agents.DADS``) on ``brax/ant`` (x-y of the
torso as the state descriptor, x-y prior for the skill dynamics), for a budget
that fits a few minutes on a CPU. The script reports

- compile time (``init`` and the training chunk, from ``TrainInfo``);
- env steps per second and gradient updates per second of training (wall
  clock after compilation; one update = one skill-dynamics update plus one
  SAC update on a sampled batch);
- the coverage of the skills, from one deterministic episode per skill
  (``DADS.evaluate_skills``) of the untrained and of the trained policy: the
  final x-y of each skill, the mean pairwise distance between the skills'
  final x-y, and the largest distance of any skill from its start;
- the mean intrinsic reward and the dynamics log-likelihood over training;

and writes ``benchmarks/results/dads_ant.md`` (plus ``dads_ant_skills.png``,
the skills' x-y trajectories). It also records whether QDax (whose DADS is
the peer implementation) installs next to this environment's JAX, with the
resolver's message when it does not; comparing learning curves with QDax is
left to a machine where both run (see the results file).

Run ``python benchmarks/dads_ant.py`` (120,000 env steps, about 7 minutes on
2 shared CPU cores: ~1-2 minutes of compilation, ~2-3 of training at ~700-1,100 env
steps/s) or ``--quick`` for a smoke test. ``--help`` lists the options.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

import jax
import numpy as np

import eqxrl
from _report import Report, parser, table
from eqxrl.agents import DADS
from eqxrl.runs import plot_skill_trajectories


def build_agent(args: argparse.Namespace) -> DADS:
    # brax's ant ends an episode when the torso leaves [0.2, 1.0] in height; a
    # skill-discovery run keeps episodes full length (the DADS paper's setting),
    # so that the negative intrinsic rewards of early training do not teach falling.
    env = eqxrl.envs.make(
        "brax/ant",
        episode_length=args.episode_length,
        backend=args.backend,
        terminate_when_unhealthy=False,
    )
    return DADS(
        env,
        num_skills=args.num_skills,
        num_experts=4,
        descriptor="xy",
        dynamics_input="descriptor",
        num_envs=args.num_envs,
        rollout_length=args.rollout_length,
        updates_per_step=args.updates_per_step,
        batch_size=256,
        buffer_size=100_000,
        learning_starts=args.learning_starts,
        hidden_sizes=(args.hidden, args.hidden),
        dynamics_hidden_sizes=(args.hidden, args.hidden),
        normalize_policy_observations=True,
        actor_learning_rate=3e-4,
        critic_learning_rate=3e-4,
        dynamics_learning_rate=3e-4,
        gamma=0.99,
        tau=0.005,
        init_alpha=0.1,
    )


QDAX_IMPORT = """\
Installed into a throwaway venv (layered on this environment's packages: jax 0.10.2), qdax 0.5.0 does not
import: `from qdax.baselines.dads import DADS` loads `qdax/core/neuroevolution/networks/dads_networks.py`, which
imports `tensorflow_probability.substrates.jax`, and tensorflow-probability 0.25.0 (the newest release) fails on
JAX 0.10 with

```
File ".../tensorflow_probability/python/internal/backend/jax/ops.py", line 681, in <module>
    jax.interpreters.xla.pytype_aval_mappings[onp.ndarray])
AttributeError: module 'jax.interpreters.xla' has no attribute 'pytype_aval_mappings'
```

so QDax's DADS cannot run next to jax 0.10, and there is no side-by-side comparison here. QDax's DADS
(`qdax.baselines.dads`) is the same algorithm on the same SAC learner with an on-policy skill-dynamics
update; a comparison needs an environment pinned to the older JAX that tensorflow-probability supports."""


def qdax_importable() -> str:
    """Try to import QDax's DADS in a subprocess. **Returns:** a Markdown paragraph."""
    code = "from qdax.baselines.dads import DADS"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    if out.returncode == 0:
        return "`from qdax.baselines.dads import DADS` works in this environment."
    last = [line for line in out.stderr.strip().splitlines() if line.strip()][-3:]
    if any("No module named 'qdax'" in line for line in last):
        return "qdax is not installed here. " + QDAX_IMPORT
    return "`from qdax.baselines.dads import DADS` fails here:\n\n```\n" + "\n".join(last) + "\n```"


def qdax_status() -> str:
    """Whether `pip` would install qdax into this environment, as the resolver says, and whether it imports."""
    cmd = [sys.executable, "-m", "pip", "install", "--dry-run", "qdax"]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"`pip install --dry-run qdax` could not run: {e}"
    text = (out.stdout + out.stderr).strip().splitlines()
    would = [line for line in text if line.startswith("Would install")]
    errors = [line for line in text if "ERROR" in line or "conflict" in line.lower()]
    if out.returncode == 0 and would:
        return f"`pip install --dry-run qdax` resolves: {would[0]}.\n\n" + qdax_importable()
    if out.returncode == 0:
        return "`pip install --dry-run qdax`: already installed.\n\n" + qdax_importable()
    return "`pip install --dry-run qdax` fails:\n\n```\n" + "\n".join(errors or text[-15:]) + "\n```"


def summary(report) -> dict:
    final = np.asarray(report.final_descriptors)
    return {
        "final_xy": final,
        "pairwise": float(report.mean_pairwise_distance()),
        "max_from_start": float(report.max_distance_from_start()),
        "intrinsic_return": np.asarray(report.intrinsic_return),
        "env_return": np.asarray(report.env_return),
    }


def fmt_xy(final: np.ndarray) -> str:
    return ", ".join(f"({x:+.2f}, {y:+.2f})" for x, y in final)


def main(argv=None) -> None:
    p = parser(__doc__, "dads_ant", quick="a smoke test: 2,000 steps")
    p.add_argument("--total-steps", type=int, default=120_000, help="env steps of training (default 120,000)")
    p.add_argument("--num-skills", type=int, default=4)
    p.add_argument("--num-envs", type=int, default=8)
    p.add_argument("--rollout-length", type=int, default=2)
    p.add_argument("--updates-per-step", type=float, default=0.25)
    p.add_argument("--learning-starts", type=int, default=2_000)
    p.add_argument("--hidden", type=int, default=128, help="width of the 2-layer policy, critic and dynamics MLPs")
    p.add_argument("--episode-length", type=int, default=200)
    p.add_argument("--backend", default="spring", help="brax backend (spring is the cheapest on CPU)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-qdax", action="store_true", help="skip the qdax install check")
    args = p.parse_args(argv)
    report = Report(__file__, argv)
    if args.quick:
        args.total_steps, args.learning_starts = 2_000, 500

    agent = build_agent(args)
    key = jax.random.key(args.seed)
    print(f"DADS on brax/ant ({args.backend}), {args.num_skills} skills, {args.total_steps} env steps", flush=True)
    t0 = time.perf_counter()
    untrained = summary(agent.evaluate_skills(agent.init(key), jax.random.key(1)))
    untrained_seconds = time.perf_counter() - t0
    state, metrics, info = eqxrl.train(agent, key, args.total_steps, progress=True, return_info=True)
    skills = agent.evaluate_skills(state, jax.random.key(1))
    trained = summary(skills)
    updates = int(np.asarray(metrics["updates"])[-1])
    updates_per_second = updates / info.run_seconds
    ir = np.asarray(metrics["intrinsic_reward"])
    ll = np.asarray(metrics["dynamics_log_likelihood"])
    fin = np.isfinite(ll)
    k = max(1, fin.sum() // 10)
    ll_early, ll_late = float(np.mean(ll[fin][:k])), float(np.mean(ll[fin][-k:]))
    ir_early, ir_late = float(np.mean(ir[fin][:k])), float(np.mean(ir[fin][-k:]))
    print(
        f"compile {info.compile_seconds:.1f} s (init + training chunk), untrained skill rollout incl. compile "
        f"{untrained_seconds:.1f} s; training {info.run_seconds:.1f} s, {info.steps_per_second:,.0f} env steps/s, "
        f"{updates_per_second:,.1f} updates/s",
        flush=True,
    )

    png = None
    if str(args.out) != "-":
        png = Path(args.out).with_name(Path(args.out).stem + "_skills.png")
        png.parent.mkdir(parents=True, exist_ok=True)
        plot_skill_trajectories(skills, png, title=f"DADS on brax/ant, {args.total_steps} env steps")
    # (the pip resolver check takes a while: not for a record that is not written)
    qdax = "not checked (--no-qdax or --out -)" if args.no_qdax or png is None else qdax_status()

    def arr(x):
        return np.array2string(x, precision=1)

    coverage = [
        ["mean pairwise distance of final x-y (m)", *(f"{s['pairwise']:.3f}" for s in (untrained, trained))],
        ["max distance from start (m)", *(f"{s['max_from_start']:.3f}" for s in (untrained, trained))],
        ["final x-y per skill", *(fmt_xy(s["final_xy"]) for s in (untrained, trained))],
        ["intrinsic return per skill", *(arr(s["intrinsic_return"]) for s in (untrained, trained))],
        ["env (ant forward) return per skill", *(arr(s["env_return"]) for s in (untrained, trained))],
    ]
    lines = report.header("DADS on brax/ant (x-y descriptor)", packages=("brax",))
    lines += [
        f"- config: {args.num_skills} one-hot skills, brax ant ({args.backend} backend, {args.episode_length}-step "
        "episodes, no termination when unhealthy), descriptor = torso x-y (`pipeline_state.x.pos[0, :2]`), skill "
        f"dynamics on the x-y (4 Gaussian experts, fixed unit std, normalised input and target), policy/critic/dynamics "
        f"MLPs {args.hidden}x{args.hidden}, {args.num_envs} envs x {args.rollout_length} steps per iteration, "
        f"{args.updates_per_step} updates per env step, batch 256, {args.learning_starts} random warm-up steps, "
        f"seed {args.seed}",
        "",
        "## Throughput (training, after compilation)",
        "",
        *table(
            ["compile (s)", "training wall (s)", "env steps", "env steps/s", "gradient updates", "updates/s"],
            [[f"{info.compile_seconds:.1f}", f"{info.run_seconds:.1f}", info.env_steps,
              f"{info.steps_per_second:,.0f}", updates, f"{updates_per_second:,.1f}"]],
            "rrrrrr",
        ),  # fmt: skip
        "",
        f"## Skill coverage (one deterministic episode of {args.episode_length} steps per skill)",
        "",
        *table(["", "untrained", "trained"], coverage, "lll"),
        "",
        f"Dynamics log-likelihood (normalised target, per batch) first/last tenth of training: {ll_early:.3f} -> "
        f"{ll_late:.3f}. Intrinsic reward per step first/last tenth: {ir_early:.3f} -> {ir_late:.3f} (the maximum "
        f"is log L = {np.log(args.num_skills):.3f}).",
        "",
        f"Trajectories: `{png.name if png else '(not written)'}`.",
        "",
        "A few minutes of CPU training is a small fraction of the DADS paper's ant budget (millions of steps), so "
        "what this run shows is throughput and the first separation of the skills, not their final coverage.",
        "",
        "## QDax",
        "",
        qdax,
    ]
    report.emit("\n".join(lines) + "\n", args.out)
    if png:
        print(f"wrote {png}")


if __name__ == "__main__":
    main()
