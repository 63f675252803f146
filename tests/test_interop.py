"""jaxrl.interop: registered envs as Gymnasium ``Env`` / ``VectorEnv``, checked by
Gymnasium's own ``check_env`` (warnings are errors) and against the jaxrl env they wrap."""

from __future__ import annotations

import warnings

import jax
import numpy as np
import pytest

gymnasium = pytest.importorskip("gymnasium")

import jaxrl  # noqa: E402
from jaxrl import interop  # noqa: E402
from gymnasium.utils.env_checker import check_env  # noqa: E402


@pytest.mark.parametrize("env_id", ["CartPole-v1", "Pendulum-v1"])
def test_gymnasium_check_env_passes_without_warnings(env_id):
    name = interop.register_gymnasium(env_id)
    env = gymnasium.make(name, render_mode="rgb_array")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        # Advice, not a defect (Gymnasium's own Pendulum-v1 gets it for its [-2, 2] torque).
        warnings.filterwarnings("ignore", message=".*symmetric and normalized space")
        check_env(env.unwrapped)  # with a spec: render modes and close are checked too
    env.reset(seed=0)
    frame = env.render()
    assert frame.dtype == np.uint8 and frame.ndim == 3 and frame.shape[-1] == 3


def test_numpy_in_numpy_out_and_same_episode_as_the_jax_env():
    env = interop.GymnasiumEnv("CartPole-v1", length=0.7)
    assert float(env.params.length) == pytest.approx(0.7)
    obs, info = env.reset(seed=5)
    assert isinstance(obs, np.ndarray) and obs.dtype == np.float32 and obs in env.observation_space
    obs2, reward, terminated, truncated, _ = env.step(np.int64(1))
    assert isinstance(reward, float) and isinstance(terminated, bool) and isinstance(truncated, bool)
    # The same keys through the jax env give the same transition.
    rng = np.random.default_rng(5)
    jenv, params = jaxrl.make("CartPole-v1", length=0.7)
    state, ts = jenv.reset(jax.random.PRNGKey(int(rng.integers(2**31 - 1))), params)
    np.testing.assert_array_equal(np.asarray(ts.obs), obs)
    _, ts = jenv.step(jax.random.PRNGKey(int(rng.integers(2**31 - 1))), state, 1, params)
    np.testing.assert_array_equal(np.asarray(ts.obs), obs2)


def test_seeded_episodes_repeat_and_differ_across_seeds():
    def episode(seed):
        env = interop.GymnasiumEnv("CartPole-v1")
        env.action_space.seed(seed)
        obs, _ = env.reset(seed=seed)
        out = [obs]
        for _ in range(20):
            obs, *_ = env.step(env.action_space.sample())
            out.append(obs)
        return np.stack(out)

    np.testing.assert_array_equal(episode(1), episode(1))
    assert not np.array_equal(episode(1), episode(2))


def test_bad_arguments_are_one_line_errors():
    with pytest.raises(ValueError, match="render_mode"):
        interop.GymnasiumEnv("CartPole-v1", render_mode="human")
    with pytest.raises(KeyError, match="unknown env id"):
        interop.GymnasiumEnv("NoSuchEnv-v0")
    with pytest.raises(RuntimeError, match="reset"):
        interop.GymnasiumEnv("CartPole-v1").step(0)
    with pytest.raises(TypeError, match="seed"):
        interop.GymnasiumVectorEnv("CartPole-v1", 2).reset(seed=[1, 2])


def test_vector_env_auto_resets_in_same_step_mode():
    n = 6
    venv = interop.GymnasiumVectorEnv("CartPole-v1", n, render_mode="rgb_array", max_steps_in_episode=7)
    assert venv.metadata["autoreset_mode"] == gymnasium.vector.AutoresetMode.SAME_STEP
    obs, info = venv.reset(seed=0)
    assert obs.shape == (n, 4) and obs in venv.observation_space
    venv.action_space.seed(0)
    ends = 0
    for t in range(30):
        nxt, reward, terminated, truncated, info = venv.step(venv.action_space.sample())
        assert nxt in venv.observation_space and reward.shape == (n,) and reward.dtype == np.float32
        done = terminated | truncated
        np.testing.assert_array_equal(info["_final_obs"], done)
        # Not done: final_obs is obs. Done: obs is a fresh start (|x| <= 0.05), final_obs is not.
        np.testing.assert_array_equal(info["final_obs"][~done], nxt[~done])
        assert np.all(np.abs(nxt[done]) <= 0.05)
        assert not np.array_equal(info["final_obs"][done], nxt[done]) or not done.any()
        ends += int(done.sum())
        if t == 6:
            assert truncated.all() | terminated.any()  # the 7-step limit truncates every live env
    assert ends >= n
    frames = venv.render()
    assert len(frames) == n and all(f.dtype == np.uint8 and f.ndim == 3 for f in frames)


def test_vector_env_seeding_repeats():
    venv = interop.GymnasiumVectorEnv("Pendulum-v1", 3)  # one object: one compile

    def run(seed):
        obs, _ = venv.reset(seed=seed)
        steps = [venv.step(np.full((3, 1), 0.5, np.float32))[0] for _ in range(3)]
        return np.concatenate([obs, *steps])

    np.testing.assert_array_equal(run(4), run(4))
    assert not np.array_equal(run(4), run(5))


def test_gymnax_env_through_gymnasium():
    pytest.importorskip("gymnax")
    env = gymnasium.make(interop.register_gymnasium("gymnax/Catch-bsuite"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_env(env.unwrapped, skip_render_check=True)
