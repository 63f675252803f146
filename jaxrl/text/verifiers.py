"""Verifiers over bytes: total, bounded, vectorised text rules that compose with jaxrl.verifiers.

Every rule takes byte strings as ``(x uint8[B], n int32[])`` pairs (``x[:n]`` is the text;
``n`` is clipped into ``[0, B]``), is pure and jit/vmap-able, and returns bounded values,
never NaN. The rules, stated once in :mod:`jaxrl.text.reference` (plain Python, the tests'
reference): :func:`normalized_equal` (strip, collapse ASCII whitespace, fold A-Z),
:func:`numeric_equal` over canonical numbers (last number; thousands separators, decimals,
signs; ``0.50 == .5``, ``1,000 == 1000``, ``-0 == 0``), regions (:func:`tag_region`,
:func:`boxed_region`), :func:`format_ok` (each tag once, open before close, in order, only
whitespace after), :func:`sequence_ratio` (difflib's ratio, exactly).

:func:`text_verifier` makes a :class:`jaxrl.verifiers.Verifier` of such a rule (it decodes the
completion with :func:`jaxrl.text.bytes.decode_bytes`; the task's ``answer`` holds the
reference answer's bytes), so ``weighted_sum``, ``gate`` and ``power`` compose them;
:func:`jaxrl.text.rubric.rubric` builds one from a YAML-able dict (``env.text.reward``),
scored in one scan over the bytes (:mod:`jaxrl.text.onepass`, which shares the byte-array
primitives here: :func:`normalize`, :func:`matched_bytes`, ...).
Internally text is int32 with ``-1`` outside ``[0, n)`` (and outside a region), so no
pattern matches across an edge.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from jaxrl import verifiers as V
from jaxrl.text.bytes import ByteTable, decode_bytes

Array = jax.Array
BIG = 2**30
WHITESPACE = (9, 10, 11, 12, 13, 32)


# ---------------------------------------------------------------------------------------
# Byte-array helpers (int32 text, -1 = absent)
# ---------------------------------------------------------------------------------------


def _clean(x: Array, n: Array) -> tuple[Array, Array]:
    """``(c int32[B], n int32[])``: bytes of ``x[:n]`` as int32, -1 after ``n``."""
    x = jnp.asarray(x).astype(jnp.int32) & 0xFF
    n = V.valid_length(n, x.shape[-1])
    return jnp.where(jnp.arange(x.shape[-1]) < n, x, -1), n


def _shift(a: Array, k: int, fill) -> Array:
    """``a[i - k]`` (``k > 0``: right) or ``a[i + |k|]`` (``k < 0``), ``fill`` where out of range."""
    size = a.shape[0]
    if k == 0:
        return a
    pad = jnp.full((min(abs(k), size),), fill, a.dtype)
    return jnp.concatenate([pad, a[: size - k]])[:size] if k > 0 else jnp.concatenate([a[-k:], pad])[:size]


def _find(c: Array, pattern: bytes) -> Array:
    """bool ``[B]``: ``pattern`` starts at each position (inside the present bytes)."""
    hit = jnp.ones(c.shape, bool)
    for k, b in enumerate(pattern):
        hit = hit & (_shift(c, -k, -1) == b)
    return hit


def _first(mask: Array) -> Array:
    """int32 ``[]``: first True index, ``BIG`` when none."""
    return jnp.where(jnp.any(mask), jnp.argmax(mask), BIG).astype(jnp.int32)


def _last(mask: Array) -> Array:
    """int32 ``[]``: last True index, -1 when none."""
    return jnp.max(jnp.where(mask, jnp.arange(mask.shape[0]), -1)).astype(jnp.int32)


def _cummax(x: Array, reverse: bool = False) -> Array:
    return jax.lax.cummax(x, reverse=reverse)


def _cummin(x: Array, reverse: bool = False) -> Array:
    return jax.lax.cummin(x, reverse=reverse)


def equal_kept(c: Array, keep: Array, ref: Array, ref_len: Array) -> Array:
    """bool ``[]``: the kept bytes of ``c``, in order, equal ``ref[:ref_len]`` (compared by rank,
    a gather from the short reference instead of compacting the long text)."""
    rank = jnp.cumsum(keep) - 1
    same = ref[jnp.clip(rank, 0, ref.shape[0] - 1)] == c
    return (jnp.sum(keep) == ref_len) & jnp.all(same | ~keep)


def _compact(values: Array, keep: Array, width: int) -> tuple[Array, Array]:
    """The kept values moved to the front of an int32 ``[width]`` buffer (-1 after), and their count."""
    dest = jnp.where(keep, jnp.cumsum(keep) - 1, width)
    out = jnp.full((width,), -1, jnp.int32).at[dest].set(values.astype(jnp.int32), mode="drop")
    return out, jnp.sum(keep).astype(jnp.int32)


def within(c: Array, start: Array, end: Array) -> Array:
    """``c`` with every byte outside ``[start, end)`` absent (-1)."""
    i = jnp.arange(c.shape[0])
    return jnp.where((i >= start) & (i < end), c, -1)


def _equal_buffers(a: Array, la: Array, b: Array, lb: Array) -> Array:
    width = max(a.shape[0], b.shape[0])
    a = jnp.pad(a, (0, width - a.shape[0]), constant_values=-1)
    b = jnp.pad(b, (0, width - b.shape[0]), constant_values=-1)
    return (la == lb) & jnp.all(a == b)


# ---------------------------------------------------------------------------------------
# Normalised exact match
# ---------------------------------------------------------------------------------------


def normalize(c: Array) -> tuple[Array, Array]:
    """``reference.normalize`` of the present bytes: lower-cased A-Z, stripped, inner runs -> one space."""
    values, keep = normalize_keep(c)
    return _compact(values, keep, c.shape[0])


def normalize_keep(c: Array) -> tuple[Array, Array]:
    """``(values, keep)``: the normalised text is ``values[keep]``."""
    present = c >= 0
    ws = functools.reduce(jnp.logical_or, [c == w for w in WHITESPACE])
    solid = present & ~ws
    i = jnp.arange(c.shape[0])
    solid_before = _shift(_cummax(jnp.where(solid, i, -1)), 1, -1) >= 0
    solid_after = _shift(_cummin(jnp.where(solid, i, BIG), True), -1, BIG) < BIG
    run_start = ws & ~_shift(ws, 1, False)
    keep = solid | (ws & run_start & solid_before & solid_after)
    lower = jnp.where((c >= 65) & (c <= 90), c + 32, c)
    return jnp.where(ws, 32, lower), keep


def normalized_equal(x: Array, n: Array, y: Array, m: Array) -> Array:
    """bool ``[]``: ``normalize(x[:n]) == normalize(y[:m])``.

    ``normalize``: A-Z lower-cased (other bytes untouched), leading and trailing ASCII
    whitespace (space, \\t, \\n, \\r, \\v, \\f) removed, each inner whitespace run replaced by
    one space; Python: ``b" ".join(x.lower().split())``.
    """
    values, keep = normalize_keep(_clean(x, n)[0])
    b, lb = normalize(_clean(y, m)[0])
    return equal_kept(values, keep, b, lb)


# ---------------------------------------------------------------------------------------
# Numbers
# ---------------------------------------------------------------------------------------


def _last_number(c: Array) -> tuple[Array, Array, Array]:
    """The last number of the present bytes: ``(found, keep bool[B], negative)``.

    ``c[keep]`` holds the integer digits (no commas, no leading zeros) and, when a
    fraction is left after dropping trailing zeros, ``.`` and the fraction; ``negative`` is
    False for zero. Grammar: see :mod:`jaxrl.text.reference`.
    """
    size = c.shape[0]
    i = jnp.arange(size)
    isd, com, dot = (c >= 48) & (c <= 57), c == 44, c == 46
    run = isd | com | dot
    begin = run & ~_shift(run, 1, False)
    run_start = _cummax(jnp.where(begin, i, -1))
    last_solid = _cummax(jnp.where(~com, i, -1))
    lead = com & (last_solid < run_start)  # commas opening a run: dropped
    body_start = run & ~lead & ((i == run_start) | _shift(lead, 1, False))
    s_at = _cummax(jnp.where(body_start, i, -1))
    run_end = _cummin(jnp.where(run & ~_shift(run, -1, False), i, BIG), True)
    next_digit = _shift(_cummin(jnp.where(isd, i, BIG), True), -1, BIG)
    end = isd & (next_digit > run_end)  # last digit of its run: trailing . and , dropped
    last_dot = _cummax(jnp.where(dot, i, -1))
    last_com = _shift(_cummax(jnp.where(com, i, -1)), 1, -1)
    group = _shift(isd, -1, False) & _shift(isd, -2, False) & _shift(isd, -3, False) & ~_shift(isd, -4, False)
    bad = com & ~lead & ((last_dot >= s_at) | ~group | ((last_com < s_at) & (i - s_at > 3)))
    in_count = lambda f, s, e: jnp.cumsum(f)[e] - jnp.cumsum(f)[s] + f[s]  # noqa: E731  (f[s..e])
    s_e = s_at  # the body start of the run ending here
    ok = end & (in_count(dot, s_e, i) <= 1) & (in_count(bad, s_e, i) == 0)
    e = _last(ok)
    found = e >= 0
    e = jnp.maximum(e, 0)
    s = jnp.maximum(s_at[e], 0)
    negative = (s > 0) & (c[jnp.maximum(s - 1, 0)] == 45)
    d = jnp.where(last_dot[e] >= s, last_dot[e], e + 1)  # the dot, or just past the end
    span = found & (i >= s) & (i <= e)
    in_int, in_frac = span & (i < d) & isd, span & (i > d)
    int_keep = in_int & (_cummax(jnp.where(in_int & (c != 48), i, -1)) >= s)
    frac_last = _last(in_frac & (c != 48))
    frac_keep = in_frac & (i <= frac_last)
    keep = int_keep | frac_keep | ((i == d) & (frac_last > d))
    return found, keep, negative & jnp.any(keep)


def numeric_equal(x: Array, n: Array, y: Array, m: Array) -> Array:
    """bool ``[]``: the last number of ``x[:n]`` equals the last number of ``y[:m]`` (canonical forms).

    False when either has no number. Grammar and canonical form: :mod:`jaxrl.text.reference`.
    """
    return _numeric_equal(_clean(x, n)[0], _clean(y, m)[0])


def _numeric_equal(c: Array, a: Array) -> Array:
    f1, keep1, neg1 = _last_number(c)
    f2, keep2, neg2 = _last_number(a)
    canon, length = _compact(a, keep2, a.shape[0])
    return f1 & f2 & (neg1 == neg2) & equal_kept(c, keep1, canon, length)


# ---------------------------------------------------------------------------------------
# Regions and format
# ---------------------------------------------------------------------------------------


def tag_region(c: Array, tag: str = "answer") -> tuple[Array, Array, Array]:
    """``(found, start, end)``: from the end of the first ``<tag>`` to the first ``</tag>`` after it."""
    op, cl = f"<{tag}>".encode(), f"</{tag}>".encode()
    o = _first(_find(c, op))
    close = _first(_find(c, cl) & (jnp.arange(c.shape[0]) >= o + len(op)))
    found = (o < BIG) & (close < BIG)
    return found, jnp.where(found, o + len(op), 0), jnp.where(found, close, 0)


def boxed_region(c: Array) -> tuple[Array, Array, Array]:
    """``(found, start, end)``: after the last ``\\boxed{`` to its matching ``}`` (braces balanced)."""
    i = jnp.arange(c.shape[0])
    start = _last(_find(c, b"\\boxed{")) + 7
    after = (i >= start) & (start >= 7)
    depth = 1 + jnp.cumsum(jnp.where(after, (c == 123).astype(jnp.int32) - (c == 125), 0))
    close = _first(after & (depth == 0))
    found = close < BIG
    return found, jnp.where(found, start, 0), jnp.where(found, close, 0)


def region(c: Array, n: Array, how: str, tag: str = "answer") -> tuple[Array, Array, Array]:
    """``(found, start, end)`` of the text the answer is read from (``extract`` of the rubric)."""
    whole = (jnp.ones((), bool), jnp.zeros((), jnp.int32), n)
    if how == "answer_tag":
        return tag_region(c, tag)
    if how == "boxed":
        return boxed_region(c)
    if how in ("last_number", "whole"):
        return whole
    if how == "auto":
        (ft, st, et), (fb, sb, eb) = tag_region(c, tag), boxed_region(c)
        pick = lambda a, b, w: jnp.where(ft, a, jnp.where(fb, b, w))  # noqa: E731
        return whole[0], pick(st, sb, 0), pick(et, eb, n)
    raise ValueError(f"extract must be answer_tag, boxed, last_number, whole or auto, got {how!r}")


def format_ok(x: Array, n: Array, tags: tuple[str, ...] = ("answer",)) -> Array:
    """bool ``[]``: each ``<t>`` and ``</t>`` occurs exactly once, open before close, the tags in
    the given order, and nothing but ASCII whitespace follows the last closing tag."""
    c, n = _clean(x, n)
    i = jnp.arange(c.shape[0])
    ok, pos = jnp.ones((), bool), jnp.zeros((), jnp.int32)
    for t in tags:
        op, cl = f"<{t}>".encode(), f"</{t}>".encode()
        fo, fc = _find(c, op), _find(c, cl)
        o, cc = _first(fo), _first(fc)
        ok = ok & (jnp.sum(fo) == 1) & (jnp.sum(fc) == 1) & (o >= pos) & (cc >= o + len(op))
        pos = jnp.minimum(cc + len(cl), BIG)
    ws = functools.reduce(jnp.logical_or, [c == w for w in WHITESPACE])
    return ok & jnp.all(ws | (c < 0) | (i < pos))


def length_penalty(n: Array, target: int, weight: float) -> Array:
    """float32 ``[]``: ``weight * max(0, n - target)``."""
    return (jnp.float32(weight) * jnp.maximum(jnp.asarray(n) - target, 0)).astype(jnp.float32)


# ---------------------------------------------------------------------------------------
# difflib's ratio
# ---------------------------------------------------------------------------------------


def run_lengths(a: Array, b: Array) -> Array:
    """int32 ``[La, Lb]``: length of the run of equal bytes ending at ``(i, j)`` (0 if ``a_i != b_j``)."""

    def row(prev, a_i):
        cur = jnp.where((b == a_i) & (b >= 0), jnp.concatenate([jnp.zeros((1,), jnp.int32), prev[:-1]]) + 1, 0)
        return cur, cur

    return jax.lax.scan(row, jnp.zeros(b.shape, jnp.int32), a)[1]


def matched_bytes(a: Array, s: Array, e: Array, b: Array, lb: Array) -> Array:
    """int32 ``[]``: the total size of difflib's matching blocks of ``a[s:e]`` and ``b[:lb]``."""
    la_, lb_ = a.shape[0], b.shape[0]
    runs = run_lengths(a, b)
    i, j = jnp.arange(la_), jnp.arange(lb_)
    inside = (i >= s) & (i < e)
    # each row's piece (alo, ahi, blo, bhi); rows of one piece are contiguous, labelled by alo
    init = (jnp.where(inside, s, 0), jnp.where(inside, e, 0), jnp.zeros((la_,), jnp.int32),
            jnp.full((la_,), lb, jnp.int32), inside & (lb > 0), jnp.zeros((), jnp.int32))

    def level(state):
        alo, ahi, blo, bhi, active, total = state
        k = jnp.minimum(jnp.minimum(runs, (i - alo + 1)[:, None]), j[None, :] - blo[:, None] + 1)
        k = jnp.where(active[:, None] & (j[None, :] >= blo[:, None]) & (j[None, :] < bhi[:, None]), k, 0)
        row_k, row_j = jnp.max(k, axis=1), jnp.argmax(k, axis=1).astype(jnp.int32)
        seg = jnp.where(active, alo, la_)
        best_k = jax.ops.segment_max(row_k, seg, la_ + 1)[seg]
        best_i = jax.ops.segment_min(jnp.where(row_k == best_k, i, BIG), seg, la_ + 1)[seg]
        best_j = row_j[jnp.clip(best_i, 0, la_ - 1)]
        total = total + jnp.sum(jnp.where(active & (i == best_i), row_k, 0))
        bi, bj = best_i - best_k + 1, best_j - best_k + 1
        left, right = i < bi, i >= bi + best_k
        new_ahi = jnp.where(left, bi, ahi)
        new_alo = jnp.where(right, bi + best_k, alo)
        new_bhi = jnp.where(left, bj, bhi)
        new_blo = jnp.where(right, bj + best_k, blo)
        active = active & (best_k > 0) & (left | right) & (new_blo < new_bhi)
        return new_alo, new_ahi, new_blo, new_bhi, active, total

    return jax.lax.while_loop(lambda st: jnp.any(st[4]), level, init)[5]


def sequence_ratio(x: Array, n: Array, y: Array, m: Array) -> Array:
    """float32 ``[]``: ``difflib.SequenceMatcher(None, x[:n], y[:m]).ratio()`` on the bytes, exactly.

    Ratcliff/Obershelp as difflib does it: the longest matching block of a piece (earliest
    in ``x`` on ties, then earliest in ``y``), then the pieces left and right of it, until
    none has a match; ratio = ``2 * matched / (n + m)``, 1 when both are empty. The run
    lengths ``R[i, j]`` are computed once; inside a piece a block ending at ``(i, j)`` has
    length ``min(R[i, j], i - alo + 1, j - blo + 1)``. All pieces of one recursion level
    are searched together (a ``while_loop`` over levels). No junk heuristic: this equals
    ``autojunk=False`` always and difflib's default ``autojunk=True`` when ``m < 200``.
    """
    c, n = _clean(x, n)
    a, m = _clean(y, m)
    return _ratio(c, jnp.zeros((), jnp.int32), n, a, m)


def _ratio(c: Array, s: Array, e: Array, a: Array, m: Array) -> Array:
    matched = matched_bytes(c, s, e, jnp.where(a >= 0, a, -2), m)
    total = (e - s) + m
    return jnp.where(total > 0, 2.0 * matched / jnp.maximum(total, 1), 1.0).astype(jnp.float32)


# ---------------------------------------------------------------------------------------
# Verifiers
# ---------------------------------------------------------------------------------------


def _text_score(table, fn, low, high, max_bytes, task, completion):
    width = max(1, jnp.shape(completion)[-1] * table.width)  # a length-0 completion: one empty byte slot
    text, n = decode_bytes(table, completion, max_bytes or width)
    r, metrics = fn(text, n, task.answer, task.answer_len)
    r = jnp.clip(jnp.nan_to_num(jnp.asarray(r, jnp.float32), nan=low), low, high)
    return r, metrics


def text_verifier(table: ByteTable, fn, low: float, high: float, max_bytes: int | None = None) -> V.Verifier:
    """A :class:`jaxrl.verifiers.Verifier` from a rule over bytes.

    ``score(task, completion)`` decodes ``completion`` (int32 ids) with ``table``
    (:func:`decode_bytes`, ``max_bytes``) and returns ``fn(text, n, task.answer,
    task.answer_len)`` (``(reward, metrics)``) clipped into ``[low, high]`` (NaN -> ``low``).
    ``task.answer`` holds the reference answer's UTF-8 bytes as int32 values.
    """
    return V.Verifier(functools.partial(_text_score, table, fn, float(low), float(high), max_bytes), float(low), float(high))


def __getattr__(name: str):
    """``rubric`` and ``RUBRIC_KEYS`` moved to :mod:`jaxrl.text.rubric` (with a warning)."""
    from jaxrl import _compat

    return _compat.moved_name(__name__, name)
