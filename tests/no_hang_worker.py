"""Run one agent's programs over key batches of several sizes; used by test_no_hang.py in a
subprocess (a program that hangs is killed by the caller's timeout, not stuck in pytest).

Usage: python no_hang_worker.py AGENTS PROGRAMS COUNTS [LIMIT]

AGENTS: comma-separated names of `AGENTS` below (one process for several agents saves starting
JAX and importing the suites once per agent); PROGRAMS: a comma-separated subset of `init` (`jax.vmap(agent.init)`),
`make_train` (`jax.jit(jax.vmap(eqxrl.make_train(agent, steps)))`) and `train` (`eqxrl.train` with
`(n,)` keys); COUNTS: comma-separated key counts. Prints one line `ok AGENT PROGRAM N SECONDS` per finished
call (flushed, so the caller sees how far a hung run got); a call still running after LIMIT seconds
(default 300: compiling, not running, takes the time) prints `hung AGENT PROGRAM N`, the process CPU
seconds the call used (a deadlock sits idle; a slow compile does not) and the Python stack of every
thread (where it waits: in a compile or in `block_until_ready`), and ends the process with exit status 3.

The process is pinned to two CPUs where it may run on more: XLA:CPU sizes its intra-op thread pool
from the CPUs a process may use, and the deadlock this guards against needs every pool thread inside
a batched LAPACK call at once (docs/architecture.md, "Programs that hang"), which two threads meet
where sixteen would not.
"""

import faulthandler
import os
import sys
import threading
import time

import jax

import eqxrl
from eqxrl.agents import DADS, DDPG, DQN, IPPO, MPO, PPO, SAC, TD3
from eqxrl.components import GRUTorso

# Each agent on its reference env, with its default networks (the QR sizes are what matters);
# `make_train` and `train` run one iteration.
AGENTS = {
    "ppo": lambda: PPO("CartPole-v1"),
    "recurrent_ppo": lambda: PPO("CartPole-v1", actor_torso=GRUTorso(64), shared_torso=True),
    "dqn": lambda: DQN("CartPole-v1"),
    "ddpg": lambda: DDPG("Pendulum-v1"),
    "td3": lambda: TD3("Pendulum-v1"),
    "sac": lambda: SAC("Pendulum-v1"),
    "mpo": lambda: MPO("Pendulum-v1"),
    "dads": lambda: DADS("Point2D-v0"),
    "ippo": lambda: IPPO("jaxmarl/MPE_simple_spread_v3"),
}


def run(agent, program: str, n: int) -> None:
    keys = jax.random.split(jax.random.key(0), n)
    steps = agent.steps_per_iteration
    if program == "init":
        jax.block_until_ready(jax.vmap(agent.init)(keys))
    elif program == "make_train":
        jax.block_until_ready(jax.jit(jax.vmap(eqxrl.make_train(agent, steps)))(keys))
    elif program == "train":
        jax.block_until_ready(eqxrl.train(agent, keys, steps, progress=False))
    else:
        raise ValueError(f"program must be init, make_train or train, got {program!r}")


def _hung(name: str, program: str, n: int, limit: float, cpu_start: float) -> None:
    print(f"hung {name} {program} {n} after {limit:.0f} s, {time.process_time() - cpu_start:.1f} s of process CPU", flush=True)
    faulthandler.dump_traceback(sys.stdout, all_threads=True)
    sys.stdout.flush()
    os._exit(3)  # a deadlocked XLA call cannot be interrupted; the process must end


def main() -> None:
    # Here, not at import (test_no_hang.py imports `AGENTS`), and before JAX starts its CPU
    # backend, which sizes the pool from the CPUs this process may use.
    if hasattr(os, "sched_setaffinity") and len(os.sched_getaffinity(0)) > 2:
        os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[:2])
    names, programs, counts = sys.argv[1].split(","), sys.argv[2].split(","), [int(n) for n in sys.argv[3].split(",")]
    limit = float(sys.argv[4]) if len(sys.argv) > 4 else 300.0
    for name in names:
        agent = AGENTS[name]()
        for program in programs:
            for n in counts:
                start = time.perf_counter()
                watchdog = threading.Timer(limit, _hung, (name, program, n, limit, time.process_time()))
                watchdog.daemon = True
                watchdog.start()
                run(agent, program, n)
                watchdog.cancel()
                print(f"ok {name} {program} {n} {time.perf_counter() - start:.1f}", flush=True)


if __name__ == "__main__":
    main()
