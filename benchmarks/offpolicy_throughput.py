"""Off-policy throughput: eqxrl's SAC, TD3 and DQN against rejax and brax, at identical hyperparameters.

Four pairs, each trained side by side in one program run:

=====  ====================================  ==========================================
pair   eqxrl                                 peer
=====  ====================================  ==========================================
sac    ``SAC`` on gymnax Pendulum-v1         ``rejax.SAC`` (rejax's Pendulum config)
td3    ``TD3`` on gymnax Pendulum-v1         ``rejax.TD3`` (rejax's Pendulum config)
dqn    ``DQN`` on gymnax CartPole-v1         ``rejax.DQN`` (rejax's CartPole config)
brax   ``SAC`` on brax inverted_pendulum     ``brax.training.agents.sac.train``
=====  ====================================  ==========================================

For every pair it measures, after compilation, **env steps per second** and
**gradient updates per second** (counted from each library's final training
state), the **compile time** of the training program, the end-to-end time, and
the **final return** of the trained policy (deterministic policy, 16
evaluation episodes, each library's own evaluation utility). Each figure is
the median of ``--runs`` runs; runs of the two libraries are interleaved and
alternate which goes first (eqxrl, peer, peer, eqxrl, ...), so that load on a
shared machine hits both alike. In-memory JAX caches are cleared before every
run, so every run compiles from scratch.

Run ``python benchmarks/offpolicy_throughput.py`` (about 20 minutes on 2 CPU
cores) or ``--quick`` (a smoke test: 1 run, small budgets, a few minutes, most
of it compiling); ``--runs N``, ``--pairs sac,dqn``, ``--<pair>-steps N`` and
``--out PATH`` (``-`` for nowhere) are available. ``--breakdown`` adds (about 10
minutes) a table of where the time of one gradient update goes (process-CPU
microseconds of each piece, eqxrl and rejax, measured in isolation, plus
prototype fixes) and of compile-time variants (``_offpolicy_breakdown.py``).
The tables are printed and written to ``benchmarks/results/offpolicy_throughput.md``.

The pairs' configurations and their translation into eqxrl's agents are in
``_offpolicy_pairs.py``; the peers' sides in ``peers/rejax_adapter.py`` and
``peers/brax_sac.py``.

Matching the libraries
----------------------
Every pair uses the peer's configuration, copied field by field into eqxrl's
(see ``CONFIGS`` in ``_offpolicy_pairs.py``; ``check_same_networks`` asserts
equal parameter counts):

- rejax's off-policy iteration is ``num_envs`` env steps then ``num_epochs``
  gradient updates, so eqxrl runs ``rollout_length=1`` and
  ``updates_per_step = num_epochs / num_envs``; rejax's target networks are
  updated once per iteration with ``polyak``, eqxrl's ``tau = 1 - polyak``
  (DQN: ``target_update_period = num_epochs``, i.e. once per iteration too;
  TD3: with the delayed actor update, every ``policy_delay`` updates, as in
  rejax). rejax starts updating once ``global_step > fill_buffer``; eqxrl's
  ``learning_starts`` is set so that the first update happens in the same
  iteration (SAC: ``fill``; TD3 and DQN: ``fill + num_envs``).
- rejax's TD3 noises are in env action units (Pendulum: [-2, 2]); eqxrl's
  deterministic policies act in [-1, 1], so the noises are halved (same noise
  in env units).
- rejax's DQN config names a dueling Q-network; eqxrl has a plain MLP Q-head,
  so rejax runs its own default plain ``QNetwork`` (rejax's ``agent`` option):
  identical (64, 64) swish MLPs, 4,610 parameters on both sides.
- brax's SAC: ``grad_updates_per_step`` updates after each step of
  ``num_envs`` envs (eqxrl: ``updates_per_step = grad_updates_per_step /
  num_envs``), ``min_replay_size`` prefill steps (eqxrl:
  ``learning_starts``), target entropy ``-0.5 * action_size`` (eqxrl:
  ``target_entropy_scale=0.5``), the temperature's Adam at 3e-4 (fixed in
  brax). Both sides use the same brax env and physics backend
  (``--brax-backend``, default brax's own default "generalized") with a
  1000-step time limit.
- Periodic evaluation of the peers is off during the timed runs: rejax with
  ``eval_freq = total_timesteps``, ``skip_initial_evaluation=True`` and a
  no-op evaluation callback; brax with ``num_evals=1`` (its one evaluation,
  at the end, is outside the timed phases and gives its final return).

Remaining, deliberate differences (each library's own design, not tunable from
the outside): rejax treats time-limit truncation as termination and brax
drops truncated transitions from the critic loss, while eqxrl bootstraps
through truncation; eqxrl fills the buffer with uniform random actions before
``learning_starts`` (rejax's SAC and brax's SAC act with the initial policy,
rejax's TD3 and DQN uniformly); eqxrl initialises orthogonally (rejax: LeCun
normal, brax: LeCun uniform), uses Adam eps 1e-5 (peers: 1e-8), clips
gradients by global norm (rejax: per element, ``optax.clip``; only TD3 at 100
and DQN at 10 clip at all), and bounds SAC's log-std smoothly in [-5, 2]
(rejax: hard clip to [-10, 2]; brax: softplus scale); rejax samples a batch
without replacement (``jax.random.choice(replace=False, p=...)``), eqxrl and
brax with replacement. eqxrl compiles an ``init`` program and a training
program (run as one chunk, as ``train`` does without a progress bar); rejax
one program; brax separate reset, buffer-init, prefill and training-epoch
programs (``num_evals=1``).

How each side is timed
----------------------
- eqxrl: ``eqxrl.train(..., progress=False, return_info=True)``:
  ``compile_seconds`` (tracing, lowering and compiling its ``init`` program and
  the training chunk, which ``train`` compiles concurrently) and
  ``run_seconds`` (init and the chunk's execution).
- rejax: ``jax.jit(algo.train).lower(key).compile()`` timed, then one timed
  call of the compiled program (it includes ``init_state``).
- brax: ``brax.training.agents.sac.train.train`` as is, with ``jax.pmap``
  wrapped (for the duration of the call) so that each pmapped program is
  compiled ahead of time on its first call and compile and execution are timed
  separately; compile = env reset + buffer init + prefill + training-epoch
  programs, execution = their runs. brax 0.14.2 calls ``jax.device_put_replicated``,
  which jax 0.10 no longer has; a replacement (one stacked copy per device) is
  installed for the duration of the call only (``peers/brax_sac.py``).
- Process CPU seconds (all threads) are recorded for the same phases; on a
  shared machine they are far steadier than wall time.
"""

from __future__ import annotations

import jax
import numpy as np

import _offpolicy_pairs as pairs_
import eqxrl
from _common import fresh_caches, time_train, turn_order
from _offpolicy_pairs import BUDGETS, CONFIGS, EVAL_EPISODES, PAIR_NAMES
from _report import Metric, Report, compare, parser, table

METRICS = [
    Metric("env steps/s after compile", lambda x: x["steps"] / x["run"], "{:,.0f}", bold=True),
    Metric("gradient updates/s after compile", lambda x: x["updates"] / x["run"], "{:,.0f}", bold=True),
    Metric("compile (s)", lambda x: x["compile"], higher=False, bold=True),
    Metric("env steps per process-CPU s", lambda x: x["steps"] / x["run_cpu"], "{:,.0f}"),
    Metric("compile, process CPU (s)", lambda x: x["compile_cpu"], higher=False),
    Metric("setup = end to end - execution (s)", lambda x: x["total"] - x["run"], higher=False),
    Metric("end to end (s)", lambda x: x["total"], higher=False),
    Metric(f"final return (mean of {EVAL_EPISODES} episodes)", lambda x: x["ret"], "{:.1f}", higher=None),
]


def seed_keys(seed: int, seeds: int):
    """One key (`seeds` = 1), or a batch of `seeds` keys split from it (both libraries alike)."""
    key = jax.random.key(seed)
    return key if seeds == 1 else jax.random.split(key, seeds)


def time_eqxrl(pair: str, total_steps: int, seed: int, brax_backend: str, seeds: int = 1) -> dict:
    """One timed `eqxrl.train` of `seeds` seeds (a batch: sharded over the CPU devices eqxrl
    makes at import, one per core, as its users get it); steps and updates of all seeds."""
    agent = pairs_.make_eqxrl(pair, brax_backend)
    state, info, out = time_train(agent, seed_keys(seed, seeds), total_steps)
    out.update(steps=int(np.sum(np.asarray(state.env_steps))), updates=int(np.sum(np.asarray(state.updates))))
    assert out["steps"] == info.env_steps == total_steps * seeds, (out["steps"], info.env_steps, total_steps)
    returns = eqxrl.evaluate(agent, state, jax.random.key(10_000 + seed), num_episodes=EVAL_EPISODES)
    out["ret"] = float(np.mean(np.asarray(returns)))
    return out


def run_one(lib: str, pair: str, steps: int, seed: int, brax_backend: str, seeds: int = 1) -> dict:
    if lib == "eqxrl":
        return time_eqxrl(pair, steps, seed, brax_backend, seeds)
    if seeds > 1 and pair not in ("sac", "td3"):
        raise ValueError(f"--seeds {seeds} is measured for the sac and td3 pairs only, not {pair!r}")
    if pair in pairs_.BRAX_PAIRS:
        from peers import brax_sac

        return brax_sac.time_train(CONFIGS[pair], steps, seed, brax_backend, EVAL_EPISODES)
    from peers import rejax_adapter

    return rejax_adapter.time_offpolicy(pair, CONFIGS[pair], steps, seed, EVAL_EPISODES, seeds)


def main(argv=None) -> None:
    p = parser(__doc__, "offpolicy_throughput", runs=3, quick="smoke test: 1 run, small step budgets")
    p.add_argument("--pairs", default="sac,td3,dqn,brax", help="comma-separated subset of sac,td3,dqn,brax (and ant: brax/ant at GPU scale, see gpu_scale.py)")
    p.add_argument("--brax-backend", default="generalized", help="brax physics backend for both sides")
    p.add_argument(
        "--breakdown", action="store_true",
        help="also measure where the time goes (per-update CPU pieces, compile variants; ~10 more minutes)",
    )  # fmt: skip
    for pair in BUDGETS:
        p.add_argument(f"--{pair}-steps", type=int, default=None, help=f"env steps per {pair} run")
    p.add_argument(
        "--seeds", type=int, default=1,
        help="seeds trained together per run (sac and td3 pairs): eqxrl.train of a key batch, as eqxrl's users run "
        "seeds (sharded over one CPU device per core), against jax.vmap(rejax's train) over the same keys, as "
        "rejax's users run them; steps/s count all seeds",
    )  # fmt: skip
    a = p.parse_args(argv)
    report = Report(__file__, argv)
    pairs = [s.strip() for s in a.pairs.split(",") if s.strip()]
    unknown = sorted(set(pairs) - set(CONFIGS))
    if unknown:
        p.error(f"unknown pair(s) {unknown}; choose from {sorted(CONFIGS)}")
    if a.quick:
        a.runs = 1
    budgets = {}
    for pair in pairs:
        steps = getattr(a, f"{pair}_steps") or BUDGETS[pair][1 if a.quick else 0]
        unit = pairs_.iteration_steps(pair)
        steps = steps // unit * unit
        if pair in pairs_.BRAX_PAIRS:
            steps = max(steps, CONFIGS[pair]["min_replay_size"] + unit)
        budgets[pair] = steps

    nets = pairs_.check_same_networks(pairs, a.brax_backend)
    for pair in pairs:
        print(f"{pair}: {nets[pair]}; {budgets[pair]:,} env steps per run", flush=True)

    results = {(pair, lib): [] for pair in pairs for lib in ("eqxrl", "peer")}
    for r in range(a.runs):
        for pair in pairs:
            for lib in turn_order(r, ("eqxrl", "peer")):
                fresh_caches()
                res = run_one(lib, pair, budgets[pair], r, a.brax_backend, a.seeds)
                results[(pair, lib)].append(res)
                name = "eqxrl" if lib == "eqxrl" else PAIR_NAMES[pair][2]
                print(
                    f"run {r + 1}/{a.runs} {pair:>4} {name:>5}: compile {res['compile']:.2f} s, "
                    f"run {res['run']:.2f} s, {res['steps'] / res['run']:,.0f} steps/s, "
                    f"{res['updates'] / res['run']:,.0f} updates/s ({res['steps']:,} steps, {res['updates']:,} updates), "
                    f"end to end {res['total']:.1f} s, CPU s: compile {res['compile_cpu']:.2f} run {res['run_cpu']:.2f}; "
                    f"return {res['ret']:.1f}",
                    flush=True,
                )

    runs_minutes = report.elapsed / 60
    parts, cparts = {}, {}
    if a.breakdown:
        import _offpolicy_breakdown as bd

        for pair in pairs:
            fresh_caches()
            parts[pair] = bd.update_costs(pair, a.brax_backend)
            cparts[pair] = bd.compile_costs(pair, a.brax_backend, budgets[pair])
            print(f"breakdown {pair}:", flush=True)
            for name, us in parts[pair].items():
                print(f"    {name:60s} {us:9.1f} us CPU per update", flush=True)
            for name, sec in cparts[pair].items():
                print(f"    {name:60s} {sec:9.2f} s CPU", flush=True)

    md = render(report, a, pairs, budgets, results, nets, runs_minutes)
    if parts:
        md += "\n".join(bd.render(pairs, parts, cparts)) + "\n"
    report.emit(md, a.out)


def render(report, a, pairs, budgets, results, nets, runs_minutes: float) -> str:
    lines = report.header(
        "Off-policy throughput: eqxrl vs rejax (SAC, TD3, DQN) and brax (SAC)", packages=("rejax", "brax", "flax"),
        wall=f" ({runs_minutes:.1f} min for the timed runs" + (", the rest for the breakdown)" if a.breakdown else ")"),
    )  # fmt: skip
    lines += [
        f"- medians of {a.runs} run(s) per cell; the two libraries' runs interleaved, alternating which goes "
        "first; in-memory JAX caches cleared before every run; run i uses seed i on both sides"
        + (f"; **{a.seeds} seeds per run** (eqxrl.train of a key batch on eqxrl's default devices, "
           f"{jax.device_count()} here; rejax: jax.vmap of its train over the same keys); steps/s and "
           "updates/s count all seeds, the final return is the mean over them" if a.seeds > 1 else ""),
        "",
        "Configurations (the peer's, in the peer's terms; see the script's docstring and `make_eqxrl` "
        "in `benchmarks/_offpolicy_pairs.py` for the translation into eqxrl's fields):",
        "",
    ]
    for pair in pairs:
        lines.append(pairs_.config_line(pair, budgets[pair], a.brax_backend) + f"; networks: {nets[pair]}")
    rows = []
    for pair in pairs:
        algo, env, peer = PAIR_NAMES[pair]
        label = f"{algo} {env} vs {peer}"
        rows += compare(METRICS, results[(pair, "eqxrl")], results[(pair, "peer")], group=label, speedup=True)
    lines += [
        "",
        "Ratios are eqxrl / peer of the medians. \"eqxrl speed-up\" is the ratio for throughputs and its "
        "inverse for times, so above 1 means eqxrl is faster (the aim is >= 1.2). Returns: difference eqxrl - peer.",
        "",
        *table(["pair", "metric", "eqxrl", "peer", "eqxrl / peer", "eqxrl speed-up"], rows, "llrrrr"),
        "",
        "- **env steps/s**, **updates/s**: env steps and gradient updates (critic updates; DQN: Q updates), "
        "both read from the final training state, divided by the execution time after compilation "
        "(warm-up included on both sides). eqxrl: `TrainInfo.run_seconds` (one chunk, as `train` runs "
        "without a progress bar); rejax: one call of the compiled program; brax: its prefill and "
        "training-epoch programs.",
        "- **compile**: trace + lower + XLA compile of the training program(s). eqxrl: "
        "`TrainInfo.compile_seconds` (its `init` program and the training chunk, compiled concurrently); "
        "rejax: `jax.jit(train).lower(key).compile()` (one program, `init_state` included); brax: its "
        "env-reset, buffer-init, prefill and training-epoch programs (network init runs eagerly, in setup).",
        "- **process CPU**: CPU seconds of this process (all threads) over the same phases; steadier than "
        "wall time on a shared machine.",
        "- **setup**: everything in a run but the execution (all compiles, host-side set-up). "
        "**end to end**: the whole training call (brax: `train` minus its closing evaluation).",
        "- **final return**: the trained deterministic policy (SAC: tanh of the mean; DQN: argmax) over "
        f"{EVAL_EPISODES} episodes. eqxrl: `eqxrl.evaluate`; rejax: `rejax.evaluate.evaluate` with the "
        "policy through rejax's own networks and observation normalisation; brax: the evaluation at the end "
        "of brax's `train` (`deterministic_eval=True`, `num_eval_envs=16`). Median over runs.",
        "",
        "Per-run values (env steps/s / updates/s / compile s / CPU steps per s / final return):",
        "",
    ]
    for pair in pairs:
        for lib in ("eqxrl", "peer"):
            name = "eqxrl" if lib == "eqxrl" else PAIR_NAMES[pair][2]
            vals = "; ".join(
                f"{x['steps'] / x['run']:,.0f} / {x['updates'] / x['run']:,.0f} / {x['compile']:.2f} / "
                f"{x['steps'] / x['run_cpu']:,.0f} / {x['ret']:.1f}"
                for x in results[(pair, lib)]
            )
            lines.append(f"- {pair}, {name}: {vals}")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
