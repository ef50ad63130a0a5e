"""eqxrl's PQN against rejax 0.1.3's PQN at rejax's own configuration, on gymnax CartPole-v1 and
Breakout-MinAtar: final greedy returns of 5 seeds (``--seeds``), env steps/s (wall and process CPU), compile time.

**Configuration.** rejax ships one PQN configuration, ``configs/gymnax/cartpole.yaml``'s ``pqn``
entry (github.com/keraJLi/rejax; there is no MinAtar one, its ``benchmark/breakout_1m.yaml`` has
SAC, PPO and DQN only): 16 envs x 128 steps, 16 minibatches, 5 epochs, Adam 3e-4 (constant),
``max_grad_norm`` 10, epsilon 1 -> 0.05 over the first half, gamma 0.99, lambda 0.9, 524,288 env
steps, no observation normalisation. Both tasks run it on both sides, Breakout-MinAtar included;
rejax's PQN builds its network itself: a (64, 64) MLP on the flattened observation with
``relu(LayerNorm(Dense(x)))`` layers. eqxrl's side (`make_eqxrl`) is the same in eqxrl's terms,
field by field in `EQXRL_FROM_REJAX`, with ``Adam(clip="value", eps=1e-8)`` for rejax's
``optax.chain(optax.clip(10), optax.adam(3e-4))`` (element-wise clipping, optax's eps), and
``reward_scale=1`` (rejax scales no rewards). What eqxrl cannot or does not match:

- truncation: rejax's gymnax step returns one ``done`` (our five-tuple wrapper ORs terminated and
  truncated), so its lambda-returns stop at a time limit as at a termination; eqxrl bootstraps
  through a truncation (``max_a Q`` of the final observation). CartPole's 500-step limit and
  Breakout's 1,000 are reached only by good policies;
- initialisation: flax's ``Dense`` (LeCun-normal weights, zero biases) and LayerNorm eps 1e-6 vs
  eqxrl's ``MLPTorso`` initialisation and its LayerNorm.

**Seeds and timing.** Each side trains the 5 seeds ``jax.random.split(jax.random.key(--seed), 5)`` (``--seeds N``: N)
in one program (rejax: ``jax.vmap(algo.train)`` with its periodic evaluation off, compiled ahead of
time and then run; eqxrl: ``eqxrl.train`` on the batch of keys, ``TrainInfo``'s compile and run),
``--runs`` times per task with the sides alternated (first side swapped every run) and JAX's caches
cleared before each, so that every compile is cold; medians over the runs. CPU time is the process
CPU time (``time.process_time``) over the same spans.

**Devices.** eqxrl is imported first, so that it makes its default CPU devices (one per core); its
``train`` then shards the seeds over them and pads 5 seeds to 6 on 2 devices (copies of the first,
dropped from the results): a sixth of its work is the copy. rejax runs on one device (XLA's
intra-op threads use both cores). ``--sides eqxrl,eqxrl-1dev,rejax`` adds eqxrl with
``train(shard=False)``: all 5 seeds on one device, nothing padded.

**Evaluation: one loop for both.** ``rejax.evaluate.evaluate`` on the gymnax env (five-tuple
wrapper) with each side's greedy action (argmax of its Q-network; eqxrl's through
``agent.act(state, obs, deterministic=True)``, rejax's through its flax network), 32 episodes per
seed, the same evaluation keys for both, after the first run's training. A uniform-random policy
through the same loop gives the lower end of Breakout's return range.

**Targets** (issue 33): median final return over the 5 seeds >= rejax's median - 5% of the task's
return range (CartPole: [0, 500]; Breakout-MinAtar: [random policy's mean, best per-seed return of
this run], for lack of a fixed maximum); env steps/s >= rejax's.

Run ``python benchmarks/pqn_rejax.py`` (about 15 minutes on 2 shared CPU cores at ``--runs 2``).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

import eqxrl  # noqa: F401  (first, so that it chooses its CPU devices, one per core: its default)
from _common import fresh_caches, time_train, turn_order
from _report import Report, agent_fields, median, parser, table

# rejax's configs/gymnax/cartpole.yaml, entry pqn (env, eval_freq and total_timesteps left out).
REJAX_PQN = dict(
    num_envs=16, num_steps=128, num_minibatches=16, max_grad_norm=10.0, learning_rate=0.0003, num_epochs=5,
    eps_start=1.0, eps_end=0.05, exploration_fraction=0.5, gamma=0.99, td_lambda=0.9, normalize_observations=False,
)  # fmt: skip
REJAX_TOTAL = 524_288

# eqxrl's PQN field <- rejax's key (the one place the two configs meet).
EQXRL_FROM_REJAX = dict(
    num_envs="num_envs", rollout_length="num_steps", num_minibatches="num_minibatches", num_epochs="num_epochs",
    eps_start="eps_start", eps_end="eps_end", exploration_fraction="exploration_fraction", gamma="gamma",
    q_lambda="td_lambda", normalize_observations="normalize_observations",
)  # fmt: skip

TASKS = {"CartPole-v1": (0.0, 500.0), "Breakout-MinAtar": None}  # return range; None: measured (see the docstring)
SEEDS = 5
EVAL_EPISODES = 32


def make_eqxrl(env_id: str):
    from eqxrl.agents import PQN
    from eqxrl.components import MLPTorso, Adam

    c = REJAX_PQN
    return PQN(
        env_id, **{ours: c[theirs] for ours, theirs in EQXRL_FROM_REJAX.items()},
        # rejax's network: (64, 64), relu(LayerNorm(Dense(x))), on the flattened observation (also on MinAtar)
        critic_torso=MLPTorso((64, 64), "relu", layer_norm=True), hidden_sizes=(64, 64), layer_norm=True,
        # optax.chain(optax.clip(max_grad_norm), optax.adam(learning_rate)): element-wise clip, adam eps 1e-8, constant
        optimizer=Adam(c["learning_rate"], c["max_grad_norm"], clip="value", anneal=False, eps=1e-8),
        anneal_lr=False, reward_scale=1.0,  # (anneal_lr: unused beside `optimizer`); rejax scales no rewards
    )  # fmt: skip


def run_rejax(env_id: str, steps: int, keys) -> tuple[object, dict]:
    from peers import rejax_adapter

    algo = rejax_adapter.make_pqn(env_id, steps, REJAX_PQN)
    ts, out = rejax_adapter.time_train(algo, keys)
    assert out["steps"] == steps * len(keys), (out["steps"], steps)
    return (algo, ts), out


def run_eqxrl(env_id: str, steps: int, keys, **train_kwargs) -> tuple[object, dict]:
    agent = make_eqxrl(env_id)
    state, info, out = time_train(agent, keys, steps, **train_kwargs)
    out["steps"] = int(np.sum(np.asarray(state.env_steps)))
    assert out["steps"] == steps * len(keys), (out["steps"], steps)
    return (agent, state), out


RUNNERS = {
    "eqxrl": run_eqxrl,
    "rejax": run_rejax,
    # eqxrl on one device (`train(shard=False)`): by default it shards the seeds over its CPU devices (one
    # per core), and pads 5 seeds to 6 (copies of the first) on 2 devices
    "eqxrl-1dev": lambda env_id, steps, keys: run_eqxrl(env_id, steps, keys, shard=False),
}


def gymnax_env(env_id: str):
    import gymnax

    from peers.rejax_adapter import FiveTupleGymnaxEnv

    env, params = gymnax.make(env_id)
    return FiveTupleGymnaxEnv(env), params


def shared_eval(env_id: str, make_act, batched, eval_keys) -> np.ndarray:
    """Mean return per seed over `EVAL_EPISODES` episodes of ``rejax.evaluate.evaluate``: `make_act(member)`
    is the greedy ``act(obs, rng)`` of one seed's trained state `member` (vmapped over `batched`)."""
    from rejax.evaluate import evaluate

    env, params = gymnax_env(env_id)

    def one(member, key):
        _, returns = evaluate(make_act(member), key, env, params, EVAL_EPISODES, params.max_steps_in_episode)
        return returns.mean()

    return np.asarray(jax.jit(jax.vmap(one))(batched, eval_keys))


def returns_of(side: str, trained, env_id: str, eval_keys) -> np.ndarray:
    if side == "rejax":
        from peers.rejax_adapter import pqn_greedy_act

        algo, ts = trained
        return shared_eval(env_id, lambda member: pqn_greedy_act(algo, member), ts, eval_keys)
    agent, state = trained

    def make_act(member):
        return lambda obs, rng: agent.act(member, obs.astype(jnp.float32), deterministic=True)

    return shared_eval(env_id, make_act, state, eval_keys)


def random_return(env_id: str, key) -> float:
    env, params = gymnax_env(env_id)
    n = env.num_actions
    make_act = lambda _: (lambda obs, rng: jax.random.randint(rng, (), 0, n))  # noqa: E731
    return float(np.mean(shared_eval(env_id, make_act, jnp.zeros((4,)), jax.random.split(key, 4))))


def fmt_row(side, env_id, per_seed, runs, steps):
    med = lambda k: median(r[k] for r in runs)  # noqa: E731
    total_steps = steps * len(per_seed)
    return [
        side, ", ".join(f"{x:.1f}" for x in per_seed), f"**{np.median(per_seed):.1f}**", f"{np.mean(per_seed):.1f}",
        f"{med('compile'):.1f}", f"{med('run'):.1f}", f"{med('total'):.1f}", f"{med('compile_cpu'):.1f}",
        f"{med('run_cpu'):.1f}", f"{median(total_steps / r['run'] for r in runs):,.0f}",
        f"{median(total_steps / r['total'] for r in runs):,.0f}",
        f"{median(total_steps / r['run_cpu'] for r in runs):,.0f}",
        f"{median(total_steps / r['total_cpu'] for r in runs):,.0f}",
    ]  # fmt: skip


def main(argv=None) -> None:
    report = Report(__file__, argv)
    p = parser(__doc__, "pqn_rejax", runs=2)
    p.add_argument("--steps", type=int, default=REJAX_TOTAL, help=f"env steps per seed (default rejax's {REJAX_TOTAL})")
    p.add_argument("--tasks", default=",".join(TASKS), help="comma-separated gymnax env ids")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--seeds", type=int, default=SEEDS, help=f"seeds per side, trained in one program (default {SEEDS})")
    p.add_argument("--sides", default="eqxrl,rejax", help=f"comma-separated, rejax among them: {', '.join(RUNNERS)}")
    args = p.parse_args(argv)
    tasks = args.tasks.split(",")
    sides = args.sides.split(",")
    assert "rejax" in sides and set(sides) <= set(RUNNERS), sides
    keys = jax.random.split(jax.random.key(args.seed), args.seeds)
    eval_keys = jax.random.split(jax.random.key(args.seed + 1000), args.seeds)

    results = {}
    for env_id in tasks:
        runs = {s: [] for s in sides}
        per_seed = {}
        for run in range(args.runs):
            for side in turn_order(run, sides):
                fresh_caches()
                trained, out = RUNNERS[side](env_id, args.steps, keys)
                runs[side].append(out)
                print(
                    f"{env_id} run {run} {side}: compile {out['compile']:.1f} s, run {out['run']:.1f} s "
                    f"(cpu {out['compile_cpu']:.1f} + {out['run_cpu']:.1f} s), "
                    f"{out['steps'] / out['run']:,.0f} env steps/s", flush=True,
                )  # fmt: skip
                if run == 0:
                    per_seed[side] = returns_of(side, trained, env_id, eval_keys)
                    print(f"  {side} greedy returns per seed: {np.round(per_seed[side], 1)}", flush=True)
                del trained
        rand = random_return(env_id, jax.random.key(args.seed + 2000))
        lo, hi = TASKS.get(env_id) or (rand, float(max(np.max(v) for v in per_seed.values())))
        results[env_id] = dict(runs=runs, per_seed=per_seed, range=(lo, hi), random=rand)
        print(f"{env_id}: random policy {rand:.2f}; range [{lo:.1f}, {hi:.1f}]", flush=True)

    lines = report.header("PQN: eqxrl vs rejax 0.1.3 at rejax's PQN configuration", packages=("rejax", "flax"))
    lines += [
        "- configuration (rejax's `configs/gymnax/cartpole.yaml`, `pqn`, on both tasks): "
        + ", ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in REJAX_PQN.items())
        + f"; env steps per seed: {args.steps:,}"
        + (" (rejax's total_timesteps)" if args.steps == REJAX_TOTAL else f" (rejax's config: {REJAX_TOTAL:,})"),
        f"- eqxrl's agent, every field: `PQN(ENV, {agent_fields(make_eqxrl(tasks[0]))})`",
        "- not matched (see the script's docstring): eqxrl bootstraps through a time-limit truncation, rejax "
        "stops at it (one `done`); initialisation (flax LeCun-normal Dense, LayerNorm eps 1e-6, vs eqxrl's)",
        f"- seeds: `jax.random.split(jax.random.key({args.seed}), {args.seeds})`, trained in one program per side "
        "(rejax: `jax.vmap(algo.train)`, periodic evaluation off; eqxrl: `eqxrl.train` on the keys)",
        f"- eqxrl's devices: {jax.device_count()} ({jax.default_backend()}); side `eqxrl` shards the seeds over them "
        f"(padded to a multiple of the device count), `eqxrl-1dev` runs `train(shard=False)` on one",
        f"- runs: {args.runs} per task, sides alternated, JAX caches cleared before each (cold compiles); "
        "timings are medians over the runs, returns from the first run",
        f"- evaluation, the same loop for both: `rejax.evaluate.evaluate` on the gymnax env, greedy action "
        f"(argmax Q; eqxrl's `agent.act(deterministic=True)`), {EVAL_EPISODES} episodes per seed, keys "
        f"`jax.random.split(jax.random.key({args.seed + 1000}), {args.seeds})` for both sides",
        "",
    ]
    cols = [
        "side", "greedy return per seed", "median", "mean", "compile (s)", "train (s)", "total (s)",
        "compile CPU (s)", "train CPU (s)", "env steps/s (train)", "env steps/s (incl. compile)",
        "env steps / CPU s (train)", "env steps / CPU s (incl. compile)",
    ]  # fmt: skip
    verdicts = []
    for env_id, r in results.items():
        lo, hi = r["range"]
        margin = 0.05 * (hi - lo)
        lines += [f"## {env_id}", ""]
        lines += table(cols, [fmt_row(s, env_id, r["per_seed"][s], r["runs"][s], args.steps) for s in sides])
        m_r = float(np.median(r["per_seed"]["rejax"]))
        sps = {s: median(args.steps * args.seeds / x["run"] for x in r["runs"][s]) for s in sides}
        sps_tot = {s: median(args.steps * args.seeds / x["total"] for x in r["runs"][s]) for s in sides}
        cps = {s: median(args.steps * args.seeds / x["run_cpu"] for x in r["runs"][s]) for s in sides}
        range_note = "" if TASKS.get(env_id) else f" (random policy {r['random']:.2f}, best seed of this run {hi:.1f})"
        lines += ["", f"- return range [{lo:.1f}, {hi:.1f}]{range_note}: target median >= {m_r:.1f} - {margin:.1f} = {m_r - margin:.1f}"]
        for side in (s for s in sides if s != "rejax"):
            m_e = float(np.median(r["per_seed"][side]))
            ret_ok, sps_ok = m_e >= m_r - margin, sps[side] >= sps["rejax"]
            lines += [
                f"- {side}: median {m_e:.1f}: **{'met' if ret_ok else 'not met'}**; throughput (train, wall) {side} / rejax "
                f"= {sps[side] / sps['rejax']:.2f}: **{'met' if sps_ok else 'not met'}**; with compile "
                f"{sps_tot[side] / sps_tot['rejax']:.2f}; per CPU second (train) {cps[side] / cps['rejax']:.2f}",
            ]  # fmt: skip
            verdicts.append(f"{env_id} {side}: return {'met' if ret_ok else 'NOT met'}, throughput {'met' if sps_ok else 'NOT met'}")
        lines += [f"- random policy through the same loop: {r['random']:.2f}", ""]
    lines += [
        "Columns: compile = rejax's `jax.jit(vmap(train)).lower(keys).compile()`, eqxrl's "
        "`TrainInfo.compile_seconds`; train = the compiled program's execution (all seeds); env steps/s count "
        "all seeds' steps; CPU = process CPU time over the same span.",
        "",
    ]
    print("; ".join(verdicts))
    report.emit("\n".join(lines), args.out)


if __name__ == "__main__":
    main()
