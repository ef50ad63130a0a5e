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

Differences that remain (each library's design, not configurable): QDax's
evaluation always unrolls the full 1000 steps (then masks everything after the
first episode) while eqxrl's stops once every episode is done; QDax masks
time-limit-truncated transitions out of the critic loss, eqxrl bootstraps
through truncation; eqxrl acts uniformly at random until ``learning_starts``
(0 here, so never) and QDax's update order is alpha, critic, actor (each from
the pre-update parameters) while eqxrl's is critic, actor (against the new
critic), alpha; initialisation (eqxrl orthogonal, QDax variance-scaling
uniform), Adam eps (eqxrl 1e-5, optax 1e-8) and the log-std parametrisation
(eqxrl: bounded in [-5, 2]; brax's ``NormalTanhDistribution``: softplus + 1e-3)
differ; QDax's jitted calls donate nothing (as in its notebook) while eqxrl's
generation donates the population; QDax's replay buffer stores flattened
transitions in one array per member, eqxrl's stores each field; eqxrl's buffer
stores each transition's discount with the ``gamma`` of the member that
collected it, so a resampled ``gamma`` applies to a copy's inherited
transitions only as they are overwritten (QDax applies the current discount in
the loss).
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent
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


def _versions(mods) -> dict:
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for m in mods:
        try:
            out[m] = version(m)
        except PackageNotFoundError:
            pass
    out["python"] = platform.python_version()
    return out


def _timed(fn, *args):
    import jax

    t0, c0 = time.perf_counter(), time.process_time()
    out = fn(*args)
    jax.block_until_ready(out)
    return out, time.perf_counter() - t0, time.process_time() - c0


def _summary(c, fitness_last, gens, compile_s, first_call_extra=None) -> dict:
    import numpy as np

    f = np.asarray(fitness_last, np.float64)
    steps = c["population_size"] * c["total_steps"]
    run = sum(g["wall"] for g in gens)
    run_cpu = sum(g["cpu"] for g in gens)
    return dict(
        compile=compile_s,
        run=run,
        run_cpu=run_cpu,
        us_per_member_step=run / steps * 1e6,
        cpu_us_per_member_step=run_cpu / steps * 1e6,
        generation_median=statistics.median(g["wall"] for g in gens),
        best=float(np.nanmax(f)),
        median=float(np.nanmedian(f)),
        fitness=[float(x) for x in f],
        generations=len(gens),
    )


# ============================================================================ eqxrl side
def run_eqxrl(c: dict, seed: int) -> dict:
    import equinox as eqx
    import jax
    import jax.numpy as jnp
    import numpy as np

    import eqxrl
    from eqxrl.agents import SAC
    from eqxrl.pbt import PBT, Truncation, Uniform, exploit_and_explore
    from eqxrl.pbt import _pbt  # the generation program, to compile it ahead of time

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
    _pbt._init_population.lower(pbt, key, sharding).compile()
    init_compile = time.perf_counter() - t0
    population, init_wall, _ = _timed(pbt.init, key)
    config = (pbt, pbt._fitness_fn(), generations * pbt.ready_iterations, sharding)
    t0 = time.perf_counter()
    _pbt._generation.lower(config, population.agent, population.state, population.key, population.generation).compile()
    gen_compile = time.perf_counter() - t0

    gens, records = [], []
    for _ in range(generations):
        t0, c0 = time.perf_counter(), time.process_time()
        population, record = pbt.step(population, total)  # returns NumPy: synchronised
        gens.append(dict(wall=time.perf_counter() - t0, cpu=time.process_time() - c0))
        records.append(record)
    history = _pbt.history_from_records(pbt, records)

    # Shares, estimated on the trained population with the same steps as separate programs.
    size = pbt.population_size
    fitness_fn = pbt._fitness_fn()
    fit = eqx.filter_jit(lambda a, s, k: eqx.filter_vmap(fitness_fn)(a.agent, s, jax.random.split(k, size)))
    explore = eqx.filter_jit(exploit_and_explore)
    f = jnp.asarray(history.fitness[-1], jnp.float32)
    fit(population.agent, population.state, jax.random.key(1)).block_until_ready()  # compile
    explore(pbt, jax.random.key(2), population.agent, population.state, f)[2].block_until_ready()
    eval_t, explore_t = [], []
    for r in range(3):
        _, w, _ = _timed(fit, population.agent, population.state, jax.random.key(10 + r))
        eval_t.append(w)
        _, w, _ = _timed(explore, pbt, jax.random.key(20 + r), population.agent, population.state, f)
        explore_t.append(w)

    out = _summary(c, history.fitness[-1], gens, init_compile + gen_compile)
    out.update(
        side="eqxrl", seed=seed, setup=setup, init_run=init_wall,
        compile_parts=dict(init=init_compile, generation=gen_compile),
        first_generation=gens[0]["wall"],
        exploit_s=statistics.median(explore_t) * (generations - 1),
        eval_s=statistics.median(eval_t) * generations,
        best_hp={n: float(history.hyperparameters[n][-1, history.best()[0]]) for n in space},
        updates=int(np.asarray(population.state.updates).reshape(-1)[0]) if hasattr(population.state, "updates") else None,
        env_steps=int(np.asarray(population.state.env_steps).reshape(-1)[0]) if hasattr(population.state, "env_steps") else None,
        versions=_versions(("jax", "jaxlib", "equinox", "optax", "brax", "flax", "mujoco")),
        devices=str(jax.devices()),
    )  # fmt: skip
    out["exploit_share"] = out["exploit_s"] / out["run"]
    out["eval_share"] = out["eval_s"] / out["run"]
    return out


# ============================================================================ QDax side
def run_qdax(c: dict, seed: int) -> dict:
    import jax
    import jax.numpy as jnp
    import numpy as np
    from qdax.baselines.pbt import PBT as QPBT
    from qdax.baselines.sac_pbt import PBTSAC, PBTSacConfig, PBTSacTrainingState
    from qdax.tasks.brax import v2 as qdax_brax

    t_setup = time.perf_counter()
    pop, n, e = c["population_size"], c["num_envs"], c["eval_episodes"]
    env = qdax_brax.create(c["env"], episode_length=c["episode_length"], batch_size=pop * n, auto_reset=True,
                           backend=c["backend"])  # fmt: skip
    eval_env = qdax_brax.create(c["env"], episode_length=c["episode_length"], batch_size=pop * e, auto_reset=True,
                                backend=c["backend"])  # fmt: skip
    # brax's `observation_size` runs an un-jitted reset (seconds); the traced shape is the same.
    obs_size = int(jax.eval_shape(env.reset, jax.random.key(0)).obs.shape[-1])
    action_size = int(env.action_size)

    config = PBTSacConfig(
        batch_size=c["batch_size"], episode_length=c["episode_length"], tau=c["tau"],
        normalize_observations=c["normalize_observations"], alpha_init=c["alpha_init"],
        policy_hidden_layer_size=tuple(c["hidden"]), critic_hidden_layer_size=tuple(c["hidden"]), fix_alpha=False,
    )  # fmt: skip
    agent = PBTSAC(config=config, action_size=action_size)
    init_fn = agent.get_init_fn(population_size=pop, action_size=action_size, observation_size=obs_size,
                                buffer_size=c["buffer_size"])  # fmt: skip
    iterations = c["ready"] // n
    assert iterations * n == c["ready"]
    train_fn = agent.get_train_fn(env=env, num_iterations=iterations, env_batch_size=n,
                                  grad_updates_per_step=c["grad_updates_per_step"])  # fmt: skip
    eval_policy = agent.get_eval_fn(eval_env)
    pbt = QPBT(population_size=pop, num_best_to_replace_from=c["num_best_to_replace_from"],
               num_worse_to_replace=c["num_worse_to_replace"])  # fmt: skip

    def reshape(tree, k):
        return jax.tree.map(lambda x: jnp.reshape(x, (pop, k) + x.shape[1:]), tree)

    def reset_train(key):
        return reshape(env.reset(key), n)

    def evaluate(training_states, key):
        first = reshape(eval_env.reset(key), e)
        returns, _ = eval_policy(training_states, first)
        return returns

    generations = c["total_steps"] // c["ready"]
    key = jax.random.key(seed)
    key, env_key, init_key = jax.random.split(key, 3)
    setup = time.perf_counter() - t_setup

    # Compile every program ahead of time.
    parts = {}

    def aot(name, fn, *args):
        t0 = time.perf_counter()
        compiled = jax.jit(fn).lower(*args).compile()
        parts[name] = time.perf_counter() - t0
        return compiled

    reset_c = aot("reset", reset_train, env_key)
    init_c = aot("init", init_fn, init_key)
    shapes_ts, shapes_rb = jax.eval_shape(init_fn, init_key)
    shapes_env = jax.eval_shape(reset_train, env_key)
    train_c = aot("train", train_fn, shapes_ts, shapes_env, shapes_rb)
    eval_c = aot("evaluate", evaluate, shapes_ts, key)
    returns_shape = jax.ShapeDtypeStruct((pop,), jnp.float32)
    select_c = aot("select", pbt.update_states_and_buffer, key, returns_shape, shapes_ts, shapes_rb)
    compile_s = sum(parts.values())

    env_states = reset_c(env_key)
    (training_states, replay_buffers), init_wall, _ = _timed(init_c, init_key)
    gens, fitness = [], []
    train_s = eval_s = select_s = 0.0
    for g in range(generations):
        t0, c0 = time.perf_counter(), time.process_time()
        (training_states, env_states, replay_buffers), metrics = train_c(training_states, env_states, replay_buffers)
        jax.block_until_ready(training_states)
        t1 = time.perf_counter()
        key, eval_key, select_key = jax.random.split(key, 3)
        returns = eval_c(training_states, eval_key)
        returns_np = np.asarray(returns)
        t2 = time.perf_counter()
        if g < generations - 1:
            training_states, replay_buffers = select_c(select_key, returns, training_states, replay_buffers)
            jax.block_until_ready((training_states, replay_buffers))
        t3 = time.perf_counter()
        train_s, eval_s, select_s = train_s + t1 - t0, eval_s + t2 - t1, select_s + t3 - t2
        gens.append(dict(wall=t3 - t0, cpu=time.process_time() - c0))
        fitness.append(returns_np)

    out = _summary(c, fitness[-1], gens, compile_s)
    best = int(np.nanargmax(fitness[-1]))
    out.update(
        side="qdax", seed=seed, setup=setup, init_run=init_wall, first_generation=gens[0]["wall"], compile_parts=parts,
        exploit_s=select_s, eval_s=eval_s, train_s=train_s,
        best_hp={n: float(np.asarray(getattr(training_states, n))[best]) for n in c["ranges"]},
        updates=int(np.asarray(training_states.steps)[0]),
        tfp_imported="tensorflow_probability" in sys.modules,
        versions=_versions(("jax", "jaxlib", "qdax", "brax", "flax", "optax", "chex", "mujoco",
                            "tensorflow-probability")),  # fmt: skip
        devices=str(jax.devices()),
        hp_class=PBTSacTrainingState.__name__,
    )  # fmt: skip
    out["exploit_share"] = out["exploit_s"] / out["run"]
    out["eval_share"] = out["eval_s"] / out["run"]
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
    wall = time.perf_counter() - t0
    for line in reversed(p.stdout.splitlines()):
        if line.startswith(MARK):
            out = json.loads(line[len(MARK) :])
            out["process_wall"] = wall
            return out
    tail = "\n".join((p.stdout + "\n" + p.stderr).strip().splitlines()[-25:])
    return dict(side=side, seed=seed, error=f"exit code {p.returncode}:\n{tail}")


def _med(rs, k):
    vals = [r[k] for r in rs if r.get(k) is not None and not (isinstance(r[k], float) and math.isnan(r[k]))]
    return statistics.median(vals) if vals else float("nan")


ROWS = [
    ("compile (s)", "compile", "{:.1f}"),
    ("wall us per member per env step (after compile)", "us_per_member_step", "{:.1f}"),
    ("process-CPU us per member per env step", "cpu_us_per_member_step", "{:.1f}"),
    ("generation wall (s, median)", "generation_median", "{:.2f}"),
    ("exploit/explore share of run", "exploit_share", "{:.2%}"),
    ("evaluation share of run", "eval_share", "{:.1%}"),
    ("final best-member return", "best", "{:.1f}"),
    ("final median-member return", "median", "{:.1f}"),
    ("whole process wall (s)", "process_wall", "{:.1f}"),
]


def table(res: dict) -> str:
    lines = ["| figure (median of runs) | eqxrl | QDax | eqxrl/QDax |", "|---|---:|---:|---:|"]
    e_ok = [r for r in res["eqxrl"] if "error" not in r]
    q_ok = [r for r in res["qdax"] if "error" not in r]
    for label, k, fmt in ROWS:
        a, b = _med(e_ok, k), _med(q_ok, k)
        fa = fmt.format(a) if not math.isnan(a) else "n/a"
        fb = fmt.format(b) if not math.isnan(b) else "n/a"
        ratio = f"{a / b:.2f}" if not (math.isnan(a) or math.isnan(b)) and b else "n/a"
        lines.append(f"| {label} | {fa} | {fb} | {ratio} |")
    return "\n".join(lines)


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


def render(a, cfg, res, elapsed, load_before, load_after) -> str:
    e_ok = [r for r in res["eqxrl"] if "error" not in r]
    q_ok = [r for r in res["qdax"] if "error" not in r]
    ev = e_ok[0]["versions"] if e_ok else {}
    qv = q_ok[0]["versions"] if q_ok else {}
    fmt_v = lambda v: ", ".join(f"{k} {x}" for k, x in v.items()) or "n/a"  # noqa: E731
    cmd = "python benchmarks/pbt_qdax.py " + " ".join(sys.argv[1:])
    gens = cfg["total_steps"] // cfg["ready"]
    c = cfg
    lines = [
        "# PBT-SAC: eqxrl vs QDax (same population, budget and hyperparameter search)",
        "",
        f"- date: {datetime.datetime.now().isoformat(timespec='minutes')}",
        f"- eqxrl stack ({sys.executable}): {fmt_v(ev)}; eqxrl at commit {_git_rev()}",
        f"- QDax stack ({a.qdax_python}): {fmt_v(qv)}"
        + (f"; tensorflow_probability imported at run time: {q_ok[0]['tfp_imported']}" if q_ok else ""),
        f"- machine: {platform.machine()}, {_cpu_model()}, nproc = {os.cpu_count()}, JAX CPU backend "
        f"({e_ok[0]['devices'] if e_ok else 'n/a'}); shared with other jobs",
        f"- load average before / after: {load_before} / {load_after}",
        f"- command: `{cmd}` ({len(res['eqxrl'])} runs per library, interleaved, each a fresh process; "
        f"{elapsed / 60:.1f} min in all)",
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
        table(res),
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
        "- QDax's evaluation unrolls all `episode_length` steps for every member and masks what follows "
        "the first episode; eqxrl's stops once every episode of every member is done (a vmapped "
        "`while_loop`). With good policies (episodes that reach the time limit) both run the full length.",
        "- QDax drops time-limit-truncated transitions from the critic loss; eqxrl bootstraps through "
        "truncation.",
        "- Update order: QDax updates alpha, then the critic, then the actor against the pre-update critic; "
        "eqxrl the critic, then the actor against the updated critic, then alpha.",
        "- Initialisation (eqxrl orthogonal, QDax variance scaling uniform), Adam eps (eqxrl 1e-5, optax 1e-8), "
        "the policy's scale (eqxrl: log-std bounded in [-5, 2]; QDax: brax's `NormalTanhDistribution`, "
        "softplus + 0.001).",
        "- QDax's selection sorts by `-returns` (ties: lower index counts as better; NaN handling is "
        "`argsort`'s); eqxrl counts NaN fitness as worst and breaks ties by member index.",
        "- QDax's jitted programs donate nothing (as in its notebook) and the evaluation, selection and "
        "training are separate programs with host round trips between them; eqxrl runs a generation as "
        "one program that donates the population.",
        "- QDax's replay buffer stores each member's transitions flattened into one array (with a "
        "`truncations` column); eqxrl's stores each field as its own array.",
        "- **The discount reaches the replay buffer differently.** eqxrl stores each transition's discount "
        "(`gamma x (1 - terminated)`, from the n-step window's `emit(self.gamma)`) when it is inserted, so a "
        "copy whose `gamma` explore resampled keeps learning from its parent's transitions with the parent's "
        "`gamma` until its buffer turns over (with 100,000 slots and 16,384 steps per member it never does); "
        "QDax stores `dones` and applies the member's current discount in the critic loss. `reward_scale` "
        "is applied at sampling time on both sides, so it takes effect at once on both.",
        "- Random streams differ: the same seed does not give the same initial hyperparameters.",
        "",
    ]
    return "\n".join(lines)


def _git_rev() -> str:
    try:
        repo = ROOT.parent
        rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=repo, capture_output=True, text=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "eqxrl"], cwd=repo, capture_output=True, text=True).stdout
        return rev + (" (eqxrl/ has uncommitted changes)" if dirty.strip() else "")
    except Exception:  # noqa: BLE001
        return "unknown"


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def _load() -> str:
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "n/a"


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--side", choices=("eqxrl", "qdax"), help="(internal) run one side once and print JSON")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--config-json", help="(internal) the configuration")
    p.add_argument("--runs", type=int, default=3, help="runs per library (medians)")
    p.add_argument("--quick", action="store_true", help="smoke test: 1 run, tiny budget")
    p.add_argument("--qdax-python", default=os.environ.get("QDAX_PYTHON", DEFAULT_QDAX_PYTHON),
                   help="interpreter of the QDax virtual environment")  # fmt: skip
    p.add_argument("--total-steps", type=int, help="env steps per member (default: CONFIG)")
    p.add_argument("--ready", type=int, help="env steps per member per generation (default: CONFIG)")
    p.add_argument("--timeout", type=float, default=900.0, help="seconds per run")
    p.add_argument("--out", default=str(ROOT / "results" / "pbt_qdax.md"), help="Markdown output ('-': none)")
    a = p.parse_args(argv)

    if a.side:
        cfg = json.loads(a.config_json) if a.config_json else dict(CONFIG)
        fn = run_eqxrl if a.side == "eqxrl" else run_qdax
        out = fn(cfg, a.seed)
        print(MARK + json.dumps(out), flush=True)
        return

    cfg = dict(CONFIG)
    if a.quick:
        cfg.update(QUICK)
        a.runs = 1
    if a.total_steps:
        cfg["total_steps"] = a.total_steps
    if a.ready:
        cfg["ready"] = a.ready
    load_before = _load()
    t0 = time.perf_counter()
    res = {"eqxrl": [], "qdax": []}
    pythons = {"eqxrl": sys.executable, "qdax": a.qdax_python}
    for r in range(a.runs):
        order = ("eqxrl", "qdax") if r % 2 == 0 else ("qdax", "eqxrl")
        for side in order:
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
    elapsed = time.perf_counter() - t0
    md = render(a, cfg, res, elapsed, load_before, _load())
    print(md)
    if a.out != "-":
        out = Path(a.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(md)
        print(f"wrote {out}")


if __name__ == "__main__":
    main()
