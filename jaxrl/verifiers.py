"""Verifiers: pure, total reward functions on int32 token arrays, composed like optax.

A :class:`Verifier` is a named tuple ``(score, low, high)``: ``score(task, completion)
-> (reward, metrics)`` is a pure JAX function and ``[low, high]`` is the documented range
of ``reward``. *Total*: every int32 array of the declared shape (garbage, out-of-vocabulary
or negative ids, no end-of-sequence token, empty) gives a finite float32 reward in ``[low,
high]`` (malformed output earns ``low``), never NaN, never an exception. ``metrics`` is a
flat ``dict[str, float32[]]`` of logged terms.

Shapes, for one example (``vmap`` for a batch)::

    task.prompt      int32[Lp]  the prompt tokens (left-padded with PAD)
    task.answer      int32[La]  the reference answer, PAD after ``answer_len``
    task.answer_len  int32[]    number of valid answer tokens
    completion       int32[Lc]  generated tokens; the completion ends at the first EOS
                                 (exclusive) or at ``Lc`` when there is none

Base verifiers (all in ``[0, 1]``): :func:`exact_match`, :func:`has_eos`,
:func:`token_accuracy`, :func:`similarity` (the LCS ratio, :func:`lcs_ratio`),
:func:`length_match`. Combinators build rubrics the way ``optax.chain`` builds optimisers:
:func:`weighted_sum` (weight 0 = logged metric only), :func:`gate` (format must hold before
correctness counts), :func:`power` and :func:`per_turn_mean`.

Token ids are the task's business; verifiers know only ``EOS`` (end of a completion) and
``PAD``, fixed here so every token task shares them. Guide: ``docs/rlvr.md``.
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
from flax import struct

from jaxrl.core.tokens import EOS, PAD

Array = jax.Array

# PAD (0, padding) and EOS (1, end of a completion) are the token-episode contract's.


@struct.dataclass
class Task:
    """One prompt and its reference answer (see the module docstring for shapes)."""

    prompt: Array  # int32 [Lp], left-padded with PAD
    answer: Array  # int32 [La], PAD after answer_len
    answer_len: Array  # int32 [], valid answer tokens


ScoreFn = Callable[[Task, Array], tuple[Array, dict]]


class Verifier(NamedTuple):
    """A pure, total reward function and its documented range ``[low, high]``."""

    score: ScoreFn
    low: float
    high: float

    def __call__(self, task: Task, completion: Array) -> tuple[Array, dict]:
        return self.score(task, completion)


# ---------------------------------------------------------------------------------------
# Completion parsing
# ---------------------------------------------------------------------------------------


def completion_length(completion: Array) -> Array:
    """int32 ``[]``: tokens before the first EOS (``Lc`` when there is no EOS; 0 when ``Lc = 0``)."""
    if completion.shape[-1] == 0:  # argmax of an empty array raises
        return jnp.zeros((), jnp.int32)
    is_eos = completion == EOS
    return jnp.where(jnp.any(is_eos), jnp.argmax(is_eos), completion.shape[-1]).astype(jnp.int32)


def valid_length(n: Array, width: int) -> Array:
    """int32 ``[]``: a length of any dtype as a count in ``[0, width]``.

    A float length is floored (NaN counts as 0): a fractional count of tokens covers only
    its whole tokens, so ratios built from it stay in range.
    """
    n = jnp.asarray(n)
    if jnp.issubdtype(n.dtype, jnp.floating):
        n = jnp.floor(jnp.nan_to_num(n, nan=0.0, posinf=float(width), neginf=0.0))
    elif n.dtype == jnp.bool_:
        n = n.astype(jnp.int32)
    return jnp.clip(n, 0, width).astype(jnp.int32)


def _in_range(r: Array, low: float, high: float) -> Array:
    """float32 ``r`` inside ``[low, high]`` (NaN counts as ``low``): the totality guarantee."""
    return jnp.clip(jnp.nan_to_num(r.astype(jnp.float32), nan=low), low, high).astype(jnp.float32)


def _answer_mask(task: Task, length: int) -> Array:
    """bool ``[length]``: positions ``< answer_len`` (answer_len clipped to ``[0, length]``)."""
    return jnp.arange(length) < valid_length(task.answer_len, length)


def _pad_to(x: Array, length: int) -> Array:
    """``x`` cut or right-padded with PAD to ``length``."""
    x = x[:length]
    return jnp.pad(x, (0, length - x.shape[0]), constant_values=PAD)


# ---------------------------------------------------------------------------------------
# Longest-common-subsequence ratio
# ---------------------------------------------------------------------------------------


def lcs_length(a: Array, len_a: Array, b: Array, len_b: Array) -> Array:
    """int32 ``[]``: length of a longest common subsequence of ``a[:len_a]`` and ``b[:len_b]``.

    ``a``: int ``[La]``, ``b``: int ``[Lb]``; lengths are made counts by :func:`valid_length`
    (clipped into range, floats floored). The classic
    dynamic programme ``L[i, j] = L[i-1, j-1] + 1 if a_i == b_j else max(L[i-1, j], L[i, j-1])``
    runs as a ``lax.scan`` over the rows ``i``; each row is vectorised, because
    ``L[i, j] = cummax_j(max(L[i-1, j], L[i-1, j-1] + [a_i == b_j]))`` (a match never loses
    to its neighbours, so the left-to-right dependency is a running maximum).
    O(La * Lb) work, La sequential steps.
    """
    la = valid_length(len_a, a.shape[0])
    lb = valid_length(len_b, b.shape[0])
    b_valid = jnp.arange(b.shape[0]) < lb

    def row(prev, inputs):  # prev: int32 [Lb + 1], L[i-1, :]
        a_i, i = inputs
        match = (b == a_i) & b_valid & (i < la)
        diag = prev[:-1] + match.astype(jnp.int32)
        cand = jnp.maximum(prev[1:], diag)
        cur = jnp.concatenate([jnp.zeros((1,), jnp.int32), jax.lax.cummax(cand)])
        return cur, None

    init = jnp.zeros((b.shape[0] + 1,), jnp.int32)
    last, _ = jax.lax.scan(row, init, (a, jnp.arange(a.shape[0])))
    return last[lb]


def lcs_ratio(a: Array, len_a: Array, b: Array, len_b: Array) -> Array:
    """float32 ``[]`` in ``[0, 1]``: ``2 * LCS(a, b) / (len_a + len_b)``; 1 when both are empty.

    The array analogue of ``difflib.SequenceMatcher(None, a, b, autojunk=False).ratio()``,
    which is ``2 * M / (len_a + len_b)`` with ``M`` the total size of difflib's matching
    blocks. Those blocks are found greedily (longest contiguous block first, earliest in
    ``a`` on ties, then recurse left and right of it), so they always form *a* common
    subsequence and ``M <= LCS``: the two ratios are equal whenever difflib's greedy blocks
    happen to be a longest common subsequence (always when one sequence is a contiguous
    block of the other or they share no tokens) and this ratio is larger otherwise.
    Smallest disagreement: ``a = [2, 0, 1, 2], b = [0, 2]``: difflib matches the leading
    ``2`` (M = 1, ratio 1/3) which blocks ``[0, 2]`` (LCS = 2, ratio 2/3). The LCS ratio is
    the one to reason about: the order-aware edit similarity, not a greedy heuristic. How
    often the two disagree is in ``docs/rlvr.md``. Unlike difflib there is no junk
    heuristic (``autojunk=False`` matches that).
    """
    la = valid_length(len_a, a.shape[0])
    lb = valid_length(len_b, b.shape[0])
    total = la + lb
    lcs = lcs_length(a, la, b, lb)
    return jnp.where(total > 0, 2.0 * lcs / jnp.maximum(total, 1), 1.0).astype(jnp.float32)


# ---------------------------------------------------------------------------------------
# Base verifiers
# ---------------------------------------------------------------------------------------


def _exact_match(task: Task, completion: Array) -> tuple[Array, dict]:
    n = completion_length(completion)
    width = max(task.answer.shape[0], completion.shape[0])
    ans, comp = _pad_to(task.answer, width), _pad_to(completion, width)
    mask = _answer_mask(task, width)
    same = jnp.all(jnp.where(mask, ans == comp, True)) & (n == valid_length(task.answer_len, width))
    r = _in_range(same.astype(jnp.float32), 0.0, 1.0)
    return r, {"exact_match": r}


#: 1 when the completion (up to EOS) equals the answer token for token, else 0.
exact_match = Verifier(_exact_match, 0.0, 1.0)


def _has_eos(task: Task, completion: Array) -> tuple[Array, dict]:
    r = _in_range(jnp.any(completion == EOS).astype(jnp.float32), 0.0, 1.0)
    return r, {"has_eos": r}


#: 1 when the completion contains an EOS (the format rule of every token task), else 0.
has_eos = Verifier(_has_eos, 0.0, 1.0)


def _token_accuracy(task: Task, completion: Array) -> tuple[Array, dict]:
    width = max(task.answer.shape[0], completion.shape[0]) + 1
    la = valid_length(task.answer_len, task.answer.shape[0])
    n = completion_length(completion)
    emitted = n + jnp.any(completion == EOS).astype(jnp.int32)  # tokens written, EOS included
    pos = jnp.arange(width)
    target = jnp.where(pos < la, _pad_to(task.answer, width), jnp.where(pos == la, EOS, -2))
    comp = jnp.where(pos < emitted, _pad_to(completion, width), -1)  # nothing after EOS counts
    hits = jnp.sum((comp == target) & (pos <= la))
    r = _in_range(hits / jnp.maximum(jnp.maximum(la + 1, emitted), 1), 0.0, 1.0)
    return r, {"token_accuracy": r}


#: Position-wise hits of the completion against ``answer + [EOS]`` (the EOS is a position
#: too), divided by ``max(answer_len + 1, tokens emitted)``; in ``[0, 1]``. A dense, still
#: verifiable shaping term: 1 exactly when the completion is the answer followed by EOS.
token_accuracy = Verifier(_token_accuracy, 0.0, 1.0)


def _similarity(task: Task, completion: Array) -> tuple[Array, dict]:
    r = _in_range(lcs_ratio(task.answer, task.answer_len, completion, completion_length(completion)), 0.0, 1.0)
    return r, {"similarity": r}


#: The LCS ratio (:func:`lcs_ratio`) of the completion and the answer, in ``[0, 1]``.
similarity = Verifier(_similarity, 0.0, 1.0)


def _length_match(task: Task, completion: Array) -> tuple[Array, dict]:
    n = completion_length(completion).astype(jnp.float32)
    la = valid_length(task.answer_len, task.answer.shape[0]).astype(jnp.float32)
    r = _in_range(1.0 - jnp.abs(n - la) / jnp.maximum(jnp.maximum(n, la), 1.0), 0.0, 1.0)
    return r, {"length_match": r}


#: ``1 - |len(completion) - len(answer)| / max(both, 1)``, in ``[0, 1]``.
length_match = Verifier(_length_match, 0.0, 1.0)


# ---------------------------------------------------------------------------------------
# Combinators
# ---------------------------------------------------------------------------------------


def _weighted_sum_score(low, high, terms, task, completion):
    reward = jnp.zeros((), jnp.float32)
    metrics = {}
    for name, weight, verifier in terms:
        r, m = verifier(task, completion)
        r = _in_range(r, verifier.low, verifier.high)
        reward = reward + jnp.float32(weight) * r
        metrics[name] = r
        metrics.update({f"{name}/{k}": v for k, v in m.items() if k != name})
    return _in_range(reward, low, high), metrics


def weighted_sum(*terms: tuple[str, float, Verifier]) -> Verifier:
    """``sum_i w_i * r_i`` over named terms ``(name, weight, verifier)``.

    Every term is logged under its name (weight 0 makes a term a logged metric only), its
    own metrics under ``name/key``. Range: ``[sum min(w lo, w hi), sum max(w lo, w hi)]``.
    """
    if not terms:
        raise ValueError("weighted_sum needs at least one (name, weight, verifier) term")
    names = [t[0] for t in terms]
    if len(set(names)) != len(names):
        raise ValueError(f"weighted_sum term names must be unique, got {names}")
    for t in terms:
        if len(t) != 3 or not isinstance(t[2], Verifier):
            raise TypeError(f"weighted_sum terms are (name, weight, Verifier), got {t!r}")
    terms = tuple((str(n), float(w), v) for n, w, v in terms)
    low = sum(min(w * v.low, w * v.high) for _, w, v in terms)
    high = sum(max(w * v.low, w * v.high) for _, w, v in terms)
    return Verifier(_bind(_weighted_sum_score, low, high, terms), low, high)


def _gate_score(condition, verifier, threshold, task, completion):
    c, cm = condition(task, completion)
    r, m = verifier(task, completion)
    passed = c >= threshold
    reward = _in_range(jnp.where(passed, r, jnp.float32(verifier.low)), verifier.low, verifier.high)
    return reward, {**cm, **m, "gate_passed": passed.astype(jnp.float32)}


def gate(condition: Verifier, verifier: Verifier, threshold: float = 1.0) -> Verifier:
    """``verifier``'s reward when ``condition``'s reward is ``>= threshold``, else its minimum.

    "Format must hold before correctness counts". Range: ``verifier``'s.
    """
    return Verifier(_bind(_gate_score, condition, verifier, float(threshold)), verifier.low, verifier.high)


def _power_score(verifier, exponent, task, completion):
    r, m = verifier(task, completion)
    r = _in_range(r, verifier.low, verifier.high)
    return _in_range(jnp.power(r, exponent), verifier.low**exponent, verifier.high**exponent), m


def power(verifier: Verifier, exponent: float) -> Verifier:
    """``reward ** exponent`` (rewards clipped at 0 first). Needs ``verifier.low >= 0``.

    The verifiers library's alphabet-sort reward is ``similarity ** 4``: near misses earn
    much less than exact answers.
    """
    if verifier.low < 0:
        raise ValueError(f"power needs a non-negative verifier (low >= 0), got low={verifier.low}")
    if exponent <= 0:
        raise ValueError(f"power needs exponent > 0, got {exponent}")
    e = float(exponent)
    return Verifier(_bind(_power_score, verifier, e), verifier.low**e, verifier.high**e)


def _per_turn_mean_score(verifier, task, completion):
    rewards, metrics = jax.vmap(verifier.score)(task, completion)  # [T], dict of [T]
    valid = (valid_length(task.answer_len, task.answer.shape[-1]) > 0).astype(jnp.float32)
    count = jnp.maximum(jnp.sum(valid), 1.0)
    mean = lambda x: (jnp.sum(x * valid) / count).astype(jnp.float32)  # noqa: E731
    rewards = _in_range(rewards, verifier.low, verifier.high)
    reward = _in_range(jnp.where(jnp.sum(valid) > 0, mean(rewards), jnp.float32(verifier.low)), verifier.low, verifier.high)
    return reward, {k: mean(v) for k, v in metrics.items()}


def per_turn_mean(verifier: Verifier) -> Verifier:
    """Mean of ``verifier`` over the turns of a multi-turn episode.

    ``task`` leaves and ``completion`` carry a leading turn axis ``[T, ...]``; turns with
    ``answer_len == 0`` are absent (not yet reached) and excluded from the mean (the
    minimum when no turn is present). Range: ``verifier``'s.
    """
    return Verifier(_bind(_per_turn_mean_score, verifier), verifier.low, verifier.high)


def _bind(fn, *args):
    """``functools.partial`` that keeps ``fn`` a module-level function (hashable, picklable)."""
    import functools

    return functools.partial(fn, *args)


def batch_score(verifier: Verifier, tasks: Task, completions: Array) -> tuple[Array, dict]:
    """``verifier`` over a batch: tasks with leaves ``[B, ...]``, completions ``[B, Lc]``."""
    return jax.vmap(verifier.score)(tasks, completions)
