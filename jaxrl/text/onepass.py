"""The rubric in one pass: decode and every byte rule of :func:`jaxrl.text.verifiers.rubric`
as one ``lax.scan`` over byte positions.

Whole-array rules (one cumulative max / sum / gather per rule over ``[batch, bytes]``) cost
dozens of passes over the data; here each byte is read once and a few dozen scalar states
per completion are updated (vectorised over the batch by ``vmap``): a cursor over the ids
(decode without compaction), a shift register of the last bytes (tags by word compares),
the tag / boxed regions, format counts and the number grammar, the current number compared
digit by digit with the answer's canonical number. Equal to :mod:`jaxrl.text.reference`
(tests/test_text_verifiers.py); the timings are in ``bench/results/text_scoring.md``.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from jaxrl import verifiers as V
from jaxrl.text.bytes import ByteTable
from jaxrl.text.verifiers import _BIG, _WS, _equal_kept, _normalize, _normalize_keep, _ratio, _within, length_penalty

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


def _scan_rubric(table: ByteTable, max_bytes, kind, how, tag, tags, ids, answer, answer_len):
    """Decode ``ids`` and run every rule the rubric needs in one ``lax.scan`` over byte positions.

    Per step: the next byte of the current token (a cursor over the ids; the ids' next
    non-empty token is found once by a reverse scan over tokens), a shift register of the
    last bytes (every tag / ``\\boxed{`` is matched by word compares), the tag and boxed
    regions, the format counts, and the number grammar with the current number compared
    digit by digit with the answer's canonical number (computed first by a small scan over
    the answer). The last number of every candidate region is kept, so no region is
    gathered for ``numeric``; ``exact`` / ``similarity`` read the decoded bytes (the scan's
    output) inside the chosen region.
    """
    rows_np, lengths_np = table.arrays()
    flat = jnp.asarray(rows_np.reshape(-1))
    lengths = jnp.asarray(lengths_np)
    ids = jnp.asarray(ids).astype(jnp.int32)
    length = ids.shape[-1]
    size = int(max_bytes) if max_bytes is not None else length * table.width
    shift = max(1, int(table.width).bit_length())
    valid = (ids >= 0) & (ids < table.vocab)
    safe = jnp.where(valid, ids, 0)
    ln = jnp.where(valid, lengths[safe], 0)
    is_eos = ids == table.eos_id
    stop = is_eos | (ln > 0)
    pack = jnp.where(is_eos, 0, (safe << shift) | ln)

    def rstep(carry, x):
        j, st, pk = x
        return (jnp.where(st, j, carry[0]), jnp.where(st, pk, carry[1])), carry

    init = (jnp.int32(length), jnp.int32(0))
    (k0, pk0), (succ_idx, succ_pk) = jax.lax.scan(rstep, init, (jnp.arange(length, dtype=jnp.int32), stop, pack), reverse=True)

    a = jnp.asarray(answer).astype(jnp.int32) & 0xFF
    m = V.valid_length(answer_len, a.shape[-1])
    numeric = kind == "numeric"
    if numeric:
        a_found, canon, a_int, a_frac, a_neg = _answer_number(a, m)
        f_off = a.shape[0]
    region_tag = how in ("answer_tag", "auto")
    region_box = how in ("boxed", "auto")
    patterns = []
    for t in tags + ((tag,) if region_tag else ()):
        patterns += [f"<{t}>".encode(), f"</{t}>".encode()]
    if region_box:
        patterns.append(b"\\boxed{")
    patterns = list(dict.fromkeys(patterns))
    nwords = max(1, (max(map(len, patterns), default=1) + 3) // 4)
    z, no = jnp.zeros((), jnp.int32), jnp.zeros((), bool)
    big = jnp.int32(_BIG)
    carry = {"k": k0, "pk": pk0, "o": z, "n": z, "words": tuple(jnp.zeros((), jnp.uint32) for _ in range(nwords)),
             "count": tuple(z for _ in patterns), "first": tuple(big for _ in patterns), "solid": jnp.int32(-1),
             "open_end": jnp.int32(-1), "close_at": jnp.int32(-1),
             "bstart": jnp.int32(-1), "depth": z, "bclose": jnp.int32(-1)}
    if numeric:
        carry.update(num=_init(_NUM0), sv=no, se=no, rec=((no, no), (no, no), (no, no)))
    lmask = (1 << shift) - 1
    want_bytes = kind in ("exact", "similarity")

    def step(c, p):
        c = dict(c)
        ln_cur, tid = c["pk"] & lmask, c["pk"] >> shift
        active = (ln_cur > 0) & (p < size)
        byte = flat[tid * table.width + c["o"]].astype(jnp.int32)
        b = jnp.where(active, byte, -1)
        o1 = c["o"] + 1
        adv = active & (o1 >= ln_cur)
        kc = jnp.minimum(c["k"], length - 1)
        c["k"] = jnp.where(adv, succ_idx[kc], c["k"])
        c["pk"] = jnp.where(adv, succ_pk[kc], c["pk"])
        c["o"] = jnp.where(adv, 0, jnp.where(active, o1, c["o"]))
        n = c["n"]  # index of this byte
        words = c["words"]
        prev = (words[0] & 0xFF).astype(jnp.int32)
        if numeric:
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
        for w in range(1, nwords):
            new_words.append((words[w] << 8) | (words[w - 1] >> 24))
        words = tuple(jnp.where(active, nw, ow) for nw, ow in zip(new_words, words))
        c["words"] = words
        hits = {pat: active & _pattern_match(words, n + 1, pat) for pat in patterns}
        c["count"] = tuple(cnt + hits[pat] for cnt, pat in zip(c["count"], patterns))
        c["first"] = tuple(jnp.where(hits[pat] & (fst == _BIG), n - len(pat) + 1, fst) for fst, pat in zip(c["first"], patterns))
        ws = functools.reduce(jnp.logical_or, [b == w for w in _WS])
        c["solid"] = jnp.where(active & ~ws, n, c["solid"])
        if region_tag:
            op, cl = f"<{tag}>".encode(), f"</{tag}>".encode()
            opened = hits[op] & (c["open_end"] < 0)
            closed = hits[cl] & (c["open_end"] >= 0) & (c["close_at"] < 0) & (n - len(cl) + 1 >= c["open_end"])
            c["open_end"] = jnp.where(opened, n + 1, c["open_end"])
            c["close_at"] = jnp.where(closed, n - len(cl) + 1, c["close_at"])
        if region_box:
            hb = hits[b"\\boxed{"]
            inside = (c["bstart"] >= 0) & (c["bclose"] < 0) & active
            depth = c["depth"] + jnp.where(inside, (b == 123).astype(jnp.int32) - (b == 125), 0)
            shut = inside & (depth == 0)
            c["bclose"] = jnp.where(hb, -1, jnp.where(shut, n, c["bclose"]))
            c["bstart"] = jnp.where(hb, n + 1, c["bstart"])
            c["depth"] = jnp.where(hb, 1, depth)
            if numeric:
                rec = c["rec"]
                c["rec"] = (rec[0], (rec[1][0] & ~hb, rec[1][1] & ~hb), rec[2])
        c["n"] = n + active
        return c, (b if want_bytes else None)

    c, text = jax.lax.scan(step, carry, jnp.arange(size + 1, dtype=jnp.int32))
    n = c["n"]
    # format: each tag once, in order, open before close, only whitespace after
    ok, pos = jnp.ones((), bool), jnp.zeros((), jnp.int32)
    for t in tags:
        op, cl = f"<{t}>".encode(), f"</{t}>".encode()
        io, ic = patterns.index(op), patterns.index(cl)
        o, cc = c["first"][io], c["first"][ic]
        ok = ok & (c["count"][io] == 1) & (c["count"][ic] == 1) & (o >= pos) & (cc >= o + len(op))
        pos = jnp.minimum(cc + len(cl), _BIG)
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
    if numeric:
        rec = c["rec"]
        if pick is None:
            hit = jnp.where(tag_found, rec[0][0] & rec[0][1], jnp.where(box_found, rec[1][0] & rec[1][1], rec[2][0] & rec[2][1]))
        else:
            hit = rec[pick][0] & rec[pick][1]
        out["correct"] = found & hit
    if want_bytes:
        out["text"] = text[:size]
    out["answer"], out["answer_len"] = a, m
    return out


def _scan_rubric_score(table, max_bytes, kind, how, tag, tags, fw, power, gated, target, weight, task, completion):
    o = _scan_rubric(table, max_bytes, kind, how, tag, tags, completion, task.answer, task.answer_len)
    fmt = o["format"].astype(jnp.float32)
    a, m = jnp.where(jnp.arange(o["answer"].shape[0]) < o["answer_len"], o["answer"], -1), o["answer_len"]
    metrics = {}
    if kind == "numeric":
        correct = o["correct"]
        score = correct.astype(jnp.float32)
    else:
        inner = _within(o["text"], o["start"], o["end"])
        if kind == "exact":
            values, keep = _normalize_keep(inner)
            q, lq = _normalize(a)
            correct = o["found"] & _equal_kept(values, keep, q, lq)
            score = correct.astype(jnp.float32)
        else:
            score = jnp.where(o["found"], _ratio(inner, o["start"], o["end"], a, m), 0.0)
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
