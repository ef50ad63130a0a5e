"""Wrappers for skill discovery: a state descriptor and a skill appended to the observation.

DADS (`eqxrl.agents.DADS`) trains on `SkillWrapper(DescriptorWrapper(env), num_skills)`,
whose flat observation is `[obs, descriptor, one_hot(skill)]`: the shared
off-policy loop stores it like any observation, and the agent splits it back.
"""

from collections.abc import Callable
from typing import Any, ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, Int

from ..core import EnvState, Key, foreign_promotion, is_positive_int
from ._base import AbstractEnv, AbstractWrapper, TimeStep
from ._layout import ObservationLayout
from ._spaces import Box

DESCRIPTORS = ("auto", "observation", "xy")
"""The named descriptors of `DescriptorWrapper` (or pass a callable)."""


def innermost_state(state: EnvState) -> EnvState:
    """**Returns:** the state of the innermost env below eqxrl's wrappers (which keep it in `.inner`)."""
    while isinstance(state, eqx.Module) and hasattr(state, "inner"):
        state = state.inner
    return state


def brax_xy(state: EnvState, obs: Array) -> Float[Array, "2"]:
    """The x-y position of a brax env's first body (the torso of the locomotion envs).

    **Arguments:** the innermost env `state` (a brax `State`) and the observation (unused).

    **Returns:** `pipeline_state.x.pos[0, :2]`.
    """
    del obs
    pipeline = getattr(state, "pipeline_state", None)
    if pipeline is None:
        raise ValueError(
            f"DescriptorWrapper(descriptor='xy') needs a brax state with a pipeline_state, got {type(state).__name__}"
        )
    pos = jnp.asarray(pipeline.x.pos, jnp.float32)
    pos = pos[0] if pos.ndim == 2 else pos
    return pos[:2]


FEET_LINKS = {
    "ant": None,  # its four lower legs: the links no other link hangs from (brax leaves them unnamed)
    "halfcheetah": ("bfoot", "ffoot"),
    "hopper": ("foot",),
    "walker2d": ("foot", "foot_left"),
    "humanoid": ("right_shin", "left_shin"),
}
"""The feet of the brax locomotion envs `BraxFeetContact` knows, by link name (as QDax's)."""


class BraxFeetContact:
    """Which feet of a brax locomotion env touch the ground in one state: a float32 vector,
    one entry per foot (`FEET_LINKS`, in link order), 1 where a contact between that foot's
    link and the ground (the world, link -1) has distance <= 0, as QDax's feet-contact
    descriptor reads brax's contacts. The contacts are the state's own when the env was
    built with `debug=True`, else computed from its link positions (`brax.contact.get`).

    Hashable by the env's name and the feet (a static part of a compiled evaluation)."""

    __slots__ = ("handle", "feet")

    def __init__(self, env: AbstractEnv, owner: str = "BraxFeetContact"):
        """**Arguments:** a brax locomotion `env` (may be wrapped), and `owner` for error messages."""
        inner = env.unwrapped if isinstance(env, AbstractEnv) else None
        if inner is None or "feet_contact" not in inner.descriptors:
            name = env.name if isinstance(env, AbstractEnv) else repr(env)
            raise ValueError(
                f"{owner}(descriptor='feet_contact') needs a brax locomotion env "
                f"({', '.join('brax/' + n for n in FEET_LINKS)}), got env {name!r}"
            )
        sys, feet = inner.brax_env.sys, FEET_LINKS[inner.env_name]
        if feet is None:
            parents = {int(p) for p in sys.link_parents}
            self.feet = tuple(i for i in range(len(sys.link_names)) if i not in parents)
        else:
            self.feet = tuple(list(sys.link_names).index(foot) for foot in feet)
        self.handle = inner.handle

    def __eq__(self, other: object) -> bool:
        return isinstance(other, BraxFeetContact) and (self.handle, self.feet) == (other.handle, other.feet)

    def __hash__(self) -> int:
        return hash((self.handle, self.feet))

    def __repr__(self) -> str:
        return f"BraxFeetContact({self.handle.key[1]!r}, feet={self.feet})"

    def __call__(self, state: EnvState, obs: Any = None) -> Float[Array, " feet"]:
        """**Arguments:** the innermost env `state` (a brax `State`); `obs` is unused.

        **Returns:** `(n_feet,)` float32 in {0, 1}."""
        from brax import contact as brax_contact

        del obs
        pipeline = state.pipeline_state
        with foreign_promotion():
            contact = pipeline.contact if pipeline.contact is not None else brax_contact.get(self.handle.obj.sys, pipeline.x)
        if contact is None:  # a system without contacts
            return jnp.zeros((len(self.feet),), jnp.float32)
        ground, foot = jnp.asarray(contact.link_idx[0]), jnp.asarray(contact.link_idx[1])
        touching = (jnp.asarray(contact.dist) <= 0) & (ground == -1)
        feet = jnp.asarray(self.feet, foot.dtype)
        return jnp.any((foot[None, :] == feet[:, None]) & touching[None, :], axis=-1).astype(jnp.float32)


def _flat(obs: Array) -> Float[Array, " n"]:
    return jnp.asarray(obs, jnp.float32).reshape(-1)


def _layout(env: AbstractEnv, owner: str) -> ObservationLayout:
    """The layout `env`'s observations are flattened by (a `Dict`'s entries in sorted key order);
    an env with action masks is refused: the flat observation has no place for them."""
    layout = ObservationLayout.of(env.observation_space, env.action_space, owner)
    if layout.mask_size:
        raise ValueError(f"{owner} does not take action masks, and env {env.name!r} has them")
    return layout


def _observation(state: EnvState, obs: Any) -> Float[Array, " n"]:
    del state  # (a Dict observation: its entries in sorted key order, as `ObservationLayout` stores them)
    return jnp.concatenate([_flat(leaf) for leaf in jax.tree.leaves(obs)])


def resolve_descriptor(env: AbstractEnv, descriptor: str, owner: str = "DescriptorWrapper") -> str:
    """Resolve `"auto"` for `env`: `"xy"` for brax envs, `"observation"` for `Point2D`.

    **Returns:** `"observation"` or `"xy"`. Raises a `ValueError` naming `owner` for an
    unknown name, `"xy"` on a non-brax env, or `"auto"` on an env without a known descriptor.
    """
    if descriptor not in DESCRIPTORS:
        raise ValueError(f"{owner}(descriptor) must be one of {list(DESCRIPTORS)} or a callable, got {descriptor!r}")
    known = [d for d in env.unwrapped.descriptors if d in DESCRIPTORS]  # (the env's state descriptors)
    if descriptor == "auto":
        if known:
            return known[0]
        raise ValueError(
            f"{owner}(descriptor='auto') knows the descriptors of brax envs (torso x-y) and Point2D "
            f"(position), not of env {env.name!r}; pass descriptor='observation' (the full observation)"
        )
    if descriptor == "xy" and "xy" not in known:
        raise ValueError(f"{owner}(descriptor='xy') needs a brax env (the torso's x-y), got env {env.name!r}")
    return descriptor


class DescriptorWrapper(AbstractWrapper):
    """Append a state descriptor to the flattened observation: `[obs, descriptor]`.

    A `Dict` observation is flattened as agents store it (`ObservationLayout`: its entries
    concatenated in sorted key order); an env with action masks is refused (the flat
    observation has no place for them).

    Put it inside `AutoReset` (DADS does): the descriptor of a transition's
    next observation is computed before any reset.
    """

    env: AbstractEnv
    fn: Callable[[EnvState, Array], Array] = eqx.field(static=True)
    kind: str = eqx.field(static=True)
    descriptor_size: int = eqx.field(static=True)
    base_obs_size: int = eqx.field(static=True)
    layout: ObservationLayout

    def __init__(self, env: AbstractEnv, descriptor: str | Callable[[Any, Array], Array] = "auto"):
        """**Arguments:**

        - `env`: the environment (may be wrapped, e.g. in a `TimeLimit`).
        - `descriptor`: `"observation"` (the flat observation), `"xy"` (a brax
          env's torso x-y, `pipeline_state.x.pos[0, :2]`), `"auto"` (`"xy"` for brax,
          `"observation"` for `Point2D`), or a callable `(state, obs) -> vector`
          given the innermost env state (below eqxrl's wrappers) and the observation.
        """
        if not isinstance(env, AbstractEnv):
            raise ValueError(f"DescriptorWrapper(env) must be an eqxrl AbstractEnv, got {env!r}")
        if callable(descriptor):
            fn, kind = descriptor, getattr(descriptor, "__name__", "callable")
        else:
            kind = resolve_descriptor(env, descriptor)
            fn = brax_xy if kind == "xy" else _observation
        self.layout = _layout(env, "DescriptorWrapper")
        self.env = env
        self.fn = fn
        self.kind = kind
        self.base_obs_size = self.layout.size
        out = jax.eval_shape(lambda k: self._descriptor(*env.reset(k)), jax.random.key(0))
        if len(out.shape) != 1 or out.shape[0] < 1:
            raise ValueError(f"DescriptorWrapper(descriptor) must return a non-empty vector, got shape {out.shape}")
        self.descriptor_size = int(out.shape[0])

    def _descriptor(self, state: EnvState, ts: TimeStep) -> Float[Array, " descriptor"]:
        return jnp.asarray(self.fn(innermost_state(state), ts.obs), jnp.float32).reshape(-1)

    def transform(self, state: EnvState, ts: TimeStep) -> TimeStep:
        obs = jnp.concatenate([self.layout.flatten(ts.obs, "DescriptorWrapper"), self._descriptor(state, ts)])
        return eqx.tree_at(lambda t: t.obs, ts, obs)

    @property
    def observation_space(self) -> Box:
        space = self.env.observation_space
        if isinstance(space, Box):
            low, high = np.asarray(space.low).reshape(-1), np.asarray(space.high).reshape(-1)
        else:
            low, high = np.full(self.base_obs_size, -np.inf), np.full(self.base_obs_size, np.inf)
        pad = np.full(self.descriptor_size, np.inf, np.float32)
        return Box(np.concatenate([low, -pad]), np.concatenate([high, pad]))


class SkillState(eqx.Module):
    """The wrapped env's state and the episode's skill."""

    inner: EnvState
    skill: Int[Array, ""]


class SkillWrapper(AbstractWrapper):
    """Draw a skill uniformly at random at each reset and append it, one-hot, to the
    flattened observation: `[obs, one_hot(skill)]` (a `Dict` observation flattened as in
    `DescriptorWrapper`)."""

    keeps_observation_prefix: ClassVar[bool] = True

    env: AbstractEnv
    num_skills: int = eqx.field(static=True)
    layout: ObservationLayout

    def __init__(self, env: AbstractEnv, num_skills: int):
        """**Arguments:** the `env` and the number of skills `num_skills` (>= 2)."""
        if not is_positive_int(num_skills) or num_skills < 2:
            raise ValueError(f"SkillWrapper(num_skills) must be an int >= 2, got {num_skills!r}")
        if not isinstance(env, AbstractEnv):
            raise ValueError(f"SkillWrapper(env) must be an eqxrl AbstractEnv, got {env!r}")
        self.env = env
        self.num_skills = int(num_skills)
        self.layout = _layout(env, "SkillWrapper")

    @property
    def observation_space(self) -> Box:
        space, size = self.env.observation_space, self.layout.size
        if isinstance(space, Box):
            low, high = np.asarray(space.low).reshape(-1), np.asarray(space.high).reshape(-1)
        else:
            low, high = np.full(size, -np.inf), np.full(size, np.inf)
        zeros, ones = np.zeros(self.num_skills, np.float32), np.ones(self.num_skills, np.float32)
        return Box(np.concatenate([low, zeros]), np.concatenate([high, ones]))

    def _with_skill(self, skill: Int[Array, ""], ts: TimeStep) -> TimeStep:
        one_hot = jax.nn.one_hot(skill, self.num_skills, dtype=jnp.float32)
        return eqx.tree_at(lambda t: t.obs, ts, jnp.concatenate([self.layout.flatten(ts.obs, "SkillWrapper"), one_hot]))

    def reset_with_skill(self, key: Key, skill: Int[Array, ""]) -> tuple[SkillState, TimeStep]:
        """Start an episode of a given skill. **Returns:** `(state, timestep)`."""
        skill = jnp.asarray(skill, jnp.int32)
        state, ts = self.env.reset(key)
        return SkillState(state, skill), self._with_skill(skill, ts)

    def reset(self, key: Key) -> tuple[SkillState, TimeStep]:
        skill_key, key = jax.random.split(key)
        skill = jax.random.randint(skill_key, (), 0, self.num_skills, dtype=jnp.int32)
        return self.reset_with_skill(key, skill)

    def step(self, key: Key, state: SkillState, action: Array) -> tuple[SkillState, TimeStep]:
        inner, ts = self.env.step(key, state.inner, action)
        return SkillState(inner, state.skill), self._with_skill(state.skill, ts)
