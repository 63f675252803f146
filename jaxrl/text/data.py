"""Text rows in, fixed-shape token arrays out: prompts, answers and reference completions.

* :func:`read_rows`: the records of a JSONL file (one JSON object a line), a Parquet file
  (needs ``pyarrow``: ``pip install 'jaxrl[parquet]'``), or a dataset saved on disk: a
  Hugging Face ``Dataset.save_to_disk`` directory, an Arrow file, or a directory of Arrow /
  Parquet shards (:func:`read_saved`; ``pip install 'jaxrl[datasets]'``). Every column is kept.
* :func:`encode_rows`: rows -> :class:`Encoded` numpy arrays, tokenized once on the host:
  prompts rendered with the chat template (an optional system message first), int32
  ``[N, prompt_len]`` LEFT-padded with the pad id; answers as UTF-8 bytes int32
  ``[N, answer_bytes]`` (0 after) and their lengths; optional reference completions, int32
  ``[N, completion_len]``: the text's tokens, then eos, then the pad id.
* A bad row (not an object, a missing or non-string field, a prompt longer than
  ``prompt_len`` tokens, an answer longer than ``answer_bytes`` bytes, a completion that
  does not fit ``completion_len`` tokens with its eos) is dropped and counted by reason in a
  :class:`RowReport`, never truncated; no good row at all is a ``ValueError`` naming the
  file and the counts.
* Bounds: a row nested too deeply for the JSON reader is a bad row; an ``answer_bytes``
  whose table (rows x answer_bytes int32) would pass :data:`MAX_TABLE_BYTES` while above the
  longest answer in the rows is a ``ValueError`` naming that longest answer.
* Held-out split: a second file, or the hash rule :func:`is_held_out` (a prompt is held out
  iff the BLAKE2b hash of its UTF-8 text is ``0 mod k``), a function of the prompt text
  alone, so one prompt is never in both splits. Near-duplicates (prompts equal after
  :func:`prompt_key`: white space at the ends, case, Unicode normal form) can hash apart, so
  :func:`drop_held_out` drops a training row whose prompt matches a held-out one either way.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import random
import unicodedata
from typing import Any, Callable, Sequence

import numpy as np

from jaxrl.text import chat

#: The most bytes the answer table of one split may take when ``answer_bytes`` exceeds the
#: longest answer of the rows (more than that is padding nobody reads).
MAX_TABLE_BYTES = 256 << 20

# ---------------------------------------------------------------------------------------
# Reading
# ---------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class BadLine:
    """A JSONL line that is no JSON object (kept in place so row numbers stay the file's)."""

    reason: str


def read_rows(path: str) -> list[Any]:
    """The records of ``path`` (``.jsonl``/``.json`` lines, ``.parquet``, ``.arrow``, or a
    directory: :func:`read_saved`), in file order.

    A JSONL line that is not valid JSON becomes a :class:`BadLine` (counted by
    :func:`encode_rows`); blank lines are skipped. Missing file: ``FileNotFoundError``; a
    missing optional reader: ``ImportError`` naming the extra to install.
    """
    path = os.fspath(path)
    if not os.path.exists(path):
        raise FileNotFoundError(f"{path}: file not found")
    if os.path.isdir(path):
        return read_saved(path)
    if not os.path.isfile(path):  # a FIFO or a device would block or never end
        raise FileNotFoundError(f"{path}: not a regular file")
    if path.endswith(".parquet"):
        return _parquet(path, "pip install 'jaxrl[parquet]'")
    if path.endswith(".arrow"):
        return _arrow(path)
    rows: list[Any] = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if not line.strip():
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                rows.append(BadLine("invalid JSON"))
            except RecursionError:
                rows.append(BadLine("JSON nested too deeply"))
    return rows


#: What to install for a dataset saved on disk (``datasets`` brings ``pyarrow``).
DATASETS_HINT = "pip install 'jaxrl[datasets]'"


def _pyarrow(path: str, hint: str):
    try:
        import pyarrow
        import pyarrow.ipc  # noqa: F401
        import pyarrow.parquet  # noqa: F401
    except ImportError:
        raise ImportError(f"{path}: reading it needs pyarrow: {hint}") from None
    return pyarrow


def _parquet(path: str, hint: str) -> list[dict]:
    pa = _pyarrow(path, hint)
    return pa.parquet.read_table(path).to_pylist()


def _arrow(path: str) -> list[dict]:
    """An Arrow IPC file's records: the streaming format ``save_to_disk`` writes, or the
    random-access file format."""
    pa = _pyarrow(path, DATASETS_HINT)
    try:
        with pa.memory_map(path) as f:
            return pa.ipc.open_stream(f).read_all().to_pylist()
    except pa.ArrowInvalid:
        try:
            with pa.memory_map(path) as f:
                return pa.ipc.open_file(f).read_all().to_pylist()
        except pa.ArrowInvalid as exc:
            raise ValueError(f"{path}: not an Arrow file ({exc})") from None


def read_saved(path: str) -> list[dict]:
    """The records of a dataset saved on disk, in order: a ``Dataset.save_to_disk`` directory
    (``state.json`` and its Arrow shards; read with ``datasets.load_from_disk`` when
    ``datasets`` is installed, else the shards ``state.json`` lists with ``pyarrow``, the same
    rows), or a directory of ``*.arrow`` or ``*.parquet`` shards (read in name order). A
    ``DatasetDict`` directory is a ``ValueError`` naming its splits (give one split's
    directory); nothing is downloaded."""
    names = sorted(os.listdir(path))
    if "dataset_dict.json" in names:
        splits = [n for n in names if os.path.isfile(os.path.join(path, n, "state.json"))]
        raise ValueError(f"{path}: a DatasetDict (splits: {', '.join(splits) or 'none'}); give one split's directory, "
                         f"e.g. {os.path.join(path, splits[0] if splits else 'train')}")
    if "state.json" in names:
        try:
            import datasets
        except ImportError:
            return _saved_with_pyarrow(path)
        loaded = datasets.load_from_disk(path)
        return loaded.to_list()
    arrow = [n for n in names if n.endswith(".arrow")]
    parquet = [n for n in names if n.endswith(".parquet")]
    if arrow and parquet:
        raise ValueError(f"{path}: holds both .arrow and .parquet shards; keep one format")
    if not (arrow or parquet):
        raise ValueError(f"{path}: a directory with no state.json (Dataset.save_to_disk), .arrow or .parquet shards")
    rows: list = []
    for name in arrow or parquet:
        full = os.path.join(path, name)
        rows += _arrow(full) if arrow else _parquet(full, DATASETS_HINT)
    return rows


def _saved_with_pyarrow(path: str) -> list[dict]:
    """A ``save_to_disk`` directory read with pyarrow alone: the Arrow shards ``state.json``
    lists under ``_data_files``, in that order."""
    _pyarrow(path, DATASETS_HINT)
    with open(os.path.join(path, "state.json"), encoding="utf-8") as f:
        try:
            files = [entry["filename"] for entry in json.load(f)["_data_files"]]
        except (json.JSONDecodeError, KeyError, TypeError):
            raise ValueError(f"{path}: state.json lists no _data_files (not a Dataset.save_to_disk directory)") from None
    rows: list = []
    for name in files:
        full = os.path.join(path, os.path.basename(str(name)))  # no path outside the directory
        if not os.path.isfile(full):
            raise FileNotFoundError(f"{full}: listed in {path}/state.json, not found")
        rows += _arrow(full)
    return rows


def is_held_out(prompt: str, every: int) -> bool:
    """The hash rule: ``prompt`` (its UTF-8 text) belongs to the held-out split iff its
    8-byte BLAKE2b digest, as a little-endian integer, is ``0 mod every``."""
    digest = hashlib.blake2b(prompt.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "little") % every == 0


def prompt_key(prompt: str) -> str:
    """The form in which two prompts count as the same one across the training / held-out
    split: NFKC-normalised, case-folded (then NFKC again, as Unicode advises for caseless
    matching) and stripped of leading and trailing white space. ``"What is 2+2? "``,
    ``"what is 2+2?"`` and ``"Ｗhat is 2+2?"`` (a full-width W) have one key."""
    return unicodedata.normalize("NFKC", unicodedata.normalize("NFKC", prompt).casefold()).strip()


#: The reason a training row whose prompt is a held-out prompt is dropped (:func:`drop_held_out`).
HELD_OUT_DUPLICATE = "prompt also held out"
HELD_OUT_NEAR_DUPLICATE = "prompt a near-duplicate of a held-out one (case, spaces or Unicode form)"


def drop_held_out(train: Sequence[Any], held: Sequence[Any], prompt_column: str = "prompt",
                  exact: str = HELD_OUT_DUPLICATE) -> list:
    """``train`` with every row whose prompt is also a prompt of ``held`` replaced by a
    :class:`BadLine` (counted by :func:`encode_rows`, never trained on, so the held-out score
    is not inflated by rows the model saw): ``exact`` names the reason of an identical
    prompt, :data:`HELD_OUT_NEAR_DUPLICATE` that of one equal under :func:`prompt_key`."""
    texts = [r.get(prompt_column) if isinstance(r, dict) else None for r in held]
    same = {t for t in texts if isinstance(t, str)}
    near = {prompt_key(t) for t in same}
    out = []
    for row in train:
        text = row.get(prompt_column) if isinstance(row, dict) else None
        if isinstance(text, str) and text in same:
            row = BadLine(exact)
        elif isinstance(text, str) and prompt_key(text) in near:
            row = BadLine(HELD_OUT_NEAR_DUPLICATE)
        out.append(row)
    return out


def held_out_matches(texts: Sequence[Any], held_texts: Sequence[str]) -> list[int]:
    """Indices of the strings of ``texts`` equal to one of ``held_texts`` under :func:`prompt_key`."""
    keys = {prompt_key(t) for t in held_texts}
    return [i for i, t in enumerate(texts) if isinstance(t, str) and prompt_key(t) in keys]


class HeldOutOverlap(ValueError):
    """Rows meant for training hold prompts of the held-out split (:func:`held_out_matches`):
    ``count`` of ``total`` rows, the first of them row ``first_row`` (1-based) with prompt
    ``first``. The message is one line."""

    def __init__(self, source: str, count: int, total: int, first_row: int, first: str):
        self.count, self.total, self.first_row, self.first = count, total, first_row, first
        example = first if len(first) <= 60 else first[:57] + "..."
        super().__init__(f"{source}: {count} of {total} rows have a prompt of the held-out split (equal after stripping, "
                         f"case-folding and NFKC; the first: row {first_row}, {example!r}); training on them inflates "
                         "the held-out score")


def split_rows(rows: Sequence[Any], every: int, prompt_column: str = "prompt") -> tuple[list, list]:
    """``(train, held_out)`` rows of ``rows`` by :func:`is_held_out` of their prompt text
    (rows with no string prompt stay in train, where :func:`encode_rows` counts them)."""
    if every < 2:
        raise ValueError(f"held_out_every: the hash rule needs k >= 2, got {every}")
    train, held = [], []
    for row in rows:
        text = row.get(prompt_column) if isinstance(row, dict) else None
        (held if isinstance(text, str) and is_held_out(text, every) else train).append(row)
    return train, held


# ---------------------------------------------------------------------------------------
# Encoding
# ---------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Columns:
    """The field names of a row."""

    prompt: str = "prompt"
    answer: str = "answer"
    completion: str = "completion"
    answer_after: str = ""  # the answer is the text after the last such marker (GSM8K: "####"); "": all of it


def _answer(text: str, after: str) -> str:
    """The reference answer in a row's answer text: all of it, or the part after the last
    ``after`` marker, stripped (GSM8K's "reasoning ... #### 72" gives "72")."""
    if not after:
        return text
    if after not in text:
        raise _Bad(f"answer has no {after!r}")
    return text.rsplit(after, 1)[1].strip()


@dataclasses.dataclass(frozen=True)
class RowReport:
    """What :func:`encode_rows` kept and dropped from one source."""

    source: str  # the file (or generator) the rows came from
    total: int  # rows read
    kept: int  # rows encoded
    bad: tuple[tuple[str, int, int], ...] = ()  # (reason, count, first row number, 1-based) per reason

    @property
    def counts(self) -> dict[str, int]:
        """``{reason: rows dropped for it}``."""
        return {reason: n for reason, n, _ in self.bad}

    def summary(self) -> str:
        """One line: ``source: N rows, K kept, B bad (reason: n, first row r; ...)``."""
        line = f"{self.source}: {self.total} rows, {self.kept} kept"
        if self.bad:
            dropped = self.total - self.kept
            line += f", {dropped} bad (" + "; ".join(f"{r}: {n}, first row {i}" for r, n, i in self.bad) + ")"
        return line


@dataclasses.dataclass(frozen=True)
class Encoded:
    """One split's arrays (numpy, N good rows) and what was dropped."""

    prompts: np.ndarray  # int32 [N, prompt_len], left-padded with pad_id
    answers: np.ndarray  # int32 [N, answer_bytes], UTF-8 bytes of the answer, 0 after
    answer_lens: np.ndarray  # int32 [N], answer bytes
    completions: np.ndarray | None  # int32 [N, completion_len]: tokens, eos, pad_id after (or None)
    texts: tuple[str, ...]  # the prompts' user text (before the chat template)
    extras: dict  # column -> list of values of the other columns (None where a row lacks it)
    report: RowReport
    fields: tuple[dict, ...] = ()  # per row, every field but the prompt and completion columns (a Python reward's columns)

    def __len__(self) -> int:
        return int(self.prompts.shape[0])


class _Bad(Exception):
    """A row is dropped for ``reason``."""


def _text(row: Any, column: str) -> str:
    if isinstance(row, BadLine):
        raise _Bad(row.reason)
    if not isinstance(row, dict):
        raise _Bad("not a JSON object")
    if column not in row or row[column] is None:
        raise _Bad(f"missing {column!r}")
    if not isinstance(row[column], str):
        raise _Bad(f"{column!r} not a string")
    return row[column]


def _left_pad(ids: Sequence[int], width: int, pad_id: int) -> np.ndarray:
    out = np.full((width,), pad_id, np.int32)
    if ids:
        out[width - len(ids):] = ids
    return out


def encode_rows(
    rows: Sequence[Any],
    tokenizer: Any,
    *,
    prompt_len: int,
    answer_bytes: int,
    completion_len: int | None = None,
    chat_template: bool = True,
    system_prompt: str = "",
    columns: Columns = Columns(),
    solver: Callable[[dict], str] | None = None,
    source: str = "<rows>",
    allow_empty: bool = False,
) -> Encoded:
    """``rows`` as fixed-shape arrays (module docstring), in the ids of ``tokenizer`` (a
    :class:`jaxrl.models.lm.Tokenizer`, whose ``pad_token`` / ``eos_token`` are used).

    ``completion_len``: also encode reference completions, from ``solver(row)`` or else the
    ``columns.completion`` field; ``None``: none. ``source`` names the rows in the report and
    in errors. Raises ``ValueError`` when no row is good (unless ``allow_empty``).
    """
    pad_id, eos_id = special_ids(tokenizer, source)
    template = chat.chat_template(tokenizer, source) if chat_template else None
    specials = chat.special_strings(tokenizer)
    prompts, answers, lens, completions, texts, kept = [], [], [], [], [], []
    bad: dict[str, list[int]] = {}
    for number, row in enumerate(rows, start=1):
        try:
            text = _text(row, columns.prompt)
            answer = _answer(_text(row, columns.answer), columns.answer_after).encode("utf-8")
            completion = None if completion_len is None else (solver(row) if solver else _text(row, columns.completion))
            rendered = chat.render_prompt(template, specials, text, system_prompt) if template is not None else text
            ids = tokenizer.encode(rendered)
            if len(ids) > prompt_len:
                raise _Bad(f"prompt longer than {prompt_len} tokens")
            if pad_id in ids:
                raise _Bad("prompt contains the pad token")
            if len(answer) > answer_bytes:
                raise _Bad(f"answer longer than {answer_bytes} bytes")
            if completion is not None:
                cids = tokenizer.encode(completion) + [eos_id]
                if len(cids) > completion_len:
                    raise _Bad(f"completion longer than {completion_len - 1} tokens (+ eos)")
                completions.append(np.asarray(cids + [pad_id] * (completion_len - len(cids)), np.int32))
        except _Bad as exc:
            bad.setdefault(str(exc), []).append(number)
            continue
        prompts.append(_left_pad(ids, prompt_len, pad_id))
        answers.append(answer)
        lens.append(len(answer))
        texts.append(text)
        kept.append(row)
    report = RowReport(source, len(rows), len(kept), tuple((r, len(ns), ns[0]) for r, ns in bad.items()))
    if not kept and not allow_empty:
        raise ValueError(f"{source}: no usable row ({report.summary()})")
    answer_table = _answer_table(answers, answer_bytes, source)
    named = {columns.prompt, columns.answer, columns.completion}
    extra_names = sorted({k for row in kept for k in row} - named)
    return Encoded(
        np.asarray(prompts, np.int32).reshape(len(kept), prompt_len),
        answer_table,
        np.asarray(lens, np.int32),
        None if completion_len is None else np.asarray(completions, np.int32).reshape(len(kept), completion_len),
        tuple(texts),
        {k: [row.get(k) for row in kept] for k in extra_names},
        report,
        tuple({k: v for k, v in row.items() if k not in (columns.prompt, columns.completion)} for row in kept),
    )


def _answer_table(answers: list[bytes], width: int, source: str) -> np.ndarray:
    """int32 ``[N, width]``: the answers' bytes, 0 after; refused (before allocating) when
    ``width`` is above the longest answer and the table would pass :data:`MAX_TABLE_BYTES`."""
    longest = max((len(a) for a in answers), default=0)
    size = 4 * len(answers) * width
    if width > longest and size > MAX_TABLE_BYTES:
        raise ValueError(f"answer_bytes: {width:,} bytes x {len(answers):,} rows of {source} make a {size / 2**20:,.0f} MiB "
                         f"table, but the longest answer there is {longest:,} bytes; set answer_bytes near that")
    table = np.zeros((len(answers), width), np.int32)
    for i, a in enumerate(answers):
        table[i, : len(a)] = np.frombuffer(a, np.uint8)
    return table


def distinct_rows(seed: int, count: int, draw: Callable[[random.Random], dict]) -> list[dict]:
    """``count`` rows of a procedural generator, distinct by ``prompt``: ``draw(rng)`` makes one
    row from a ``random.Random(seed)`` (plain Python: the same rows on every machine); gives up
    after ``50 * count`` draws (fewer rows when the generator has fewer distinct prompts)."""
    rng = random.Random(seed)
    rows, seen = [], set()
    for _ in range(count * 50):
        if len(rows) == count:
            break
        row = draw(rng)
        if row["prompt"] not in seen:
            seen.add(row["prompt"])
            rows.append(row)
    return rows


def special_ids(tokenizer: Any, source: str = "the tokenizer") -> tuple[int, int]:
    """``(pad_id, eos_id)`` of a loaded tokenizer, checked: both named in its config, in its
    vocabulary, and different (the end of a turn must be visible to the model)."""
    eos, pad = tokenizer.special_tokens.get("eos_token"), tokenizer.special_tokens.get("pad_token")
    if eos is None or tokenizer.token_id(eos) is None:
        raise ValueError(f"{source}: tokenizer_config.json names no eos_token in the vocabulary (the end of a turn)")
    if pad is None or tokenizer.token_id(pad) is None:
        raise ValueError(f"{source}: tokenizer_config.json names no pad_token in the vocabulary (prompts are left-padded with it)")
    if pad == eos:
        raise ValueError(f"{source}: pad_token and eos_token are both {pad!r}; the end of a turn must be visible to the model")
    return int(tokenizer.token_id(pad)), int(tokenizer.token_id(eos))


def model_vocab_size(path: str, tokenizer: Any) -> int:
    """The model's vocabulary at tokenizer directory ``path``: ``config.json``'s
    ``vocab_size`` when the directory has one (it may exceed the tokenizer's), else the
    tokenizer's own size."""
    from jaxrl.models.lm.load import read_json

    config = read_json(os.path.join(os.fspath(path), "config.json"), required=False)  # regular files only
    if config is None or config.get("vocab_size") is None:
        return int(tokenizer.vocab_size)
    vocab = config["vocab_size"]
    if isinstance(vocab, bool) or not isinstance(vocab, (int, float)) or not math.isfinite(vocab) or vocab != int(vocab) or vocab < 1:
        raise ValueError(f"{os.path.join(os.fspath(path), 'config.json')}: key 'vocab_size' must be a positive integer, got {vocab!r}")
    return int(vocab)


__all__ = [
    "DATASETS_HINT", "HELD_OUT_DUPLICATE", "HELD_OUT_NEAR_DUPLICATE", "BadLine", "HeldOutOverlap", "Columns", "Encoded", "RowReport",
    "distinct_rows", "drop_held_out", "encode_rows", "held_out_matches", "is_held_out", "model_vocab_size", "prompt_key",
    "read_rows", "read_saved", "special_ids", "split_rows",
]
