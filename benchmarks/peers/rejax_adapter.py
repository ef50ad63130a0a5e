"""rejax 0.1.3 as a peer: PPO (``ppo_cartpole.py``), SAC, TD3, DQN (``offpolicy_throughput.py``) and PQN
(``pqn_rejax.py``).

Every trainer runs as one training segment with rejax's periodic evaluation switched off
(``eval_freq = total_timesteps``, ``skip_initial_evaluation=True``, a no-op ``eval_callback``), on a
gymnax env wrapped into the five-tuple ``step`` rejax expects. It is timed as
``jax.jit(train).lower(key).compile()``, then one call of the compiled program (which includes
``init_state``).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from _common import compile_and_run, num_params


class FiveTupleGymnaxEnv:
    """A gymnax env whose ``step`` returns the pre-1.0 five-tuple rejax 0.1.3 expects.

    gymnax 1.0.1's ``Environment.step`` returns ``(obs, state, reward, terminated, truncated, info)``;
    rejax unpacks ``(obs, state, reward, done, info)``. Here ``done = terminated | truncated`` (gymnax has
    already auto-reset the state when either is true). Everything else (spaces, params, name) is
    forwarded to the wrapped env.
    """

    def __init__(self, env):
        self._env = env

    def step(self, key, state, action, params=None):
        obs, state, reward, terminated, truncated, info = self._env.step(key, state, action, params)
        return obs, state, reward, jnp.logical_or(terminated, truncated), info

    def reset(self, key, params=None):
        return self._env.reset(key, params)

    # The rest of the gymnax interface rejax uses, forwarded explicitly (a
    # blanket __getattr__ would recurse inside rejax's `deepcopy` of its config).
    @property
    def default_params(self):
        return self._env.default_params

    @property
    def name(self) -> str:
        return self._env.name

    @property
    def num_actions(self) -> int:
        return self._env.num_actions

    def action_space(self, params=None):
        return self._env.action_space(params)

    def observation_space(self, params):
        return self._env.observation_space(params)


def no_eval(algo, ts, rng):
    """Stands in for rejax's evaluation callback: costs nothing, returns a dummy."""
    return jnp.zeros((), jnp.float32)


def create(name: str, env_id: str, total_timesteps: int, **config):
    """``rejax.<name>.create`` on gymnax `env_id` as one training segment without evaluation."""
    import gymnax
    import rejax

    env, env_params = gymnax.make(env_id)
    algo = getattr(rejax, name).create(
        env=FiveTupleGymnaxEnv(env), env_params=env_params, total_timesteps=total_timesteps,
        eval_freq=total_timesteps, skip_initial_evaluation=True, **config,
    )  # fmt: skip
    return algo.replace(eval_callback=no_eval)


def time_train(algo, key) -> tuple[object, dict]:
    """Compile and run ``algo.train`` (vmapped over a batch of keys): ``(train state, timings)``, the
    timings with ``steps``, the env steps of all seeds."""
    fn = jax.vmap(algo.train) if key.ndim == 1 else algo.train
    (ts, _), timings = compile_and_run(fn, key)
    timings["steps"] = int(np.sum(np.asarray(ts.global_step)))
    return ts, timings


def evaluate(act, algo, key, episodes: int):
    """``rejax.evaluate.evaluate``'s returns of the policy `act` over `episodes` episodes."""
    from rejax.evaluate import evaluate as rejax_evaluate

    _, returns = rejax_evaluate(act, key, algo.env, algo.env_params, episodes, algo.env_params.max_steps_in_episode)
    return returns


# ============================================================================ PPO (ppo_cartpole.py)
def ppo_param_counts(algo) -> tuple[int, int]:
    ts = jax.eval_shape(algo.init_state, jax.random.key(0))
    return num_params(ts.actor_ts.params), num_params(ts.critic_ts.params)


def ppo_returns(algo, train_keys, eval_key, episodes: int) -> dict[str, np.ndarray]:
    """Train one seed per key in one program, then each seed's mean return over `episodes` episodes
    (rejax's evaluation, vmapped over the seeds): "greedy" (argmax of the actor's logits) and "sampled"
    (rejax's own ``make_act``)."""
    ts, _ = jax.jit(jax.vmap(algo.train))(train_keys)

    def greedy_act(ts):
        def act(obs, rng):
            logits = algo.actor.apply(ts.actor_ts.params, obs[None], method=lambda m, o: m.action_logits(m.features(o)))
            return jnp.argmax(logits[0])

        return act

    out = {}
    for mode, make_act in (("greedy", greedy_act), ("sampled", algo.make_act)):

        def one(ts, rng, make_act=make_act):
            return evaluate(make_act(ts), algo, rng, episodes).mean()

        out[mode] = np.asarray(jax.jit(jax.vmap(one))(ts, jax.random.split(eval_key, len(train_keys))))
    return out


# ============================================================================ SAC, TD3, DQN (offpolicy_throughput.py)
def make_offpolicy(pair: str, c: dict, total_steps: int):
    """rejax's SAC, TD3 or DQN from the pair's configuration `c` (rejax's own config, in its terms)."""
    common = dict(
        num_envs=c["num_envs"], buffer_size=c["buffer_size"], fill_buffer=c["fill_buffer"],
        batch_size=c["batch_size"], learning_rate=c["learning_rate"], num_epochs=c["num_epochs"],
        gamma=c["gamma"], polyak=c["polyak"], normalize_observations=c["normalize_observations"],
    )  # fmt: skip
    if pair == "sac":
        kw = dict(hidden_layer_sizes=c["hidden"], agent_kwargs={"activation": c["activation"]})
        return create("SAC", c["env"], total_steps, **common, **kw)
    if pair == "td3":
        assert c["hidden"] == (64, 64)  # rejax's TD3 has (64, 64) actor and critic built in
        kw = dict(
            max_grad_norm=c["max_grad_norm"], exploration_noise=c["exploration_noise"], target_noise=c["target_noise"],
            target_noise_clip=c["target_noise_clip"], policy_delay=c["policy_delay"],
            actor_kwargs={"activation": c["activation"]}, critic_kwargs={"activation": c["activation"]},
        )  # fmt: skip
        return create("TD3", c["env"], total_steps, **common, **kw)
    if pair == "dqn":
        assert c["hidden"] == (64, 64)  # built into rejax's DQN
        kw = dict(
            agent="QNetwork", agent_kwargs={"activation": c["activation"]}, max_grad_norm=c["max_grad_norm"],
            eps_start=c["eps_start"], eps_end=c["eps_end"], exploration_fraction=c["exploration_fraction"],
            ddqn=c["ddqn"],
        )  # fmt: skip
        return create("DQN", c["env"], total_steps, **common, **kw)
    raise ValueError(pair)


def offpolicy_param_counts(pair: str, c: dict) -> tuple[int, int]:
    """(actor, critics) parameters; DQN: (Q-network, 0)."""
    ts = jax.eval_shape(make_offpolicy(pair, c, 1_000).init_state, jax.random.key(0))
    if pair == "dqn":
        return num_params(ts.q_ts.params), 0
    return num_params(ts.actor_ts.params), num_params(ts.critic_ts.params)


def _greedy_act(pair: str, algo, ts):
    """The trained policy's deterministic action, through rejax's own networks."""
    norm = getattr(algo, "normalize_observations", False)

    def prep(obs):
        if norm:
            obs = algo.normalize_obs(ts.obs_rms_state, obs)
        return jnp.expand_dims(obs, 0)

    if pair == "sac":

        def mean_action(m, o):
            return m.action_loc + jnp.tanh(m.action_mean(m.features(o))) * m.action_scale

        return lambda obs, rng: jnp.squeeze(algo.actor.apply(ts.actor_ts.params, prep(obs), method=mean_action), 0)
    if pair == "td3":
        return algo.make_act(ts)  # deterministic already
    if pair == "dqn":
        return lambda obs, rng: jnp.argmax(algo.agent.apply(ts.q_ts.params, prep(obs))[0])
    raise ValueError(pair)


def time_offpolicy(pair: str, c: dict, total_steps: int, seed: int, episodes: int, seeds: int = 1) -> dict:
    """One timed run (compile, then execution) and the trained greedy policy's mean return; with
    `seeds` > 1, `jax.vmap(algo.train)` over that many keys split from `seed`'s (rejax's way to
    train seeds), steps and updates summed and the return averaged over the seeds."""
    algo = make_offpolicy(pair, c, total_steps)
    key = jax.random.key(seed)
    ts, out = time_train(algo, key if seeds == 1 else jax.random.split(key, seeds))
    assert out["steps"] == total_steps * seeds, (out["steps"], total_steps, seeds)
    steps = ts.q_ts.step if pair == "dqn" else ts.critic_ts.step
    out["updates"] = int(np.sum(np.asarray(steps)))
    if seeds == 1:
        returns = evaluate(_greedy_act(pair, algo, ts), algo, jax.random.key(10_000 + seed), episodes)
    else:
        member = lambda i: jax.tree.map(lambda x: x[i], ts)  # noqa: E731
        returns = [
            np.mean(np.asarray(evaluate(_greedy_act(pair, algo, member(i)), algo, jax.random.key(10_000 + seed), episodes)))
            for i in range(seeds)
        ]
    out["ret"] = float(np.mean(np.asarray(returns)))
    return out


def breakdown_jobs(pair: str, c: dict, obs, act, rew, discrete: bool, n_fixed: int) -> dict:
    """rejax's pieces of a gradient update for ``_offpolicy_breakdown.py``: name -> (jitted fn, args,
    gradient updates it stands for). "Fixed batch" drives rejax's update on one constant batch the way
    its ``train_iteration`` does (target update once per iteration, a fresh rng per update), so that
    nothing is loop-invariant and hoisted by XLA."""
    from rejax.buffers import Minibatch

    algo = make_offpolicy(pair, c, 10**6)
    ts = jax.jit(algo.init_state)(jax.random.key(0))
    bs = obs.shape[0]
    scale = 1.0 if discrete else float(np.max(np.asarray(algo.action_space.high)))  # rejax acts in env units
    mb = Minibatch(obs=obs, action=act * scale if not discrete else act, reward=rew, done=jnp.zeros((bs,), bool),
                   next_obs=obs)  # fmt: skip
    per_iter = {"sac": 1, "td3": 2, "dqn": algo.num_epochs}[pair]  # gradient updates per iteration

    def fresh(t):
        return t.replace(rng=jax.random.split(t.rng)[0])

    def target(params, tgt):
        return algo.maybe_update_target_params(params, tgt, jnp.asarray(1), jnp.asarray(0))

    @jax.jit
    def update(ts):
        def one(t, _):
            if pair == "sac":
                t = algo.update(fresh(t), mb)
                t = t.replace(critic_target_params=target(t.critic_ts.params, t.critic_target_params))
            elif pair == "td3":
                for _ in range(2):
                    t = algo.update_critic(fresh(t), mb)
                t = algo.update_actor(t, mb)
                t = t.replace(
                    critic_target_params=target(t.critic_ts.params, t.critic_target_params),
                    actor_target_params=target(t.actor_ts.params, t.actor_target_params),
                )
            else:
                for _ in range(per_iter):
                    t = algo.update(fresh(t), mb)
                t = t.replace(q_target_params=target(t.q_ts.params, t.q_target_params))
            return t, None

        return jax.lax.scan(one, ts, None, length=n_fixed // per_iter)[0]

    @jax.jit
    def sample(buf):
        def one(acc, k):
            return acc + jnp.sum(buf.sample(bs, k).reward), None

        return jax.lax.scan(one, jnp.zeros(()), jax.random.split(jax.random.key(4), n_fixed))[0]

    iters = max(1, n_fixed // per_iter)
    fill_its = algo.fill_buffer // (algo.num_envs * (algo.policy_delay if pair == "td3" else 1)) + 2
    warmup = jax.jit(lambda ts: jax.lax.fori_loop(0, fill_its, lambda _, t: algo.train_iteration(t), ts))
    iterations = jax.jit(lambda ts: jax.lax.fori_loop(0, iters, lambda _, t: algo.train_iteration(t), ts))
    return {
        "rejax: full iteration, after fill": (iterations, (warmup(ts),), iters * per_iter),
        "rejax: update only, fixed batch": (update, (ts,), (n_fixed // per_iter) * per_iter),
        "rejax: buffer sample only (full buffer)": (sample, (ts.replay_buffer.replace(index=0, full=True),), n_fixed),
    }


def train_compile(pair: str, c: dict, steps: int):
    """A thunk compiling rejax's training program (``jax.jit(train).lower(key).compile()``)."""
    algo = make_offpolicy(pair, c, steps)
    return lambda: jax.jit(algo.train).lower(jax.random.key(0)).compile()


# ============================================================================ PQN (pqn_rejax.py)
def make_pqn(env_id: str, total_timesteps: int, config: dict):
    """rejax's PQN on gymnax `env_id` from `config` (rejax's own keys: num_envs, num_steps,
    num_minibatches, num_epochs, learning_rate, max_grad_norm, eps_start, eps_end,
    exploration_fraction, gamma, td_lambda, normalize_observations). Its network is built in: a
    (64, 64) MLP on the flattened observation, ``relu(LayerNorm(Dense(x)))`` per layer."""
    return create("PQN", env_id, total_timesteps, **config)


def pqn_greedy_act(algo, ts):
    """The trained Q-network's greedy action (argmax, no epsilon: rejax's own ``make_act`` keeps
    epsilon 0.005), through rejax's network, for `evaluate`."""

    def act(obs, rng):
        if algo.normalize_observations:
            obs = algo.normalize_obs(ts.obs_rms_state, obs)
        return jnp.argmax(algo.agent.apply(ts.q_ts.params, jnp.expand_dims(obs, 0))[0])

    return act
