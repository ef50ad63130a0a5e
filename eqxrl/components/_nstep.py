"""n-step transitions for replay buffers, never crossing an episode boundary.

An n-step transition starting at step `t` accumulates the rewards of steps
`t, t+1, ...` until its window *closes*: at the first step that is terminated
or truncated, or after `n` steps. With `m` the number of steps taken
(`1 <= m <= n`) and `c = t + m - 1` the closing step:

- `reward = sum_{k<m} gamma^k r[t+k]`,
- `next_obs` = the true next observation of step `c` (`info["final_obs"]`
  under auto-reset),
- `discount = gamma^m` if step `c` is not terminated, `0` if it is
  (truncation stops the accumulation but still bootstraps),

so the TD target is `reward + discount * Q(next_obs)`. With `n = 1` this is
the one-step transition `(obs, action, r, gamma * (1 - terminated), final_obs)`.

The replay buffers of the off-policy agents store no `gamma`: the window
emits an `NStepTransition` (the raw rewards of its steps, `m` and whether the
closing step terminated), and `NStepTransition.reward_and_discount(gamma)`
applies the discount when the transition is sampled, so a `gamma` changed
between updates (a PBT member's explored discount) acts on the very next
update, on every transition already stored.
"""

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Bool, Float, Int

from ._buffers import Transition


def _check_flags(rewards: Array, **flags: Array) -> None:
    for name, flag in flags.items():
        if jnp.shape(flag) != jnp.shape(rewards):
            raise ValueError(
                f"nstep_return({name}) must have the (n, *batch) shape of rewards {jnp.shape(rewards)}, "
                f"got {jnp.shape(flag)}"
            )
        if jnp.result_type(flag) != jnp.bool_:
            raise ValueError(f"nstep_return({name}) must be a bool array, got dtype {jnp.result_type(flag)}")


def _close(
    rewards: Float[Array, "n *b"], terminated: Bool[Array, "n *b"], truncated: Bool[Array, "n *b"]
) -> tuple[Float[Array, "n *b"], Int[Array, "*b"], Bool[Array, "*b"]]:
    """Where a window closes. **Returns:** `(rewards, last, terminated)`: the rewards with
    those after the closing step zeroed, the closing step's index, and whether it terminated."""
    done = (terminated | truncated).astype(jnp.int32)
    # Step k counts iff no earlier step of the window ended the episode.
    alive = (jnp.cumsum(done, axis=0) - done) == 0
    kept = jnp.where(alive, rewards, jnp.zeros((), rewards.dtype))
    last = jnp.sum(alive[1:].astype(jnp.int32), axis=0)
    closing_terminated = jnp.take_along_axis(terminated, last[None], axis=0)[0]
    return kept, last, closing_terminated


def _discounted(
    rewards: Float[Array, "..."], steps: Int[Array, "..."], terminated: Bool[Array, "..."], gamma, axis: int
) -> tuple[Float[Array, "..."], Float[Array, "..."]]:
    """`sum_k gamma^k rewards[k]` along `axis` (rewards after the closing step are zero) and
    `gamma^steps`, or 0 where `terminated`."""
    dtype = rewards.dtype
    n = rewards.shape[axis]
    gamma = jnp.asarray(gamma, dtype)
    shape = [1] * rewards.ndim
    shape[axis] = n
    powers = jnp.power(gamma, jnp.arange(n, dtype=dtype)).reshape(shape)
    reward = jnp.sum(powers * rewards, axis=axis)
    discount = jnp.where(terminated, jnp.zeros((), dtype), jnp.power(gamma, steps.astype(dtype)))
    return reward, discount


def nstep_return(
    rewards: Float[Array, "n *b"],
    terminated: Bool[Array, "_n *_b"],
    truncated: Bool[Array, "_n *_b"],
    gamma: Float[Array, ""] | float,
) -> tuple[Float[Array, "*b"], Float[Array, "*b"], Int[Array, "*b"]]:
    """The n-step reward and discount of a window of `n` consecutive steps.

    **Arguments:**

    - `rewards`, `terminated`, `truncated`: shape `(n, *batch)`, oldest step
      first; step 0 is where the transition starts.
    - `gamma`: the discount factor.

    **Returns:** `(reward, discount, last)`, each of shape `batch`: the
    discounted sum of rewards up to and including the closing step, `gamma^m`
    or 0 (terminated) for `m = last + 1` steps, and `last`, the index in the
    window of the closing step (the first terminated or truncated step, else
    `n - 1`), whose next observation is the transition's `next_obs`.
    """
    if jnp.ndim(rewards) < 1 or jnp.shape(rewards)[0] < 1:
        raise ValueError(
            f"nstep_return(rewards) needs a leading window axis of n >= 1 steps, got shape {jnp.shape(rewards)}"
        )
    _check_flags(rewards, terminated=terminated, truncated=truncated)
    kept, last, closing_terminated = _close(rewards, terminated, truncated)
    reward, discount = _discounted(kept, last + 1, closing_terminated, gamma, axis=0)
    return reward, discount, last


class NStepTransition(eqx.Module):
    """One (possibly n-step) transition as the off-policy agents store it: no `gamma` in it.

    Fields (leading axes `batch`, e.g. none for one item, `(capacity,)` in a
    buffer's storage):

    - `obs`, `action`: the observation the transition starts in and the action taken;
    - `rewards`: shape `(*batch, n)`, the raw rewards of the window's steps,
      oldest first, zero after the closing step (the first terminated or
      truncated step, else step `n - 1`);
    - `steps`: int32, `m`, the number of steps taken (`1 <= m <= n`);
    - `terminated`: bool, whether the closing step terminated (truncation
      bootstraps, termination does not);
    - `next_obs`: the true next observation of the closing step.

    `reward_and_discount(gamma)` (or `transition(gamma)`, a `Transition`)
    gives the TD target's `reward` and `discount` for any `gamma`, so the
    discount is applied when the transition is used, not when it is stored.
    With `n = 1`: `rewards` has shape `(*batch, 1)` and `steps` is 1.
    """

    obs: Array
    action: Array
    rewards: Float[Array, "*b n"]
    steps: Int[Array, "*b"]
    terminated: Bool[Array, "*b"]
    next_obs: Array

    @property
    def n(self) -> int:
        """The window length (static)."""
        return self.rewards.shape[-1]

    def reward_and_discount(self, gamma: Float[Array, ""] | float) -> tuple[Float[Array, "*b"], Float[Array, "*b"]]:
        """The n-step reward and discount for the discount factor `gamma`.

        **Returns:** `(reward, discount)`, each of shape `batch`:
        `reward = sum_{k<m} gamma^k rewards[k]` and `discount = gamma^m`, or 0
        if the closing step terminated. The same numbers as `nstep_return` of
        the window the transition came from.
        """
        batch = jnp.shape(self.rewards)[:-1]
        if jnp.ndim(self.rewards) < 1 or jnp.shape(self.rewards)[-1] < 1:
            raise ValueError(
                "NStepTransition(rewards) needs a trailing window axis of n >= 1 steps, got shape "
                f"{jnp.shape(self.rewards)}"
            )
        for name, kind in (("steps", "an integer"), ("terminated", "a bool")):
            x = getattr(self, name)
            dtype = jnp.result_type(x)
            ok = jnp.issubdtype(dtype, jnp.integer) if name == "steps" else dtype == jnp.bool_
            if jnp.shape(x) != batch or not ok:
                raise ValueError(
                    f"NStepTransition({name}) must be {kind} array of shape {batch} (rewards' shape "
                    f"without its window axis), got {dtype}{list(jnp.shape(x))}"
                )
        return _discounted(self.rewards, self.steps, self.terminated, gamma, axis=-1)

    def transition(self, gamma: Float[Array, ""] | float) -> Transition:
        """**Returns:** the `Transition` (`obs`, `action`, `reward`, `discount`,
        `next_obs`) whose TD target is `reward + discount * Q(next_obs)` under `gamma`."""
        reward, discount = self.reward_and_discount(gamma)
        return Transition(self.obs, self.action, reward, discount, self.next_obs)


def _per_env_take(x: Array, slot: Int[Array, "*b"]) -> Array:
    """`x[slot[e], e, ...]` for every env index `e`: x has shape `(n, *b, ...)`."""
    index = slot.reshape((1, *slot.shape) + (1,) * (x.ndim - 1 - slot.ndim))
    return jnp.take_along_axis(x, index, axis=0, mode="promise_in_bounds")[0]


class NStepWindow(eqx.Module):
    """The last `n` one-step transitions of a batch of envs, emitting n-step transitions.

    A ring of `n` slots per env (leaves of shape `(n, *batch, ...)`), for the
    carry of a rollout `lax.scan`. Use:

    ```python
    # agent.init: step the env n - 1 times (random actions), stacking
    #   (obs, action, ts.reward, ts.terminated, ts.truncated, ts.info["final_obs"])
    # over a leading axis of length n - 1 (e.g. the outputs of a lax.scan), then
    window = NStepWindow.create(obs, action, reward, terminated, truncated, next_obs)
    # every later env step:
    window = window.push(obs, action, ts.reward, ts.terminated, ts.truncated, ts.info["final_obs"])
    buffer_state = buffer.add(buffer_state, window.emit())
    # every update: the sampled NStepTransitions under the current gamma
    reward, discount = sample.data.reward_and_discount(gamma)
    ```

    After `create` from steps `1 .. n-1`, the push of step `t >= n` makes the
    window hold steps `t-n+1 .. t`, and `emit` returns the n-step transition
    that *starts* at step `t-n+1` (the oldest). So every env step, the
    pre-fill steps included, starts exactly one emitted transition, `n - 1`
    pushes after it was taken; the last `n - 1` steps of a run are never
    emitted. Episode boundaries inside the window are handled by
    `nstep_return`: a transition never extends past the step that ended its
    episode, and the steps of the next episode start transitions of their own.

    Fields: `data` holds one-step transitions with `discount = 1 - terminated`
    (a 0/1 continuation mask: no `gamma` is applied in the window or by
    `emit`), `truncated` the truncation flags, and `head` the slot of the
    oldest step (the one `push` overwrites).
    """

    data: Transition
    truncated: Bool[Array, "n *b"]
    head: Int[Array, ""]

    @property
    def n(self) -> int:
        """The window length (static)."""
        return self.data.reward.shape[0]

    @staticmethod
    def create(
        obs: Array,
        action: Array,
        reward: Float[Array, "m *b"],
        terminated: Bool[Array, "_m *_b"],
        truncated: Bool[Array, "_m *_b"],
        next_obs: Array,
    ) -> "NStepWindow":
        """A window of length `n = m + 1` pre-filled with `m = n - 1` steps.

        **Arguments:** the arguments of `push`, each with an extra leading axis
        of length `m = n - 1` holding steps `1 .. n-1` in order (oldest first).
        For `n = 1` that axis has length 0 (a `lax.scan` of length 0 gives
        exactly that).

        **Returns:** the window. Its oldest slot is a placeholder (zeros, not a
        real step) that the first `push` overwrites; `emit` is meaningful only
        after at least one `push`.
        """
        args = dict(
            obs=obs, action=action, reward=reward, terminated=terminated, truncated=truncated, next_obs=next_obs
        )
        if jnp.ndim(reward) < 1:
            raise ValueError(
                "NStepWindow.create(reward) needs a leading axis of n - 1 pre-fill steps, "
                f"got shape {jnp.shape(reward)}"
            )
        m, *batch = jnp.shape(reward)
        batch = tuple(batch)
        for name, x in args.items():
            shape = jnp.shape(x)
            if shape[: 1 + len(batch)] != (m, *batch):
                raise ValueError(
                    f"NStepWindow.create({name}) must have leading axes (n - 1, *batch) = {(m, *batch)} like "
                    f"create(reward), got shape {shape}"
                )
        for name in ("terminated", "truncated"):
            if jnp.shape(args[name]) != (m, *batch) or jnp.result_type(args[name]) != jnp.bool_:
                raise ValueError(
                    f"NStepWindow.create({name}) must be a bool array of shape {(m, *batch)}, got "
                    f"{jnp.result_type(args[name])}{list(jnp.shape(args[name]))}"
                )
        if jnp.shape(obs) != jnp.shape(next_obs) or jnp.result_type(obs) != jnp.result_type(next_obs):
            raise ValueError(
                f"NStepWindow.create(next_obs) must have the shape and dtype of obs {jnp.result_type(obs)}"
                f"{list(jnp.shape(obs))}, got {jnp.result_type(next_obs)}{list(jnp.shape(next_obs))}"
            )

        def with_placeholder(x: Array) -> Array:
            x = jnp.asarray(x)
            return jnp.concatenate([jnp.zeros((1, *x.shape[1:]), x.dtype), x], axis=0)

        data = Transition(
            obs=with_placeholder(obs),
            action=with_placeholder(action),
            reward=with_placeholder(reward),
            discount=with_placeholder(1.0 - terminated.astype(reward.dtype)),
            next_obs=with_placeholder(next_obs),
        )
        return NStepWindow(data, with_placeholder(truncated), jnp.zeros((), jnp.int32))

    def push(
        self,
        obs: Array,
        action: Array,
        reward: Float[Array, "*b"],
        terminated: Bool[Array, "*_b"],
        truncated: Bool[Array, "*_b"],
        next_obs: Array,
    ) -> "NStepWindow":
        """Append one env step of every env, dropping the oldest.

        **Arguments:** one step of the batch of envs, each with leading axes
        `batch`: the observation the action was taken in, the action, and the
        step's `reward`, `terminated`, `truncated` and true next observation
        (`info["final_obs"]`). Shapes and dtypes must match `create`'s.

        **Returns:** the new window.
        """
        for name, x in (("obs", obs), ("action", action), ("reward", reward), ("next_obs", next_obs)):
            self._check_step(name, x, getattr(self.data, name))
        self._check_step("terminated", terminated, self.truncated)
        self._check_step("truncated", truncated, self.truncated)
        step = Transition(obs, action, reward, 1.0 - terminated.astype(reward.dtype), next_obs)
        # The oldest slot is overwritten in place (a dynamic-update-slice of the scan carry).
        data = jax.tree.map(
            lambda store, x: jax.lax.dynamic_update_index_in_dim(store, x, self.head, 0), self.data, step
        )
        truncated = jax.lax.dynamic_update_index_in_dim(self.truncated, truncated, self.head, 0)
        return NStepWindow(data, truncated, ((self.head + 1) % self.n).astype(jnp.int32))

    @staticmethod
    def _check_step(name: str, x: Array, store: Array) -> None:
        expected = tuple(store.shape[1:])
        if tuple(jnp.shape(x)) != expected or jnp.result_type(x) != store.dtype:
            raise ValueError(
                f"NStepWindow.push({name}) must be {store.dtype}{list(expected)} like create({name}) without its "
                f"leading axis, got {jnp.result_type(x)}{list(jnp.shape(x))}"
            )

    def emit(self) -> NStepTransition:
        """The n-step transition that starts at the oldest step of the window.

        **Returns:** an `NStepTransition` with leading axes `batch`: `obs` and
        `action` of the oldest step, the raw `rewards` of the window's steps up
        to the closing one (the first terminated or truncated step, or the
        `n`-th; zeros after it), `steps`, whether the closing step
        `terminated`, and its `next_obs`. No `gamma` is applied:
        `reward_and_discount(gamma)` gives what `nstep_return` would.
        """
        n = self.n
        order = (self.head + jnp.arange(n, dtype=jnp.int32)) % n  # oldest first
        rewards = self.data.reward[order]
        terminated = self.data.discount[order] == 0
        truncated = self.truncated[order]
        kept, last, closing_terminated = _close(rewards, terminated, truncated)
        closing = ((self.head + last) % n).astype(jnp.int32)
        oldest = lambda x: jax.lax.dynamic_index_in_dim(x, self.head, 0, keepdims=False)  # noqa: E731
        return NStepTransition(
            obs=oldest(self.data.obs),
            action=oldest(self.data.action),
            rewards=jnp.moveaxis(kept, 0, -1),
            steps=(last + 1).astype(jnp.int32),
            terminated=closing_terminated,
            next_obs=_per_env_take(self.data.next_obs, closing),
        )
