"""Wrapper semantics, each against a hand computation or a plain Python loop."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import struct

from jaxrl.core import spaces
from jaxrl.core.env import Environment, first_timestep, transition
from jaxrl.core.wrappers import AutoReset, ClipAction, EpisodeStatistics, RescaleAction, TimeLimit, VmapEnv
from jaxrl_envs.cartpole import CartPole, CartPoleParams, CartPoleState

# ------------------------------------------------------------------ tiny test envs


@struct.dataclass
class WalkParams:
    bound: int = 3  # |pos| >= bound terminates


@struct.dataclass
class WalkState:
    pos: jax.Array  # int32 [], position on the line
    time: jax.Array  # int32 [], steps taken


class Walk(Environment):
    """A random walk on the integers: action 1 steps right, 0 left; starts at -1, 0 or 1.

    reward = 0.5 * new_pos - 0.25 * action (multiples of 1/4: float32 sums are exact);
    terminated when |pos| reaches ``bound``; no truncation of its own.
    """

    def __eq__(self, other):
        return type(other) is Walk

    def __hash__(self):
        return hash(Walk)

    @property
    def default_params(self):
        return WalkParams()

    def reset(self, key, params):
        state = WalkState(jax.random.randint(key, (), -1, 2), jnp.zeros((), jnp.int32))
        return state, first_timestep(self._obs(state))

    @staticmethod
    def _obs(state):
        return jnp.stack([state.pos, state.time]).astype(jnp.float32)

    def step(self, key, state, action, params):
        pos = state.pos + jnp.where(action == 1, 1, -1)
        new = WalkState(pos, state.time + 1)
        reward = 0.5 * pos - 0.25 * action
        return new, transition(self._obs(new), reward, jnp.abs(pos) >= params.bound, False)

    def observation_space(self, params):
        return spaces.Box(-jnp.inf, jnp.inf, (2,), jnp.float32)

    def action_space(self, params):
        return spaces.Discrete(2)


class EchoBox(Environment):
    """Observation = the action it received (after any wrapper), so mappings are visible."""

    def __eq__(self, other):
        return type(other) is EchoBox

    def __hash__(self):
        return hash(EchoBox)

    @property
    def default_params(self):
        return WalkParams()

    def reset(self, key, params):
        return jnp.zeros((), jnp.int32), first_timestep(jnp.zeros((2,), jnp.float32))

    def step(self, key, state, action, params):
        return state, transition(jnp.asarray(action, jnp.float32), 0.0, False, False)

    def observation_space(self, params):
        return spaces.Box(-jnp.inf, jnp.inf, (2,), jnp.float32)

    def action_space(self, params):
        return spaces.Box(jnp.array([-2.0, 0.0]), jnp.array([3.0, 1.0]), (2,), jnp.float32)


class OneStep(Environment):
    """Every episode is one step; reset draws obs ~ U[0, 1)^3 from its key."""

    def __eq__(self, other):
        return type(other) is OneStep

    def __hash__(self):
        return hash(OneStep)

    @property
    def default_params(self):
        return WalkParams()

    def reset(self, key, params):
        return jnp.zeros((), jnp.int32), first_timestep(jax.random.uniform(key, (3,)))

    def step(self, key, state, action, params):
        return state, transition(jnp.full((3,), -1.0), 1.0, True, False)

    def observation_space(self, params):
        return spaces.Box(-1.0, 1.0, (3,), jnp.float32)

    def action_space(self, params):
        return spaces.Discrete(2)


def _rows_distinct(x) -> bool:
    x = np.asarray(x).reshape(-1, np.asarray(x).shape[-1])
    return len(np.unique(x, axis=0)) == len(x)


def _scan_random(env, params, key, num_steps: int, num_actions: int = 2):
    """Reset then ``num_steps`` random-action steps of a (batched) env; returns TimeSteps."""
    key, reset_key = jax.random.split(key)
    state, _ = env.reset(reset_key, params)
    batch = (env.num_envs,) if isinstance(env, VmapEnv) else ()
    keys = jax.random.split(key, num_steps)
    return jax.lax.scan(functools.partial(_random_step, env, params, batch, num_actions), state, keys)


def _random_step(env, params, batch, num_actions, state, key):
    act_key, step_key = jax.random.split(key)
    action = jax.random.randint(act_key, batch, 0, num_actions)
    state, ts = env.step(step_key, state, action, params)
    return state, (state, ts, action)


# ------------------------------------------------------------------------ AutoReset

CP = CartPole()
CP_PARAMS = CartPoleParams()
# Tilted and falling: theta' = 0.2 + 0.02 * 2.0 = 0.24 > 12 degrees (0.2094 rad) -> terminated.
FALLING = CartPoleState(*(jnp.float32(v) for v in (0.1, 0.0, 0.2, 2.0)), jnp.int32(3))
UPRIGHT = CartPoleState(*(jnp.float32(v) for v in (0.0, 0.0, 0.0, 0.0)), jnp.int32(3))


@pytest.fixture(scope="module")
def auto_step():
    return jax.jit(AutoReset(CP).step)


def test_autoreset_keeps_final_obs_and_resets(auto_step):
    state, ts = auto_step(jax.random.PRNGKey(0), FALLING, 1, CP_PARAMS)
    final = np.asarray(ts.info["final_obs"])
    # Hand check of the finished episode's last observation (Euler: x' = x + tau*x_dot ...).
    np.testing.assert_allclose(final[[0, 2]], [0.1, 0.24], rtol=1e-6)
    _, raw = CP.step(jax.random.PRNGKey(0), FALLING, 1, CP_PARAMS)  # the unwrapped step
    np.testing.assert_array_equal(final, np.asarray(raw.obs))
    assert bool(ts.terminated) and not bool(ts.truncated) and float(ts.reward) == 1.0
    # obs is the first observation of a new episode drawn by reset: U(-0.05, 0.05)^4, time 0.
    obs = np.asarray(ts.obs)
    assert np.all(np.abs(obs) <= 0.05) and not np.array_equal(obs, final)
    assert int(state.time) == 0
    np.testing.assert_array_equal(obs, np.asarray(CP._obs(state)))


def test_autoreset_passes_ordinary_steps_through(auto_step):
    state, ts = auto_step(jax.random.PRNGKey(0), UPRIGHT, 1, CP_PARAMS)
    assert not bool(ts.done) and int(state.time) == 4
    np.testing.assert_array_equal(np.asarray(ts.obs), np.asarray(ts.info["final_obs"]))
    _, raw = CP.step(jax.random.PRNGKey(0), UPRIGHT, 1, CP_PARAMS)
    np.testing.assert_array_equal(np.asarray(ts.obs), np.asarray(raw.obs))


def test_autoreset_on_truncation(auto_step):
    params = CP_PARAMS.replace(max_steps_in_episode=4)  # UPRIGHT has time 3: the next step truncates
    state, ts = auto_step(jax.random.PRNGKey(0), UPRIGHT, 1, params)
    assert bool(ts.truncated) and not bool(ts.terminated)
    assert int(state.time) == 0
    _, raw = CP.step(jax.random.PRNGKey(0), UPRIGHT, 1, params)
    np.testing.assert_array_equal(np.asarray(ts.info["final_obs"]), np.asarray(raw.obs))


def test_autoreset_reset_info_has_the_step_structure():
    _, ts0 = AutoReset(CP).reset(jax.random.PRNGKey(0), CP_PARAMS)
    _, ts1 = AutoReset(CP).step(jax.random.PRNGKey(1), UPRIGHT, 0, CP_PARAMS)
    assert jax.tree_util.tree_structure(ts0.info) == jax.tree_util.tree_structure(ts1.info)
    np.testing.assert_array_equal(np.asarray(ts0.obs), np.asarray(ts0.info["final_obs"]))


def test_autoreset_new_episodes_are_diverse():
    env = VmapEnv(AutoReset(CP), 64)
    falling = jax.tree_util.tree_map(lambda x: jnp.broadcast_to(x, (64,)), FALLING)
    step = jax.jit(env.step)
    _, ts1 = step(jax.random.PRNGKey(0), falling, jnp.ones(64, jnp.int32), CP_PARAMS)
    _, ts2 = step(jax.random.PRNGKey(1), falling, jnp.ones(64, jnp.int32), CP_PARAMS)
    assert bool(jnp.all(ts1.terminated))
    new_starts = np.concatenate([np.asarray(ts1.obs), np.asarray(ts2.obs)])
    assert _rows_distinct(new_starts)  # 128 fresh draws, no cached start state
    assert np.all(np.abs(new_starts) <= 0.05)


# ---------------------------------------------------------------- EpisodeStatistics


def test_episode_statistics_match_a_python_loop():
    env = VmapEnv(EpisodeStatistics(AutoReset(Walk())), 4)
    num_steps = 80
    _, (_, ts, _) = jax.jit(_scan_random, static_argnums=(0, 3))(env, WalkParams(), jax.random.PRNGKey(3), num_steps)
    reward, done = np.asarray(ts.reward), np.asarray(ts.done)
    got_ret, got_len = np.asarray(ts.info["episode_return"]), np.asarray(ts.info["episode_length"])
    np.testing.assert_array_equal(np.asarray(ts.info["episode_done"]), done)

    want_ret, want_len = np.zeros_like(got_ret), np.zeros_like(got_len)
    running_ret, running_len = np.zeros(4, np.float32), np.zeros(4, np.int32)
    for t in range(num_steps):
        running_ret += reward[t]
        running_len += 1
        want_ret[t] = np.where(done[t], running_ret, 0.0)
        want_len[t] = np.where(done[t], running_len, 0)
        running_ret[done[t]], running_len[done[t]] = 0.0, 0
    assert done.sum() >= 8, "the rollout should complete several episodes"
    assert np.any(want_ret != want_len * 0.5)  # returns vary, not a function of length
    np.testing.assert_array_equal(got_ret, want_ret)
    np.testing.assert_array_equal(got_len, want_len)
    assert got_ret.dtype == np.float32 and got_len.dtype == np.int32


# ------------------------------------------------------------------------ TimeLimit


def test_time_limit_truncates_exactly_and_restarts_after_autoreset():
    env = AutoReset(TimeLimit(Walk(), 7))
    params = WalkParams(bound=1000)  # never terminates
    states, ts, _ = jax.jit(_scan_random, static_argnums=(0, 3))(env, params, jax.random.PRNGKey(0), 22)[1]
    truncated_at = np.flatnonzero(np.asarray(ts.truncated)) + 1  # 1-based step numbers
    np.testing.assert_array_equal(truncated_at, [7, 14, 21])
    assert not np.any(np.asarray(ts.terminated))
    # TimeLimit's counter after each step: 1..6, then 0 (reset) on the truncating step.
    np.testing.assert_array_equal(np.asarray(states.time)[:8], [1, 2, 3, 4, 5, 6, 0, 1])


def test_time_limit_keeps_the_envs_own_truncation_and_termination():
    env = TimeLimit(CP, 10)
    state, _ = env.reset(jax.random.PRNGKey(0), CP_PARAMS)
    params = CP_PARAMS.replace(max_steps_in_episode=2)
    state, ts = env.step(jax.random.PRNGKey(1), state, 0, params)
    state, ts = env.step(jax.random.PRNGKey(1), state, 0, params)
    assert bool(ts.truncated) and int(state.time) == 2
    state = state.replace(env_state=FALLING)
    _, ts = env.step(jax.random.PRNGKey(1), state, 1, CP_PARAMS)
    assert bool(ts.terminated) and not bool(ts.truncated)


def test_time_limit_rejects_non_positive_limits():
    with pytest.raises(ValueError, match="max_steps > 0"):
        TimeLimit(CP, 0)


# ------------------------------------------------------------ ClipAction / RescaleAction


@pytest.mark.parametrize(
    "action,expected",
    [([10.0, -10.0], [3.0, 0.0]), ([-10.0, 0.5], [-2.0, 0.5]), ([1.25, 0.75], [1.25, 0.75]), ([3.0, 0.0], [3.0, 0.0])],
)
def test_clip_action(action, expected):
    _, ts = ClipAction(EchoBox()).step(None, jnp.int32(0), jnp.array(action, jnp.float32), WalkParams())
    np.testing.assert_array_equal(np.asarray(ts.obs), np.array(expected, np.float32))


@pytest.mark.parametrize(
    "low,high,action,expected",
    [
        # [-1, 1] -> [-2, 3] x [0, 1]: low + (a + 1) / 2 * (high - low)
        (-1.0, 1.0, [-1.0, -1.0], [-2.0, 0.0]),
        (-1.0, 1.0, [1.0, 1.0], [3.0, 1.0]),
        (-1.0, 1.0, [0.0, 0.0], [0.5, 0.5]),
        (-1.0, 1.0, [0.5, -0.5], [1.75, 0.25]),
        (-1.0, 1.0, [5.0, -5.0], [3.0, 0.0]),  # outside [-1, 1]: clipped first
        (0.0, 4.0, [1.0, 3.0], [-0.75, 0.75]),  # [0, 4]: fraction a / 4
    ],
)
def test_rescale_action(low, high, action, expected):
    env = RescaleAction(EchoBox(), low, high)
    space = env.action_space(WalkParams())
    assert space.shape == (2,) and float(space.low[0]) == low and float(space.high[1]) == high
    _, ts = env.step(None, jnp.int32(0), jnp.array(action, jnp.float32), WalkParams())
    np.testing.assert_array_equal(np.asarray(ts.obs), np.array(expected, np.float32))


def test_rescale_action_rejects_empty_range():
    with pytest.raises(ValueError, match="low < high"):
        RescaleAction(EchoBox(), 1.0, 1.0)


# --------------------------------------------------------------------------- VmapEnv


def test_vmap_env_gives_every_env_its_own_reset_stream():
    env = VmapEnv(AutoReset(OneStep()), 16)
    state, ts0 = env.reset(jax.random.PRNGKey(0), WalkParams())
    assert ts0.obs.shape == (16, 3)
    step = jax.jit(env.step)
    starts = [np.asarray(ts0.obs)]
    for i in range(3):  # every env finishes every step: 3 more fresh starts each
        state, ts = step(jax.random.PRNGKey(i + 1), state, jnp.zeros(16, jnp.int32), WalkParams())
        assert bool(jnp.all(ts.terminated))
        np.testing.assert_array_equal(np.asarray(ts.info["final_obs"]), -1.0)
        starts.append(np.asarray(ts.obs))
    assert _rows_distinct(np.stack(starts))  # 64 draws, no two envs or steps share one


def test_vmap_env_with_batched_params():
    lengths = jnp.array([0.3, 0.5, 0.9], jnp.float32)
    params = jax.tree_util.tree_map(lambda x: jnp.broadcast_to(jnp.asarray(x), (3,)), CP_PARAMS)
    params = params.replace(length=lengths)
    env = VmapEnv(CP, 3, params_axis=0)
    state, _ = jax.jit(env.reset)(jax.random.PRNGKey(0), params)
    actions = jnp.array([1, 1, 0])
    _, ts = jax.jit(env.step)(jax.random.PRNGKey(1), state, actions, params)
    single_step = jax.jit(CP.step)
    for i in range(3):
        single = jax.tree_util.tree_map(lambda x, i=i: x[i], state)
        _, want = single_step(jax.random.PRNGKey(2), single, actions[i], CP_PARAMS.replace(length=lengths[i]))
        np.testing.assert_allclose(np.asarray(ts.obs[i]), np.asarray(want.obs), rtol=1e-6, atol=1e-7)
    # Different pole lengths give different angular accelerations from the same push.
    assert not np.allclose(np.asarray(ts.obs[0, 3]) - np.asarray(state.theta_dot[0]), np.asarray(ts.obs[1, 3]) - np.asarray(state.theta_dot[1]))


def test_vmap_env_rejects_empty_batch():
    with pytest.raises(ValueError, match="num_envs > 0"):
        VmapEnv(CP, 0)


def test_wrappers_are_hashable_by_value():
    assert TimeLimit(CP, 5) == TimeLimit(CartPole(), 5)
    assert hash(AutoReset(TimeLimit(CP, 5))) == hash(AutoReset(TimeLimit(CartPole(), 5)))
    assert TimeLimit(CP, 5) != TimeLimit(CP, 6)
    assert AutoReset(CP) != EpisodeStatistics(CP)
