"""PureJaxRL's PPO (``purejaxrl/ppo.py``) as a peer, for ``ppo_cartpole.py --purejaxrl DIR``.

PureJaxRL is a repository of scripts, not a package, so this adapter loads ``DIR/purejaxrl/ppo.py``
from a checkout of https://github.com/luchris429/purejaxrl (measured at commit ``31756b1``, 2024-09-09)
and runs its ``make_train`` as is, with two changes to the environment it runs in, none to its code:

- ``gymnax.make`` as seen by that module returns the env wrapped into the pre-1.0 five-tuple ``step``
  (``rejax_adapter.FiveTupleGymnaxEnv``; gymnax 1.0.1 returns six values, PureJaxRL unpacks five);
- ``purejaxrl/wrappers.py`` imports ``navix`` (for its MiniGrid wrapper) and ``brax`` (for its brax
  wrapper) at module level, neither of which CartPole uses; where one is not installed (navix here, both
  on the GPU machine) empty modules stand in for it during the import (`_stand_ins`).

Under jax 0.10.2 on CPU, PureJaxRL's program vmapped over 2-4 seeds at 4,096-16,384 env steps per seed
never finishes: its execution stalls with the process idle (its own code, unchanged; 1 seed at those
sizes and 3-32 seeds at 65,536 or more run normally). Switching off XLA:CPU's concurrency-optimised
scheduler (``XLA_FLAGS=--xla_cpu_enable_concurrency_optimized_scheduler=false``) or Eigen's thread pool
(``--xla_cpu_multi_thread_eigen=false``) lets it finish, which points at a deadlock in XLA's CPU
runtime; ``ppo_cartpole.py --quick`` uses 65,536 steps per seed for that reason. ``eqxrl.train`` has not
shown it in the test suite or the benchmarks; a hand-built program of eqxrl's pieces (``jax.vmap`` of
``PPO.train_iteration`` over 32 seeds in a scan) did (``results/ppo_cartpole.md``, notes).
A likely cause, found later (docs/architecture.md, "Programs that hang"): batched LAPACK QRs of a
vmapped orthogonal initialisation deadlock XLA:CPU's intra-op pool, and PureJaxRL initialises its
networks inside the vmapped function (not checked with gdb for PureJaxRL's program).

The training program is timed as PureJaxRL's README runs it: ``jax.jit(make_train(config))`` (one
seed) or ``jax.jit(jax.vmap(make_train(config)))`` (a batch of seeds), compiled ahead of time
(``.lower(key).compile()``, timed), then one timed call.
"""

from __future__ import annotations

import importlib.util
import sys
import types
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from _common import compile_and_run

_MODULES: dict[str, types.ModuleType] = {}


def load(checkout: str | Path) -> types.ModuleType:
    """PureJaxRL's ``ppo`` module from a checkout (the repository's root), loaded once per path."""
    root = Path(checkout).expanduser().resolve()
    path = root / "purejaxrl" / "ppo.py"
    if not path.is_file():
        raise FileNotFoundError(
            f"--purejaxrl must be a checkout of https://github.com/luchris429/purejaxrl; no {path}"
        )
    if str(path) in _MODULES:
        return _MODULES[str(path)]
    stand_ins = _stand_ins()
    sys.path.insert(0, str(path.parent))  # ppo.py: `from wrappers import ...`
    try:
        spec = importlib.util.spec_from_file_location("purejaxrl_ppo", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(path.parent))
        for name, stand_in in stand_ins.items():
            if sys.modules.get(name) is stand_in:
                del sys.modules[name]
    module.gymnax = _FiveTupleGymnax()
    _MODULES[str(path)] = module
    return module


# What `purejaxrl/wrappers.py` imports from packages that CartPole's PPO never calls into.
_UNUSED_IMPORTS = {
    "navix": {},
    "brax": {"envs": "brax.envs"},
    "brax.envs": {"wrappers": "brax.envs.wrappers"},
    "brax.envs.wrappers": {"training": "brax.envs.wrappers.training"},
    "brax.envs.wrappers.training": {"EpisodeWrapper": None, "AutoResetWrapper": None},
}


def _stand_ins() -> dict[str, types.ModuleType]:
    """Empty modules, registered in ``sys.modules``, for the top-level packages of `_UNUSED_IMPORTS`
    that are not installed (their attributes: the submodules, or None for a name imported from them)."""
    missing = {top for top in ("navix", "brax") if importlib.util.find_spec(top) is None}
    names = [n for n in _UNUSED_IMPORTS if n.split(".")[0] in missing]
    made = {n: types.ModuleType(n) for n in names}
    for n in names:
        for attr, sub in _UNUSED_IMPORTS[n].items():
            setattr(made[n], attr, made[sub] if sub else None)
        sys.modules.setdefault(n, made[n])
    return made


class _FiveTupleGymnax:
    """What PureJaxRL's module reads of ``gymnax``: ``make``, with the env in the five-tuple API."""

    @staticmethod
    def make(env_id: str):
        import gymnax

        from peers.rejax_adapter import FiveTupleGymnaxEnv

        env, params = gymnax.make(env_id)
        return FiveTupleGymnaxEnv(env), params


def config(env_id: str, total_timesteps: int, *, num_envs: int, num_minibatches: int, num_epochs: int, **h) -> dict:
    """PureJaxRL's CartPole configuration (its ``ppo.py``'s ``__main__``) with the given shape and
    hyperparameters; ``DEBUG`` off (no host callback)."""
    return {
        "LR": h["learning_rate"], "NUM_ENVS": num_envs, "NUM_STEPS": 128, "TOTAL_TIMESTEPS": total_timesteps,
        "UPDATE_EPOCHS": num_epochs, "NUM_MINIBATCHES": num_minibatches, "GAMMA": h["gamma"],
        "GAE_LAMBDA": h["gae_lambda"], "CLIP_EPS": h["clip_eps"], "ENT_COEF": h["ent_coef"],
        "VF_COEF": h["vf_coef"], "MAX_GRAD_NORM": h["max_grad_norm"], "ACTIVATION": "tanh",
        "ENV_NAME": env_id, "ANNEAL_LR": True, "DEBUG": False,
    }  # fmt: skip


def time_train(module, cfg: dict, key) -> tuple[object, dict]:
    """Compile and run ``make_train(cfg)`` (vmapped over a batch of keys): ``(output, timings)``, the
    timings with ``steps``, the env steps of all seeds (read from PureJaxRL's own step counter)."""
    train = module.make_train(dict(cfg))
    fn = jax.vmap(train) if key.ndim == 1 else train
    out, timings = compile_and_run(fn, key)
    timings["steps"] = steps_taken(out, cfg)
    return out, timings


def steps_taken(out: dict, cfg: dict) -> int:
    """Env steps of all seeds: the last iteration's ``timestep`` (steps per env, PureJaxRL's
    ``LogWrapper``) times the number of envs, summed over seeds."""
    last = np.asarray(out["metrics"]["timestep"])[..., -1, -1, :]  # (seeds..., envs) of the last step
    return int(np.sum(last[..., 0]) * cfg["NUM_ENVS"])


def network(module, env_id: str):
    """PureJaxRL's ``ActorCritic`` for `env_id` (tanh) and an observation of the env."""
    env, params = _FiveTupleGymnax.make(env_id)
    net = module.ActorCritic(env.action_space(params).n, activation="tanh")
    return net, jnp.zeros(env.observation_space(params).shape)


def param_counts(module, env_id: str) -> tuple[int, int]:
    """``(actor, critic)`` parameter counts: ``ActorCritic``'s first three dense layers are the actor's,
    the last three the critic's (its ``__call__`` builds them in that order)."""
    net, obs = network(module, env_id)
    params = jax.eval_shape(net.init, jax.random.key(0), obs)["params"]
    layers = sorted(params, key=lambda name: int(name.rsplit("_", 1)[1]))
    assert len(layers) == 6, layers
    size = lambda name: sum(int(np.prod(x.shape)) for x in jax.tree.leaves(params[name]))  # noqa: E731
    return sum(map(size, layers[:3])), sum(map(size, layers[3:]))


def returns(module, cfg: dict, train_keys, eval_key, episodes: int) -> dict[str, np.ndarray]:
    """Train one seed per key in one program, then each seed's mean return over `episodes` episodes
    (``rejax.evaluate.evaluate``'s episode loop, as for the rejax column): "greedy" (argmax of the
    actor's logits) and "sampled" (an action drawn from PureJaxRL's ``distrax.Categorical``)."""
    from rejax.evaluate import evaluate

    out = jax.jit(jax.vmap(module.make_train(dict(cfg))))(train_keys)
    params = out["runner_state"][0].params
    net, _ = network(module, cfg["ENV_NAME"])
    env, env_params = _FiveTupleGymnax.make(cfg["ENV_NAME"])
    result = {}
    for mode in ("greedy", "sampled"):

        def one(p, rng, mode=mode):
            def act(obs, key):
                pi, _ = net.apply(p, obs)
                return jnp.argmax(pi.logits) if mode == "greedy" else pi.sample(seed=key)

            _, r = evaluate(act, rng, env, env_params, episodes, env_params.max_steps_in_episode)
            return r.mean()

        result[mode] = np.asarray(jax.jit(jax.vmap(one))(params, jax.random.split(eval_key, len(train_keys))))
    return result
