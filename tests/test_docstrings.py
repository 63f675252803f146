"""Docstrings say what and why; measurements live in ``docs/`` and ``bench/results/``.

Walks every module under ``jaxrl/`` (parsed, not imported) and fails when a module
docstring is longer than ``MAX_MODULE_DOCSTRING_LINES`` or when a docstring or comment reads
like a measurement: a duration (``1.3 ms``, ``0.54 s``), a rate (``24 M steps/s``), a speed-up
(``10x faster``, ``3.8×``), a share of a whole (``12% of``) or the machine it was taken on
(``2-core``). Such text goes stale the day the code changes; it belongs in
``docs/performance.md`` (or the topic's docs page) with where and how it was measured.
That every module docstring opens with one sentence naming the module's concept is checked
with the rest of the module rule in ``tests/test_layers.py``.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "jaxrl"
MAX_MODULE_DOCSTRING_LINES = 25

#: Each pattern names one kind of measurement. Units are matched only right after a number,
#: so "2 s" and "1.3 ms" match while "32 steps" or "float32s" do not.
TIMING_PATTERNS = {
    "duration": re.compile(r"(?<![\w.])\d+(?:[.,]\d+)*\s*(?:ms|µs|us|ns|s|secs?|seconds?|minutes?|min)\b(?!/)"),
    "rate": re.compile(r"\d[\d.,]*\s*[kMG]?\s*(?:env\s+)?(?:steps|tokens|tok|updates|frames|samples|sequences)/s\b"),
    "speed-up": re.compile(r"(?:\d\s*[x×]\s*(?:faster|slower|cheaper|quicker|the)\b|\bspeed-?ups?\b|\d(?:\.\d+)?\s*×)", re.I),
    "share": re.compile(r"~\s*\d[\d.]*\s*%|\d\s*%\s*(?:of|faster|slower|cheaper|overhead|less|more|fewer)\b|\bby\s+\d[\d.]*\s*%"),
    "machine": re.compile(r"\b\d+-core\b|\bdev(?:elopment)? box\b|\bquiet machine\b"),
    "cpu time": re.compile(r"\bCPU[- ]s(?:econds)?\b"),
}

#: "path: module docstring" or "path:line" entries excused from the checks; kept empty —
#: move the text to ``docs/`` instead of adding an entry.
ALLOWED: set[str] = set()


def _modules() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def _rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def _docstrings(tree: ast.Module):
    """Yield ``(line, text)`` for the module's and every class's and function's docstring."""
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                if isinstance(body[0].value.value, str):
                    yield body[0].lineno, body[0].value.value


def _comments(source: str):
    """Yield ``(line, text)`` for every ``#`` comment."""
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            yield tok.start[0], tok.string


def measurement_lines(source: str) -> list[tuple[int, str, str]]:
    """``(line, pattern name, text)`` for every docstring or comment line that reads like a
    measurement; docstring lines are numbered from the docstring's first line."""
    found = []
    texts = list(_docstrings(ast.parse(source))) + list(_comments(source))
    for start, text in texts:
        for offset, line in enumerate(text.splitlines()):
            for name, pattern in TIMING_PATTERNS.items():
                if pattern.search(line):
                    found.append((start + offset, name, line.strip()))
                    break
    return sorted(found)


def test_walks_the_whole_package():
    names = {_rel(p) for p in _modules()}
    assert "jaxrl/core/vector.py" in names and "jaxrl/algos/common/batching.py" in names


@pytest.mark.parametrize(
    "text",
    [
        "1.3 ms at N=65,536",
        "compile took 0.54 s",
        "(10 µs and 120 µs)",
        "runs 24 M steps/s",
        "~10x cheaper at N=16,384",
        "2 x faster",
        "a 3.8× speed-up",
        "~12% of a step",
        "cut the compile time by 40% and",
        "(~20%)",
        "on the 2-core CPU",
        "11.6 CPU-s of the total",
        "in 5 min",
    ],
)
def test_patterns_catch_measurements(text):
    assert measurement_lines(f'"""{text}"""\n'), text
    assert measurement_lines(f"x = 1  # {text}\n"), text


@pytest.mark.parametrize(
    "text",
    [
        "float32 ``[N, 4]``, 32 steps per call",
        "rewards in [0, 1]; 1 iff exact",
        "int32s and uint32 words, bits 0..j set",
        "a 2x2 matrix; dims x, y",
        "fraction of groups with a zero reward spread, in [0, 1]",
        "max_steps: 500 steps, then truncated",
        "minibatches of 64 sequences",
        "a Student-t 95% CI of the mean",
        "steps_per_second: env steps/s of the random rollout",
    ],
)
def test_patterns_spare_shapes_and_units(text):
    assert not measurement_lines(f'"""{text}"""\n'), text


def test_module_docstrings_are_short():
    long = []
    for path in _modules():
        doc = ast.get_docstring(ast.parse(path.read_text()), clean=False) or ""
        lines = len(doc.strip().splitlines())
        key = f"{_rel(path)}: module docstring"
        if lines > MAX_MODULE_DOCSTRING_LINES and key not in ALLOWED:
            long.append(f"{key} has {lines} lines (max {MAX_MODULE_DOCSTRING_LINES}): move the rest to docs/")
    assert not long, "\n".join(long)


def test_no_measurements_in_docstrings_or_comments():
    bad = []
    for path in _modules():
        for line, name, text in measurement_lines(path.read_text()):
            if f"{_rel(path)}:{line}" not in ALLOWED:
                bad.append(f"{_rel(path)}:{line}: {name}: {text}")
    assert not bad, "measurements belong in docs/performance.md:\n" + "\n".join(bad)


def test_allow_list_is_current():
    """An allow-list entry that no longer matches anything must be deleted."""
    live = set()
    for path in _modules():
        source = path.read_text()
        doc = ast.get_docstring(ast.parse(source), clean=False) or ""
        if len(doc.strip().splitlines()) > MAX_MODULE_DOCSTRING_LINES:
            live.add(f"{_rel(path)}: module docstring")
        live.update(f"{_rel(path)}:{line}" for line, _, _ in measurement_lines(source))
    stale = sorted(set(ALLOWED) - live)
    assert not stale, f"stale entries in ALLOWED: {stale}"
