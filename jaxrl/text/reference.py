"""The byte verifiers' rules in plain Python (bytes, ``re``, ``difflib``): references and the host peer.

Each function here states one rule of :mod:`jaxrl.text.verifiers` the way a TRL reward
function or a verifiers rubric would: a Python function per completion, on its decoded
bytes. They share no code with the JAX versions: the tests compare the two on random and
adversarial inputs, and ``bench/text_scoring.py`` times them against each other.

Rules (ASCII only; other bytes are ordinary characters):

* whitespace = the bytes ``b" \\t\\n\\r\\x0b\\x0c"``; ``normalize(x)`` = ``x`` lower-cased
  (A-Z only), stripped, each inner whitespace run replaced by one space.
* a *number* is found in a maximal run of ``[0-9.,]`` bytes: leading commas and trailing
  commas/dots are dropped (sentence punctuation), and what is left must contain a digit and
  match ``(\\d{1,3}(,\\d{3})+|\\d*)(\\.\\d+)?``; it is negative when the byte right before it is
  ``-``. Its canonical form: sign (none for zero), integer digits without commas and leading
  zeros (``0`` when none are left), then ``.`` and the fraction without trailing zeros if
  any remain: ``0.50``, ``.5``, ``0.5`` -> ``0.5``; ``1,000`` -> ``1000``; ``-0`` -> ``0``.
* ``<tag>`` region: from the end of the first ``<tag>`` to the first ``</tag>`` after it;
  ``\\boxed{`` region: after the last ``\\boxed{`` to its matching ``}`` (braces balanced).
"""

from __future__ import annotations

import difflib
import re

WHITESPACE = b" \t\n\r\x0b\x0c"
_RUN = re.compile(rb"[0-9.,]+")
_GRAMMAR = re.compile(rb"(?:\d{1,3}(?:,\d{3})+|\d*)(?:\.\d+)?")


def normalize(x: bytes) -> bytes:
    """Lower-case A-Z, strip whitespace, collapse inner whitespace runs to one space."""
    return b" ".join(x.lower().split())


def exact(x: bytes, answer: bytes) -> bool:
    return normalize(x) == normalize(answer)


def numbers(x: bytes) -> list[bytes]:
    """Every number of ``x`` in order, each in canonical form."""
    out = []
    for m in _RUN.finditer(x):
        run = m.group()
        body = run.lstrip(b",").rstrip(b".,")
        start = m.start() + (len(run) - len(run.lstrip(b",")))
        if not re.search(rb"\d", body) or not _GRAMMAR.fullmatch(body):
            continue
        negative = start > 0 and x[start - 1 : start] == b"-"
        whole, _, frac = body.replace(b",", b"").partition(b".")
        whole, frac = whole.lstrip(b"0"), frac.rstrip(b"0")
        canon = (whole or b"0") + (b"." + frac if frac else b"")
        zero = not (whole + frac).strip(b"0")
        out.append((b"-" if negative and not zero else b"") + canon)
    return out


def last_number(x: bytes) -> bytes | None:
    found = numbers(x)
    return found[-1] if found else None


def numeric_equal(x: bytes, answer: bytes) -> bool:
    """The last number of ``x`` equals the last number of ``answer`` (canonical forms)."""
    got, want = last_number(x), last_number(answer)
    return got is not None and got == want


def tag_region(x: bytes, tag: str = "answer") -> bytes | None:
    m = re.search(b"<" + re.escape(tag.encode()) + b">(.*?)</" + re.escape(tag.encode()) + b">", x, re.DOTALL)
    return m.group(1) if m else None


def boxed_region(x: bytes) -> bytes | None:
    start = x.rfind(b"\\boxed{")
    if start < 0:
        return None
    depth, i = 1, start + len(b"\\boxed{")
    for j in range(i, len(x)):
        depth += {ord("{"): 1, ord("}"): -1}.get(x[j], 0)
        if depth == 0:
            return x[i:j]
    return None


def extract(x: bytes, how: str, answer: str, tag: str = "answer") -> bytes | None:
    """The region the answer is read from (None: nothing to read)."""
    if how == "answer_tag":
        return tag_region(x, tag)
    if how == "boxed":
        return boxed_region(x)
    if how in ("last_number", "whole"):
        return x
    if how == "auto":
        for region in (tag_region(x, tag), boxed_region(x)):
            if region is not None:
                return region
        return x
    raise ValueError(f"unknown extract {how!r}")


def format_ok(x: bytes, tags=("answer",)) -> bool:
    """Each ``<t>``/``</t>`` exactly once, open before close, tags in order, only whitespace after."""
    pos = 0
    for t in tags:
        op, cl = f"<{t}>".encode(), f"</{t}>".encode()
        if x.count(op) != 1 or x.count(cl) != 1:
            return False
        o, c = x.find(op), x.find(cl)
        if o < pos or c < o + len(op):
            return False
        pos = c + len(cl)
    return not x[pos:].strip(WHITESPACE)


def length_penalty(n: int, target: int, weight: float) -> float:
    return weight * max(0, n - target)


def ratio(a: bytes, b: bytes) -> float:
    """``difflib.SequenceMatcher(None, a, b, autojunk=False).ratio()`` on the bytes."""
    return difflib.SequenceMatcher(None, a, b, autojunk=False).ratio()


def rubric(spec: dict, x: bytes, answer: bytes) -> tuple[float, dict]:
    """The reward :func:`jaxrl.text.rubric.rubric` gives ``x``, and its metrics (floats).

    ``score`` = correct (numeric / exact) or the ratio (similarity), 0 when the format is
    gated and fails; reward = ``score ** power + format_weight * format``, minus the length
    penalty, floored at 0.
    """
    how, kind, tag = spec.get("extract", "auto"), spec.get("answer", "numeric"), spec.get("tag", "answer")
    region = extract(x, how, kind, tag)
    metrics = {"completion_bytes": float(len(x))}
    if kind == "numeric":
        correct = region is not None and numeric_equal(region, answer)
        score = float(correct)
    elif kind == "exact":
        correct = region is not None and exact(region, answer)
        score = float(correct)
    elif kind == "similarity":
        sim = ratio(region, answer) if region is not None else 0.0
        correct, score = region is not None and region == answer, sim
        metrics["similarity"] = sim
    else:
        raise ValueError(f"unknown answer kind {kind!r}")
    fmt = format_ok(x, tuple(spec.get("format_tags", (tag,))))
    if spec.get("gate_format", False) and not fmt:
        score = 0.0
    fw = float(spec.get("format_weight", 0.0))
    reward = score ** float(spec.get("power", 1.0)) + fw * float(fmt)
    lp = spec.get("length_penalty") or {}
    reward = max(0.0, reward - length_penalty(len(x), int(lp.get("target", 0)), float(lp.get("weight", 0.0))))
    metrics.update(correct=float(correct), format=float(fmt))
    return reward, metrics
