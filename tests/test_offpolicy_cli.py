"""DQN, PQN and SAC through the real CLI on tiny budgets of their recipes: ``jaxrl train``
with two vmapped seeds, then ``eval`` and ``render`` of the run, in subprocesses as a user
would. A bit-exact resume (the replay buffer included) and the env split over two devices
are checked for every algorithm by tests/test_algo_conformance.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from fast_compile import subprocess_env
from PIL import Image


REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

#: Per algorithm: recipe, tiny overrides (8 updates, chunks of 2, a checkpoint per chunk),
#: the metrics whose seeds must differ (the first).
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


def jaxrl_cli(cwd, *args) -> subprocess.CompletedProcess:
    env = subprocess_env()  # XLA at -O0 (tests/fast_compile.py) but for the trainer's own programs
    cmd = [sys.executable, "-m", "jaxrl.cli", *map(str, args)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=str(cwd), env=env)


def train(cwd, algo: str, out: str, *extra: str) -> subprocess.CompletedProcess:
    recipe, sets, _ = CASES[algo]
    args = ["train", os.path.join(REPO, "configs", recipe), "--out", out]
    for s in [*sets, *COMMON, *extra]:
        args += ["--set", s]
    return jaxrl_cli(cwd, *args)


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
