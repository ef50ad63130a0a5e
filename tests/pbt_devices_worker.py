"""Run a small PBT population on several CPU devices; used by test_pbt_devices.py in a subprocess.

Usage: python pbt_devices_worker.py MODE OUT [PROCESS_ID NUM_PROCESSES PORT | RUN_DIR]

MODE: "sharded" (shard=True), "single" (shard=False), "single+sharded" (both, one after
the other in this process: OUT for the single run, `sharded.npz` beside it for the sharded
one; one jax start-up instead of two), "multihost" (with jax.distributed; writes a run
directory beside OUT, `multihost-run`), or "resume" (continues RUN_DIR with
`eqxrl.pbt.resume`, in one process). The device count comes from XLA_FLAGS, set by the
caller before this process starts. Writes a .npz with the history and final parameters.
"""

import pathlib
import sys

import jax

mode, out = sys.argv[1], sys.argv[2]
if mode == "multihost":
    process_id, num_processes, port = map(int, sys.argv[3:6])
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(f"localhost:{port}", num_processes=num_processes, process_id=process_id)

import numpy as np  # noqa: E402

from eqxrl.agents import PPO  # noqa: E402
from eqxrl.pbt import PBT, LogUniform, Truncation, gather, resume  # noqa: E402

agent = PPO("CartPole-v1", num_envs=2, rollout_length=16, num_epochs=1, num_minibatches=1, hidden_sizes=(8,))


def run(mode: str, out: str) -> None:
    pbt = PBT(
        agent,
        {"learning_rate": LogUniform(1e-4, 1e-2)},
        population_size=4,
        ready=64,
        exploit=Truncation(1, 1),
        eval_episodes=2,
        max_eval_steps=50,
        shard=mode != "single",
    )
    if mode == "resume":
        population, history = resume(sys.argv[3], progress=False)
    else:
        run_dir = pathlib.Path(out).with_name("multihost-run") if mode == "multihost" else None
        population, history = pbt.run(jax.random.key(3), 3 * 64, progress=False, run_dir=run_dir)
    params = [gather(x) for x in jax.tree.leaves((population.state.actor, population.state.critic))]
    shards = {len(x.sharding.device_set) for x in jax.tree.leaves(population.state) if hasattr(x, "sharding") and x.ndim}
    specs = {str(getattr(x.sharding, "spec", None)) for x in jax.tree.leaves(population.state) if x.ndim}
    if jax.process_index() == 0:
        np.savez(
            out,
            fitness=history.fitness,
            parent=history.parent,
            lr=history.hyperparameters["learning_rate"],
            devices=jax.device_count(),
            processes=jax.process_count(),
            shard_devices=np.array(sorted(shards)),
            specs=np.array(sorted(specs)),
            **{f"p{i}": p for i, p in enumerate(params)},
        )
    print("done", mode, jax.process_index(), jax.device_count(), sorted(shards), flush=True)


if mode == "single+sharded":
    run("single", out)
    run("sharded", str(pathlib.Path(out).with_name("sharded.npz")))
else:
    run(mode, out)
