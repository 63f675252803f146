"""Brax environments behind the jaxrl contract: ``jaxrl.make("brax/<name>")``.

The adapter drives Brax's *raw* environment (``brax.envs.get_environment``), never
``brax.envs.create``'s wrappers, and adds what the contract needs:

* ``terminated`` is the env's own ``done`` (the pole fell, the robot is unhealthy);
  ``truncated`` is our step counter reaching ``params.max_steps_in_episode`` (default
  1000). Brax's ``EpisodeWrapper`` folds the time limit into ``done``; here they never merge.
* New episodes come from a real ``reset`` with a fresh key, by our auto-reset wrappers,
  never Brax's ``AutoResetWrapper`` (one cached first state per env, Brax issue #167).
* Spaces: ``Box(-inf, inf, (observation_size,))`` and ``Box(-1, 1, (action_size,))``.
  Invalid-action rule: actions are clipped into ``[-1, 1]`` (non-finite entries become 0).

Ids and backends. ``brax/<name>`` uses Brax's default physics backend for that env
(``generalized`` for every env in Brax 0.14); ``brax/<name>-<backend>`` picks one of
``generalized``, ``positional``, ``spring`` or ``mjx``. The backend is *static* (it
changes the compiled program), so it lives in the id, not in the params.

Physical params (:class:`BraxParams`) are dynamic and can be ``vmap``-ed for domain
randomisation: ``mass_scale`` multiplies every body's mass and inertia, ``friction_scale``
every geom's friction, ``gravity_scale`` gravity, applied to the Brax ``System`` inside
``reset``/``step``. Quantities Brax derives from masses at load time (e.g.
``link.invweight``) keep their nominal values; at scale 1 the physics is exactly Brax's.
Every Brax env except :data:`EXCLUDED_BRAX_ENVS` is registered under every backend. Guide:
``docs/physics.md``.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import importlib.util
import warnings
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from jaxrl.core import spaces
from jaxrl.adapters.params import PhysicsParams, clip_action, observation_size, strong_types
from jaxrl.core.env import Environment, first_timestep, transition

#: Brax 0.14's ``brax.envs`` registry, minus :data:`EXCLUDED_BRAX_ENVS`; each is registered
#: under every backend in :data:`BACKENDS`. ``tests/test_brax.py`` checks this list against
#: the installed Brax and builds every registered id.
BRAX_ENV_NAMES = (
    "ant",
    "halfcheetah",
    "hopper",
    "humanoid",
    "humanoidstandup",
    "inverted_double_pendulum",
    "inverted_pendulum",
    "pusher",
    "reacher",
    "walker2d",
)
#: Brax envs that jaxrl does not expose, with the reason (``tests/test_brax.py`` re-checks
#: each reason against the installed Brax, so a fixed upstream bug shows up as a failure).
EXCLUDED_BRAX_ENVS = {
    "fast": "it is Brax's unit-test stub (no physics system, dict observations)",
    "swimmer": (
        "Brax 0.14.2's fluid model (brax/fluid.py) calls jnp.clip(a_min=...), which JAX 0.10 "
        "removed, so its step cannot be traced; Brax also builds it for the generalized "
        "backend only"
    ),
}
BACKENDS = ("generalized", "positional", "spring", "mjx")
DEFAULT_BACKEND = "generalized"


BraxParams = PhysicsParams  # max_steps_in_episode (default 1000), mass/friction/gravity scales


@struct.dataclass
class BraxState:
    """State of one adapted Brax env.

    Attributes:
      brax_state: Brax's ``brax.envs.State`` (``pipeline_state``, ``obs``
        float32 ``[obs_dim]``, ``reward``, ``done``, ``metrics``, ``info``).
      time: int32 ``[]``, steps taken in this episode.
    """

    brax_state: Any
    time: jax.Array


def brax_available() -> bool:
    """True when Brax is importable (checked without importing it)."""
    return importlib.util.find_spec("brax") is not None


@functools.lru_cache(maxsize=None)
def raw_brax_env(env_name: str, backend: str = DEFAULT_BACKEND, env_kwargs: tuple = ()):
    """Brax's own env object for ``env_name`` (cached: building one parses its XML)."""
    if env_name in EXCLUDED_BRAX_ENVS:
        raise ValueError(f"brax env {env_name!r} is not exposed by jaxrl: {EXCLUDED_BRAX_ENVS[env_name]}")
    if backend not in BACKENDS:
        raise ValueError(f"unknown brax backend {backend!r}; expected one of {BACKENDS}")
    from brax import envs

    if env_name not in envs._envs:
        raise ValueError(f"unknown brax env {env_name!r}; brax offers {sorted(envs._envs)}")
    with warnings.catch_warnings():
        # Brax 0.14 warns on every model load that its own pipelines are unmaintained;
        # the docs (docs/physics.md) say so once, and the mjx backend is available.
        warnings.filterwarnings("ignore", message="Brax System, piplines")
        return envs.get_environment(env_name, backend=backend, **dict(env_kwargs))


def scale_physics(sys, params: BraxParams):
    """``sys`` (a ``brax.System``) with masses, friction and gravity scaled by ``params``.

    Both the Brax-backend fields (``link.inertia``, ``gravity``) and the MuJoCo fields the
    ``mjx`` backend reads (``body_mass``, ``body_inertia``, ``opt.gravity``) are scaled, so
    the params mean the same thing under every backend.
    """
    mass, friction, gravity = params.mass_scale, params.friction_scale, params.gravity_scale
    inertia = sys.link.inertia
    return sys.replace(
        link=sys.link.replace(inertia=inertia.replace(mass=inertia.mass * mass, i=inertia.i * mass)),
        body_mass=sys.body_mass * mass,
        body_inertia=sys.body_inertia * mass,
        geom_friction=sys.geom_friction * friction,
        gravity=sys.gravity * gravity,
        opt=sys.opt.replace(gravity=sys.opt.gravity * gravity),
    )


def spd_inverse(m: jax.Array) -> jax.Array:
    """Inverse ``[n, n]`` of a symmetric positive-definite matrix ``m`` ``[n, n]``.

    Cholesky factor ``m = L L^T`` column by column, ``L^-1`` row by row (forward
    substitution), then ``m^-1 = L^-T L^-1``: two ``fori_loop``-s of ``n`` small
    matrix-vector steps in plain XLA arithmetic (Brax mass matrices: 1-27 dofs). Same
    result as ``jax.scipy.linalg.solve(m, I, assume_a="pos")`` to float32 rounding, without
    its LAPACK custom calls, which run batched under ``vmap`` on XLA's CPU thread pool (see
    ``docs/results.md`` on the LAPACK deadlock) and cost more than the arithmetic on these
    tiny matrices. (Unrolling the loops instead took seconds of compile per matrix size.)
    """
    n = m.shape[-1]
    chol = jax.lax.fori_loop(0, n, functools.partial(_cholesky_column, m), jnp.zeros_like(m))
    chol_inv = jax.lax.fori_loop(0, n, functools.partial(_inverse_row, chol), jnp.zeros_like(m))
    return chol_inv.T @ chol_inv


def _cholesky_column(m: jax.Array, j, chol: jax.Array) -> jax.Array:
    """``chol`` ``[n, n]`` with column ``j`` of ``m``'s Cholesky factor filled in (columns
    ``< j`` are done, columns ``>= j`` still zero)."""
    v = m[:, j] - chol @ chol[j]  # [n]
    return chol.at[:, j].set(jnp.where(jnp.arange(m.shape[0]) >= j, v / jnp.sqrt(v[j]), 0.0))


def _inverse_row(chol: jax.Array, i, chol_inv: jax.Array) -> jax.Array:
    """``chol_inv`` ``[n, n]`` with row ``i`` of ``chol^-1`` filled in (rows ``< i`` done,
    rows ``>= i`` still zero, so ``chol[i] @ chol_inv`` sums over ``k < i`` only)."""
    e_i = (jnp.arange(chol.shape[0]) == i).astype(chol.dtype)
    return chol_inv.at[i].set((e_i - chol[i] @ chol_inv) / chol[i, i])


def generalized_init(sys, q, qd, unused_act=None, unused_ctrl=None, debug: bool = False):
    """Brax's ``generalized`` pipeline ``init`` (the physics state of a reset) with the mass
    matrix inverted by :func:`spd_inverse` instead of LAPACK; otherwise step for step
    ``brax.generalized.pipeline.init`` of brax 0.14.2 (``tests/test_brax.py`` compares
    them). ``q`` ``[q_size]``, ``qd`` ``[qd_size]``."""
    from brax import contact, kinematics
    from brax.generalized import constraint, dynamics, mass
    from brax.generalized.base import State
    from brax.io import mjcf

    if sys.mj_model is not None:
        mjcf.validate_model(sys.mj_model)
    x, xd = kinematics.forward(sys, q, qd)
    state = dynamics.transform_com(sys, State.init(q, qd, x, xd))
    mass_mx = mass.matrix(sys, state)
    state = state.replace(mass_mx=mass_mx, mass_mx_inv=spd_inverse(mass_mx))
    state = constraint.jacobian(sys, state)
    if debug:
        state = state.replace(contact=contact.get(sys, state.x))
    return state


class _GeneralizedPipeline:
    """Brax's ``generalized`` pipeline module with :func:`generalized_init` as ``init``."""

    init = staticmethod(generalized_init)

    @staticmethod
    def step(*args, **kwargs):
        from brax.generalized import pipeline

        return pipeline.step(*args, **kwargs)


def _with_sys(raw_env, sys):
    """A shallow copy of a Brax env whose ``sys`` is ``sys`` (Brax reads ``self.sys``); a
    ``generalized`` env also gets the LAPACK-free :func:`generalized_init`."""
    env = copy.copy(raw_env)
    env.sys = sys
    if getattr(raw_env, "_backend", None) == "generalized":
        env._pipeline = _GeneralizedPipeline
    return env


def _info(brax_state) -> dict:
    """Brax's per-step metrics (reward terms, positions) as float32 info entries."""
    return {k: jnp.asarray(v, jnp.float32) for k, v in brax_state.metrics.items()}


@dataclasses.dataclass(frozen=True)
class BraxEnv(Environment):
    """A Brax env behind the jaxrl contract (see the module docstring).

    Attributes:
      env_name: Brax's name, e.g. ``"inverted_pendulum"``.
      backend: Brax physics backend: ``generalized``, ``positional``, ``spring`` or ``mjx``.
      env_kwargs: sorted ``(name, value)`` pairs passed to Brax's env constructor.
    """

    env_name: str
    backend: str = DEFAULT_BACKEND
    env_kwargs: tuple = ()

    invalid_action_rule = "clip into [-1, 1]; non-finite entries become 0"

    def __post_init__(self):
        raw_brax_env(self.env_name, self.backend, self.env_kwargs)  # fail early, clearly

    @property
    def raw(self):
        """Brax's env object (holds the ``System``; not hashable, never a jit argument)."""
        return raw_brax_env(self.env_name, self.backend, self.env_kwargs)

    @property
    def name(self) -> str:
        suffix = "" if self.backend == DEFAULT_BACKEND else f"-{self.backend}"
        return f"brax/{self.env_name}{suffix}"

    @property
    def default_params(self) -> BraxParams:
        return BraxParams()

    def _env(self, params: BraxParams):
        raw = self.raw
        return _with_sys(raw, scale_physics(raw.sys, params))

    def reset(self, key, params):
        brax_state = strong_types(self._env(params).reset(key))
        state = BraxState(brax_state, jnp.zeros((), jnp.int32))
        return state, first_timestep(jnp.asarray(brax_state.obs, jnp.float32), _info(brax_state))

    def step(self, key, state, action, params):
        del key  # Brax's dynamics are deterministic
        brax_state = strong_types(self._env(params).step(state.brax_state, clip_action(action)))
        time = state.time + 1
        ts = transition(
            jnp.asarray(brax_state.obs, jnp.float32),
            brax_state.reward,
            brax_state.done > 0.5,
            time >= params.max_steps_in_episode,
            _info(brax_state),
        )
        return BraxState(brax_state, time), ts

    def observation_space(self, params):
        return spaces.Box(-jnp.inf, jnp.inf, (observation_size(self),), jnp.float32)

    def action_space(self, params):
        return spaces.Box(-1.0, 1.0, (self.raw.action_size,), jnp.float32)

    def render(self, state, params) -> np.ndarray:
        """A side view (x-z plane; top view for planar x-y models such as reacher) of the
        model's geoms placed by the bodies' world poses, ``uint8[240, 320, 3]``."""
        from jaxrl.adapters.projection import render_geoms

        x = state.brax_state.pipeline_state.x
        xpos, xmat = geom_poses(self.raw.sys.mj_model, np.asarray(x.pos), np.asarray(x.rot))
        m = self.raw.sys.mj_model
        return render_geoms(xpos, xmat, m.geom_type, m.geom_size)

    def __repr__(self) -> str:
        return f"BraxEnv({self.env_name!r}, backend={self.backend!r})"


def quat_to_mat(q: np.ndarray) -> np.ndarray:
    """Rotation matrices ``[..., 3, 3]`` of unit quaternions ``[..., 4]`` (w, x, y, z)."""
    w, x, y, z = np.moveaxis(np.asarray(q, np.float64), -1, 0)
    return np.stack(
        [
            np.stack([1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)], -1),
            np.stack([2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)], -1),
            np.stack([2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)], -1),
        ],
        -2,
    )


def geom_poses(mj_model, body_pos: np.ndarray, body_rot: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """World positions ``[G, 3]`` and orientations ``[G, 3, 3]`` of every geom, from the
    world poses of the bodies (Brax's ``x.pos`` ``[B, 3]``, ``x.rot`` ``[B, 4]``, world body
    excluded) and the geoms' poses in their bodies (fixed by the model)."""
    body = np.asarray(mj_model.geom_bodyid)
    pos = np.vstack([np.zeros((1, 3)), np.asarray(body_pos, np.float64)])[body]
    rot = np.concatenate([np.eye(3)[None], quat_to_mat(body_rot)])[body]
    local = quat_to_mat(mj_model.geom_quat)
    xpos = pos + np.einsum("gij,gj->gi", rot, mj_model.geom_pos)
    return xpos, rot @ local


# --------------------------------------------------------------------------- registration


def register_brax_envs() -> list[str]:
    """Register ``brax/<name>`` and ``brax/<name>-<backend>`` for every Brax env, if Brax
    is installed (Brax itself is imported only when an env is built). Idempotent; returns
    the ids it registered."""
    from jaxrl.core import registry

    if not brax_available():
        return []
    added = []
    for env_name in BRAX_ENV_NAMES:
        variants = [(f"brax/{env_name}", DEFAULT_BACKEND)]
        variants += [(f"brax/{env_name}-{b}", b) for b in BACKENDS]
        for env_id, backend in variants:
            if env_id in registry._REGISTRY:
                continue
            registry.register(
                env_id,
                BraxEnv,
                kwargs={"env_name": env_name, "backend": backend},
                description=f"Brax {env_name} ({backend} backend), actions in [-1, 1], 1000-step limit",
            )
            added.append(env_id)
    return added
