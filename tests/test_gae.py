"""GAE: hand-computed advantages with termination and truncation; rollout bootstrap data."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrl
from jaxrl.core import rollout
from jaxrl.algos import ppo
from jaxrl.core.wrappers import AutoReset, EpisodeStatistics, VmapEnv
from jaxrl.algos.common.train import COMPILER_OPTIONS


def test_gae_hand_computed_termination_and_truncation():
    # Column 0 (gamma 0.9, lambda 0.8):
    #   t=0 ordinary: delta = 1 + 0.9 * 1.0 - 0.5 = 1.4
    #   t=1 truncated: bootstraps from V(final obs) = 9.0: delta = 2 + 0.9 * 9 - 1 = 9.1,
    #       and the trace is cut: A_1 = 9.1
    #   t=2 ordinary: delta = 3 + 0.9 * 2.0 - 1.5 = 3.3; A_2 = 3.3 + 0.72 * A_3
    #   t=3 terminated: no bootstrap: delta = 4 - 2 = 2.0 = A_3
    #   A = [1.4 + 0.72 * 9.1, 9.1, 3.3 + 0.72 * 2, 2] = [7.952, 9.1, 4.74, 2.0]
    # Column 1: terminated and truncated together at t=1 (terminated wins: no bootstrap);
    #   rewards 1, values 0, next values 5:
    #   t=3: delta = 1 + 4.5 = 5.5 = A_3; t=2: 5.5 + 0.72 * 5.5 = 9.46
    #   t=1: delta = 1 (no bootstrap), A_1 = 1; t=0: 5.5 + 0.72 * 1 = 6.22
    rewards = jnp.array([[1.0, 1.0], [2.0, 1.0], [3.0, 1.0], [4.0, 1.0]])
    values = jnp.array([[0.5, 0.0], [1.0, 0.0], [1.5, 0.0], [2.0, 0.0]])
    next_values = jnp.array([[1.0, 5.0], [9.0, 5.0], [2.0, 5.0], [3.0, 5.0]])
    terminated = jnp.array([[False, False], [False, True], [False, False], [True, False]])
    truncated = jnp.array([[False, False], [True, True], [False, False], [False, False]])
    adv, targets = ppo.losses.gae(rewards, values, next_values, terminated, truncated, 0.9, 0.8)
    expected = np.array([[7.952, 6.22], [9.1, 1.0], [4.74, 9.46], [2.0, 5.5]])
    np.testing.assert_allclose(adv, expected, rtol=1e-6)
    np.testing.assert_allclose(targets, expected + np.asarray(values), rtol=1e-6)


def test_gae_lambda_one_is_monte_carlo_return_with_bootstrap():
    # lambda = 1, no episode end: A_t + V_t = sum_k gamma^k r_{t+k} + gamma^(T-t) V(next_obs_{T-1}).
    rng = np.random.default_rng(0)
    T, gamma = 6, 0.95
    r = rng.normal(size=(T, 3)).astype(np.float32)
    v = rng.normal(size=(T, 3)).astype(np.float32)
    nv = np.concatenate([v[1:], rng.normal(size=(1, 3)).astype(np.float32)])
    flags = np.zeros((T, 3), bool)
    _, targets = ppo.losses.gae(jnp.asarray(r), jnp.asarray(v), jnp.asarray(nv), flags, flags, gamma, 1.0)
    expected = np.zeros((T, 3))
    for t in range(T):
        expected[t] = sum(gamma**k * r[t + k] for k in range(T - t)) + gamma ** (T - t) * nv[-1]
    np.testing.assert_allclose(targets, expected, rtol=1e-5, atol=1e-5)


def test_rollout_keeps_final_obs_and_flags_apart():
    """``next_obs`` is ``obs[t + 1]`` inside an episode and the pre-reset obs at its end."""
    env, params = jaxrl.make("CartPole-v1", max_steps_in_episode=20)
    benv = VmapEnv(EpisodeStatistics(AutoReset(env)), 4)
    policy = functools.partial(_random_policy, 2)
    carry = rollout.reset(benv, params, jax.random.key(0))
    collect = jax.jit(rollout.collect, static_argnums=(0, 1, 5), compiler_options=COMPILER_OPTIONS)
    _, traj = collect(policy, benv, params, carry, jax.random.key(1), 64)
    done = np.asarray(traj.terminated | traj.truncated)
    obs, next_obs = np.asarray(traj.obs), np.asarray(traj.next_obs)
    inside = ~done[:-1]
    np.testing.assert_array_equal(next_obs[:-1][inside], obs[1:][inside])
    assert done.sum() > 0 and np.asarray(traj.truncated).sum() > 0
    # At an episode end the next obs is the end state, not the new episode's first obs.
    assert np.all(np.any(next_obs[:-1][~inside] != obs[1:][~inside], axis=-1))
    # Truncations happen at the 20-step limit and are reported with episode length 20.
    lengths = np.asarray(traj.episode_length)[np.asarray(traj.truncated)]
    assert np.all(lengths == 20)
    assert traj.obs.shape == (64, 4, 4) and traj.log_prob.shape == (64, 4)


def _random_policy(n: int, obs, key):
    action = jax.random.randint(key, obs.shape[:1], 0, n)
    return rollout.PolicyOutput(action, jnp.full(obs.shape[:1], -jnp.log(n)), jnp.zeros(obs.shape[:1]))


if __name__ == "__main__":
    pytest.main([__file__, "-q"])
