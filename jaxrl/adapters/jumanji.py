"""Jumanji environments behind the jaxrl contract: ``jaxrl.make("jumanji/<id>")``.

* Flags: Jumanji ends an episode with ``StepType.LAST``; discount 0 is a termination,
  discount > 0 a truncation. Most Jumanji envs fold their own ``time_limit`` into a
  termination (discount 0); the adapter counts steps and reports an end at that limit as
  ``truncated`` (a natural end on the limit's very step is then reported as truncated too).
  Envs with a time limit get params :class:`JumanjiParams` (``max_steps_in_episode``, which
  may shorten the limit, never lengthen it); envs without one get :class:`NoParams`.
* Observations: Jumanji's structured observation (a NamedTuple or dataclass of arrays,
  possibly nested) is flattened to one float32 vector, its leaves in the order of the env's
  ``observation_spec`` (depth first), each raveled row-major. ``env.obs_layout`` names every
  slice and ``env.unflatten_obs(obs)`` gives back the named arrays with their own dtypes.
* Actions: ``DiscreteArray`` -> ``Discrete(n)``; ``MultiDiscreteArray`` (and integer
  ``BoundedArray``) -> one ``Discrete`` over the joint actions, index = row-major
  ``ravel_multi_index`` of the components (``env.decode_action``), or a ``MultiDiscrete``
  when the joint actions exceed :data:`MAX_JOINT_ACTIONS` (JobShop); float ``BoundedArray``
  -> ``Box``. Out-of-range actions are clipped into the space; masked actions are passed on.
* Masks: ``env.action_mask(obs)`` reads the legal actions back from the flat observation
  (bool ``[n]``, or ``[D, max(nvec)]`` per component; ``None``: the env has none), the hook
  the algorithms use (``docs/masks.md``). ``info["action_mask"]`` holds the same (all True
  without a mask); ``info["extras"]``: Jumanji's ``TimeStep.extras``.

Every id of :data:`JUMANJI_IDS` registers as ``jumanji/<id>`` when jumanji is installed
(``pip install 'jaxrl[jumanji]'``); jumanji is imported only when an env is built.
:data:`EXCLUDED` lists the ids that are not adapted, with the reason; ``docs/ecosystem.md``.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.util
import math
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from jaxrl.adapters.params import strong_types
from jaxrl.core import spaces
from jaxrl.core.env import (
    Environment, Range, check_action_shape, clip_discrete_action, first_timestep, transition,
)

#: Jumanji 1.1's registry (``jumanji.registered_environments()``) minus :data:`EXCLUDED`,
#: listed so that registering does not import jumanji; ``tests/test_jumanji.py`` compares.
JUMANJI_IDS = (
    "Game2048-v1", "GraphColoring-v1", "Minesweeper-v0", "RubiksCube-v0", "RubiksCube-partly-scrambled-v0",
    "Sudoku-v0", "Sudoku-very-easy-v0", "SlidingTilePuzzle-v0",
    "BinPack-v2", "FlatPack-v0", "Knapsack-v1", "Tetris-v0",
    "Cleaner-v0", "MMST-v0", "CVRP-v1", "MultiCVRP-v0", "Maze-v0", "RobotWarehouse-v0", "Snake-v1", "PacMan-v1",
    "JobShop-v0",
)
#: The most joint actions a multi-component action may have to become one ``Discrete``.
MAX_JOINT_ACTIONS = 65_536
#: Jumanji ids that are not registered, with the reason (``tests/test_jumanji.py`` re-checks
#: each against the installed jumanji). Those in :data:`REFUSED` cannot be built at all.
EXCLUDED = {
    "Sokoban-v0": "building it downloads its levels from the Hugging Face hub (nothing may download at run time)",
    "Connector-v3": "it returns one reward per agent (shape (10,)); the contract has one scalar reward",
    "LevelBasedForaging-v0": "it returns one reward per agent (shape (2,)); the contract has one scalar reward",
    "SearchAndRescue-v0": "it returns one reward per agent (shape (2,)); the contract has one scalar reward",
    "TSP-v1": "its reset observation's position is -1, below its own observation spec's minimum of 0",
}
REFUSED = ("Sokoban-v0",)

INSTALL_HINT = "pip install 'jaxrl[jumanji]'"


def jumanji_available() -> bool:
    """True when jumanji is importable (checked without importing it)."""
    return importlib.util.find_spec("jumanji") is not None


@functools.lru_cache(maxsize=None)
def raw_jumanji_env(env_id: str, env_kwargs: tuple = ()):
    """Jumanji's env object for ``env_id`` (cached: construction builds specs and tables)."""
    if env_id in REFUSED:
        raise ValueError(f"jumanji env {env_id!r} is not adapted by jaxrl: {EXCLUDED[env_id]}")
    if not jumanji_available():
        raise ModuleNotFoundError(f"jumanji/{env_id} needs jumanji: {INSTALL_HINT}")
    import jumanji

    known = jumanji.registered_environments()
    if env_id not in known:
        raise ValueError(f"unknown jumanji env {env_id!r}; jumanji offers {sorted(known)}")
    return jumanji.make(env_id, **dict(env_kwargs))


# ------------------------------------------------------------------ observation layout


def _spec_leaves(spec, prefix: str = "") -> list[tuple[str, Any]]:
    """``(dotted name, array spec)`` of a (nested) Jumanji spec, depth first in spec order;
    a plain array observation is the single leaf ``""``."""
    from jumanji import specs as jspecs

    if isinstance(spec, jspecs.Array):
        return [(prefix, spec)]
    out = []
    for name, child in spec._specs.items():
        out += _spec_leaves(child, f"{prefix}.{name}" if prefix else name)
    return out


def _leaf_value(obs, name: str):
    for part in filter(None, name.split(".")):
        obs = getattr(obs, part)
    return obs


def _bounds(spec) -> tuple[np.ndarray, np.ndarray]:
    """float32 (low, high) of one array spec, broadcast to its shape (unbounded: +-inf)."""
    shape = tuple(spec.shape)
    if hasattr(spec, "minimum"):
        low, high = np.asarray(spec.minimum, np.float64), np.asarray(spec.maximum, np.float64)
    else:
        low, high = np.full(shape, -np.inf), np.full(shape, np.inf)
    return np.broadcast_to(low, shape).astype(np.float32), np.broadcast_to(high, shape).astype(np.float32)


@dataclasses.dataclass(frozen=True)
class ObsSlice:
    """Where one leaf of Jumanji's observation sits in the flat vector: ``obs[start:stop]``."""

    name: str
    shape: tuple
    dtype: str
    start: int
    stop: int


# ------------------------------------------------------------------ actions


@dataclasses.dataclass(frozen=True)
class ActionCodec:
    """How an adapted action maps to Jumanji's: ``nums`` values per component (joint
    ``Discrete``, ``offset`` added, ``shape``/``dtype`` Jumanji's), or ``nums=None`` for a
    ``Box`` passed on as it is."""

    shape: tuple
    dtype: str
    nums: tuple | None
    offset: tuple | None
    scalar: bool

    @property
    def n(self) -> int:
        return int(math.prod(self.nums))

    @property
    def multi(self) -> bool:
        """Adapted as a ``MultiDiscrete`` (too many joint actions for one ``Discrete``)."""
        return self.nums is not None and not self.scalar and self.n > MAX_JOINT_ACTIONS


def _action_codec(spec) -> ActionCodec:
    from jumanji import specs as jspecs

    dtype = jnp.dtype(spec.dtype)
    if isinstance(spec, jspecs.DiscreteArray):
        return ActionCodec((), dtype.name, (int(spec.num_values),), (0,), True)
    if isinstance(spec, jspecs.MultiDiscreteArray):
        nums = tuple(int(v) for v in np.asarray(spec.num_values).ravel())
        return ActionCodec(tuple(spec.shape), dtype.name, nums, (0,) * len(nums), False)
    if isinstance(spec, jspecs.BoundedArray) and jnp.issubdtype(dtype, jnp.integer):
        low, high = (np.broadcast_to(np.asarray(b), spec.shape).ravel() for b in (spec.minimum, spec.maximum))
        nums = tuple(int(h - lo + 1) for lo, h in zip(low, high))
        return ActionCodec(tuple(spec.shape), dtype.name, nums, tuple(int(v) for v in low), False)
    if isinstance(spec, jspecs.BoundedArray):
        return ActionCodec(tuple(spec.shape), dtype.name, None, None, False)
    raise TypeError(f"jumanji action spec {spec!r} has no jaxrl counterpart")


# ------------------------------------------------------------------ params and state


@struct.dataclass
class JumanjiParams:
    """Params of a Jumanji env with a time limit.

    Attributes:
      max_steps_in_episode: int, truncate after this many steps; Jumanji's own
        ``time_limit`` still ends the episode (as a truncation) when it is smaller.
    """

    max_steps_in_episode: int = 1000
    bounds: ClassVar[dict] = {"max_steps_in_episode": Range(ge=1)}


@struct.dataclass
class NoParams:
    """Params of a Jumanji env without a time limit: none (its config is static)."""


@struct.dataclass
class JumanjiState:
    """Jumanji's own state plus the adapter's step counter (int32 ``[]``)."""

    inner: Any
    elapsed: jax.Array


@dataclasses.dataclass(frozen=True)
class JumanjiEnv(Environment):
    """A Jumanji env behind the jaxrl contract (see the module docstring).

    Attributes:
      env_id: Jumanji's id, e.g. ``"Snake-v1"`` or ``"Game2048-v1"``.
      env_kwargs: sorted ``(name, value)`` pairs passed to ``jumanji.make``.
    """

    env_id: str
    env_kwargs: tuple = ()

    invalid_action_rule = "clip into the action space (NaN -> 0); masked actions follow the env's own rule"

    def __post_init__(self):
        raw = self.raw  # fail early, clearly
        if tuple(raw.reward_spec.shape) != ():
            raise ValueError(f"jumanji env {self.env_id!r} returns rewards of shape {tuple(raw.reward_spec.shape)}; the contract has one scalar reward")
        self.codec  # noqa: B018  an unknown action spec fails here

    @property
    def raw(self):
        """Jumanji's env object (closed over by ``reset``/``step``, never a jit argument)."""
        return raw_jumanji_env(self.env_id, self.env_kwargs)

    @property
    def name(self) -> str:
        return f"jumanji/{self.env_id}"

    @property
    def time_limit(self) -> int | None:
        """Jumanji's own episode limit (``None`` when the env has none)."""
        limit = getattr(self.raw, "time_limit", None)
        return None if limit is None else int(limit)

    @property
    def default_params(self):
        limit = self.time_limit
        return NoParams() if limit is None else JumanjiParams(max_steps_in_episode=limit)

    @functools.cached_property
    def codec(self) -> ActionCodec:
        return _action_codec(self.raw.action_spec)

    @functools.cached_property
    def obs_layout(self) -> tuple[ObsSlice, ...]:
        """The flat observation's slices, one per leaf of Jumanji's observation spec."""
        out, start = [], 0
        for name, spec in _spec_leaves(self.raw.observation_spec):
            size = int(math.prod(spec.shape))
            out.append(ObsSlice(name, tuple(spec.shape), jnp.dtype(spec.dtype).name, start, start + size))
            start += size
        return tuple(out)

    def flatten_obs(self, obs) -> jax.Array:
        """float32 ``[D]``: Jumanji's observation, leaves concatenated in :attr:`obs_layout` order."""
        parts = [jnp.ravel(jnp.asarray(_leaf_value(obs, s.name))).astype(jnp.float32) for s in self.obs_layout]
        return jnp.concatenate(parts)

    def unflatten_obs(self, flat) -> dict:
        """``{name: array}`` (Jumanji's shapes and dtypes) from a flat observation ``[..., D]``."""
        flat = jnp.asarray(flat)
        batch = flat.shape[:-1]
        return {s.name: flat[..., s.start:s.stop].reshape(batch + s.shape).astype(s.dtype) for s in self.obs_layout}

    def decode_action(self, action) -> jax.Array:
        """Jumanji's action for an action of :meth:`action_space` (clipped into it first)."""
        codec = self.codec
        if codec.nums is None:
            space = self.action_space(None)
            return jnp.clip(jnp.nan_to_num(jnp.asarray(action, space.dtype), nan=0.0), space.low, space.high)
        if codec.multi:
            parts = jnp.stack([clip_discrete_action(a, n, nan_as=0) for a, n in zip(jnp.asarray(action), codec.nums)])
            return (parts + jnp.asarray(codec.offset, jnp.int32)).reshape(codec.shape).astype(codec.dtype)
        index = clip_discrete_action(action, codec.n, nan_as=0)
        if codec.scalar:
            return index.astype(codec.dtype)
        parts = jnp.stack(jnp.unravel_index(index, codec.nums)) + jnp.asarray(codec.offset, jnp.int32)
        return parts.reshape(codec.shape).astype(codec.dtype)

    @property
    def _mask_width(self) -> int:
        return max(self.codec.nums)

    def action_mask(self, obs) -> jax.Array | None:
        """The legal actions of one flat observation ``[D]`` (the algorithms' mask hook,
        ``docs/masks.md``): bool ``[n]`` (``Discrete``) or ``[k, max(nvec)]``
        (``MultiDiscrete``, per component); ``None`` when Jumanji's observation has no
        ``action_mask`` or the actions are a ``Box``."""
        if self.codec.nums is None or "action_mask" not in [s.name for s in self.obs_layout]:
            return None
        return self._adapted_mask(self.unflatten_obs(obs)["action_mask"])

    def _structured_mask(self, obs) -> jax.Array:
        """``info["action_mask"]`` of Jumanji's own observation (all True without a mask)."""
        codec = self.codec
        if codec.nums is None:
            return jnp.ones((), jnp.bool_)
        if "action_mask" not in [s.name for s in self.obs_layout]:
            return jnp.ones((len(codec.nums), self._mask_width) if codec.multi else (codec.n,), jnp.bool_)
        return self._adapted_mask(obs.action_mask)

    def _adapted_mask(self, mask) -> jax.Array:
        """Jumanji's mask over the adapted actions (see :meth:`action_mask`)."""
        codec = self.codec
        mask = jnp.asarray(mask, jnp.bool_)
        k, width = len(codec.nums), self._mask_width
        if codec.multi:  # per component, padded to the widest
            if mask.ndim == 2 and mask.shape[0] == k:
                return jnp.pad(mask, ((0, 0), (0, max(width - mask.shape[1], 0))))[:, :width]
            return jnp.ones((k, width), jnp.bool_)
        if mask.shape == codec.nums:  # a joint mask already
            return mask.reshape(codec.n)
        if mask.shape[0] == k and mask.ndim == 2:  # one mask row per component: AND them
            mask = jnp.pad(mask, ((0, 0), (0, max(width - mask.shape[1], 0))))[:, :width]
            joint = jnp.ones((), jnp.bool_)
            for i, num in enumerate(codec.nums):
                joint = joint[..., None] & mask[i, :num]
            return joint.reshape(codec.n)
        return jnp.ones((codec.n,), jnp.bool_)

    def _extras_template(self) -> dict:
        """Zeros shaped like ``step``'s extras (abstract evaluation: nothing runs)."""
        state = jax.eval_shape(self.raw.reset, jax.random.PRNGKey(0))[0]
        space = self.action_space(None)
        action = jax.eval_shape(self.decode_action, jax.ShapeDtypeStruct(space.shape, jnp.int32) if self.codec.nums else
                                jax.ShapeDtypeStruct(self.codec.shape, jnp.float32))
        extras = jax.eval_shape(self.raw.step, state, action)[1].extras
        return jax.tree_util.tree_map(lambda s: jnp.zeros(s.shape, s.dtype), dict(extras))

    def _info(self, ts, extras) -> dict:
        return strong_types({"action_mask": self._structured_mask(ts.observation), "extras": extras})

    def reset(self, key, params):
        inner, ts = self.raw.reset(key)
        template = self._extras_template()
        same = jax.tree_util.tree_structure(dict(ts.extras)) == jax.tree_util.tree_structure(template)
        extras = jax.tree_util.tree_map(lambda a, t: jnp.asarray(a, t.dtype), dict(ts.extras), template) if same else template
        state = JumanjiState(strong_types(inner), jnp.zeros((), jnp.int32))
        return state, first_timestep(self.flatten_obs(ts.observation), self._info(ts, extras))

    def step(self, key, state, action, params):
        del key  # Jumanji keeps its random key in its state
        check_action_shape(self.name, action, self.action_space(params).shape)
        inner, ts = self.raw.step(state.inner, self.decode_action(action))
        elapsed = state.elapsed + 1
        last = ts.last()
        own_limit = jnp.bool_(False) if self.time_limit is None else elapsed >= self.time_limit
        param_limit = elapsed >= params.max_steps_in_episode if isinstance(params, JumanjiParams) else jnp.bool_(False)
        terminated = last & (jnp.asarray(ts.discount) == 0) & ~own_limit
        truncated = ~terminated & (param_limit | (last & ((jnp.asarray(ts.discount) > 0) | own_limit)))
        info = self._info(ts, dict(ts.extras))
        out = transition(self.flatten_obs(ts.observation), ts.reward, terminated, truncated, info)
        return JumanjiState(strong_types(inner), elapsed), out

    @functools.cached_property
    def _obs_bounds(self) -> tuple[np.ndarray, np.ndarray]:
        lows, highs = zip(*(_bounds(spec) for _, spec in _spec_leaves(self.raw.observation_spec)))
        return np.concatenate([b.ravel() for b in lows]), np.concatenate([b.ravel() for b in highs])

    @functools.cached_property
    def _act_bounds(self) -> tuple[np.ndarray, np.ndarray]:
        return _bounds(self.raw.action_spec)

    def observation_space(self, params):
        low, high = self._obs_bounds
        return spaces.Box(low, high, low.shape, jnp.float32)

    def action_space(self, params):
        codec = self.codec
        if codec.multi:
            return spaces.MultiDiscrete(codec.nums, jnp.int32)
        if codec.nums is not None:
            return spaces.Discrete(codec.n, jnp.int32)
        low, high = self._act_bounds
        return spaces.Box(low, high, codec.shape, jnp.float32)

    def __repr__(self) -> str:
        return f"JumanjiEnv({self.env_id!r})"


def register_jumanji_envs() -> list[str]:
    """Register ``jumanji/<id>`` for every id of :data:`JUMANJI_IDS` if jumanji is installed
    (without importing it); idempotent, returns the ids added."""
    from jaxrl.core import registry

    if not jumanji_available():
        return []
    added = []
    for env_id in JUMANJI_IDS:
        full = f"jumanji/{env_id}"
        if full in registry._REGISTRY:
            continue
        registry.register(full, JumanjiEnv, kwargs={"env_id": env_id}, description=f"Jumanji {env_id} (adapter)")
        added.append(full)
    return added
