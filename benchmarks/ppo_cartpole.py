"""PPO on gymnax CartPole-v1: eqxrl versus rejax, at identical hyperparameters.

Measures, for one seed and for a batch of seeds in one program,

- compile time (trace + lower + XLA compile of the training program), and
- env steps per second after compilation,

both in wall-clock time and in CPU time of this process (the latter much less
disturbed by other work on a shared machine), each the median of ``--runs`` runs, the two libraries interleaved (eqxrl,
rejax, eqxrl, rejax, ...) so that load on the machine hits both alike. Then it
trains both on several seeds and reports the final evaluation return.

Run ``python benchmarks/ppo_cartpole.py`` (about 8-11 minutes on 2 shared CPU cores)
or ``python benchmarks/ppo_cartpole.py --quick`` (a smoke test, < 2 minutes).
The table is printed and written to ``benchmarks/results/ppo_cartpole.md``.

Matching the two libraries
--------------------------
Configuration (PureJaxRL's CartPole): 4 envs x 128 steps per rollout, 4
epochs x 4 minibatches, Adam lr 2.5e-4 (constant), gamma 0.99, GAE lambda
0.95, clip 0.2, entropy 0.01, value 0.5, gradient clipping 0.5, separate
(64, 64) tanh MLPs for actor and critic.

- rejax clips every gradient element to [-0.5, 0.5] (``optax.clip``) and keeps
  the learning rate constant, so eqxrl runs with ``grad_clip="value"`` and
  ``anneal_lr=False``.
- rejax's defaults (swish, 64 envs, 64 steps, 16 minibatches, 8 epochs) are all
  overridden; the script checks that both sides have the same parameter
  counts, the tanh activation, and that both took the same number of env steps.
- rejax's periodic evaluation is switched off: ``eval_freq = total_timesteps``
  (one training segment), ``skip_initial_evaluation=True``, and the
  evaluation callback is replaced by a no-op, so the timed rejax program is
  training only (like eqxrl's ``train``).
- Step counts are rounded down to whole iterations of 4 x 128 = 512 steps so
  both libraries do exactly the same number of iterations.

Remaining, deliberate differences (each library's own design): eqxrl
bootstraps through time-limit truncation (rejax treats it as termination),
initialises with orthogonal weights (rejax: LeCun normal), uses Adam eps 1e-5
(rejax: optax's default 1e-8) and trains actor and critic with one optimizer
(rejax: two; Adam and per-element clipping act elementwise, so this changes
nothing numerically). eqxrl runs its training as ~50 compiled chunks with a
host round trip in between (for its progress bar and metrics); rejax runs one
program.
"""

from __future__ import annotations

import argparse
import datetime
import gc
import os
import platform
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

import eqxrl
from _common import _git_rev, _nproc  # (benchmarks/ is the script's directory)
from eqxrl.agents import PPO

ENV_ID = "CartPole-v1"
ROLLOUT = 4 * 128  # num_envs * num_steps: env steps per iteration, both libraries

HYPERS = dict(
    learning_rate=2.5e-4,
    gamma=0.99,
    gae_lambda=0.95,
    clip_eps=0.2,
    ent_coef=0.01,
    vf_coef=0.5,
    max_grad_norm=0.5,
)


# ============================================================================ rejax side
class FiveTupleGymnaxEnv:
    """A gymnax env whose ``step`` returns the pre-1.0 five-tuple rejax 0.1.3 expects.

    gymnax 1.0.1's ``Environment.step`` returns
    ``(obs, state, reward, terminated, truncated, info)``; rejax unpacks
    ``(obs, state, reward, done, info)``. Here ``done = terminated | truncated``
    (gymnax has already auto-reset the state when either is true). Everything
    else (spaces, params, name) is forwarded to the wrapped env.
    """

    def __init__(self, env):
        self._env = env

    def step(self, key, state, action, params=None):
        obs, state, reward, terminated, truncated, info = self._env.step(key, state, action, params)
        return obs, state, reward, jnp.logical_or(terminated, truncated), info

    def reset(self, key, params=None):
        return self._env.reset(key, params)

    # The rest of the gymnax interface rejax uses, forwarded explicitly (a
    # blanket __getattr__ would recurse inside rejax's `deepcopy` of its config).
    @property
    def default_params(self):
        return self._env.default_params

    @property
    def name(self) -> str:
        return self._env.name

    @property
    def num_actions(self) -> int:
        return self._env.num_actions

    def action_space(self, params=None):
        return self._env.action_space(params)

    def observation_space(self, params):
        return self._env.observation_space(params)


def _no_eval(algo, ts, rng):
    """Stands in for rejax's evaluation callback: costs nothing, returns a dummy."""
    return jnp.zeros((), jnp.float32)


def make_rejax(total_timesteps: int):
    import gymnax
    import rejax

    env, env_params = gymnax.make(ENV_ID)
    algo = rejax.PPO.create(
        env=FiveTupleGymnaxEnv(env),
        env_params=env_params,
        num_envs=4,
        num_steps=128,
        num_epochs=4,
        num_minibatches=4,
        total_timesteps=total_timesteps,
        eval_freq=total_timesteps,  # one training segment, no periodic evaluation
        skip_initial_evaluation=True,
        normalize_observations=False,
        normalize_rewards=False,
        agent_kwargs={"activation": "tanh", "hidden_layer_sizes": (64, 64)},
        **HYPERS,
    )
    return algo.replace(eval_callback=_no_eval)


def rejax_train_fn(algo, batched: bool):
    return jax.vmap(algo.train) if batched else algo.train


def time_rejax(total_timesteps: int, key) -> dict:
    """Compile with ``jax.jit(...).lower(key).compile()`` (timed), then one timed execution."""
    algo = make_rejax(total_timesteps)
    batched = key.ndim == 1
    t0, c0 = time.perf_counter(), time.process_time()
    compiled = jax.jit(rejax_train_fn(algo, batched)).lower(key).compile()
    t1, c1 = time.perf_counter(), time.process_time()
    ts, _ = compiled(key)
    jax.block_until_ready(ts)
    t2, c2 = time.perf_counter(), time.process_time()
    seeds = key.shape[0] if batched else 1
    steps = int(np.sum(np.asarray(ts.global_step)))
    assert steps == seeds * (total_timesteps // ROLLOUT) * ROLLOUT, (steps, seeds, total_timesteps)
    return dict(
        compile=t1 - t0, run=t2 - t1, sps=steps / (t2 - t1), steps=steps, total=t2 - t0,
        compile_cpu=c1 - c0, run_cpu=c2 - c1, total_cpu=c2 - c0,
    )


class CpuSampler:
    """Samples (wall clock, process CPU time) every few ms in a background thread.

    `eqxrl.train` reports wall-clock phase durations only; with these samples
    the process CPU time spent in each phase can be read off afterwards. CPU
    time (all threads of this process) is far less sensitive than wall time to
    other work on a shared machine.
    """

    def __init__(self, period: float = 0.005):
        self.period = period
        self.samples: list[tuple[float, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.samples.append((time.perf_counter(), time.process_time()))
            self._stop.wait(self.period)

    def __enter__(self):
        self.samples.append((time.perf_counter(), time.process_time()))
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.samples.append((time.perf_counter(), time.process_time()))

    def cpu_between(self, t0: float, t1: float) -> float:
        wall, cpu = np.asarray(self.samples).T
        return float(np.interp(t1, wall, cpu) - np.interp(t0, wall, cpu))


# ============================================================================ eqxrl side
def make_eqxrl() -> PPO:
    return PPO(
        eqxrl.envs.make(ENV_ID),
        num_envs=4,
        rollout_length=128,
        num_epochs=4,
        num_minibatches=4,
        hidden_sizes=(64, 64),
        activation="tanh",
        grad_clip="value",
        anneal_lr=False,
        clip_value_loss=True,
        normalize_advantages=True,
        normalize_observations=False,
        **HYPERS,
    )


def time_eqxrl(total_timesteps: int, key, chunk_iterations: int | None = None) -> dict:
    """``eqxrl.train``'s own timings: AOT compile of the chunk, then the run of all chunks.

    CPU seconds per phase come from a `CpuSampler`: the run is the last
    `run_seconds` before `train` returned (only trivial host work follows it),
    the compile the `compile_seconds` before that.
    """
    agent = make_eqxrl()
    with CpuSampler() as cpu:
        t0 = time.perf_counter()
        state, _, info = eqxrl.train(
            agent, key, total_timesteps, progress=False, return_info=True, chunk_iterations=chunk_iterations
        )
        jax.block_until_ready(state)
        t3 = time.perf_counter()
    t2 = t3 - info.run_seconds
    t1 = t2 - info.compile_seconds
    seeds = key.shape[0] if key.ndim == 1 else 1
    steps = int(np.sum(np.asarray(state.env_steps)))
    assert steps == info.env_steps == seeds * (total_timesteps // ROLLOUT) * ROLLOUT, (steps, info.env_steps)
    return dict(
        compile=info.compile_seconds, run=info.run_seconds, sps=info.steps_per_second, steps=steps, total=t3 - t0,
        compile_cpu=cpu.cpu_between(t1, t2), run_cpu=cpu.cpu_between(t2, t3), total_cpu=cpu.cpu_between(t0, t3),
    )


# ============================================================================ checks
def _num_params(tree) -> int:
    return int(sum(np.size(x) for x in jax.tree.leaves(tree) if hasattr(x, "dtype") and jnp.issubdtype(x.dtype, jnp.inexact)))


def check_same_networks() -> str:
    """Both sides: (64, 64) tanh actor and critic with the same parameter counts."""
    import equinox as eqx
    from flax import linen as nn

    agent = make_eqxrl()
    es = agent.init(jax.random.key(0))
    e_actor = _num_params(eqx.filter(es.actor, eqx.is_inexact_array))
    e_critic = _num_params(eqx.filter(es.critic, eqx.is_inexact_array))

    algo = make_rejax(ROLLOUT)
    rs = algo.init_state(jax.random.key(0))
    r_actor = _num_params(rs.actor_ts.params)
    r_critic = _num_params(rs.critic_ts.params)
    assert algo.actor.activation is nn.tanh and algo.critic.activation is nn.tanh
    assert tuple(algo.actor.hidden_layer_sizes) == (64, 64) == tuple(agent.hidden_sizes)
    assert agent.activation == "tanh"
    assert (e_actor, e_critic) == (r_actor, r_critic), ((e_actor, e_critic), (r_actor, r_critic))
    assert (algo.num_envs, algo.num_steps, algo.num_epochs, algo.num_minibatches) == (
        agent.num_envs,
        agent.rollout_length,
        agent.num_epochs,
        agent.num_minibatches,
    )
    return f"actor {e_actor} / critic {e_critic} parameters on both sides, (64, 64) tanh"


# ============================================================================ returns
def final_returns(total_timesteps: int, num_seeds: int, key) -> dict:
    """Train both on ``num_seeds`` seeds in one program, evaluate 32 episodes per seed.

    Returns, per library and policy mode (greedy = argmax action, sampled =
    stochastic policy), the mean over seeds of the mean return, and the per-seed means.
    """
    from rejax.evaluate import evaluate as rejax_evaluate

    train_keys = jax.random.split(key, num_seeds)
    eval_key = jax.random.key(12345)
    out = {}

    # eqxrl
    agent = make_eqxrl()
    state, _ = eqxrl.train(agent, train_keys, total_timesteps, progress=False)
    for mode, det in (("greedy", True), ("sampled", False)):
        r = np.asarray(eqxrl.evaluate(agent, state, eval_key, num_episodes=32, deterministic=det))
        out[("eqxrl", mode)] = r.mean(axis=1)

    # rejax: its own evaluation utility (rejax.evaluate.evaluate, 32 episodes,
    # up to 500 steps), vmapped over the trained seeds; "sampled" uses rejax's
    # own `make_act`, "greedy" the argmax of the same actor's logits.
    algo = make_rejax(total_timesteps)
    ts, _ = jax.jit(jax.vmap(algo.train))(train_keys)
    env, params = algo.env, algo.env_params
    max_steps = params.max_steps_in_episode

    def greedy_act(ts):
        def act(obs, rng):
            logits = algo.actor.apply(
                ts.actor_ts.params, obs[None], method=lambda m, o: m.action_logits(m.features(o))
            )
            return jnp.argmax(logits[0])

        return act

    for mode, make_act in (("greedy", greedy_act), ("sampled", algo.make_act)):

        def one(ts, rng, make_act=make_act):
            _, returns = rejax_evaluate(make_act(ts), rng, env, params, 32, max_steps)
            return returns.mean()

        r = jax.jit(jax.vmap(one))(ts, jax.random.split(eval_key, num_seeds))
        out[("rejax", mode)] = np.asarray(r)
    return out


# ============================================================================ driver
def _median(runs: list[dict], k: str) -> float:
    return statistics.median(r[k] for r in runs)


def _fmt_s(x: float) -> str:
    return f"{x:.2f}"


def _fmt_sps(x: float) -> str:
    return f"{x:,.0f}"


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=5, help="timed runs per library and setting (median reported)")
    p.add_argument("--steps", type=int, default=2**19, help="env steps of a 1-seed run (rounded down to x512)")
    p.add_argument("--seeds", type=int, default=32, help="seeds in the batched run")
    p.add_argument("--seed-steps", type=int, default=2**16, help="env steps per seed in the batched run")
    p.add_argument("--return-seeds", type=int, default=8, help="seeds for the final-return comparison")
    p.add_argument("--return-steps", type=int, default=None, help="env steps per seed there (default: --steps)")
    p.add_argument(
        "--eqxrl-chunk-iterations",
        type=int,
        default=None,
        help="passed to eqxrl.train(chunk_iterations=...); default: eqxrl's own (about 50 chunks per run)",
    )
    p.add_argument("--no-returns", action="store_true", help="skip the final-return comparison")
    p.add_argument("--quick", action="store_true", help="smoke test (< 2 min): 1 run, few steps, few seeds")
    p.add_argument(
        "--out",
        type=Path,
        default=Path(__file__).resolve().parent / "results" / "ppo_cartpole.md",
        help="where to write the Markdown table ('-' for nowhere)",
    )
    a = p.parse_args(argv)
    if a.quick:
        a.runs, a.steps, a.seeds, a.seed_steps = 1, 2**14, 4, 2**12
        a.return_seeds, a.return_steps = 2, 2**13
    if a.return_steps is None:
        a.return_steps = a.steps
    for name in ("steps", "seed_steps", "return_steps"):
        v = getattr(a, name) // ROLLOUT * ROLLOUT
        if v < ROLLOUT:
            p.error(f"--{name.replace('_', '-')} must be at least {ROLLOUT}")
        setattr(a, name, v)

    t_start = time.perf_counter()
    print(f"jax {jax.__version__} on {jax.default_backend()}, {os.cpu_count()} CPUs", flush=True)
    net = check_same_networks()
    print(f"networks: {net}", flush=True)

    settings = [("1 seed", a.steps, jax.random.key(0)), (f"{a.seeds} seeds", a.seed_steps, jax.random.split(jax.random.key(0), a.seeds))]
    results = {(s, lib): [] for s, _, _ in settings for lib in ("eqxrl", "rejax")}
    for r in range(a.runs):
        for name, steps, key in settings:
            run_eqxrl = lambda n, k: time_eqxrl(n, k, a.eqxrl_chunk_iterations)  # noqa: E731
            for lib, fn in (("eqxrl", run_eqxrl), ("rejax", time_rejax)):
                # Fresh in-memory caches: every run compiles from scratch.
                jax.clear_caches()
                gc.collect()
                res = fn(steps, key)
                results[(name, lib)].append(res)
                print(
                    f"run {r + 1}/{a.runs} {name:>9} {lib}: compile {res['compile']:.2f} s, "
                    f"run {res['run']:.2f} s, {res['sps']:,.0f} steps/s ({res['steps']:,} steps); CPU s: "
                    f"compile {res['compile_cpu']:.2f}, run {res['run_cpu']:.2f}, total {res['total_cpu']:.2f}",
                    flush=True,
                )

    returns = None
    if not a.no_returns:
        jax.clear_caches()
        t0 = time.perf_counter()
        returns = final_returns(a.return_steps, a.return_seeds, jax.random.key(7))
        print(f"final returns ({time.perf_counter() - t0:.0f} s):", {k: float(v.mean()) for k, v in returns.items()}, flush=True)

    elapsed = time.perf_counter() - t_start
    md = render(a, settings, results, returns, net, elapsed)
    print()
    print(md)
    if str(a.out) != "-":
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(md)
        print(f"wrote {a.out}")


def _versions() -> str:
    from importlib.metadata import version

    return ", ".join(f"{m} {version(m)}" for m in ("jax", "jaxlib", "equinox", "optax", "gymnax", "rejax", "flax"))


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def render(a, settings, results, returns, net, elapsed) -> str:
    lines = [
        "# PPO on gymnax CartPole-v1: eqxrl vs rejax",
        "",
        f"- date: {datetime.date.today().isoformat()}",
        f"- versions: {_versions()}, Python {platform.python_version()}; eqxrl at {_git_rev()}",
        f"- machine: {jax.default_backend()} backend, nproc = {_nproc()} ({_cpu_model()}); shared machine, timings are noisy",
        f"- command: `python benchmarks/{Path(__file__).name} {' '.join(sys.argv[1:])}`".rstrip(),
        f"- wall time of the whole benchmark: {elapsed / 60:.1f} min",
        f"- config: 4 envs x 128 steps, 4 epochs x 4 minibatches, lr 2.5e-4 constant, per-element grad clip 0.5, "
        f"gamma 0.99, GAE 0.95, clip 0.2, ent 0.01, vf 0.5; networks: {net}; "
        "eqxrl `PPO(grad_clip=\"value\", anneal_lr=False)`; rejax periodic evaluation disabled "
        "(`eval_freq=total_timesteps`, `skip_initial_evaluation=True`, no-op `eval_callback`)",
        f"- medians of {a.runs} run(s) per cell, runs interleaved eqxrl, rejax, eqxrl, rejax, ...; "
        "in-memory JAX caches cleared before every run",
        "",
        "Ratios are eqxrl / rejax. For times (s) below 1 means eqxrl is faster; for throughputs "
        "(steps/s) above 1 means eqxrl is faster.",
        "",
        "| setting | metric | eqxrl | rejax | eqxrl / rejax |",
        "|---|---|---:|---:|---:|",
    ]
    rows = [
        # (label, value of one run, formatter)
        ("compile, wall (s)", lambda x: x["compile"], _fmt_s),
        ("env steps/s after compile, wall", lambda x: x["sps"], _fmt_sps),
        ("compile, process CPU (s)", lambda x: x["compile_cpu"], _fmt_s),
        ("env steps per process-CPU second", lambda x: x["steps"] / x["run_cpu"], _fmt_sps),
        ("setup = end to end - execution, wall (s)", lambda x: x["total"] - x["run"], _fmt_s),
        ("end to end, wall (s)", lambda x: x["total"], _fmt_s),
        ("end to end, process CPU (s)", lambda x: x["total_cpu"], _fmt_s),
    ]
    for name, steps, key in settings:
        e, r = results[(name, "eqxrl")], results[(name, "rejax")]
        label = f"{name} x {steps:,} steps ({e[0]['steps']:,} in all)"
        for i, (metric, get, fmt) in enumerate(rows):
            em = statistics.median(get(x) for x in e)
            rm = statistics.median(get(x) for x in r)
            bold = "**" if i < 2 else ""
            lines.append(
                f"| {label if i == 0 else ''} | {bold}{metric}{bold} | {bold}{fmt(em)}{bold} | {bold}{fmt(rm)}{bold} | "
                f"{bold}{em / rm:.2f}{bold} |"
            )
    lines += [
        "",
        "- **compile, wall**: trace + lower + XLA compile of the training program. eqxrl: "
        "`TrainInfo.compile_seconds`, the AOT compile of one chunk (its `init` is a separate jitted "
        "program, compiled before and not counted there); rejax: `jax.jit(train).lower(key).compile()`, "
        "a program that includes `init_state`.",
        "- **env steps/s after compile, wall**: env steps / execution time. eqxrl: "
        f"`TrainInfo.steps_per_second`, all chunks (chunk_iterations={a.eqxrl_chunk_iterations or 'default, ~50 chunks'}) "
        "including the host round trips between them; "
        "rejax: one call of the compiled program, until the result is ready.",
        "- **process CPU**: CPU seconds of this process (all threads) over the same phases "
        "(eqxrl's phases located with a 5 ms sampler around `eqxrl.train`). Far less sensitive than "
        "wall time to other load on a shared machine; the steadier basis for comparison here.",
        "- **setup**: everything in a run but the execution. eqxrl: the `init` compile plus the chunk "
        "compile (plus host work); rejax: the compile.",
        "",
        "Per-run values (compile wall s / steps/s wall / steps per CPU-s):",
        "",
    ]
    for name, _, _ in settings:
        for lib in ("eqxrl", "rejax"):
            vals = ", ".join(
                f"{x['compile']:.2f} / {x['sps']:,.0f} / {x['steps'] / x['run_cpu']:,.0f}" for x in results[(name, lib)]
            )
            lines.append(f"- {name}, {lib}: {vals}")
    if returns is not None:
        lines += [
            "",
            f"## Final evaluation return ({a.return_seeds} seeds x {a.return_steps:,} env steps, one program per library)",
            "",
            "Mean over seeds of each seed's mean return over 32 evaluation episodes (max 500). "
            "eqxrl: `eqxrl.evaluate(..., num_episodes=32)`; rejax: `rejax.evaluate.evaluate` (32 episodes) "
            "vmapped over the seeds. greedy = argmax action, sampled = actions drawn from the policy "
            "(rejax's own `make_act`).",
            "",
            "| library | greedy mean | greedy min seed | sampled mean | sampled min seed |",
            "|---|---:|---:|---:|---:|",
        ]
        for lib in ("eqxrl", "rejax"):
            g, s = returns[(lib, "greedy")], returns[(lib, "sampled")]
            lines.append(f"| {lib} | {g.mean():.1f} | {g.min():.1f} | {s.mean():.1f} | {s.min():.1f} |")
        lines += [""]
        for lib in ("eqxrl", "rejax"):
            for mode in ("greedy", "sampled"):
                per = ", ".join(f"{x:.0f}" for x in returns[(lib, mode)])
                lines.append(f"- {lib} {mode} per seed: {per}")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
