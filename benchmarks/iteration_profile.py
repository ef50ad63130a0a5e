"""Where a training iteration's time goes, against the floor of the same work on this machine.

PPO on CartPole-v1 (PureJaxRL's configuration: 4 envs x 128 steps, 4 epochs x 4
minibatches, (64, 64) tanh networks) and SAC on Pendulum-v1 (eqxrl's defaults: 1 env,
1 update of a batch of 256 per step, (256, 256) networks, twin critics). Each figure
is one jitted `lax.scan` of `--iterations` repetitions (no per-call dispatch), timed
after a warm-up call, as the minimum over `--repeats` timings, per iteration, of
the wall time and of the process CPU seconds. CPU time is less sensitive to other
load on a shared machine, but on a quiet one it also counts XLA's second thread
(a PPO rollout: 1.47 ms wall, 2.92 ms CPU), so the shares and the floor ratio are
taken from wall time:

PPO
- `iteration`: `PPO.train_iteration` (rollout, GAE, 16 minibatch updates, metrics);
- `rollout`: the rollout alone (policy sampling and env steps, 512 transitions);
- `update`: iteration minus rollout (values, GAE, shuffles, 16 minibatch steps);
- floor `env`: the same wrapped, vectorised env stepped 512 times with random actions;
- floor `bare update`: 16 steps of `jax.grad` of a squared loss on the same actor and
  critic (minibatches of 128) with optax Adam: the arithmetic a minibatch needs at least.

SAC
- `iteration`: `SAC.train_iteration` past `learning_starts` (one env step, one update);
- `update`: `SAC.update` alone on a fixed batch of 256 (critic, actor and temperature);
- floor `env`: the wrapped env stepped once with a random action;
- floor `bare update`: two steps of `jax.grad` of squared losses on the same twin critics
  and actor with optax Adam (SAC's update takes a critic step and an actor step).

The gap between `iteration` and the sum of the floors is what the library adds. Run
``python benchmarks/iteration_profile.py`` (about 3 minutes on 2 cores); writes
``benchmarks/results/iteration_profile.md``.
"""

from __future__ import annotations

import time

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax

from _report import Report, parser, table
from eqxrl.agents import PPO, SAC, Clock
from eqxrl.components import Sample, Transition


def timed(fn, arg, repeats: int, n: int) -> np.ndarray:
    """`[wall, process CPU]` seconds of `fn(arg)` (compiled) per repetition, each the min over `repeats`."""
    compiled = jax.jit(fn).lower(arg).compile()
    jax.block_until_ready(compiled(arg))
    best = np.full(2, np.inf)
    for _ in range(repeats):
        t, c = time.perf_counter(), time.process_time()
        jax.block_until_ready(compiled(arg))
        best = np.minimum(best, [time.perf_counter() - t, time.process_time() - c])
    return best / n


def scan(body, n):
    """`x -> lax.scan` of `body` `n` times (the carry threaded, outputs dropped)."""
    return lambda x: jax.lax.scan(lambda c, _: (body(c), None), x, None, length=n)[0]


def clock(iteration: int = 0, total: int = 1000) -> Clock:
    return Clock(jnp.asarray(iteration, jnp.int32), jnp.asarray(total, jnp.int32))


def bare_adam(nets, loss, batch, steps: int):
    """`steps` of `jax.grad(loss)` and optax Adam on the arrays of `nets` (no clipping, no extras)."""
    params, static = eqx.partition(nets, eqx.is_inexact_array)
    tx = optax.adam(3e-4)

    def step(carry):
        p, s = carry
        g = jax.grad(lambda p: loss(eqx.combine(p, static), batch))(p)
        u, s = tx.update(g, s, p)
        return optax.apply_updates(p, u), s

    return scan(step, steps), (params, tx.init(params))


def profile_ppo(n: int, repeats: int) -> dict[str, np.ndarray]:
    agent = PPO("CartPole-v1", anneal_lr=False, grad_clip="value")
    state = agent.init(jax.random.key(0))
    out = {}
    out["iteration"] = timed(scan(lambda s: agent.train_iteration(s, clock())[0], n), state, repeats, n)
    out["rollout"] = timed(scan(lambda s: agent._collect(s)[0], n), state, repeats, n)
    env = agent.train_env

    def env_step(carry):
        env_state, key = carry
        key, a_key, s_key = jax.random.split(key, 3)
        action = jax.random.randint(a_key, (agent.num_envs,), 0, 2)
        return env.step(s_key, env_state, action)[0], key

    steps = agent.rollout_length
    out["floor: env"] = timed(scan(env_step, n * steps), (state.env_state, jax.random.key(1)), repeats, n)
    mb = agent.steps_per_iteration // agent.num_minibatches
    x = jax.random.normal(jax.random.key(2), (mb, agent.obs_size))

    def loss(nets, x):
        actor, critic = nets
        return jnp.mean(actor(x).logits ** 2) + jnp.mean(critic(x) ** 2)

    updates = agent.num_epochs * agent.num_minibatches
    fn, arg = bare_adam((state.actor, state.critic), loss, x, n * updates)
    out["floor: bare update"] = timed(fn, arg, repeats, n)
    out["update"] = out["iteration"] - out["rollout"]
    return out


def profile_sac(n: int, repeats: int) -> dict[str, np.ndarray]:
    agent = SAC("Pendulum-v1")
    state = agent.init(jax.random.key(0))
    late = clock(agent.learning_starts, 10 * agent.learning_starts)  # past learning_starts: every step updates
    out = {"iteration": timed(scan(lambda s: agent.train_iteration(s, late)[0], n), state, repeats, n)}
    b = agent.batch_size
    obs = jax.random.normal(jax.random.key(1), (b, agent.obs_size))
    act = jax.random.uniform(jax.random.key(2), (b, agent.action_size), minval=-1.0, maxval=1.0)
    data = Transition(obs=obs, action=act, reward=jnp.ones((b,)), discount=jnp.full((b,), 0.99), next_obs=obs)
    batch = Sample(data, jnp.arange(b, dtype=jnp.int32), jnp.ones((b,)))

    def update(carry):
        learner, key = carry
        key, k = jax.random.split(key)
        return agent.update(learner, batch, k, jnp.asarray(1, jnp.int32), jnp.asarray(0.5))[0], key

    out["update"] = timed(scan(update, n), (state.learner, jax.random.key(3)), repeats, n)
    env = agent.train_env

    def env_step(carry):
        env_state, key = carry
        key, a_key, s_key = jax.random.split(key, 3)
        action = jax.random.uniform(a_key, (agent.num_envs, agent.action_size), minval=-2.0, maxval=2.0)
        return env.step(s_key, env_state, action)[0], key

    out["floor: env"] = timed(scan(env_step, n), (state.env_state, jax.random.key(4)), repeats, n)
    learner = state.learner

    def loss(nets, batch):
        actor, critics = nets
        obs, act = batch
        return jnp.mean(critics(obs, act) ** 2) + jnp.mean(actor(obs).mode() ** 2)

    fn, arg = bare_adam((learner.actor, learner.critic), loss, (obs, act), 2 * n)
    out["floor: bare update"] = timed(fn, arg, repeats, n)
    return out


def main(argv=None) -> None:
    p = parser(__doc__, "iteration_profile", quick="fewer, shorter timings (a smoke test)")
    p.add_argument("--iterations", type=int, default=64)
    p.add_argument("--repeats", type=int, default=7)
    a = p.parse_args(argv)
    report = Report(__file__, argv)
    n, repeats = (8, 2) if a.quick else (a.iterations, a.repeats)
    results = {"PPO CartPole-v1": profile_ppo(n, repeats), "SAC Pendulum-v1": profile_sac(n * 4, repeats)}
    lines = report.header("Where a training iteration's time goes (per iteration)")
    lines += [f"- {n} iterations per timed scan (SAC: {4 * n}), minimum of {repeats} timings; see the script's docstring", ""]
    for name, r in results.items():
        r = {**r, "floors together (env + bare update)": r["floor: env"] + r["floor: bare update"]}
        it = r["iteration"]
        rows = [[k, f"{1e3 * v[0]:.3f}", f"{1e3 * v[1]:.3f}", f"{v[0] / it[0]:.2f}"] for k, v in r.items()]
        header = ["part", "wall ms per iteration", "process-CPU ms", "share of iteration (wall)"]
        lines += [f"## {name}", "", *table(header, rows), ""]
        floor = r["floors together (env + bare update)"]
        lines.append(f"The iteration costs {it[0] / floor[0]:.2f}x its floors in wall time ({it[1] / floor[1]:.2f}x in CPU time).")
        lines.append("")
    report.emit("\n".join(lines), a.out)


if __name__ == "__main__":
    main()
