"""CartPole-v1: Gymnasium's classic cart-pole (Barto, Sutton & Anderson 1983).

Dynamics, reward (+1 every step, including the one that terminates), termination
(|x| > 2.4 or |theta| > 12 degrees) and the 500-step truncation are Gymnasium's
``CartPoleEnv`` with ``TimeLimit(500)``. All arithmetic is float32. Derived constants
(total mass, pole mass-length) are computed inside ``step`` from params, so editing
``masspole`` or ``length`` (or vmapping over them) stays consistent.

Actions: 0 pushes left, 1 pushes right. Invalid-action rule: any action other than 1
pushes left (Gymnasium asserts instead); no value produces NaN.
"""

from __future__ import annotations

import math
from typing import ClassVar

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from jaxrl.core import spaces
from jaxrl.core.env import Environment, Range, check_action_shape, first_timestep, transition


# Cephes sinf/cosf: pi/2 split in three float32 parts (Cody-Waite reduction) and the
# minimax polynomial coefficients on [-pi/4, pi/4].
_PIO2 = (np.float32(1.5703125), np.float32(4.837512969970703125e-4), np.float32(7.54978995489188216e-8))
_SIN_COEF = (np.float32(-1.6666654611e-1), np.float32(8.3321608736e-3), np.float32(-1.9515295891e-4))
_COS_COEF = (np.float32(4.166664568298827e-2), np.float32(-1.388731625493765e-3), np.float32(2.443315711809948e-5))


def sincos(x: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``(sin(x), cos(x))`` in float32 as one vectorisable polynomial (no libm call).

    XLA:CPU evaluates ``jnp.sin``/``jnp.cos`` element by element through a slow path; on a
    batch of cart-poles they cost ~85% of a step. This is Cephes' ``sinf``/``cosf``:
    reduce ``x`` by multiples ``k`` of pi/2 (three-part Cody-Waite), evaluate degree-7/8
    minimax polynomials on ``[-pi/4, pi/4]`` and pick signs by the quadrant ``k mod 4``.
    Error <= 1e-7 absolute (a few ulp) against float64 for ``|x| <= 5e4`` (a pole angle
    of thousands of turns); beyond that the reduction loses accuracy but the result stays
    finite and within ``[-1, 1]`` (the reduced argument is clipped). NaN/inf give NaN.
    """
    x = jnp.asarray(x, jnp.float32)
    k = jnp.round(x * np.float32(2.0 / np.pi))
    r = x - k * _PIO2[0]
    r = r - k * _PIO2[1]
    r = r - k * _PIO2[2]
    r = jnp.clip(r, -0.8, 0.8)  # |r| <= pi/4 + rounding unless |x| is huge: keeps it finite
    r2 = r * r
    s = r + r * r2 * (_SIN_COEF[0] + r2 * (_SIN_COEF[1] + r2 * _SIN_COEF[2]))
    c = 1.0 - 0.5 * r2 + r2 * r2 * (_COS_COEF[0] + r2 * (_COS_COEF[1] + r2 * _COS_COEF[2]))
    quadrant = k - 4.0 * jnp.floor(k * 0.25)  # k mod 4, in float: no int overflow
    swap = (quadrant == 1.0) | (quadrant == 3.0)
    sin = jnp.where(swap, c, s)
    cos = jnp.where(swap, s, c)
    sin = jnp.where(quadrant >= 2.0, -sin, sin)
    cos = jnp.where((quadrant == 1.0) | (quadrant == 2.0), -cos, cos)
    return sin, cos


@struct.dataclass
class CartPoleParams:
    gravity: float = 9.8
    masscart: float = 1.0
    masspole: float = 0.1
    length: float = 0.5  # half the pole's length
    force_mag: float = 10.0
    tau: float = 0.02  # seconds between state updates
    theta_threshold_radians: float = 12 * 2 * math.pi / 360
    x_threshold: float = 2.4
    max_steps_in_episode: int = 500

    bounds: ClassVar[dict] = {
        "masscart": Range(gt=0),
        "masspole": Range(gt=0),
        "length": Range(gt=0),
        "tau": Range(gt=0),
        "theta_threshold_radians": Range(gt=0),
        "x_threshold": Range(gt=0),
        "max_steps_in_episode": Range(ge=1),
    }


@struct.dataclass
class CartPoleState:
    x: jax.Array  # float32 [], cart position (m)
    x_dot: jax.Array  # float32 [], cart velocity (m/s)
    theta: jax.Array  # float32 [], pole angle (rad)
    theta_dot: jax.Array  # float32 [], pole angular velocity (rad/s)
    time: jax.Array  # int32 [], steps taken in this episode


class CartPole(Environment):
    invalid_action_rule = "any action other than 1 pushes left"

    def __eq__(self, other):
        return type(other) is CartPole

    def __hash__(self):
        return hash(CartPole)

    @property
    def name(self) -> str:
        return "CartPole-v1"

    @property
    def default_params(self) -> CartPoleParams:
        return CartPoleParams()

    def reset(self, key, params):
        x, x_dot, theta, theta_dot = jax.random.uniform(key, (4,), jnp.float32, -0.05, 0.05)
        state = CartPoleState(x, x_dot, theta, theta_dot, jnp.zeros((), jnp.int32))
        return state, first_timestep(self._obs(state))

    @staticmethod
    def _obs(state: CartPoleState) -> jax.Array:
        return jnp.stack([state.x, state.x_dot, state.theta, state.theta_dot])

    def step(self, key, state, action, params):
        del key  # deterministic dynamics
        check_action_shape(self.name, action, ())
        force = jnp.where(action == 1, params.force_mag, -params.force_mag)
        sintheta, costheta = sincos(state.theta)
        total_mass = params.masspole + params.masscart
        polemass_length = params.masspole * params.length
        temp = (force + polemass_length * state.theta_dot**2 * sintheta) / total_mass
        thetaacc = (params.gravity * sintheta - costheta * temp) / (
            params.length * (4.0 / 3.0 - params.masspole * costheta**2 / total_mass)
        )
        xacc = temp - polemass_length * thetaacc * costheta / total_mass
        # Explicit Euler, as Gymnasium's default kinematics_integrator="euler".
        x = state.x + params.tau * state.x_dot
        x_dot = state.x_dot + params.tau * xacc
        theta = state.theta + params.tau * state.theta_dot
        theta_dot = state.theta_dot + params.tau * thetaacc
        time = state.time + 1
        new = CartPoleState(
            x.astype(jnp.float32),
            x_dot.astype(jnp.float32),
            theta.astype(jnp.float32),
            theta_dot.astype(jnp.float32),
            time,
        )
        terminated = (
            (new.x < -params.x_threshold)
            | (new.x > params.x_threshold)
            | (new.theta < -params.theta_threshold_radians)
            | (new.theta > params.theta_threshold_radians)
        )
        truncated = time >= params.max_steps_in_episode
        return new, transition(self._obs(new), 1.0, terminated, truncated)

    def observation_space(self, params):
        high = jnp.array(
            [params.x_threshold * 2, jnp.finfo(jnp.float32).max, params.theta_threshold_radians * 2, jnp.finfo(jnp.float32).max],
            jnp.float32,
        )
        return spaces.Box(-high, high, (4,), jnp.float32)

    def action_space(self, params):
        return spaces.Discrete(2)

    def render(self, state, params) -> np.ndarray:
        from jaxrl.core import raster

        width, height = 600, 400
        world_width = float(params.x_threshold) * 2
        scale = width / world_width
        cart_y = 300  # pixel row of the cart's top (image y grows downwards)
        canvas = raster.blank(height, width)
        raster.line(canvas, (0, cart_y), (width, cart_y), (0, 0, 0), 1)
        cart_x = float(state.x) * scale + width / 2.0
        raster.rect(canvas, cart_x - 25, cart_y - 15, cart_x + 25, cart_y + 15, (0, 0, 0))
        pole_len = scale * 2 * float(params.length)
        theta = float(state.theta)
        tip = (cart_x + pole_len * math.sin(theta), cart_y - 10 - pole_len * math.cos(theta))
        raster.line(canvas, (cart_x, cart_y - 10), tip, (202, 152, 101), 10)
        raster.circle(canvas, (cart_x, cart_y - 10), 5, (129, 132, 203))
        return canvas
