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


# ----------------------------------------------------------------- jaxrl train --init-from RUN


def _leaves_equal(a, b) -> bool:
    la, lb = jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)
    return len(la) == len(lb) and all(np.array_equal(np.asarray(x), np.asarray(y)) for x, y in zip(la, lb))


def test_init_from_starts_with_the_runs_parameters_and_a_fresh_optimiser(short_run):
    from jaxrl.run.build import seed_keys
    from jaxrl.run.evaluate import load_run

    cfg, run_dir, _ = short_run
    cfg1 = C.with_overrides(cfg, ["train.seeds=1"])  # one seed of a two-seed source is refused ...
    built = build(cfg1)
    keys = seed_keys(0, 1)
    layout = trainer.make_layout(cfg1, built, keys)
    fresh = jax.vmap(built.program.init)(keys)
    with pytest.raises(C.ConfigError, match="trained 2 seeds; this run needs 1 or 1"):
        trainer.initial_from(cfg1, built, fresh, keys, run_dir, layout)
    # ... a two-seed run takes seed for seed.
    built = build(cfg)
    keys = seed_keys(0, 2)
    layout = trainer.make_layout(cfg, built, keys)
    fresh = jax.vmap(built.program.init)(keys)
    state, record = trainer.initial_from(cfg, built, fresh, keys, run_dir, layout)
    source = load_run(run_dir)[2]
    assert record["update"] == 2 and record["seeds"] == 2
    assert _leaves_equal(state.agent, source.agent) and not _leaves_equal(fresh.agent, source.agent)
    assert _leaves_equal(state.opt_state, fresh.opt_state) and _leaves_equal(state.update_step, fresh.update_step)


def test_init_from_refuses_a_different_network(short_run):
    from jaxrl.run.build import seed_keys

    cfg, run_dir, _ = short_run
    other = C.with_overrides(cfg, ["ppo.hidden=[32]"])
    built = build(other)
    keys = seed_keys(0, 2)
    fresh = jax.vmap(built.program.init)(keys)
    with pytest.raises(C.ConfigError, match="network shapes differ"):
        trainer.initial_from(other, built, fresh, keys, run_dir, trainer.make_layout(other, built, keys))


def test_train_init_from_cli_records_the_source(short_run, tmp_path, capsys):
    from jaxrl import cli

    _, run_dir, _ = short_run
    out = tmp_path / "tuned"
    argv = ["train", str(ROOT / "configs" / "ppo_cartpole.yaml"), "--set", "ppo.total_env_steps=512",
            "--set", "train.progress=false", "--seeds", "2", "--init-from", run_dir, "--out", str(out)]
    assert cli.main(argv) == 0
    record = __import__("json").loads((out / "init_from.json").read_text())
    assert record["run_dir"] == str(__import__("pathlib").Path(run_dir).resolve()) and record["update"] == 2
    assert f"starting from the parameters of {run_dir}" in capsys.readouterr().out
    assert cli.main(["train", "--resume", str(out), "--init-from", run_dir]) == 2
