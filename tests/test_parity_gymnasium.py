"""Step-by-step parity with Gymnasium for every ported classic-control env.

For each env: draw many start states spread over the whole state space (not only the reset
distribution), roll a batch of them forward with random actions in one jitted ``scan``,
then replay every single transition in Gymnasium from *our* state before it (set through
``env.unwrapped.state`` and the ``TimeLimit`` step counter) and compare the observation,
reward, terminated and truncated flags at float32 tolerance. Gymnasium integrates in
float64, we in float32; since each transition starts from our state, errors cannot
accumulate and the tolerance stays at float32 level.

Actions include the edges of the action space and, for continuous actions, values outside
it: our documented rule is to clip, so we compare with Gymnasium stepped with the clipped
action. A terminated flag may only differ where Gymnasium's own state lies within float32
rounding of the termination threshold (never hit with these seeds, but allowed for).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Callable

import gymnasium as gym
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import USER_COMPILE

import jaxrl
from jaxrl_envs.acrobot import AcrobotState
from jaxrl_envs.cartpole import CartPoleState
from jaxrl_envs.mountain_car import MountainCarState
from jaxrl_envs.mountain_car_continuous import MountainCarContinuousState
from jaxrl_envs.pendulum import PendulumState

NUM_STARTS = 40  # start states per env
NUM_STEPS = 30  # steps rolled from each: 1,200 compared transitions per env
RTOL, ATOL = 2e-5, 2e-5


@dataclasses.dataclass(frozen=True)
class Case:
    env_id: str
    #: (numpy rng, n, params) -> our state pytree, batched over n (float32/int32 leaves).
    start_states: Callable
    #: one env's state (numpy leaves) -> Gymnasium's ``unwrapped.state``.
    gym_state: Callable
    #: (numpy rng, shape) -> our actions (numpy), including invalid ones where the rule is "clip".
    actions: Callable
    #: our action -> the action Gymnasium is stepped with (the documented rule applied).
    gym_action: Callable
    #: Gymnasium's post-step unwrapped env -> distance of its state from the termination
    #: threshold (flags may disagree only where this is below float32 rounding).
    margin: Callable


def _times(rng, n, limit):
    """Half the episodes start near the time limit, so truncation fires inside the rollout."""
    near = rng.integers(limit - NUM_STEPS, limit, n)
    return np.where(np.arange(n) % 2 == 0, near, rng.integers(0, limit - NUM_STEPS, n)).astype(np.int32)


def _f32(x):
    return np.asarray(x, np.float32)


# --- CartPole ------------------------------------------------------------------------------
def _cartpole_starts(rng, n, params):
    return CartPoleState(
        x=_f32(rng.uniform(-2.4, 2.4, n)),
        x_dot=_f32(rng.uniform(-2.5, 2.5, n)),
        theta=_f32(rng.uniform(-0.21, 0.21, n)),
        theta_dot=_f32(rng.uniform(-3.0, 3.0, n)),
        time=_times(rng, n, params.max_steps_in_episode),
    )


def _cartpole_margin(u):
    x, _, theta, _ = u.state
    return min(abs(abs(x) - u.x_threshold), abs(abs(theta) - u.theta_threshold_radians))


# --- Acrobot -------------------------------------------------------------------------------
def _acrobot_starts(rng, n, params):
    return AcrobotState(
        theta1=_f32(rng.uniform(-math.pi, math.pi, n)),
        theta2=_f32(rng.uniform(-math.pi, math.pi, n)),
        dtheta1=_f32(rng.uniform(-4 * math.pi, 4 * math.pi, n)),
        dtheta2=_f32(rng.uniform(-9 * math.pi, 9 * math.pi, n)),
        time=_times(rng, n, params.max_steps_in_episode),
    )


def _acrobot_margin(u):
    s = u.state
    return abs(-math.cos(s[0]) - math.cos(s[1] + s[0]) - 1.0)


def _acrobot_actions(rng, shape):
    # Mostly valid actions; a few out-of-range ones exercise the clip rule.
    return rng.choice(np.array([-2, 0, 1, 2, 3], np.int32), shape, p=[0.03, 0.31, 0.32, 0.31, 0.03])


# --- MountainCar (discrete and continuous) -------------------------------------------------
def _car_starts(state_cls):
    def starts(rng, n, params):
        position = _f32(rng.uniform(-1.2, 0.6, n))
        velocity = _f32(rng.uniform(-0.07, 0.07, n))
        # Edge cases: at the left wall moving left, at the right wall, just below the goal.
        position[:3] = [-1.2, 0.6, params.goal_position - 0.01]
        velocity[:3] = [-0.07, 0.07, 0.02]
        return state_cls(position, velocity, _times(rng, n, params.max_steps_in_episode))

    return starts


def _car_margin(u):
    position, velocity = u.state
    return min(abs(position - u.goal_position), abs(velocity - u.goal_velocity))


def _car_actions(rng, shape):
    return rng.choice(np.array([-1, 0, 1, 2, 4], np.int32), shape, p=[0.03, 0.31, 0.32, 0.31, 0.03])


def _continuous_actions(high):
    def actions(rng, shape):
        a = rng.uniform(-1.6 * high, 1.6 * high, shape + (1,)).astype(np.float32)
        edges = rng.random(shape) < 0.1
        a[edges, 0] = np.where(rng.random(edges.sum()) < 0.5, -high, high)
        return a

    return actions


# --- Pendulum ------------------------------------------------------------------------------
def _pendulum_starts(rng, n, params):
    return PendulumState(
        theta=_f32(rng.uniform(-3 * math.pi, 3 * math.pi, n)),
        theta_dot=_f32(rng.uniform(-8.0, 8.0, n)),
        last_u=np.zeros(n, np.float32),
        time=_times(rng, n, params.max_steps_in_episode),
    )


def _state_vector(*names):
    return lambda s: np.array([float(getattr(s, k)) for k in names], np.float64)


CASES = [
    Case(
        "CartPole-v1",
        _cartpole_starts,
        _state_vector("x", "x_dot", "theta", "theta_dot"),
        lambda rng, shape: rng.integers(0, 2, shape).astype(np.int32),
        int,
        _cartpole_margin,
    ),
    Case(
        "Acrobot-v1",
        _acrobot_starts,
        _state_vector("theta1", "theta2", "dtheta1", "dtheta2"),
        _acrobot_actions,
        lambda a: int(np.clip(a, 0, 2)),
        _acrobot_margin,
    ),
    Case(
        "MountainCar-v0",
        _car_starts(MountainCarState),
        _state_vector("position", "velocity"),
        _car_actions,
        lambda a: int(np.clip(a, 0, 2)),
        _car_margin,
    ),
    Case(
        "MountainCarContinuous-v0",
        _car_starts(MountainCarContinuousState),
        _state_vector("position", "velocity"),
        _continuous_actions(1.0),
        lambda a: np.clip(a, -1.0, 1.0).astype(np.float32),
        _car_margin,
    ),
    Case(
        "Pendulum-v1",
        _pendulum_starts,
        _state_vector("theta", "theta_dot"),
        _continuous_actions(2.0),
        lambda a: np.clip(a, -2.0, 2.0).astype(np.float32),
        lambda u: math.inf,  # never terminates
    ),
]


def _rollout(env, params, starts, actions):
    """Roll the batch of start states through ``actions [T, N, ...]``; returns the states
    before each step ``[T, N]`` and the TimeSteps after it ``[T, N]`` (no auto-reset)."""

    def one_step(state, action):
        new, ts = jax.vmap(env.step, in_axes=(None, 0, 0, None))(None, state, action, params)
        return new, (state, ts)

    # Compiled as users' programs are (tests/conftest.py's -O0 rounds Acrobot's RK4 differently).
    _, (before, ts) = jax.jit(lambda s, a: jax.lax.scan(one_step, s, a), compiler_options=USER_COMPILE)(starts, actions)
    return jax.tree.map(np.asarray, before), jax.tree.map(np.asarray, ts)


def _time_limit(gym_env):
    wrapper = gym_env
    while not isinstance(wrapper, gym.wrappers.TimeLimit):
        wrapper = wrapper.env
    return wrapper


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.env_id)
def test_step_parity_with_gymnasium(case: Case):
    rng = np.random.default_rng(sum(map(ord, case.env_id)))  # a fixed seed per env
    env, params = jaxrl.make(case.env_id)
    starts = jax.tree.map(jnp.asarray, case.start_states(rng, NUM_STARTS, params))
    actions = case.actions(rng, (NUM_STEPS, NUM_STARTS))
    before, ts = _rollout(env, params, starts, jnp.asarray(actions))

    gym_env = gym.make(case.env_id, disable_env_checker=True)
    gym_env.reset(seed=0)
    assert _time_limit(gym_env)._max_episode_steps == params.max_steps_in_episode
    compared = flag_mismatch = 0
    for t in range(NUM_STEPS):
        for i in range(NUM_STARTS):
            state = jax.tree.map(lambda x: x[t, i], before)
            gym_env.unwrapped.state = case.gym_state(state)
            # CartPole remembers a past termination (reward 0 afterwards): each transition
            # here is a fresh one, as in our env (which has no such memory).
            gym_env.unwrapped.steps_beyond_terminated = None
            _time_limit(gym_env)._elapsed_steps = int(state.time)
            obs, reward, terminated, truncated, _ = gym_env.step(case.gym_action(actions[t, i]))
            where = f"{case.env_id} step {t} start {i} state {state} action {actions[t, i]}"
            np.testing.assert_allclose(ts.obs[t, i], obs, rtol=RTOL, atol=ATOL, err_msg=where)
            np.testing.assert_allclose(ts.reward[t, i], reward, rtol=RTOL, atol=ATOL, err_msg=where)
            assert bool(ts.truncated[t, i]) == truncated, where
            if bool(ts.terminated[t, i]) != terminated:
                assert case.margin(gym_env.unwrapped) < 1e-5, where
                flag_mismatch += 1
            compared += 1
    assert compared >= 1000
    assert flag_mismatch <= 2
    # The rollouts really exercised the flags (except where an env cannot terminate).
    assert ts.truncated.any() and (~ts.truncated).any()
    if case.env_id != "Pendulum-v1":
        assert ts.terminated.any() and (~ts.terminated).any()
