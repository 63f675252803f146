"""The rubric in one pass: decode and every byte rule of :func:`jaxrl.text.rubric.rubric`
as one loop over byte positions, the batch inside the loop body.

Whole-array rules (one cumulative max / sum / gather per rule over ``[batch, bytes]``) cost
dozens of passes over the data; here each byte is read once and a few dozen scalar states
per completion are updated: a cursor over the ids (decode without compaction), a shift
register of the last bytes (tags by word compares), the tag / boxed regions, format counts
and the number grammar, the current number compared digit by digit with the answer's
canonical number. Under ``vmap`` the score takes the whole batch (``custom_vmap``): on a CPU
sorted by byte count and split into chunks, each chunk's ``while_loop`` ending at its longest
completion; on an accelerator one ``while_loop`` over the whole batch.
difflib's ratio (similarity) is searched level by level for all pieces of a chunk at once; on a
CPU over the chunk's longest region and answer only (a few static cuts), not the byte budget.
Equal to :mod:`jaxrl.text.reference` (tests/test_text_verifiers.py); the timings are in
``bench/results/text_scoring.md``.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp

from jaxrl import verifiers as V
from jaxrl.text.bytes import ByteTable
from jaxrl.text.verifiers import BIG, WHITESPACE, equal_kept, length_penalty, matched_bytes, normalize, normalize_keep, run_lengths, within

Array = jax.Array


# ---------------------------------------------------------------------------------------


def _pattern_match(words, count, pattern: bytes) -> Array:
    """bool ``[]``: the last ``len(pattern)`` bytes (a shift register of uint32 words, newest byte
    lowest) are ``pattern``."""
    ok = count >= len(pattern)
    rev = pattern[::-1]
    for w in range((len(pattern) + 3) // 4):
        chunk = rev[4 * w: 4 * w + 4]
        value = sum(b << (8 * i) for i, b in enumerate(chunk))
        mask = (1 << (8 * len(chunk))) - 1
        ok = ok & ((words[w] & jnp.uint32(mask)) == jnp.uint32(value))
    return ok


def _number_step(st, b, prev):
    """One byte of the number grammar (see :mod:`jaxrl.text.reference`) for the current run.

    ``st``: in_run, lead, mode (0 start, 1 integer, 2 comma group, 3 fraction, 4 invalid), cnt
    (digits of the current part), neg, sig (significant integer digits), fr (fraction digits),
    nz (a non-zero digit). Returns the new state and per-byte flags.
    """
    isd, com, dot = (b >= 48) & (b <= 57), b == 44, b == 46
    isrun = isd | com | dot
    start = isrun & ~st["in_run"]
    ending = st["in_run"] & ~isrun
    z = jnp.zeros((), jnp.int32)
    lead = jnp.where(start, True, st["lead"])
    m, c = jnp.where(start, z, st["mode"]), jnp.where(start, z, st["cnt"])
    sig0, fr0 = jnp.where(start, z, st["sig"]), jnp.where(start, z, st["fr"])
    nz0 = jnp.where(start, False, st["nz"])
    neg = jnp.where(start, (prev == 45) & ~com, st["neg"])
    body = isrun & ~(lead & com)
    d_mode = jnp.where((m == 2) & (c >= 3), 4, jnp.where(m == 0, 1, m))
    d_cnt = jnp.where(m == 0, 1, c + 1)
    com_ok = ((m == 1) & (c <= 3)) | ((m == 2) & (c == 3))
    dot_ok = (m <= 1) | ((m == 2) & (c == 3))
    new_m = jnp.where(isd, d_mode, jnp.where(com, jnp.where(com_ok, 2, 4), jnp.where(dot_ok, 3, 4)))
    new_c = jnp.where(isd, d_cnt, 0)
    new_m = jnp.where(m == 4, 4, new_m)
    mode, cnt = jnp.where(body, new_m, m), jnp.where(body, new_c, c)
    digit = isd & body
    int_digit = digit & ((mode == 1) | (mode == 2)) & ((sig0 > 0) | (b != 48))
    frac_digit = digit & (mode == 3)
    new = {**st, "in_run": isrun, "lead": lead & com, "mode": mode, "cnt": cnt, "neg": neg,
           "sig": sig0 + int_digit, "fr": fr0 + frac_digit, "nz": nz0 | (digit & (b != 48))}
    valid = (mode == 1) | ((mode == 2) & (cnt == 3)) | ((mode == 3) & (cnt >= 1))
    return new, {"start": start, "ending": ending, "digit": digit, "int_digit": int_digit,
                 "frac_digit": frac_digit, "sig0": sig0, "fr0": fr0, "valid": valid}


_NUM0 = {"in_run": False, "lead": False, "mode": 0, "cnt": 0, "neg": False, "sig": 0, "fr": 0, "nz": False, "mism": False}


def _init(spec: dict) -> dict:
    return {k: jnp.asarray(v, jnp.bool_ if isinstance(v, bool) else jnp.int32) for k, v in spec.items()}


def _answer_number(a: Array, m: Array):
    """The canonical last number of the answer ``a[:m]``: ``(found, digits int32[2A], int_len,
    frac_len, negative)``; digits ``[0, int_len)`` are the integer's significant digits and
    ``[A, A + frac_len)`` the fraction without trailing zeros."""
    width = a.shape[0]
    iota = jnp.arange(2 * width)
    c = jnp.where(jnp.arange(width) < m, a, -1)
    c = jnp.concatenate([c, jnp.full((1,), -1, jnp.int32)])

    def step(carry, b):
        st, snap, buf, best, prev = carry
        st, f = _number_step(st, b, prev)
        pos = jnp.where(f["frac_digit"], width + f["fr0"], f["sig0"])
        buf = jnp.where((iota == pos) & (f["int_digit"] | f["frac_digit"]), b, buf)
        snap = (snap[0] & ~f["start"],) + tuple(jnp.where(f["start"], jnp.zeros_like(s), s) for s in snap[1:])
        fr_sig = jnp.where(f["frac_digit"] & (b != 48), st["fr"], snap[2])
        snap = tuple(jnp.where(f["digit"], new, old) for new, old in
                     zip((f["valid"], st["sig"], fr_sig, st["neg"] & st["nz"]), snap))
        commit = f["ending"] & snap[0]
        best = tuple(jnp.where(commit, new, old) for new, old in zip((True, buf, snap[1], snap[2], snap[3]), best))
        return (st, snap, buf, best, b), None

    z = jnp.zeros((), jnp.int32)
    snap = (jnp.zeros((), bool), z, z, jnp.zeros((), bool))
    buf = jnp.zeros((2 * width,), jnp.int32)
    best = (jnp.zeros((), bool), buf, z, z, jnp.zeros((), bool))
    return jax.lax.scan(step, (_init(_NUM0), snap, buf, best, z), c)[0][3]


class _Cfg(NamedTuple):
    """The static part of a rubric: table, byte budget, rule choices and the patterns to match."""

    table: ByteTable
    size: int
    kind: str
    how: str
    tag: str
    tags: tuple
    patterns: tuple
    nwords: int
    shift: int


def _cfg(table: ByteTable, max_bytes, length: int, kind, how, tag, tags) -> _Cfg:
    size = int(max_bytes) if max_bytes is not None else length * table.width
    patterns = []
    for t in tags + ((tag,) if how in ("answer_tag", "auto") else ()):
        patterns += [f"<{t}>".encode(), f"</{t}>".encode()]
    if how in ("boxed", "auto"):
        patterns.append(b"\\boxed{")
    patterns = tuple(dict.fromkeys(patterns))
    nwords = max(1, (max(map(len, patterns), default=1) + 3) // 4)
    return _Cfg(table, size, kind, how, tag, tuple(tags), patterns, nwords, max(1, int(table.width).bit_length()))


def _prep(cfg: _Cfg, ids, answer, answer_len) -> dict:
    """Per completion, before the pass: the next token with bytes (or the eos) after every
    position (a reverse cumulative min), the byte count read (``total``) and the answer's
    canonical number."""
    table = cfg.table
    lengths = jnp.asarray(table.arrays()[1])
    ids = jnp.asarray(ids).astype(jnp.int32)
    length = ids.shape[-1]
    valid = (ids >= 0) & (ids < table.vocab)
    safe = jnp.where(valid, ids, 0)
    ln = jnp.where(valid, lengths[safe], 0)
    is_eos = ids == table.eos_id
    stop = is_eos | (ln > 0)
    pack = jnp.where(is_eos, 0, (safe << cfg.shift) | ln)

    iota = jnp.arange(length, dtype=jnp.int32)
    first_from = jax.lax.cummin(jnp.where(stop, iota, length), reverse=True)  # first stop at >= j
    succ_idx = jnp.concatenate([first_from[1:], jnp.full((1,), length, jnp.int32)])  # first stop after j
    pack = jnp.concatenate([pack, jnp.zeros((1,), jnp.int32)])
    k0 = first_from[0] if length else jnp.int32(0)
    succ_pk, pk0 = pack[succ_idx], pack[k0]
    eos_at = jnp.where(jnp.any(is_eos), jnp.argmax(is_eos), length)
    total = jnp.minimum(jnp.sum(jnp.where(iota < eos_at, ln, 0)), cfg.size).astype(jnp.int32)
    a = jnp.asarray(answer).astype(jnp.int32) & 0xFF
    m = V.valid_length(answer_len, a.shape[-1])
    out = {"succ_idx": succ_idx, "succ_pk": succ_pk, "k0": k0, "pk0": pk0, "total": total, "a": a, "m": m}
    if cfg.kind == "numeric":
        out["num"] = _answer_number(a, m)
    return out


def _carry0(cfg: _Cfg, pp: dict) -> dict:
    z, no = jnp.zeros((), jnp.int32), jnp.zeros((), bool)
    big = jnp.int32(BIG)
    carry = {"k": pp["k0"], "pk": pp["pk0"], "o": z, "n": z, "words": tuple(jnp.zeros((), jnp.uint32) for _ in range(cfg.nwords)),
             "count": tuple(z for _ in cfg.patterns), "first": tuple(big for _ in cfg.patterns), "solid": jnp.int32(-1),
             "open_end": jnp.int32(-1), "close_at": jnp.int32(-1),
             "bstart": jnp.int32(-1), "depth": z, "bclose": jnp.int32(-1)}
    if cfg.kind == "numeric":
        carry.update(num=_init(_NUM0), sv=no, se=no, rec=((no, no), (no, no), (no, no)))
    return carry


def _step(cfg: _Cfg, flat, pp: dict, c: dict, p):
    """One byte position of one completion: the next byte of the current token (a cursor over
    the ids), a shift register of the last bytes (every tag / ``\\boxed{`` is matched by word
    compares), the tag and boxed regions, the format counts, and the number grammar with the
    current number compared digit by digit with the answer's canonical number. After the
    completion's last byte (plus one step that ends a number) a step changes nothing."""
    table, size, length = cfg.table, cfg.size, pp["succ_idx"].shape[0]
    c = dict(c)
    lmask = (1 << cfg.shift) - 1
    ln_cur, tid = c["pk"] & lmask, c["pk"] >> cfg.shift
    active = (ln_cur > 0) & (p < size)
    byte = flat[tid * table.width + c["o"]].astype(jnp.int32)
    b = jnp.where(active, byte, -1)
    o1 = c["o"] + 1
    adv = active & (o1 >= ln_cur)
    kc = jnp.minimum(c["k"], length - 1)
    c["k"] = jnp.where(adv, pp["succ_idx"][kc], c["k"])
    c["pk"] = jnp.where(adv, pp["succ_pk"][kc], c["pk"])
    c["o"] = jnp.where(adv, 0, jnp.where(active, o1, c["o"]))
    n = c["n"]  # index of this byte
    words = c["words"]
    prev = (words[0] & 0xFF).astype(jnp.int32)
    if cfg.kind == "numeric":
        a_found, canon, a_int, a_frac, a_neg = pp["num"]
        f_off = pp["a"].shape[0]
        st, f = _number_step(c["num"], b, prev)
        idx = jnp.clip(jnp.where(f["frac_digit"], f_off + f["fr0"], f["sig0"]), 0, 2 * f_off - 1)
        want = canon[idx]
        mism = c["num"]["mism"] & ~f["start"]
        mism = mism | (f["int_digit"] & ((f["sig0"] >= a_int) | (want != b)))
        mism = mism | (f["frac_digit"] & jnp.where(f["fr0"] < a_frac, want != b, b != 48))
        st = {**st, "mism": mism}
        eq = f["valid"] & ~mism & (st["sig"] == a_int) & (st["fr"] >= a_frac) & ((st["neg"] & st["nz"]) == a_neg) & a_found
        sv = jnp.where(f["digit"], f["valid"], c["sv"] & ~f["start"])
        se = jnp.where(f["digit"], eq, c["se"] & ~f["start"])
        fin = f["ending"] & c["sv"]
        conds = ((c["open_end"] >= 0) & (c["close_at"] < 0), (c["bstart"] >= 0) & (c["bclose"] < 0), jnp.ones((), bool))
        c["rec"] = tuple((jnp.where(fin & cond, True, fd), jnp.where(fin & cond, c["se"], e))
                         for (fd, e), cond in zip(c["rec"], conds))
        c["num"], c["sv"], c["se"] = st, sv, se
    new_words = [(words[0] << 8) | (b & 0xFF).astype(jnp.uint32)]
    for w in range(1, cfg.nwords):
        new_words.append((words[w] << 8) | (words[w - 1] >> 24))
    words = tuple(jnp.where(active, nw, ow) for nw, ow in zip(new_words, words))
    c["words"] = words
    hits = {pat: active & _pattern_match(words, n + 1, pat) for pat in cfg.patterns}
    c["count"] = tuple(cnt + hits[pat] for cnt, pat in zip(c["count"], cfg.patterns))
    c["first"] = tuple(jnp.where(hits[pat] & (fst == BIG), n - len(pat) + 1, fst) for fst, pat in zip(c["first"], cfg.patterns))
    ws = functools.reduce(jnp.logical_or, [b == w for w in WHITESPACE])
    c["solid"] = jnp.where(active & ~ws, n, c["solid"])
    if cfg.how in ("answer_tag", "auto"):
        op, cl = f"<{cfg.tag}>".encode(), f"</{cfg.tag}>".encode()
        opened = hits[op] & (c["open_end"] < 0)
        closed = hits[cl] & (c["open_end"] >= 0) & (c["close_at"] < 0) & (n - len(cl) + 1 >= c["open_end"])
        c["open_end"] = jnp.where(opened, n + 1, c["open_end"])
        c["close_at"] = jnp.where(closed, n - len(cl) + 1, c["close_at"])
    if cfg.how in ("boxed", "auto"):
        hb = hits[b"\\boxed{"]
        inside = (c["bstart"] >= 0) & (c["bclose"] < 0) & active
        depth = c["depth"] + jnp.where(inside, (b == 123).astype(jnp.int32) - (b == 125), 0)
        shut = inside & (depth == 0)
        c["bclose"] = jnp.where(hb, -1, jnp.where(shut, n, c["bclose"]))
        c["bstart"] = jnp.where(hb, n + 1, c["bstart"])
        c["depth"] = jnp.where(hb, 1, depth)
        if cfg.kind == "numeric":
            rec = c["rec"]
            c["rec"] = (rec[0], (rec[1][0] & ~hb, rec[1][1] & ~hb), rec[2])
    c["n"] = n + active
    return c, b


def _finish(cfg: _Cfg, c: dict) -> dict:
    """Format, the chosen region and (numeric) correctness from the pass's final state."""
    n, how, z = c["n"], cfg.how, jnp.zeros((), jnp.int32)
    # format: each tag once, in order, open before close, only whitespace after
    ok, pos = jnp.ones((), bool), jnp.zeros((), jnp.int32)
    for t in cfg.tags:
        op, cl = f"<{t}>".encode(), f"</{t}>".encode()
        io, ic = cfg.patterns.index(op), cfg.patterns.index(cl)
        o, cc = c["first"][io], c["first"][ic]
        ok = ok & (c["count"][io] == 1) & (c["count"][ic] == 1) & (o >= pos) & (cc >= o + len(op))
        pos = jnp.minimum(cc + len(cl), BIG)
    fmt = ok & (c["solid"] < pos)
    tag_found = (c["open_end"] >= 0) & (c["close_at"] >= 0)
    box_found = (c["bstart"] >= 0) & (c["bclose"] >= 0)
    if how == "answer_tag":
        found, s, e, pick = tag_found, c["open_end"], c["close_at"], 0
    elif how == "boxed":
        found, s, e, pick = box_found, c["bstart"], c["bclose"], 1
    elif how in ("whole", "last_number"):
        found, s, e, pick = jnp.ones((), bool), z, n, 2
    else:  # auto
        found = jnp.ones((), bool)
        s = jnp.where(tag_found, c["open_end"], jnp.where(box_found, c["bstart"], 0))
        e = jnp.where(tag_found, c["close_at"], jnp.where(box_found, c["bclose"], n))
        pick = None
    s, e = jnp.where(found, s, 0), jnp.where(found, e, 0)
    out = {"n": n, "format": fmt, "found": found, "start": s, "end": e}
    if cfg.kind == "numeric":
        rec = c["rec"]
        if pick is None:
            hit = jnp.where(tag_found, rec[0][0] & rec[0][1], jnp.where(box_found, rec[1][0] & rec[1][1], rec[2][0] & rec[2][1]))
        else:
            hit = rec[pick][0] & rec[pick][1]
        out["correct"] = found & hit
    return out


def _matched_width(w: int, c: Array, s: Array, e: Array, b: Array, lb: Array) -> Array:
    """int32 ``[n]``: :func:`jaxrl.text.verifiers.matched_bytes` of a batch whose regions end before
    ``w``: the run lengths ``[n, w, M]`` once, then a ``while_loop`` over recursion levels with
    the batch inside the body. Per level and piece, the longest block is one max over a packed
    key (length, then earliest end row, then earliest end column: difflib's tie-breaking),
    reduced per row, then per piece by a cumulative max over rows (pieces are contiguous row
    ranges; the piece's ordinal in the key's high part keeps pieces apart)."""
    c = c[:, :w]
    m_ = b.shape[1]
    runs = jax.vmap(run_lengths)(c, b)
    i, j = jnp.arange(w, dtype=jnp.int32), jnp.arange(m_, dtype=jnp.int32)
    cell = (w - 1 - i)[:, None] * m_ + (m_ - 1 - j)[None, :]
    unit, piece = w * m_, (m_ + 1) * w * m_

    def level(runs, alo, ahi, blo, bhi, active, total):
        k = jnp.minimum(jnp.minimum(runs, (i - alo + 1)[:, None]), j[None, :] - blo[:, None] + 1)
        ok = active[:, None] & (j[None, :] >= blo[:, None]) & (j[None, :] < bhi[:, None])
        row_key = jnp.max(jnp.where(ok, k, 0) * unit + cell, axis=1)
        first = active & (i == alo)
        pid = jnp.cumsum(first.astype(jnp.int32))
        prefix = jax.lax.cummax(jnp.where(active, pid * piece + row_key, -1))
        best = prefix[jnp.clip(ahi - 1, 0, w - 1)] - pid * piece
        best_k = best // unit
        end_i, end_j = w - 1 - (best % unit) // m_, m_ - 1 - best % m_
        total = total + jnp.sum(jnp.where(first, best_k, 0))
        bi, bj = end_i - best_k + 1, end_j - best_k + 1
        left, right = i < bi, i >= bi + best_k
        new_ahi, new_alo = jnp.where(left, bi, ahi), jnp.where(right, bi + best_k, alo)
        new_bhi, new_blo = jnp.where(left, bj, bhi), jnp.where(right, bj + best_k, blo)
        active = active & (best_k > 0) & (left | right) & (new_blo < new_bhi)
        return new_alo, new_ahi, new_blo, new_bhi, active, total

    inside = (i >= s[:, None]) & (i < e[:, None])
    n = c.shape[0]
    state = (jnp.where(inside, s[:, None], 0), jnp.where(inside, e[:, None], 0), jnp.zeros((n, w), jnp.int32),
             jnp.broadcast_to(lb[:, None], (n, w)).astype(jnp.int32), inside & (lb > 0)[:, None], jnp.zeros((n,), jnp.int32))
    body = lambda st: jax.vmap(level)(runs, *st)  # noqa: E731
    return jax.lax.while_loop(lambda st: jnp.any(st[4]), body, state)[5]


def _cuts(width: int, answer: int, first: int = 12, sparse: bool = False) -> list[tuple[int, int]]:
    """The static ``(region bytes, answer bytes)`` shapes a ratio search may be cut to, smallest
    first: region sizes doubling from ``first`` (a size within 2/3 of ``width`` becomes
    ``width``; ``sparse``: every other size, a factor of 4, fewer searches to compile); answers
    of fewer than 64 bytes uncut, longer ones cut with the region (at least 64) until whole."""
    sizes, size = [], first
    while not sizes or sizes[-1] != width:
        sizes.append(width if 3 * size >= 2 * width else size)
        size *= 4 if sparse else 2
    cuts = [(w, answer if answer < 64 else min(answer, max(64, w))) for w in sizes]
    return cuts if cuts[-1][1] == answer else cuts + [(width, answer)]


def _front(c: Array, s: Array, e: Array, w: int) -> Array:
    """int32 ``[n, w]``: each row's region ``c[s:e]`` moved to the front (-1 after its end)."""
    i = jnp.arange(w, dtype=jnp.int32)
    src = jnp.clip(s[:, None] + i[None, :], 0, c.shape[1] - 1)
    return jnp.where(i[None, :] < (e - s)[:, None], jnp.take_along_axis(c, src, axis=1), -1)


def _matched_cut(w: int, mw: int, c: Array, s: Array, e: Array, b: Array, m: Array) -> Array:
    """:func:`_matched_width` of the regions ``[s, e)`` of ``c`` moved to the front and cut to
    ``w`` bytes (every region fits), against the answers cut to ``mw`` bytes (every answer fits)."""
    c, b, start, end = _front(c, s, e, w), b[:, :mw], jnp.zeros_like(s), e - s
    if 34 * (mw + 1) * w * mw >= 2**31:  # the packed key would overflow int32
        return jax.vmap(matched_bytes)(c, start, end, b, m)
    return _matched_width(w, c, start, end, b, m)


def _ratio_many(c: Array, s: Array, e: Array, a: Array, m: Array, cut: str) -> Array:
    """float32 ``[n]``: :func:`jaxrl.text.verifiers._ratio` of a batch. ``cut`` (a CPU; "fine"
    for a chunk of a sorted batch, "sparse" for a batch scored whole): the search is bounded
    by what the batch holds, not by the byte budget: the regions are moved to the front and
    the matrices cut to the smallest of :func:`_cuts` that holds the batch's longest region
    and longest answer (``lax.switch``: one compiled search per shape). "" (an accelerator:
    one batch, whose longest region decides anyway): one search over the whole budget."""
    b = jnp.where(a >= 0, a, -2)
    e = jnp.maximum(e, s)
    cuts = _cuts(c.shape[1], a.shape[1], sparse=cut == "sparse") if cut else [(c.shape[1], a.shape[1])]
    if len(cuts) == 1 and not cut:
        matched = _matched_full(c, s, e, b, m)
    else:
        need_w, need_m = jnp.max(e - s), jnp.max(m)
        fits = jnp.asarray([w for w, _ in cuts], jnp.int32) >= need_w
        fits = fits & (jnp.asarray([mw for _, mw in cuts], jnp.int32) >= need_m)
        pick = jnp.argmax(fits)  # the last shape (full, full) always fits
        matched = jax.lax.switch(pick, [functools.partial(_matched_cut, w, mw) for w, mw in cuts], c, s, e, b, m)
    total = (e - s) + m
    return jnp.where(total > 0, 2.0 * matched / jnp.maximum(total, 1), 1.0).astype(jnp.float32)


def _matched_full(c: Array, s: Array, e: Array, b: Array, m: Array) -> Array:
    w, mw = c.shape[1], b.shape[1]
    if 34 * (mw + 1) * w * mw >= 2**31:  # the packed key would overflow int32
        return jax.vmap(matched_bytes)(c, s, e, b, m)
    return _matched_width(w, c, s, e, b, m)


_CHUNK = 1024  # completions per pass: sorted by length, each chunk's loop ends at its longest
_UNROLL = 1  # byte positions per loop step (2 and 4 measured no faster, compile slower)


def _pass(cfg: _Cfg, pp: dict) -> tuple[dict, Array]:
    """The one pass over a batch ``pp`` (leading axis = completions): a ``while_loop`` over byte
    positions that ends after the batch's longest completion (plus one step), the batch inside
    the body. Returns the per-completion outputs of :func:`_finish` and the bytes ``int32 [batch,
    size]`` (-1 after the end; only when the rule reads them)."""
    flat = jnp.asarray(cfg.table.arrays()[0].reshape(-1))
    width = pp["total"].shape[0]
    limit = jnp.max(pp["total"])
    want_bytes = cfg.kind in ("exact", "similarity")
    step = jax.vmap(functools.partial(_step, cfg, flat), in_axes=(0, 0, None))
    text = jnp.full((cfg.size + _UNROLL, width) if want_bytes else (0, width), -1, jnp.int32)

    def body(state):
        p, c, text = state
        for u in range(_UNROLL):
            c, b = step(pp, c, p + u)
            if want_bytes:
                text = jax.lax.dynamic_update_slice(text, b[None], (p + u, jnp.int32(0)))
        return p + _UNROLL, c, text

    state = (jnp.int32(0), jax.vmap(functools.partial(_carry0, cfg))(pp), text)
    _, c, text = jax.lax.while_loop(lambda st: st[0] <= limit, body, state)
    return jax.vmap(functools.partial(_finish, cfg))(c), text[: cfg.size].T


def _score_batch(cfg: _Cfg, rest: tuple, cut: str, pp: dict) -> tuple[Array, dict]:
    """Reward and metrics of a batch of prepared completions (leading axis = completions)."""
    fw, power, gated, target, weight = rest
    o, text = _pass(cfg, pp)
    fmt = o["format"].astype(jnp.float32)
    metrics = {}
    if cfg.kind == "numeric":
        correct = o["correct"]
        score = correct.astype(jnp.float32)
    else:
        a = jnp.where(jnp.arange(pp["a"].shape[1]) < pp["m"][:, None], pp["a"], -1)
        inner = jax.vmap(within)(text, o["start"], o["end"])
        if cfg.kind == "exact":
            values, keep = jax.vmap(normalize_keep)(inner)
            q, lq = jax.vmap(normalize)(a)
            correct = o["found"] & jax.vmap(equal_kept)(values, keep, q, lq)
            score = correct.astype(jnp.float32)
        else:
            score = jnp.where(o["found"], _ratio_many(inner, o["start"], o["end"], a, pp["m"], cut), 0.0)
            correct = o["found"] & (score >= 1.0)
            metrics["similarity"] = score
    metrics["correct"] = correct.astype(jnp.float32)
    metrics["format"] = fmt
    score = V._in_range(score, 0.0, 1.0)
    if power != 1.0:
        score = V._in_range(jnp.power(score, power), 0.0, 1.0)
    if gated:
        passed = fmt >= 1.0
        score = jnp.where(passed, score, jnp.float32(0.0))
        metrics["gate_passed"] = passed.astype(jnp.float32)
    r = V._in_range(score + jnp.float32(fw) * fmt, 0.0, 1.0 + fw)
    r = jnp.clip(r - length_penalty(o["n"], target, weight), 0.0, 1.0 + fw)
    metrics["completion_bytes"] = o["n"].astype(jnp.float32)
    return r, metrics


def _score_many(cfg: _Cfg, rest: tuple, answer, answer_len, ids) -> tuple[Array, dict]:
    """Score a batch: prepare each completion, sort by byte count, run the pass chunk by chunk
    (``lax.map``; each chunk's loop ends at its own longest completion), restore the order."""
    pp = jax.vmap(functools.partial(_prep, cfg))(ids, answer, answer_len)
    count = ids.shape[0]
    # chunks pay on a CPU (each loop stops at its own longest completion); an accelerator runs
    # the whole batch in one loop (sequential small loops leave it idle: docs/text_tasks.md)
    cpu = jax.default_backend() == "cpu"
    chunk = min(count, _CHUNK) if cpu else count
    chunks = -(-count // chunk)
    if chunks == 1:  # one chunk: no sorting (less to compile for small batches)
        return _score_batch(cfg, rest, "sparse" if cpu else "", pp)
    order = jnp.argsort(pp["total"])
    order = jnp.concatenate([order, jnp.broadcast_to(order[:1], (chunks * chunk - count,))])
    pp = jax.tree.map(lambda x: x[order].reshape((chunks, chunk) + x.shape[1:]), pp)
    out = jax.lax.map(functools.partial(_score_batch, cfg, rest, "fine"), pp)
    inverse = jnp.zeros((count,), jnp.int32).at[order[:count]].set(jnp.arange(count, dtype=jnp.int32))
    return jax.tree.map(lambda x: x.reshape((chunks * chunk,) + x.shape[2:])[inverse], out)


def scan_rubric_score(table, max_bytes, kind, how, tag, tags, fw, power, gated, target, weight, task, completion):
    """The rubric's score of one completion; under ``vmap`` the whole batch is scored at once
    (``custom_vmap``), so the loop over byte positions has the batch inside its body."""
    completion = jnp.asarray(completion)
    if completion.shape[-1] == 0:  # no token written: the empty text (one eos reads as nothing)
        completion = jnp.full(completion.shape[:-1] + (1,), table.eos_id, jnp.int32)
    cfg = _cfg(table, max_bytes, completion.shape[-1], kind, how, tag, tuple(tags))
    rest = (fw, power, gated, target, weight)

    @jax.custom_batching.custom_vmap
    def one(answer, answer_len, ids):
        return jax.tree.map(lambda x: x[0], _score_many(cfg, rest, answer[None], answer_len[None], ids[None]))

    @one.def_vmap
    def _many(axis_size, in_batched, answer, answer_len, ids):
        args = [x if batched else jnp.broadcast_to(x, (axis_size,) + jnp.shape(x))
                for x, batched in zip((answer, answer_len, ids), in_batched)]
        out = _score_many(cfg, rest, *args)
        return out, jax.tree.map(lambda _: True, out)

    return one(jnp.asarray(task.answer), jnp.asarray(task.answer_len), completion)
