"""The rubric of ``env.text.reward``: a YAML-able dict made one bounded verifier over a completion's bytes.

:func:`rubric` checks the dict's keys and values and builds a :class:`jaxrl.verifiers.Verifier`
whose score runs as one scan over the bytes (:func:`jaxrl.text.onepass.scan_rubric_score`),
equal to the rules of :mod:`jaxrl.text.verifiers` composed (``reference.rubric`` states it in
plain Python). It sits above both: the byte rules below, the one-pass scan between.
"""

from __future__ import annotations

import functools

from jaxrl import verifiers as V
from jaxrl.text.bytes import ByteTable
from jaxrl.text.onepass import scan_rubric_score

#: The keys of a rubric dict (``env.text.reward``).
RUBRIC_KEYS = ("answer", "extract", "tag", "format_weight", "gate_format", "power", "length_penalty", "format_tags")


def rubric(spec: dict, table: ByteTable, max_bytes: int | None = None) -> V.Verifier:
    """The reward of ``env.text.reward`` (a YAML-able dict), built with jaxrl.verifiers' combinators.

    Keys (defaults): ``answer`` numeric | exact | similarity (numeric); ``extract``
    answer_tag | boxed | last_number | whole | auto (auto: the tag's region, else the boxed
    one, else the whole text); ``tag`` (answer); ``format_tags`` (``[tag]``);
    ``format_weight`` (0); ``gate_format`` (false); ``power`` (1);
    ``length_penalty: {target: 0, weight: 0}``. Reward = ``score ** power`` (0 when gated
    and the format fails) ``+ format_weight * format - weight * max(0, bytes - target)``,
    clipped to ``[0, 1 + format_weight]``. Metrics: ``correct``, ``format``,
    ``similarity`` (similarity only), ``completion_bytes``. Python: ``reference.rubric``.
    """
    unknown = set(spec) - set(RUBRIC_KEYS)
    if unknown:
        raise ValueError(f"unknown rubric keys {sorted(unknown)}; known: {RUBRIC_KEYS}")
    kind, how, tag = spec.get("answer", "numeric"), spec.get("extract", "auto"), str(spec.get("tag", "answer"))
    tags = tuple(str(t) for t in spec.get("format_tags", (tag,)))
    fw, p = float(spec.get("format_weight", 0.0)), float(spec.get("power", 1.0))
    if fw < 0:
        raise ValueError(f"format_weight must be >= 0, got {fw}")
    if kind not in ("numeric", "exact", "similarity"):
        raise ValueError(f"answer must be numeric, exact or similarity, got {kind!r}")
    if how not in ("answer_tag", "boxed", "last_number", "whole", "auto"):
        raise ValueError(f"extract must be answer_tag, boxed, last_number, whole or auto, got {how!r}")
    for t in tags + (tag,):
        if "<" in t or ">" in t:
            raise ValueError(f"tag names may not contain '<' or '>', got {t!r}")
    if p <= 0:
        raise ValueError(f"power must be > 0, got {p}")
    lp = spec.get("length_penalty") or {}
    score = functools.partial(scan_rubric_score, table, max_bytes, kind, how, tag, tags, fw, p,
                              bool(spec.get("gate_format", False)), int(lp.get("target", 0)), float(lp.get("weight", 0.0)))
    return V.Verifier(score, 0.0, 1.0 + fw)


__all__ = ["RUBRIC_KEYS", "rubric"]
