"""Minimal reproducer of the XLA:CPU deadlock of batched LAPACK calls (jax/jaxlib 0.10.2, CPU).

    timeout 120 python benchmarks/xla_cpu_batched_qr_hang.py           # hangs (killed by timeout)
    timeout 120 python benchmarks/xla_cpu_batched_qr_hang.py --fixed   # finishes in seconds

`jax.vmap(PPO("CartPole-v1").init)` over 4 keys, with the orthogonal initialisation's QRs left as
`jnp.linalg.qr` of the batch (what eqxrl did before; `--fixed`: eqxrl as it is, one QR per matrix
under `vmap`). The process is pinned to two CPUs, so XLA:CPU's intra-op pool has two threads, as on
the 2-core machine where it was found. What happens (gdb, `thread apply all bt`): both pool threads
(`tf_XLAEigen`) sit in `jax::ParallelBatchMap` -> `absl::BlockingCounter::Wait`, each inside a
batched QR (`OrthogonalQr` kernel) that split its batch into tasks on that same pool; no thread is
left to run those tasks, and the main thread waits in `BlockUntilReady` forever at 0% CPU. With
`XLA_FLAGS=--xla_cpu_enable_concurrency_optimized_scheduler=false` the QRs run one at a time and it
finishes. See docs/architecture.md, "Programs that hang".
"""

import os
import sys
import time

if hasattr(os, "sched_setaffinity") and len(os.sched_getaffinity(0)) > 2:
    os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[:2])

import jax  # noqa: E402

import eqxrl.components.networks._init as orthogonal_init  # noqa: E402
from eqxrl.agents import PPO  # noqa: E402

if "--fixed" not in sys.argv[1:]:
    orthogonal_init._orthonormal = orthogonal_init._orthonormal.fun  # the QR without its loop under vmap

start = time.perf_counter()
jax.block_until_ready(jax.vmap(PPO("CartPole-v1").init)(jax.random.split(jax.random.key(0), 4)))
print(f"finished in {time.perf_counter() - start:.1f} s")
