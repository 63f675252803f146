"""Recurrent PPO through the real CLI (``configs/ppo_rnn_cartpole_pomdp.yaml`` on a tiny
budget): ``train --seeds 2``, ``eval`` and ``render`` in subprocesses (the bit-exact resume
and the two-device split: tests/test_algo_conformance.py); and the trained run
exported with ``jaxrl.load_policy`` (the caller threads the carry and resets it at episode
starts), which reproduces the learner's sequence forward and ``jaxrl eval``'s returns."""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from fast_compile import subprocess_env
from PIL import Image

import jaxrl
from jaxrl.algos.ppo import acting
from jaxrl.core import prng
from jaxrl.run.evaluate import EVAL_SEED_OFFSET, evaluate_states, load_run

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIG = os.path.join(REPO, "configs", "ppo_rnn_cartpole_pomdp.yaml")
TINY = [
    "ppo.num_envs=4", "ppo.num_steps=16", "ppo.total_env_steps=1024", "ppo.num_minibatches=2",
    "ppo.hidden=[16]", "ppo.network.cell_size=8", "ppo.eval_episodes=4",
    "train.updates_per_chunk=4", "train.checkpoint_every=2", "train.progress=false",
]


def jaxrl_cli(cwd, *args) -> subprocess.CompletedProcess:
    env = subprocess_env()  # XLA at -O0 (tests/fast_compile.py) but for the trainer's own programs
    cmd = [sys.executable, "-m", "jaxrl.cli", *map(str, args)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=str(cwd), env=env)


def train(cwd, out, *sets) -> subprocess.CompletedProcess:
    args = ["train", CONFIG, "--out", out]
    for s in [*TINY, *sets]:
        args += ["--set", s]
    return jaxrl_cli(cwd, *args)


def read_jsonl(path) -> list[dict]:
    return [json.loads(line) for line in open(path) if line.strip()]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    root = tmp_path_factory.mktemp("rnn")
    proc = train(root, "run", "train.seeds=2", "train.log_seeds=per_seed")
    assert proc.returncode == 0, proc.stderr[-3000:]
    return root / "run", proc


def test_train_two_seeds_eval_and_render(trained):
    run_dir, proc = trained
    assert "16 updates x 64 env steps = 1,024 env steps x 2 seeds" in proc.stdout
    assert sorted(os.listdir(run_dir / "checkpoints"), key=int) == ["8", "16"]
    records = read_jsonl(run_dir / "metrics.jsonl")
    assert len(records[0]["loss"]) == 2 and records[0]["loss"][0] != records[0]["loss"][1]

    proc = jaxrl_cli(run_dir.parent, "eval", run_dir, "--episodes", "3")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "eval deterministic" in proc.stdout and "over 6 episodes" in proc.stdout
    gif = run_dir / "policy.gif"
    proc = jaxrl_cli(run_dir.parent, "render", run_dir, "--out", gif, "--steps", "6")
    assert proc.returncode == 0, proc.stderr[-3000:]
    with Image.open(gif) as im:
        assert im.n_frames >= 2 and np.asarray(im.convert("RGB")).std() > 0


# ------------------------------------------------------------------ export: jaxrl.load_policy


def _scan_act(policy, carry, obs, starts, keys, done: bool = True):
    """Step ``policy.act`` over ``obs [T, B, ...]``, ``starts [T, B]`` passed as ``done``."""

    def step(carry, x):
        o, s, k = x
        return policy.act(carry, o, k, s if done else None)

    return jax.lax.scan(step, carry, (obs, starts, keys))


def test_exported_policy_steps_as_the_learners_sequence_forward(trained):
    run_dir, _ = trained
    cfg, built, states, step = load_run(str(run_dir))
    policy = jaxrl.load_policy(str(run_dir), seed=1)
    assert policy.recurrent and policy.step == step == 16
    network = built.program.policy.act.args[0]  # the training program's network
    agent = jax.tree_util.tree_map(lambda x: x[1], states).agent
    t, b = 24, 6
    obs = jax.random.normal(jax.random.PRNGKey(0), (t, b, 2)) * jnp.array([1.0, 0.1])
    starts = jax.random.bernoulli(jax.random.PRNGKey(1), 0.15, (t, b)).at[0].set(True)
    keys = jax.random.split(jax.random.PRNGKey(2), t)
    # The loss's forward: the whole sequence from a zero carry, reset where `starts`, fed
    # the actions taken (the recipe's GRU also sees the previous action).
    assert cfg.algo_config.network.prev_action
    x = acting.prepare_obs(cfg.algo_config, agent.obs_stats, obs)
    carry, actions = jax.jit(functools.partial(_scan_act, policy))(policy.init_carry((b,)), obs, starts, keys)
    want_carry, dist, _ = network.apply(agent.params, network.initial_carry((b,)), x, starts, actions)
    np.testing.assert_array_equal(np.asarray(actions), np.asarray(dist.mode()))
    jax.tree_util.tree_map(lambda a, w: np.testing.assert_allclose(a, w, rtol=1e-5, atol=1e-6), carry, want_carry)
    # Sampling: the same draws as the learner's distribution at each step with the same key.
    sampler = jaxrl.load_policy(str(run_dir), seed=1, deterministic=False)
    _, sampled = jax.jit(functools.partial(_scan_act, sampler))(sampler.init_carry((b,)), obs, starts, keys)
    _, dist = network.apply(agent.params, network.initial_carry((b,)), x, starts, sampled)[:2]
    want = jnp.stack([prng.categorical(keys[i], dist.logits[i][None])[0] for i in range(t)])
    np.testing.assert_array_equal(np.asarray(sampled), np.asarray(want))
    assert len(np.unique(np.asarray(sampled))) == 2  # both actions occur: the comparison can fail
    # Without the resets the carry leaks across episodes and ends elsewhere.
    leaked, _ = _scan_act(policy, policy.init_carry((b,)), obs, starts, keys, done=False)
    assert not np.allclose(np.asarray(leaked[0]), np.asarray(want_carry[0]), atol=1e-4)
    # One unbatched observation, with the carry of one env.
    one, action = policy.act(policy.init_carry(), obs[0, 0], keys[0], jnp.array(True))
    assert one[0].shape == (8,) and one[1].shape == (2,) and int(action) == int(actions[0, 0])
    with pytest.raises(TypeError, match=r"policy\.init_carry\(batch_shape\)"):
        policy(obs[0, 0], keys[0])  # the stateless call names the carrying one


def test_exported_policy_reproduces_jaxrl_eval(trained):
    """``evaluate``'s deterministic episodes of seed 1 (same keys, same envs), replayed with
    the exported policy: the returns equal ``jaxrl eval``'s."""
    run_dir, _ = trained
    cfg, built, states, _ = load_run(str(run_dir))
    want = evaluate_states(built, states)["episode_returns"][1]  # [N], what `jaxrl eval` pools
    n, params = cfg.algo_config.eval_episodes, built.envs.eval_params
    env = jaxrl.VmapEnv(built.program.policy.env, 2 * n)  # as evaluate: N greedy + N sampling
    policy = jaxrl.load_policy(str(run_dir), seed=1)
    reset_key, key = jax.random.split(jax.random.split(jax.random.PRNGKey(EVAL_SEED_OFFSET), 2)[1])
    env_state, ts = env.reset(reset_key, params)

    def step(c, _):
        env_state, obs, carry, done, ret, key = c
        key, act_key, env_key = jax.random.split(key, 3)
        carry, action = policy.act(carry, obs, act_key)
        env_state, ts = env.step(env_key, env_state, action, params)
        return (env_state, ts.obs, carry, jnp.logical_or(done, ts.done), ret + jnp.where(done, 0.0, ts.reward), key), None

    init = (env_state, ts.obs, policy.init_carry((2 * n,)), jnp.zeros(2 * n, bool), jnp.zeros(2 * n), key)
    final = jax.jit(lambda c: jax.lax.scan(step, c, None, length=500)[0])(init)
    assert bool(jnp.all(final[3][:n]))
    np.testing.assert_array_equal(np.asarray(final[4][:n]), np.asarray(want))
    assert len(np.unique(want)) > 1  # the episodes differ: the comparison can fail
