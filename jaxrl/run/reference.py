"""The config reference: every run-config key with its type, default and one-line meaning.

The meaning is the comment written next to (or just above) the field in its config class,
so the classes stay the one source: ``jaxrl config ALGO`` prints the keys of a run of
``ALGO`` and ``docs/config_reference.md`` is generated from the same rows
(``python -m jaxrl.run.reference > docs/config_reference.md``; a test checks it is current).
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import inspect
import io
import sys
import tokenize
import typing
from typing import NamedTuple

from jaxrl.run import config as config_lib

#: Algorithms the generated docs page covers (plugins print theirs with ``jaxrl config``).
DOCUMENTED_ALGOS = ("ppo", "grpo", "dqn", "pqn", "sac", "sft", "mappo", "ippo")


class Row(NamedTuple):
    key: str  # dotted YAML key, e.g. "train.stop_at.metric"
    type: str
    default: str  # "required" when the field has no default
    meaning: str


@functools.lru_cache(maxsize=None)
def field_comments(cls) -> dict[str, str]:
    """``{field: comment}`` from the sources of ``cls`` and the classes it inherits fields
    from (the nearest definition wins): the comment on the field's line, else the comment
    lines right above it."""
    out: dict[str, str] = {}
    for klass in reversed([k for k in getattr(cls, "__mro__", (cls,)) if k is not object]):
        out.update({k: v for k, v in _own_field_comments(klass).items() if v or k not in out})
    return out


def _own_field_comments(cls) -> dict[str, str]:
    try:
        source = inspect.getsource(cls)
    except (OSError, TypeError):
        return {}
    comments: dict[int, str] = {}
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            comments[tok.start[0]] = tok.string.lstrip("#").strip()
    lines = source.splitlines()
    out = {}
    for node in ast.parse(source).body[0].body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            line = node.end_lineno
            text = comments.get(line) if line in comments and lines[line - 1].lstrip()[:1] != "#" else None
            if text is None:
                above, j = [], node.lineno - 1
                while j in comments and lines[j - 1].lstrip().startswith("#"):
                    above.insert(0, comments[j])
                    j -= 1
                text = " ".join(above)
            out[node.target.id] = text
    return out


def _type_text(tp) -> str:
    if tp is type(None):
        return "null"
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is typing.Literal:
        return " | ".join(repr(a) for a in args)
    if origin in (typing.Union, getattr(__import__("types"), "UnionType")):
        return " | ".join(_type_text(a) for a in args)
    if origin is tuple:
        return f"list[{_type_text(args[0])}]" if len(args) == 2 and args[1] is Ellipsis else "list"
    if dataclasses.is_dataclass(tp):
        return "section"
    return getattr(tp, "__name__", str(tp))


def _default_text(field: dataclasses.Field) -> str:
    if field.default is not dataclasses.MISSING:
        value = field.default
    elif field.default_factory is not dataclasses.MISSING:
        value = field.default_factory()
    else:
        return "required"
    if dataclasses.is_dataclass(value):
        return "(section)"
    if isinstance(value, tuple):
        value = list(value)
    return "null" if value is None else repr(value) if isinstance(value, str) else str(value).replace("True", "true").replace("False", "false")


def _summary(cls) -> str:
    """The first line of a config class's docstring (what its section is for)."""
    doc = inspect.getdoc(cls) or ""
    return doc.splitlines()[0] if doc and not doc.startswith(cls.__name__ + "(") else ""


def rows(cls, prefix: str) -> list[Row]:
    """One row per field of the config dataclass ``cls`` (nested sections expanded)."""
    hints = typing.get_type_hints(cls)
    comments = field_comments(cls)
    out = []
    for field in dataclasses.fields(cls):
        key = f"{prefix}.{field.name}" if prefix else field.name
        tp = hints[field.name]
        nested = [a for a in (typing.get_args(tp) or (tp,)) if dataclasses.is_dataclass(a)]
        meaning = comments.get(field.name, "") or (_summary(nested[0]) if nested else "")
        out.append(Row(key, _type_text(tp), _default_text(field), meaning))
        for sub in nested:
            out.extend(rows(sub, key))
    return out


def run_rows(algo: str) -> list[Row]:
    """Every key of a run of ``algo``: the run's own sections, then ``<algo>.*``."""
    entry = config_lib.algo_entry(algo)
    out = []
    for row in rows(config_lib.RunConfig, ""):
        if row.key == "algo_config":
            out.append(Row(algo, "section", "(section)", f"{algo}'s own settings ({entry.config_cls.__name__})"))
            out.extend(rows(entry.config_cls, algo))
            continue
        out.append(row)
    return out


def text_table(algo: str) -> str:
    """``jaxrl config ALGO``'s output: aligned ``key  type  default  meaning`` lines."""
    table = run_rows(algo)
    wk = max(len(r.key) for r in table)
    wt = min(max(len(r.type) for r in table), 28)
    wd = min(max(len(r.default) for r in table), 18)
    lines = [f"{'key':<{wk}}  {'type':<{wt}}  {'default':<{wd}}  meaning"]
    lines += [f"{r.key:<{wk}}  {r.type:<{wt}}  {r.default:<{wd}}  {r.meaning}".rstrip() for r in table]
    return "\n".join(lines)


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def markdown() -> str:
    """``docs/config_reference.md``: one table per documented algorithm's run."""
    parts = [
        "# Config reference",
        "",
        "Generated from the config classes by `python -m jaxrl.run.reference > docs/config_reference.md`",
        "(`tests/test_reference.py` checks it is current); `jaxrl config ALGO` prints the same keys.",
        "Override any key with `jaxrl train CONFIG --set key=value`.",
    ]
    for algo in DOCUMENTED_ALGOS:
        parts += ["", f"## `algo: {algo}`", "", "| key | type | default | meaning |", "|---|---|---|---|"]
        parts += [f"| `{r.key}` | {_cell(r.type)} | `{_cell(r.default)}` | {_cell(r.meaning)} |" for r in run_rows(algo)]
    return "\n".join(parts) + "\n"


def __getattr__(name: str):
    """``main_config`` moved to :mod:`jaxrl.commands.config` (with a warning)."""
    from jaxrl import _compat

    return _compat.moved_name(__name__, name)


if __name__ == "__main__":
    sys.stdout.write(markdown())
