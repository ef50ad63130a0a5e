"""Recurrent PPO: the hidden state carried through the rollout (zeroed at episode
starts), and the update on whole sequences of envs from the rollout's initial hidden
state (`PPO(actor_torso=GRUTorso(...), shared_torso=True)`)."""

from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp

from ..components import GRUTorso, RecurrentEncoder, gae
from ..core import Metrics
from ._base import Clock
from ._ppo_update import _Rollout, iteration_metrics, minibatch_step


def check_recurrent(agent: Any) -> None:
    """Raise a ValueError for a recurrent PPO configuration that is not supported."""
    name = type(agent.actor_torso).__name__
    if not agent.shared_torso:
        raise ValueError(
            f"PPO(actor_torso={name}(...)) is recurrent: set shared_torso=True (the policy and value "
            "heads share the recurrent torso; separate recurrent torsos are not supported)"
        )
    if agent.num_envs % agent.num_minibatches:
        raise ValueError(
            f"PPO(num_minibatches={agent.num_minibatches}) must divide num_envs={agent.num_envs} for a "
            f"recurrent torso ({name}): its minibatches are whole sequences of envs"
        )


def check_feed_forward(state: Any, what: str) -> None:
    """Raise a ValueError when `PPO.<what>` (feed-forward only) is given a recurrent state."""
    if isinstance(state.torso, RecurrentEncoder):
        raise ValueError(
            f"PPO.{what}(state) maps observations without a hidden state; this state's torso is "
            "recurrent (use PPO.act_with_carry)"
        )


def _collect(agent: Any, state: Any) -> tuple[Any, _Rollout, tuple]:
    """Run the rollout, carrying each env's hidden state. **Returns:** the new state, the
    rollout and `(episode starts, values, next values)`, each `(T, num_envs)`."""
    env, stats, torso = agent.train_env, state.obs_stats, state.torso
    norm = lambda x: x if stats is None else stats.normalize(x)  # noqa: E731

    def step(carry, _):
        env_state, obs, hidden, start, key = carry
        key, act_key, env_key = jax.random.split(key, 3)
        x = agent.flatten(obs)
        features, hidden = torso(norm(x), hidden, start)
        action, log_prob = state.actor(features).sample_and_log_prob(act_key)
        env_state, ts = env.step(env_key, env_state, action)
        final_obs = agent.flatten(ts.info["final_obs"])
        # The value of the step's true next observation, from the hidden state the step left
        # (bootstraps truncated episodes; equals the next step's value when none ended).
        next_features, _ = torso(norm(final_obs), hidden, jnp.zeros_like(start))
        out = _Rollout.of_step(x, action, log_prob, ts, final_obs)
        return (env_state, ts.obs, hidden, ts.done, key), (out, start, state.critic(features), state.critic(next_features))

    init = (state.env_state, state.obs, state.hidden, state.episode_start, state.key)
    (env_state, obs, hidden, start, key), (rollout, *extra) = jax.lax.scan(step, init, length=agent.rollout_length)
    if stats is not None:
        raw_obs = rollout.obs
        rollout = eqx.tree_at(lambda r: r.obs, rollout, stats.normalize(raw_obs))
        stats = stats.update(raw_obs)
    state = eqx.tree_at(
        lambda s: (s.env_state, s.obs, s.hidden, s.episode_start, s.key, s.obs_stats),
        state,
        (env_state, obs, hidden, start, key, stats),
        is_leaf=lambda x: x is None,
    )
    return state, rollout, tuple(extra)


def _sequence_loss(agent: Any, params: tuple, minibatch: tuple, progress: Any) -> tuple[Any, Metrics]:
    """PPO's loss on a minibatch of whole sequences: the torso re-runs each env's sequence
    from its stored initial hidden state, resetting where the rollout did."""
    (*batch, starts), hidden = minibatch
    features, _ = params[0].scan(batch[0], hidden, starts)
    flat = lambda x: x.reshape((-1,) + x.shape[2:])  # noqa: E731  (T, envs, ...) -> (T * envs, ...)
    return agent.loss_from_features(params, flat(features), tuple(map(flat, batch)))


def recurrent_iteration(agent: Any, state: Any, clock: Clock) -> tuple[Any, Metrics]:
    """A recurrent PPO's `train_iteration`."""
    progress = clock.progress
    initial_hidden = state.hidden
    state, ro, (starts, values, next_values) = _collect(agent, state)
    advantages = gae(ro.reward, values, next_values, ro.terminated, ro.truncated, agent.gamma, agent.gae_lambda)
    batch = (ro.obs, ro.action, ro.log_prob, values, advantages, advantages + values, starts)
    optimizer = agent.network_optimizer
    grad_fn = eqx.filter_value_and_grad(lambda p, mb, prog: _sequence_loss(agent, p, mb, prog), has_aux=True)
    minibatch = minibatch_step(grad_fn, optimizer, agent.target_kl, progress)
    num_mb = agent.num_minibatches
    envs = agent.num_envs // num_mb

    def epoch(carry, key):
        # Minibatches of whole envs: time stays in order inside each.
        perm = jax.random.permutation(key, agent.num_envs)
        time_major = lambda x: jnp.swapaxes(x[:, perm].reshape((x.shape[0], num_mb, envs) + x.shape[2:]), 0, 1)  # noqa: E731
        env_major = lambda x: x[perm].reshape((num_mb, envs) + x.shape[1:])  # noqa: E731
        minibatches = (jax.tree.map(time_major, batch), jax.tree.map(env_major, initial_hidden))
        return jax.lax.scan(minibatch, carry, minibatches)

    key, epoch_key = jax.random.split(state.key)
    carry = ((state.torso, state.actor, state.critic), state.opt_state, jnp.zeros((), bool))
    ((torso, actor, critic), opt_state, _), aux = jax.lax.scan(epoch, carry, jax.random.split(epoch_key, agent.num_epochs))
    env_steps = state.env_steps + agent.steps_per_iteration
    state = eqx.tree_at(
        lambda s: (s.torso, s.actor, s.critic, s.opt_state, s.key, s.env_steps, s.iteration),
        state,
        (torso, actor, critic, opt_state, key, env_steps, state.iteration + 1),
    )
    return state, iteration_metrics(ro, aux, env_steps, optimizer, progress)


def recurrent_preset() -> dict[str, Any]:
    """PPO's `"recurrent"` preset (`PPO.from_preset("recurrent", env)`, `eqxrl train ppo --preset
    recurrent`): a GRU policy and value function on one torso, trained much as RL Baselines3 Zoo
    trains RecurrentPPO on CartPoleNoVel-v1 (8 envs x 32 steps, 20 epochs over whole sequences in
    one minibatch, gamma 0.98, GAE lambda 0.8, no entropy bonus, normalised observations), with
    two changes for the torso the heads share here (the zoo gives the critic its own LSTM): the
    value loss is unclipped and weighted 0.1, so that its gradient (returns up to 50, unscaled)
    does not drown the policy's in the shared GRU, and the learning rate is 5e-4 annealed to 0.
    The runs that decided each value are in docs/agents/ppo.md."""
    return dict(
        num_envs=8, rollout_length=32, num_epochs=20, num_minibatches=1, learning_rate=5e-4, anneal_lr=True,
        gamma=0.98, gae_lambda=0.8, ent_coef=0.0, vf_coef=0.1, clip_value_loss=False, normalize_observations=True,
        actor_torso=GRUTorso(64, encoder_sizes=(64,)), shared_torso=True,
    )  # fmt: skip
