"""Recurrent PPO through the real CLI (``configs/ppo_rnn_cartpole_pomdp.yaml`` on a tiny
budget): ``train --seeds 2``, ``eval``, ``render``, a bit-exact ``--resume`` and a
``devices: 2`` env split on two forced host devices, in subprocesses; and the trained run
exported with ``jaxrl.load_policy`` (the caller threads the carry and resets it at episode
starts), which reproduces the learner's sequence forward and ``jaxrl eval``'s returns."""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from PIL import Image

import jaxrl
from jaxrl.algos.ppo import acting
from jaxrl.core import prng
from jaxrl.run.checkpoint import to_storable
from jaxrl.run.evaluate import EVAL_SEED_OFFSET, evaluate_states, load_run

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIG = os.path.join(REPO, "configs", "ppo_rnn_cartpole_pomdp.yaml")
TINY = [
    "ppo.num_envs=4", "ppo.num_steps=16", "ppo.total_env_steps=1024", "ppo.num_minibatches=2",
    "ppo.hidden=[16]", "ppo.network.cell_size=8", "ppo.eval_episodes=4",
    "train.updates_per_chunk=4", "train.checkpoint_every=2", "train.progress=false",
]


def jaxrl_cli(cwd, *args, devices: int = 1) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    env["JAX_PLATFORMS"] = "cpu"
    if devices > 1:
        env["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={devices}"
    cmd = [sys.executable, "-m", "jaxrl.cli", *map(str, args)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=str(cwd), env=env)


def train(cwd, out, *sets, devices: int = 1) -> subprocess.CompletedProcess:
    args = ["train", CONFIG, "--out", out]
    for s in [*TINY, *sets]:
        args += ["--set", s]
    return jaxrl_cli(cwd, *args, devices=devices)


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


def test_resume_is_bit_exact(trained):
    run_dir, _ = trained
    cut = run_dir.parent / "resumed"
    shutil.copytree(run_dir, cut)
    shutil.rmtree(cut / "checkpoints" / "16")
    (cut / "eval.json").unlink()
    (cut / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in read_jsonl(cut / "metrics.jsonl")[:8]))
    proc = jaxrl_cli(run_dir.parent, "train", "--resume", cut)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "resuming at update 8" in proc.stdout
    _, _, straight, _ = load_run(str(run_dir))
    _, _, resumed, _ = load_run(str(cut))
    assert straight.memory is not None  # the carry is part of the checkpoint
    a, b = jax.tree_util.tree_leaves(to_storable(straight)), jax.tree_util.tree_leaves(to_storable(resumed))
    assert len(a) == len(b) > 0
    for x, y in zip(a, b):
        assert x.dtype == y.dtype and np.array_equal(np.asarray(x), np.asarray(y))
    strip = lambda recs: [{k: v for k, v in r.items() if k != "wall_time"} for r in recs]  # noqa: E731
    assert strip(read_jsonl(cut / "metrics.jsonl")) == strip(read_jsonl(run_dir / "metrics.jsonl"))


def test_env_split_over_two_devices(trained):
    """``devices: 2``: two envs per device; the first updates equal seed 0 of the
    one-device run up to float32 summation order."""
    run_dir, _ = trained
    proc = train(run_dir.parent, "split", "devices=2", "shard=envs", devices=2)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "envs per device: 2 of 4" in proc.stdout
    split = read_jsonl(run_dir.parent / "split" / "metrics.jsonl")
    single = read_jsonl(run_dir / "metrics.jsonl")
    for s, r in zip(split[:3], single[:3]):
        for key in ("loss", "value_loss", "entropy", "episode_return"):
            assert s[key] == pytest.approx(r[key][0], rel=1e-4, abs=1e-6), (key, s["update"])


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
