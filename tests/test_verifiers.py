"""Verifiers: hand tables, combinators, the LCS ratio against difflib, and totality."""

import difflib
import random

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jaxrl import verifiers as V
from jaxrl.verifiers import EOS, PAD
from jaxrl_envs.text import AlphabetSort, Reverse
from jaxrl_envs.text.base import digit_rubric

LA, LC = 4, 6  # answer and completion widths of the hand tables


def task(answer):
    a = list(answer)
    return V.Task(jnp.zeros((3,), jnp.int32), jnp.array(a + [PAD] * (LA - len(a)), jnp.int32), jnp.int32(len(a)))


def comp(tokens):
    t = list(tokens)
    return jnp.array(t + [PAD] * (LC - len(t)), jnp.int32)


def score(verifier, answer, completion):
    return float(verifier(task(answer), comp(completion))[0])


# (answer, completion, exact_match, token_accuracy, has_eos, length_match)
# token_accuracy compares against answer + [EOS] and divides by max(len(answer) + 1, emitted).
TABLE = [
    ([7, 8, 9], [7, 8, 9, EOS], 1.0, 1.0, 1.0, 1.0),
    ([7, 8, 9], [7, 8, 9, EOS, 5, 5], 1.0, 1.0, 1.0, 1.0),  # after EOS nothing counts
    ([7, 8, 9], [7, 8, 9, 5, 5, 5], 0.0, 3 / 6, 0.0, 1 - 3 / 6),  # no EOS: 6 tokens emitted
    ([7, 8, 9], [7, 9, 8, EOS], 0.0, 2 / 4, 1.0, 1.0),  # 7 and EOS right
    ([7, 8, 9], [7, 8, EOS], 0.0, 2 / 4, 1.0, 1 - 1 / 3),  # early EOS
    ([7, 8, 9], [EOS], 0.0, 0.0, 1.0, 0.0),  # empty completion
    ([7, 8, 9], [], 0.0, 0.0, 0.0, 1 - 3 / 6),  # all PAD, no EOS: 6 wrong tokens
    ([7, 8, 9], [99, -3, 7, EOS], 0.0, 1 / 4, 1.0, 1.0),  # OOV and negative ids; only the EOS is right
    ([], [EOS], 1.0, 1.0, 1.0, 1.0),  # empty answer, empty completion
]


@pytest.mark.parametrize("answer,completion,exact,acc,eos,length", TABLE)
def test_base_verifier_table(answer, completion, exact, acc, eos, length):
    assert score(V.exact_match, answer, completion) == pytest.approx(exact)
    assert score(V.token_accuracy, answer, completion) == pytest.approx(acc)
    assert score(V.has_eos, answer, completion) == pytest.approx(eos)
    assert score(V.length_match, answer, completion) == pytest.approx(length)


@pytest.mark.parametrize(
    "answer,completion,expected",
    [
        ([7, 8, 9], [7, 8, 9, EOS], 1.0),
        ([7, 8, 9], [9, 8, 7, EOS], 2 * 1 / 6),  # LCS 1 of 3 + 3 tokens
        ([7, 8, 9], [7, 9, EOS], 2 * 2 / 5),  # a dropped token
        ([7, 8, 9], [5, 7, 5, 8, 9, EOS], 2 * 3 / 8),  # inserted tokens
        ([7, 8, 9], [EOS], 0.0),
        ([], [EOS], 1.0),  # both empty: difflib's 1.0
    ],
)
def test_similarity_table(answer, completion, expected):
    assert score(V.similarity, answer, completion) == pytest.approx(expected)


def test_weighted_sum_gate_power_table():
    rubric = V.weighted_sum(("exact", 0.5, V.exact_match), ("acc", 0.5, V.token_accuracy), ("eos", 0.0, V.has_eos))
    assert (rubric.low, rubric.high) == (0.0, 1.0)
    r, m = rubric(task([7, 8, 9]), comp([7, 9, 8, EOS]))
    assert float(r) == pytest.approx(0.5 * 0.0 + 0.5 * 0.5)
    assert set(m) >= {"exact", "acc", "eos"} and float(m["eos"]) == 1.0  # weight 0: logged only
    gated = V.gate(V.has_eos, V.token_accuracy)
    assert score(gated, [7, 8, 9], [7, 8, 9, 5, 5, 5]) == 0.0  # format fails: the minimum
    assert score(gated, [7, 8, 9], [7, 9, 8, EOS]) == pytest.approx(0.5)
    p4 = V.power(V.similarity, 4.0)
    assert score(p4, [7, 8, 9], [7, 9, EOS]) == pytest.approx((4 / 5) ** 4)
    neg = V.weighted_sum(("pen", -1.0, V.has_eos), ("acc", 2.0, V.token_accuracy))
    assert (neg.low, neg.high) == (-1.0, 2.0)


def test_per_turn_mean_averages_present_turns():
    answers = jnp.array([[7, 8, PAD, PAD], [9, PAD, PAD, PAD], [PAD] * 4], jnp.int32)
    tasks = V.Task(jnp.zeros((3, 3), jnp.int32), answers, jnp.array([2, 1, 0], jnp.int32))  # turn 3 absent
    completions = jnp.array([[7, 8, EOS, 0, 0, 0], [5, EOS, 0, 0, 0, 0], [7, 7, 7, 7, 7, 7]], jnp.int32)
    r, m = V.per_turn_mean(V.exact_match)(tasks, completions)
    assert float(r) == pytest.approx(0.5)  # turn 1 right, turn 2 wrong, turn 3 not counted
    assert float(m["exact_match"]) == pytest.approx(0.5)
    empty = V.Task(tasks.prompt, answers, jnp.zeros((3,), jnp.int32))
    assert float(V.per_turn_mean(V.exact_match)(empty, completions)[0]) == 0.0


def test_combinator_errors_name_the_problem():
    with pytest.raises(ValueError, match="unique"):
        V.weighted_sum(("a", 1.0, V.exact_match), ("a", 1.0, V.has_eos))
    with pytest.raises(ValueError, match="non-negative"):
        V.power(V.weighted_sum(("x", -1.0, V.has_eos)), 2.0)
    with pytest.raises(TypeError, match="Verifier"):
        V.weighted_sum(("a", 1.0, lambda t, c: (0.0, {})))
    with pytest.raises(ValueError, match="rubric"):
        digit_rubric("fuzzy")


# ---------------------------------------------------------------------------------------
# The LCS ratio: exact LCS everywhere, difflib where difflib's greedy blocks are optimal
# ---------------------------------------------------------------------------------------


def python_lcs(a, b):
    table = [[0] * (len(b) + 1) for _ in range(len(a) + 1)]
    for i, x in enumerate(a):
        for j, y in enumerate(b):
            table[i + 1][j + 1] = table[i][j] + 1 if x == y else max(table[i][j + 1], table[i + 1][j])
    return table[-1][-1]


W = 8
_lcs_batch = jax.jit(jax.vmap(V.lcs_length))
_ratio_batch = jax.jit(jax.vmap(V.lcs_ratio))


def test_lcs_ratio_against_python_lcs_and_difflib():
    rng = random.Random(0)
    pairs = []
    for _ in range(400):
        la, lb = rng.randint(0, W), rng.randint(0, W)
        pairs.append(([rng.randint(0, 3) for _ in range(la)], [rng.randint(0, 3) for _ in range(lb)]))
    pad = lambda s: s + [PAD] * (W - len(s))  # noqa: E731  (PAD beyond the length never matches)
    a = jnp.array([pad(p[0]) for p in pairs], jnp.int32)
    b = jnp.array([pad(p[1]) for p in pairs], jnp.int32)
    la = jnp.array([len(p[0]) for p in pairs], jnp.int32)
    lb = jnp.array([len(p[1]) for p in pairs], jnp.int32)
    lcs = np.asarray(_lcs_batch(a, la, b, lb))
    ratio = np.asarray(_ratio_batch(a, la, b, lb))
    agree = 0
    for k, (x, y) in enumerate(pairs):
        assert lcs[k] == python_lcs(x, y)
        matcher = difflib.SequenceMatcher(None, x, y, autojunk=False)
        blocks = sum(m.size for m in matcher.get_matching_blocks())
        assert ratio[k] >= matcher.ratio() - 1e-6  # greedy blocks are a common subsequence
        if blocks == lcs[k]:
            agree += 1
            assert ratio[k] == pytest.approx(matcher.ratio(), abs=1e-6)
    assert agree >= 0.8 * len(pairs)  # the comparison with difflib is not vacuous


def test_lcs_ratio_documented_disagreement_with_difflib():
    a, b = [2, 0, 1, 2], [0, 2]
    r = V.lcs_ratio(jnp.array(a), 4, jnp.array(b + [0, 0]), 2)
    assert float(r) == pytest.approx(2 * 2 / 6)
    assert difflib.SequenceMatcher(None, a, b, autojunk=False).ratio() == pytest.approx(2 * 1 / 6)


# ---------------------------------------------------------------------------------------
# Totality: any int32 array of the declared shape gives a finite reward in range
# ---------------------------------------------------------------------------------------

_REVERSE = Reverse(max_digits=4)
_ALPHA = AlphabetSort()
VERIFIERS = {
    "exact_match": V.exact_match,
    "token_accuracy": V.token_accuracy,
    "similarity": V.similarity,
    "length_match": V.length_match,
    "has_eos": V.has_eos,
    "gate_power": V.gate(V.has_eos, V.power(V.similarity, 4.0)),
    "reverse_dense": _REVERSE.verifier,
    "reverse_exact": digit_rubric("exact"),
    "alphabet_sort": _ALPHA.verifier,
}
#: Every verifier over a batch, in one program (one compile per input shape and dtype).
_ALL_BATCHED = jax.jit(lambda tasks, comps: {name: jax.vmap(v.score)(tasks, comps) for name, v in VERIFIERS.items()})

ids = st.one_of(st.integers(-(2**31), 2**31 - 1), st.integers(-2, 45), st.sampled_from([PAD, EOS]))


int_lens = st.lists(st.integers(-5, LA + 5), min_size=8, max_size=8).map(lambda x: np.array(x, np.int32))
float_lens = st.lists(
    st.one_of(st.floats(-5, LA + 5, width=32), st.sampled_from([np.nan, np.inf, -np.inf])), min_size=8, max_size=8
).map(lambda x: np.array(x, np.float32))


@settings(max_examples=30, deadline=None)
@given(
    answers=st.lists(st.lists(ids, min_size=LA, max_size=LA), min_size=8, max_size=8),
    lens=st.one_of(int_lens, float_lens),
    completions=st.lists(st.lists(ids, min_size=LC, max_size=LC), min_size=8, max_size=8),
    width=st.sampled_from([0, LC]),  # Lc = 0: the empty completion
)
def test_verifiers_are_total(answers, lens, completions, width):
    """Any int32 answer and completion of the declared shapes (``Lc`` 0 included) and any
    answer length, int or float (NaN and infinities included), scores in range."""
    tasks = V.Task(jnp.zeros((8, 3), jnp.int32), jnp.array(answers, jnp.int32), jnp.asarray(lens))
    comps = jnp.array(completions, jnp.int32)[:, :width]
    for name, (r, metrics) in _ALL_BATCHED(tasks, comps).items():
        r = np.asarray(r)
        v = VERIFIERS[name]
        assert r.dtype == np.float32 and np.all(np.isfinite(r)), name
        assert np.all(r >= v.low) and np.all(r <= v.high), (name, r)  # clamped: no tolerance
        assert all(np.all(np.isfinite(np.asarray(x))) for x in metrics.values()), name


def test_malformed_output_earns_the_minimum():
    t = task([7, 8, 9])
    garbage = jnp.array([-1, 2**31 - 1, 40, -(2**31), 3, 3], jnp.int32)  # no EOS, nothing right
    for name in ("exact_match", "token_accuracy", "similarity", "gate_power", "reverse_exact", "reverse_dense"):
        assert float(VERIFIERS[name](t, garbage)[0]) == VERIFIERS[name].low, name
