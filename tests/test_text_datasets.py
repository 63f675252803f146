"""Datasets saved on disk as a text task's rows (``env.text.train: DIR``): a Hugging Face
``Dataset.save_to_disk`` directory, an Arrow file, Arrow / Parquet shards. The rows read are the
rows written (read with ``datasets`` where it is installed and with pyarrow alone where it is
not: the same rows), and a task built from them has the arrays of the same rows in JSONL. The
reading tests run where ``datasets`` or ``pyarrow`` is installed (the ``[datasets]`` /
``[parquet]`` extras; CI has neither); the missing-extra message is checked everywhere."""

from __future__ import annotations

import json
import os
import sys

import pytest

from jaxrl.text import data
from jaxrl.text.task import file_task
from jaxrl_envs.text.text_file import TOKENIZER

ROWS = [{"prompt": f"What is {i} + 1?", "answer": str(i + 1), "source": "ab"[i % 2], "level": i} for i in range(24)]
ROWS.append({"prompt": "Übung: 10 - 4?", "answer": "6", "source": "c", "level": 99})


def _has(module: str) -> bool:
    try:
        __import__(module)
    except ImportError:
        return False
    return True


needs_arrow = pytest.mark.skipif(not _has("pyarrow"), reason="neither datasets nor pyarrow is installed "
                                 "(pip install 'jaxrl[datasets]'); the missing-extra message is tested instead")


def _save(rows, path) -> str:
    """``rows`` as ``Dataset.save_to_disk`` writes them: with ``datasets`` when installed, else
    its layout (state.json listing Arrow stream shards) written with pyarrow, in two shards."""
    import pyarrow as pa

    if _has("datasets"):
        import datasets
        from datasets.table import InMemoryTable

        # a fixed fingerprint: datasets' own hash of the table cannot pickle some pyarrow versions' types
        datasets.Dataset(InMemoryTable(pa.Table.from_pylist(rows)), fingerprint="jaxrl-test").save_to_disk(
            str(path), num_shards=2)
        return str(path)
    os.makedirs(path)
    names = ["data-00000-of-00002.arrow", "data-00001-of-00002.arrow"]
    half = len(rows) // 2
    for name, part in zip(names, (rows[:half], rows[half:])):
        table = pa.Table.from_pylist(part)
        with pa.OSFile(str(path / name), "wb") as sink, pa.ipc.new_stream(sink, table.schema) as writer:
            writer.write_table(table)
    (path / "state.json").write_text(json.dumps({"_data_files": [{"filename": n} for n in names]}))
    return str(path)


def _jsonl(rows, path) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def _task(train: str):
    return file_task("text/File-v0", {"train": train, "tokenizer_path": TOKENIZER, "prompt_len": 40, "answer_bytes": 8, "completion_len": 8,
                                      "held_out_every": 4, "reward": {"answer": "numeric", "extract": "last_number"}})


@needs_arrow
def test_a_saved_dataset_reads_its_rows_and_builds_the_task_of_the_same_jsonl(tmp_path, monkeypatch):
    saved = _save(ROWS, tmp_path / "saved")
    assert data.read_rows(saved) == ROWS  # every column, in order, across the shards
    with monkeypatch.context() as m:  # pyarrow alone (datasets absent) reads the same rows
        m.setitem(sys.modules, "datasets", None)
        assert data.read_rows(saved) == ROWS
    ours, theirs = _task(saved), _task(_jsonl(ROWS, tmp_path / "rows.jsonl"))
    assert (ours.train.count, ours.held.count) == (theirs.train.count, theirs.held.count)
    assert ours.train == theirs.train and ours.held == theirs.held  # the same token tables, split by the same hash rule


@needs_arrow
def test_arrow_and_parquet_shard_directories_and_a_dataset_dict(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    shards = tmp_path / "parquet"
    shards.mkdir()
    for i, part in enumerate((ROWS[:10], ROWS[10:])):
        pq.write_table(pa.Table.from_pylist(part), str(shards / f"train-{i:05d}.parquet"))
    assert data.read_rows(str(shards)) == ROWS
    table = pa.Table.from_pylist(ROWS)
    with pa.OSFile(str(tmp_path / "rows.arrow"), "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)  # the random-access format
    assert data.read_rows(str(tmp_path / "rows.arrow")) == ROWS
    split = _save(ROWS, tmp_path / "dd" / "train")
    (tmp_path / "dd" / "dataset_dict.json").write_text(json.dumps({"splits": ["train"]}))
    with pytest.raises(ValueError, match=r"train: .*dd: a DatasetDict \(splits: train\); give one split's directory, e.g. "):
        _task(str(tmp_path / "dd"))
    assert data.read_rows(split) == ROWS
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match=r"train: .*empty: a directory with no state.json"):
        _task(str(tmp_path / "empty"))


def test_a_saved_dataset_without_datasets_or_pyarrow_names_the_extra(tmp_path, monkeypatch):
    saved = tmp_path / "saved"
    saved.mkdir()
    (saved / "state.json").write_text(json.dumps({"_data_files": [{"filename": "data-00000-of-00001.arrow"}]}))
    (saved / "data-00000-of-00001.arrow").write_bytes(b"")
    for module in ("datasets", "pyarrow", "pyarrow.ipc", "pyarrow.parquet"):
        monkeypatch.setitem(sys.modules, module, None)
    with pytest.raises(ValueError, match=r"^train: .*saved: reading it needs pyarrow: pip install 'jaxrl\[datasets\]'$"):
        _task(str(saved))
    with pytest.raises(ImportError, match=r"data-00000-of-00001.arrow: reading it needs pyarrow: pip install 'jaxrl\[datasets\]'"):
        data.read_rows(str(saved / "data-00000-of-00001.arrow"))
