"""Helpers shared by test modules (not a test module: pytest does not collect it)."""

import os

# XLA's CPU backend at LLVM optimisation level 0 compiles the tests' small programs in about
# 55-60% of the CPU time (tiny PPO: 12.5 -> 6.7 CPU-s, tiny SAC: 15.1 -> 9.0); they then run
# slower, which a test that trains for a few iterations does not notice. (tests/test_envs.py
# passes the same option to its own jit.)
FAST_COMPILE_FLAG = "--xla_backend_optimization_level=0"


def fast_compile_env(env: dict[str, str] | None = None) -> dict[str, str]:
    """A copy of `env` (default: this process's environment) whose XLA_FLAGS also compile at
    optimisation level 0: for the subprocesses of tests that check what a program computes
    (equal results across devices, processes, restarts), not how fast it runs. Every process
    that such a test compares must get the same flags (they are part of the compilation-cache
    key too: a subprocess with them does not read the programs the test process compiled)."""
    env = dict(os.environ if env is None else env)
    env["XLA_FLAGS"] = " ".join(filter(None, [env.get("XLA_FLAGS", ""), FAST_COMPILE_FLAG]))
    return env
