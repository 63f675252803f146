"""Run safety, by fault injection: one writer per run, read-only readers, verified
checkpoints with fallback, honest resume, bounded YAML, and one line (with a documented
exit code) for every failure.

Most runs use the tiny ``fake`` algorithm of ``test_trainer`` (compiles in about a
second); one small PPO CartPole run, trained once for the module, serves the eval tests.
"""

from __future__ import annotations

import errno
import glob
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

import jax
import pytest
import yaml

from jaxrl import cli
from jaxrl.run import checkpoint as ckpt_lib
from jaxrl.run import logging as log_lib
from jaxrl.run import rundir, trainer, yamlio
from jaxrl.run.checkpoint import Checkpoints
from test_trainer import FAKE, leaves_equal, read_jsonl, without_wall_time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CARTPOLE = os.path.join(REPO, "configs", "ppo_cartpole.yaml")
TINY_PPO = [
    "ppo.total_env_steps=512", "ppo.num_envs=4", "ppo.num_steps=32", "ppo.eval_episodes=2", "ppo.hidden=[8]",
    "ppo.update_epochs=1", "ppo.num_minibatches=1", "train.updates_per_chunk=2", "train.checkpoint_every=1",
    "train.progress=false",
]


def _sets(items) -> list[str]:
    return [arg for s in items for arg in ("--set", s)]


def _one_line(err: str) -> str:
    lines = [line for line in err.strip().splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


@pytest.fixture(scope="module")
def fake_table():
    from jaxrl.algos import registry as algo_registry

    algo_registry.register_algorithm(FAKE, overwrite=True)
    yield
    algo_registry.deregister_algorithm("fake")


def fake_raw(num_updates: int = 7, **train) -> dict:
    """7 updates in chunks of 3 (3 + 3 + 1), a checkpoint every chunk: checkpoints 3, 6, 7."""
    return {
        "algo": "fake",
        "env": {"id": "CartPole-v1"},
        "fake": {"num_updates": num_updates},
        "train": {"updates_per_chunk": 3, "checkpoint_every": 1, "keep_checkpoints": 3, "progress": False, **train},
    }


def write_yaml(path, raw) -> str:
    path.write_text(raw if isinstance(raw, str) else yaml.safe_dump(raw))
    return str(path)


@pytest.fixture(scope="module")
def straight(fake_table, tmp_path_factory):
    """The uninterrupted fake run: ``(run_dir, RunResult)``."""
    from jaxrl.run import config as C

    run_dir = tmp_path_factory.mktemp("straight") / "run"
    return run_dir, trainer.run(C.config_from_dict(fake_raw()), run_dir=str(run_dir), evaluate=False)


@pytest.fixture(scope="module")
def ppo_run(tmp_path_factory):
    """A small PPO CartPole run trained in-process: checkpoints 2, 4 (4 updates)."""
    run_dir = tmp_path_factory.mktemp("ppo") / "run"
    code = cli.main(["train", CARTPOLE, "--out", str(run_dir), *_sets(TINY_PPO)])
    assert code == 0
    return run_dir


def copy_run(src, tmp_path) -> str:
    dst = tmp_path / "copy"
    shutil.copytree(src, dst)
    return str(dst)


# ------------------------------------------------------------------------------------------
# One writer, read-only readers, no links followed
# ------------------------------------------------------------------------------------------

_HOLD_LOCK = """
import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT)
fcntl.flock(fd, fcntl.LOCK_EX)
os.write(fd, b"pid %d on testhost" % os.getpid())
print("locked", flush=True)
time.sleep(60)
"""


def test_a_second_writer_is_refused_naming_the_holder(fake_table, tmp_path, capsys):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    holder = subprocess.Popen([sys.executable, "-c", _HOLD_LOCK, str(run_dir / ".lock")], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        code = cli.main(["train", write_yaml(tmp_path / "c.yaml", fake_raw()), "--out", str(run_dir)])
        line = _one_line(capsys.readouterr().err)
        assert code == 2
        assert f"is being written by pid {holder.pid} on testhost" in line and "choose another --out" in line
        assert os.listdir(run_dir) == [".lock"]  # nothing of the refused run was written
    finally:
        holder.kill()
        holder.wait()
    # The kernel released the lock with its holder: the same command now runs.
    assert cli.main(["train", str(tmp_path / "c.yaml"), "--out", str(run_dir)]) == 0
    assert open(run_dir / ".lock").read().startswith(f"pid {os.getpid()} on ")


def test_eval_reads_checkpoints_read_only_next_to_an_unfinished_save(ppo_run, tmp_path, capsys):
    run_dir = copy_run(ppo_run, tmp_path)
    ckpt_dir = os.path.join(run_dir, "checkpoints")
    in_flight = os.path.join(ckpt_dir, "6.orbax-checkpoint-tmp-1234567")  # a training run's save in progress
    os.makedirs(os.path.join(in_flight, "default"))
    open(os.path.join(in_flight, "default", "partial"), "wb").write(b"half")
    before = sorted(os.listdir(ckpt_dir))
    assert cli.main(["eval", run_dir]) == 0
    assert json.loads(open(os.path.join(run_dir, "eval.json")).read())["checkpoint_update"] == 4
    assert sorted(os.listdir(ckpt_dir)) == before  # nothing created, cleaned up or deleted
    assert open(os.path.join(in_flight, "default", "partial"), "rb").read() == b"half"
    assert "eval deterministic" in capsys.readouterr().out


def test_a_symlinked_eval_json_is_refused(ppo_run, tmp_path, capsys):
    run_dir = copy_run(ppo_run, tmp_path)
    outside = tmp_path / "outside.json"
    outside.write_text("precious")
    os.remove(os.path.join(run_dir, "eval.json"))
    os.symlink(outside, os.path.join(run_dir, "eval.json"))
    assert cli.main(["eval", run_dir]) == 2
    line = _one_line(capsys.readouterr().err)
    assert "eval.json" in line and "is a symbolic link; refusing to write through it" in line
    assert outside.read_text() == "precious"


def test_a_fresh_run_never_overwrites_the_users_files(fake_table, tmp_path, capsys):
    config = write_yaml(tmp_path / "c.yaml", fake_raw())
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "eval.json").write_text("my results")
    (mine / "notes.txt").write_text("kept")
    assert cli.main(["train", config, "--out", str(mine)]) == 2
    assert "already holds eval.json, which a new run would overwrite" in _one_line(capsys.readouterr().err)
    assert (mine / "eval.json").read_text() == "my results" and sorted(os.listdir(mine)) == ["eval.json", "notes.txt"]
    # A folder holding none of the run's files is fine (the user's files stay).
    os.remove(mine / "eval.json")
    assert cli.main(["train", config, "--out", str(mine)]) == 0
    assert (mine / "notes.txt").read_text() == "kept" and (mine / "metrics.jsonl").exists()
    # --out naming a file, or a path under a file.
    a_file = tmp_path / "file"
    a_file.write_text("x")
    assert cli.main(["train", config, "--out", str(a_file)]) == 2
    assert "is a file, not a directory" in _one_line(capsys.readouterr().err)
    assert cli.main(["train", config, "--out", str(a_file / "sub")]) == 3
    assert _one_line(capsys.readouterr().err).startswith("jaxrl: I/O error: Not a directory")


# ------------------------------------------------------------------------------------------
# Honest resume
# ------------------------------------------------------------------------------------------


class SimulatedKill(BaseException):
    """kill -9 mid-run: nothing in the trainer handles it."""


def killed_run(tmp_path, at_save: int = 2, **train) -> str:
    """A fake run killed during its ``at_save``-th checkpoint save (checkpoint 3 kept,
    metrics of updates 1-6 written)."""
    from jaxrl.run import config as C

    real_save, calls = Checkpoints.save, []

    def crashing_save(self, step, state):
        calls.append(step)
        if len(calls) == at_save:
            raise SimulatedKill
        return real_save(self, step, state)

    run_dir = tmp_path / "killed"
    with pytest.MonkeyPatch.context() as mp, pytest.raises(SimulatedKill):
        mp.setattr(Checkpoints, "save", crashing_save)
        trainer.run(C.config_from_dict(fake_raw(**train)), run_dir=str(run_dir), evaluate=False)
    return str(run_dir)


def test_torn_or_missing_metrics_are_repaired_on_resume(straight, tmp_path, capsys):
    straight_dir, straight_result = straight
    run_dir = killed_run(tmp_path)
    metrics = os.path.join(run_dir, "metrics.jsonl")
    with open(metrics, "ab") as f:
        f.write(b'{"update": 7, "env_st')  # the disk filled up mid-line
    with pytest.raises(json.JSONDecodeError):
        read_jsonl(metrics)  # the control: the file really is torn
    resumed = trainer.run(None, resume=run_dir, evaluate=False)
    err = capsys.readouterr().err
    assert "jaxrl: warning: metrics.jsonl: dropped a torn last line" in err and "Traceback" not in err
    assert leaves_equal(resumed.state, straight_result.state)
    assert without_wall_time(read_jsonl(metrics)) == without_wall_time(read_jsonl(straight_dir / "metrics.jsonl"))

    run_dir = killed_run(tmp_path / "b")
    os.remove(os.path.join(run_dir, "metrics.jsonl"))
    resumed = trainer.run(None, resume=run_dir, evaluate=False)
    err = capsys.readouterr().err
    assert "metrics.jsonl is missing: the records of updates 1-3 are lost" in err
    assert leaves_equal(resumed.state, straight_result.state)
    assert [r["update"] for r in read_jsonl(os.path.join(run_dir, "metrics.jsonl"))] == [4, 5, 6, 7]


def test_resume_without_a_checkpoint_warns_and_keeps_the_old_metrics(straight, tmp_path, capsys):
    straight_dir, straight_result = straight
    run_dir = copy_run(straight_dir, tmp_path)
    shutil.rmtree(os.path.join(run_dir, "checkpoints"))
    old = read_jsonl(os.path.join(run_dir, "metrics.jsonl"))
    resumed = trainer.run(None, resume=run_dir, evaluate=False)
    line = _one_line(capsys.readouterr().err)
    assert "has no checkpoint to resume from: starting at update 0" in line
    assert "kept as metrics.set-aside-1.jsonl" in line
    assert read_jsonl(os.path.join(run_dir, "metrics.set-aside-1.jsonl")) == old  # nothing lost
    assert leaves_equal(resumed.state, straight_result.state)  # the same seed from scratch


def test_config_drift_is_refused_with_a_diff_then_accepted_and_recorded(fake_table, tmp_path, capsys):
    run_dir = killed_run(tmp_path)
    path = os.path.join(run_dir, "config.yaml")
    raw = yaml.safe_load(open(path).read())
    raw["fake"]["lr"] = 0.01
    raw["fake"]["num_updates"] = 9
    raw["train"]["progress"] = True  # operational: never needs the flag
    open(path, "w").write(yaml.safe_dump(raw))
    metrics_before = open(os.path.join(run_dir, "metrics.jsonl")).read()

    assert cli.main(["train", "--resume", run_dir]) == 2
    line = _one_line(capsys.readouterr().err)
    assert "config.yaml differs from the config checkpoint 3 was trained with: fake.lr: 0.05 -> 0.01, fake.num_updates: 7 -> 9;" in line
    assert "--accept-config-change" in line and "progress" not in line
    assert open(os.path.join(run_dir, "metrics.jsonl")).read() == metrics_before  # nothing touched
    assert not os.path.exists(os.path.join(run_dir, "config_changes.jsonl"))

    assert cli.main(["train", "--resume", run_dir, "--accept-config-change"]) == 0
    out = capsys.readouterr().out
    assert "config changed at update 3 (accepted, recorded in config_changes.jsonl): fake.lr: 0.05 -> 0.01" in out
    (change,) = read_jsonl(os.path.join(run_dir, "config_changes.jsonl"))
    assert change["update"] == 3 and change["changes"] == {"fake.lr": [0.05, 0.01], "fake.num_updates": [7, 9]}
    assert [r["update"] for r in read_jsonl(os.path.join(run_dir, "metrics.jsonl"))] == list(range(1, 10))
    # The new checkpoints record the new config: resuming again needs no flag.
    with Checkpoints(os.path.join(run_dir, "checkpoints"), read_only=True) as ckpts:
        assert ckpts.record(9)["meta"]["config"]["fake"]["lr"] == 0.01


# ------------------------------------------------------------------------------------------
# Verified checkpoints with fallback
# ------------------------------------------------------------------------------------------


def _data_file(step_dir: str) -> str:
    files = glob.glob(os.path.join(step_dir, "default", "**", "d", "*"), recursive=True)
    return max(files, key=os.path.getsize)


def _flip_a_bit(step_dir):
    path = _data_file(step_dir)
    data = bytearray(open(path, "rb").read())
    data[len(data) // 2] ^= 0x01
    open(path, "wb").write(bytes(data))


def _zero_64_bytes(step_dir):
    path = _data_file(step_dir)
    data = bytearray(open(path, "rb").read())
    data[-80:-16] = bytes(64)
    open(path, "wb").write(bytes(data))


def _truncate(step_dir):
    path = _data_file(step_dir)
    os.truncate(path, os.path.getsize(path) // 2)


def _delete_manifest(step_dir):
    os.remove(os.path.join(step_dir, "default", "manifest.ocdbt"))


def _garble_metadata(step_dir):
    path = os.path.join(step_dir, "default", "_METADATA")
    size = os.path.getsize(path)
    open(path, "wb").write(b"{" + b"\x00" * (size - 1))  # same size, not JSON


def _delete_record(step_dir):  # killed after orbax committed, before the record was written
    os.remove(os.path.join(step_dir, ckpt_lib.RECORD_FILE))


DAMAGE = {
    "flip_a_bit": (_flip_a_bit, "changed on disk (sha256 mismatch)"),
    "zero_64_bytes": (_zero_64_bytes, "changed on disk (sha256 mismatch)"),
    "truncate": (_truncate, "bytes, "),
    "delete_manifest": (_delete_manifest, "file default/manifest.ocdbt is missing"),
    "garble_metadata": (_garble_metadata, "file default/_METADATA changed on disk"),
    "delete_record": (_delete_record, "no jaxrl_checkpoint.json (an unfinished save)"),
}


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_a_damaged_checkpoint_falls_back_and_resumes_bit_for_bit(straight, tmp_path, capsys, damage):
    straight_dir, straight_result = straight
    run_dir = copy_run(straight_dir, tmp_path)
    ckpt_dir = os.path.join(run_dir, "checkpoints")
    assert Checkpoints(ckpt_dir, read_only=True).steps() == [3, 6, 7]
    corrupt, reason = DAMAGE[damage]
    corrupt(os.path.join(ckpt_dir, "7"))

    resumed = trainer.run(None, resume=run_dir, evaluate=False)
    warning = _one_line(capsys.readouterr().err)
    assert warning.startswith(f"jaxrl: warning: damaged checkpoint(s) in {ckpt_dir} skipped (checkpoint 7: ")
    assert reason in warning and warning.endswith("restored checkpoint 6 instead")
    assert resumed.updates == 7
    assert leaves_equal(resumed.state, straight_result.state)  # redone from 6: the same bits
    with Checkpoints(ckpt_dir, read_only=True) as ckpts:
        assert ckpts.verified_step() == 7  # the damaged step was replaced by a verified one
    assert without_wall_time(read_jsonl(os.path.join(run_dir, "metrics.jsonl"))) == without_wall_time(
        read_jsonl(straight_dir / "metrics.jsonl")
    )


def test_damage_in_every_checkpoint_is_one_line_and_eval_falls_back(straight, tmp_path, capsys):
    straight_dir, _ = straight
    run_dir = copy_run(straight_dir, tmp_path)
    ckpt_dir = os.path.join(run_dir, "checkpoints")
    _flip_a_bit(os.path.join(ckpt_dir, "7"))
    assert cli.main(["eval", run_dir, "--episodes", "2"]) == 0  # read-only: falls back, deletes nothing
    assert "restored checkpoint 6 instead" in capsys.readouterr().err
    assert json.loads(open(os.path.join(run_dir, "eval.json")).read())["checkpoint_update"] == 6
    assert Checkpoints(ckpt_dir, read_only=True).steps() == [3, 6, 7]
    for step in (3, 6):
        _truncate(os.path.join(ckpt_dir, str(step)))
    assert cli.main(["train", "--resume", run_dir]) == 1
    line = _one_line(capsys.readouterr().err)
    assert line.startswith(f"jaxrl: checkpoint error: no intact checkpoint in {ckpt_dir}: 7: file ")


def test_save_record_digest_matches_the_restored_arrays(straight):
    straight_dir, result = straight
    with Checkpoints(os.path.join(straight_dir, "checkpoints"), read_only=True) as ckpts:
        template = jax.eval_shape(lambda: result.state)
        restored = ckpts.restore_verified(template)
        assert restored.step == 7 and leaves_equal(restored.state, result.state)
        digest, leaves = ckpt_lib.content_digest(ckpt_lib.to_storable(result.state))
        assert restored.record["sha256"] == digest and restored.record["leaves"] == leaves
        other = ckpt_lib.content_digest(ckpt_lib.to_storable(result.state.replace(w=result.state.w + 1e-7)))[0]
        assert other != digest  # the control: one changed value changes the digest
        with pytest.raises(ckpt_lib.CheckpointError, match="is opened read-only; cannot save"):
            ckpts.save(8, result.state)


# ------------------------------------------------------------------------------------------
# Ctrl-C and full disks
# ------------------------------------------------------------------------------------------


def _interrupt_on_first_update(monkeypatch, how):
    real = log_lib.Progress.update
    calls = []

    def update(self, *args, **kwargs):
        real(self, *args, **kwargs)
        calls.append(1)
        if len(calls) == 1:
            if how == "signal":
                os.kill(os.getpid(), signal.SIGINT)  # a real Ctrl-C: the loop stops after this chunk
            elif how == "sigterm":
                os.kill(os.getpid(), signal.SIGTERM)  # a scheduler's stop: handled like Ctrl-C
            else:
                raise KeyboardInterrupt  # a second Ctrl-C: raised at once

    monkeypatch.setattr(log_lib.Progress, "update", update)


@pytest.mark.parametrize("how", ["signal", "sigterm", "raise"])
def test_ctrl_c_saves_a_checkpoint_and_names_the_resume_command(straight, tmp_path, capsys, monkeypatch, how):
    _, straight_result = straight
    run_dir = str(tmp_path / "run")
    config = write_yaml(tmp_path / "c.yaml", fake_raw(checkpoint_every=0))  # only the interrupt saves
    _interrupt_on_first_update(monkeypatch, how)
    # the handlers the process had (default_int_handler, or SIG_IGN in a job a shell put in the background)
    before = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    assert cli.main(["train", config, "--out", run_dir]) == 130
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last == f"jaxrl: interrupted at update 3; checkpoint saved; continue with: jaxrl train --resume {run_dir}"
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == before  # the handlers were put back
    with Checkpoints(os.path.join(run_dir, "checkpoints"), read_only=True) as ckpts:
        assert ckpts.steps() == [3] and ckpts.verified_step() == 3
    monkeypatch.undo()
    resumed = trainer.run(None, resume=run_dir, evaluate=False)
    assert leaves_equal(resumed.state, straight_result.state)


def test_a_full_disk_is_one_line(fake_table, tmp_path, capsys, monkeypatch):
    def no_space(fd, data):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    config = write_yaml(tmp_path / "c.yaml", fake_raw())
    monkeypatch.setattr(rundir, "write_all", no_space)  # metrics.jsonl appends
    assert cli.main(["train", config, "--out", str(tmp_path / "a")]) == 3
    line = _one_line(capsys.readouterr().err)
    assert line.startswith("jaxrl: I/O error: No space left on device; free some space") and "--resume" in line
    monkeypatch.undo()

    import orbax.checkpoint as ocp

    def tensorstore_full(self, *args, **kwargs):  # orbax reports it as its own error type
        raise ValueError("DATA_LOSS: Error writing local file: No space left on device [tensorstore]")

    def tensorstore_full(self, *args, **kwargs):  # orbax logs the failure (with a traceback), then raises
        import logging

        try:
            raise ValueError("DATA_LOSS: Error writing local file: No space left on device [tensorstore]")
        except ValueError:
            logging.getLogger("absl").exception("[thread 1] write failed")
            logging.getLogger("orbax.checkpoint").error("commit failed")
            raise

    monkeypatch.setattr(ocp.CheckpointManager, "save", tensorstore_full)
    assert cli.main(["train", config, "--out", str(tmp_path / "b")]) == 3
    assert _one_line(capsys.readouterr().err).startswith(
        f"jaxrl: I/O error: No space left on device while saving checkpoint 3 of run {tmp_path / 'b'} ")


@pytest.mark.parametrize("where", ["orbax", "record"])
def test_a_full_disk_mid_checkpoint_is_one_line_and_resumes_from_the_last_one(straight, tmp_path, capsys, monkeypatch, where):
    """The disk fills during the second save (checkpoint 6): inside orbax's writes (a
    half-written temporary step) or writing the record after orbax committed. One line naming
    the run, the checkpoint kept and the command; no trace of step 6; the resume from
    checkpoint 3 ends bit for bit where the uninterrupted run did."""
    import orbax.checkpoint as ocp

    _, straight_result = straight
    config = write_yaml(tmp_path / "c.yaml", fake_raw())
    run_dir = str(tmp_path / "run")
    if where == "orbax":
        real_save = ocp.CheckpointManager.save

        def full(self, step, *args, **kwargs):
            if step != 6:
                return real_save(self, step, *args, **kwargs)
            partial = os.path.join(str(self.directory), "6.orbax-checkpoint-tmp-99", "default")
            os.makedirs(partial)
            with open(os.path.join(partial, "d"), "wb") as f:
                f.write(b"half")
            raise ValueError('DATA_LOSS: Error writing local file "d": No space left on device [tensorstore]')

        monkeypatch.setattr(ocp.CheckpointManager, "save", full)
    else:
        real_write = rundir.write_text

        def full(path, text):
            if path.endswith(os.path.join("6", ckpt_lib.RECORD_FILE)):
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), path)
            return real_write(path, text)

        monkeypatch.setattr(rundir, "write_text", full)
    assert cli.main(["train", config, "--out", run_dir]) == 3
    assert _one_line(capsys.readouterr().err) == (
        f"jaxrl: I/O error: No space left on device while saving checkpoint 6 of run {run_dir} (nothing of it was kept; "
        f"the newest good checkpoint is update 3); free some space, then continue with: jaxrl train --resume {run_dir}")
    assert os.listdir(os.path.join(run_dir, "checkpoints")) == ["3"]  # nothing half-written
    monkeypatch.undo()
    resumed = trainer.run(None, resume=run_dir, evaluate=False)
    assert resumed.updates == 7 and leaves_equal(resumed.state, straight_result.state)


def _tree(root) -> list:
    """Every path under ``root`` with its bytes (files) or None (directories)."""
    out = []
    for here, dirs, files in sorted(os.walk(root)):
        out += [(os.path.relpath(os.path.join(here, d), root), None) for d in sorted(dirs)]
        out += [(os.path.relpath(os.path.join(here, f), root), open(os.path.join(here, f), "rb").read()) for f in sorted(files)]
    return out


def test_a_symlinked_run_entry_is_refused_before_anything_is_written(straight, tmp_path, capsys):
    """A resume (and a fresh --out) whose run directory holds a symbolic link where the run
    writes (a directory or a file) is one line naming it, exit 2, before anything compiles;
    what the link points to is left as it was. The writers refuse it on their own too."""
    from jaxrl.run import loggers

    straight_dir, straight_result = straight
    for i, name in enumerate(["tensorboard", "checkpoints", "learning_curve.png", "alerts.jsonl"]):
        run_dir = copy_run(straight_dir, tmp_path / str(i))
        outside = tmp_path / f"outside{i}"
        outside.mkdir()
        path = os.path.join(run_dir, name)
        if os.path.exists(path):
            shutil.move(path, outside / name)  # (the real checkpoints / curve, now behind the link)
        elif "." in name:
            (outside / name).write_text("precious\n")
        else:
            (outside / name).mkdir()
        os.symlink(outside / name, path)
        before = _tree(outside)
        assert cli.main(["train", "--resume", run_dir]) == 2, name
        line = _one_line(capsys.readouterr().err)
        assert f"{name}' is a symbolic link; refusing to write through it" in line, line
        assert _tree(outside) == before, name
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    os.symlink(tmp_path / "outside0" / "tensorboard", fresh / "tensorboard")
    assert cli.main(["train", write_yaml(tmp_path / "c.yaml", fake_raw()), "--out", str(fresh)]) == 2
    assert "tensorboard' is a symbolic link; refusing to write through it" in _one_line(capsys.readouterr().err)
    assert os.listdir(fresh) == ["tensorboard"]
    # The writers themselves: the TensorBoard sink and the checkpoint writer.
    with pytest.raises(rundir.RunDirError, match="tensorboard' is a symbolic link"):
        loggers.TensorBoardSink(str(fresh), {})
    os.symlink(tmp_path / "outside1" / "checkpoints", fresh / "checkpoints")
    with Checkpoints(str(fresh / "checkpoints")) as ckpts, pytest.raises(rundir.RunDirError, match="checkpoints' is a symbolic link"):
        ckpts.save(8, straight_result.state)
    assert _tree(tmp_path / "outside0") == [("tensorboard", None)]
    assert "8" not in os.listdir(tmp_path / "outside1" / "checkpoints")


# ------------------------------------------------------------------------------------------
# Bounded input, and one line for every bad argument
# ------------------------------------------------------------------------------------------

ALIAS_BOMB = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{c}: &{c} [{', '.join(['*' + p] * 9)}]\n" for p, c in zip("abcdefgh", "bcdefghi")
)


def test_alias_bombs_are_refused_quickly_with_a_short_line(ppo_run, tmp_path, capsys):
    bomb = write_yaml(tmp_path / "bomb.yaml", "algo: ppo\n" + ALIAS_BOMB)
    start = time.perf_counter()
    assert cli.main(["train", bomb]) == 2
    line = _one_line(capsys.readouterr().err)
    assert line == f"jaxrl: config error: config file {bomb!r} uses a YAML anchor or alias at line 2 (not allowed: aliases can expand without bound)"
    flow_bomb = "{a: &a [x, x], b: &b [*a, *a], c: [*b, *b]}"
    assert cli.main(["train", CARTPOLE, "--set", f"ppo.hidden={flow_bomb}"]) == 2
    line = _one_line(capsys.readouterr().err)
    assert "the value uses a YAML anchor or alias" in line and len(line) < 300
    run_dir = copy_run(ppo_run, tmp_path)  # a run whose config.yaml was replaced by a bomb
    write_yaml(tmp_path / "copy" / "config.yaml", ALIAS_BOMB)
    assert cli.main(["eval", run_dir]) == 2
    assert "uses a YAML anchor or alias" in _one_line(capsys.readouterr().err)
    assert time.perf_counter() - start < 5


BAD_YAML = [
    ("ppo:\n  lr: 0.1\n  gamma: 0.9\n  lr: 0.2\n", "has a duplicate key 'lr' at line 4 (first at line 2)"),
    ("ppo: {lr: 1, lr: 2}\n", "has a duplicate key 'lr' at line 1"),
    ("base: {lr: 1}\nppo:\n  <<: {lr: 2}\n", "uses a YAML merge key (<<) at line 3"),
    ("algo: ppo\nenv: [unclosed\n", "is not valid YAML at line 3"),
    ("x: " + "[" * 40 + "]" * 40 + "\n", "nests deeper than 32 levels"),
    ("x: '" + "y" * 5000 + "'\n", "has a value of 5,000 characters at line 1 (at most 4,096 allowed)"),
    (b"algo: ppo\n# caf\xe9\n", "is not UTF-8 text (byte 0xe9 at offset 15)"),
    ("#" * (yamlio.MAX_FILE_BYTES + 1), "is larger than the 1,048,576 bytes allowed for a YAML file"),
]


@pytest.mark.parametrize("text, expected", BAD_YAML, ids=[str(i) for i in range(len(BAD_YAML))])
def test_bad_yaml_is_one_short_line(tmp_path, capsys, text, expected):
    path = tmp_path / "bad.yaml"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    assert cli.main(["train", str(path)]) == 2
    line = _one_line(capsys.readouterr().err)
    assert line.startswith(f"jaxrl: config error: config file {str(path)!r} {expected}"), line
    assert len(line) < 300


def test_long_values_in_messages_are_abbreviated(tmp_path, capsys):
    assert cli.main(["train", CARTPOLE, "--set", "train.log_seeds=" + "x" * 4000]) == 2
    line = _one_line(capsys.readouterr().err)
    assert line.startswith("jaxrl: config error: train.log_seeds: expected one of 'mean', 'per_seed', got 'xxx")
    assert "..." in line and len(line) < 200
    assert cli.main(["train", CARTPOLE, "--set", "train.seed=[" + "1, " * 1300 + "1]"]) == 2
    line = _one_line(capsys.readouterr().err)
    assert "..." in line and len(line) < 300
    # Messages written elsewhere (the algorithm's validate) are clipped by the command line.
    assert cli.main(["train", CARTPOLE, "--set", "ppo.hidden=[" + "0, " * 1000 + "0]"]) == 2
    line = _one_line(capsys.readouterr().err)
    assert line.endswith("...") and len(line) == cli.MAX_LINE
    assert cli.main(["train", CARTPOLE, "--set", "ppo.num_envs=" + "9" * 4000]) == 2
    line = _one_line(capsys.readouterr().err)
    assert "ppo.num_envs:" in line and "out of range" in line and len(line) < 200


def test_bad_paths_and_arguments_are_one_line(ppo_run, tmp_path, capsys):
    cases = [
        (["train", str(tmp_path)], 2, "is a directory, not a file"),
        (["train", CARTPOLE, "--set", "train.seed=18446744073709551616"], 2, "train.seed: must be an integer in [0, 9223372036854775807], got 18446744073709551616"),
        (["train", CARTPOLE, "--set", "train.seed=-1"], 2, "train.seed: must be an integer in [0, 9223372036854775807], got -1"),
        (["train", "--resume", str(ppo_run), "--seeds", "2"], 2, "--set/--seeds need a CONFIG"),
        (["train", CARTPOLE, "--accept-config-change"], 2, "--accept-config-change only applies with --resume"),
        (["render", str(ppo_run), "--out", str(tmp_path / "x.gif"), "--fps", "0"], 2, "--fps: must be >= 1, got 0"),
        (["render", str(ppo_run), "--out", str(tmp_path / "x.gif"), "--steps", "0"], 2, "--steps: must be >= 1, got 0"),
        (["render", str(ppo_run), "--out", str(tmp_path / "x.gif"), "--steps", "-3"], 2, "--steps: must be >= 1, got -3"),
        (["render", str(ppo_run), "--out", str(tmp_path / "missing" / "x.gif")], 2, "does not exist"),
        (["eval", str(ppo_run), "--seed", str(2**63)], 2, "--seed: must be an integer in [0, "),
        (["train", CARTPOLE, "--set", "ppo.num_envs=99999999999999999999999"], 2,
         "ppo.num_envs: 99999999999999999999999 is out of range (larger than 2**64)"),
    ]
    for argv, code, expected in cases:
        assert cli.main(argv) == code, argv
        line = _one_line(capsys.readouterr().err)
        assert expected in line, (argv, line)
    assert not (tmp_path / "x.gif").exists()


def test_the_memory_estimate_refuses_impossible_sizes_before_writing(ppo_run, tmp_path, capsys):
    out = tmp_path / "huge"
    assert cli.main(["train", CARTPOLE, "--seeds", "10000000", "--out", str(out)]) == 3
    line = _one_line(capsys.readouterr().err)
    assert line.startswith("jaxrl: not enough memory: the train state of 10,000,000 seeds needs ")
    assert "lower train.seeds or the sizes in the ppo section" in line
    assert not out.exists()
    big_batch = ["ppo.num_envs=1000000000", "ppo.num_steps=1", "ppo.num_minibatches=1", "ppo.total_env_steps=1000000000"]
    assert cli.main(["train", CARTPOLE, *_sets(big_batch), "--out", str(out)]) == 3
    assert "the train state of 1 seed needs " in _one_line(capsys.readouterr().err)
    assert cli.main(["eval", str(ppo_run), "--episodes", "1e11"]) == 3
    assert "and evaluation " in _one_line(capsys.readouterr().err)
    assert not out.exists()


def test_the_compiled_program_refuses_buffers_the_state_estimate_cannot_see(ppo_run, tmp_path, capsys, monkeypatch):
    """`--seeds 1000000` once passed the train-state estimate and then ran out of memory in
    the rollout: the compiled chunk's own buffers are checked before anything is allocated."""
    from jaxrl.run import guards

    monkeypatch.setattr(guards, "host_memory", lambda: 8 * 1024)  # the tiny state (~1.7 KiB) fits, its rollout does not
    out = tmp_path / "tight"
    assert cli.main(["train", CARTPOLE, *_sets(TINY_PPO), "--out", str(out)]) == 3
    line = _one_line(capsys.readouterr().err)
    assert line.startswith("jaxrl: not enough memory: one chunk of 1 seed needs "), line
    buffers = re.search(r"rollout and update buffers ([0-9.,]+) KiB", line)
    rollout_obs = 32 * 4 * 4 * 4  # ppo.num_steps x num_envs x CartPole's 4 float32 observations, a floor
    assert buffers and float(buffers.group(1).replace(",", "")) * 1024 >= rollout_obs, line
    assert "more than the 8.0 KiB of host memory available" in line
    assert not out.exists()


def test_huge_network_sizes_are_refused_from_the_config_before_tracing(tmp_path, capsys, monkeypatch):
    """grpo.model.n_layers=100000 once walked every layer in eval_shape (no answer in 120 s):
    the config's arithmetic refuses it (and huge MLP widths) before anything is traced."""
    from jaxrl.run import guards

    def traced(*a, **k):
        raise AssertionError("the abstract init was traced")

    monkeypatch.setattr(guards, "estimate_bytes", traced)
    grpo = os.path.join(REPO, "configs", "grpo_reverse.yaml")
    cases = [
        (grpo, "grpo.model.n_layers=100000", "4,915,200,000 parameters (100,000 blocks x 12 x 64^2", "grpo.model.n_layers"),
        (CARTPOLE, "ppo.hidden=[300000,300000]", "90,000,000,000 parameters", "ppo.hidden"),
        (os.path.join(REPO, "configs", "dqn_cartpole.yaml"), "dqn.hidden=[300000,300000]", "90,000,000,000", "dqn.hidden"),
        (os.path.join(REPO, "configs", "sac_pendulum.yaml"), "sac.hidden=[300000,300000]", "90,000,000,000", "sac.hidden"),
    ]
    for config, setting, numbers, key in cases:
        out = tmp_path / "huge"
        assert cli.main(["train", config, "--set", setting, "--out", str(out)]) == 3, setting
        line = _one_line(capsys.readouterr().err)
        assert line.startswith("jaxrl: not enough memory: the ") and numbers in line and key in line, line
        assert not out.exists()


def test_the_config_floor_is_below_the_traced_parameter_count():
    """The floor counts a subset of the weights, times Adam's three copies: never more than
    the traced train state holds."""
    import math

    from jaxrl.run import build, config as config_lib, guards

    grpo = config_lib.load_config(os.path.join(REPO, "configs", "grpo_reverse.yaml"), ["grpo.model.n_layers=3", "grpo.model.d_model=16"])
    ppo = config_lib.load_config(CARTPOLE, ["ppo.hidden=[8,16,4]"])
    for cfg, floor in ((grpo, 12 * 16 * 16 * 3), (ppo, 8 * 16 + 16 * 4)):
        built = build.build(cfg)
        assert guards.config_floor(cfg, built)[0] == floor
        state = jax.eval_shape(built.program.init, jax.ShapeDtypeStruct((2,), jax.numpy.uint32))
        floats = sum(math.prod(x.shape) for x in jax.tree_util.tree_leaves(state) if x.dtype == jax.numpy.float32)
        assert 3 * floor <= floats, (cfg.algo, floor, floats)


def test_exit_codes_are_documented():
    text = cli.build_parser().format_help()
    for code in ("1 the run failed", "2 bad input", "3 I/O or resources", "130 interrupted"):
        assert code in " ".join(text.split()), code
        assert code in " ".join(cli.__doc__.split()), code


class XlaRuntimeError(RuntimeError):
    """Stands in for jaxlib's error of the same name (matched by name and status)."""


def test_failures_map_to_one_line_and_an_exit_code(capsys):
    assert cli.failure(MemoryError()) == (3, "jaxrl: out of memory: MemoryError; lower train.seeds or the batch sizes")
    oom = XlaRuntimeError("RESOURCE_EXHAUSTED: Out of memory while trying to allocate 1.00TiB.\nmore detail")
    assert cli.failure(oom) == (3, "jaxrl: out of memory: RESOURCE_EXHAUSTED: Out of memory while trying to allocate 1.00TiB.; lower train.seeds or the batch sizes")
    assert cli.failure(XlaRuntimeError("INTERNAL: a compiler bug")) is None  # a bug keeps its traceback
    assert cli.failure(ValueError("a bug")) is None
    assert cli.failure(OverflowError("Python int too large to convert to C long"))[0] == 2
    assert cli.failure(UnicodeDecodeError("utf-8", b"\xff", 0, 1, "invalid start byte")) == (
        2, "jaxrl: input is not UTF-8 text: invalid start byte at byte 0"
    )
    assert cli.failure(PermissionError(13, "Permission denied", "/x")) == (3, "jaxrl: I/O error: Permission denied: /x")
    assert cli.failure(KeyboardInterrupt()) == (130, "jaxrl: interrupted")
    # Argument errors are one line too (argparse prints usage and a second line otherwise).
    with pytest.raises(SystemExit) as exc:
        cli.main(["eval", "RUN", "--episodes", "many"])
    assert exc.value.code == 2
    assert _one_line(capsys.readouterr().err) == "jaxrl eval: error: argument --episodes: invalid integer: 'many' (see jaxrl eval --help)"
    assert cli.count("1e6") == 1_000_000 and cli.count("12") == 12


# ------------------------------------------------------------------------------------------
# This round's faults (issue 26): crafted records, copied steps, edited configs, links,
# glob characters, read-back, permissions, bad numbers
# ------------------------------------------------------------------------------------------


def _edit_record(step_dir, edit):
    path = os.path.join(step_dir, ckpt_lib.RECORD_FILE)
    record = json.loads(open(path).read())
    edit(record)
    open(path, "w").write(json.dumps(record) if not isinstance(record, str) else record)


CRAFTED = {
    "outside_path": (lambda r: r["files"].update({"../../../../dev/zero": [1 << 40, "0" * 64]}), "outside its step directory"),
    "null_files": (lambda r: r.update(files=None), "lists no files"),
    "nested_entry": (lambda r: r["files"].update({k: [[[[1]]], None] for k in r["files"]}), "malformed entry"),
    "another_run": (lambda r: r.update(run_id="f" * 32), "written by another run"),
    "other_step": (lambda r: r.update(step=3), "names step 3, not 7"),
}


@pytest.mark.parametrize("craft", sorted(CRAFTED))
def test_a_crafted_or_copied_checkpoint_record_is_one_line_and_skipped(straight, tmp_path, capsys, craft):
    straight_dir, _ = straight
    run_dir = copy_run(straight_dir, tmp_path)
    edit, reason = CRAFTED[craft]
    _edit_record(os.path.join(run_dir, "checkpoints", "7"), edit)
    assert cli.main(["eval", run_dir, "--episodes", "2"]) == 0
    err = capsys.readouterr().err
    assert reason in err and "restored checkpoint 6 instead" in err and "Traceback" not in err


def test_a_deeply_nested_record_is_one_line(straight, tmp_path, capsys):
    straight_dir, _ = straight
    run_dir = copy_run(straight_dir, tmp_path)
    for step in (3, 6, 7):
        with open(os.path.join(run_dir, "checkpoints", str(step), ckpt_lib.RECORD_FILE), "w") as f:
            f.write("[" * 100_000 + "]" * 100_000)
    assert cli.main(["eval", run_dir, "--episodes", "2"]) == 1
    assert "unreadable jaxrl_checkpoint.json" in _one_line(capsys.readouterr().err)


def test_eval_uses_the_config_recorded_with_the_checkpoint_and_step_picks_one(straight, tmp_path, capsys):
    straight_dir, _ = straight
    run_dir = copy_run(straight_dir, tmp_path)
    config = os.path.join(run_dir, "config.yaml")
    raw = yaml.safe_load(open(config))
    raw["train"]["seeds"] = 2  # an edit after training: another state shape
    open(config, "w").write(yaml.safe_dump(raw))
    assert cli.main(["eval", run_dir, "--episodes", "2", "--step", "3"]) == 0
    assert json.loads(open(os.path.join(run_dir, "eval.json")).read())["checkpoint_update"] == 3
    assert cli.main(["eval", run_dir, "--step", "5"]) == 2
    assert "has no checkpoint 5; it has 3, 6, 7" in _one_line(capsys.readouterr().err)


@pytest.mark.parametrize("name", ["a[1]", "b\\c"])
def test_a_run_directory_with_glob_characters_is_refused_up_front(fake_table, tmp_path, capsys, name):
    config = write_yaml(tmp_path / "c.yaml", fake_raw())
    assert cli.main(["train", config, "--out", str(tmp_path / name)]) == 2
    assert "takes as a pattern" in _one_line(capsys.readouterr().err)
    assert not os.path.exists(tmp_path / name)


def test_a_hard_linked_lock_or_appended_file_is_refused(fake_table, tmp_path, capsys):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    os.link(victim, run_dir / ".lock")
    config = write_yaml(tmp_path / "c.yaml", fake_raw())
    assert cli.main(["train", config, "--out", str(run_dir)]) == 2
    assert "has other hard links; refusing to write through it" in _one_line(capsys.readouterr().err)
    os.link(victim, run_dir / "config_changes.jsonl")  # what a resume appends to
    with pytest.raises(rundir.RunDirError, match="other hard links"):
        rundir.append_jsonl(str(run_dir / "config_changes.jsonl"), {"a": 1})
    assert victim.read_text() == "precious\n"


def test_a_linked_or_special_run_file_is_refused_on_resume(straight, tmp_path, capsys):
    """A resume reads and rewrites metrics.jsonl and locks .lock: through a symbolic link to
    /dev/zero it read forever; a FIFO blocked. Each is one line naming the file (exit 2),
    and the file a link points to is left as it was."""
    straight_dir, _ = straight
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")

    def timeout(signum, frame):
        raise AssertionError("the resume hung on a linked run file")

    previous = signal.signal(signal.SIGALRM, timeout)
    try:
        for i, (name, make, words) in enumerate([
            ("metrics.jsonl", os.mkfifo, "metrics.jsonl' is not a regular file"),  # first: it blocks, but an alarm ends it
            ("metrics.jsonl", lambda p: os.symlink("/dev/zero", p), "metrics.jsonl' is a symbolic link"),
            ("metrics.jsonl", lambda p: os.symlink(victim, p), "metrics.jsonl' is a symbolic link"),
            (".lock", lambda p: os.symlink(victim, p), ".lock' is a symbolic link"),
        ]):
            run_dir = copy_run(straight_dir, tmp_path / str(i))
            os.remove(os.path.join(run_dir, name))
            make(os.path.join(run_dir, name))
            signal.alarm(30)
            assert cli.main(["train", "--resume", run_dir]) == 2, name
            signal.alarm(0)
            assert words in _one_line(capsys.readouterr().err), name
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    os.symlink(victim, tmp_path / "config_changes.jsonl")  # what a resume with a changed config appends to
    with pytest.raises(rundir.RunDirError, match="config_changes.jsonl' is a symbolic link"):
        rundir.append_jsonl(str(tmp_path / "config_changes.jsonl"), {"a": 1})
    assert victim.read_text() == "precious\n"


def test_run_files_follow_the_umask(straight):
    straight_dir, _ = straight
    mask = os.umask(0o022)
    os.umask(mask)
    for name in ("config.yaml", "eval.json" if os.path.exists(os.path.join(straight_dir, "eval.json")) else "metrics.jsonl"):
        assert os.stat(os.path.join(straight_dir, name)).st_mode & 0o777 == 0o666 & ~mask, name
    record = os.path.join(straight_dir, "checkpoints", "7", ckpt_lib.RECORD_FILE)
    assert os.stat(record).st_mode & 0o777 == 0o666 & ~mask


def test_a_checkpoint_that_does_not_read_back_is_never_marked_good(fake_table, tmp_path, capsys, monkeypatch):
    def unreadable(path, abstract):
        raise ValueError("NOT_FOUND: no such step [tensorstore]")

    monkeypatch.setattr(ckpt_lib, "_read_item", unreadable)
    config = write_yaml(tmp_path / "c.yaml", fake_raw())
    assert cli.main(["train", config, "--out", str(tmp_path / "run")]) == 1
    assert "was written but cannot be read back" in _one_line(capsys.readouterr().err)
    assert not glob.glob(str(tmp_path / "run" / "checkpoints" / "*" / ckpt_lib.RECORD_FILE))


@pytest.mark.parametrize("override, expected", [
    ("ppo.optim.adam_eps=.inf", "ppo.optim.adam_eps: must be a finite number, got inf"),
    ("ppo.optim.lr=.nan", "ppo.optim.lr: must be a finite number, got nan"),
    ("train.stop_at={metric: episode_return, threshold: .nan}", "train.stop_at.threshold: must be a finite number"),
])
def test_non_finite_numbers_are_refused(tmp_path, capsys, override, expected):
    assert cli.main(["train", CARTPOLE, "--out", str(tmp_path / "r"), "--set", override]) == 2
    assert expected in _one_line(capsys.readouterr().err)


def test_training_on_the_held_out_split_is_refused(tmp_path, capsys):
    config = os.path.join(REPO, "configs", "grpo_reverse.yaml")
    assert cli.main(["train", config, "--out", str(tmp_path / "r"), "--set", "env.params.held_out=true"]) == 2
    assert "env.params.held_out: training on the held-out split" in _one_line(capsys.readouterr().err)


def test_resume_accepts_the_reporting_keys_docs_runs_md_lists(straight, tmp_path, capsys):
    straight_dir, _ = straight
    run_dir = copy_run(straight_dir, tmp_path)
    assert cli.main(["train", "--resume", run_dir, "--set", "train.progress=false", "--set", "train.keep_checkpoints=2"]) == 0
    assert "jaxrl: done: 7 updates" in capsys.readouterr().out
    assert cli.main(["train", "--resume", run_dir, "--set", "fake.lr=0.5"]) == 2
    assert "with --resume only train.progress" in _one_line(capsys.readouterr().err)


def test_the_run_id_lives_in_the_lock_and_survives_a_resume(straight, tmp_path):
    straight_dir, _ = straight
    ident = rundir.run_id(str(straight_dir))
    assert ident and len(ident) == 32
    assert ckpt_lib.Checkpoints(os.path.join(straight_dir, "checkpoints"), read_only=True).record(7)["run_id"] == ident
    run_dir = copy_run(straight_dir, tmp_path)  # a copied run is the same run
    with rundir.RunLock(run_dir):
        pass
    assert rundir.run_id(run_dir) == ident


def test_the_eval_json_of_training_names_its_checkpoint(ppo_run):
    """`jaxrl train`'s own eval.json says which checkpoint it scored, as `jaxrl eval`'s does
    (`jaxrl compare` reports it)."""
    summary = json.loads(open(os.path.join(ppo_run, "eval.json")).read())
    assert summary["checkpoint_update"] == 4  # TINY_PPO: 512 steps / (4 envs x 32 steps)


def test_render_of_an_env_without_a_renderer_is_one_line(ppo_run, tmp_path, capsys, monkeypatch):
    from jaxrl_envs.cartpole import CartPole

    def no_frames(self, state, params):
        raise NotImplementedError(f"{self.name} does not render")

    monkeypatch.setattr(CartPole, "render", no_frames)
    out = tmp_path / "x.gif"
    assert cli.main(["render", str(ppo_run), "--out", str(out), "--steps", "3"]) == 2
    line = _one_line(capsys.readouterr().err)
    assert "CartPole-v1 does not render" in line and "jaxrl eval" in line, line
    assert not out.exists()


def test_a_foreign_step_is_refused_without_the_lock(straight, tmp_path, capsys):
    """The run-id check once read the id from .lock alone: a step copied in from another run
    was evaluated as the run's own in a directory without .lock (issue 40)."""
    straight_dir, _ = straight
    run_dir = copy_run(straight_dir, tmp_path)
    ident = rundir.run_id(run_dir)
    foreign = os.path.join(run_dir, "checkpoints", "8")
    shutil.copytree(os.path.join(run_dir, "checkpoints", "7"), foreign)
    _edit_record(foreign, lambda r: r.update(run_id="f" * 32, step=8))
    os.remove(os.path.join(run_dir, ".lock"))  # e.g. copied with `cp -r RUN/* ...`
    assert rundir.run_id(run_dir) == ident  # its second home: the comment opening config.yaml
    assert cli.main(["eval", run_dir, "--episodes", "2"]) == 0
    err = capsys.readouterr().err
    assert "checkpoint 8: it was written by another run" in err and "restored checkpoint 7 instead" in err, err
    with rundir.RunLock(run_dir):  # a writer keeps the identity config.yaml names
        pass
    assert rundir.run_id(run_dir) == ident
    os.remove(os.path.join(run_dir, ".lock"))
    config = os.path.join(run_dir, "config.yaml")
    lines = open(config).readlines()
    assert lines[0].startswith(f"# jaxrl run {ident} ")
    open(config, "w").write("".join(lines[1:]))  # no identity left anywhere
    assert rundir.run_id(run_dir) is None
    assert cli.main(["eval", run_dir, "--episodes", "2"]) == 1  # two runs' steps: none is taken for this run's
    assert "written by 2 different runs" in _one_line(capsys.readouterr().err)
