"""The PPO program: pure, vmappable over seeds and hyperparameters, deterministic, compiled
once, with no host callback and no host transfer inside an update."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrl
from jaxrl.algos import ppo
from jaxrl.algos.contract import Program as Algorithm
from jaxrl.algos.common.train import COMPILER_OPTIONS
from jaxrl.algos.common.train import program_on as program, train_on as train_fn

CFG = ppo.PPOConfig(
    num_envs=4, num_steps=16, total_env_steps=4 * 16 * 8, update_epochs=2, num_minibatches=2,
    hidden=(16,), optim=ppo.config.PPOOptim(lr=3e-3), normalize_obs=True, normalize_reward=True, vf_clip_eps=0.2, eval_episodes=3,
)
UPDATES = 3


@pytest.fixture(scope="module")
def setup():
    env, params = jaxrl.make("CartPole-v1")
    algo = program(ppo, env, params, CFG)
    train = jax.jit(train_fn(ppo, env, params, CFG, num_updates=UPDATES), compiler_options=COMPILER_OPTIONS)
    return env, params, algo, train


@pytest.fixture(scope="module")
def sweep(setup):
    """Three seeds x three learning rates / clip ranges, trained in one vmapped program."""
    env, params, _, _ = setup
    keys = jax.random.split(jax.random.key(7), 3)
    hyper = ppo.hyperparams(CFG, lr=jnp.array([3e-3, 1e-3, 3e-4]), clip_eps=jnp.array([0.2, 0.1, 0.3]))
    vtrain = jax.jit(jax.vmap(train_fn(ppo, env, params, CFG, num_updates=UPDATES)), compiler_options=COMPILER_OPTIONS)
    return keys, hyper, vtrain(keys, hyper)


def _row(tree, i):
    return jax.tree_util.tree_map(lambda x: x[i], tree)


def test_make_ppo_is_an_algorithm_with_plan(setup):
    _, _, algo, _ = setup
    assert isinstance(algo, Algorithm)
    assert algo.plan == ppo.config.plan(CFG)
    assert algo.plan.num_updates == 8 and algo.plan.env_steps_per_update == 64


def test_vmapped_seeds_and_hyperparams_equal_separate_runs(setup, sweep):
    _, _, _, train = setup
    keys, hyper, (vstate, vmetrics) = sweep
    for i in range(3):
        state, metrics = train(keys[i], _row(hyper, i))
        for name in metrics:
            np.testing.assert_allclose(vmetrics[name][i], metrics[name], rtol=1e-5, atol=1e-6, err_msg=name)
        np.testing.assert_allclose(
            jax.flatten_util.ravel_pytree(_row(vstate.agent.params, i))[0],
            jax.flatten_util.ravel_pytree(state.agent.params)[0], rtol=1e-5, atol=1e-6,
        )
    # The swept values really reach the program: different lr -> different runs.
    assert not np.allclose(vmetrics["loss"][0], vmetrics["loss"][1])
    np.testing.assert_allclose(vmetrics["lr"][:, 0], [3e-3, 1e-3, 3e-4], rtol=1e-6)


def test_same_seed_twice_is_bit_identical(setup):
    _, _, _, train = setup
    hyper = ppo.hyperparams(CFG)
    s1, m1 = train(jax.random.key(3), hyper)
    s2, m2 = train(jax.random.key(3), hyper)
    for name in m1:
        np.testing.assert_array_equal(m1[name], m2[name], err_msg=name)
    for a, b in zip(jax.tree_util.tree_leaves(s1.agent), jax.tree_util.tree_leaves(s2.agent)):
        np.testing.assert_array_equal(a, b)
    assert m1["loss"].shape == (UPDATES,)
    # Metrics are finite float32 scalars per update, the same keys every time.
    assert all(v.dtype == jnp.float32 and bool(jnp.all(jnp.isfinite(v))) for v in m1.values())
    # Normaliser statistics live in the agent state and count every observation seen.
    assert float(s1.agent.obs_stats.count) == UPDATES * CFG.num_envs * CFG.num_steps
    assert float(s1.agent.reward_stats.count) == UPDATES * CFG.num_envs * CFG.num_steps
    assert int(s1.update_step) == UPDATES


def test_update_compiles_once_without_callbacks_or_transfers(setup):
    _, _, algo, train = setup
    traces = []

    def counted(state):
        traces.append(1)
        return algo.update(state)

    update = jax.jit(counted, compiler_options=COMPILER_OPTIONS)
    state, _ = train(jax.random.key(0), ppo.hyperparams(CFG))  # a valid state, already compiled
    jaxpr = str(jax.make_jaxpr(algo.update)(state))
    for word in ("callback", "io_callback", "pure_callback", "debug_callback"):
        assert word not in jaxpr
    state, _ = update(state)  # compile outside the guard
    with jax.transfer_guard("disallow"):
        for _ in range(3):
            state, metrics = update(state)
    assert len(traces) == 1
    assert int(state.update_step) == UPDATES + 4
    # Every leaf of the train state is a jax array (checkpointable, vmappable).
    assert all(isinstance(x, jax.Array) for x in jax.tree_util.tree_leaves(state))


def test_evaluate_reports_both_policies(setup):
    _, _, algo, train = setup
    state, _ = train(jax.random.key(1), ppo.hyperparams(CFG))
    out = jax.jit(algo.evaluate)(state, jax.random.key(2))
    assert out["episode_returns"].shape == (3,) and out["episode_returns_stochastic"].shape == (3,)
    np.testing.assert_allclose(out["return_mean"], np.mean(out["episode_returns"]), rtol=1e-6)
    # CartPole: +1 per step, so a return is an episode length in [1, 500].
    assert bool(jnp.all((out["episode_returns"] >= 1) & (out["episode_returns"] <= 500)))
    np.testing.assert_allclose(out["length_mean"], out["return_mean"], rtol=1e-6)


def test_act_and_agent_env_drive_one_env(setup):
    env, params, _, train = setup
    state, _ = train(jax.random.key(1), ppo.hyperparams(CFG))
    act = ppo.make_act(env, params, CFG)
    single = ppo.agent_env(env, params, CFG)
    s, ts = single.reset(jax.random.key(0), params)
    a = act(state.agent, ts.obs, jax.random.key(1), True)
    assert a.shape == () and a.dtype == jnp.int32
    assert ppo.make_value(env, params, CFG)(state.agent, ts.obs).shape == ()


def test_continuous_program_runs_with_tanh_gaussian_and_learned_log_std():
    env, params = jaxrl.make("Pendulum-v1")
    cfg = dataclasses.replace(CFG, dist="tanh_gaussian", log_std="learned", eval_max_steps=5)
    train = train_fn(ppo, env, params, cfg, num_updates=1)
    state, metrics = jax.jit(train, compiler_options=COMPILER_OPTIONS)(jax.random.key(0))
    assert all(bool(jnp.all(jnp.isfinite(v))) for v in metrics.values())
    assert isinstance(ppo.agent_env(env, params, cfg), jaxrl.RescaleAction)
    assert state.env.obs.shape == (CFG.num_envs, 3)
    assert float(state.agent.reward_stats.count) == CFG.num_envs * CFG.num_steps
