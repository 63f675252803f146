"""What a run trained on: its data files and its tokenizers, recorded in every checkpoint.

:func:`trained_on` reads the files a config names: each data file (``env.text.train``,
``env.text.held_out``, ``<algo>.data``) as its size, sha256 and row count, and each model or
tokenizer directory (``env.tokenizer.path``, ``<algo>.model.path``) as the size and sha256 of
its tokenizer files, ``config.json`` and ``generation_config.json`` (the files ``export-hf``
copies; the weights are not hashed). The trainer stores the result in each checkpoint's record
(``meta.trained_on``); ``--resume`` compares it with the files as they are now
(:func:`changes`, :func:`describe`), and ``export-hf`` refuses tokenizer files that changed
since (:func:`tokenizer_problem`).
"""

from __future__ import annotations

import hashlib
import os
import stat
from typing import Any

from jaxrl.run.config import ConfigError
from jaxrl.run.yamlio import display_path

__all__ = ["MODEL_FILES", "changes", "data_keys", "describe", "file_entry", "model_dir_keys", "tokenizer_problem", "trained_on"]

#: The small files of a model or tokenizer directory that are recorded (and that ``export-hf``
#: copies beside the weights): the tokenizer's own files and the model's configs.
MODEL_FILES = (
    "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja", "vocab.json",
    "merges.txt", "tokenizer.model", "added_tokens.json", "config.json", "generation_config.json",
)


def data_keys(raw: dict) -> dict[str, str]:
    """``{dotted key: path}`` of the data files a config (as a dict) names: ``env.text.train``,
    ``env.text.held_out`` and the algorithm's ``data`` (empty values skipped)."""
    text = (raw.get("env") or {}).get("text") or {}
    found = {f"env.text.{k}": text.get(k) for k in ("train", "held_out")}
    algo = raw.get("algo")
    section = raw.get(algo) if isinstance(algo, str) else None
    if isinstance(section, dict):
        found[f"{algo}.data"] = section.get("data")
    return {k: v for k, v in found.items() if isinstance(v, str) and v}


def model_dir_keys(raw: dict) -> dict[str, str]:
    """``{dotted key: directory}`` of the tokenizer and model directories a config names:
    ``env.tokenizer.path`` and the algorithm's ``model.path``."""
    found = {"env.tokenizer.path": ((raw.get("env") or {}).get("tokenizer") or {}).get("path")}
    algo = raw.get("algo")
    section = raw.get(algo) if isinstance(algo, str) else None
    model = section.get("model") if isinstance(section, dict) else None
    if isinstance(model, dict):
        found[f"{algo}.model.path"] = model.get("path")
    return {k: v for k, v in found.items() if isinstance(v, str) and v}


def _open_regular(path: str, key: str):
    """A binary file object of ``path``, refused in one line unless it is a regular file
    (a FIFO would block the hash, a device never end)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise ConfigError(f"{key}: cannot read {display_path(path)}: {exc.strerror}") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise ConfigError(f"{key}: {display_path(path)} is not a regular file")
    return os.fdopen(fd, "rb")


def file_entry(path: str, key: str, rows: bool = False) -> dict:
    """``{"size", "sha256"}`` of one file (and ``"rows"``: its lines that are not blank, or a
    Parquet file's row count when pyarrow can say)."""
    h, size, count = hashlib.sha256(), 0, 0
    with _open_regular(path, key) as f:
        chunks = f if rows and not path.endswith(".parquet") else iter(lambda: f.read(1 << 20), b"")
        for chunk in chunks:
            h.update(chunk)
            size += len(chunk)
            count += bool(chunk.strip())
    entry: dict[str, Any] = {"size": size, "sha256": h.hexdigest()}
    if rows:
        entry["rows"] = _parquet_rows(path) if path.endswith(".parquet") else count
    return entry


def _parquet_rows(path: str) -> int | None:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        return None
    try:
        return int(pq.ParquetFile(path).metadata.num_rows)
    except Exception:  # noqa: BLE001 -- not Parquet after all: the size and hash still say it changed
        return None


def _dir_entry(directory: str, key: str) -> dict:
    """``{"path", "files": {name: [size, sha256]}}`` of the :data:`MODEL_FILES` in ``directory``."""
    files = {}
    for name in MODEL_FILES:
        path = os.path.join(directory, name)
        if os.path.lexists(path):
            e = file_entry(path, f"{key} ({name})")
            files[name] = [e["size"], e["sha256"]]
    return {"path": directory, "files": files}


def trained_on(raw: dict) -> dict:
    """The record of what the config ``raw`` (:func:`jaxrl.run.config.config_to_dict`) trains
    on: ``{"data": {key: {path, size, sha256, rows}}, "models": {key: {path, files: {name:
    [size, sha256]}}}}``. A file that is not a regular file is refused (:class:`ConfigError`)."""
    data = {k: {"path": p, **file_entry(p, k, rows=True)} for k, p in data_keys(raw).items()}
    models = {k: _dir_entry(p, k) for k, p in model_dir_keys(raw).items() if os.path.isdir(p)}
    return {"data": data, "models": models}


def _short(digest: Any) -> str:
    return str(digest)[:12] if digest else "none"


def _data_line(old: dict | None, new: dict | None) -> str:
    def one(e):
        if not e:
            return "absent"
        rows, size = e.get("rows"), e.get("size")
        rows_text = f"{rows:,} rows, " if type(rows) is int else ""
        size_text = f"{size:,} bytes, " if type(size) is int else ""
        return f"{display_path(str(e.get('path', '?')))} {rows_text}{size_text}sha256 {_short(e.get('sha256'))}"

    return f"{one(old)} -> {one(new)}"


def _model_line(old: dict | None, new: dict | None) -> str:
    if not old or not new:
        return f"{display_path(str((old or new).get('path', '?')))} {'not recorded' if not old else 'gone'}"
    a, b = _files(old), _files(new)
    parts = []
    for name in sorted(set(a) | set(b)):
        if name not in b:
            parts.append(f"{name} removed")
        elif name not in a:
            parts.append(f"{name} added")
        elif a[name] != b[name]:
            parts.append(f"{name} sha256 {_short(a[name][1])} -> {_short(b[name][1])}")
    where = display_path(str(old.get("path", "?")))
    moved = "" if old.get("path") == new.get("path") else f" -> {display_path(str(new.get('path', '?')))}"
    return f"{where}{moved}: {', '.join(parts) or 'path changed'}"


def _mapping(x: Any) -> dict:
    return x if isinstance(x, dict) else {}


def _files(entry: Any) -> dict:
    """The well-formed ``{name: [size, sha256]}`` of a model directory's entry (a record is
    read from disk: anything else counts as absent)."""
    files = _mapping(_mapping(entry).get("files"))
    return {n: list(v) for n, v in files.items() if isinstance(v, (list, tuple)) and len(v) == 2}


def changes(old: dict, new: dict) -> dict:
    """``{key: [old entry, new entry]}`` of every data file and model directory whose record
    differs between ``old`` and ``new`` (:func:`trained_on` records; ``old`` may miss keys)."""
    out = {}
    for group in ("data", "models"):
        a, b = _mapping(_mapping(old).get(group)), _mapping(new.get(group))
        for key in sorted(set(a) | set(b)):
            x, y = (e if isinstance(e, dict) else None for e in (a.get(key), b.get(key)))
            if group == "data":
                same = x is not None and y is not None and all(x.get(f) == y.get(f) for f in ("size", "sha256", "rows"))
            else:
                same = x is not None and y is not None and _files(x) == _files(y)
            if not same:
                out[str(key)] = [x, y]
    return out


def describe(diff: dict) -> str:
    """One line of :func:`changes`: ``"env.text.train: a.jsonl 10 rows, ... -> a.jsonl 11 rows, ..."``."""
    parts = []
    for key, (old, new) in diff.items():
        parts.append(f"{key}: {_model_line(old, new) if key.endswith('.path') else _data_line(old, new)}")
    return "; ".join(parts)


def tokenizer_problem(recorded: dict | None, directory: str, key: str) -> str | None:
    """Why the files of ``directory`` (``key``: the config key naming it) are not those
    ``recorded`` (a ``models`` entry of :func:`trained_on`), naming the first file that differs;
    ``None`` when they are the same (or nothing was recorded)."""
    if not recorded:
        return None
    now, then = _files(_dir_entry(directory, key)), _files(recorded)
    for name in sorted(set(then) | set(now)):
        if name not in now:
            return f"{display_path(os.path.join(directory, name))} is gone since the run trained ({key})"
        if name not in then:
            return f"{display_path(os.path.join(directory, name))} was added since the run trained ({key})"
        if then[name] != now[name]:
            return (f"{display_path(os.path.join(directory, name))} changed since the run trained ({key}; sha256 "
                    f"{_short(then[name][1])} recorded, {_short(now[name][1])} now)")
    return None
