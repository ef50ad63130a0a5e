"""PPO's pieces that its separate updates (`_ppo_split`) and PQN share with it: the policy head
for an action space, the stored rollout, shuffled minibatches, one minibatch step (with KL early
stopping) and the metrics."""

from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Int

from ..components import AbstractOptimizer, CategoricalHead, GaussianHead, MultiCategoricalHead
from ..core import Key, Metrics, tree_select
from ..envs import AbstractSpace, Box, Discrete, MultiDiscrete


def check_action_space(owner: str, space: AbstractSpace) -> None:
    """Raise a ValueError naming `owner` unless `space` is one a PPO policy head takes."""
    if isinstance(space, Box):
        if len(space.shape) != 1:
            raise ValueError(f"{owner} needs a 1-D Box action space, got shape {space.shape}")
    elif not isinstance(space, (Discrete, MultiDiscrete)):
        raise ValueError(f"{owner} needs a Discrete, MultiDiscrete or Box action space, got {space!r}")


def policy_head(
    space: AbstractSpace, in_size: int, key: Key, torso: Any, in_shape: Any, state_dependent_std: bool, init_std: Array
) -> CategoricalHead | MultiCategoricalHead | GaussianHead:
    """**Returns:** PPO's policy head for actions of `space`: categorical (`Discrete`), factorised
    categorical (`MultiDiscrete`) or Gaussian (`Box`, its std starting at `init_std`)."""
    if isinstance(space, Discrete):
        return CategoricalHead(in_size, space.n, key=key, torso=torso, obs_shape=in_shape)
    if isinstance(space, MultiDiscrete):
        return MultiCategoricalHead(in_size, space.nvec, key=key, torso=torso, obs_shape=in_shape)
    actor = GaussianHead(
        in_size, space.shape[0], key=key, torso=torso, obs_shape=in_shape, state_dependent_std=state_dependent_std
    )
    if actor.log_std is not None:
        actor = eqx.tree_at(lambda a: a.log_std, actor, jnp.full_like(actor.log_std, 1.0) * jnp.log(init_std))
    return actor


class _Rollout(eqx.Module):
    """One step of every env (stacked over time by `lax.scan`): PPO's, and PQN's (whose
    epsilon-greedy actions have no `log_prob`: None)."""

    obs: Array
    action: Array
    log_prob: Array | None  # (third, as it was before PQN shared the record: leaf order decides PPO's bits)
    reward: Array
    terminated: Array
    truncated: Array
    final_obs: Array
    episode_return: Array
    episode_length: Array

    @classmethod
    def of_step(cls, obs: Array, action: Array, log_prob: Array | None, ts: Any, final_obs: Array) -> "_Rollout":
        """The record of one step: its stored `obs`, `action` and `log_prob`, the `TimeStep` `ts`
        the env returned, and the stored `final_obs` (the true next observation)."""
        return cls(
            obs=obs, action=action, log_prob=log_prob, reward=ts.reward, terminated=ts.terminated,
            truncated=ts.truncated, final_obs=final_obs, episode_return=ts.info["episode_return"],
            episode_length=ts.info["episode_length"],
        )  # fmt: skip


def shuffled_minibatches(batch: Any, num_minibatches: int, group: int = 1) -> Callable[[Key], Any]:
    """**Returns:** `key -> batch` shuffled along its leading axis into `num_minibatches`
    minibatches (a new leading axis), a new shuffle for each key (an epoch's); `group > 1`
    shuffles blocks of `group` adjacent samples, each kept whole and in order (MAPPO's team env
    steps, whose critic computes the team's part once)."""
    size = jax.tree.leaves(batch)[0].shape[0]

    def shuffle(key):
        perm = minibatch_permutation(key, size, group)
        return jax.tree.map(lambda x: x[perm].reshape((num_minibatches, size // num_minibatches) + x.shape[1:]), batch)

    return shuffle


def minibatch_permutation(key: Key, size: int, group: int = 1) -> Int[Array, " size"]:
    """The order of a shuffle of `size` samples: `jax.random.permutation` (`group == 1`), or a
    permutation of its blocks of `group` adjacent samples, each block whole and in order."""
    if group == 1:
        return jax.random.permutation(key, size)
    return (jax.random.permutation(key, size // group)[:, None] * group + jnp.arange(group)).reshape(size)


def minibatch_step(grad_fn: Callable, optimizer: AbstractOptimizer, target_kl: Array, progress: Array) -> Callable:
    """**Returns:** the `lax.scan` body of one minibatch update: carry `(params, opt_state, stopped)`."""

    def minibatch(carry, mb):
        params, opt_state, stopped = carry
        (_, aux), grads = grad_fn(params, mb, progress)
        # KL early stopping: once the policy has moved too far from the
        # rollout policy, this and every later minibatch leave it alone.
        stopped = stopped | (aux["approx_kl"] > target_kl)
        new_params, new_opt_state = optimizer.update(grads, opt_state, params, progress)
        params = tree_select(stopped, params, new_params)
        opt_state = tree_select(stopped, opt_state, new_opt_state)
        aux["applied"] = 1.0 - stopped.astype(jnp.float32)
        return (params, opt_state, stopped), _Packed.of(aux)

    return minibatch


class _Packed(eqx.Module):
    """A minibatch's metrics as the scan stores them: the float32 scalars stacked in one
    vector (one write per minibatch instead of one per metric: on a GPU each write is a
    kernel of its own), any other metric (a user's loss term may report one) as it is."""

    names: tuple[str, ...] = eqx.field(static=True)
    values: Array
    rest: dict

    @staticmethod
    def of(aux: Metrics) -> "_Packed":
        scalar = lambda v: jnp.ndim(v) == 0 and jnp.result_type(v) == jnp.float32  # noqa: E731
        names = tuple(k for k, v in aux.items() if scalar(v))
        values = jnp.stack([jnp.asarray(aux[k]) for k in names])  # never empty: `applied` is one
        return _Packed(names, values, {k: v for k, v in aux.items() if k not in names})

    def unpack(self) -> Metrics:
        """**Returns:** the metrics by name, each with the leading axes the scans added."""
        return {**{k: self.values[..., i] for i, k in enumerate(self.names)}, **self.rest}


def iteration_metrics(
    ro: _Rollout, packed: _Packed, env_steps: Array, optimizer: AbstractOptimizer, progress: Array
) -> Metrics:
    """**Returns:** an iteration's metrics: the update's means (`packed`: the minibatch steps'
    metrics, stacked by the scans), the finished episodes' statistics."""
    aux = packed.unpack()
    done = ro.terminated | ro.truncated
    num_done = jnp.sum(done.astype(jnp.float32))
    mean_or_nan = lambda x: jnp.where(  # noqa: E731
        num_done > 0, jnp.sum(jnp.where(done, x, 0.0)) / jnp.maximum(num_done, 1.0), jnp.nan
    )
    metrics = {k: jnp.mean(v) for k, v in aux.items() if k != "applied"}
    metrics.update(
        env_steps=env_steps,
        episode_return=mean_or_nan(ro.episode_return),
        episode_length=mean_or_nan(ro.episode_length.astype(jnp.float32)),
        num_episodes=num_done.astype(jnp.int32),
        updates_applied=jnp.sum(aux["applied"]),
    )
    lr = optimizer.current_learning_rate(progress)
    if lr is not None:  # None for an optax transformation, whose rate eqxrl cannot see
        metrics["learning_rate"] = lr
    return metrics
