"""MuJoCo Playground's DM Control Suite behind the jaxrl contract: ``jaxrl.make("playground/<Name>")``.

The adapter drives Playground's raw env (``dm_control_suite.load``), never its Brax
training wrappers, with MJX's JAX backend (``impl="jax"``; Playground defaults to Warp,
which needs a GPU), and adds what the contract needs:

* ``terminated`` is the env's own ``done`` (DM Control tasks set it only when the physics
  turns NaN); ``truncated`` is our step counter reaching ``params.max_steps_in_episode``,
  whose default is the env config's ``episode_length`` (1000). Playground leaves the limit to
  Brax's ``EpisodeWrapper``, which folds it into ``done``; here the two never merge.
* New episodes come from a real ``reset`` with a fresh key, by our auto-reset wrappers (or
  :class:`jaxrl.core.reset_pool.ResetPoolVectorEnv`), which keep ``info["final_obs"]``.
* The state carries only the ``mjx.Data`` fields that survive a step (:data:`CARRIED`) plus
  Playground's ``info``/``metrics``; ``mjx.step`` recomputes everything else, so the step
  is Playground's own, and checkpoints hold no zero-size arrays.
* Spaces: ``Box(-inf, inf, (obs_dim,))`` and ``Box(-1, 1, (action_size,))``; actions are
  clipped into ``[-1, 1]`` (NaN -> 0) and passed on, as Playground's PPO passes them.
* Params (:class:`PlaygroundParams`, the Brax/MJX physics params) scale masses, friction and
  gravity of the ``mjx.Model`` inside ``reset``/``step``; at scale 1 the physics is Playground's.

Only the DM Control Suite is adapted: its XMLs ship in the package. Locomotion and
manipulation envs load robots from ``mujoco_menagerie``, which Playground clones from GitHub
when such an env is built; they are refused (:data:`MENAGERIE_ENV_NAMES`) before anything
is built. Install: ``pip install 'jaxrl[playground]'``. Guide: ``docs/physics.md``.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import importlib.util

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from jaxrl.adapters.mjx import scale_physics
from jaxrl.adapters.params import PhysicsParams, clip_action, observation_size, strong_types
from jaxrl.core import spaces
from jaxrl.core.env import Environment, first_timestep, transition

#: Playground 0.2's ``dm_control_suite`` registry; each is registered as ``playground/<name>``.
#: ``tests/test_playground.py`` checks this list against the installed Playground.
PLAYGROUND_ENV_NAMES = (
    "AcrobotSwingup", "AcrobotSwingupSparse", "BallInCup", "CartpoleBalance", "CartpoleBalanceSparse",
    "CartpoleSwingup", "CartpoleSwingupSparse", "CheetahRun", "FingerSpin", "FingerTurnEasy",
    "FingerTurnHard", "FishSwim", "HopperHop", "HopperStand", "HumanoidRun", "HumanoidStand",
    "HumanoidWalk", "PendulumSwingup", "PointMass", "ReacherEasy", "ReacherHard", "SwimmerSwimmer6",
    "WalkerRun", "WalkerStand", "WalkerWalk",
)
#: Playground 0.2's locomotion and manipulation envs: their models come from
#: ``mujoco_menagerie``, cloned from GitHub at run time, so they are refused (listed here so
#: that refusing needs no import; the tests compare the list with the installed Playground).
MENAGERIE_ENV_NAMES = (
    "ApolloJoystickFlatTerrain", "BarkourJoystick", "BerkeleyHumanoidJoystickFlatTerrain",
    "BerkeleyHumanoidJoystickRoughTerrain", "G1JoystickFlatTerrain", "G1JoystickRoughTerrain",
    "Go1JoystickFlatTerrain", "Go1JoystickRoughTerrain", "Go1Getup", "Go1Handstand", "Go1Footstand",
    "H1InplaceGaitTracking", "H1JoystickGaitTracking", "Op3Joystick", "SpotFlatTerrainJoystick",
    "SpotGetup", "SpotJoystickGaitTracking", "T1JoystickFlatTerrain", "T1JoystickRoughTerrain",
    "AlohaHandOver", "AlohaSinglePegInsertion", "PandaPickCube", "PandaPickCubeOrientation",
    "PandaPickCubeCartesian", "PandaOpenCabinet", "PandaRobotiqPushCube", "LeapCubeReorient",
    "LeapCubeRotateZAxis", "AeroCubeRotateZAxis",
)
MENAGERIE_REASON = (
    "its robot model comes from mujoco_menagerie, which MuJoCo Playground clones from GitHub when "
    "the env is built (nothing may download at run time); only the DM Control Suite is adapted"
)
#: DM Control Suite envs that jaxrl does not register, with the reason
#: (``tests/test_playground.py`` re-checks it against the installed Playground and MuJoCo).
EXCLUDED_PLAYGROUND_ENVS = {
    name: (
        "playground 0.2.0 builds its model with MjSpec.find_body, which mujoco 3.17 no longer has "
        "(reacher.py compares version strings: '3.17.0' >= '3.3.0' is False)"
    )
    for name in ("ReacherEasy", "ReacherHard")
}
#: Config keys an id may not override: the backend and the vision variant are fixed.
FIXED_CONFIG = ("impl", "vision")
#: ``mjx.Data`` fields that carry from one step to the next (``mjx.step`` recomputes the
#: rest from them); fields of size zero in a model are left out of the state.
CARRIED = ("qpos", "qvel", "act", "qacc_warmstart", "time", "ctrl", "mocap_pos", "mocap_quat",
           "xfrc_applied", "qfrc_applied")
INSTALL_HINT = "pip install 'jaxrl[playground]'"

PlaygroundParams = PhysicsParams  # max_steps_in_episode (default: episode_length), scales


@struct.dataclass
class PlaygroundState:
    """State of one adapted Playground env.

    Attributes:
      data: the non-empty :data:`CARRIED` fields of ``mjx.Data`` (name -> array).
      info: Playground's ``State.info`` (its reset key and task state, e.g. targets).
      metrics: Playground's ``State.metrics`` (float32 reward terms).
      time: int32 ``[]``, steps taken in this episode.
    """

    data: dict
    info: dict
    metrics: dict
    time: jax.Array


def playground_available() -> bool:
    """True when MuJoCo Playground is importable (checked without importing it)."""
    return importlib.util.find_spec("mujoco_playground") is not None


def check_name(env_name: str) -> None:
    """Raise ``ValueError`` in one line when ``env_name`` is refused or excluded (no import)."""
    if env_name in MENAGERIE_ENV_NAMES:
        raise ValueError(f"playground env {env_name!r} is not adapted by jaxrl: {MENAGERIE_REASON}")
    if env_name in EXCLUDED_PLAYGROUND_ENVS:
        raise ValueError(f"playground env {env_name!r} is not adapted by jaxrl: {EXCLUDED_PLAYGROUND_ENVS[env_name]}")


@functools.lru_cache(maxsize=None)
def raw_playground_env(env_name: str, config_overrides: tuple = ()):
    """Playground's env object for ``env_name`` on MJX's JAX backend (cached: building one
    parses its XML). Only DM Control Suite names reach Playground's loader."""
    check_name(env_name)
    bad = [k for k, _ in config_overrides if k in FIXED_CONFIG]
    if bad:
        raise ValueError(f"playground config key(s) {bad} cannot be overridden: the adapter fixes {FIXED_CONFIG}")
    if not playground_available():
        raise ModuleNotFoundError(f"playground/{env_name} needs MuJoCo Playground: {INSTALL_HINT}")
    from mujoco_playground._src import dm_control_suite

    if env_name not in dm_control_suite._envs:
        raise ValueError(f"unknown playground env {env_name!r}; the DM Control Suite offers {sorted(dm_control_suite._envs)}")
    overrides = dict(config_overrides, impl="jax", vision=False)
    return dm_control_suite.load(env_name, config_overrides=overrides)


def _with_model(raw_env, model):
    """A shallow copy of a Playground env whose ``mjx_model`` is ``model`` (its
    ``reset``/``step`` read ``self.mjx_model``, i.e. ``self._mjx_model``)."""
    env = copy.copy(raw_env)
    env._mjx_model = model
    return env


def _carried(data) -> dict:
    """The non-empty :data:`CARRIED` fields of ``data`` as arrays (some envs' reset leaves a
    Python float in ``time``)."""
    fields = {k: jnp.asarray(getattr(data, k)) for k in CARRIED}
    return {k: v for k, v in fields.items() if v.size}


def _info(metrics: dict) -> dict:
    return {k: jnp.asarray(v, jnp.float32) for k, v in metrics.items()}


@dataclasses.dataclass(frozen=True)
class PlaygroundEnv(Environment):
    """A DM Control Suite env of MuJoCo Playground behind the jaxrl contract (see the module
    docstring).

    Attributes:
      env_name: Playground's name, e.g. ``"CartpoleBalance"``.
      config_overrides: sorted ``(key, value)`` pairs applied to the env's default config
        (e.g. ``(("ctrl_dt", 0.02),)``); ``impl`` and ``vision`` are fixed.
    """

    env_name: str
    config_overrides: tuple = ()

    invalid_action_rule = "clip into [-1, 1]; non-finite entries become 0"

    def __post_init__(self):
        raw_playground_env(self.env_name, self.config_overrides)  # fail early, clearly

    @property
    def raw(self):
        """Playground's env object (holds the models; not hashable, never a jit argument)."""
        return raw_playground_env(self.env_name, self.config_overrides)

    @property
    def name(self) -> str:
        return f"playground/{self.env_name}"

    @property
    def default_params(self) -> PlaygroundParams:
        return PlaygroundParams(max_steps_in_episode=int(self.raw._config.episode_length))

    def _env(self, params):
        raw = self.raw
        return _with_model(raw, scale_physics(raw.mjx_model, params))

    def _data(self, carried: dict):
        """A full ``mjx.Data`` holding ``carried`` (derived fields zero: ``mjx.step``
        recomputes them first)."""
        from mujoco_playground._src import mjx_env

        raw = self.raw
        data = mjx_env.make_data(raw.mj_model, impl="jax", naconmax=raw._config.naconmax, njmax=raw._config.njmax)
        return data.replace(**carried)

    def reset(self, key, params):
        pg = self._env(params).reset(key)
        state = PlaygroundState(_carried(pg.data), dict(pg.info), dict(pg.metrics), jnp.zeros((), jnp.int32))
        return strong_types(state), first_timestep(jnp.asarray(pg.obs, jnp.float32), _info(pg.metrics))

    def step(self, key, state, action, params):
        del key  # the DM Control Suite's dynamics are deterministic
        from mujoco_playground._src import mjx_env

        env = self._env(params)
        # Playground's step reads data, info and metrics only (never obs, reward or done).
        zero = jnp.zeros((), jnp.float32)
        before = mjx_env.State(self._data(state.data), zero, zero, zero, dict(state.metrics), dict(state.info))
        pg = env.step(before, clip_action(action))
        time = state.time + 1
        ts = transition(
            jnp.asarray(pg.obs, jnp.float32),
            pg.reward,
            pg.done > 0.5,
            time >= params.max_steps_in_episode,
            _info(pg.metrics),
        )
        new = PlaygroundState(_carried(pg.data), dict(pg.info), dict(pg.metrics), time)
        return strong_types(new), ts

    def observation_space(self, params):
        return spaces.Box(-jnp.inf, jnp.inf, (observation_size(self),), jnp.float32)

    def action_space(self, params):
        return spaces.Box(-1.0, 1.0, (self.raw.action_size,), jnp.float32)

    def render(self, state, params) -> np.ndarray:
        """Geoms projected on the x-z plane (:mod:`jaxrl.adapters.projection`), placed by CPU
        MuJoCo kinematics; ``uint8[240, 320, 3]``."""
        import mujoco

        from jaxrl.adapters.projection import render_geoms

        m = self.raw.mj_model
        d = mujoco.MjData(m)
        d.qpos[:] = np.asarray(state.data["qpos"], np.float64)
        if "mocap_pos" in state.data:
            d.mocap_pos[:] = np.asarray(state.data["mocap_pos"], np.float64)
        mujoco.mj_kinematics(m, d)
        return render_geoms(d.geom_xpos, d.geom_xmat, m.geom_type, m.geom_size)

    def __repr__(self) -> str:
        return f"PlaygroundEnv({self.env_name!r})"


def register_playground_envs() -> list[str]:
    """Register ``playground/<name>`` for every name of :data:`PLAYGROUND_ENV_NAMES` (minus
    :data:`EXCLUDED_PLAYGROUND_ENVS`) if Playground is installed, without importing it; the
    menagerie and excluded names are registered as refusals, with their reasons. Idempotent; returns the ids added."""
    from jaxrl.core import registry

    if not playground_available():
        return []
    for env_name in MENAGERIE_ENV_NAMES:
        registry.refuse(f"playground/{env_name}", MENAGERIE_REASON)
    for env_name, reason in EXCLUDED_PLAYGROUND_ENVS.items():
        registry.refuse(f"playground/{env_name}", reason)
    added = []
    for env_name in PLAYGROUND_ENV_NAMES:
        env_id = f"playground/{env_name}"
        if env_name in EXCLUDED_PLAYGROUND_ENVS or env_id in registry._REGISTRY:
            continue
        registry.register(env_id, PlaygroundEnv, kwargs={"env_name": env_name},
                          description=f"MuJoCo Playground {env_name} (DM Control Suite, MJX jax backend)")
        added.append(env_id)
    return added
