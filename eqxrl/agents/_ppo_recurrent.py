"""Recurrent PPO's parts (`PPO(actor_torso=GRUTorso(...), shared_torso=True)`): the checks,
the update's minibatches of whole env sequences and their loss (the torso re-run from the
rollout's initial hidden state), and the `"recurrent"` preset. PPO's one rollout carries the
hidden state (`PPO._collect`) and its one iteration takes these minibatches and this loss."""

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from ..components import GRUTorso, RecurrentEncoder
from ..core import Metrics


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


def sequence_minibatches(batch: tuple, initial_hidden: Any, num_minibatches: int) -> Callable[[Any], tuple]:
    """**Returns:** `key -> minibatches` of whole env sequences: the rollout's `batch` (each
    `(T, num_envs, ...)`) and each env's hidden state at the rollout's start, the envs shuffled
    into `num_minibatches` groups (a leading axis), time in order inside each."""
    num_envs = batch[0].shape[1]
    envs = num_envs // num_minibatches

    def shuffle(key):
        perm = jax.random.permutation(key, num_envs)
        time_major = lambda x: jnp.swapaxes(x[:, perm].reshape((x.shape[0], num_minibatches, envs) + x.shape[2:]), 0, 1)  # noqa: E731
        env_major = lambda x: x[perm].reshape((num_minibatches, envs) + x.shape[1:])  # noqa: E731
        return jax.tree.map(time_major, batch), jax.tree.map(env_major, initial_hidden)

    return shuffle


def sequence_loss(agent: Any, params: tuple, minibatch: tuple, progress: Any) -> tuple[Any, Metrics]:
    """PPO's loss on a minibatch of whole sequences: the torso re-runs each env's sequence
    from its stored initial hidden state, resetting where the rollout did."""
    (*batch, starts), hidden = minibatch
    features, _ = params[0].scan(batch[0], hidden, starts)
    flat = lambda x: x.reshape((-1,) + x.shape[2:])  # noqa: E731  (T, envs, ...) -> (T * envs, ...)
    return agent.loss_from_features(params, flat(features), tuple(map(flat, batch)))


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
