"""PPO on gymnax CartPole-v1: eqxrl versus rejax (and PureJaxRL), at identical hyperparameters.

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
nothing numerically). eqxrl's `train` compiles an `init` program and the
training chunk (concurrently) and, timed here without a progress bar, runs the
whole training as one chunk (with a bar: ~50 chunks and a host round trip
between them); rejax compiles and runs one program.

The rejax side is ``peers/rejax_adapter.py``.

PureJaxRL (``--purejaxrl DIR``)
-------------------------------
With ``--purejaxrl DIR`` (a checkout of https://github.com/luchris429/purejaxrl, e.g. ``git clone
https://github.com/luchris429/purejaxrl DIR``; measured at commit 31756b1) the script also times
PureJaxRL's own ``purejaxrl/ppo.py`` (``peers/purejaxrl_adapter.py``) against a second eqxrl arm set to
PureJaxRL's configuration as its ``ppo.py`` gives it: gradients clipped by global norm 0.5 and the
learning rate annealed linearly to 0 (eqxrl: ``grad_clip="global_norm"``, ``anneal_lr=True``); every
other setting is the one above. PureJaxRL is timed as its README runs it (``jax.jit(make_train(config))``,
vmapped over the keys for a batch of seeds), compiled ahead of time; its deliberate differences are
rejax's (truncation treated as termination; one ``ActorCritic`` module with separate actor and critic
MLPs, one optimizer). The four arms run interleaved: eqxrl, rejax, eqxrl (PureJaxRL's settings),
PureJaxRL.
"""

from __future__ import annotations

import jax
import numpy as np

import eqxrl
from _common import fresh_caches, num_params, time_train
from _report import Metric, Report, compare, parser, table
from eqxrl.agents import PPO

ENV_ID = "CartPole-v1"
ROLLOUT = 4 * 128  # num_envs * num_steps: env steps per iteration, both libraries
RETURN_EPISODES = 32

HYPERS = dict(
    learning_rate=2.5e-4,
    gamma=0.99,
    gae_lambda=0.95,
    clip_eps=0.2,
    ent_coef=0.01,
    vf_coef=0.5,
    max_grad_norm=0.5,
)
SHAPE = dict(num_envs=4, num_epochs=4, num_minibatches=4)  # and 128 steps per rollout


def set_shape(num_envs: int, num_minibatches: int) -> None:
    """Another rollout shape for both libraries (``--num-envs``, ``--num-minibatches``; ``gpu_scale.py``
    runs 2048 envs): every function here reads `SHAPE` and `ROLLOUT` when it runs."""
    global ROLLOUT
    SHAPE.update(num_envs=num_envs, num_minibatches=num_minibatches)
    ROLLOUT = num_envs * 128


# How each peer clips gradients and schedules the learning rate, in eqxrl's terms.
PEER_SETTINGS = {
    "rejax": dict(grad_clip="value", anneal_lr=False),
    "purejaxrl": dict(grad_clip="global_norm", anneal_lr=True),
}


def make_eqxrl(peer: str = "rejax") -> PPO:
    """eqxrl's PPO with the configuration of the comparison against `peer`."""
    return PPO(
        eqxrl.envs.make(ENV_ID), rollout_length=128, hidden_sizes=(64, 64), activation="tanh",
        clip_value_loss=True, normalize_advantages=True, normalize_observations=False,
        **PEER_SETTINGS[peer], **SHAPE, **HYPERS,
    )  # fmt: skip


def make_rejax(total_timesteps: int):
    from peers import rejax_adapter

    return rejax_adapter.create(
        "PPO", ENV_ID, total_timesteps, num_steps=128, normalize_observations=False, normalize_rewards=False,
        agent_kwargs={"activation": "tanh", "hidden_layer_sizes": (64, 64)}, **SHAPE, **HYPERS,
    )  # fmt: skip


def _expected_steps(total_timesteps: int, key) -> int:
    return (key.shape[0] if key.ndim == 1 else 1) * (total_timesteps // ROLLOUT) * ROLLOUT


def _peer_timings(out: dict, total_timesteps: int, key) -> dict:
    """A peer's timings with its env steps checked and its steps per second added."""
    assert out["steps"] == _expected_steps(total_timesteps, key), (out["steps"], total_timesteps)
    out["sps"] = out["steps"] / out["run"]
    return out


def time_rejax(total_timesteps: int, key) -> dict:
    """Compile with ``jax.jit(...).lower(key).compile()`` (timed), then one timed execution."""
    from peers import rejax_adapter

    _, out = rejax_adapter.time_train(make_rejax(total_timesteps), key)
    return _peer_timings(out, total_timesteps, key)


def time_eqxrl(total_timesteps: int, key, chunk_iterations: int | None = None, peer: str = "rejax") -> dict:
    """``eqxrl.train``'s own timings: AOT compile of the chunk, then the run of all chunks."""
    state, info, out = time_train(make_eqxrl(peer), key, total_timesteps, chunk_iterations=chunk_iterations)
    out["steps"] = int(np.sum(np.asarray(state.env_steps)))
    assert out["steps"] == info.env_steps == _expected_steps(total_timesteps, key), (out["steps"], info.env_steps)
    out["sps"] = info.steps_per_second
    return out


def purejaxrl_config(total_timesteps: int) -> dict:
    from peers import purejaxrl_adapter

    return purejaxrl_adapter.config(ENV_ID, total_timesteps, **SHAPE, **HYPERS)


def time_purejaxrl(module, total_timesteps: int, key) -> dict:
    """Compile ``jax.jit(make_train(config))`` (vmapped for a batch of keys) ahead of time (timed), then
    one timed execution."""
    from peers import purejaxrl_adapter

    _, out = purejaxrl_adapter.time_train(module, purejaxrl_config(total_timesteps), key)
    return _peer_timings(out, total_timesteps, key)


def _eqxrl_param_counts(agent: PPO) -> tuple[int, int]:
    """``(actor, critic)`` parameter counts of `agent`'s initial state (shapes only)."""
    import equinox as eqx

    es = eqx.filter_eval_shape(agent.init, jax.random.key(0))
    return num_params(es.actor), num_params(es.critic)


def check_purejaxrl_networks(module) -> None:
    """PureJaxRL's ``ActorCritic`` has the parameter counts of eqxrl's actor and critic."""
    from peers import purejaxrl_adapter

    counts = _eqxrl_param_counts(make_eqxrl("purejaxrl"))
    assert counts == purejaxrl_adapter.param_counts(module, ENV_ID), counts


def check_same_networks() -> str:
    """Both sides: (64, 64) tanh actor and critic with the same parameter counts."""
    from flax import linen as nn

    from peers import rejax_adapter

    agent = make_eqxrl()
    counts = _eqxrl_param_counts(agent)
    algo = make_rejax(ROLLOUT)
    assert algo.actor.activation is nn.tanh and algo.critic.activation is nn.tanh
    assert tuple(algo.actor.hidden_layer_sizes) == (64, 64) == tuple(agent.hidden_sizes)
    assert agent.activation == "tanh"
    assert counts == rejax_adapter.ppo_param_counts(algo), (counts, rejax_adapter.ppo_param_counts(algo))
    assert (algo.num_envs, algo.num_steps, algo.num_epochs, algo.num_minibatches) == (
        agent.num_envs, agent.rollout_length, agent.num_epochs, agent.num_minibatches,
    )  # fmt: skip
    return f"actor {counts[0]} / critic {counts[1]} parameters on both sides, (64, 64) tanh"


def _eqxrl_returns(peer: str, total_timesteps: int, train_keys, eval_key) -> dict[str, np.ndarray]:
    """eqxrl at `peer`'s settings trained on every key in one program: each seed's mean return over
    the evaluation episodes, greedy and sampled."""
    agent = make_eqxrl(peer)
    state, _ = eqxrl.train(agent, train_keys, total_timesteps, progress=False)
    out = {}
    for mode, det in (("greedy", True), ("sampled", False)):
        r = np.asarray(eqxrl.evaluate(agent, state, eval_key, num_episodes=RETURN_EPISODES, deterministic=det))
        out[mode] = r.mean(axis=1)
    return out


def final_returns(total_timesteps: int, num_seeds: int, key, purejaxrl=None) -> dict:
    """Train each library on ``num_seeds`` seeds in one program, evaluate 32 episodes per seed.

    Returns, per library and policy mode (greedy = argmax action, sampled = stochastic policy), the
    per-seed mean returns. rejax: its own evaluation utility (``rejax.evaluate.evaluate``, up to 500
    steps), vmapped over the trained seeds.
    """
    from peers import rejax_adapter

    train_keys = jax.random.split(key, num_seeds)
    eval_key = jax.random.key(12345)
    out = {("eqxrl", mode): r for mode, r in _eqxrl_returns("rejax", total_timesteps, train_keys, eval_key).items()}
    rejax = rejax_adapter.ppo_returns(make_rejax(total_timesteps), train_keys, eval_key, RETURN_EPISODES)
    out.update({("rejax", mode): r for mode, r in rejax.items()})
    if purejaxrl is not None:
        from peers import purejaxrl_adapter

        mine = _eqxrl_returns("purejaxrl", total_timesteps, train_keys, eval_key)
        out.update({("eqxrl-pjr", mode): r for mode, r in mine.items()})
        cfg = purejaxrl_config(total_timesteps)
        pj = purejaxrl_adapter.returns(purejaxrl, cfg, train_keys, eval_key, RETURN_EPISODES)
        out.update({("purejaxrl", mode): r for mode, r in pj.items()})
    return out


# ============================================================================ driver
# The compared pairs: (eqxrl's side, the peer) and their labels in the report.
PAIRS = {"rejax": ("eqxrl", "rejax"), "purejaxrl": ("eqxrl-pjr", "purejaxrl")}
LABELS = {"eqxrl": "eqxrl", "rejax": "rejax", "eqxrl-pjr": "eqxrl (PureJaxRL's settings)", "purejaxrl": "PureJaxRL"}
METRICS = [
    Metric("compile, wall (s)", lambda x: x["compile"], higher=False, bold=True),
    Metric("env steps/s after compile, wall", lambda x: x["sps"], "{:,.0f}", bold=True),
    Metric("compile, process CPU (s)", lambda x: x["compile_cpu"], higher=False),
    Metric("env steps per process-CPU second", lambda x: x["steps"] / x["run_cpu"], "{:,.0f}"),
    Metric("setup = end to end - execution, wall (s)", lambda x: x["total"] - x["run"], higher=False),
    Metric("end to end, wall (s)", lambda x: x["total"], higher=False),
    Metric("end to end, process CPU (s)", lambda x: x["total_cpu"], higher=False),
]


def main(argv=None) -> None:
    p = parser(__doc__, "ppo_cartpole", runs=5, quick="smoke test (< 2 min): 1 run, few steps, few seeds")
    p.add_argument("--steps", type=int, default=2**19, help="env steps of a 1-seed run (rounded down to x512)")
    p.add_argument("--seeds", type=int, default=32, help="seeds in the batched run")
    p.add_argument("--seed-steps", type=int, default=2**16, help="env steps per seed in the batched run")
    p.add_argument("--return-seeds", type=int, default=8, help="seeds for the final-return comparison")
    p.add_argument("--return-steps", type=int, default=None, help="env steps per seed there (default: --steps)")
    p.add_argument(
        "--eqxrl-chunk-iterations", type=int, default=None,
        help="passed to eqxrl.train(chunk_iterations=...); default: eqxrl's own (one chunk without a progress bar)",
    )  # fmt: skip
    p.add_argument("--no-returns", action="store_true", help="skip the final-return comparison")
    p.add_argument("--num-envs", type=int, default=4, help="envs per seed on both sides (PureJaxRL's config: 4)")
    p.add_argument("--num-minibatches", type=int, default=4, help="minibatches per epoch on both sides")
    p.add_argument(
        "--purejaxrl", metavar="DIR", default=None,
        help="a checkout of github.com/luchris429/purejaxrl: also compare against its purejaxrl/ppo.py",
    )  # fmt: skip
    a = p.parse_args(argv)
    if a.num_envs < 1 or a.num_minibatches < 1 or (a.num_envs * 128) % a.num_minibatches:
        p.error("--num-envs and --num-minibatches must be >= 1, with num_envs * 128 divisible by num_minibatches")
    set_shape(a.num_envs, a.num_minibatches)
    report = Report(__file__, argv)
    if a.quick:
        # (4 seeds x 2^16 steps, not fewer: PureJaxRL's vmapped program at 2-4 seeds x 4k-16k steps never
        # finishes under jax 0.10.2's XLA:CPU; see peers/purejaxrl_adapter.py)
        a.runs, a.steps, a.seeds, a.seed_steps = 1, 2**14, 4, 2**16
        a.return_seeds, a.return_steps = 4, 2**16
    if a.return_steps is None:
        a.return_steps = a.steps
    for name in ("steps", "seed_steps", "return_steps"):
        v = getattr(a, name) // ROLLOUT * ROLLOUT
        if v < ROLLOUT:
            p.error(f"--{name.replace('_', '-')} must be at least {ROLLOUT}")
        setattr(a, name, v)

    net = check_same_networks()
    print(f"networks: {net}", flush=True)
    purejaxrl = None
    if a.purejaxrl is not None:
        from peers import purejaxrl_adapter

        try:
            purejaxrl = purejaxrl_adapter.load(a.purejaxrl)
        except FileNotFoundError as e:
            p.error(str(e))
        check_purejaxrl_networks(purejaxrl)
    a.peers = ("rejax",) + (("purejaxrl",) if purejaxrl is not None else ())
    settings = [
        ("1 seed", a.steps, jax.random.key(0)),
        (f"{a.seeds} seeds", a.seed_steps, jax.random.split(jax.random.key(0), a.seeds)),
    ]
    sides = {
        "eqxrl": lambda n, k: time_eqxrl(n, k, a.eqxrl_chunk_iterations),
        "rejax": time_rejax,
        "eqxrl-pjr": lambda n, k: time_eqxrl(n, k, a.eqxrl_chunk_iterations, peer="purejaxrl"),
        "purejaxrl": lambda n, k: time_purejaxrl(purejaxrl, n, k),
    }
    sides = {lib: sides[lib] for peer in a.peers for lib in PAIRS[peer]}
    results = {(s, lib): [] for s, _, _ in settings for lib in sides}
    for r in range(a.runs):
        for name, steps, key in settings:
            for lib, fn in sides.items():
                fresh_caches()  # every run compiles from scratch
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
        fresh_caches()
        returns = final_returns(a.return_steps, a.return_seeds, jax.random.key(7), purejaxrl)
        print("final returns:", {k: float(v.mean()) for k, v in returns.items()}, flush=True)
    report.emit(render(report, a, settings, results, returns, net), a.out)


def render(report, a, settings, results, returns, net) -> str:
    pj = "purejaxrl" in a.peers
    title = "PPO on gymnax CartPole-v1: eqxrl vs rejax" + (" and PureJaxRL" if pj else "")
    lines = report.header(title, packages=("rejax", "flax") + (("distrax",) if pj else ()))
    lines += [
        f"- config: {SHAPE['num_envs']} envs x 128 steps, 4 epochs x {SHAPE['num_minibatches']} minibatches, lr 2.5e-4 constant, per-element grad clip 0.5, "
        f"gamma 0.99, GAE 0.95, clip 0.2, ent 0.01, vf 0.5; networks: {net}; "
        "eqxrl `PPO(grad_clip=\"value\", anneal_lr=False)`; rejax periodic evaluation disabled "
        "(`eval_freq=total_timesteps`, `skip_initial_evaluation=True`, no-op `eval_callback`)",
    ]
    if pj:
        lines.append(
            "- PureJaxRL: its `purejaxrl/ppo.py` at the same settings but its own clipping and schedule (global-norm "
            "clip 0.5, learning rate annealed linearly to 0), against eqxrl at those two settings "
            "(`PPO(grad_clip=\"global_norm\", anneal_lr=True)`, the same networks); "
            f"checkout {a.purejaxrl}, see `peers/purejaxrl_adapter.py`"
        )
    order = ", ".join(LABELS[lib] for peer in a.peers for lib in PAIRS[peer])
    lines += [
        f"- medians of {a.runs} run(s) per cell, runs interleaved {order}, ...; "
        "in-memory JAX caches cleared before every run",
        "",
        "Ratios are eqxrl / peer. For times (s) below 1 means eqxrl is faster; for throughputs "
        "(steps/s) above 1 means eqxrl is faster.",
        "",
    ]
    for peer in a.peers:
        mine, theirs = PAIRS[peer]
        if len(a.peers) > 1:
            lines += [f"### {LABELS[mine]} vs {LABELS[theirs]}", ""]
        rows = []
        for name, steps, _ in settings:
            e, r = results[(name, mine)], results[(name, theirs)]
            rows += compare(METRICS, e, r, group=f"{name} x {steps:,} steps ({e[0]['steps']:,} in all)")
        heads = ["setting", "metric", LABELS[mine], LABELS[theirs], f"eqxrl / {LABELS[theirs]}"]
        lines += table(heads, rows, "llrrr") + [""]
    lines += [
        "- **compile, wall**: trace + lower + XLA compile of the training program. eqxrl: "
        "`TrainInfo.compile_seconds`, the AOT compile of the chunk and of its `init` program "
        "(compiled concurrently); rejax: `jax.jit(train).lower(key).compile()`, "
        "a program that includes `init_state`"
        + ("; PureJaxRL: `jax.jit(make_train(config)).lower(key).compile()`, its network and env "
           "initialisation included." if pj else "."),
        "- **env steps/s after compile, wall**: env steps / execution time. eqxrl: "
        f"`TrainInfo.steps_per_second`, all chunks (chunk_iterations={a.eqxrl_chunk_iterations or 'default: one chunk without a progress bar'}) "
        "including the host round trips between them; "
        "rejax" + (" and PureJaxRL" if pj else "") + ": one call of the compiled program, until the result is ready.",
        "- **process CPU**: CPU seconds of this process (all threads) over the same phases "
        "(eqxrl's phases located with a 5 ms sampler around `eqxrl.train`). Far less sensitive than "
        "wall time to other load on a shared machine; the steadier basis for comparison here.",
        "- **setup**: everything in a run but the execution. eqxrl: the `init` compile plus the chunk "
        "compile (plus host work); the peers: the compile.",
        "",
        "Per-run values (compile wall s / steps/s wall / steps per CPU-s):",
        "",
    ]
    sides = [lib for peer in a.peers for lib in PAIRS[peer]]
    for name, _, _ in settings:
        for lib in sides:
            vals = ", ".join(
                f"{x['compile']:.2f} / {x['sps']:,.0f} / {x['steps'] / x['run_cpu']:,.0f}" for x in results[(name, lib)]
            )
            lines.append(f"- {name}, {LABELS[lib]}: {vals}")
    if returns is not None:
        lines += [
            "",
            f"## Final evaluation return ({a.return_seeds} seeds x {a.return_steps:,} env steps, one program per library)",
            "",
            f"Mean over seeds of each seed's mean return over {RETURN_EPISODES} evaluation episodes (max 500). "
            f"eqxrl: `eqxrl.evaluate(..., num_episodes={RETURN_EPISODES})`; rejax: `rejax.evaluate.evaluate` "
            f"({RETURN_EPISODES} episodes) vmapped over the seeds"
            + ("; PureJaxRL: the same episode loop (`rejax.evaluate.evaluate`) with its `ActorCritic`" if pj else "")
            + ". greedy = argmax action, sampled = actions drawn from the policy (rejax's own `make_act`"
            + ("; PureJaxRL: its `distrax.Categorical`" if pj else "") + ").",
            "",
        ]
        rows = []
        for lib in sides:
            g, s = returns[(lib, "greedy")], returns[(lib, "sampled")]
            rows.append([LABELS[lib], f"{g.mean():.1f}", f"{g.min():.1f}", f"{s.mean():.1f}", f"{s.min():.1f}"])
        lines += table(["library", "greedy mean", "greedy min seed", "sampled mean", "sampled min seed"], rows)
        lines += [""]
        for lib in sides:
            for mode in ("greedy", "sampled"):
                per = ", ".join(f"{x:.0f}" for x in returns[(lib, mode)])
                lines.append(f"- {LABELS[lib]} {mode} per seed: {per}")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
