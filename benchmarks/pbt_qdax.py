"""PBT-SAC side by side: eqxrl's `eqxrl.pbt.PBT` over `SAC` against QDax's `PBTSAC` + `PBT`.

Both libraries train a population of SAC agents on brax ``inverted_pendulum``
(same physics backend, same 1000-step episodes) at the same population size,
per-member env-step budget and ``ready`` interval, the same SAC
hyperparameters as far as they map, and the same exploit/explore rule. For
each library it measures, per run:

- **compile**: tracing + lowering + XLA compilation of every program the loop
  runs (eqxrl: ``PBT.init``'s program and the generation program; QDax: env
  reset, population init, the vmapped training scan, the evaluation and the
  selection), each compiled ahead of time (``.lower(...).compile()``) before
  anything executes;
- **wall time per member per env step** after compilation: the summed wall
  time of every generation (train ``ready`` steps, evaluate, exploit/explore)
  divided by ``population x env steps per member`` (process-CPU seconds too:
  steadier on a shared machine);
- **exploit/explore share** and **evaluation share** of a generation. QDax runs
  them as separate programs, so they are timed directly. eqxrl runs the whole
  generation as one program; its shares are estimated by timing the same
  steps as separate jitted programs on the trained population
  (``eqxrl.pbt.exploit_and_explore`` and the vmapped default fitness), times
  the number of generations that run them (for the evaluation an upper bound:
  the trained population's episodes are the longest);
- **final best-member and median-member return**: each library's fitness after
  the last generation, i.e. the mean undiscounted return of 8 deterministic
  evaluation episodes per member (tanh of the policy mean on both sides).

Every run is a fresh subprocess (so every run compiles from scratch): eqxrl's
side under this interpreter, QDax's side under ``--qdax-python`` (the script
runs itself with ``--side qdax`` and reads back one JSON line). Runs of the
two libraries are interleaved and alternate which goes first (eqxrl, QDax,
QDax, eqxrl, ...); the table shows medians over ``--runs`` runs and the ratio
eqxrl/QDax.

Usage::

    python benchmarks/pbt_qdax.py                      # 3 runs per library, ~10-15 min on 2 CPU cores
    python benchmarks/pbt_qdax.py --quick              # smoke test (1 run, tiny budget)
    python benchmarks/pbt_qdax.py --runs 5 --qdax-python /path/to/venv/bin/python --out -

The table is printed and written to ``benchmarks/results/pbt_qdax.md``.

The QDax environment
--------------------
QDax is not an eqxrl dependency; give it its own virtual environment. With
jax 0.10.2 / brax 0.14.2 (the versions eqxrl is tested with), as used for
``benchmarks/results/pbt_qdax.md``::

    python3.11 -m venv /tmp/qdax_venv
    /tmp/qdax_venv/bin/pip install "jax==0.10.2" "jaxlib==0.10.2" "brax==0.14.2"
    /tmp/qdax_venv/bin/pip install "qdax==0.5.0"

(QDax 0.5.0 declares only lower bounds (jax>=0.4.28, brax>=0.10.4, flax,
optax, chex, jumanji, scikit-learn, tensorflow-probability>=0.24), so the
second command keeps jax 0.10.2. ``qdax.baselines.sac_pbt``,
``qdax.baselines.pbt`` and ``qdax.tasks.brax.v2`` import and run under jax
0.10; tensorflow-probability 0.25, which jax 0.10 breaks, is installed but not
imported by them (QDax's DADS needs it and does not import).) Then pass
``--qdax-python /tmp/qdax_venv/bin/python`` (default:
``/tmp/dads_helper/qdax_venv/bin/python``, or ``$QDAX_PYTHON``).

How the two sides are matched (``CONFIG``)
------------------------------------------
- Environment: brax ``inverted_pendulum``, backend ``CONFIG["backend"]``
  (brax's default "generalized" on both sides; QDax's ``create`` defaults to
  "spring", so it is passed explicitly), 1000-step episodes. eqxrl:
  ``eqxrl.envs.make("brax/inverted_pendulum", backend=..., episode_length=1000)``
  (its own auto-reset and time limit); QDax:
  ``qdax.tasks.brax.v2.create(..., episode_length=1000, auto_reset=True)``
  (brax's ``EpisodeWrapper``, ``VmapWrapper``, ``AutoResetWrapper``).
- Population 8, ``num_envs`` envs per member, ``ready`` env steps per member
  per generation, ``total_steps`` per member. QDax's loop is the one of QDax's
  ``examples/sac_pbt.ipynb`` on one device (``jax.vmap`` over members, no
  ``pmap``): train ``ready / num_envs`` iterations, evaluate, and (except after
  the last generation) ``PBT.update_states_and_buffer``. eqxrl: ``PBT.step``.
- Exploit: QDax replaces the ``num_worse_to_replace`` worst members by copies
  (training state and replay buffer) of members drawn uniformly from the
  ``num_best_to_replace_from`` best = eqxrl's ``Truncation(k, m)``.
- Explore: QDax's ``PBTSacTrainingState.resample_hyperparams`` redraws all five
  hyperparameters of a copy uniformly (no perturbation): discount in [0.9, 1],
  policy/critic/alpha learning rates in [3e-5, 3e-3], reward scaling in
  [0.1, 10]; the initial population draws from the same ranges. eqxrl: the
  same five leaves (``gamma``, ``actor_learning_rate``,
  ``critic_learning_rate``, ``alpha_learning_rate``, ``reward_scale``) as
  ``Uniform`` domains over the same ranges, with ``resample_probability=1``.
- SAC: (64, 64) relu actor and twin critics on both sides, batch 256,
  ``grad_updates_per_step`` gradient updates per env step (QDax: ``int(g *
  num_envs)`` updates after each step of the ``num_envs`` envs; eqxrl:
  ``rollout_length=1``, ``updates_per_step=g``), tau 0.005, initial
  temperature 1 tuned towards ``-0.5 * action_size`` (eqxrl:
  ``target_entropy_scale=0.5``), no observation normalisation, replay buffer of
  ``buffer_size`` per member, updates from the first iteration (QDax's notebook
  has no warm-start; eqxrl ``learning_starts=0``).
- Fitness: 8 deterministic evaluation episodes per member, at most 1000 steps,
  fresh initial states each generation on both sides (QDax: ``get_eval_fn``
  on an evaluation env of ``8 x population`` envs reset with a new key each
  generation; eqxrl: the default ``EvaluationReturn``).

Differences that remain (each library's design, not configurable) are listed
in ``DIFFERENCES`` below, which the results file repeats. The QDax side is
``peers/qdax_pbt.py``.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from _common import generation_summary, timed, turn_order
from _report import Metric, Report, compare, parser, table

DEFAULT_QDAX_PYTHON = "/tmp/dads_helper/qdax_venv/bin/python"
MARK = "PBT_QDAX_RESULT "

CONFIG = dict(
    env="inverted_pendulum",
    backend="generalized",
    episode_length=1000,
    population_size=8,
    num_envs=16,  # envs per member
    ready=2048,  # env steps per member per generation
    total_steps=16384,  # env steps per member
    num_worse_to_replace=2,  # Truncation(k, ...)
    num_best_to_replace_from=2,  # Truncation(..., m)
    eval_episodes=8,
    batch_size=256,
    grad_updates_per_step=0.5,
    buffer_size=100_000,
    hidden=(64, 64),
    tau=0.005,
    alpha_init=1.0,
    target_entropy=-0.5,  # times action_size
    normalize_observations=False,
    # QDax's PBTSacTrainingState.resample_hyperparams: uniform ranges
    ranges=dict(discount=(0.9, 1.0), policy_lr=(3e-5, 3e-3), critic_lr=(3e-5, 3e-3), alpha_lr=(3e-5, 3e-3),
                reward_scaling=(0.1, 10.0)),  # fmt: skip
)
QUICK = dict(ready=256, total_steps=512, episode_length=200, buffer_size=10_000)
# QDax name -> eqxrl SAC leaf
EQXRL_NAMES = dict(discount="gamma", policy_lr="actor_learning_rate", critic_lr="critic_learning_rate",
                   alpha_lr="alpha_learning_rate", reward_scaling="reward_scale")  # fmt: skip

# Differences that remain (each library's design, not configurable), for the record and the docstring.
DIFFERENCES = [
    "QDax's evaluation unrolls all `episode_length` steps for every member and masks what follows "
    "the first episode; eqxrl's stops once every episode of every member is done (a vmapped "
    "`while_loop`). With good policies (episodes that reach the time limit) both run the full length.",
    "QDax drops time-limit-truncated transitions from the critic loss; eqxrl bootstraps through "
    "truncation.",
    "Update order: QDax updates alpha, then the critic, then the actor against the pre-update critic; "
    "eqxrl the critic, then the actor against the updated critic, then alpha.",
    "Initialisation (eqxrl orthogonal, QDax variance scaling uniform), Adam eps (eqxrl 1e-5, optax 1e-8), "
    "the policy's scale (eqxrl: log-std bounded in [-5, 2]; QDax: brax's `NormalTanhDistribution`, "
    "softplus + 0.001).",
    "QDax's selection sorts by `-returns` (ties: lower index counts as better; NaN handling is "
    "`argsort`'s); eqxrl counts NaN fitness as worst and breaks ties by member index.",
    "QDax's jitted programs donate nothing (as in its notebook) and the evaluation, selection and "
    "training are separate programs with host round trips between them; eqxrl runs a generation as "
    "one program that donates the population.",
    "QDax's replay buffer stores each member's transitions flattened into one array (with a "
    "`truncations` column); eqxrl's stores each field as its own array.",
    "The discount is applied at update time on both sides: eqxrl's buffer stores raw rewards and "
    "termination flags (`NStepTransition`) and the shared loop computes each sampled transition's reward "
    "and discount with the member's current `gamma`, as QDax applies the member's current discount to its "
    "stored `dones` in the critic loss, so an explored `gamma` acts on the copy's next update on both. "
    "(Results from before issue 14 stored `gamma x (1 - terminated)` at insertion, so an explored `gamma` "
    "reached only transitions added after it.) `reward_scale` is applied at sampling time on both sides.",
    "Random streams differ: the same seed does not give the same initial hyperparameters.",
]


# ============================================================================ eqxrl side
def run_eqxrl(c: dict, seed: int) -> dict:
    import equinox as eqx
    import jax
    import jax.numpy as jnp
    import numpy as np

    import eqxrl
    from eqxrl.agents import SAC
    from eqxrl.pbt import PBT, Truncation, Uniform, exploit_and_explore, history_from_records
    from eqxrl.pbt import run_generation, run_init_population  # the programs, to compile them ahead of time

    t_setup = time.perf_counter()
    env = eqxrl.envs.make("brax/" + c["env"], backend=c["backend"], episode_length=c["episode_length"])
    agent = SAC(
        env, num_envs=c["num_envs"], rollout_length=1, updates_per_step=c["grad_updates_per_step"],
        batch_size=c["batch_size"], buffer_size=c["buffer_size"], learning_starts=0,
        hidden_sizes=c["hidden"], activation="relu", tau=c["tau"], init_alpha=c["alpha_init"],
        target_entropy_scale=-c["target_entropy"], normalize_observations=c["normalize_observations"],
        num_critics=2, autotune=True,
    )  # fmt: skip
    space = {EQXRL_NAMES[n]: Uniform(lo, hi) for n, (lo, hi) in c["ranges"].items()}
    pbt = PBT(
        agent, space, population_size=c["population_size"], ready=c["ready"],
        exploit=Truncation(c["num_worse_to_replace"], c["num_best_to_replace_from"]), resample_probability=1.0,
        eval_episodes=c["eval_episodes"], max_eval_steps=c["episode_length"],
    )  # fmt: skip
    assert pbt.steps_per_generation == c["ready"], (pbt.steps_per_generation, c["ready"])
    total = c["total_steps"]
    generations = pbt.num_generations(total)
    key = jax.random.key(seed)
    setup = time.perf_counter() - t_setup

    # Compile both programs ahead of time (they land in JAX's cache; `init`/`step` then only run).
    sharding = pbt.sharding()
    t0 = time.perf_counter()
    run_init_population.lower(pbt, key, sharding).compile()
    init_compile = time.perf_counter() - t0
    population, init_wall, _ = timed(pbt.init, key)
    config = (pbt, pbt.fitness_fn(), generations * pbt.ready_iterations, sharding)
    t0 = time.perf_counter()
    run_generation.lower(config, population.agent, population.state, population.key, population.generation).compile()
    gen_compile = time.perf_counter() - t0

    gens, records = [], []
    for _ in range(generations):
        t0, c0 = time.perf_counter(), time.process_time()
        population, record = pbt.step(population, total)  # returns NumPy: synchronised
        gens.append(dict(wall=time.perf_counter() - t0, cpu=time.process_time() - c0))
        records.append(record)
    history = history_from_records(pbt, records)

    # Shares, estimated on the trained population with the same steps as separate programs.
    size = pbt.population_size
    fitness_fn = pbt.fitness_fn()
    fit = eqx.filter_jit(lambda a, s, k: eqx.filter_vmap(fitness_fn)(a.agent, s, jax.random.split(k, size)))
    explore = eqx.filter_jit(exploit_and_explore)
    f = jnp.asarray(history.fitness[-1], jnp.float32)
    fit(population.agent, population.state, jax.random.key(1)).block_until_ready()  # compile
    explore(pbt, jax.random.key(2), population.agent, population.state, f)[2].block_until_ready()
    eval_t, explore_t = [], []
    for r in range(3):
        _, w, _ = timed(fit, population.agent, population.state, jax.random.key(10 + r))
        eval_t.append(w)
        _, w, _ = timed(explore, pbt, jax.random.key(20 + r), population.agent, population.state, f)
        explore_t.append(w)

    exploit_s, eval_s = statistics.median(explore_t) * (generations - 1), statistics.median(eval_t) * generations
    out = generation_summary(size, total, history.fitness[-1], gens, init_compile + gen_compile, exploit_s, eval_s)
    state = population.state
    out.update(
        side="eqxrl", seed=seed, setup=setup, init_run=init_wall,
        compile_parts=dict(init=init_compile, generation=gen_compile),
        best_hp={n: float(history.hyperparameters[n][-1, history.best()[0]]) for n in space},
        updates=int(np.asarray(state.updates).reshape(-1)[0]) if hasattr(state, "updates") else None,
        env_steps=int(np.asarray(state.env_steps).reshape(-1)[0]) if hasattr(state, "env_steps") else None,
        devices=str(jax.devices()),
    )  # fmt: skip
    return out


# ============================================================================ driver
def _child(side: str, cfg: dict, seed: int, python: str, timeout: float) -> dict:
    cmd = [python, str(Path(__file__).resolve()), "--side", side, "--seed", str(seed), "--config-json", json.dumps(cfg)]
    env = dict(os.environ)
    env.setdefault("JAX_PLATFORMS", "cpu")
    env["PYTHONWARNINGS"] = "ignore"
    t0 = time.perf_counter()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return dict(side=side, seed=seed, error=f"timed out after {timeout:.0f} s")
    except OSError as e:  # e.g. no QDax virtual environment at --qdax-python
        return dict(side=side, seed=seed, error=f"could not start {python}: {e}")
    wall = time.perf_counter() - t0
    for line in reversed(p.stdout.splitlines()):
        if line.startswith(MARK):
            out = json.loads(line[len(MARK) :])
            out["process_wall"] = wall
            return out
    tail = "\n".join((p.stdout + "\n" + p.stderr).strip().splitlines()[-25:])
    return dict(side=side, seed=seed, error=f"exit code {p.returncode}:\n{tail}")


def _metric(label: str, key: str, fmt: str) -> Metric:
    return Metric(label, lambda r: r.get(key), fmt)


METRICS = [
    _metric("compile (s)", "compile", "{:.1f}"),
    _metric("wall us per member per env step (after compile)", "us_per_member_step", "{:.1f}"),
    _metric("process-CPU us per member per env step", "cpu_us_per_member_step", "{:.1f}"),
    _metric("generation wall (s, median)", "generation_median", "{:.2f}"),
    _metric("exploit/explore share of run", "exploit_share", "{:.2%}"),
    _metric("evaluation share of run", "eval_share", "{:.1%}"),
    _metric("final best-member return", "best", "{:.1f}"),
    _metric("final median-member return", "median", "{:.1f}"),
    _metric("whole process wall (s)", "process_wall", "{:.1f}"),
]


def per_run(res: dict) -> str:
    lines = []
    for side in ("eqxrl", "qdax"):
        for r in res[side]:
            if "error" in r:
                lines.append(f"- {side} seed {r['seed']}: **failed**: `{r['error'].splitlines()[-1]}`")
                continue
            lines.append(
                f"- {side} seed {r['seed']}: compile {r['compile']:.1f} s "
                f"({', '.join(f'{k} {v:.1f}' for k, v in r['compile_parts'].items())}), run {r['run']:.1f} s "
                f"({r['us_per_member_step']:.1f} us/member-step wall, {r['cpu_us_per_member_step']:.1f} CPU), "
                f"first generation {r['first_generation']:.2f} s, exploit {r['exploit_s']:.3f} s, "
                f"eval {r['eval_s']:.2f} s, best {r['best']:.1f}, median {r['median']:.1f}, "
                f"final fitness {[round(x, 1) for x in r['fitness']]}, best member's hyperparameters "
                f"{ {k: float(f'{v:.3g}') for k, v in r['best_hp'].items()} }, "
                f"gradient updates per member {r.get('updates')}"
            )
    return "\n".join(lines)


def render(report, a, cfg, res) -> str:
    e_ok = [r for r in res["eqxrl"] if "error" not in r]
    q_ok = [r for r in res["qdax"] if "error" not in r]
    qv = ", ".join(f"{k} {x}" for k, x in q_ok[0]["versions"].items()) if q_ok else "n/a"
    gens = cfg["total_steps"] // cfg["ready"]
    c = cfg
    lines = report.header(
        "PBT-SAC: eqxrl vs QDax (same population, budget and hyperparameter search)", packages=("brax", "flax", "mujoco"),
        wall=f" ({len(res['eqxrl'])} runs per library, interleaved, each a fresh process)",
    )  # fmt: skip
    lines += [
        f"- eqxrl side: {sys.executable} (the versions above), JAX devices {e_ok[0]['devices'] if e_ok else 'n/a'}",
        f"- QDax side: {a.qdax_python}: {qv}"
        + (f"; tensorflow_probability imported at run time: {q_ok[0]['tfp_imported']}" if q_ok else ""),
        "",
        "## Configuration (both sides)",
        "",
        f"- env: brax `{c['env']}`, backend `{c['backend']}`, episode length {c['episode_length']}",
        f"- population {c['population_size']}, {c['num_envs']} envs per member, ready = {c['ready']:,} env steps "
        f"per member, {c['total_steps']:,} env steps per member ({gens} generations, {gens - 1} exploit/explore steps)",
        f"- exploit: the {c['num_worse_to_replace']} worst replaced by copies of members drawn from the "
        f"{c['num_best_to_replace_from']} best (QDax `PBT(num_best_to_replace_from={c['num_best_to_replace_from']}, "
        f"num_worse_to_replace={c['num_worse_to_replace']})`; eqxrl `Truncation({c['num_worse_to_replace']}, "
        f"{c['num_best_to_replace_from']})`)",
        "- explore: every copy's five hyperparameters resampled uniformly (QDax's hard-coded "
        "`resample_hyperparams`; eqxrl `Uniform` domains, `resample_probability=1.0`): "
        + ", ".join(f"{q} / `{EQXRL_NAMES[q]}` in [{lo:g}, {hi:g}]" for q, (lo, hi) in c["ranges"].items()),
        f"- SAC: hidden {tuple(c['hidden'])} relu (actor and 2 critics), batch {c['batch_size']}, "
        f"{c['grad_updates_per_step']} gradient updates per env step "
        f"({int(c['grad_updates_per_step'] * c['num_envs'])} per step of the {c['num_envs']} envs), replay "
        f"{c['buffer_size']:,} per member, tau {c['tau']}, initial alpha {c['alpha_init']}, target entropy "
        f"{c['target_entropy']} x action size, observation normalisation {c['normalize_observations']}, "
        "updates from the first iteration (no warm-start)",
        f"- fitness / final return: mean of {c['eval_episodes']} deterministic episodes per member (at most "
        f"{c['episode_length']} steps), fresh initial states each generation",
        "- eqxrl: `SAC(eqxrl.envs.make('brax/inverted_pendulum', backend=..., episode_length=...), num_envs, "
        "rollout_length=1, updates_per_step, batch_size, buffer_size, learning_starts=0, hidden_sizes, "
        "activation='relu', tau, init_alpha, target_entropy_scale=0.5, normalize_observations=False)` in "
        "`PBT(agent, space, population_size, ready, exploit=Truncation(k, m), resample_probability=1.0, "
        "eval_episodes, max_eval_steps=episode_length)`, run with `PBT.init` + `PBT.step` per generation",
        "- QDax: `PBTSAC(PBTSacConfig(batch_size, episode_length, tau, normalize_observations=False, alpha_init, "
        "policy/critic_hidden_layer_size, fix_alpha=False))`, `get_init_fn`, `get_train_fn(env, ready // "
        "num_envs, num_envs, grad_updates_per_step)`, `get_eval_fn(eval_env)` and "
        "`PBT.update_states_and_buffer`, each `jax.jit`-ed (one device, no pmap), envs from "
        "`qdax.tasks.brax.v2.create(..., auto_reset=True)`: the loop of QDax's `examples/sac_pbt.ipynb`",
        "",
        "## Results",
        "",
        *table(["figure (median of runs)", "eqxrl", "QDax", "eqxrl/QDax"], compare(METRICS, e_ok, q_ok)),
        "",
        "Definitions: **compile**: tracing + lowering + XLA compilation of every program, ahead of time "
        "(eqxrl: `PBT.init`'s program and the generation program; QDax: env reset, population init, training "
        "scan, evaluation and selection). **wall / CPU us per member per env step**: the summed time of all "
        "generations after compilation (train, evaluate, exploit/explore) over population x env steps per "
        "member. **exploit/explore share**: QDax: the timed `update_states_and_buffer` calls; eqxrl: a "
        "separately jitted `eqxrl.pbt.exploit_and_explore` on the trained population (median of 3) x the "
        "generations that exploit (eqxrl fuses it into the generation program, so this is an estimate). "
        "**evaluation share**: likewise (QDax: its evaluation program; eqxrl: the vmapped default fitness "
        "jitted alone, on the trained population, whose episodes are the longest, x the generations: an upper "
        "bound, since eqxrl's evaluation stops when every episode is done). **final returns**: the fitness after the last generation.",
        "",
        "Per run:",
        "",
        per_run(res),
        "",
        "## Differences not removed",
        "",
        *(f"- {d}" for d in DIFFERENCES),
        "",
    ]
    return "\n".join(lines)


def main(argv=None) -> None:
    p = parser(__doc__, "pbt_qdax", runs=3, quick="smoke test: 1 run, tiny budget")
    p.add_argument("--side", choices=("eqxrl", "qdax"), help="(internal) run one side once and print JSON")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--config-json", help="(internal) the configuration")
    p.add_argument("--qdax-python", default=os.environ.get("QDAX_PYTHON", DEFAULT_QDAX_PYTHON),
                   help="interpreter of the QDax virtual environment")  # fmt: skip
    p.add_argument("--total-steps", type=int, help="env steps per member (default: CONFIG)")
    p.add_argument("--ready", type=int, help="env steps per member per generation (default: CONFIG)")
    p.add_argument("--timeout", type=float, default=900.0, help="seconds per run")
    a = p.parse_args(argv)

    if a.side:
        cfg = json.loads(a.config_json) if a.config_json else dict(CONFIG)
        if a.side == "eqxrl":
            out = run_eqxrl(cfg, a.seed)
        else:
            from peers.qdax_pbt import run_qdax

            out = run_qdax(cfg, a.seed)
        print(MARK + json.dumps(out), flush=True)
        return

    report = Report(__file__, argv)
    cfg = dict(CONFIG)
    if a.quick:
        cfg.update(QUICK)
        a.runs = 1
    if a.total_steps:
        cfg["total_steps"] = a.total_steps
    if a.ready:
        cfg["ready"] = a.ready
    res = {"eqxrl": [], "qdax": []}
    pythons = {"eqxrl": sys.executable, "qdax": a.qdax_python}
    for r in range(a.runs):
        for side in turn_order(r, ("eqxrl", "qdax")):
            out = _child(side, cfg, r, pythons[side], a.timeout)
            res[side].append(out)
            if "error" in out:
                print(f"[run {r}] {side}: FAILED\n{out['error']}", flush=True)
            else:
                print(
                    f"[run {r}] {side}: compile {out['compile']:.1f} s, {out['us_per_member_step']:.1f} us/member-step, "
                    f"exploit {out['exploit_share']:.2%}, eval {out['eval_share']:.1%}, best {out['best']:.1f}, "
                    f"median {out['median']:.1f} ({out['process_wall']:.0f} s)",
                    flush=True,
                )
    report.emit(render(report, a, cfg, res), a.out)


if __name__ == "__main__":
    main()
