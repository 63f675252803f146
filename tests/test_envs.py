"""The classic-control suite and the probe envs: reset distributions, vmap over params,
probe tables, dtype stability and the documented invalid-action rules.

Step-by-step dynamics parity with Gymnasium lives in ``test_parity_gymnasium.py``.
"""

from __future__ import annotations

import math

import gymnasium as gym
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrl
from conftest import USER_COMPILE
from jaxrl.core.env import replace_params
from jaxrl_envs.acrobot import _wrap
from jaxrl_envs.pendulum import angle_normalize

CLASSIC = ["CartPole-v1", "Acrobot-v1", "MountainCar-v0", "MountainCarContinuous-v0", "Pendulum-v1"]
PROBES = [
    "ProbeConstant-v0",
    "ProbeTwoStep-v0",
    "ProbeObsReward-v0",
    "ProbeActionMatch-v0",
    "ProbeTimeLimit-v0",
    "ProbeContinuous-v0",
]
NUM_RESETS = 4096


def _ks_statistic(a: np.ndarray, b: np.ndarray) -> float:
    """Two-sample Kolmogorov-Smirnov statistic: the largest gap between the two ECDFs."""
    grid = np.concatenate([a, b])
    cdf_a = np.searchsorted(np.sort(a), grid, side="right") / len(a)
    cdf_b = np.searchsorted(np.sort(b), grid, side="right") / len(b)
    return float(np.max(np.abs(cdf_a - cdf_b)))


def _ks_critical(n: int, m: int, c_alpha: float = 1.949) -> float:
    """The KS rejection threshold at significance 0.001 (c(alpha) = 1.949)."""
    return c_alpha * math.sqrt((n + m) / (n * m))


# --- reset distributions -------------------------------------------------------------------
# Gymnasium's documented reset distributions: each state variable uniform on [low, high]
# (low == high: a constant).
RESET_RANGES = {
    "CartPole-v1": {"x": (-0.05, 0.05), "x_dot": (-0.05, 0.05), "theta": (-0.05, 0.05), "theta_dot": (-0.05, 0.05)},
    "Acrobot-v1": {"theta1": (-0.1, 0.1), "theta2": (-0.1, 0.1), "dtheta1": (-0.1, 0.1), "dtheta2": (-0.1, 0.1)},
    "MountainCar-v0": {"position": (-0.6, -0.4), "velocity": (0.0, 0.0)},
    "MountainCarContinuous-v0": {"position": (-0.6, -0.4), "velocity": (0.0, 0.0)},
    "Pendulum-v1": {"theta": (-math.pi, math.pi), "theta_dot": (-1.0, 1.0), "last_u": (0.0, 0.0)},
}


@pytest.mark.parametrize("env_id", CLASSIC)
def test_reset_distribution_matches_gymnasium(env_id):
    env, params = jaxrl.make(env_id)
    keys = jax.random.split(jax.random.key(7), NUM_RESETS)
    state, ts = jax.jit(jax.vmap(env.reset, in_axes=(0, None)))(keys, params)
    assert np.all(np.asarray(state.time) == 0)
    assert not np.any(np.asarray(ts.terminated)) and not np.any(np.asarray(ts.truncated))
    assert np.all(np.asarray(ts.reward) == 0.0)
    # 1. Each state variable is uniform on Gymnasium's documented range.
    columns = []
    for name, (low, high) in RESET_RANGES[env_id].items():
        x = np.asarray(getattr(state, name), np.float64)
        columns.append(x)
        if low == high:
            np.testing.assert_array_equal(x, low, err_msg=name)
            continue
        width = high - low
        assert x.min() >= low and x.max() <= high, name
        assert x.min() < low + 0.01 * width and x.max() > high - 0.01 * width, name  # fills the range
        uniform_sd = width / math.sqrt(12)
        assert abs(x.mean() - (low + high) / 2) < 5 * uniform_sd / math.sqrt(NUM_RESETS), name
        assert abs(x.std() - uniform_sd) < 0.05 * uniform_sd, name
    # 2. The variables are drawn independently (no shared random numbers between them).
    varying = [c for c in columns if c.std() > 0]
    if len(varying) > 1:
        corr = np.corrcoef(np.stack(varying))
        assert np.max(np.abs(corr - np.eye(len(varying)))) < 0.08
    # 3. Each observation component is distributed like Gymnasium's own resets.
    gym_env = gym.make(env_id, disable_env_checker=True)
    gym_obs = np.stack([gym_env.reset(seed=i)[0] for i in range(1000)])
    ours = np.asarray(ts.obs)
    assert ours.shape[1:] == gym_obs.shape[1:] and ours.dtype == gym_obs.dtype == np.float32
    for j in range(ours.shape[1]):
        d = _ks_statistic(ours[:, j], gym_obs[:, j])
        assert d < _ks_critical(len(ours), len(gym_obs)), f"obs[{j}]: KS statistic {d:.3f}"


# --- vmap over params ----------------------------------------------------------------------
# (env id, the param varied across the batch, its values): a batch of envs that differ in one
# physical constant, stepped under one vmap, equals the same envs stepped one by one.
PARAM_SWEEPS = [
    ("CartPole-v1", "length", [0.3, 0.5, 0.8, 1.2]),
    ("Acrobot-v1", "link_mass_2", [0.5, 1.0, 1.5, 2.0]),
    ("Pendulum-v1", "g", [5.0, 9.81, 10.0, 15.0]),
]


def _policy_actions(env, params, n_steps, n_envs, key):
    space = env.action_space(params)
    keys = jax.random.split(key, n_steps * n_envs).reshape(n_steps, n_envs)
    return jax.jit(jax.vmap(jax.vmap(space.sample)))(keys)


@pytest.mark.parametrize("env_id,field,values", PARAM_SWEEPS, ids=[s[0] for s in PARAM_SWEEPS])
def test_vmap_over_params_equals_separate_envs(env_id, field, values):
    env, params = jaxrl.make(env_id)
    n, steps = len(values), 40
    batch_params = replace_params(params, **{field: jnp.asarray(values, jnp.float32)})
    batch_params = jax.tree.map(lambda x: jnp.broadcast_to(jnp.asarray(x), (n,)), batch_params)
    reset_keys = jax.random.split(jax.random.key(3), n)
    actions = _policy_actions(env, params, steps, n, jax.random.key(4))

    def rollout(state, actions, p):
        def body(s, a):
            s, ts = env.step(None, s, a, p)
            return s, (ts.obs, ts.reward, ts.terminated, ts.truncated)

        return jax.lax.scan(body, state, actions)[1]

    # Compiled as users' programs are: at tests/conftest.py's -O0 Acrobot's integrator rounds
    # vmapped and single rows apart by up to 6e-7.
    batched = jax.jit(jax.vmap(lambda k, a, p: rollout(env.reset(k, p)[0], a, p), in_axes=(0, 1, 0)),
                      compiler_options=USER_COMPILE)
    together = jax.tree.map(np.asarray, batched(reset_keys, actions, batch_params))
    single = jax.jit(lambda k, a, p: rollout(env.reset(k, p)[0], a, p), compiler_options=USER_COMPILE)
    for i in range(n):
        p_i = jax.tree.map(lambda x: x[i], batch_params)
        alone = single(reset_keys[i], actions[:, i], p_i)
        for got, want in zip(together, alone):
            np.testing.assert_allclose(got[i], np.asarray(want), rtol=1e-6, atol=1e-7, err_msg=f"{env_id} env {i}")
    # The parameter really changes the dynamics (otherwise the test proves nothing).
    obs = together[0]
    assert not np.allclose(obs[0], obs[-1])


# --- probe envs: hand tables ---------------------------------------------------------------
_JITTED: dict = {}


def _jitted(env):
    """``(jit(reset), jit(step))`` of ``env``, compiled once per env for the whole module."""
    if env not in _JITTED:
        _JITTED[env] = (jax.jit(env.reset), jax.jit(env.step))
    return _JITTED[env]


def _run(env_id, actions, key=0, **overrides):
    """Reset with ``key`` and step through ``actions``; returns the reset obs and a list of
    ``(obs, reward, terminated, truncated)`` as Python values."""
    env, params = jaxrl.make(env_id, **overrides)
    params = jax.tree.map(jnp.asarray, params)  # traced, so overrides share the compiled code
    reset, step = _jitted(env)
    state, ts = reset(jax.random.key(key), params)
    first = np.asarray(ts.obs).tolist()
    rows = []
    for a in actions:
        state, ts = step(jax.random.key(99), state, jnp.asarray(a), params)
        rows.append((np.asarray(ts.obs).tolist(), float(ts.reward), bool(ts.terminated), bool(ts.truncated)))
    return first, rows


def test_probe_constant_table():
    first, rows = _run("ProbeConstant-v0", [0])
    assert first == [0.0]
    assert rows == [([0.0], 1.0, True, False)]
    assert _run("ProbeConstant-v0", [1], key=5)[1] == rows  # action and key do not matter


def test_probe_two_step_table():
    first, rows = _run("ProbeTwoStep-v0", [0, 1])
    assert first == [0.0]
    assert rows == [([1.0], 0.0, False, False), ([1.0], 1.0, True, False)]


@pytest.mark.parametrize("env_id", ["ProbeObsReward-v0", "ProbeActionMatch-v0"])
def test_random_sign_probes_draw_both_signs_evenly(env_id):
    env, params = jaxrl.make(env_id)
    keys = jax.random.split(jax.random.key(0), 2000)
    obs = np.asarray(jax.jit(jax.vmap(lambda k: env.reset(k, params)[1].obs))(keys))
    assert set(np.unique(obs)) == {-1.0, 1.0}
    assert abs(np.mean(obs == 1.0) - 0.5) < 0.05


def test_probe_obs_reward_table():
    seen = set()
    for key in range(12):
        first, rows = _run("ProbeObsReward-v0", [0], key=key)
        sign = first[0]
        seen.add(sign)
        assert rows == [([sign], sign, True, False)]  # reward = obs
    assert seen == {-1.0, 1.0}


def test_probe_action_match_table():
    # (obs, action) -> reward: +1 exactly when action == (obs > 0).
    table = {(1.0, 1): 1.0, (1.0, 0): -1.0, (-1.0, 0): 1.0, (-1.0, 1): -1.0, (1.0, 7): -1.0, (-1.0, -3): -1.0}
    seen = set()
    for key in range(12):
        for (sign, action), reward in table.items():
            first, rows = _run("ProbeActionMatch-v0", [action], key=key)
            if first[0] != sign:
                continue
            seen.add((sign, action))
            assert rows == [([sign], reward, True, False)], (sign, action)
    assert seen == set(table)


def test_probe_time_limit_table():
    _, rows = _run("ProbeTimeLimit-v0", [0, 1] * 5)
    assert rows == [([0.0], 1.0, False, t == 10) for t in range(1, 11)]
    _, rows = _run("ProbeTimeLimit-v0", [0] * 3, max_steps_in_episode=3)
    assert [r[3] for r in rows] == [False, False, True]


def test_probe_continuous_table():
    # Default: a constant target of 0.5; reward -(clip(a, -1, 1) - 0.5)^2.
    for action, reward in [(0.5, 0.0), (0.0, -0.25), (1.0, -0.25), (3.0, -0.25), (-1.0, -2.25), (-9.0, -2.25)]:
        first, rows = _run("ProbeContinuous-v0", [jnp.array([action], jnp.float32)])
        assert first == [0.5]
        assert rows == [([0.5], reward, True, False)], action
    # With spread: obs = target in [center - spread, center + spread], reward peaks at a = obs.
    env, params = jaxrl.make("ProbeContinuous-v0", target_center=0.0, target_spread=0.8)
    keys = jax.random.split(jax.random.key(1), 500)
    obs = np.asarray(jax.jit(jax.vmap(lambda k: env.reset(k, params)[1].obs))(keys))[:, 0]
    assert obs.min() >= -0.8 and obs.max() <= 0.8 and obs.std() > 0.3
    reset, step = _jitted(env)
    params = jax.tree.map(jnp.asarray, params)
    state, _ = reset(keys[0], params)
    _, ts = step(None, state, state.obs, params)
    assert float(ts.reward) == 0.0
    assert bool(env.observation_space(params).contains(state.obs))


# --- dtypes and invalid actions ------------------------------------------------------------
def _leaves_with_types(tree):
    return [(x.shape, x.dtype, x.weak_type) for x in jax.tree.leaves(tree)]


@pytest.mark.parametrize("env_id", CLASSIC + PROBES)
def test_dtypes_are_stable_and_strong(env_id):
    env, params = jaxrl.make(env_id)
    key = jax.random.key(0)
    state, ts = jax.eval_shape(env.reset, key, params)
    action = jax.eval_shape(env.action_space(params).sample, key)
    state2, ts2 = jax.eval_shape(env.step, key, state, action, params)
    # Same structure, shapes and dtypes after a step as after reset, and no weak types.
    assert _leaves_with_types(state2) == _leaves_with_types(state)
    assert _leaves_with_types(ts2) == _leaves_with_types(ts)
    assert not any(weak for _, _, weak in _leaves_with_types((state2, ts2)))
    space = env.observation_space(params)
    assert ts2.obs.shape == space.shape and ts2.obs.dtype == jnp.float32
    assert (ts2.reward.shape, ts2.reward.dtype) == ((), jnp.float32)
    assert ts2.terminated.dtype == ts2.truncated.dtype == jnp.bool_
    assert state2.time.dtype == jnp.int32


def _invalid_actions(env, params):
    space = env.action_space(params)
    if isinstance(space, jaxrl.core.spaces.Discrete):
        return [jnp.int32(-5), jnp.int32(space.n), jnp.int32(10**6)]
    big = jnp.full(space.shape, 1e6, jnp.float32)
    return [big, -big, jnp.full(space.shape, jnp.nan, jnp.float32), jnp.full(space.shape, jnp.inf, jnp.float32)]


@pytest.mark.parametrize("env_id", CLASSIC + PROBES)
def test_invalid_actions_follow_the_documented_rule(env_id):
    """Out-of-range actions never give NaN, and act like the action the rule maps them to."""
    env, params = jaxrl.make(env_id)
    step = jax.jit(env.step)
    state, _ = env.reset(jax.random.key(1), params)
    space = env.action_space(params)
    for action in _invalid_actions(env, params):
        new, ts = step(None, state, action, params)
        for leaf in jax.tree.leaves((new, ts)):
            assert np.all(np.isfinite(np.asarray(leaf, np.float64))), (env_id, action)
        if isinstance(space, jaxrl.core.spaces.Box) and env_id != "ProbeContinuous-v0":
            # Documented rule for continuous classic envs: clip to the box (NaN -> 0).
            a = np.nan_to_num(np.asarray(action), nan=0.0)
            clipped = jnp.asarray(np.clip(a, space.low, space.high), jnp.float32)
            _, want = step(None, state, clipped, params)
            np.testing.assert_array_equal(ts.obs, want.obs)
            assert float(ts.reward) == float(want.reward)
        if env_id in ("Acrobot-v1", "MountainCar-v0"):
            clipped = jnp.clip(action, 0, 2)
            _, want = step(None, state, clipped, params)
            np.testing.assert_array_equal(ts.obs, want.obs)


def test_acrobot_wrap_and_pendulum_angle_normalize_match_gymnasium():
    from gymnasium.envs.classic_control.acrobot import wrap
    from gymnasium.envs.classic_control.pendulum import angle_normalize as gym_angle_normalize

    xs = np.concatenate(
        [np.linspace(-12.0, 12.0, 401), [math.pi, -math.pi, 3 * math.pi + 0.5, -5 * math.pi - 0.25]]
    ).astype(np.float32)
    ours = np.asarray(jax.jit(lambda x: _wrap(x, -math.pi, math.pi))(xs), np.float64)
    want = np.array([wrap(float(x), -math.pi, math.pi) for x in xs])
    # Equal as angles; float32(pi) lies just above pi, so Gymnasium (float64) wraps that one
    # value to -pi + 1e-7 where we keep +pi: the same angle.
    gap = np.mod(ours - want + math.pi, 2 * math.pi) - math.pi
    np.testing.assert_allclose(gap, 0.0, atol=2e-6)
    inside = np.abs(xs) < 3.14159
    np.testing.assert_allclose(ours[inside], want[inside], atol=2e-6)
    assert np.all(np.abs(ours) <= np.float32(math.pi))
    ours = np.asarray(angle_normalize(xs), np.float64)
    want = gym_angle_normalize(xs.astype(np.float64))
    np.testing.assert_allclose(np.mod(ours - want + math.pi, 2 * math.pi) - math.pi, 0.0, atol=2e-6)
    np.testing.assert_allclose(ours**2, want**2, rtol=2e-6, atol=1e-5)  # what the cost uses
    np.testing.assert_allclose(ours[inside], want[inside], atol=2e-6)


def test_envs_are_hashable_and_equal_by_type():
    for env_id in CLASSIC + PROBES:
        a, _ = jaxrl.make(env_id)
        b, _ = jaxrl.make(env_id)
        assert a == b and hash(a) == hash(b) and a.name == env_id
    acrobot, _ = jaxrl.make("Acrobot-v1")
    pendulum, _ = jaxrl.make("Pendulum-v1")
    assert acrobot != pendulum
