"""PPO really learns: probe environments reach their analytically known values, and a
short vmapped CartPole run reaches the maximal return."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrl
from jaxrl.algos import ppo
from jaxrl.algos.common.train import COMPILER_OPTIONS
from jaxrl.algos.common.train import program_on as program, train_on as train_fn

PROBE_CFG = ppo.PPOConfig(
    num_envs=16, num_steps=16, total_env_steps=16 * 16 * 40, update_epochs=4, num_minibatches=2,
    hidden=(16,), optim=ppo.config.PPOOptim(lr=1e-2, lr_end_frac=1.0), ent_coef=0.0, eval_episodes=2, eval_max_steps=20,
)


def _train(env_id: str, cfg: ppo.PPOConfig, seed: int = 0):
    env, params = jaxrl.make(env_id)
    train = jax.jit(train_fn(ppo, env, params, cfg), compiler_options=COMPILER_OPTIONS)
    state, metrics = train(jax.random.key(seed))
    return env, params, state, metrics


def _values(env_id, cfg, state, obs):
    env, params = jaxrl.make(env_id)
    return np.asarray(ppo.make_value(env, params, cfg)(state.agent, jnp.asarray(obs, jnp.float32)))


def test_one_step_value_is_the_reward():
    _, _, state, _ = _train("ProbeConstant-v0", PROBE_CFG)
    np.testing.assert_allclose(_values("ProbeConstant-v0", PROBE_CFG, state, [[0.0]]), [1.0], atol=0.05)


def test_two_step_value_is_discounted():
    cfg = dataclasses.replace(PROBE_CFG, gamma=0.9)
    _, _, state, _ = _train("ProbeTwoStep-v0", cfg)
    # V(first obs) = gamma * 1 = 0.9, V(second obs) = 1.
    np.testing.assert_allclose(_values("ProbeTwoStep-v0", cfg, state, [[0.0], [1.0]]), [0.9, 1.0], atol=0.05)


def test_truncated_constant_reward_bootstraps_to_infinite_horizon_value():
    cfg = dataclasses.replace(PROBE_CFG, gamma=0.9)
    _, _, state, _ = _train("ProbeTimeLimit-v0", cfg)
    v = _values("ProbeTimeLimit-v0", cfg, state, [[0.0]])[0]
    # 1 / (1 - 0.9) = 10; treating truncation as termination would give at most the
    # 10-step sum (1 - 0.9^10) / 0.1 = 6.5.
    assert abs(v - 10.0) < 0.5, v


def test_policy_picks_the_action_that_matches_the_observation():
    cfg = dataclasses.replace(PROBE_CFG, ent_coef=0.001)
    env, params, state, _ = _train("ProbeActionMatch-v0", cfg)
    dist, _ = ppo.build_network(env, params, cfg).apply(state.agent.params, jnp.array([[1.0], [-1.0]]))
    probs = np.exp(np.asarray(dist.log_prob(jnp.array([1, 0]))))
    assert np.all(probs > 0.95), probs
    np.testing.assert_allclose(_values("ProbeActionMatch-v0", cfg, state, [[1.0], [-1.0]]), [1.0, 1.0], atol=0.15)


def test_gaussian_policy_moves_its_mean_to_the_best_action():
    cfg = dataclasses.replace(PROBE_CFG, dist="gaussian", init_log_std=-0.5, ent_coef=0.0)
    env, params, state, _ = _train("ProbeContinuous-v0", cfg)
    act = ppo.make_act(env, params, cfg)
    _, ts = ppo.agent_env(env, params, cfg).reset(jax.random.key(0), params)
    a = float(act(state.agent, ts.obs, jax.random.key(1), True)[0])
    assert abs(a - float(params.target_center)) < 0.1, a


CARTPOLE_CFG = ppo.PPOConfig(
    num_envs=8, num_steps=64, total_env_steps=512 * 80, update_epochs=4, num_minibatches=4,
    optim=ppo.config.PPOOptim(lr=6e-3), hidden=(64,), eval_episodes=8,
)


def test_cartpole_solved_by_vmapped_seeds():
    env, params = jaxrl.make("CartPole-v1")
    algo = program(ppo, env, params, CARTPOLE_CFG)
    train = train_fn(ppo, env, params, CARTPOLE_CFG)
    keys = jax.random.split(jax.random.key(0), 4)
    state, metrics = jax.jit(jax.vmap(train), compiler_options=COMPILER_OPTIONS)(keys)
    ev = jax.jit(jax.vmap(algo.evaluate), compiler_options=COMPILER_OPTIONS)(state, jax.random.split(jax.random.key(1), 4))
    returns = np.asarray(ev["return_mean"])
    assert returns.mean() >= 475 and (returns >= 475).sum() >= 3, returns
    # It learned during training too (not only at the end): the curve rose.
    curve = np.asarray(metrics["episode_return"])
    assert np.all(curve[:, -10:].mean(1) > curve[:, :10].mean(1))
