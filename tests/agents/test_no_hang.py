"""No eqxrl program hangs: `jax.vmap(agent.init)`, `jax.vmap(make_train(...))` and `train` finish
for every agent at 1 to 32 keys; and a batch of no keys is refused with one line.

The hang these guard against (docs/architecture.md, "Programs that hang"): a LAPACK call with a
batch axis (a QR of the orthogonal initialisation under `vmap`) waits on a thread of XLA:CPU's
intra-op pool for tasks it queued on the same pool; with the concurrency-optimised scheduler
running several at once, every pool thread ends up waiting and the process sits idle forever.
Programs run in a subprocess (`no_hang_worker.py`, pinned to two CPUs, where the pool has two
threads), so a hang fails a test instead of stalling the suite. The subprocess keeps the suite's
compile settings (no optimisations, older fusion emitters): the hang reproduces under them
(`jax.vmap(PPO("CartPole-v1").init)` at 4 keys, before the fix), and they compile ~2.5x faster.
"""

import os
import pathlib
import re
import subprocess
import sys

import jax
import numpy as np
import pytest
from no_hang_worker import AGENTS

import eqxrl
from eqxrl.agents import PPO
from eqxrl.components.networks import orthogonal
from tiers import ci_subset

WORKER = pathlib.Path(__file__).parents[1] / "no_hang_worker.py"
COUNTS = (1, 2, 4, 8, 32)
# XLA flags that would hide the hang (the scheduler or the pool switched off): never passed on.
_HIDING = ("xla_cpu_enable_concurrency_optimized_scheduler", "xla_cpu_multi_thread_eigen")


def _worker(agents: str, programs: str, counts=COUNTS, timeout: float = 900, limit: float = 300) -> str:
    """Run `programs` of each of the comma-separated `agents` at each key count in one subprocess."""
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    env["XLA_FLAGS"] = " ".join(f for f in env.get("XLA_FLAGS", "").split() if not any(h in f for h in _HIDING))
    env["PYTHONPATH"] = os.pathsep.join([str(WORKER.parent.parent), *filter(None, [env.get("PYTHONPATH")])])
    args = [sys.executable, str(WORKER), agents, programs, ",".join(map(str, counts)), str(limit)]
    try:
        done = subprocess.run(args, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"{agents} {programs}: still running after {timeout} s; finished:\n{e.stdout or ''}")
    assert done.returncode == 0, f"{agents} {programs} (exit {done.returncode}):\n{done.stdout}\n{done.stderr[-3000:]}"
    finished = [line.split()[1:4] for line in done.stdout.splitlines() if line.startswith("ok ")]
    want = [[a, p, str(n)] for a in agents.split(",") for p in programs.split(",") for n in counts]
    assert finished == want, done.stdout
    return done.stdout


_BATCHED_LAPACK = re.compile(r'custom_call @(lapack_\w+)\([^\n]*?num_batch_dims = "([1-9]\d*)"')


def _batched_lapack_calls(lowered) -> list[tuple[str, str]]:
    """The LAPACK calls of a lowered program that carry a batch axis (none may)."""
    return sorted(set(_BATCHED_LAPACK.findall(lowered.as_text())))


def test_vmapped_orthogonal_draws_each_matrix_as_one_draw():
    # Under vmap the QRs loop over the keys (one LAPACK call per matrix): the same bits as
    # jax's initialiser drawn key by key, and no batched LAPACK call in the program.
    keys = jax.random.split(jax.random.key(0), 5)
    draw = jax.jit(jax.vmap(lambda k: [orthogonal(k, (40, 24), 0.5), orthogonal(k, (8, 30), 2.0)]))
    tall, wide = draw(keys)
    for i, k in enumerate(keys):
        np.testing.assert_array_equal(tall[i], jax.nn.initializers.orthogonal(0.5)(k, (40, 24), np.float32))
        np.testing.assert_array_equal(wide[i], jax.nn.initializers.orthogonal(2.0)(k, (8, 30), np.float32))
    assert _batched_lapack_calls(draw.lower(keys)) == []


@pytest.mark.slow  # (over 2 s in the fast tier: tests/tiers.py)
@pytest.mark.parametrize("name", ["ppo", "ippo", "sac"])
def test_vmapped_init_makes_no_batched_lapack_call(name):
    # PPO and IPPO are the reported hangs (IPPO vmaps its agents' init itself); SAC's twin critics
    # are an ensemble drawn under vmap, in eqxrl's own programs too. Lowered only, not compiled.
    agent = AGENTS[name]()
    keys = jax.random.split(jax.random.key(0), 4)
    assert _batched_lapack_calls(jax.jit(jax.vmap(agent.init)).lower(keys)) == []


@pytest.mark.slow
def test_vmapped_ppo_init_finishes_at_every_key_count():
    # The reproduction: before the fix, 4 keys hung with the process idle.
    _worker("ppo", "init", limit=120)


@pytest.mark.slow
def test_every_agent_vmapped_init_finishes_at_four_keys():
    # The key count at which the PPO and IPPO inits hung on 2 cores. The whole matrix
    # (three programs at 1 to 32 keys) is the exhaustive test below: 42 min of 2 cores, too long
    # for CI; that no program holds a batched LAPACK call (the cause) is checked for every agent's
    # three programs below, which covers every key count. Every agent in one subprocess (each
    # call has its own watchdog, which names the agent that hangs).
    _worker(",".join(sorted(AGENTS)), "init", counts=(4,), timeout=900)


@pytest.mark.slow
@pytest.mark.exhaustive
@pytest.mark.parametrize("name", sorted(AGENTS))
def test_every_program_finishes_at_every_key_count(name):
    _worker(name, "init,make_train,train", timeout=2400)


@pytest.mark.slow
@pytest.mark.parametrize("name", ci_subset(sorted(AGENTS), keep=("ppo", "dqn", "sac", "mpo")))
def test_no_program_makes_a_batched_lapack_call(name):
    agent = AGENTS[name]()
    keys = jax.random.split(jax.random.key(0), 4)
    train_fn = eqxrl.make_train(agent, agent.steps_per_iteration)
    for program in (jax.vmap(agent.init), jax.vmap(train_fn), train_fn):  # the last: train's path
        assert _batched_lapack_calls(jax.jit(program).lower(keys)) == [], program


SMALL = dict(num_envs=2, rollout_length=8, num_epochs=1, num_minibatches=1, hidden_sizes=(8,))
NO_KEYS = (
    "key must hold at least one key: shape () for one run or (n,) with n >= 1 for n seeds "
    "(jax.random.split(key, n)), got shape (0,)"
)


@pytest.mark.parametrize("how", ["train", "make_train", "jit(make_train)", "TrainFunction.init"])
def test_a_batch_of_no_keys_needs_at_least_one(how):
    agent = PPO("CartPole-v1", **SMALL)
    keys = jax.random.split(jax.random.key(0), 0)
    train_fn = eqxrl.make_train(agent, 16)
    call = {
        "train": lambda: eqxrl.train(agent, keys, 16, progress=False),
        "make_train": lambda: train_fn(keys),
        "jit(make_train)": lambda: jax.jit(train_fn)(keys),
        "TrainFunction.init": lambda: eqxrl.loop.TrainFunction(agent, 1).init(keys),
    }[how]
    with pytest.raises(ValueError) as info:
        call()
    # One line (under jit, JAX appends a note on its filtered traceback after it).
    assert str(info.value).split("\n--------------------\n")[0] == NO_KEYS
