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
prototype fixes) and of compile-time variants. The tables are printed and
written to ``benchmarks/results/offpolicy_throughput.md``.

Matching the libraries
----------------------
Every pair uses the peer's configuration, copied field by field into eqxrl's
(see ``CONFIGS``; ``check_same_networks`` asserts equal parameter counts):

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
  programs, execution = their runs. brax 0.14.2 calls ``jax.device_put_replicated``, which jax 0.10 no
  longer has; a replacement (one stacked copy per device) is installed for the
  duration of the call only.
- Process CPU seconds (all threads) are recorded for the same phases; on a
  shared machine they are far steadier than wall time.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import functools
import gc
import math
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

import eqxrl
from eqxrl.agents import DQN, SAC, TD3

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ppo_cartpole import CpuSampler, FiveTupleGymnaxEnv, _cpu_model, _git_rev, _no_eval, _nproc  # noqa: E402

EVAL_EPISODES = 16

# ============================================================================ configurations
# The peer's configuration, in the peer's terms; `make_eqxrl_*` translates it.
CONFIGS = {
    # rejax configs/gymnax/pendulum.yaml, `sac`
    "sac": dict(
        env="Pendulum-v1", num_envs=1, buffer_size=10_000, fill_buffer=256, batch_size=256, learning_rate=0.01,
        num_epochs=1, gamma=0.99, polyak=0.98, normalize_observations=True, hidden=(64, 64), activation="swish",
    ),
    # rejax configs/gymnax/pendulum.yaml, `td3`
    "td3": dict(
        env="Pendulum-v1", num_envs=1, buffer_size=10_000, fill_buffer=1_000, batch_size=100, learning_rate=1e-3,
        num_epochs=1, gamma=0.99, polyak=0.95, max_grad_norm=100.0, exploration_noise=0.3, target_noise=0.2,
        target_noise_clip=0.5, policy_delay=2, normalize_observations=True, hidden=(64, 64), activation="swish",
    ),
    # rejax configs/gymnax/cartpole.yaml, `dqn` (but rejax's plain QNetwork, see the docstring)
    "dqn": dict(
        env="CartPole-v1", num_envs=10, buffer_size=50_000, fill_buffer=5_000, batch_size=100, max_grad_norm=10.0,
        learning_rate=1e-3, num_epochs=5, polyak=0.98, eps_start=1.0, eps_end=0.05, exploration_fraction=0.5,
        gamma=0.99, ddqn=True, normalize_observations=False, hidden=(64, 64), activation="swish",
    ),
    # brax.training.agents.sac.train keywords; network: brax's default (256, 256) relu
    "brax": dict(
        env="inverted_pendulum", episode_length=1000, num_envs=64, grad_updates_per_step=16, batch_size=256,
        learning_rate=1e-3, discounting=0.99, reward_scaling=1.0, tau=0.005, min_replay_size=1024,
        max_replay_size=100_000, normalize_observations=True, hidden=(256, 256), activation="relu",
    ),
}

PAIR_NAMES = {
    "sac": ("SAC", "Pendulum-v1", "rejax"),
    "td3": ("TD3", "Pendulum-v1", "rejax"),
    "dqn": ("DQN", "CartPole-v1", "rejax"),
    "brax": ("SAC", "brax/inverted_pendulum", "brax"),
}

# Env-step budgets per run: (default, --quick). rejax's configs train SAC and
# TD3 on Pendulum for 10k steps and DQN on CartPole for 100k.
BUDGETS = {
    "sac": (10_000, 2_000),
    "td3": (10_000, 2_000),
    "dqn": (100_000, 10_000),
    "brax": (32_768, 4_096),
}


def iteration_steps(pair: str) -> int:
    """Env steps of one iteration, a common multiple of both libraries' iterations."""
    c = CONFIGS[pair]
    if pair == "td3":
        return c["num_envs"] * c["policy_delay"]
    return c["num_envs"]


# ============================================================================ eqxrl side
def make_eqxrl(pair: str, brax_backend: str = "generalized"):
    c = CONFIGS[pair]
    if pair == "sac":
        return SAC(
            c["env"], num_envs=c["num_envs"], rollout_length=1,
            updates_per_step=c["num_epochs"] / c["num_envs"], batch_size=c["batch_size"],
            buffer_size=c["buffer_size"], learning_starts=c["fill_buffer"],
            hidden_sizes=c["hidden"], activation=c["activation"],
            actor_learning_rate=c["learning_rate"], critic_learning_rate=c["learning_rate"],
            alpha_learning_rate=c["learning_rate"], gamma=c["gamma"], tau=1.0 - c["polyak"],
            init_alpha=1.0, target_entropy_scale=1.0, normalize_observations=c["normalize_observations"],
        )
    if pair == "td3":
        env = eqxrl.envs.make(c["env"])
        half_range = float(np.max(np.asarray(env.action_space.high) - np.asarray(env.action_space.low))) / 2.0
        return TD3(
            env, num_envs=c["num_envs"], rollout_length=1,
            updates_per_step=c["num_epochs"] / c["num_envs"], batch_size=c["batch_size"],
            buffer_size=c["buffer_size"], learning_starts=c["fill_buffer"] + c["num_envs"],
            policy_delay=c["policy_delay"], hidden_sizes=c["hidden"], activation=c["activation"],
            actor_learning_rate=c["learning_rate"], critic_learning_rate=c["learning_rate"],
            gamma=c["gamma"], tau=1.0 - c["polyak"], max_grad_norm=c["max_grad_norm"],
            exploration_noise=c["exploration_noise"] / half_range, target_noise=c["target_noise"] / half_range,
            target_noise_clip=c["target_noise_clip"] / half_range,
            normalize_observations=c["normalize_observations"],
        )
    if pair == "dqn":
        return DQN(
            c["env"], num_envs=c["num_envs"], rollout_length=1,
            updates_per_step=c["num_epochs"] / c["num_envs"], batch_size=c["batch_size"],
            buffer_size=c["buffer_size"], learning_starts=c["fill_buffer"] + c["num_envs"],
            double=c["ddqn"], loss="mse", target_update_period=c["num_epochs"], tau=1.0 - c["polyak"],
            hidden_sizes=c["hidden"], activation=c["activation"], learning_rate=c["learning_rate"],
            gamma=c["gamma"], eps_start=c["eps_start"], eps_end=c["eps_end"],
            exploration_fraction=c["exploration_fraction"], max_grad_norm=c["max_grad_norm"],
            normalize_observations=c["normalize_observations"],
        )
    if pair == "brax":
        env = eqxrl.envs.make("brax/" + c["env"], backend=brax_backend, episode_length=c["episode_length"])
        return SAC(
            env, num_envs=c["num_envs"], rollout_length=1,
            updates_per_step=c["grad_updates_per_step"] / c["num_envs"], batch_size=c["batch_size"],
            buffer_size=c["max_replay_size"], learning_starts=c["min_replay_size"],
            hidden_sizes=c["hidden"], activation=c["activation"],
            actor_learning_rate=c["learning_rate"], critic_learning_rate=c["learning_rate"],
            alpha_learning_rate=3e-4, gamma=c["discounting"], tau=c["tau"], reward_scale=c["reward_scaling"],
            init_alpha=1.0, target_entropy_scale=0.5, normalize_observations=c["normalize_observations"],
        )
    raise ValueError(pair)


def time_eqxrl(pair: str, total_steps: int, seed: int, brax_backend: str) -> dict:
    agent = make_eqxrl(pair, brax_backend)
    key = jax.random.key(seed)
    with CpuSampler() as cpu:
        t0 = time.perf_counter()
        state, _, info = eqxrl.train(agent, key, total_steps, progress=False, return_info=True)
        jax.block_until_ready(state)
        t3 = time.perf_counter()
    t2 = t3 - info.run_seconds
    t1 = t2 - info.compile_seconds
    steps = int(state.env_steps)
    updates = int(state.updates)
    assert steps == info.env_steps == total_steps, (steps, info.env_steps, total_steps)
    returns = eqxrl.evaluate(agent, state, jax.random.key(10_000 + seed), num_episodes=EVAL_EPISODES)
    return dict(
        compile=info.compile_seconds, run=info.run_seconds, steps=steps, updates=updates, total=t3 - t0,
        compile_cpu=cpu.cpu_between(t1, t2), run_cpu=cpu.cpu_between(t2, t3), total_cpu=cpu.cpu_between(t0, t3),
        ret=float(np.mean(np.asarray(returns))),
    )


# ============================================================================ rejax side
def make_rejax(pair: str, total_steps: int):
    import gymnax
    import rejax

    c = CONFIGS[pair]
    env, env_params = gymnax.make(c["env"])
    common = dict(
        env=FiveTupleGymnaxEnv(env), env_params=env_params, total_timesteps=total_steps,
        eval_freq=total_steps,  # one training segment, no periodic evaluation
        skip_initial_evaluation=True,
        num_envs=c["num_envs"], buffer_size=c["buffer_size"], fill_buffer=c["fill_buffer"],
        batch_size=c["batch_size"], learning_rate=c["learning_rate"], num_epochs=c["num_epochs"],
        gamma=c["gamma"], polyak=c["polyak"], normalize_observations=c["normalize_observations"],
    )
    if pair == "sac":
        algo = rejax.SAC.create(
            **common, hidden_layer_sizes=c["hidden"], agent_kwargs={"activation": c["activation"]},
        )
    elif pair == "td3":
        # rejax's TD3 has (64, 64) actor and critic built in.
        assert c["hidden"] == (64, 64)
        algo = rejax.TD3.create(
            **common, max_grad_norm=c["max_grad_norm"], exploration_noise=c["exploration_noise"],
            target_noise=c["target_noise"], target_noise_clip=c["target_noise_clip"],
            policy_delay=c["policy_delay"], actor_kwargs={"activation": c["activation"]},
            critic_kwargs={"activation": c["activation"]},
        )
    elif pair == "dqn":
        assert c["hidden"] == (64, 64)  # built into rejax's DQN
        algo = rejax.DQN.create(
            **common, agent="QNetwork", agent_kwargs={"activation": c["activation"]},
            max_grad_norm=c["max_grad_norm"], eps_start=c["eps_start"], eps_end=c["eps_end"],
            exploration_fraction=c["exploration_fraction"], ddqn=c["ddqn"],
        )
    else:
        raise ValueError(pair)
    return algo.replace(eval_callback=_no_eval)


def _rejax_updates(pair: str, ts) -> int:
    return int(ts.q_ts.step) if pair == "dqn" else int(ts.critic_ts.step)


def _rejax_greedy_act(pair: str, algo, ts):
    """The trained policy's deterministic action, through rejax's own networks."""
    norm = getattr(algo, "normalize_observations", False)

    def prep(obs):
        if norm:
            obs = algo.normalize_obs(ts.obs_rms_state, obs)
        return jnp.expand_dims(obs, 0)

    if pair == "sac":
        actor = algo.actor

        def act(obs, rng):
            def mean_action(m, o):
                mean = m.action_mean(m.features(o))
                return m.action_loc + jnp.tanh(mean) * m.action_scale

            return jnp.squeeze(actor.apply(ts.actor_ts.params, prep(obs), method=mean_action), 0)

        return act
    if pair == "td3":
        return algo.make_act(ts)  # deterministic already
    if pair == "dqn":

        def act(obs, rng):
            return jnp.argmax(algo.agent.apply(ts.q_ts.params, prep(obs))[0])

        return act
    raise ValueError(pair)


def time_rejax(pair: str, total_steps: int, seed: int) -> dict:
    from rejax.evaluate import evaluate as rejax_evaluate

    algo = make_rejax(pair, total_steps)
    key = jax.random.key(seed)
    t0, c0 = time.perf_counter(), time.process_time()
    compiled = jax.jit(algo.train).lower(key).compile()
    t1, c1 = time.perf_counter(), time.process_time()
    ts, _ = compiled(key)
    jax.block_until_ready(ts)
    t2, c2 = time.perf_counter(), time.process_time()
    steps = int(ts.global_step)
    assert steps == total_steps, (steps, total_steps)
    act = _rejax_greedy_act(pair, algo, ts)
    _, returns = rejax_evaluate(
        act, jax.random.key(10_000 + seed), algo.env, algo.env_params, EVAL_EPISODES,
        algo.env_params.max_steps_in_episode,
    )
    return dict(
        compile=t1 - t0, run=t2 - t1, steps=steps, updates=_rejax_updates(pair, ts), total=t2 - t0,
        compile_cpu=c1 - c0, run_cpu=c2 - c1, total_cpu=c2 - c0, ret=float(np.mean(np.asarray(returns))),
    )


# ============================================================================ brax side
def _device_put_replicated(x, devices):
    """Stand-in for ``jax.device_put_replicated`` (removed in jax 0.10): a leading
    axis of one copy per device, as brax's pmapped programs expect."""
    n = len(devices)
    stacked = jax.tree.map(lambda a: jnp.stack([jnp.asarray(a)] * n), x)
    if n == 1:
        return jax.device_put(stacked, devices[0])
    return stacked  # pmap shards the leading axis over its devices


class _PmapTimer:
    """Wraps ``jax.pmap`` so that every pmapped program is compiled ahead of time on
    its first call (timed) and each execution is timed to completion."""

    def __init__(self, orig_pmap):
        self.orig = orig_pmap
        self.log: list[tuple[str, str, float, float]] = []  # (name, "compile"/"run", wall, cpu)
        self.outputs: dict[str, object] = {}
        self.ends: dict[str, tuple[float, float]] = {}  # name -> (wall, cpu) at the end of its last run

    def __call__(self, fun, *args, **kwargs):
        mapped = self.orig(fun, *args, **kwargs)
        name = getattr(fun, "__name__", None) or getattr(getattr(fun, "func", None), "__name__", repr(fun))
        state = {"compiled": None}

        @functools.wraps(fun)
        def call(*a):
            if state["compiled"] is None:
                t0, c0 = time.perf_counter(), time.process_time()
                state["compiled"] = mapped.lower(*a).compile()
                self.log.append((name, "compile", time.perf_counter() - t0, time.process_time() - c0))
            t0, c0 = time.perf_counter(), time.process_time()
            out = state["compiled"](*a)
            jax.block_until_ready(out)
            self.log.append((name, "run", time.perf_counter() - t0, time.process_time() - c0))
            self.outputs[name] = out
            self.ends[name] = (time.perf_counter(), time.process_time())
            return out

        return call

    def total(self, names, phase: str, cpu: bool = False) -> float:
        return sum(c if cpu else w for n, p, w, c in self.log if n in names and p == phase)


@contextlib.contextmanager
def _brax_patches():
    """Install the pmap timer and the ``device_put_replicated`` stand-in, for this block only."""
    timer = _PmapTimer(jax.pmap)
    had = hasattr(jax, "device_put_replicated")
    old = getattr(jax, "device_put_replicated", None)
    jax.pmap = timer
    if not had:
        jax.device_put_replicated = _device_put_replicated
    try:
        yield timer
    finally:
        jax.pmap = timer.orig
        if had:
            jax.device_put_replicated = old
        else:
            del jax.device_put_replicated


def _u64(x) -> int:
    return int(np.asarray(x.to_numpy()).reshape(-1)[0])


def brax_train_kwargs(total_steps: int, seed: int, backend: str) -> dict:
    from brax import envs as brax_envs
    from brax.training.agents.sac import networks as sac_networks
    from flax import linen

    c = CONFIGS["brax"]
    return dict(
        environment=brax_envs.get_environment(c["env"], backend=backend),
        num_timesteps=total_steps, episode_length=c["episode_length"], num_envs=c["num_envs"],
        num_eval_envs=EVAL_EPISODES, learning_rate=c["learning_rate"], discounting=c["discounting"],
        seed=seed, batch_size=c["batch_size"], num_evals=1, normalize_observations=c["normalize_observations"],
        reward_scaling=c["reward_scaling"], tau=c["tau"], min_replay_size=c["min_replay_size"],
        max_replay_size=c["max_replay_size"], grad_updates_per_step=c["grad_updates_per_step"],
        deterministic_eval=True,
        network_factory=functools.partial(
            sac_networks.make_sac_networks, hidden_layer_sizes=c["hidden"], activation=getattr(linen, c["activation"])
        ),
    )


def time_brax(pair: str, total_steps: int, seed: int, brax_backend: str) -> dict:
    from brax.training.agents.sac import train as brax_sac

    kwargs = brax_train_kwargs(total_steps, seed, brax_backend)
    # Compile: env reset, buffer init, prefill and training-epoch programs (eqxrl's count
    # includes its `init` program, which resets the envs and builds the buffer).
    # Execution: prefill + training epoch (the reset and buffer-init runs take ~0 s).
    programs = ("reset", "init", "prefill_replay_buffer", "training_epoch")
    with _brax_patches() as timer:
        t0, c0 = time.perf_counter(), time.process_time()
        _, _, metrics = brax_sac.train(**kwargs)
        t1, c1 = time.perf_counter(), time.process_time()
    ts = timer.outputs["training_epoch"][0]
    # brax's `train` ends with its evaluation (compile + 16 episodes); end to end stops
    # where training does, as for the other libraries (whose evaluation is separate).
    t_end, c_end = timer.ends["training_epoch"]
    steps, updates = _u64(ts.env_steps), _u64(ts.gradient_steps)
    assert steps == total_steps, (steps, total_steps)
    run = timer.total(programs, "run")
    return dict(
        compile=timer.total(programs, "compile"), run=run, steps=steps, updates=updates,
        total=t_end - t0, total_incl_eval=t1 - t0,
        compile_cpu=timer.total(programs, "compile", cpu=True), run_cpu=timer.total(programs, "run", cpu=True),
        total_cpu=c_end - c0, ret=float(metrics["eval/episode_reward"]),
    )


# ============================================================================ checks
def _num_params(tree) -> int:
    return int(
        sum(np.size(x) for x in jax.tree.leaves(tree) if hasattr(x, "dtype") and jnp.issubdtype(x.dtype, jnp.inexact))
    )


def _eqxrl_counts(pair: str, brax_backend: str) -> tuple[int, int]:
    agent = make_eqxrl(pair, brax_backend)
    learner = eqx.filter_eval_shape(agent.init_learner, jax.random.key(0))
    if pair == "dqn":
        return _num_params(learner.q), 0
    return _num_params(learner.actor), _num_params(learner.critic)


def check_same_networks(pairs, brax_backend: str) -> dict[str, str]:
    """Equal parameter counts of actor and critic (DQN: the Q-network) on both sides."""
    out = {}
    for pair in pairs:
        e_actor, e_critic = _eqxrl_counts(pair, brax_backend)
        if pair == "brax":
            from brax.training.agents.sac import networks as sac_networks

            c = CONFIGS["brax"]
            agent = make_eqxrl(pair, brax_backend)
            nets = sac_networks.make_sac_networks(
                agent.obs_size, agent.action_size, hidden_layer_sizes=c["hidden"],
                activation=__import__("flax").linen.relu,
            )
            p_actor = _num_params(jax.eval_shape(nets.policy_network.init, jax.random.PRNGKey(0)))
            p_critic = _num_params(jax.eval_shape(nets.q_network.init, jax.random.PRNGKey(0)))
        else:
            algo = make_rejax(pair, 1_000)
            ts = jax.eval_shape(algo.init_state, jax.random.key(0))
            if pair == "dqn":
                p_actor, p_critic = _num_params(ts.q_ts.params), 0
            else:
                p_actor, p_critic = _num_params(ts.actor_ts.params), _num_params(ts.critic_ts.params)
        assert (e_actor, e_critic) == (p_actor, p_critic), (pair, (e_actor, e_critic), (p_actor, p_critic))
        c = CONFIGS[pair]
        nets = f"{c['hidden']} {c['activation']}"
        if pair == "dqn":
            out[pair] = f"Q-network {e_actor:,} parameters on both sides, {nets}"
        else:
            out[pair] = f"actor {e_actor:,} / critics {e_critic:,} parameters on both sides, {nets}"
    return out


# ============================================================================ breakdown
# Where the time of one gradient update goes, in process-CPU microseconds, measured
# in isolation (one jitted `lax.scan` of many repetitions, after a warm-up call,
# the minimum over interleaved rounds). "Fixed batch" runs each library's own
# update function on one constant batch; rejax's is driven the way its
# `train_iteration` drives it (its target-network update once per iteration, a fresh
# rng per update) so that no part of it is loop-invariant and hoisted by XLA.


class _SACNoClip(SAC):
    """Prototype fix: no gradient-clipping transform when `max_grad_norm` is inf."""

    def _opt(self, lr):
        from eqxrl.components import Optimizer

        return Optimizer(lr, self.max_grad_norm, clip="none")


def _cpu_us(fn, *args, reps: int) -> float:
    """Minimum process-CPU seconds of `reps` calls of the compiled `fn(*args)` (warm-up call first)."""
    jax.block_until_ready(fn(*args))
    best = math.inf
    for _ in range(reps):
        c0 = time.process_time()
        jax.block_until_ready(fn(*args))
        best = min(best, time.process_time() - c0)
    return best


def breakdown(pair: str, brax_backend: str, rounds: int = 2, reps: int = 2) -> dict:
    """CPU microseconds per gradient update: eqxrl's pieces and (rejax pairs) the peer's."""
    from eqxrl.agents import Clock
    from eqxrl.components import Sample, Transition

    agent = make_eqxrl(pair, brax_backend)
    n_upd = agent.num_updates
    target_updates = 32 if pair == "brax" else 600
    n_it = max(1, target_updates // n_upd)
    total = jnp.asarray(10**6, jnp.int32)

    def iterations(agent, start: int, n: int):
        @eqx.filter_jit
        def run(state):
            def body(s, i):
                return agent.train_iteration(s, Clock(jnp.asarray(start, jnp.int32) + i, total))

            return jax.lax.scan(body, state, jnp.arange(n, dtype=jnp.int32))

        return run

    state = eqx.filter_jit(agent.init)(jax.random.key(0))
    n_warm = -(-agent.learning_starts // agent.steps_per_iteration)
    state, _ = iterations(agent, 0, n_warm)(state)
    jax.block_until_ready(state)
    n_w = max(1, min(n_it, n_warm - 1))
    fresh = eqx.filter_jit(agent.init)(jax.random.key(0))

    # A fixed batch for the update-only measurements.
    bs = agent.batch_size
    k1, k2, k3 = jax.random.split(jax.random.key(1), 3)
    obs = jax.random.normal(k1, (bs, agent.obs_size))
    if agent.discrete:
        act = jax.random.randint(k2, (bs,), 0, agent.action_size)
    else:
        act = jax.random.uniform(k2, (bs, agent.action_size), minval=-1.0, maxval=1.0)
    rew = jax.random.normal(k3, (bs,))
    batch = Sample(Transition(obs, act, rew, jnp.full((bs,), 0.99), obs), jnp.arange(bs), jnp.ones((bs,)))
    n_fixed = n_it * n_upd

    def update_only(agent, update_fn=None):
        update_fn = update_fn or (lambda l, b, k, u, p: agent.update(l, b, k, u, p))

        @eqx.filter_jit
        def run(learner):
            def one(c, k):
                l, u = c
                l, _, m = update_fn(l, batch, k, u, jnp.asarray(0.5))
                return (l, u + 1), m

            (l, _), m = jax.lax.scan(one, (learner, jnp.asarray(0, jnp.int32)), jax.random.split(jax.random.key(2), n_fixed))
            return l, jax.tree.map(jnp.mean, m)

        return run, eqx.filter_jit(agent.init_learner)(jax.random.key(3))

    buffer = agent.buffer

    @eqx.filter_jit
    def sample_only(bstate):
        def one(c, k):
            return c + jnp.sum(buffer.sample(bstate, k, bs, 0.4).data.reward), None

        return jax.lax.scan(one, jnp.zeros(()), jax.random.split(jax.random.key(4), n_fixed))[0]

    jobs = {
        "eqxrl: full iteration, after warm-up": (iterations(agent, n_warm, n_it), (state,), n_it * n_upd),
        "eqxrl: warm-up iteration (collection only)": (iterations(agent, 0, n_w), (fresh,), n_w * n_upd),
        "eqxrl: update only, fixed batch": (*(lambda f, l: (f, (l,)))(*update_only(agent)), n_fixed),
        "eqxrl: buffer sample only": (sample_only, (state.buffer,), n_fixed),
    }
    fields = {f.name: getattr(agent, f.name) for f in __import__("dataclasses").fields(agent)}
    if pair in ("sac", "brax"):
        f, l = update_only(_SACNoClip(**fields))
        jobs["eqxrl, prototype fix: update only, no clip transform"] = (f, (l,), n_fixed)

    if pair != "brax":
        from rejax.buffers import Minibatch

        algo = make_rejax(pair, 10**6)
        ts = jax.jit(algo.init_state)(jax.random.key(0))
        scale = 1.0
        if not agent.discrete:  # rejax acts in env units
            space = algo.action_space
            scale = float(np.max(np.asarray(space.high)))
        mb = Minibatch(obs=obs, action=act * scale if not agent.discrete else act, reward=rew,
                       done=jnp.zeros((bs,), bool), next_obs=obs)
        per_iter = {"sac": 1, "td3": 2, "dqn": CONFIGS["dqn"]["num_epochs"]}[pair]

        def _fresh(t):
            return t.replace(rng=jax.random.split(t.rng)[0])

        def _tgt(params, target):
            return algo.maybe_update_target_params(params, target, jnp.asarray(1), jnp.asarray(0))

        @jax.jit
        def r_update(ts):
            def one(t, _):
                if pair == "sac":
                    t = algo.update(_fresh(t), mb)
                    t = t.replace(critic_target_params=_tgt(t.critic_ts.params, t.critic_target_params))
                elif pair == "td3":
                    for _ in range(2):
                        t = algo.update_critic(_fresh(t), mb)
                    t = algo.update_actor(t, mb)
                    t = t.replace(
                        critic_target_params=_tgt(t.critic_ts.params, t.critic_target_params),
                        actor_target_params=_tgt(t.actor_ts.params, t.actor_target_params),
                    )
                else:
                    for _ in range(per_iter):
                        t = algo.update(_fresh(t), mb)
                    t = t.replace(q_target_params=_tgt(t.q_ts.params, t.q_target_params))
                return t, None

            return jax.lax.scan(one, ts, None, length=n_fixed // per_iter)[0]

        full_buf = ts.replay_buffer.replace(index=0, full=True)

        @jax.jit
        def r_sample(buf):
            def one(c, k):
                return c + jnp.sum(buf.sample(bs, k).reward), None

            return jax.lax.scan(one, jnp.zeros(()), jax.random.split(jax.random.key(4), n_fixed))[0]

        r_upd_per_iter = {"sac": 1, "td3": 2, "dqn": per_iter}[pair]
        r_iters = max(1, n_fixed // r_upd_per_iter)
        fill_its = algo.fill_buffer // (algo.num_envs * (algo.policy_delay if pair == "td3" else 1)) + 2

        @jax.jit
        def r_warmup(ts):
            return jax.lax.fori_loop(0, fill_its, lambda _, t: algo.train_iteration(t), ts)

        @jax.jit
        def r_iterations(ts):
            return jax.lax.fori_loop(0, r_iters, lambda _, t: algo.train_iteration(t), ts)

        ts_filled = r_warmup(ts)
        jobs["rejax: full iteration, after fill"] = (r_iterations, (ts_filled,), r_iters * r_upd_per_iter)
        jobs["rejax: update only, fixed batch"] = (r_update, (ts,), (n_fixed // per_iter) * per_iter)
        jobs["rejax: buffer sample only (full buffer)"] = (r_sample, (full_buf,), n_fixed)

    best = {name: math.inf for name in jobs}
    for _ in range(rounds):
        for name, (fn, args, count) in jobs.items():
            best[name] = min(best[name], 1e6 * _cpu_us(fn, *args, reps=reps) / count)
    return best


def compile_breakdown(pair: str, brax_backend: str, steps: int, rounds: int = 2) -> dict:
    """Process-CPU seconds to compile eqxrl's training programs, three ways, and the peer's."""
    import importlib

    tr = importlib.import_module("eqxrl.train")  # eqxrl's private helpers, to take `train`'s compile apart
    agent = make_eqxrl(pair, brax_backend)
    layout = tr._Layout(members=False, seeds=False)
    key = jax.random.key(0)
    n_it = steps // agent.steps_per_iteration
    cfg = (agent, jnp.asarray(0, jnp.int32), jnp.asarray(n_it, jnp.int32), layout, n_it)
    fused = eqx.filter_jit(lambda config, k: tr._chunk_impl(config, tr._init_impl(config[0], k, config[3])))

    def serial():
        tr._init.lower(agent, key, layout).compile()
        shapes = eqx.filter_eval_shape(tr._init_impl, agent, key, layout)
        tr._run_chunk.lower(cfg, tr._placeholder(shapes, key)).compile()

    jobs = {"eqxrl `train`: init and chunk programs, compiled concurrently": lambda: tr._compile(agent, key, layout, cfg)}
    if pair != "brax":  # (each brax-env compile takes ~25 CPU-s; keep the breakdown short)
        jobs["eqxrl: the same two programs compiled one after the other"] = serial
    jobs["eqxrl, prototype fix: init + chunk as one program"] = lambda: fused.lower(cfg, key).compile()
    if pair != "brax":
        algo = make_rejax(pair, steps)
        jobs["rejax: `jax.jit(train).lower(key).compile()`"] = lambda: jax.jit(algo.train).lower(key).compile()
    best = {name: math.inf for name in jobs}
    for _ in range(rounds):
        for name, fn in jobs.items():
            jax.clear_caches()
            gc.collect()
            c0 = time.process_time()
            fn()
            best[name] = min(best[name], time.process_time() - c0)
    return best


# ============================================================================ driver
METRICS = [
    # (key, label, value of one run, formatter, higher is better)
    ("sps", "env steps/s after compile", lambda x: x["steps"] / x["run"], "{:,.0f}", True),
    ("ups", "gradient updates/s after compile", lambda x: x["updates"] / x["run"], "{:,.0f}", True),
    ("compile", "compile (s)", lambda x: x["compile"], "{:.2f}", False),
    ("sps_cpu", "env steps per process-CPU s", lambda x: x["steps"] / x["run_cpu"], "{:,.0f}", True),
    ("compile_cpu", "compile, process CPU (s)", lambda x: x["compile_cpu"], "{:.2f}", False),
    ("setup", "setup = end to end - execution (s)", lambda x: x["total"] - x["run"], "{:.2f}", False),
    ("total", "end to end (s)", lambda x: x["total"], "{:.2f}", False),
    ("ret", f"final return (mean of {EVAL_EPISODES} episodes)", lambda x: x["ret"], "{:.1f}", None),
]


def run_one(lib: str, pair: str, steps: int, seed: int, brax_backend: str) -> dict:
    if lib == "eqxrl":
        return time_eqxrl(pair, steps, seed, brax_backend)
    if pair == "brax":
        return time_brax(pair, steps, seed, brax_backend)
    return time_rejax(pair, steps, seed)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=3, help="timed runs per library and pair (median reported)")
    p.add_argument("--pairs", default="sac,td3,dqn,brax", help="comma-separated subset of sac,td3,dqn,brax")
    p.add_argument("--quick", action="store_true", help="smoke test: 1 run, small step budgets")
    p.add_argument("--brax-backend", default="generalized", help="brax physics backend for both sides")
    p.add_argument(
        "--breakdown", action="store_true",
        help="also measure where the time goes (per-update CPU pieces, compile variants; ~10 more minutes)",
    )
    for pair in BUDGETS:
        p.add_argument(f"--{pair}-steps", type=int, default=None, help=f"env steps per {pair} run")
    p.add_argument(
        "--out", type=Path, default=Path(__file__).resolve().parent / "results" / "offpolicy_throughput.md",
        help="where to write the Markdown table ('-' for nowhere)",
    )
    a = p.parse_args(argv)
    pairs = [s.strip() for s in a.pairs.split(",") if s.strip()]
    unknown = sorted(set(pairs) - set(CONFIGS))
    if unknown:
        p.error(f"unknown pair(s) {unknown}; choose from {sorted(CONFIGS)}")
    if a.quick:
        a.runs = 1
    budgets = {}
    for pair in pairs:
        steps = getattr(a, f"{pair}_steps") or BUDGETS[pair][1 if a.quick else 0]
        unit = iteration_steps(pair)
        steps = steps // unit * unit
        if pair == "brax":
            steps = max(steps, CONFIGS["brax"]["min_replay_size"] + unit)
        budgets[pair] = steps

    t_start = time.perf_counter()
    a.load_start = os.getloadavg()
    print(f"jax {jax.__version__} on {jax.default_backend()}, {os.cpu_count()} CPUs", flush=True)
    nets = check_same_networks(pairs, a.brax_backend)
    for pair in pairs:
        print(f"{pair}: {nets[pair]}; {budgets[pair]:,} env steps per run", flush=True)

    results = {(pair, lib): [] for pair in pairs for lib in ("eqxrl", "peer")}
    for r in range(a.runs):
        for pair in pairs:
            order = ("eqxrl", "peer") if r % 2 == 0 else ("peer", "eqxrl")
            for lib in order:
                jax.clear_caches()
                gc.collect()
                res = run_one(lib, pair, budgets[pair], r, a.brax_backend)
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

    a.runs_minutes = (time.perf_counter() - t_start) / 60
    parts, cparts = {}, {}
    if a.breakdown:
        for pair in pairs:
            jax.clear_caches()
            gc.collect()
            t0 = time.perf_counter()
            parts[pair] = breakdown(pair, a.brax_backend)
            cparts[pair] = compile_breakdown(pair, a.brax_backend, budgets[pair])
            print(f"breakdown {pair} ({time.perf_counter() - t0:.0f} s):", flush=True)
            for name, us in parts[pair].items():
                print(f"    {name:60s} {us:9.1f} us CPU per update", flush=True)
            for name, sec in cparts[pair].items():
                print(f"    {name:60s} {sec:9.2f} s CPU", flush=True)

    elapsed = time.perf_counter() - t_start
    a.load_end = os.getloadavg()
    md = render(a, pairs, budgets, results, nets, elapsed, parts, cparts)
    print()
    print(md)
    if str(a.out) != "-":
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(md)
        print(f"wrote {a.out}")


def _versions() -> str:
    from importlib.metadata import version

    mods = ("jax", "jaxlib", "equinox", "optax", "gymnax", "rejax", "brax", "flax")
    return ", ".join(f"{m} {version(m)}" for m in mods)


def _config_line(pair: str, steps: int, brax_backend: str) -> str:
    c = dict(CONFIGS[pair])
    env = c.pop("env")
    if pair == "brax":
        env = f"brax {env}, backend {brax_backend!r}"
        peer = "`brax.training.agents.sac.train`"
    else:
        peer = f"`rejax.{PAIR_NAMES[pair][0]}`"
    fields = ", ".join(f"{k}={v}" for k, v in c.items())
    return f"- **{pair}** ({PAIR_NAMES[pair][0]}, {env}; eqxrl vs {peer}; {steps:,} env steps per run): {fields}"


def render(a, pairs, budgets, results, nets, elapsed, parts=None, cparts=None) -> str:
    lines = [
        "# Off-policy throughput: eqxrl vs rejax (SAC, TD3, DQN) and brax (SAC)",
        "",
        f"- date: {datetime.date.today().isoformat()}",
        f"- versions: {_versions()}, Python {platform.python_version()}; eqxrl at {_git_rev()}",
        f"- machine: {jax.default_backend()} backend, nproc = {_nproc()} ({_cpu_model()}); "
        "shared machine, timings are noisy (1/5/15-min load average at start "
        f"{'/'.join(f'{x:.1f}' for x in a.load_start)}, at end {'/'.join(f'{x:.1f}' for x in a.load_end)}; "
        "process-CPU figures are the steadier ones)",
        f"- command: `python benchmarks/{Path(__file__).name} {' '.join(sys.argv[1:])}`".rstrip(),
        f"- wall time of the whole benchmark: {elapsed / 60:.1f} min ({a.runs_minutes:.1f} min for the timed runs"
        + (", the rest for the breakdown)" if parts else ")"),
        f"- medians of {a.runs} run(s) per cell; the two libraries' runs interleaved, alternating which goes "
        "first; in-memory JAX caches cleared before every run; run i uses seed i on both sides",
        "",
        "Configurations (the peer's, in the peer's terms; see the script's docstring and `make_eqxrl` "
        "for the translation into eqxrl's fields):",
        "",
    ]
    for pair in pairs:
        lines.append(_config_line(pair, budgets[pair], a.brax_backend) + f"; networks: {nets[pair]}")
    lines += [
        "",
        "Ratios are eqxrl / peer of the medians. \"eqxrl speed-up\" is the ratio for throughputs and its "
        "inverse for times, so above 1 means eqxrl is faster (the aim is >= 1.2). Returns: difference eqxrl - peer.",
        "",
        "| pair | metric | eqxrl | peer | eqxrl / peer | eqxrl speed-up |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for pair in pairs:
        e, r = results[(pair, "eqxrl")], results[(pair, "peer")]
        algo, env, peer = PAIR_NAMES[pair]
        label = f"{algo} {env} vs {peer}"
        for i, (key, metric, get, fmt, higher) in enumerate(METRICS):
            em = statistics.median(get(x) for x in e)
            rm = statistics.median(get(x) for x in r)
            bold = "**" if key in ("sps", "ups", "compile") else ""
            if higher is None:
                ratio, speed = f"{em - rm:+.1f} (diff.)", ""
            else:
                ratio = f"{em / rm:.2f}" if rm else "n/a"
                speed = f"{(em / rm if higher else rm / em):.2f}" if rm and em else "n/a"
                speed = f"{bold}{speed}{bold}"
            lines.append(
                f"| {label if i == 0 else ''} | {bold}{metric}{bold} | {bold}{fmt.format(em)}{bold} | "
                f"{bold}{fmt.format(rm)}{bold} | {ratio} | {speed} |"
            )
    lines += [
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
    if parts:
        lines += [
            "",
            "## Where the time goes: process-CPU microseconds per gradient update",
            "",
            "Each piece measured in isolation: one jitted `lax.scan` of a few hundred repetitions, minimum over "
            "interleaved rounds, divided by the gradient updates it stands for. *Fixed batch*: each library's own "
            "update function on one constant batch (rejax's driven as its `train_iteration` drives it: target "
            "update once per iteration, a fresh rng per update, so nothing is loop-invariant). *Prototype fix*: "
            "the same eqxrl update with one change, written in this script (not in eqxrl).",
            "",
            "| piece | " + " | ".join(PAIR_NAMES[p][0] + " " + PAIR_NAMES[p][1] for p in pairs if p in parts) + " |",
            "|---|" + "---:|" * sum(1 for p in pairs if p in parts),
        ]
        names = []
        for pair in pairs:
            for name in parts.get(pair, {}):
                if name not in names:
                    names.append(name)
        for name in names:
            cells = [f"{parts[p][name]:,.1f}" if name in parts[p] else "" for p in pairs if p in parts]
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
    if cparts:
        lines += [
            "",
            "Compile, process-CPU seconds (minimum of 2 rounds, caches cleared before each): eqxrl's `init` "
            "and training chunk (for the run's budget) as `train` compiles them, the same two programs in "
            "series, a one-program prototype, and the peer's program.",
            "",
            "| compile | " + " | ".join(PAIR_NAMES[p][0] + " " + PAIR_NAMES[p][1] for p in pairs if p in cparts) + " |",
            "|---|" + "---:|" * sum(1 for p in pairs if p in cparts),
        ]
        names = []
        for pair in pairs:
            for name in cparts.get(pair, {}):
                if name not in names:
                    names.append(name)
        for name in names:
            cells = [f"{cparts[p][name]:.2f}" if name in cparts[p] else "" for p in pairs if p in cparts]
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
