"""Byte verifiers against their plain-Python references (jaxrl.text.reference) on random and adversarial bytes."""

import difflib
import functools
import os
import random

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jaxrl import verifiers as V
from jaxrl.models.lm import load_tokenizer
from jaxrl.text import onepass
from jaxrl.text import reference as R
from jaxrl.text import rubric as RB
from jaxrl.text import verifiers as TV
from jaxrl.text.bytes import ByteTable

B, A, N = 96, 32, 256  # text width, answer width, examples per call
FIXTURE = os.path.join(os.path.dirname(__file__), "fixtures", "lm", "tokenizer")
FRAGMENTS = [
    b"1,234", b"1,234,567", b"0.50", b".5", b"0.5", b"-0", b"-0.0", b"000", b"1,23", b"12,345.678", b"1.2.3",
    b"--5", b"5.", b",5", b"1,000", b"1000", b"-12", b"7", b"42", b"3.14", b"1,2345", b",,", b"..", b"-",
    b"<answer>", b"</answer>", b"<answer", b"answer>", b"<think>", b"</think>", b"\\boxed{", b"}", b"{",
    b" ", b"  ", b"\t", b"\n", b"\r\n", b"\x0b", b"The Answer is ", b"ABC", b"abc", b"Alice, Bob", b"x",
    b"\xe4\xb8", b"\x96", b"\xf0\x9f\x98", b"\xc3", "é世".encode(), b"\x00", b"\xff",
]
ANSWERS = [b"1234", b"1,234", b"0.5", b"-0", b"0", b"42", b"-12", b"3.14", b"abc", b"Alice, Bob", b" ABC ", b"", b"7"]


def pack(items, width):
    x = np.zeros((len(items), width), np.uint8)
    n = np.zeros((len(items),), np.int32)
    for k, b in enumerate(items):
        b = b[:width]
        x[k, : len(b)] = np.frombuffer(b, np.uint8)
        n[k] = len(b)
    return jnp.asarray(x), jnp.asarray(n)


def examples(rng, count=N):
    """Texts built from adversarial fragments (cut at B) and answers."""
    texts, answers = [], []
    for _ in range(count):
        parts = [rng.choice(FRAGMENTS) for _ in range(rng.randint(0, 14))]
        if rng.random() < 0.3:  # a well-formed answer somewhere
            parts.insert(rng.randint(0, len(parts)), b"<answer>" + rng.choice(ANSWERS) + b"</answer>")
        texts.append(b"".join(parts)[:B])
        answers.append(rng.choice(ANSWERS) if rng.random() < 0.8 else b"".join(rng.choice(FRAGMENTS) for _ in range(3))[:A])
    return texts, answers


PAIR_RULES = {  # name -> (jax rule over two byte strings, reference)
    "numeric": (TV.numeric_equal, R.numeric_equal),
    "exact": (TV.normalized_equal, R.exact),
    "ratio": (TV.sequence_ratio, lambda a, b: np.float32(R.ratio(a, b))),
}
COMPILED = {name: jax.jit(jax.vmap(f)) for name, (f, _) in PAIR_RULES.items()}
FORMAT = {tags: jax.jit(jax.vmap(lambda x, n, t=tags: TV.format_ok(x, n, t))) for tags in [("answer",), ("think", "answer")]}
REGIONS = {how: jax.jit(jax.vmap(lambda x, n, h=how: TV.region(*TV._clean(x, n), h)))
           for how in ("answer_tag", "boxed", "auto")}


def check_all(texts, answers):
    texts, answers = texts + [b""] * (N - len(texts)), answers + [b""] * (N - len(answers))  # one shape: one compile
    x, n = pack(texts, B)
    y, m = pack(answers, A)
    for name, (_, ref) in PAIR_RULES.items():
        got = np.asarray(COMPILED[name](x, n, y, m))
        want = [ref(t, a) for t, a in zip(texts, answers)]
        bad = [(t, a, g, w) for t, a, g, w in zip(texts, answers, got, want) if g != w]
        assert not bad, (name, bad[:3])
    for tags, fn in FORMAT.items():
        got = np.asarray(fn(x, n))
        assert [bool(g) for g in got] == [R.format_ok(t, tags) for t in texts], tags
    refs = {"answer_tag": R.tag_region, "boxed": R.boxed_region, "auto": lambda t: R.extract(t, "auto", "numeric")}
    for how, fn in REGIONS.items():
        found, s, e = (np.asarray(v) for v in fn(x, n))
        for k, t in enumerate(texts):
            want = refs[how](t)
            assert (t[s[k]: e[k]] if found[k] else None) == want, (how, t)


def test_adversarial_fragments():
    check_all(*examples(random.Random(0)))


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.lists(st.tuples(st.lists(st.sampled_from(FRAGMENTS) | st.binary(max_size=4), max_size=12),
                          st.sampled_from(ANSWERS) | st.binary(max_size=A)), min_size=1, max_size=64))
def test_hypothesis_fragments(items):
    check_all([b"".join(p)[:B] for p, _ in items], [a for _, a in items])


def test_numbers_table():
    cases = [  # (text, answer, equal)
        (b"so 0.50", b".5", True), (b"1,000 apples", b"1000", True), (b"-0", b"0", True), (b"x -0.00", b"0", True),
        (b"1,234,567.", b"1234567", True), (b"1,23", b"123", False), (b"1,2345", b"12345", False),
        (b"12,345.678", b"12345.678", True), (b"3-5", b"-5", True), (b"a,12", b"12", True), (b"--5", b"-5", True),
        (b"1.2.3", b"3", False), (b"007", b"7", True), (b"7.0", b"7", True), (b"none", b"", False),
        (b"5, then 6.", b"6", True), (b"-.5", b"-0.5", True), (b"1,234.5,6", b"6", False),
    ]
    x, n = pack([c[0] for c in cases] + [b""] * (N - len(cases)), B)  # the compiled shape
    y, m = pack([c[1] for c in cases] + [b""] * (N - len(cases)), A)
    got = np.asarray(COMPILED["numeric"](x, n, y, m))[: len(cases)]
    assert [bool(g) for g in got] == [c[2] for c in cases]
    assert [R.numeric_equal(t, a) for t, a, _ in cases] == [c[2] for c in cases]
    assert R.numbers(b"-0.50 and 1,000 and -0 .5") == [b"-0.5", b"1000", b"0", b"0.5"]


def test_ratio_equals_difflib_on_name_lists():
    rng = random.Random(3)
    names = ["alice", "bob", "carol", "dave", "eve", "frank", "grace", "heidi", "ivan", "judy"]
    texts, answers = [], []
    for _ in range(N):
        picked = rng.sample(names, rng.randint(1, 8))
        answers.append(", ".join(sorted(picked)).encode()[:A])
        shuffled = picked[:] if rng.random() < 0.3 else rng.sample(picked, len(picked))
        texts.append(", ".join(shuffled).encode()[:B])
    x, n = pack(texts, B)
    y, m = pack(answers, A)
    got = np.asarray(COMPILED["ratio"](x, n, y, m))
    assert len(texts) == N  # the compiled shape
    default = [np.float32(difflib.SequenceMatcher(None, t, a).ratio()) for t, a in zip(texts, answers)]  # autojunk on
    assert list(got) == default
    assert (got < 1).any() and (got == 1).any()


@pytest.fixture(scope="module")
def tokenized():
    tok = load_tokenizer(FIXTURE)
    table = ByteTable.from_tokenizer(tok, vocab=448)
    rng = random.Random(5)
    texts, answers = examples(rng, N)
    pieces = tok.token_bytes()
    ids = np.full((len(texts), 64), table.eos_id, np.int32)
    decoded = []
    for k, t in enumerate(texts):
        row = tok.encode(t.decode("utf-8", "replace"))[:52]
        decoded.append(b"".join(pieces[i] for i in row)[:B])
        for _ in range(rng.randint(0, 6)):  # ids with no bytes (beyond the tokenizer, negative) anywhere
            row.insert(rng.randint(0, len(row)), rng.choice([420, 447, -3]))
        ids[k, : len(row)] = row
        if len(row) + 1 < ids.shape[1] and rng.random() < 0.5:  # text after the eos is not read
            ids[k, len(row) + 1:] = rng.randrange(0, 400)
    return tok, table, ids, decoded, answers


SPECS = [  # extraction itself is checked region by region above
    {"answer": "numeric", "extract": "auto", "format_weight": 0.5, "length_penalty": {"target": 20, "weight": 0.01}},
    {"answer": "numeric", "extract": "answer_tag", "gate_format": True},
    {"answer": "exact", "extract": "answer_tag", "format_weight": 0.2},
    {"answer": "similarity", "extract": "auto", "power": 4},
    {"answer": "similarity", "extract": "whole", "format_tags": ["think", "answer"], "format_weight": 1.0},
    {"answer": "numeric", "extract": "boxed", "format_tags": ["think", "answer"], "format_weight": 0.3, "power": 2},
    {"answer": "exact", "extract": "auto", "gate_format": True},
]


@pytest.mark.parametrize("spec", SPECS, ids=[f"{s['answer']}-{s['extract']}" for s in SPECS])
def test_rubric_equals_reference(tokenized, spec):
    tok, table, ids, decoded, answers = tokenized
    verifier = RB.rubric(spec, table, max_bytes=B)
    tasks = V.Task(jnp.zeros((len(ids), 2), jnp.int32), pack(answers, A)[0].astype(jnp.int32), pack(answers, A)[1])
    reward, metrics = jax.jit(jax.vmap(verifier.score))(tasks, jnp.asarray(ids))
    for k, (t, a) in enumerate(zip(decoded, answers)):
        want, want_m = R.rubric(spec, t, a)
        assert float(reward[k]) == pytest.approx(want, rel=1e-6, abs=1e-6), (t, a)
        for key, value in want_m.items():
            assert float(metrics[key][k]) == np.float32(value), (key, t, a)
    assert verifier.low == 0.0 and verifier.high == 1.0 + spec.get("format_weight", 0.0)


def test_totality_and_composition(tokenized):
    _, table, _, _, _ = tokenized
    rng = np.random.default_rng(0)
    ids = rng.integers(-(2**31), 2**31 - 1, (N, 64), dtype=np.int64)
    ids[:, ::2] = rng.integers(-5, 500, (N, 32))
    answer = rng.integers(-(2**31), 2**31 - 1, (N, A), dtype=np.int64).astype(np.int32)
    tasks = V.Task(jnp.zeros((N, 2), jnp.int32), jnp.asarray(answer), jnp.asarray(rng.integers(-50, 50, N), jnp.int32))
    sim = TV.text_verifier(table, lambda x, n, a, m: (TV.sequence_ratio(x, n, a, m), {}), 0.0, 1.0, 48)
    fmt = TV.text_verifier(table, lambda x, n, a, m: (TV.format_ok(x, n), {}), 0.0, 1.0, 48)
    composed = V.weighted_sum(("sim", 1.0, V.power(sim, 4.0)), ("gated", 2.0, V.gate(fmt, sim)))
    for verifier in [composed, RB.rubric(SPECS[1], table, 48)]:
        reward, metrics = jax.jit(jax.vmap(verifier.score))(tasks, jnp.asarray(ids.astype(np.int32)))
        reward = np.asarray(reward)
        assert np.isfinite(reward).all() and (reward >= verifier.low).all() and (reward <= verifier.high).all()
        assert all(np.isfinite(np.asarray(v)).all() for v in metrics.values())


def test_rubric_rejects_unknown_keys(tokenized):
    with pytest.raises(ValueError, match="unknown rubric keys"):
        RB.rubric({"answr": "numeric"}, tokenized[1])
    with pytest.raises(ValueError, match="may not contain"):  # tags are matched without overlaps
        RB.rubric({"tag": "a>b"}, tokenized[1])


NUMBER_CASES = [  # (text, answer): grammar edges the rubric's one-pass number reader must get right
    (b"1234,567", b"567"), (b"1234,567", b"1234567"), (b"1,234,5678", b"12345678"), (b"1.5,000", b"1.5000"), (b"x -,5", b"5"), (b"x -,5", b"-5"), (b"12,345,67", b"1234567"),
    (b"1,234,5678 and 9", b"9"), (b"1,,000", b"0"), (b"1.,5", b"5"), (b"5.5.", b"5.5"), (b"00.100", b".1"),
    (b"-00.10", b"-0.1"), (b"9,999.990", b"9999.99"), (b"x1,234,567,890y", b"1234567890"), (b"7 and 1.2.3", b"7"),
    (b"7 and 1,2345", b"7"), (b"-0.0 5", b"5"), (b"<answer>12</answer> 13", b"12"), (b"\\boxed{1,000} 3", b"1000"),
    (b"a\\boxed{2}b\\boxed{-7}", b"-7"), (b"<answer>-3</answer>", b"3"), (b"0.0", b"-0"), (b"1,000.5,", b"1000.5"),
    (b"12.500", b"12.5000"), (b"123,456", b"123456"), (b"1234", b"1,234"), (b",1,234", b"1234"), (b"-.", b"0"),
]


def test_rubric_numbers_table(tokenized, monkeypatch):
    monkeypatch.setattr(onepass, "_CHUNK", 96)  # several chunks sorted by length, the last one padded
    tok, table, _, _, _ = tokenized
    spec = {"answer": "numeric", "extract": "auto"}
    texts = [t for t, _ in NUMBER_CASES] + [b""] * (N - len(NUMBER_CASES))
    answers = [a for _, a in NUMBER_CASES] + [b""] * (N - len(NUMBER_CASES))
    ids = np.full((N, 64), table.eos_id, np.int32)
    for k, t in enumerate(texts):
        row = tok.encode(t.decode())
        ids[k, : len(row)] = row
    y, m = pack(answers, A)
    reward, _ = jax.jit(jax.vmap(RB.rubric(spec, table, B).score))(V.Task(jnp.zeros((N, 2), jnp.int32), y, m), jnp.asarray(ids))
    want = [R.rubric(spec, t, a)[0] for t, a in zip(texts, answers)]
    assert list(np.asarray(reward)) == want
    assert 0 < sum(want[: len(NUMBER_CASES)]) < len(NUMBER_CASES)


def test_rubric_similarity_equals_difflib_on_name_lists(tokenized, monkeypatch):
    """The rubric's batched ratio (packed-key block search, region widths by chunk) against difflib
    on shuffled name lists (many equal-length blocks: the tie-breaking), one call unbatched too."""
    monkeypatch.setattr(onepass, "_CHUNK", 64)
    tok, table, _, _, _ = tokenized
    rng = random.Random(7)
    names = ["al", "bo", "cy", "di", "ed", "flo", "gus", "hal", "ivy", "jo", "al bo", "bo, al"]
    texts, answers, ids = [], [], np.full((N, 40), table.eos_id, np.int32)
    for k in range(N):
        picked = rng.sample(names, rng.randint(0, 1 + k % 9))
        answers.append(", ".join(sorted(picked)).encode()[:A])
        row = tok.encode(", ".join(rng.sample(picked, len(picked)) if rng.random() < 0.7 else picked))[:40]
        ids[k, : len(row)] = row
        texts.append(tok.decode(row).encode()[:B])
    y, m = pack(answers, A)
    tasks = V.Task(jnp.zeros((N, 2), jnp.int32), y, m)
    verifier = RB.rubric({"answer": "similarity", "extract": "whole"}, table, B)
    _, metrics = jax.jit(jax.vmap(verifier.score))(tasks, jnp.asarray(ids))
    want = [np.float32(difflib.SequenceMatcher(None, t, a, autojunk=False).ratio()) for t, a in zip(texts, answers)]
    assert list(np.asarray(metrics["similarity"])) == want
    one = jax.jit(verifier.score)(jax.tree.map(lambda x: x[3], tasks), jnp.asarray(ids[3]))[1]["similarity"]
    assert float(one) == want[3]


@pytest.mark.parametrize("mode", ["fine", "sparse"])
def test_ratio_search_cut_to_the_batch_equals_difflib(mode):
    """The batched ratio search cut to the batch's longest region and longest answer
    (onepass._cuts; "fine": a chunk of a sorted batch, "sparse": a batch scored whole), one
    batch of 32 per region-length band so that every cut is used, regions at random offsets
    of a 96-byte text (moved to the front), against difflib on random strings over a small
    alphabet (long runs, many ties)."""
    rng = random.Random(11 if mode == "fine" else 12)
    cuts = onepass._cuts(B, A, sparse=mode == "sparse")
    assert cuts == ([(12, 32), (24, 32), (48, 32), (96, 32)] if mode == "fine" else [(12, 32), (48, 32), (96, 32)])
    search = jax.jit(functools.partial(onepass._ratio_many, cut=mode))
    low = 0
    for width, _ in cuts:
        lengths = [rng.randint(low + 1, width) for _ in range(31)] + [width]  # the band's longest fills its cut
        starts = [rng.randint(0, B - n) for n in lengths]
        texts = [bytes(rng.choice(b"aab c,") for _ in range(B)) for _ in lengths]
        answers = [bytes(rng.choice(b"abc ,") for _ in range(rng.randint(0, A))) for _ in lengths]
        x = np.asarray([list(t) for t in texts], np.int32)
        s_, e_ = np.asarray(starts, np.int32), np.asarray(starts, np.int32) + np.asarray(lengths, np.int32)
        x = np.where((np.arange(B) >= s_[:, None]) & (np.arange(B) < e_[:, None]), x, -1)  # -1 outside the region
        y, m = pack(answers, A)
        y = jnp.where(jnp.arange(A) < m[:, None], y, -1)
        got = np.asarray(search(jnp.asarray(x), jnp.asarray(s_), jnp.asarray(e_), y, m))
        want = [np.float32(difflib.SequenceMatcher(None, t[a:b], ans, autojunk=False).ratio())
                for t, a, b, ans in zip(texts, starts, e_, answers)]
        assert list(got) == want, width
        low = width
