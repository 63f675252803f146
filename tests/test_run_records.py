"""What a run trained on, and exports that never destroy (issue 40, items 1 and 2).

Runs record their data files (size, sha256, rows) and tokenizers in every checkpoint record; a
``--resume`` on changed data is refused with a one-line diff unless accepted (and recorded);
``--init-from`` another checkpoint's run is refused; ``export-hf`` writes only a new directory,
never the run, the current directory or the base model, leaves nothing on a full disk, and
refuses a tokenizer that changed since training.

The data runs use the tiny ``fake`` algorithm of ``test_trainer`` with a ``data`` key; the
export runs use a GRPO checkpoint of the tiny Qwen2 fixture written without training (a zero
state saved through :class:`Checkpoints`): no LM program is compiled here.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl import cli
from jaxrl.algos import registry as algo_registry
from jaxrl.algos.common.lm import model_mismatch
from jaxrl.algos.contract import AlgoEntry
from jaxrl.run import config as C
from jaxrl.run import records, rundir, trainer
from jaxrl.run.build import build, seed_keys
from jaxrl.run.checkpoint import Checkpoints
from test_trainer import FakeConfig, make_fake, read_jsonl

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
QWEN2 = os.path.join(ROOT, "tests", "fixtures", "lm", "qwen2")


def _one_line(err: str) -> str:
    lines = [line for line in err.strip().splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


# ------------------------------------------------------------------------------------------
# Runs record their data; --resume refuses changed data unless accepted
# ------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class FakeDataConfig(FakeConfig):
    data: str = ""  # a data file the run names (the fake update never reads it)


@pytest.fixture(scope="module")
def fake_data_algo():
    algo_registry.register_algorithm(AlgoEntry(name="fake_data", config_cls=FakeDataConfig, build=make_fake), overwrite=True)
    yield
    algo_registry.deregister_algorithm("fake_data")


def _rows(n: int) -> str:
    return "".join(json.dumps({"prompt": f"p{i}", "answer": str(i)}) + "\n" for i in range(n))


def test_resume_refuses_changed_data_with_a_diff_then_accepts_and_records_it(fake_data_algo, tmp_path, capsys):
    data = tmp_path / "train.jsonl"
    data.write_text(_rows(3) + "\n")  # a blank line is no row
    raw = {"algo": "fake_data", "env": {"id": "CartPole-v1"}, "fake_data": {"num_updates": 4, "data": str(data)},
           "train": {"updates_per_chunk": 2, "checkpoint_every": 1, "progress": False}}
    run_dir = str(tmp_path / "run")
    trainer.run(C.config_from_dict(raw), run_dir=run_dir, evaluate=False)
    with Checkpoints(os.path.join(run_dir, "checkpoints"), read_only=True) as ckpts:
        entry = ckpts.record(2)["meta"]["trained_on"]["data"]["fake_data.data"]
    assert entry == {"path": str(data), "size": data.stat().st_size, "sha256": hashlib.sha256(data.read_bytes()).hexdigest(),
                     "rows": 3}
    shutil.rmtree(os.path.join(run_dir, "checkpoints", "4"))  # as if killed after update 2
    data.write_text(_rows(4))  # a row appended (and the blank line gone)

    assert cli.main(["train", "--resume", run_dir]) == 2
    line = _one_line(capsys.readouterr().err)
    assert "checkpoint 2 was trained on other data or another tokenizer: fake_data.data:" in line, line
    assert "3 rows" in line and "-> " in line and "4 rows" in line and "--accept-data-change" in line, line
    assert not os.path.exists(os.path.join(run_dir, "config_changes.jsonl"))
    assert cli.main(["train", os.path.join(ROOT, "configs", "ppo_cartpole.yaml"), "--accept-data-change"]) == 2
    assert "--accept-data-change only applies with --resume" in _one_line(capsys.readouterr().err)

    trainer.run(resume=run_dir, accept_data_change=True, evaluate=False)  # (`--accept-data-change`; no eval compile)
    assert "data changed at update 2 (accepted, recorded in config_changes.jsonl): fake_data.data:" in capsys.readouterr().out
    (change,) = read_jsonl(os.path.join(run_dir, "config_changes.jsonl"))
    old, new = change["data_changes"]["fake_data.data"]
    assert change["update"] == 2 and (old["rows"], new["rows"]) == (3, 4)
    # the checkpoints trained on the new rows record them: the next resume needs no flag
    with Checkpoints(os.path.join(run_dir, "checkpoints"), read_only=True) as ckpts:
        assert ckpts.record(4)["meta"]["trained_on"]["data"]["fake_data.data"] == new


def test_the_record_names_text_files_and_tokenizers_and_each_change(tmp_path):
    base = tmp_path / "base"
    shutil.copytree(QWEN2, base)
    train = tmp_path / "rows.jsonl"
    train.write_text(_rows(5))
    raw = {"algo": "grpo", "env": {"id": "text/File-v0", "text": {"train": str(train), "held_out": ""},
                                   "tokenizer": None}, "grpo": {"model": {"policy": "hf", "path": str(base)}}}
    assert records.data_keys(raw) == {"env.text.train": str(train)}
    assert records.model_dir_keys(raw) == {"grpo.model.path": str(base)}
    before = records.trained_on(raw)
    assert before["data"]["env.text.train"]["rows"] == 5
    assert set(before["models"]["grpo.model.path"]["files"]) == {
        "config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json"}
    assert records.changes(before, records.trained_on(raw)) == {}
    tok = base / "tokenizer.json"
    tok.write_text(json.dumps(json.loads(tok.read_text()), indent=1))  # the same tokenizer, other bytes
    diff = records.changes(before, records.trained_on(raw))
    assert list(diff) == ["grpo.model.path"]
    assert "grpo.model.path: " in records.describe(diff) and "tokenizer.json sha256 " in records.describe(diff)
    assert "tokenizer.json' changed since the run trained" in records.tokenizer_problem(
        before["models"]["grpo.model.path"], str(base), "grpo.model.path")


def test_a_data_file_that_is_not_a_regular_file_is_one_line(tmp_path):
    fifo = tmp_path / "rows.jsonl"
    os.mkfifo(fifo)  # hashing it would block forever
    with pytest.raises(C.ConfigError, match=r"env.text.train: .*rows.jsonl' is not a regular file"):
        records.trained_on({"algo": "grpo", "env": {"text": {"train": str(fifo)}}, "grpo": {}})


def test_init_from_refuses_a_run_of_the_same_algorithm_on_another_checkpoint():
    """The reported hole: the check ran only between two algorithms, so GRPO --init-from a GRPO
    run on another checkpoint took that run's frozen base silently."""
    hf = lambda path: {"model": {"policy": "hf", "path": path, "dtype": "float32", "lora": {"rank": 8}}}  # noqa: E731
    why = model_mismatch("grpo", hf("models/a"), "grpo", hf("models/b"))
    assert why is not None and "grpo.model.path='models/a' there, grpo.model.path='models/b' here" in why
    assert model_mismatch("grpo", hf("models/a"), "grpo", hf("models/./a")) is None
    assert model_mismatch("sft", hf("models/a"), "grpo", hf("models/b")) is not None
    assert model_mismatch("ppo", {"hidden": [8]}, "ppo", {"hidden": [8]}) is None  # its own network: shapes decide
    assert "both must train a loaded checkpoint" in model_mismatch("grpo", hf("models/a"), "grpo", {"model": {"policy": "transformer"}})


# ------------------------------------------------------------------------------------------
# export-hf: a new directory only, atomic, the recorded tokenizer
# ------------------------------------------------------------------------------------------


def _zeros(x):
    if jnp.issubdtype(x.dtype, jax.dtypes.prng_key):
        return jax.random.wrap_key_data(np.zeros(x.shape + (2,), np.uint32))
    return np.zeros(x.shape, x.dtype)


@pytest.fixture(scope="module")
def lm_run(tmp_path_factory):
    """``(run_dir, base_dir)``: a GRPO LoRA run of a copy of the Qwen2 fixture with one
    checkpoint (update 1, a zero state: nothing trained or compiled) recorded as the trainer does."""
    root = tmp_path_factory.mktemp("lm")
    base = root / "base"
    shutil.copytree(QWEN2, base)
    cfg = C.load_config(os.path.join(ROOT, "configs", "grpo_lm_reverse.yaml"),
                        [f"env.tokenizer.path={base}", f"grpo.model.path={base}", "train.progress=false"])
    built = build(cfg)
    state = jax.tree_util.tree_map(_zeros, jax.eval_shape(jax.vmap(built.program.init), seed_keys(0, 1)))
    run_dir = root / "run"
    with rundir.RunLock(str(run_dir)):
        ident = rundir.run_id(str(run_dir))
    (run_dir / "config.yaml").write_text(rundir.id_header(ident) + C.dump_config(cfg))
    raw = C.config_to_dict(cfg)
    with Checkpoints(run_dir / "checkpoints", meta={"config": raw, "trained_on": records.trained_on(raw)}, run_id=ident) as c:
        c.save(1, state)
    return str(run_dir), str(base)


def _tree(path) -> dict:
    return {os.path.relpath(os.path.join(r, n), path): os.path.getsize(os.path.join(r, n))
            for r, _, names in os.walk(path) for n in names}


def test_export_refuses_a_non_empty_directory_unless_forced(lm_run, tmp_path, capsys):
    run_dir, _ = lm_run
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("mine\n")
    assert cli.main(["export-hf", run_dir, "--out", str(out)]) == 2
    line = _one_line(capsys.readouterr().err)
    assert "is a directory that is not empty" in line and "--force" in line
    assert (out / "notes.txt").read_text() == "mine\n"
    (tmp_path / "file").write_text("x")
    assert cli.main(["export-hf", run_dir, "--out", str(tmp_path / "file"), "--force"]) == 2
    assert "is a file, not a directory" in _one_line(capsys.readouterr().err)
    assert cli.main(["export-hf", run_dir, "--out", str(out), "--force"]) == 0
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= set(os.listdir(out))
    assert not (out / "notes.txt").exists() and sorted(os.listdir(tmp_path)) == ["file", "out"]


def test_export_never_replaces_the_run_the_current_directory_or_the_base(lm_run, tmp_path, capsys, monkeypatch):
    run_dir, base = lm_run
    work = tmp_path / "work"
    work.mkdir()
    (work / "keep.txt").write_text("mine\n")
    monkeypatch.chdir(work)
    before = {p: _tree(p) for p in (run_dir, base, str(work))}
    cases = {
        run_dir: "is the run directory",
        os.path.join(run_dir, "checkpoints"): "is inside the run directory",
        os.path.dirname(run_dir): "contains the run directory",
        ".": "is the current directory",
        str(tmp_path): "contains the current directory",
        base: "is env.tokenizer.path",  # the base model: both keys name it
    }
    for out, words in cases.items():
        assert cli.main(["export-hf", run_dir, "--out", out, "--force"]) == 2, out
        line = _one_line(capsys.readouterr().err)
        assert words in line and "choose a new directory" in line, line
    assert {p: _tree(p) for p in before} == before


def test_a_full_disk_during_the_export_is_one_line_and_leaves_nothing(lm_run, tmp_path, capsys, monkeypatch):
    import safetensors.numpy

    from safetensors import SafetensorError

    run_dir, _ = lm_run

    def full_disk(tensors, path, metadata=None):
        with open(path, "wb") as f:
            f.write(b"\0" * 1000)  # half written
        raise SafetensorError('Error while serializing: IoError(Os { code: 28, kind: StorageFull, message: "No space left on device" })')

    monkeypatch.setattr(safetensors.numpy, "save_file", full_disk)
    assert cli.main(["export-hf", run_dir, "--out", str(tmp_path / "out")]) == 3
    line = _one_line(capsys.readouterr().err)
    assert "No space left on device (the export was not written)" in line and "out" in line, line
    assert os.listdir(tmp_path) == []  # no export, no temporary directory


def test_export_refuses_a_tokenizer_that_changed_since_training(lm_run, tmp_path, capsys):
    run_dir, base = lm_run
    tok = os.path.join(base, "tokenizer_config.json")
    original = open(tok, "rb").read()
    try:
        with open(tok, "w") as f:
            f.write(json.dumps(json.loads(original), indent=3))  # the same settings, other bytes
        assert cli.main(["export-hf", run_dir, "--out", str(tmp_path / "out")]) == 2
        line = _one_line(capsys.readouterr().err)
        assert "tokenizer_config.json' changed since the run trained" in line and "put back" in line, line
        assert not (tmp_path / "out").exists()
    finally:
        with open(tok, "wb") as f:
            f.write(original)


def test_init_from_a_run_on_another_checkpoint_is_refused(lm_run, tmp_path, capsys):
    run_dir, _ = lm_run
    config = os.path.join(ROOT, "configs", "grpo_lm_reverse.yaml")  # the repo's qwen2, not the run's copy
    assert cli.main(["train", config, "--init-from", run_dir, "--out", str(tmp_path / "new")]) == 2  # before a compile
    line = _one_line(capsys.readouterr().err)
    assert "grpo.model.path=" in line and "the model must be the same" in line, line
    assert not (tmp_path / "new").exists()
    cfg = C.load_config(config, ["train.progress=false"])  # and again on the checkpoint's recorded config
    built = build(cfg)
    with pytest.raises(C.ConfigError, match=r"--init-from: .* grpo.model.path='.*base' there, grpo.model.path='tests/fixtures/lm/qwen2' here"):
        trainer.initial_from(cfg, built, None, seed_keys(0, 1), run_dir, None)
