"""QDax 0.5.0's PBT-SAC as a peer, for ``pbt_qdax.py``: the loop of QDax's ``examples/sac_pbt.ipynb``
on one device (``jax.vmap`` over members, no ``pmap``).

`run_qdax` runs under QDax's own virtual environment (``pbt_qdax.py --side qdax``, started by the
script as a subprocess): nothing here, nor in what it imports (``_common``, ``_report``), imports eqxrl.
Every program (env reset, population init, the training scan, the evaluation, the selection) is
compiled ahead of time before anything executes; then each generation trains ``ready / num_envs``
iterations, evaluates, and (except after the last) runs ``PBT.update_states_and_buffer``, each timed.
"""

from __future__ import annotations

import platform
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

from _common import generation_summary, timed
from _report import package_versions

VERSIONED = ("jax", "jaxlib", "qdax", "brax", "flax", "optax", "chex", "mujoco", "tensorflow-probability")


def run_qdax(c: dict, seed: int) -> dict:
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
    (training_states, replay_buffers), init_wall, _ = timed(init_c, init_key)
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

    out = generation_summary(pop, c["total_steps"], fitness[-1], gens, compile_s, select_s, eval_s)
    best = int(np.nanargmax(fitness[-1]))
    out.update(
        side="qdax", seed=seed, setup=setup, init_run=init_wall, compile_parts=parts, train_s=train_s,
        best_hp={n: float(np.asarray(getattr(training_states, n))[best]) for n in c["ranges"]},
        updates=int(np.asarray(training_states.steps)[0]),
        tfp_imported="tensorflow_probability" in sys.modules,
        versions={**package_versions(VERSIONED), "python": platform.python_version()},
        devices=str(jax.devices()),
        hp_class=PBTSacTrainingState.__name__,
    )  # fmt: skip
    return out
