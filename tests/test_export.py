"""Policy export (jaxrl.load_policy): a run's checkpoint back as a pure, jittable
``act(obs, key)`` that acts exactly as the trained state does."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrl
from jaxrl.run import config as C
from jaxrl.run import trainer
from jaxrl.run.build import build

ROOT = __import__("pathlib").Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def short_run(tmp_path_factory):
    """Two PPO updates on CartPole, two seeds."""
    cfg = C.load_config(
        ROOT / "configs" / "ppo_cartpole.yaml",
        ["ppo.total_env_steps=1024", "train.seeds=2", "train.progress=false", "ppo.eval_episodes=2"],
    )
    run_dir = tmp_path_factory.mktemp("export") / "run"
    result = trainer.run(cfg, run_dir=str(run_dir), evaluate=False)
    return cfg, str(run_dir), result


def test_round_trip_acts_as_the_trained_state(short_run):
    cfg, run_dir, result = short_run
    policy = build(cfg).program.policy
    env, params = jaxrl.make("CartPole-v1")
    obs = jax.vmap(lambda k: env.reset(k, params)[1].obs)(jax.random.split(jax.random.PRNGKey(0), 64))
    keys = jax.random.split(jax.random.PRNGKey(1), 64)
    for seed in (0, 1):
        act = jaxrl.load_policy(run_dir, seed=seed, deterministic=False)
        assert act.step == result.updates
        agent = policy.params(jax.tree_util.tree_map(lambda x: x[seed], result.state))
        want = jax.vmap(lambda o, k: policy.act(agent, (), o, k, False)[1])(obs, keys)
        got = jax.jit(jax.vmap(act))(obs, keys)
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
        np.testing.assert_array_equal(np.asarray(act(obs[0], keys[0])), np.asarray(want[0]))
    # The two seeds learned different policies (the seed argument matters).
    a0 = jaxrl.load_policy(run_dir, seed=0).agent
    a1 = jaxrl.load_policy(run_dir, seed=1).agent
    assert not all(np.array_equal(x, y) for x, y in zip(jax.tree_util.tree_leaves(a0), jax.tree_util.tree_leaves(a1)))


def test_deterministic_act_ignores_the_key_and_plays_an_episode(short_run):
    _, run_dir, _ = short_run
    act = jaxrl.load_policy(run_dir)
    env, params = jaxrl.make("CartPole-v1")
    state, ts = env.reset(jax.random.PRNGKey(3), params)
    a1, a2 = act(ts.obs, jax.random.PRNGKey(0)), act(ts.obs, jax.random.PRNGKey(99))
    assert int(a1) == int(a2) and env.action_space(params).contains(a1)

    def step(carry, key):
        state, obs = carry
        state, ts = env.step(key, state, act(obs, key), params)
        return (state, ts.obs), ts.reward

    rewards = jax.jit(lambda k: jax.lax.scan(step, (state, ts.obs), jax.random.split(k, 20))[1])(jax.random.PRNGKey(4))
    assert rewards.shape == (20,) and bool(jnp.all(jnp.isfinite(rewards)))


def test_bad_inputs_are_one_line_errors(short_run, tmp_path):
    _, run_dir, _ = short_run
    with pytest.raises(C.ConfigError, match=r"seeds 0\.\.1, got 2"):
        jaxrl.load_policy(run_dir, seed=2)
    with pytest.raises(C.ConfigError, match="not a run directory"):
        jaxrl.load_policy(str(tmp_path))
