"""Checkpoints: exact round trip (typed PRNG keys included), structure check on restore,
keep-the-last-few, and atomicity (an interrupted save never replaces the last good one)."""

from __future__ import annotations

import errno
import functools
import logging
import os
import shutil
import sys
import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from orbax.checkpoint._src.path import async_path

from jaxrl.run import trainer
from jaxrl.run.checkpoint import CheckpointError, Checkpoints, from_storable, to_storable
from test_trainer import FakeConfig, _fake_init, _fake_update, leaves_equal


@pytest.fixture(scope="module")
def states():
    """Two consecutive states of two seeds (leaves [2, ...], typed keys)."""
    init = jax.vmap(functools.partial(_fake_init, FakeConfig()))
    update = jax.jit(jax.vmap(functools.partial(_fake_update, FakeConfig())))
    s1 = init(trainer.seed_keys(0, 2))
    s2, _ = update(s1)
    return s1, s2


def test_storable_roundtrip_keeps_typed_keys(states):
    s1, _ = states
    stored = to_storable(s1)
    assert stored.key.dtype == jnp.uint32 and stored.key.shape == (2, 2)
    back = from_storable(stored, jax.eval_shape(lambda: s1))  # a ShapeDtypeStruct template works
    assert jnp.issubdtype(back.key.dtype, jax.dtypes.prng_key)
    assert leaves_equal(back, s1)


def test_save_restore_exact_and_keep_last(states, tmp_path):
    s1, s2 = states
    hook = sys.unraisablehook  # a good save leaves the interpreter's hooks as they were (asserted below)
    with Checkpoints(tmp_path / "ck", keep=2) as ckpts:
        for step, s in ((1, s1), (2, s2), (3, s1)):
            ckpts.save(step, s)
        assert ckpts.steps() == [2, 3]
        restored = ckpts.restore(jax.eval_shape(lambda: s1), 2)
    assert sys.unraisablehook is hook
    assert leaves_equal(restored, s2)
    assert isinstance(restored, type(s2))
    # The restored key still drives jax.random exactly as the original.
    np.testing.assert_array_equal(
        jax.random.key_data(jax.vmap(jax.random.split)(restored.key)), jax.random.key_data(jax.vmap(jax.random.split)(s2.key))
    )


def test_restore_checks_structure(states, tmp_path):
    s1, _ = states
    with Checkpoints(tmp_path / "ck") as ckpts:
        with pytest.raises(CheckpointError, match="no checkpoint in"):
            ckpts.restore(s1)
        ckpts.save(1, s1)
        wrong_shape = s1.replace(w=jnp.zeros((2, 5)))
        with pytest.raises(CheckpointError, match=r"does not match this run's state: leaf w is float32\[2, 4\], expected float32\[2, 5\]"):
            ckpts.restore(wrong_shape)
        wrong_dtype = s1.replace(count=s1.count.astype(jnp.float32))
        with pytest.raises(CheckpointError, match=r"leaf count is int32\[2\], expected float32\[2\]"):
            ckpts.restore(wrong_dtype)
        wrong_tree = {"w": s1.w, "count": s1.count}
        with pytest.raises(CheckpointError, match="does not match this run's state: the checkpoint has an extra leaf key"):
            ckpts.restore(wrong_tree)
        bigger = {"w": s1.w, "count": s1.count, "key": s1.key, "opt_state": s1.opt_state, "new": s1.w}
        with pytest.raises(CheckpointError, match="leaf new is missing from the checkpoint"):
            ckpts.restore(bigger)
        with pytest.raises(CheckpointError, match="no checkpoint for step 7"):
            ckpts.restore(s1, 7)


def test_interrupted_save_keeps_last_good(states, tmp_path, monkeypatch):
    s1, s2 = states
    directory = tmp_path / "ck"
    with Checkpoints(directory) as ckpts:
        ckpts.save(1, s1)

    # Simulate a crash after the data of step 2 is written but before it is committed:
    # the final rename never happens.
    async def crash(*args, **kwargs):
        raise OSError("simulated crash mid-save")

    monkeypatch.setattr(async_path, "rename", crash)
    ckpts = Checkpoints(directory)
    real_rmtree, removed = shutil.rmtree, []
    monkeypatch.setattr(shutil, "rmtree", lambda path, *a, **k: (removed.append(os.path.basename(path)), real_rmtree(path, *a, **k)))
    with pytest.raises(Exception, match="simulated crash"):
        ckpts.save(2, s2)
    monkeypatch.undo()
    assert removed and all(p.startswith("2.orbax-checkpoint-tmp") for p in removed), removed  # step 2 was a tmp dir ...
    assert os.listdir(directory) == ["1"]  # ... which the failed save removed
    # A process killed at that point cleans up nothing: the next writer does.
    os.makedirs(directory / "2.orbax-checkpoint-tmp-1234567" / "default")
    (directory / "2.orbax-checkpoint-tmp-1234567" / "default" / "partial").write_bytes(b"half")

    # A fresh process sees only the good checkpoint, restores it exactly, and can save again.
    with Checkpoints(directory) as again:
        assert again.steps() == [1]
        assert leaves_equal(again.restore(s1), s1)
        again.save(2, s2)
        assert again.steps() == [1, 2]
        assert leaves_equal(again.restore(s1), s2)
    assert sorted(os.listdir(directory)) == ["1", "2"]  # the leftover was cleaned up


@pytest.mark.parametrize("where", ["record", "read_back"])
def test_a_full_disk_mid_save_keeps_the_previous_checkpoint(states, tmp_path, monkeypatch, where):
    """keep=1: a save that fails after orbax committed its data (the record's write hits a
    full disk, or the read-back fails) must not have deleted the last good checkpoint."""
    import errno

    from jaxrl.run import checkpoint as ckpt_lib
    from jaxrl.run import rundir

    s1, s2 = states
    directory = tmp_path / "ck"
    with Checkpoints(directory, keep=1) as ckpts:
        ckpts.save(1, s1)
        if where == "record":
            def full(path, text):
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), path)

            monkeypatch.setattr(rundir, "write_text", full)
            with pytest.raises(OSError, match="No space left"):
                ckpts.save(2, s2)
        else:
            monkeypatch.setattr(ckpt_lib, "content_digest", lambda tree, real=ckpt_lib.content_digest: (
                "0" * 64 if isinstance(tree, dict) else real(tree)[0], real(tree)[1]))
            with pytest.raises(CheckpointError):
                ckpts.save(2, s2)
        monkeypatch.undo()
    assert os.listdir(directory) == ["1"]  # nothing half-written: the failed step's directory was removed
    with Checkpoints(directory, read_only=True) as again:
        assert again.verified_step() == 1
        assert leaves_equal(again.restore(s1, 1), s1)


@pytest.mark.parametrize("message, kind", [
    ("DATA_LOSS: Error writing local file: No space left on device [tensorstore]", "full"),
    ("INTERNAL: something else broke [tensorstore]", "other"),
])
def test_orbax_errors_mid_save_leave_nothing_and_log_nothing(states, tmp_path, monkeypatch, caplog, message, kind):
    """Orbax fails after writing part of a step (its temporary directory holds a file) and
    logs the failure with a traceback before raising: the save removes the partial step,
    prints nothing, and raises ENOSPC as an OSError (any other failure: CheckpointError)."""
    import orbax.checkpoint as ocp

    s1, s2 = states
    directory = tmp_path / "ck"
    with Checkpoints(directory, keep=1) as ckpts:
        ckpts.save(1, s1)

        def half_written(self, step, *args, **kwargs):
            partial = os.path.join(str(self.directory), f"{step}.orbax-checkpoint-tmp-99", "default")
            os.makedirs(partial)
            with open(os.path.join(partial, "d"), "wb") as f:
                f.write(b"half")
            try:
                raise ValueError(message)
            except ValueError:
                logging.getLogger("absl").exception("[thread 1] write failed")  # what orbax does
                raise

        monkeypatch.setattr(ocp.CheckpointManager, "save", half_written)
        printed = []
        with pytest.MonkeyPatch.context() as hooks:
            hooks.setattr(sys, "unraisablehook", printed.append)
            with pytest.raises(OSError if kind == "full" else CheckpointError) as info:
                ckpts.save(2, s2)
            # orbax's abandoned writes end later in tensorstore's threads, into a closed event loop:
            for message in ("Event loop is closed", "something else"):
                sys.unraisablehook(types.SimpleNamespace(exc_type=RuntimeError, exc_value=RuntimeError(message),
                                                         exc_traceback=None, err_msg=None, object=None))
            assert [str(u.exc_value) for u in printed] == ["something else"]  # only the noise is dropped
        monkeypatch.undo()
    if kind == "full":
        assert info.value.errno == errno.ENOSPC and "No space left on device" in str(info.value)
    else:
        assert "saving checkpoint 2" in str(info.value) and "something else broke" in str(info.value)
    assert not [r for r in caplog.records if r.name == "absl"]  # orbax's logged traceback stayed quiet ...
    logging.getLogger("absl").error("control")
    assert [r.getMessage() for r in caplog.records if r.name == "absl"] == ["control"]  # ... which it is not outside a save
    assert os.listdir(directory) == ["1"]
    with Checkpoints(directory, read_only=True) as again:
        assert again.verified_step() == 1 and leaves_equal(again.restore(s1), s1)


def test_a_linked_checkpoint_directory_is_refused(states, tmp_path):
    from jaxrl.run.rundir import RunDirError

    s1, _ = states
    target = tmp_path / "elsewhere"
    target.mkdir()
    os.symlink(target, tmp_path / "ck")
    with Checkpoints(tmp_path / "ck") as ckpts:
        with pytest.raises(RunDirError, match="ck' is a symbolic link; refusing to write through it"):
            ckpts.save(1, s1)
    assert os.listdir(target) == []
