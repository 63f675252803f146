"""Cart-pole tasks simulated by MuJoCo-XLA from the repository's own model file.

The model (``envs/assets/mjx_cartpole.xml``): a 1 kg cart on a frictionless rail, a
0.1 kg, 1 m pole on a hinge, one motor pushing the cart with up to 10 N; 10 ms physics
steps, two per env step (50 Hz control). Each task is four pure functions handed to
:meth:`jaxrl.adapters.mjx.MjxEnv.from_xml`, the way to write any MJX env.

``mjx/CartPole-v0`` (balance): starts near upright (every coordinate uniform in
+-0.05), reward 1 per step, terminated when ``|x| > 2.4`` m or ``|angle| > 0.2`` rad,
truncated at 1000 steps. Observation ``[x, angle, x_dot, angle_dot]``.

``mjx/CartPoleSwingup-v0``: starts hanging down (angle pi +- 0.1), never terminates,
truncated at 1000 steps. Reward in ``[0, 1]`` in the spirit of the DeepMind Control Suite's
smooth swing-up reward: ``upright * centred * small_control * small_velocity`` with
``upright = (1 + cos angle) / 2``, ``centred = (1 + exp(-x^2)) / 2``,
``small_control = (4 + 1 - u^2) / 5`` and ``small_velocity = (1 + exp(-angle_dot^2 / 25)) / 2``.
Observation ``[x, cos angle, sin angle, x_dot, angle_dot]``.

Actions: one float in ``[-1, 1]`` (force / 10 N); clipped, NaN -> 0.
"""

from __future__ import annotations

import os

import jax
import jax.numpy as jnp

from jaxrl.adapters.mjx import MjxEnv, MjxParams, mjx_available

XML_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "assets", "mjx_cartpole.xml")
FRAME_SKIP = 2
X_THRESHOLD = 2.4  # m
ANGLE_THRESHOLD = 0.2  # rad


# --------------------------------------------------------------------------- balance


def balance_init(key, model, params):
    """``qpos = [x, angle]``, ``qvel`` uniform in +-0.05 (near upright, at rest)."""
    q = jax.random.uniform(key, (4,), jnp.float32, -0.05, 0.05)
    return q[:2], q[2:]


def balance_observation(data, params):
    """``[x, angle, x_dot, angle_dot]`` float32 ``[4]``."""
    return jnp.concatenate([data.qpos, data.qvel])


def balance_reward(state, action, next_data, params):
    """1 for every step, including the one that terminates (as Gymnasium's cart-pole)."""
    return jnp.ones((), jnp.float32)


def balance_terminated(data, params):
    """The cart left the rail or the pole tilted past 0.2 rad."""
    return (jnp.abs(data.qpos[0]) > X_THRESHOLD) | (jnp.abs(data.qpos[1]) > ANGLE_THRESHOLD)


# --------------------------------------------------------------------------- swing-up


def swingup_init(key, model, params):
    """Hanging down: ``angle = pi + U(-0.1, 0.1)``, ``x`` and velocities U(-0.01, 0.01)."""
    k_angle, k_rest = jax.random.split(key)
    angle = jnp.pi + jax.random.uniform(k_angle, (), jnp.float32, -0.1, 0.1)
    x, x_dot, angle_dot = jax.random.uniform(k_rest, (3,), jnp.float32, -0.01, 0.01)
    return jnp.stack([x, angle]), jnp.stack([x_dot, angle_dot])


def swingup_observation(data, params):
    """``[x, cos angle, sin angle, x_dot, angle_dot]`` float32 ``[5]``."""
    angle = data.qpos[1]
    return jnp.stack([data.qpos[0], jnp.cos(angle), jnp.sin(angle), data.qvel[0], data.qvel[1]])


def swingup_reward(state, action, next_data, params):
    """Smooth reward in ``[0, 1]``: upright x centred x small control x small velocity."""
    x, angle = next_data.qpos[0], next_data.qpos[1]
    upright = (1.0 + jnp.cos(angle)) / 2.0
    centred = (1.0 + jnp.exp(-(x**2))) / 2.0
    small_control = (4.0 + 1.0 - jnp.sum(action**2)) / 5.0
    small_velocity = (1.0 + jnp.exp(-(next_data.qvel[1] ** 2) / 25.0)) / 2.0
    return upright * centred * small_control * small_velocity


def swingup_terminated(data, params):
    """Never: the swing-up task only ends by truncation."""
    return jnp.zeros((), jnp.bool_)


# --------------------------------------------------------------------------- envs


def _cartpole_task(name: str, init, observation, reward, terminated) -> MjxEnv:
    """An env named ``name`` on the shared cart-pole model (``XML_PATH``, ``FRAME_SKIP``
    physics steps per env step, 1000-step limit) with the task's four pure functions."""
    return MjxEnv.from_xml(
        XML_PATH,
        init=init,
        observation=observation,
        reward=reward,
        terminated=terminated,
        frame_skip=FRAME_SKIP,
        name=name,
        params=MjxParams(max_steps_in_episode=1000),
    )


def cartpole() -> MjxEnv:
    """``mjx/CartPole-v0``: balance the pole (see the module docstring)."""
    return _cartpole_task("mjx/CartPole-v0", balance_init, balance_observation, balance_reward, balance_terminated)


def cartpole_swingup() -> MjxEnv:
    """``mjx/CartPoleSwingup-v0``: swing the pole up and keep it there."""
    return _cartpole_task(
        "mjx/CartPoleSwingup-v0", swingup_init, swingup_observation, swingup_reward, swingup_terminated
    )


def register() -> list[str]:
    """Register the MJX cart-pole ids when ``mujoco-mjx`` is installed (idempotent)."""
    from jaxrl.core import registry

    if not mjx_available():
        return []
    added = []
    for env_id, factory, description in [
        ("mjx/CartPole-v0", cartpole, "MJX cart-pole from envs/assets XML: balance, 1000-step limit"),
        ("mjx/CartPoleSwingup-v0", cartpole_swingup, "MJX cart-pole swing-up, smooth reward in [0, 1], 1000 steps"),
    ]:
        if env_id not in registry._REGISTRY:
            registry.register(env_id, factory, description=description)
            added.append(env_id)
    return added
