"""Exact resume: 2N updates straight equal N updates, checkpoint, restore, N more -- bit for
bit (params, optimiser state, keys, metrics), through the host loop (interrupted run,
``resume=``) and for real PPO at the chunk level."""

from __future__ import annotations

import functools

import jax
import numpy as np
import pytest

from jaxrl.run import config as C
from jaxrl.run import trainer
from jaxrl.run.checkpoint import Checkpoints
from test_trainer import FakeConfig, fake_algo, fake_config, leaves_equal, read_jsonl, without_wall_time  # noqa: F401 (fixture)


class SimulatedKill(BaseException):
    """A crash nothing in the trainer handles (kill -9), unlike Ctrl-C, which checkpoints."""


def test_interrupted_run_resumes_bit_for_bit(fake_algo, tmp_path):
    cfg = fake_config(FakeConfig(num_updates=7), updates_per_chunk=3, checkpoint_every=1)
    straight = trainer.run(cfg, run_dir=str(tmp_path / "straight"), evaluate=False)

    # Crash on the second periodic save, *after* chunk 2 was logged: the checkpoint is at
    # update 3 and metrics.jsonl already holds updates 4-6, which the resume must redo.
    real_save, calls = Checkpoints.save, []

    def crashing_save(self, step, state):
        calls.append(step)
        if len(calls) == 2:
            raise SimulatedKill
        return real_save(self, step, state)

    run_dir = tmp_path / "resumed"
    with pytest.MonkeyPatch.context() as mp, pytest.raises(SimulatedKill):
        mp.setattr(Checkpoints, "save", crashing_save)
        trainer.run(cfg, run_dir=str(run_dir), evaluate=False)
    assert calls == [3, 6]
    assert len(read_jsonl(run_dir / "metrics.jsonl")) == 6

    resumed = trainer.run(None, resume=str(run_dir), evaluate=False)
    assert resumed.updates == 7
    assert leaves_equal(resumed.state, straight.state)
    straight_log = without_wall_time(read_jsonl(tmp_path / "straight" / "metrics.jsonl"))
    assert without_wall_time(read_jsonl(run_dir / "metrics.jsonl")) == straight_log


def test_resume_rejects_a_different_config(fake_algo, tmp_path):
    cfg = fake_config(FakeConfig(num_updates=2), updates_per_chunk=2)
    trainer.run(cfg, run_dir=str(tmp_path / "r"), evaluate=False)
    other = C.with_overrides(cfg, ["fake.lr=0.1"])
    with pytest.raises(C.ConfigError, match="differs from the run's config.yaml"):
        trainer.run(other, resume=str(tmp_path / "r"))
    with pytest.raises(C.ConfigError, match="not a run directory"):
        trainer.run(None, resume=str(tmp_path / "nothing"))
    # A new run never overwrites an old one (its metrics and checkpoints stay).
    with pytest.raises(C.ConfigError, match=r"already holds a run; continue it with --resume .*/r or choose another --out"):
        trainer.run(cfg, run_dir=str(tmp_path / "r"))
    assert len(read_jsonl(tmp_path / "r" / "metrics.jsonl")) == 2


@pytest.fixture(scope="module")
def ppo_chunk():
    """A tiny PPO (2 seeds) and its chunk of K = 4 updates, compiled once for the module."""
    raw = {
        "algo": "ppo",
        "env": {"id": "CartPole-v1"},
        "ppo": {"num_envs": 4, "num_steps": 16, "total_env_steps": 512, "num_minibatches": 2, "update_epochs": 2,
                "hidden": [16], "normalize_obs": True, "normalize_reward": True},
        "train": {"seeds": 2},
    }
    cfg = C.config_from_dict(raw)
    built = trainer.build(cfg)
    keys = trainer.seed_keys(0, 2)
    init = jax.jit(jax.vmap(built.program.init))
    return init, keys, trainer.make_chunk(built.program.update, 4)


def test_ppo_resume_and_chunk_boundaries_are_exact(ppo_chunk, tmp_path):
    init, keys, chunk = ppo_chunk
    n = {i: jax.device_put(np.int32(i)) for i in (2, 4)}
    # Straight: 4 updates in one call.
    straight, m_straight, _ = chunk(init(keys), n[4])
    # Split: 2 updates, checkpoint, restore into a fresh template, 2 more.
    half, m1, _ = chunk(init(keys), n[2])
    with Checkpoints(tmp_path / "ck") as ckpts:
        ckpts.save(2, half)
        restored = ckpts.restore(jax.eval_shape(init, keys))
    resumed, m2, _ = chunk(restored, n[2])
    assert leaves_equal(resumed, straight)  # params, optimiser, normalisers, env states, keys
    for name, values in m_straight.items():
        joined = np.concatenate([np.asarray(m1[name])[:, :2], np.asarray(m2[name])[:, :2]], axis=1)
        np.testing.assert_array_equal(joined, np.asarray(values), err_msg=name)
    assert int(resumed.update_step[0]) == 4
