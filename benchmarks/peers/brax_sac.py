"""brax 0.14.2's SAC trainer (``brax.training.agents.sac.train``) as a peer, for ``offpolicy_throughput.py``.

brax's ``train`` is run as is, with two patches installed for the duration of the call only:

- ``jax.pmap`` is wrapped (`PmapTimer`) so that each pmapped program is compiled ahead of time on its
  first call and compile and execution are timed separately;
- brax 0.14.2 calls ``jax.device_put_replicated``, which jax 0.10 no longer has; `device_put_replicated`
  stands in for it (one stacked copy per device).

Compile = env reset + buffer init + prefill + training-epoch programs; execution = their runs. The
configuration `c` is ``brax.training.agents.sac.train``'s keywords plus ``env``, ``hidden`` and
``activation`` (see ``CONFIGS["brax"]`` in ``_offpolicy_pairs.py``).
"""

from __future__ import annotations

import contextlib
import functools
import time

import jax
import jax.numpy as jnp
import numpy as np

from _common import num_params

PROGRAMS = ("reset", "init", "prefill_replay_buffer", "training_epoch")


def device_put_replicated(x, devices):
    """Stand-in for ``jax.device_put_replicated`` (removed in jax 0.10): a leading axis of one copy per
    device, as brax's pmapped programs expect."""
    n = len(devices)
    stacked = jax.tree.map(lambda a: jnp.stack([jnp.asarray(a)] * n), x)
    if n == 1:
        return jax.device_put(stacked, devices[0])
    return stacked  # pmap shards the leading axis over its devices


class PmapTimer:
    """Wraps ``jax.pmap`` so that every pmapped program is compiled ahead of time on its first call
    (timed) and each execution is timed to completion."""

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
def patched():
    """Install the pmap timer and the ``device_put_replicated`` stand-in, for this block only."""
    timer = PmapTimer(jax.pmap)
    had = hasattr(jax, "device_put_replicated")
    old = getattr(jax, "device_put_replicated", None)
    jax.pmap = timer
    if not had:
        jax.device_put_replicated = device_put_replicated
    try:
        yield timer
    finally:
        jax.pmap = timer.orig
        if had:
            jax.device_put_replicated = old
        else:
            del jax.device_put_replicated


def _networks(c: dict, **kwargs):
    from brax.training.agents.sac import networks as sac_networks
    from flax import linen

    return sac_networks.make_sac_networks(
        hidden_layer_sizes=c["hidden"], activation=getattr(linen, c["activation"]), **kwargs
    )


def train_kwargs(c: dict, total_steps: int, seed: int, backend: str, eval_episodes: int) -> dict:
    """``brax.training.agents.sac.train`` keywords: one evaluation (at the end), deterministic."""
    from brax import envs as brax_envs

    keys = ("episode_length", "num_envs", "learning_rate", "discounting", "batch_size", "normalize_observations",
            "reward_scaling", "tau", "min_replay_size", "max_replay_size", "grad_updates_per_step")  # fmt: skip
    return dict(
        environment=brax_envs.get_environment(c["env"], backend=backend), num_timesteps=total_steps,
        num_eval_envs=eval_episodes, seed=seed, num_evals=1, deterministic_eval=True,
        network_factory=functools.partial(_networks, c), **{k: c[k] for k in keys},
    )  # fmt: skip


def _u64(x) -> int:
    return int(np.asarray(x.to_numpy()).reshape(-1)[0])


def time_train(c: dict, total_steps: int, seed: int, backend: str, eval_episodes: int) -> dict:
    """One timed run of brax's ``train``; its closing evaluation gives the return."""
    from brax.training.agents.sac import train as brax_sac

    kwargs = train_kwargs(c, total_steps, seed, backend, eval_episodes)
    with patched() as timer:
        t0, c0 = time.perf_counter(), time.process_time()
        _, _, metrics = brax_sac.train(**kwargs)
        t1 = time.perf_counter()
    ts = timer.outputs["training_epoch"][0]
    # brax's `train` ends with its evaluation (compile + episodes); end to end stops where
    # training does, as for the other libraries (whose evaluation is separate).
    t_end, c_end = timer.ends["training_epoch"]
    steps, updates = _u64(ts.env_steps), _u64(ts.gradient_steps)
    assert steps == total_steps, (steps, total_steps)
    return dict(
        compile=timer.total(PROGRAMS, "compile"), run=timer.total(PROGRAMS, "run"), steps=steps, updates=updates,
        total=t_end - t0, total_incl_eval=t1 - t0, compile_cpu=timer.total(PROGRAMS, "compile", cpu=True),
        run_cpu=timer.total(PROGRAMS, "run", cpu=True), total_cpu=c_end - c0, ret=float(metrics["eval/episode_reward"]),
    )  # fmt: skip


def param_counts(c: dict, obs_size: int, action_size: int) -> tuple[int, int]:
    """(policy, Q-network) parameters of brax's SAC networks."""
    nets = _networks(c, observation_size=obs_size, action_size=action_size)
    key = jax.random.PRNGKey(0)
    return num_params(jax.eval_shape(nets.policy_network.init, key)), num_params(jax.eval_shape(nets.q_network.init, key))
