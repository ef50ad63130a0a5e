"""Where Rainbow's extra cost over DQN goes, part by part: process-CPU microseconds per gradient update
of DQN, of DQN with each of Rainbow's parts alone and of the full Rainbow composition, the pieces of
Rainbow's update in isolation, and prototypes of cheaper equivalent formulations.

Arms (every one ``DQN("Breakout-MinAtar", critic_torso=CNNTorso.minatar(), ...)``, DQN's defaults
otherwise: batch 256, 0.5 updates per env step, 10 envs, buffer 50,000, double Q-learning):
``dqn``; each of Rainbow's parts alone: ``head="dueling"``, ``head="categorical"`` (C51), ``noisy=True``,
``prioritized=True``, ``n_step=3``; and ``rainbow`` (``rainbow_dqn.py``'s ``RAINBOW``:
``head="dueling_categorical", noisy=True, double=True, prioritized=True, n_step=3, eps_start=0,
eps_end=0``).

How (as ``_offpolicy_breakdown.py``): every measurement is one jitted ``lax.scan`` of many repetitions
(a fresh key, or a changed input, per repetition, so nothing is loop-invariant), called once to warm up,
then timed ``--reps`` times; the minimum process-CPU time (``time.process_time``, all threads) over
``--rounds`` interleaved rounds, divided by the repetitions. Each arm's state is first trained through
its ``learning_starts`` (5,000 env steps of random actions) by ``agent.train_iteration`` itself.

1. **Update step** (per gradient update): what ``AbstractOffPolicyAgent.train_iteration``'s
   ``do_updates`` runs per update, copied here: ``buffer.sample`` (PER's beta annealing),
   ``batch_for_update`` (n-step reward and discount), ``agent.update`` (the learner, its target update
   included) and ``buffer.update_priorities``, on the warmed state; also ``agent.update`` alone on one
   fixed sampled batch.
2. **Full iteration** (per env step): ``agent.train_iteration`` after warm-up (collect 10 env steps,
   add them to the buffer, 5 update steps), ``--iterations`` per scan; "collection" is the
   difference of that and 5 update steps.
3. **Pieces of Rainbow's update**, each alone on Rainbow's warmed state or one fixed batch from it:
   PER sample (against the uniform buffer's on DQN's state), PER priority update, PER add of one env
   step (10 transitions), the C51 target (``categorical_q_target``) and its projection
   (``categorical_l2_project``), the noise draw of the noisy layers (``sample_noise``, three per
   update: online, target, next-action ranking), the loss's forward and backward with the target
   held fixed (Rainbow's head against DQN's), and the target's forward passes.
4. **Prototypes** (written here, not in eqxrl): a cheaper formulation of a piece, timed beside the
   current one, its numbers compared with ``np.testing``: C51's projection in O(atoms) per row
   instead of the pairwise O(atoms^2), and the arm ``rainbow+O(n)-projection``, Rainbow with it.

The scans that carry a buffer state or a network donate it (as ``train`` donates its state): without
donation each call copies the 160 MB of stored observations (50,000 x 2 x 400 float32), which adds
~2 ms per update to a 40-update scan and would be charged to the update.

Run ``python benchmarks/rainbow_parts.py`` (about 4 minutes on 2 shared CPU cores; ``--arms``,
``--rounds``, ``--reps``).
"""

from __future__ import annotations

import math
import sys
import time

import eqxrl  # noqa: F401  (first, so that it chooses its CPU devices, as everywhere)
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array

from _report import Report, parser, table

ENV = "Breakout-MinAtar"
RAINBOW = dict(head="dueling_categorical", noisy=True, double=True, prioritized=True, n_step=3, eps_start=0.0, eps_end=0.0)
ARMS = {
    "dqn": {},
    "dueling": dict(head="dueling"),
    "categorical": dict(head="categorical"),
    "noisy": dict(noisy=True),
    "prioritized": dict(prioritized=True),
    "n_step=3": dict(n_step=3),
    "rainbow": RAINBOW,
    "rainbow+O(n)-projection": RAINBOW,
}
PROTOTYPE_ARMS = ("rainbow+O(n)-projection",)
N_UPDATES = 40  # update steps per timed scan
N_PIECE = 200  # repetitions per timed scan of a piece


def make(arm: str):
    from eqxrl.agents import DQN
    from eqxrl.components import CNNTorso

    cls = _prototype_dqn() if arm in PROTOTYPE_ARMS else DQN
    return cls(ENV, critic_torso=CNNTorso.minatar(), **ARMS[arm])


def _prototype_dqn():
    """Prototype fix (here, not in eqxrl): DQN whose C51 target projects with `project_linear_exact`."""
    from eqxrl.agents import DQN
    from eqxrl.components import categorical_q_loss, sample_noise

    class _DQNLinearProjection(DQN):
        def categorical_update(self, learner, batch, progress, updates, keys):
            # `DQN.categorical_update` with `categorical_q_target`'s projection replaced (no loss terms).
            data, atoms = batch.data, learner.q.atoms
            online_key, target_key, next_key = keys
            draw = lambda q, k: sample_noise(q, k) if self.noisy else q  # noqa: E731
            target_q = draw(learner.target_q, target_key)
            next_logits = target_q.logits(self.layout.split(data.next_obs)[0])
            selector = self.q_values(draw(learner.q, next_key) if self.double else target_q, data.next_obs)
            target = jax.lax.stop_gradient(q_target_linear(data.reward, data.discount, next_logits, selector, atoms))

            def loss_fn(q):
                logits = draw(q, online_key).logits(self.layout.split(data.obs)[0])
                per_sample = categorical_q_loss(logits, data.action, target)
                return jnp.mean(batch.weights * per_sample), per_sample

            (loss, per_sample), grads = eqx.filter_value_and_grad(loss_fn, has_aux=True)(learner.q)
            q_mean = jnp.mean(jnp.sum(target * atoms, axis=-1))
            metrics = {"q_loss": loss, "q_mean": q_mean, "epsilon": self.epsilon(progress)}
            return self.step_q(learner, grads, updates, progress), per_sample, metrics

    return _DQNLinearProjection


def q_target_linear(reward, discount, next_logits, next_selector, atoms):
    """`categorical_q_target` (its checks left out) with `project_linear_exact` for the projection."""
    best = jnp.argmax(next_selector, axis=-1)
    probs = jax.nn.softmax(jnp.take_along_axis(next_logits, best[:, None, None], axis=1)[:, 0], axis=-1)
    z = jnp.reshape(reward, (-1, 1)) + jnp.reshape(discount, (-1, 1)) * atoms
    return project_linear_exact(z, probs, atoms)


class Job(eqx.Module):
    """A timed scan: `fn(*args)` stands for `count` repetitions; with `chain`, `fn` donates its
    arguments (as `train` donates its state: no copy of the 160 MB of stored observations per call)
    and `chain(out)` gives the next call's."""

    fn: object = eqx.field(static=True)
    args: tuple
    count: int = eqx.field(static=True)
    chain: object = eqx.field(static=True, default=None)


def cpu_seconds(job: Job, reps: int) -> tuple[float, Job]:
    """Minimum process-CPU seconds of `reps` calls of `job` (a warm-up call first), and the job with
    its arguments for the next call (the outputs where it donates them)."""
    args, best = job.args, math.inf
    for i in range(reps + 1):
        c0 = time.process_time()
        out = jax.block_until_ready(job.fn(*args))
        if i:
            best = min(best, time.process_time() - c0)
        if job.chain is not None:
            args = job.chain(out, args)
    return best, Job(job.fn, args, job.count, job.chain)


def own(tree):
    """A copy of `tree`'s arrays, for a job that donates them."""
    return jax.tree.map(lambda x: jnp.copy(x) if eqx.is_array(x) else x, tree)


# ============================================================================ the arms' programs
def iterations_fn(agent, n: int):
    """`n` training iterations from iteration `start` (an argument: one program for warm-up and timing)."""
    from eqxrl.agents import Clock

    total = jnp.asarray(10**6, jnp.int32)

    @eqx.filter_jit(donate="all")
    def run(state, start):
        def body(s, i):
            return agent.train_iteration(s, Clock(start + i, total))

        return jax.lax.scan(body, state, jnp.arange(n, dtype=jnp.int32))[0], start

    return run


def update_steps_fn(agent, n: int):
    """`n` update steps exactly as `train_iteration`'s `do_updates` runs them (progress 0.5)."""
    buffer = agent.replay_buffer
    progress = jnp.asarray(0.5, jnp.float32)

    @eqx.filter_jit(donate="all")
    def run(state, key):
        def one(carry, k):
            learner, buffer_state, updates = carry
            sample_key, update_key = jax.random.split(k)
            beta = agent.per_beta + (1.0 - agent.per_beta) * progress
            batch = agent.batch_for_update(buffer.sample(buffer_state, sample_key, agent.batch_size, beta), state.obs_stats)
            learner, td, metrics = agent.update(learner, batch, update_key, updates, progress)
            buffer_state = buffer.update_priorities(buffer_state, batch.indices, td)
            return (learner, buffer_state, updates + 1), metrics["q_loss"]

        (learner, buffer_state, updates), losses = jax.lax.scan(
            one, (state.learner, state.buffer, state.updates), jax.random.split(key, n)
        )
        return eqx.tree_at(lambda s: (s.learner, s.buffer, s.updates), state, (learner, buffer_state, updates)), key

    return run


def fixed_batch(agent, state, key=jax.random.key(7)):
    """One batch as `update` receives it, sampled from the warmed buffer."""
    sample = agent.replay_buffer.sample(state.buffer, key, agent.batch_size, 0.7)
    return agent.batch_for_update(sample, state.obs_stats)


def learner_update_fn(agent, batch, n: int):
    """`agent.update` alone, `n` times on one fixed batch (learner carried, fresh key each)."""
    progress = jnp.asarray(0.5, jnp.float32)

    @eqx.filter_jit(donate="all")
    def run(learner, key):
        def one(carry, ik):
            learner, updates = carry
            i, k = ik
            # The observations scaled by 1 + 1e-6 i: a constant batch would let XLA hoist the
            # convolution's patches of `obs` and `next_obs` (and more) out of the loop.
            data = batch.data
            b = eqx.tree_at(lambda b: (b.data.obs, b.data.next_obs), batch, (data.obs * (1 + 1e-6 * i), data.next_obs * (1 + 1e-6 * i)))
            learner, td, m = agent.update(learner, b, k, updates, progress)
            return (learner, updates + 1), m["q_loss"] + jnp.sum(td)

        xs = (jnp.arange(n, dtype=jnp.float32), jax.random.split(key, n))
        (learner, _), _ = jax.lax.scan(one, (learner, jnp.asarray(0, jnp.int32)), xs)
        return learner, key

    return run


def warm_state(agent, chunk: int):
    """The state after `learning_starts` env steps (random actions) by `train_iteration`, and the
    iterations program (compiled by the warm-up) with the first iteration after it."""
    state = eqx.filter_jit(agent.init)(jax.random.key(0))
    run = iterations_fn(agent, chunk)
    n_warm = -(-(agent.learning_starts - (agent.n_step - 1) * agent.num_envs) // agent.steps_per_iteration)
    start = 0
    while start < n_warm:  # (the last chunk may hold a few learning iterations)
        state, _ = run(state, jnp.asarray(start, jnp.int32))
        start += chunk
    jax.block_until_ready(state)
    return state, run, start


# ============================================================================ prototypes
def project_linear(z_p, probs, z_q):
    """Prototype: C51's projection onto an evenly spaced support in O(kq + kp) per row instead of the
    O(kq * kp) pairwise form: each clipped atom's position b = (z - z_q[0]) / dz on the support gives
    mass (1 - frac) to atom floor(b) and frac to floor(b) + 1, summed by one-hot matmul-free scatter."""
    kq = z_q.shape[0]
    dz = (z_q[-1] - z_q[0]) / (kq - 1)
    b = (jnp.clip(z_p, z_q[0], z_q[-1]) - z_q[0]) / dz  # (batch, kp) in [0, kq - 1]
    lo = jnp.clip(jnp.floor(b), 0, kq - 1)
    frac = b - lo
    lo = lo.astype(jnp.int32)
    hi = jnp.minimum(lo + 1, kq - 1)
    rows = jnp.arange(b.shape[0])[:, None]
    out = jnp.zeros(b.shape[:1] + (kq,), probs.dtype)
    out = out.at[rows, lo].add(probs * (1.0 - frac))
    return out.at[rows, hi].add(probs * frac)


def project_linear_exact(z_p, probs, z_q):
    """Prototype: the O(kq + kp) projection with `categorical_l2_project`'s own weights: each clipped
    atom's lower neighbour `lo` (`z_q[lo] <= z < z_q[lo + 1]`, found from the even spacing and then
    checked against `z_q` itself) and `lo + 1` get `clip(1 - |z - z_q[i]| / spacing_i, 0, 1)` with the
    same per-atom spacings and the same float operations as the pairwise form; the other atoms' weights
    there are 0 (or round-off of 0), so only the order of the sum differs."""
    kq = z_q.shape[0]
    d_pos = jnp.roll(z_q, -1) - z_q
    d_neg = z_q - jnp.roll(z_q, 1)
    inv_pos = jnp.where(d_pos > 0, 1.0 / jnp.where(d_pos > 0, d_pos, 1.0), 0.0)
    inv_neg = jnp.where(d_neg > 0, 1.0 / jnp.where(d_neg > 0, d_neg, 1.0), 0.0)
    z = jnp.clip(z_p, z_q[0], z_q[-1])
    lo = jnp.clip(jnp.floor((z - z_q[0]) * ((kq - 1) / (z_q[-1] - z_q[0]))), 0, kq - 2).astype(jnp.int32)
    lo = jnp.clip(lo - (z_q[lo] > z), 0, kq - 2)
    lo = jnp.clip(lo + (z_q[lo + 1] <= z), 0, kq - 2)

    def weight(i):
        delta = z - z_q[i]
        above = (delta >= 0.0).astype(delta.dtype)
        scaled = above * delta * inv_pos[i] - (1.0 - above) * delta * inv_neg[i]
        return jnp.clip(1.0 - scaled, 0.0, 1.0)

    rows = jnp.arange(z.shape[0])[:, None]
    out = jnp.zeros(z.shape[:1] + (kq,), probs.dtype)
    out = out.at[rows, lo].add(weight(lo) * probs)
    return out.at[rows, lo + 1].add(weight(lo + 1) * probs)


def project_abs(z_p, probs, z_q):
    """Prototype: the pairwise form with one reciprocal spacing (`clip(1 - |z_p - z_q| / dz, 0, 1)`),
    equal to `categorical_l2_project` for an evenly spaced support up to float32 round-off in the
    spacing."""
    kq = z_q.shape[0]
    inv = (kq - 1) / (z_q[-1] - z_q[0])
    delta = jnp.clip(z_p, z_q[0], z_q[-1])[..., None, :] - z_q[:, None]
    return jnp.sum(jnp.clip(1.0 - jnp.abs(delta) * inv, 0.0, 1.0) * probs[..., None, :], axis=-1)


# ============================================================================ pieces of Rainbow
def _scan_sum(body, n: int):
    """A jitted scan of `body(args, i, key) -> scalar` over `n` steps (a fresh key and index each),
    summed: nothing loop-invariant but what `body` holds fixed on purpose."""

    @eqx.filter_jit
    def run(*args):
        def one(c, ik):
            i, k = ik
            return c + body(args, i, k), None

        keys = jax.random.split(jax.random.key(3), n)
        return jax.lax.scan(one, jnp.zeros(()), (jnp.arange(n, dtype=jnp.float32), keys))[0]

    return run


def _scan_carry(step, n: int):
    """A jitted scan of `step(carry, i, key) -> carry` over `n` steps, the carry (a buffer state, a
    network) donated and chained from call to call, as `train` carries it."""

    @eqx.filter_jit(donate="all")
    def run(carry):
        def one(c, ik):
            return step(c, *ik), None

        keys = jax.random.split(jax.random.key(3), n)
        return jax.lax.scan(one, carry, (jnp.arange(n, dtype=jnp.float32), keys))[0]

    return run


def _total(tree) -> Array:
    return sum(jnp.sum(x) for x in jax.tree.leaves(tree) if eqx.is_array(x) and jnp.issubdtype(x.dtype, jnp.floating))


def _sgd(q, g, lr=1e-6):
    """The network moved a little along `g`: the next repetition's forward depends on this one."""
    return eqx.apply_updates(q, jax.tree.map(lambda x: -lr * x, g))


def piece_jobs(rain, rstate, dqn, dstate):
    """Jobs `name -> Job`, each a scan of `count` repetitions of one piece; and the prototypes' checks."""
    from eqxrl.components import categorical_l2_project, categorical_q_loss, categorical_q_target, sample_noise, select_q

    n = N_PIECE
    chain = lambda out, args: (out,)  # noqa: E731
    jobs = {}
    for label, agent, state in (("PER", rain, rstate), ("uniform (DQN)", dqn, dstate)):
        buffer, bs = agent.replay_buffer, agent.batch_size
        body = lambda a, i, k, buffer=buffer, bs=bs: _total(buffer.sample(a[0], k, bs, 0.7))  # noqa: E731
        jobs[f"{label}: sample 256 (incl. gathering the transitions)"] = Job(_scan_sum(body, n), (state.buffer,), n)
        body = lambda a, i, k, buffer=buffer, bs=bs: jnp.sum(buffer.sample(a[0], k, bs, 0.7).indices)  # noqa: E731
        jobs[f"{label}: sample 256, indices (and weights) only"] = Job(_scan_sum(body, n), (state.buffer,), n)

    rbuf, bs = rain.replay_buffer, rain.batch_size
    td0 = jax.random.normal(jax.random.key(4), (bs,))
    step = lambda b, i, k: rbuf.update_priorities(b, jax.random.randint(k, (bs,), 0, rbuf.capacity), td0 * (1 + i))  # noqa: E731
    jobs["PER: update_priorities of 256 random slots"] = Job(_scan_carry(step, n), (own(rstate.buffer),), n, chain)
    body = lambda a, i, k: jnp.sum(jax.random.randint(k, (bs,), 0, rbuf.capacity)) + jnp.sum(td0 * (1 + i))  # noqa: E731
    jobs["(drawing the 256 random slots alone, to subtract)"] = Job(_scan_sum(body, n), (rstate.buffer.size,), n)
    for label, agent, state in (("PER", rain, rstate), ("uniform (DQN)", dqn, dstate)):
        buffer = agent.replay_buffer
        ex = jax.tree.map(lambda x: x[: agent.num_envs], state.buffer.data)
        step = lambda b, i, k, buffer=buffer, ex=ex: buffer.add(b, ex)  # noqa: E731
        jobs[f"{label}: add one env step (10 transitions), per env step"] = Job(
            _scan_carry(step, n), (own(state.buffer),), n * agent.num_envs, chain
        )

    # C51's target and projection, on the fixed batch's real next-state logits.
    batch = fixed_batch(rain, rstate)
    learner, data = rstate.learner, batch.data
    atoms = learner.q.atoms
    next_logits = learner.target_q.logits(rain.layout.split(data.next_obs)[0])
    selector = rain.q_values(learner.q, data.next_obs)
    body = lambda a, i, k: jnp.sum(categorical_q_target(a[0] + 1e-3 * i, data.discount, next_logits, selector, atoms)[:, 0])  # noqa: E731
    jobs["C51: categorical_q_target (argmax, softmax, projection)"] = Job(_scan_sum(body, n), (data.reward,), n)
    probs = jax.nn.softmax(next_logits[:, 0], axis=-1)
    z = data.reward[:, None] + data.discount[:, None] * atoms
    for label, project in (
        ("C51: categorical_l2_project alone (eqxrl, pairwise (256, 51, 51))", categorical_l2_project),
        ("prototype: projection, pairwise with one spacing", project_abs),
        ("prototype: projection, O(n) two-neighbour scatter", project_linear),
        ("prototype: projection, O(n) scatter with the pairwise form's weights", project_linear_exact),
    ):
        body = lambda a, i, k, project=project: jnp.sum(project(a[0] + 1e-3 * i, a[1], atoms)[:, 0])  # noqa: E731
        jobs[label] = Job(_scan_sum(body, n), (z, probs), n)

    # The noisy layer's draws: three per update (online, target, next-action ranking).
    def noise_body(a, i, k):
        k1, k2, k3 = jax.random.split(k, 3)
        trees = (sample_noise(a[0].q, k1), sample_noise(a[0].target_q, k2), sample_noise(a[0].q, k3))
        return sum(_total(t.out) for t in trees)

    jobs["noisy: 3 draws of the noisy layer (sample_noise), per update"] = Job(_scan_sum(noise_body, n), (learner,), n)

    # Forward + backward of the loss (the target held fixed), the network moved by each step's
    # gradient so that nothing repeats: Rainbow's head (noise drawn) against DQN's.
    target = jax.lax.stop_gradient(categorical_q_target(data.reward, data.discount, next_logits, selector, atoms))
    obs = rain.layout.split(data.obs)[0]

    def rain_step(q, i, k):
        def loss(q):
            logits = sample_noise(q, k).logits(obs * (1 + 1e-6 * i))
            return jnp.mean(batch.weights * categorical_q_loss(logits, data.action, target))

        return _sgd(q, eqx.filter_grad(loss)(q))

    dbatch = fixed_batch(dqn, dstate)
    ddata = dbatch.data
    dobs = dqn.layout.split(ddata.obs)[0]
    dtarget = jax.random.normal(jax.random.key(5), (dqn.batch_size,))

    def dqn_step(q, i, k):
        def loss(q):
            return jnp.mean(0.5 * jnp.square(select_q(q(dobs * (1 + 1e-6 * i)), ddata.action) - dtarget))

        return _sgd(q, eqx.filter_grad(loss)(q))

    jobs["Rainbow: loss forward + backward, target fixed (noise draw incl.)"] = Job(_scan_carry(rain_step, n), (own(learner.q),), n, chain)
    jobs["DQN: loss forward + backward, target fixed"] = Job(_scan_carry(dqn_step, n), (own(dstate.learner.q),), n, chain)

    # The target's forward passes (no gradient) at next states (varied by each step): the target
    # net's logits and the online net's expected Q (argmax), noise drawn; DQN's two Q forwards.
    next_obs = rain.layout.split(data.next_obs)[0]

    def rain_fwd(a, i, k):
        k1, k2 = jax.random.split(k)
        x = next_obs * (1.0 + 1e-6 * i)
        return jnp.sum(sample_noise(a[0].target_q, k1).logits(x)[:, 0, 0]) + jnp.sum(sample_noise(a[0].q, k2)(x)[:, 0])

    dnext = dqn.layout.split(ddata.next_obs)[0]

    def dqn_fwd(a, i, k):
        x = dnext * (1.0 + 1e-6 * i)
        return jnp.sum(a[0].target_q(x)[:, 0]) + jnp.sum(a[0].q(x)[:, 0])

    jobs["Rainbow: the target's 2 forward passes (noise drawn)"] = Job(_scan_sum(rain_fwd, n), (learner,), n)
    jobs["DQN: the target's 2 forward passes"] = Job(_scan_sum(dqn_fwd, n), (dstate.learner,), n)

    # The prototypes' numbers: on the fixed batch's real target, and on 4,096 random rows (rewards
    # N(0, 3^2), 10% terminal, logits N(0, 2^2)).
    k1, k2, k3 = jax.random.split(jax.random.key(6), 3)
    rz = (jax.random.normal(k1, (4096,)) * 3)[:, None] + jnp.where(jax.random.uniform(k2, (4096,)) < 0.1, 0.0, 0.99**3)[:, None] * atoms
    rprobs = jax.nn.softmax(2 * jax.random.normal(k3, (4096, atoms.shape[0])), axis=-1)
    checks = {}
    for label, project in (
        ("pairwise with one spacing", project_abs), ("O(n) two-neighbour scatter", project_linear),
        ("O(n) scatter with the pairwise form's weights", project_linear_exact),
    ):
        parts = []
        for where, zz, pp in (("real batch (256 x 51)", z, probs), ("random rows (4,096 x 51)", rz, rprobs)):
            ref, got = categorical_l2_project(zz, pp, atoms), project(zz, pp, atoms)
            try:
                np.testing.assert_allclose(np.asarray(got), np.asarray(ref), rtol=0, atol=1e-6)
                ok = "`assert_allclose(atol=1e-6)` passes"
            except AssertionError:
                ok = "`assert_allclose(atol=1e-6)` FAILS"
            same = float(jnp.mean(got == ref))
            exact = "bit-identical" if same == 1.0 else f"{100 * same:.1f}% of entries bit-identical"
            parts.append(f"{where}: {exact}, max abs diff {float(jnp.max(jnp.abs(got - ref))):.1e}, {ok}")
        checks[label] = "; ".join(parts)
    return jobs, checks


def attribution(pieces: dict, upd: dict) -> list[list[str]]:
    """Rows: Rainbow's extra cost per update over DQN's, piece by piece, and their sum against the
    measured difference of the two arms' update steps."""
    get = pieces.get
    parts = {
        "loss forward + backward (C51 dueling output layer, (3 + 1) x 51 = 204 wide vs 3; softmax, "
        "cross-entropy; one noise draw)": get("Rainbow: loss forward + backward, target fixed (noise draw incl.)")
        - get("DQN: loss forward + backward, target fixed"),
        "the target's 2 forward passes (the same, no gradient; two noise draws)": get(
            "Rainbow: the target's 2 forward passes (noise drawn)") - get("DQN: the target's 2 forward passes"),
        "C51 target (`categorical_q_target`: argmax, softmax, projection)": get("C51: categorical_q_target (argmax, softmax, projection)"),
        "PER sample less uniform sample": get("PER: sample 256 (incl. gathering the transitions)")
        - get("uniform (DQN): sample 256 (incl. gathering the transitions)"),
        "PER priority update (less drawing its random slots)": get("PER: update_priorities of 256 random slots")
        - get("(drawing the 256 random slots alone, to subtract)"),
    }
    rows = [[k, f"{v:,.0f}"] for k, v in parts.items()]
    rows.append(["**sum of the parts**", f"**{sum(parts.values()):,.0f}**"])
    if "rainbow" in upd and "dqn" in upd:
        rows.append(["**measured: update step, rainbow less dqn**", f"**{upd['rainbow'] - upd['dqn']:,.0f}**"])
    return rows


# ============================================================================ main
def main(argv=None) -> None:
    report = Report(__file__, argv)
    p = parser(__doc__, "rainbow_parts")
    p.add_argument("--arms", default=",".join(ARMS), help=f"comma-separated among {', '.join(ARMS)}")
    p.add_argument("--rounds", type=int, default=2, help="interleaved rounds, minimum reported (default 2)")
    p.add_argument("--reps", type=int, default=2, help="timed calls per round (default 2)")
    p.add_argument("--iterations", type=int, default=10, help="training iterations per timed scan (default 10)")
    p.add_argument("--no-pieces", action="store_true", help="skip the pieces of Rainbow's update")
    args = p.parse_args(argv)
    arms = args.arms.split(",")
    assert set(arms) <= set(ARMS), arms

    agents, states, jobs = {}, {}, {}
    for arm in arms:
        c0 = time.process_time()
        agent = make(arm)
        state, run, start = warm_state(agent, args.iterations)
        agents[arm], states[arm] = agent, state
        batch = fixed_batch(agent, state)
        upd = update_steps_fn(agent, N_UPDATES)
        lup = learner_update_fn(agent, batch, N_UPDATES)
        same = lambda out, args: out  # noqa: E731  (each returns its donated arguments' successors)
        jobs[(arm, "update step")] = Job(upd, own((state, jax.random.key(11))), N_UPDATES, same)
        jobs[(arm, "learner update only")] = Job(lup, own((state.learner, jax.random.key(12))), N_UPDATES, same)
        steps = args.iterations * agent.steps_per_iteration
        keep = arm in ("dqn", "rainbow")  # (the pieces and the prototypes' checks read these two states)
        jobs[(arm, "iteration")] = Job(run, (own(state) if keep else state, jnp.asarray(start, jnp.int32)), steps, same)
        if not keep:
            del states[arm]
        print(f"{arm}: warmed to iteration {start} in {time.process_time() - c0:.1f} CPU-s", flush=True)

    checks = {}
    pieces_run = not args.no_pieces and "rainbow" in states and "dqn" in states
    if pieces_run:
        pj, checks = piece_jobs(agents["rainbow"], states["rainbow"], agents["dqn"], states["dqn"])
        jobs.update({("piece", name): job for name, job in pj.items()})
    for proto in PROTOTYPE_ARMS:
        if proto in agents and "rainbow" in states:  # one update of each from the same learner, batch and key
            state = states["rainbow"]
            batch, key, zero, half = fixed_batch(agents["rainbow"], state), jax.random.key(13), jnp.asarray(0), jnp.asarray(0.5)
            (l1, td1, _), (l2, td2, _) = (eqx.filter_jit(agents[a].update)(state.learner, batch, key, zero, half) for a in ("rainbow", proto))
            diff = max(float(jnp.max(jnp.abs(a - b))) for a, b in zip(jax.tree.leaves(l1.q), jax.tree.leaves(l2.q)))
            try:
                np.testing.assert_allclose(np.asarray(td2), np.asarray(td1), rtol=1e-5, atol=1e-6)
                ok = "`assert_allclose(rtol=1e-5, atol=1e-6)` passes"
            except AssertionError:
                ok = "`assert_allclose(rtol=1e-5, atol=1e-6)` FAILS"
            checks[f"arm `{proto}` against `rainbow`, one update from the same learner, batch and key"] = (
                f"per-sample losses (PER priorities): {'bit-identical' if bool(jnp.all(td1 == td2)) else 'not bit-identical'}, "
                f"max abs diff {float(jnp.max(jnp.abs(td1 - td2))):.1e}, {ok}; Q-network parameters after the Adam step: "
                f"max abs diff {diff:.1e} (learning rate 1e-3)"
            )

    best = {name: math.inf for name in jobs}
    for r in range(args.rounds):
        order = list(jobs) if r % 2 == 0 else list(jobs)[::-1]
        for name in order:
            seconds, jobs[name] = cpu_seconds(jobs[name], args.reps)
            best[name] = min(best[name], 1e6 * seconds / jobs[name].count)
        print(f"round {r}: " + ", ".join(f"{k[0]}/{k[1][:20]} {v:,.0f}" for k, v in best.items()), flush=True)

    upd = {a: best[(a, "update step")] for a in arms}
    lup = {a: best[(a, "learner update only")] for a in arms}
    it = {a: best[(a, "iteration")] for a in arms}
    nupd = {a: agents[a].num_updates / agents[a].steps_per_iteration for a in arms}  # updates per env step
    base = "dqn" if "dqn" in arms else arms[0]
    rows = []
    for a in arms:
        coll = it[a] - nupd[a] * upd[a]
        rows.append([
            f"`{a}`", f"{upd[a]:,.0f}", f"{upd[a] / upd[base]:.2f}", f"{lup[a]:,.0f}", f"{upd[a] - lup[a]:,.0f}",
            f"{it[a]:,.0f}", f"{it[a] / it[base]:.2f}", f"{coll:,.0f}",
        ])  # fmt: skip

    lines = report.header(f"Rainbow's parts: where its extra cost over DQN goes ({ENV}, MinAtar CNN, batch 256)")
    lines += [
        f"- arms: `DQN({ENV!r}, critic_torso=CNNTorso.minatar(), **arm)`, DQN's defaults otherwise (batch 256, "
        "0.5 updates per env step, 10 envs, buffer 50,000); each state trained through `learning_starts` "
        "(5,000 random env steps) by `train_iteration` first",
        *(f"  - `{a}`: `{ARMS[a]}`" for a in arms),
        f"- process-CPU microseconds, minimum over {args.rounds} interleaved rounds of {args.reps} timed calls of "
        f"one jitted `lax.scan` ({N_UPDATES} update steps; {args.iterations} training iterations; {N_PIECE} "
        "repetitions of a piece), after a warm-up call",
        "",
        "## Per arm",
        "",
        "*update step*: per gradient update, what `train_iteration`'s `do_updates` runs (sample, n-step "
        "reward and discount, `agent.update` with its target update, `update_priorities`); *learner update "
        "only*: `agent.update` on one fixed sampled batch; *buffer*: their difference (sample + priority "
        "update + batch). *Iteration*: `train_iteration` after warm-up, per env step (0.5 update steps "
        "each); *collection*: iteration less 0.5 update steps.",
        "",
        *table(
            ["arm", "update step (us)", f"/ {base}", "learner update only (us)", "buffer (us)", "iteration, per env step (us)",
             f"/ {base}", "collection, per env step (us)"],
            rows,
        ),  # fmt: skip
    ]
    if checks and not pieces_run:
        lines += ["", *(f"- {k}: {v}" for k, v in checks.items())]
    if pieces_run:
        pieces = {name[1]: v for name, v in best.items() if name[0] == "piece"}
        lines += [
            "",
            "## Pieces of Rainbow's update (and DQN's counterparts)",
            "",
            "Microseconds per call of the piece (per update unless marked per env step), each alone in a scan.",
            "",
            *table(["piece", "us"], [[k, f"{v:,.1f}"] for k, v in pieces.items()]),
            "",
            "Rainbow's extra per update over DQN, from the pieces (each a difference of two rows above, or "
            "a row), against the measured difference of the *update step* column:",
            "",
            *table(["part", "us per update"], attribution(pieces, upd)),
            "",
            "Prototypes against eqxrl:",
            "",
            *(f"- {k}: {v}" for k, v in checks.items()),
        ]
    lines.append("")
    report.emit("\n".join(lines), args.out)


if __name__ == "__main__":
    sys.exit(main())
