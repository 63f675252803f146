"""Two processes x two CPU devices train one PPO run together (jax.distributed over gloo).

Everything goes through the command line (``python -m jaxrl.cli train ... --coordinator-
address 127.0.0.1:PORT --num-processes 2 --process-id I``) with ``devices: all``, so the
layout comes from where the run is launched:

* reference: one process, 1 device;
* the same config on 2 processes x 2 devices = 4 devices: same metrics (float32 tolerance);
  only process 0 writes files and prints;
* interrupted after update 2 (later checkpoints removed) and resumed on 2 processes: bit for
  bit the uninterrupted 2-process run;
* interrupted the same way and resumed by one process on 1 device (another layout): the
  reference's numbers again (float32 tolerance).

All runs share a persistent compilation cache, so each program compiles once.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys

import numpy as np
import pytest

UPDATES = 6
SETTINGS = [
    "ppo.num_envs=8", "ppo.num_steps=16", f"ppo.total_env_steps={8 * 16 * UPDATES}", "ppo.update_epochs=2",
    "ppo.num_minibatches=2", "ppo.hidden=[16]", "ppo.eval_episodes=2", "train.updates_per_chunk=2",
    "train.checkpoint_every=1", "train.keep_checkpoints=3", "train.progress=false", "devices=all",
]
CONFIG = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "configs", "ppo_cartpole.yaml")
F32_TOL = 1e-5


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env(cache_dir: str, devices: int) -> dict:
    """A clean environment: CPU, ``devices`` forced devices, a shared compilation cache
    (each program is compiled by the first run that needs it; later runs load it)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("XLA_FLAGS", "JAXRL_", "SLURM_"))}
    env.update(
        JAX_PLATFORMS="cpu", XLA_FLAGS=f"--xla_force_host_platform_device_count={devices}",
        JAX_COMPILATION_CACHE_DIR=cache_dir, JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0",
    )
    return env


def _launch_two(extra: list[str], cache_dir: str, check: bool = True) -> list[subprocess.CompletedProcess]:
    """``jaxrl train <extra>`` as processes 0 and 1 of a 2-process run, 2 CPU devices each."""
    flags = ["--coordinator-address", f"127.0.0.1:{_free_port()}", "--num-processes", "2"]
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "jaxrl.cli", "train", *extra, *flags, "--process-id", str(i)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(cache_dir, 2),
        )
        for i in range(2)
    ]
    results = []
    for p in procs:
        try:
            out, err = p.communicate(timeout=400)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            raise
        results.append(subprocess.CompletedProcess(p.args, p.returncode, out, err))
    for r in results:
        assert r.returncode == 0 or not check, r.stderr[-4000:]
    return results


def _train_one(extra: list[str], cache_dir: str) -> None:
    """``jaxrl train <extra>`` as a single process with one device."""
    r = subprocess.run(
        [sys.executable, "-m", "jaxrl.cli", "train", *extra], capture_output=True, text=True,
        env=_env(cache_dir, 1), timeout=400,
    )
    assert r.returncode == 0, r.stderr[-4000:]


def _records(run_dir: str) -> list[dict]:
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f]


def _numbers(records: list[dict]) -> np.ndarray:
    keys = sorted(k for k in records[0] if k != "wall_time")
    return np.array([[float(r[k]) for k in keys] for r in records])


def _rel_diff(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.max(np.abs(a - b) / (1.0 + np.abs(b))))


def _interrupt_after(run_dir: str, copy_to: str, step: int) -> str:
    """A copy of ``run_dir`` as if the run had died right after checkpoint ``step``."""
    shutil.copytree(run_dir, copy_to)
    ckpt_dir = os.path.join(copy_to, "checkpoints")
    for name in os.listdir(ckpt_dir):
        if name.isdigit() and int(name) > step:
            shutil.rmtree(os.path.join(ckpt_dir, name))
    for name in ("eval.json", "learning_curve.png"):
        if os.path.exists(os.path.join(copy_to, name)):
            os.remove(os.path.join(copy_to, name))
    return copy_to


def _final_checkpoint(run_dir: str) -> dict:
    """The last checkpoint's arrays, by path (read with orbax, as the trainer does)."""
    import jax

    from jaxrl.run import config as config_lib, trainer
    from jaxrl.run.checkpoint import Checkpoints

    cfg = config_lib.load_config(os.path.join(run_dir, "config.yaml"))
    built = trainer.build(cfg)
    template = jax.eval_shape(jax.vmap(built.program.init), trainer.seed_keys(cfg.train.seed, cfg.train.seeds))
    with Checkpoints(os.path.join(run_dir, "checkpoints")) as ckpts:
        state = ckpts.restore(template, UPDATES)
    state = jax.tree_util.tree_map(lambda x: jax.random.key_data(x) if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key) else x, state)
    return {jax.tree_util.keystr(p): np.asarray(x) for p, x in jax.tree_util.tree_leaves_with_path(state)}


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("multiprocess")
    base = [CONFIG, *sum((["--set", s] for s in SETTINGS), [])]
    ref, mp, cache = str(root / "ref"), str(root / "mp"), str(root / "jax_cache")
    _train_one([*base, "--out", ref], cache)
    procs = _launch_two([*base, "--out", mp], cache)
    mp_resumed = _interrupt_after(mp, str(root / "mp_resumed"), 2)
    _launch_two(["--resume", mp_resumed], cache)
    here_resumed = _interrupt_after(mp, str(root / "here_resumed"), 2)
    _train_one(["--resume", here_resumed], cache)
    return {"ref": ref, "mp": mp, "mp_resumed": mp_resumed, "here_resumed": here_resumed, "procs": procs}


def test_two_processes_match_single_device(runs):
    ref, mp = _records(runs["ref"]), _records(runs["mp"])
    assert [r["update"] for r in mp] == list(range(1, UPDATES + 1))  # one writer: no duplicate lines
    assert _rel_diff(_numbers(mp), _numbers(ref)) < F32_TOL
    final_mp, final_ref = _final_checkpoint(runs["mp"]), _final_checkpoint(runs["ref"])
    assert final_mp.keys() == final_ref.keys()
    for k in final_ref:
        np.testing.assert_allclose(final_mp[k], final_ref[k], rtol=F32_TOL, atol=F32_TOL, err_msg=k)


def test_only_process_zero_writes_and_prints(runs):
    out0, out1 = runs["procs"][0].stdout, runs["procs"][1].stdout
    assert "devices: 4 x cpu:cpu" in out0 and "processes: 2 (this is 0)" in out0
    assert "envs per device: 2 of 8" in out0 and "eval deterministic return" in out0
    assert "jaxrl:" not in out1.replace("jaxrl: done", "") and "eval" not in out1
    assert sorted(os.listdir(os.path.join(runs["mp"], "checkpoints"))) == ["2", "4", "6"]
    assert os.path.exists(os.path.join(runs["mp"], "eval.json"))
    with open(os.path.join(runs["mp"], "config.yaml")) as f:
        assert "devices: all" in f.read()


def test_resume_on_two_processes_is_bit_for_bit(runs):
    full, resumed = _records(runs["mp"]), _records(runs["mp_resumed"])
    assert [r["update"] for r in resumed] == list(range(1, UPDATES + 1))
    np.testing.assert_array_equal(_numbers(resumed), _numbers(full))
    a, b = _final_checkpoint(runs["mp_resumed"]), _final_checkpoint(runs["mp"])
    for k in b:
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)


def test_resume_on_another_layout(runs):
    # checkpoint written by 2 processes x 2 devices, resumed here on 1 device
    ref, resumed = _records(runs["ref"]), _records(runs["here_resumed"])
    assert [r["update"] for r in resumed] == list(range(1, UPDATES + 1))
    assert _rel_diff(_numbers(resumed), _numbers(ref)) < F32_TOL


def test_two_processes_need_a_shared_out_dir(tmp_path):
    # without --out each process would pick its own time-stamped directory
    results = _launch_two([CONFIG, "--set", "devices=all"], str(tmp_path / "cache"), check=False)
    for r in results:
        assert r.returncode == 2
        assert "multi-process run needs --out DIR" in r.stderr
