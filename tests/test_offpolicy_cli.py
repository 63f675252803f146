"""DQN, PQN and SAC through the real CLI on tiny budgets of their recipes: ``jaxrl train``
with two vmapped seeds, ``eval`` and ``render`` of the run, a bit-exact ``--resume`` (the
replay buffer included), and ``devices: 2`` (envs split over two forced host devices) giving
the one-device run's updates. Each runs in a subprocess, as a user would."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import jax
import numpy as np
import pytest
from PIL import Image

from jaxrl.run.checkpoint import to_storable
from jaxrl.run.evaluate import load_run

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

#: Per algorithm: recipe, tiny overrides (8 updates, chunks of 2, a checkpoint per chunk),
#: the metrics compared across device counts.
CASES = {
    "dqn": ("dqn_cartpole.yaml", [
        "dqn.num_envs=4", "dqn.steps_per_update=4", "dqn.total_env_steps=128", "dqn.gradient_steps=2",
        "dqn.batch_size=16", "dqn.buffer_size=64", "dqn.learning_starts=32", "dqn.n_step=2", "dqn.hidden=[16]",
        "dqn.eval_episodes=2", "dqn.eval_max_steps=50",
    ], ("loss", "q_mean", "grad_norm")),
    "pqn": ("pqn_cartpole.yaml", [
        "pqn.num_envs=4", "pqn.num_steps=8", "pqn.total_env_steps=256", "pqn.update_epochs=2",
        "pqn.num_minibatches=2", "pqn.hidden=[16]", "pqn.eval_episodes=2", "pqn.eval_max_steps=50",
    ], ("loss", "q_mean", "grad_norm")),
    "sac": ("sac_pendulum.yaml", [
        "sac.num_envs=2", "sac.steps_per_update=2", "sac.total_env_steps=32", "sac.batch_size=8",
        "sac.buffer_size=32", "sac.learning_starts=8", "sac.hidden=[16]", "sac.eval_episodes=2",
        "sac.eval_max_steps=20",
    ], ("critic_loss", "actor_loss", "alpha")),
}
COMMON = ["train.updates_per_chunk=2", "train.checkpoint_every=1", "train.keep_checkpoints=10", "train.progress=false"]


def jaxrl_cli(cwd, *args, devices: int = 1) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    env["JAX_PLATFORMS"] = "cpu"
    if devices > 1:
        env["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={devices}"
    cmd = [sys.executable, "-m", "jaxrl.cli", *map(str, args)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=str(cwd), env=env)


def train(cwd, algo: str, out: str, *extra: str, devices: int = 1) -> subprocess.CompletedProcess:
    recipe, sets, _ = CASES[algo]
    args = ["train", os.path.join(REPO, "configs", recipe), "--out", out]
    for s in [*sets, *COMMON, *extra]:
        args += ["--set", s]
    return jaxrl_cli(cwd, *args, devices=devices)


def read_jsonl(path) -> list[dict]:
    return [json.loads(line) for line in open(path) if line.strip()]


@pytest.fixture(scope="module", params=sorted(CASES))
def trained(request, tmp_path_factory):
    """Two vmapped seeds of one algorithm, per-seed metrics."""
    root = tmp_path_factory.mktemp(request.param)
    proc = train(root, request.param, "run", "train.seeds=2", "train.log_seeds=per_seed")
    assert proc.returncode == 0, proc.stderr[-3000:]
    return request.param, root / "run", proc


def test_train_with_two_seeds_eval_and_render(trained):
    algo, run_dir, proc = trained
    assert "8 updates x" in proc.stdout and "x 2 seeds" in proc.stdout
    assert sorted(os.listdir(run_dir / "checkpoints"), key=int) == ["2", "4", "6", "8"]
    records = read_jsonl(run_dir / "metrics.jsonl")
    assert [r["update"] for r in records] == list(range(1, 9))
    key = CASES[algo][2][0]
    assert records[-1][key][0] != records[-1][key][1]  # two distinct seeds
    proc = jaxrl_cli(run_dir.parent, "eval", run_dir, "--episodes", "3")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "over 6 episodes" in proc.stdout  # 2 seeds x 3
    gif = run_dir / "policy.gif"
    proc = jaxrl_cli(run_dir.parent, "render", run_dir, "--out", gif, "--steps", "10")
    assert proc.returncode == 0, proc.stderr[-3000:]
    with Image.open(gif) as im:
        assert im.n_frames >= 2 and np.asarray(im.convert("RGB")).std() > 0


def test_resume_is_bit_exact_with_the_replay_buffer(trained):
    """Cut after update 4's checkpoint and resumed: every leaf of the final state (the replay
    buffer's transitions and write position among them) equals the straight run's."""
    algo, run_dir, _ = trained
    cut = run_dir.parent / "resumed"
    shutil.copytree(run_dir, cut)
    for step in ("6", "8"):
        shutil.rmtree(cut / "checkpoints" / step)
    (cut / "eval.json").unlink()
    (cut / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in read_jsonl(cut / "metrics.jsonl")[:4]))
    proc = jaxrl_cli(run_dir.parent, "train", "--resume", cut)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "resuming at update 4" in proc.stdout
    _, _, straight, _ = load_run(str(run_dir))
    _, _, resumed, _ = load_run(str(cut))
    if algo != "pqn":
        assert int(np.asarray(straight.buffer.size)[0]) > 0  # the buffer is part of the state
    a, b = jax.tree_util.tree_leaves(to_storable(straight)), jax.tree_util.tree_leaves(to_storable(resumed))
    assert len(a) == len(b) > 0
    for x, y in zip(a, b):
        assert x.dtype == y.dtype and np.array_equal(np.asarray(x), np.asarray(y))


def test_env_split_over_two_devices(trained):
    """``devices: 2``: each device steps half the envs and holds half the buffer's columns;
    the updates equal the one-device run's (seed 0) up to float32 summation order."""
    algo, run_dir, _ = trained
    proc = train(run_dir.parent, algo, "split", "devices=2", "shard=envs", devices=2)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "envs per device:" in proc.stdout
    split = read_jsonl(run_dir.parent / "split" / "metrics.jsonl")
    single = read_jsonl(run_dir / "metrics.jsonl")
    for s, r in zip(split, single):
        for key in CASES[algo][2]:
            assert s[key] == pytest.approx(r[key][0], rel=2e-3, abs=1e-5), (key, s["update"])
