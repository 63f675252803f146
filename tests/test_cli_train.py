"""`jaxrl train / eval / render` end to end on a tiny PPO budget (train in a subprocess
through the console entry point; eval and render in-process on its run directory), and
the non-finite stop's message and exit code."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
import yaml
from PIL import Image

from jaxrl import cli
from test_trainer import fake_algo  # noqa: F401 (fixture)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY = [
    "ppo.total_env_steps=1024",
    "ppo.num_envs=4",
    "ppo.num_steps=32",
    "ppo.eval_episodes=4",
    "ppo.hidden=[16]",
    "train.updates_per_chunk=4",
    "train.checkpoint_every=1",
    "train.progress=false",
]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("cli") / "run"
    exe = shutil.which("jaxrl") or os.path.join(os.path.dirname(sys.executable), "jaxrl")
    cmd = [exe, "train", os.path.join(REPO, "configs", "ppo_cartpole.yaml"), "--out", str(run_dir)]
    for s in TINY:
        cmd += ["--set", s]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=str(run_dir.parent))
    return run_dir, proc


def test_train_subprocess_writes_the_run_directory(trained):
    run_dir, proc = trained
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    assert "8 updates x 128 env steps = 1,024 env steps; 128 gradient steps (16 per update)" in out
    assert "eval deterministic" in out and "eval stochastic" in out and "95% CI" in out
    assert sorted(os.listdir(run_dir)) == [".lock", "checkpoints", "config.yaml", "eval.json", "learning_curve.png", "metrics.jsonl"]
    assert sorted(os.listdir(run_dir / "checkpoints"), key=int) == ["4", "8"]
    cfg = yaml.safe_load((run_dir / "config.yaml").read_text())
    assert cfg["ppo"]["hidden"] == [16] and cfg["ppo"]["num_envs"] == 4  # the overrides were resolved
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["env_steps"] for line in lines] == [128 * u for u in range(1, 9)]


def test_eval_and_render_the_trained_run(trained, capsys):
    run_dir, proc = trained
    assert proc.returncode == 0
    assert cli.main(["eval", str(run_dir), "--episodes", "3"]) == 0
    out = capsys.readouterr().out
    assert "eval deterministic" in out and "over 3 episodes" in out
    summary = json.loads((run_dir / "eval.json").read_text())
    det = summary["policies"]["deterministic"]
    assert det["episodes"] == 3 and det["ci95_low"] <= det["mean"] <= det["ci95_high"]
    assert summary["checkpoint_update"] == 8
    assert 1 <= det["mean"] <= 500  # CartPole returns are episode lengths

    gif = run_dir / "policy.gif"
    assert cli.main(["render", str(run_dir), "--out", str(gif), "--steps", "30"]) == 0
    with Image.open(gif) as im:
        assert im.size == (600, 400)
        assert 2 <= im.n_frames <= 31
        im.seek(im.n_frames - 1)
        assert np.asarray(im.convert("RGB")).std() > 0  # a drawn frame, not a blank one


def test_eval_of_a_non_run_is_a_clean_error(tmp_path, capsys):
    assert cli.main(["eval", str(tmp_path)]) == 2
    assert "is not a run directory" in capsys.readouterr().err


def test_non_finite_stop_exit_code_and_message(fake_algo, tmp_path, capsys):  # noqa: F811
    path = tmp_path / "nan.yaml"
    raw = {
        "algo": "fake",
        "env": {"id": "CartPole-v1"},
        "fake": {"num_updates": 6, "nan_at": 3},
        "train": {"updates_per_chunk": 2, "checkpoint_every": 1, "progress": False},
    }
    path.write_text(yaml.safe_dump(raw))
    run_dir = tmp_path / "run"
    assert cli.main(["train", str(path), "--out", str(run_dir)]) == 1
    err = capsys.readouterr().err.strip()
    ckpt = os.path.join(str(run_dir), "checkpoints", "2")
    assert err == f"jaxrl: non-finite loss at update 4 (seed 0); last good checkpoint kept at {ckpt} (update 2)"
    # Resuming from the last good checkpoint replays updates 3-4 exactly: the same NaN.
    assert cli.main(["train", "--resume", str(run_dir)]) == 1
    assert capsys.readouterr().err.strip() == err
    assert cli.main(["train", "--resume", str(run_dir), "--set", "fake.lr=0.1"]) == 2
    assert "--set/--seeds need a CONFIG" in capsys.readouterr().err
