"""MJX envs from a MuJoCo XML (jaxrl.adapters.mjx, envs/mjx_cartpole.py).

One jitted program (the balance env's ``step`` scanned over 300 steps, vmapped over three
(params, actions) rows) carries the MJX-vs-CPU-MuJoCo parity test, the termination test
and the mass-scaling identity. ``check_env`` on ``mjx/CartPole-v0`` runs in CI with a
reduced rollout (4 envs x 50 steps).
"""

from __future__ import annotations

import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest

pytest.importorskip("mujoco.mjx")

import mujoco  # noqa: E402

import jaxrl  # noqa: E402
from jaxrl.adapters.mjx import MjxEnv, MjxParams, action_to_ctrl  # noqa: E402
from jaxrl_envs import mjx_cartpole as cp  # noqa: E402

pytestmark = pytest.mark.physics

T = 300
# A smooth, sign-changing push that swings the pole through large angles.
ACTIONS = 0.8 * np.sin(0.07 * np.arange(T, dtype=np.float32))[:, None]


def _scan_steps(env, key, actions, params):
    """Reset with ``key``, then step through ``actions`` ``[T, 1]`` without auto-reset."""
    state, ts = env.reset(key, params)

    def body(state, action):
        state, ts = env.step(key, state, action, params)
        return state, (state.qpos, state.qvel, ts.terminated, ts.truncated, ts.reward)

    return (state.qpos, state.qvel), jax.lax.scan(body, state, actions)[1]


@pytest.fixture(scope="module")
def env():
    env, _ = jaxrl.make("mjx/CartPole-v0")
    return env


def _batched_inputs():
    """Rows: 0 nominal; 1 half the mass, same actions; 2 half the mass, half the actions."""
    actions = jnp.asarray(np.stack([ACTIONS, ACTIONS, 0.5 * ACTIONS]))
    params = MjxParams(
        max_steps_in_episode=jnp.full((3,), 1000, jnp.int32),
        mass_scale=jnp.asarray([1.0, 0.5, 0.5]),
        friction_scale=jnp.ones((3,)),
        gravity_scale=jnp.ones((3,)),
    )
    return jax.random.PRNGKey(3), actions, params


BATCHED_RUN = jax.jit(jax.vmap(_scan_steps, in_axes=(None, None, 0, 0)), static_argnums=0)


@pytest.fixture(scope="module")
def runs(env):
    return jax.tree_util.tree_map(np.asarray, BATCHED_RUN(env, *_batched_inputs()))


def test_batched_mjx_program_has_no_lapack_call(env):
    """The XML asks for jacobian="sparse", so MJX factors and solves with the mass matrix in
    plain XLA; the dense default lowers to batched LAPACK calls (cho_factor / cho_solve),
    which can deadlock XLA's CPU thread pool under vmap (see tests/test_networks.py)."""
    text = BATCHED_RUN.lower(env, *_batched_inputs()).as_text()
    assert "while" in text and "lapack" not in text.lower()


def test_mjx_env_matches_cpu_mujoco(env, runs):
    (q0, v0), (qpos, qvel, _, _, _) = runs
    m = env.mj_model
    d = mujoco.MjData(m)
    d.qpos[:], d.qvel[:] = q0[0], v0[0]
    mujoco.mj_forward(m, d)
    ctrl = np.asarray(action_to_ctrl(jnp.asarray(ACTIONS), jnp.asarray(m.actuator_ctrlrange)))
    errors = []
    for t in range(T):
        d.ctrl[:] = ctrl[t]
        for _ in range(cp.FRAME_SKIP):
            mujoco.mj_step(m, d)
        errors.append(max(np.abs(d.qpos - qpos[0, t]).max(), np.abs(d.qvel - qvel[0, t]).max()))
    # float32 MJX vs float64 MuJoCo over 600 physics steps with the pole swinging
    # through large angles (measured: ~1e-5).
    assert max(errors) < 1e-3, f"max |MJX - MuJoCo| = {max(errors):.2e}"
    assert np.abs(qpos[0, :, 1]).max() > 1.0, "the pole should swing far from upright"


def test_terminated_when_the_pole_tilts_past_the_threshold(runs):
    _, (qpos, _, term, trunc, reward) = runs
    expected = (np.abs(qpos[0, :, 0]) > cp.X_THRESHOLD) | (np.abs(qpos[0, :, 1]) > cp.ANGLE_THRESHOLD)
    np.testing.assert_array_equal(term[0], expected)
    assert term[0].any() and not trunc[0].any()
    np.testing.assert_array_equal(reward[0], 1.0)


def test_mass_scale_is_physical(runs):
    """Masses and inertias scaled by 1/2 with forces scaled by 1/2 give the nominal motion
    (M q'' + c = g + f scales exactly, gravity included; the model has no damping, and a
    power-of-two scale leaves float32 rounding almost untouched: measured ~1e-5 after
    300 steps through the unstable upright equilibrium)."""
    _, (qpos, _, _, _, _) = runs
    np.testing.assert_allclose(qpos[2], qpos[0], atol=1e-4)
    assert np.abs(qpos[1] - qpos[0]).max() > 0.05, "half the mass with the same force must move differently"


def test_check_env_mjx_cartpole(env):
    from jaxrl.core.check import check_env

    report = check_env(env, env.default_params, num_envs=4, num_steps=50, verbose=False)
    assert report.passed, str(report)


def test_swingup_reward_and_observation_by_hand():
    def data(x, angle, x_dot=0.0, angle_dot=0.0):
        return types.SimpleNamespace(qpos=jnp.array([x, angle]), qvel=jnp.array([x_dot, angle_dot]))

    zero = jnp.zeros((1,))
    # Upright, centred, at rest, no force: every factor is 1.
    assert float(cp.swingup_reward(None, zero, data(0.0, 0.0), None)) == pytest.approx(1.0)
    # Hanging down: upright = (1 + cos pi) / 2 = 0.
    assert float(cp.swingup_reward(None, zero, data(0.0, np.pi), None)) == pytest.approx(0.0, abs=1e-6)
    # Upright, x = 1, full force, angle_dot = 5: ((1 + e^-1)/2) * (4/5) * ((1 + e^-1)/2).
    expected = (1 + np.exp(-1)) / 2 * 0.8 * (1 + np.exp(-1)) / 2
    got = float(cp.swingup_reward(None, jnp.ones((1,)), data(1.0, 0.0, 0.0, 5.0), None))
    assert got == pytest.approx(expected, rel=1e-6)
    obs = cp.swingup_observation(data(0.5, np.pi, 0.1, -0.2), None)
    np.testing.assert_allclose(obs, [0.5, -1.0, 0.0, 0.1, -0.2], atol=1e-6)
    assert not bool(cp.swingup_terminated(data(9.0, 3.0), None))


def test_swingup_starts_hanging_down():
    qpos, qvel = cp.swingup_init(jax.random.PRNGKey(0), None, None)
    assert abs(float(qpos[1]) - np.pi) <= 0.1 and abs(float(qpos[0])) <= 0.01
    other, _ = cp.swingup_init(jax.random.PRNGKey(1), None, None)
    assert not np.array_equal(qpos, other)


def test_registry_and_spaces(env):
    assert {"mjx/CartPole-v0", "mjx/CartPoleSwingup-v0"} <= set(jaxrl.registered_ids())
    p = env.default_params
    assert env.name == "mjx/CartPole-v0" and p.max_steps_in_episode == 1000
    assert env.observation_space(p).shape == (4,)
    assert env.action_space(p).shape == (1,)
    swing, _ = jaxrl.make("mjx/CartPoleSwingup-v0", gravity_scale=0.5)
    assert swing.observation_space(swing.default_params).shape == (5,)
    assert hash(env) == hash(cp.cartpole()) and env == cp.cartpole() and env != swing


def test_bad_models_and_params_are_rejected(tmp_path):
    no_actuator = tmp_path / "free.xml"
    no_actuator.write_text("<mujoco><worldbody><body><joint type='hinge'/><geom size='0.1'/></body></worldbody></mujoco>")
    kwargs = dict(
        init=cp.balance_init,
        observation=cp.balance_observation,
        reward=cp.balance_reward,
        terminated=cp.balance_terminated,
    )
    with pytest.raises(ValueError, match="no actuators"):
        MjxEnv.from_xml(str(no_actuator), **kwargs)
    unlimited = tmp_path / "unlimited.xml"
    unlimited.write_text(
        "<mujoco><worldbody><body><joint name='j' type='hinge'/><geom size='0.1'/></body></worldbody>"
        "<actuator><motor joint='j' ctrllimited='false'/></actuator></mujoco>"
    )
    with pytest.raises(ValueError, match="ctrllimited"):
        MjxEnv.from_xml(str(unlimited), **kwargs)
    with pytest.raises(TypeError, match="lack the field"):
        MjxEnv.from_xml(cp.XML_PATH, params=types.SimpleNamespace(max_steps_in_episode=5), **kwargs)
    with pytest.raises(ValueError, match="frame_skip"):
        MjxEnv.from_xml(cp.XML_PATH, frame_skip=0, **kwargs)


def test_state_is_small_and_checkpointable(env):
    """Only the carried physics fields, no zero-size arrays (orbax rejects them)."""
    state = jax.eval_shape(env.reset, jax.random.PRNGKey(0), env.default_params)[0]
    leaves = jax.tree_util.tree_leaves(state)
    assert all(leaf.size > 0 for leaf in leaves)
    assert state.act is None and state.qpos.shape == (2,) and len(leaves) == 5


def test_render_draws_cart_and_pole(env):
    state, _ = jax.jit(env.reset)(jax.random.PRNGKey(0), env.default_params)
    frame = env.render(state, env.default_params)
    assert frame.shape == (240, 320, 3) and frame.dtype == np.uint8
    # The pole (a capsule from the cart up 1 m) is drawn above the cart: pole colour
    # appears in the column at the image centre, above the cart's row.
    from jaxrl.adapters import projection

    column = frame[:, 160]
    assert (column == projection.LINK).all(axis=-1).sum() > 20
    assert (column == projection.BODY).all(axis=-1).sum() > 5
