"""Recurrent PPO through the real CLI (``configs/ppo_rnn_cartpole_pomdp.yaml`` on a tiny
budget): ``train --seeds 2``, ``eval``, ``render``, a bit-exact ``--resume`` and a
``devices: 2`` env split on two forced host devices, in subprocesses."""

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
