"""VectorEnv: batch-level auto-reset that is exact (fresh, independent ``reset`` draws) and cheap.

Specification:
* the final observation of a finished episode is kept in ``info["final_obs"]``;
* new-episode start states are distributed like ``reset`` (KS and moment tests over
  thousands of resets), both through the chunked reset loop and the full-batch path;
* no two envs share a reset stream, no start state is ever reused;
* for a deterministic env with a fixed start, trajectories, flags and episode statistics are
  identical to the per-env ``EpisodeStatistics(AutoReset(env))`` under ``vmap``;
* determinism, no retracing, params batched along axis 0, clear errors for bad arguments.
"""

from __future__ import annotations

import functools

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

import jaxrl
from jaxrl.core.env import Wrapper
from jaxrl.core.vector import VectorEnv, default_reset_chunk, done_rank
from jaxrl.core.wrappers import AutoReset, EpisodeStatistics, VmapEnv

NUM_ENVS = 256
NUM_STEPS = 48


def _random_actions(key, num_steps, num_envs):
    return jax.random.bernoulli(key, 0.5, (num_steps, num_envs)).astype(jnp.int32)


def _rollout(benv, params, key, actions):
    """Scan ``benv.step`` over ``actions [T, N]``; returns the stacked TimeSteps (and state)."""
    reset_key, step_key = jax.random.split(key)
    state, ts0 = benv.reset(reset_key, params)

    def body(state, inp):
        k, a = inp
        state, ts = benv.step(k, state, a, params)
        return state, (ts, state)

    keys = jax.random.split(step_key, actions.shape[0])
    _, (ts, states) = jax.lax.scan(body, state, (keys, actions))
    return ts0, ts, states


@functools.lru_cache(maxsize=None)
def _jitted_rollout(benv):
    return jax.jit(functools.partial(_rollout, benv))


# ----------------------------------------------------------------------------------------
# A fast-terminating CartPole: short random episodes give many resets in a short rollout.
# ----------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def cartpole():
    env, params = jaxrl.make("CartPole-v1", theta_threshold_radians=0.06, max_steps_in_episode=4)
    return env, params


def _start_states(env, params, chunk, key):
    """Observations of every new episode started during a rollout, ``[K, 4]``, and ``[T, N]`` done."""
    benv = VectorEnv(env, NUM_ENVS, reset_chunk=chunk)
    actions = _random_actions(jax.random.fold_in(key, 1), NUM_STEPS, NUM_ENVS)
    _, ts, states = _jitted_rollout(benv)(params, key, actions)
    done = np.asarray(ts.done)
    obs = np.asarray(ts.obs)
    time = np.asarray(states.env_state.time)
    return obs[done], time[done], done


@pytest.mark.parametrize("chunk", [8, NUM_ENVS], ids=["chunked-loop", "full-batch"])
def test_new_episodes_start_from_reset_distribution(cartpole, chunk):
    env, params = cartpole
    starts, time, done = _start_states(env, params, chunk, jax.random.key(0))
    assert starts.shape[0] > 2000, starts.shape  # enough resets for the statistics
    if chunk < NUM_ENVS:
        # Some steps need several chunks (count > chunk), exercising the loop, and the
        # synchronised truncation step needs all NUM_ENVS / chunk iterations.
        assert done.sum(axis=1).max() > 4 * chunk
    assert np.all(time == 0)  # a new episode's state, not a stepped one
    # CartPole's reset: each of the 4 coordinates ~ U(-0.05, 0.05), independently.
    assert np.all(np.abs(starts) <= 0.05)
    for d in range(4):
        u = (starts[:, d] + 0.05) / 0.1
        assert stats.kstest(u, "uniform").pvalue > 1e-3, (d, stats.kstest(u, "uniform"))
        # Moments: mean 0 and variance 0.1^2 / 12 within 5 standard errors.
        n = len(u)
        assert abs(starts[:, d].mean()) < 5 * np.sqrt(0.1**2 / 12 / n)
        assert abs(starts[:, d].var() - 0.1**2 / 12) < 5 * 0.1**2 * np.sqrt(1 / 180 / n)
    # Coordinates of one start state are uncorrelated (each from its own random bits).
    corr = np.corrcoef(starts.T)
    assert np.all(np.abs(corr[np.triu_indices(4, 1)]) < 5 / np.sqrt(len(starts)))


def test_no_shared_reset_stream_and_no_reuse(cartpole):
    env, params = cartpole
    starts, _, done = _start_states(env, params, 8, jax.random.key(1))
    # Every start state in the whole rollout is distinct: no two envs resetting on the same
    # step share a draw, and no draw is ever reused (no cached start state).
    assert len(np.unique(starts, axis=0)) == len(starts)
    assert done.sum(axis=1).max() > 1  # several envs did reset on the same step


def test_final_obs_kept(cartpole):
    env, params = cartpole
    benv = VectorEnv(env, 64, reset_chunk=4)
    state, _ = benv.reset(jax.random.key(3), params)
    step = jax.jit(benv.step)
    reference = jax.jit(jax.vmap(env.step, in_axes=(None, 0, 0, None)))
    key = jax.random.key(4)
    saw_done = 0
    for t in range(14):
        key, k_act, k_step = jax.random.split(key, 3)
        action = jax.random.bernoulli(k_act, 0.5, (64,)).astype(jnp.int32)
        _, expected = reference(k_step, state.env_state, action, params)
        state, ts = step(k_step, state, action, params)
        done = np.asarray(ts.done)
        saw_done += done.sum()
        # Same float32 maths, compiled in a different program: equal up to fused rounding.
        np.testing.assert_allclose(ts.info["final_obs"], expected.obs, rtol=1e-6, atol=1e-7)
        np.testing.assert_array_equal(ts.terminated, expected.terminated)
        np.testing.assert_array_equal(ts.truncated, expected.truncated)
        np.testing.assert_array_equal(ts.reward, expected.reward)
        obs = np.asarray(ts.obs)
        np.testing.assert_array_equal(obs[~done], np.asarray(ts.info["final_obs"])[~done])
        np.testing.assert_allclose(obs[~done], np.asarray(expected.obs)[~done], rtol=1e-6, atol=1e-7)
        assert np.all(np.abs(obs[done]) <= 0.05)  # a fresh start state ...
        assert np.all(np.asarray(state.env_state.time)[done] == 0)  # ... with its clock reset
        assert not np.any(np.all(obs[done] == np.asarray(expected.obs)[done], axis=1))
    assert saw_done > 64


# ----------------------------------------------------------------------------------------
# Equivalence with the per-env AutoReset for a deterministic env with a fixed start state
# ----------------------------------------------------------------------------------------
class FixedStart(Wrapper):
    """Resets every episode to the same state: trajectories depend on actions only."""

    def reset(self, key, params):
        return self.env.reset(jax.random.key(7), params)


def test_matches_per_env_autoreset_for_deterministic_env(cartpole):
    env, params = cartpole
    env = FixedStart(env)
    n, t = 64, 40
    actions = _random_actions(jax.random.key(5), t, n)
    ours = VectorEnv(env, n, reset_chunk=4)
    theirs = VmapEnv(EpisodeStatistics(AutoReset(env)), n)
    _, ts_a, _ = _jitted_rollout(ours)(params, jax.random.key(6), actions)
    _, ts_b, _ = jax.jit(functools.partial(_rollout, theirs))(params, jax.random.key(6), actions)
    assert ts_a.done.sum() > 2 * n  # many episodes ended, some on the same step
    for field in ("obs", "reward", "terminated", "truncated"):
        np.testing.assert_array_equal(getattr(ts_a, field), getattr(ts_b, field), err_msg=field)
    for k in ("final_obs", "episode_return", "episode_length", "episode_done"):
        np.testing.assert_array_equal(ts_a.info[k], ts_b.info[k], err_msg=k)


# ----------------------------------------------------------------------------------------
# Determinism, retracing, params batched along axis 0
# ----------------------------------------------------------------------------------------
def test_deterministic_given_key(cartpole):
    env, params = cartpole
    benv = VectorEnv(env, NUM_ENVS, reset_chunk=8)
    actions = _random_actions(jax.random.key(8), NUM_STEPS, NUM_ENVS)
    run = _jitted_rollout(benv)
    _, a, _ = run(params, jax.random.key(9), actions)
    _, b, _ = run(params, jax.random.key(9), actions)
    _, c, _ = run(params, jax.random.key(10), actions)
    chex.assert_trees_all_equal(a, b)
    assert not np.array_equal(a.obs, c.obs)


def test_vmap_over_seeds_matches_separate_runs(cartpole):
    # Under vmap the reset loop runs as many iterations as the busiest member: still exact.
    env, params = cartpole
    benv = VectorEnv(env, 32, reset_chunk=4)
    actions = _random_actions(jax.random.key(11), 12, 32)
    keys = jax.random.split(jax.random.key(12), 2)
    run = functools.partial(_rollout, benv, params)
    _, batched, _ = jax.jit(jax.vmap(run, in_axes=(0, None)))(keys, actions)
    for i in range(2):
        _, single, _ = _jitted_rollout(benv)(params, keys[i], actions)
        np.testing.assert_allclose(batched.obs[i], single.obs, rtol=1e-6, atol=1e-7)
        np.testing.assert_array_equal(batched.done[i], single.done)


def test_step_compiles_once():
    env, params = jaxrl.make("CartPole-v1")
    counted = chex.assert_max_traces(n=1)(lambda benv, key, state, action, p: benv.step(key, state, action, p))
    step = jax.jit(counted, static_argnums=0)
    state, _ = VectorEnv(env, 32).reset(jax.random.key(0), params)
    for i in range(3):
        # An equal but distinct VectorEnv object hits the same cache entry.
        state, _ = step(VectorEnv(env, 32), jax.random.key(i), state, jnp.full((32,), i % 2, jnp.int32), params)
    jax.block_until_ready(state)


class ScaledStart(jaxrl.Environment):
    """Start obs ~ U(0, params[0]); every step ends the episode (obs unchanged)."""

    def reset(self, key, params):
        obs = jax.random.uniform(key, (1,)) * params[0]
        return obs, jaxrl.core.env.first_timestep(obs)

    def step(self, key, state, action, params):
        return state, jaxrl.core.env.transition(state, 0.0, True, False)

    def __hash__(self):
        return hash(ScaledStart)

    def __eq__(self, other):
        return type(other) is ScaledStart


def test_params_axis_draws_with_each_envs_params():
    n = 96
    scale = jnp.arange(1, n + 1, dtype=jnp.float32)[:, None]  # env i starts in [0, i + 1)
    benv = VectorEnv(ScaledStart(), n, params_axis=0, reset_chunk=7)
    state, ts = benv.reset(jax.random.key(0), scale)
    step = jax.jit(benv.step)
    fractions = []
    for t in range(4):
        state, ts = step(jax.random.key(t + 1), state, jnp.zeros((n,), jnp.int32), scale)
        fractions.append(np.asarray(ts.obs[:, 0] / scale[:, 0]))
    # obs / scale ~ U(0, 1) only if every env's draw used that env's own scale.
    fractions = np.concatenate(fractions)
    assert np.all((fractions >= 0) & (fractions < 1))
    assert stats.kstest(fractions, "uniform").pvalue > 1e-3


# ----------------------------------------------------------------------------------------
# Helpers and errors
# ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("n", [1, 33, 1000, 40000])
def test_done_rank_is_inclusive_cumsum(n):
    rank = jax.jit(done_rank)
    for p in (0.0, 0.1, 0.9, 1.0):
        done = jax.random.bernoulli(jax.random.key(n), p, (n,))
        np.testing.assert_array_equal(rank(done), np.cumsum(np.asarray(done)))


def test_default_chunk():
    assert default_reset_chunk(1) == 1
    assert default_reset_chunk(8) == 8
    assert default_reset_chunk(100) == 16
    assert default_reset_chunk(1024) == 32
    assert default_reset_chunk(65536) == 2048
    assert VectorEnv(jaxrl.make("CartPole-v1")[0], 100, reset_chunk=10**6).reset_chunk == 100


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"num_envs": 0}, "num_envs > 0"),
        ({"num_envs": 4, "reset_chunk": 0}, "reset_chunk must be a positive int"),
        ({"num_envs": 4, "reset_chunk": 2.5}, "reset_chunk must be a positive int"),
        ({"num_envs": 4, "params_axis": 1}, "params_axis must be None or 0"),
    ],
)
def test_bad_arguments(kwargs, match):
    env, _ = jaxrl.make("CartPole-v1")
    with pytest.raises(ValueError, match=match):
        VectorEnv(env, **kwargs)


def test_cartpole_sincos_accuracy():
    from conftest import USER_COMPILE
    from jaxrl_envs.cartpole import sincos

    x = np.concatenate([
        np.linspace(-0.5, 0.5, 10001),
        np.random.default_rng(0).uniform(-5e4, 5e4, 100000),
        [0.0, np.pi / 4, np.pi / 2, np.pi, -np.pi, 3 * np.pi / 2],
    ]).astype(np.float32)
    s, c = jax.jit(sincos, compiler_options=USER_COMPILE)(x)  # the accuracy users get
    x64 = x.astype(np.float64)
    assert np.max(np.abs(np.asarray(s, np.float64) - np.sin(x64))) < 2e-7
    assert np.max(np.abs(np.asarray(c, np.float64) - np.cos(x64))) < 2e-7
    huge = jnp.array([1e30, -3e38, 1e7], jnp.float32)
    s, c = sincos(huge)
    assert np.all(np.isfinite(s)) and np.all(np.isfinite(c)) and np.all(np.abs(s) <= 1)


class SmallResetBatch(Wrapper):
    """An env that asks for its resets 3 at a time (``reset_batch``)."""

    reset_batch = 3


def test_reset_batch_draws_the_same_start_states_in_batches(cartpole):
    """``env.reset_batch`` (Craftax: 16) changes how resets are batched, never which states are
    drawn: the same keys give the same states, shared or per-env params, with a remainder
    batch; wrappers forward it; VectorEnv and the reset pool step the same bits with it."""
    from jaxrl.core.reset_pool import ResetPoolVectorEnv
    from jaxrl.core.env import batched_resets

    env, params = cartpole
    small = SmallResetBatch(env)
    assert env.reset_batch is None and small.reset_batch == 3 and EpisodeStatistics(small).reset_batch == 3
    keys = jax.random.split(jax.random.key(0), 10)  # 3 batches of 3 and a remainder of 1
    want = jax.vmap(env.reset, in_axes=(0, None))(keys, params)
    # batched: a loop over batches (lax.map's scan), not one vmap of all 10
    assert "scan" in str(jax.make_jaxpr(lambda k: batched_resets(small, k, params))(keys))
    assert "scan" not in str(jax.make_jaxpr(lambda k: batched_resets(env, k, params))(keys))
    vmapped = jax.jit(lambda e, k: VmapEnv(e, 10).reset(k, params), static_argnums=0)
    assert "scan" in str(jax.make_jaxpr(lambda k: VmapEnv(small, 10).reset(k, params))(jax.random.key(0)))
    chex.assert_trees_all_equal(vmapped(small, jax.random.key(0)), vmapped(env, jax.random.key(0)))
    chex.assert_trees_all_equal(jax.jit(batched_resets, static_argnums=0)(small, keys, params), want)
    scaled = jnp.arange(1, 11, dtype=jnp.float32)[:, None]
    chex.assert_trees_all_equal(
        jax.jit(batched_resets, static_argnums=(0, 3))(SmallResetBatch(ScaledStart()), keys, scaled, 0),
        jax.vmap(ScaledStart().reset)(keys, scaled),
    )
    actions = _random_actions(jax.random.key(1), 12, 8)
    for make in (lambda e: VectorEnv(e, 8, reset_chunk=4), lambda e: ResetPoolVectorEnv(e, 8)):
        ref = _rollout(make(env), params, jax.random.key(2), actions)[:2]
        got = _rollout(make(small), params, jax.random.key(2), actions)[:2]
        assert np.asarray(got[1].done).sum() > 8  # episodes ended: the reset draws ran
        chex.assert_trees_all_equal(got, ref)
