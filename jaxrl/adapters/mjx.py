"""Physics environments from a MuJoCo XML model plus pure functions, stepped by MJX.

Writing an env takes a model file and four module-level pure functions::

    def init(key, model: mjx.Model, params) -> (qpos float32[nq], qvel float32[nv])
    def observation(data: mjx.Data, params) -> float32[obs_dim]
    def reward(state: MjxState, action: float32[nu], next_data: mjx.Data, params) -> float32[]
        # state: carried physics before the step; action in [-1, 1]; next_data: after it
    def terminated(data: mjx.Data, params) -> bool[]

    env = MjxEnv.from_xml("cartpole.xml", init=init, observation=observation, reward=reward,
                          terminated=terminated, frame_skip=2, name="mjx/CartPole-v0")

``reset`` draws ``(qpos, qvel)`` from ``init`` with its own key and runs ``mjx.forward`` so
every derived quantity is valid for ``observation``. ``step`` maps the action from
``[-1, 1]`` onto each actuator's ``ctrlrange`` (``ctrllimited`` actuators required), runs
``frame_skip`` ``mjx.step`` calls, then asks the pure functions for observation, reward and
termination (as after MuJoCo's ``mj_step``, ``qpos``/``qvel`` are current while derived
quantities such as ``xpos`` come from the last physics step's forward pass). Truncation is
the step counter reaching ``params.max_steps_in_episode``; auto-reset is a wrapper.

Params (:class:`MjxParams`, or any flax struct with the same fields plus the task's own)
are dynamic: the mass, friction and gravity scales are applied to the ``mjx.Model`` inside
``reset``/``step``, so they can be ``vmap``-ed. The model is loaded once per XML path and
cached; the env holds only the path, functions and ``frame_skip``. See ``docs/physics.md``.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.util
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from jaxrl.core import spaces
from jaxrl.adapters.params import PhysicsParams, clip_action, observation_size
from jaxrl.core.env import Environment, first_timestep, transition

PHYSICS_FIELDS = ("max_steps_in_episode", "mass_scale", "friction_scale", "gravity_scale")


MjxParams = PhysicsParams  # max_steps_in_episode (default 1000), mass/friction/gravity scales


@struct.dataclass
class MjxState:
    """State of one MJX env: only what MuJoCo carries from one step to the next.

    Everything else in ``mjx.Data`` (positions of bodies and geoms, contacts, forces) is
    recomputed from these by the next ``mjx.step``, so the state stays small in a rollout
    buffer and in checkpoints (``mjx.Data`` also holds zero-size arrays that checkpoint
    writers reject). Mocap bodies stay where the model puts them.

    Attributes:
      qpos: float32 ``[nq]``, generalised positions.
      qvel: float32 ``[nv]``, generalised velocities.
      act: float32 ``[na]`` actuator activations, or None when the model has none.
      qacc_warmstart: float32 ``[nv]``, the constraint solver's warm start.
      sim_time: float32 ``[]``, simulated seconds since reset (``mjx.Data.time``).
      time: int32 ``[]``, env steps taken in this episode.
    """

    qpos: jax.Array
    qvel: jax.Array
    act: Any
    qacc_warmstart: jax.Array
    sim_time: jax.Array
    time: jax.Array


def mjx_available() -> bool:
    """True when ``mujoco`` and ``mujoco-mjx`` are importable (checked without importing)."""
    return importlib.util.find_spec("mujoco") is not None and importlib.util.find_spec("mujoco.mjx") is not None


@functools.lru_cache(maxsize=None)
def load_model(xml_path: str):
    """``(mujoco.MjModel, mjx.Model)`` for an XML file (cached per path)."""
    import mujoco
    from mujoco import mjx

    mj_model = mujoco.MjModel.from_xml_path(xml_path)
    if mj_model.nu == 0:
        raise ValueError(f"{xml_path}: the model has no actuators, so there is nothing to act on")
    if not np.all(mj_model.actuator_ctrllimited):
        raise ValueError(f"{xml_path}: every actuator needs ctrllimited='true' and a ctrlrange")
    return mj_model, mjx.put_model(mj_model)


def scale_physics(model, params):
    """``model`` (an ``mjx.Model``) with masses, friction and gravity scaled by ``params``."""
    return model.replace(
        body_mass=model.body_mass * params.mass_scale,
        body_inertia=model.body_inertia * params.mass_scale,
        geom_friction=model.geom_friction * params.friction_scale,
        opt=model.opt.replace(gravity=model.opt.gravity * params.gravity_scale),
    )


def action_to_ctrl(action: jax.Array, ctrl_range: jax.Array) -> jax.Array:
    """Map ``action`` float32 ``[nu]`` in ``[-1, 1]`` affinely onto ``ctrl_range``
    float ``[nu, 2]`` (low, high per actuator)."""
    low, high = ctrl_range[:, 0], ctrl_range[:, 1]
    return low + (action + 1.0) * 0.5 * (high - low)


def to_state(data, time: jax.Array) -> MjxState:
    """The carried part of an ``mjx.Data`` (see :class:`MjxState`)."""
    act = data.act if data.act.size else None
    return MjxState(data.qpos, data.qvel, act, data.qacc_warmstart, jnp.asarray(data.time, jnp.float32), time)


def to_data(model, state: MjxState):
    """A fresh ``mjx.Data`` holding ``state``'s carried fields (derived fields zero)."""
    from mujoco import mjx

    data = mjx.make_data(model).replace(
        qpos=state.qpos, qvel=state.qvel, qacc_warmstart=state.qacc_warmstart, time=state.sim_time
    )
    return data if state.act is None else data.replace(act=state.act)


def physics_step(model, data, ctrl: jax.Array, frame_skip: int):
    """``frame_skip`` MJX steps holding ``ctrl`` fixed; returns the new ``mjx.Data``."""
    from mujoco import mjx

    data = data.replace(ctrl=ctrl)
    return jax.lax.fori_loop(0, frame_skip, lambda _, d: mjx.step(model, d), data)


@dataclasses.dataclass(frozen=True)
class MjxEnv(Environment):
    """An env from a MuJoCo XML model plus pure functions (see the module docstring).

    Attributes:
      xml_path: absolute path of the MuJoCo XML model.
      init: ``(key, model, params) -> (qpos, qvel)``, the reset distribution.
      observation: ``(data, params) -> float32[obs_dim]``.
      reward: ``(state_before: MjxState, action, next_data, params) -> float32[]``.
      terminated: ``(data, params) -> bool[]``.
      frame_skip: physics steps per env step (the control period is
        ``frame_skip * opt.timestep``).
      env_name: the id shown by ``name`` (e.g. ``mjx/CartPole-v0``).
      params: the default params (:class:`MjxParams` or a struct with its fields).
    """

    xml_path: str
    init: Callable
    observation: Callable
    reward: Callable
    terminated: Callable
    frame_skip: int = 1
    env_name: str = "mjx/Env"
    params: Any = MjxParams()

    invalid_action_rule = "clip into [-1, 1]; non-finite entries become 0"

    @classmethod
    def from_xml(cls, xml_path, *, init, observation, reward, terminated, frame_skip=1, name="mjx/Env", params=None):
        """Build an env, checking the model loads and the params carry the physics fields."""
        params = MjxParams() if params is None else params
        missing = [f for f in PHYSICS_FIELDS if not hasattr(params, f)]
        if missing:
            raise TypeError(f"params of type {type(params).__name__} lack the field(s) {missing}")
        if int(frame_skip) < 1:
            raise ValueError(f"frame_skip must be >= 1, got {frame_skip}")
        env = cls(str(xml_path), init, observation, reward, terminated, int(frame_skip), name, params)
        load_model(env.xml_path)  # fail early with the file's own error
        return env

    @property
    def mj_model(self):
        """The CPU ``mujoco.MjModel`` (for parity checks and rendering)."""
        return load_model(self.xml_path)[0]

    @property
    def model(self):
        """The ``mjx.Model`` before params are applied."""
        return load_model(self.xml_path)[1]

    @property
    def name(self) -> str:
        return self.env_name

    @property
    def default_params(self):
        return self.params

    def reset(self, key, params):
        from mujoco import mjx

        model = scale_physics(self.model, params)
        qpos, qvel = self.init(key, model, params)
        data = mjx.make_data(model).replace(qpos=jnp.asarray(qpos, jnp.float32), qvel=jnp.asarray(qvel, jnp.float32))
        data = mjx.forward(model, data)
        obs = jnp.asarray(self.observation(data, params), jnp.float32)
        return to_state(data, jnp.zeros((), jnp.int32)), first_timestep(obs)

    def step(self, key, state, action, params):
        del key  # MuJoCo's dynamics are deterministic
        model = scale_physics(self.model, params)
        action = clip_action(action)
        before = to_data(model, state)
        data = physics_step(model, before, action_to_ctrl(action, model.actuator_ctrlrange), self.frame_skip)
        time = state.time + 1
        ts = transition(
            jnp.asarray(self.observation(data, params), jnp.float32),
            self.reward(state, action, data, params),
            self.terminated(data, params),
            time >= params.max_steps_in_episode,
        )
        return to_state(data, time), ts

    def observation_space(self, params):
        return spaces.Box(-jnp.inf, jnp.inf, (observation_size(self),), jnp.float32)

    def action_space(self, params):
        return spaces.Box(-1.0, 1.0, (self.mj_model.nu,), jnp.float32)

    def render(self, state, params) -> np.ndarray:
        """Geoms projected on the x-z plane (see :mod:`jaxrl.adapters.projection`); the
        kinematics run on CPU MuJoCo, so rendering compiles nothing."""
        import mujoco

        from jaxrl.adapters.projection import render_geoms

        m = self.mj_model
        d = mujoco.MjData(m)
        d.qpos[:] = np.asarray(state.qpos, np.float64)
        mujoco.mj_kinematics(m, d)
        return render_geoms(d.geom_xpos, d.geom_xmat, m.geom_type, m.geom_size)

    def __repr__(self) -> str:
        return f"MjxEnv({self.env_name!r}, xml={self.xml_path!r})"
