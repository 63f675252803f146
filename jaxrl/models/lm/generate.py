"""Sampling from a causal LM token by token: the one decode loop (:func:`decode_loop`) and
:func:`generate`, transformers' ``generate`` on an :class:`~jaxrl.models.lm.model.LM`.

The loop draws a token from the current logits, writes the pad id instead once a row has
ended (an end id written), feeds the token back through the key/value cache, and stops when
every row has ended. GRPO's rollouts, SFT's evaluation (through
:class:`jaxrl.algos.common.lm.policy.TokenPolicy`) and :func:`generate` all run it.
:func:`generate` prefills the prompt once; its logits processors come in transformers'
order: temperature, top-k, top-p.
"""

from __future__ import annotations

import functools
from typing import Callable

import jax
import jax.numpy as jnp

from jaxrl.core import prng
from jaxrl.core.prng import first_argmax, inverse_cdf

Array = jax.Array


def sample_token(logits: Array, key: Array | None, temperature: float = 1.0, top_k: int = 0,
                 top_p: float = 1.0) -> Array:
    """Next token int32 ``[B]`` from float32 ``logits [B, V]``: argmax when ``key`` is None or
    ``temperature`` is 0, else a draw from ``softmax(logits / temperature)`` restricted to the
    ``top_k`` most likely tokens (0 = all) and to the smallest set whose probability reaches
    ``top_p``; drawn by inversion (:func:`jaxrl.core.prng.inverse_cdf`, as GRPO's rollouts)."""
    if key is None or temperature == 0:
        return first_argmax(logits)
    logits = logits / temperature
    if top_k > 0:
        kth = jax.lax.top_k(logits, top_k)[0][:, -1:]
        logits = jnp.where(logits < kth, -jnp.inf, logits)
    if top_p < 1.0:
        ordered = jnp.sort(logits, axis=-1)[:, ::-1]
        probs = jax.nn.softmax(ordered, axis=-1)
        before = jnp.cumsum(probs, axis=-1) - probs          # mass strictly above each token
        kept = jnp.where(before < top_p, ordered, jnp.inf)   # the first token is always kept
        logits = jnp.where(logits < jnp.min(kept, axis=-1, keepdims=True), -jnp.inf, logits)
    return inverse_cdf(key, logits)


def decode_loop(draw: Callable, feed: Callable, logits: Array, cache, writing: Array, key: Array, *, steps: int,
                pad_id: int, end_ids, stop_early: bool = True, skip: Callable | None = None):
    """``steps`` decode steps of ``N`` rows; returns ``(logits, cache, key, tokens, written, extras)``.

    Step ``j``: ``draw(logits [N, V], key, j) -> (key, token int32 [N], extras)`` (a tuple of
    ``[N]`` arrays: log-probs, entropies...); rows no longer ``writing`` get ``pad_id``
    instead; ``feed(cache, token [N], j) -> (logits [N, V], cache)`` reads the token; a row
    stops writing after one of ``end_ids`` (int or tuple). ``tokens`` int32 ``[N, steps]``
    (pad after a row's end), ``written`` bool ``[N, steps]`` (the row was writing: its end
    id included) and each of ``extras`` ``[N, steps]``, 0 where no step ran.

    ``stop_early``: a ``while_loop`` that stops once no row is writing; its tokens, masks and
    masked extras equal the fixed-length loop's, whose remaining steps would only write pad
    ids. The key then goes through ``skip`` once per skipped step (``None``: unchanged), so
    draws after the loop are the fixed-length loop's too. The logits and cache after an early
    stop are not those of the fixed-length loop: without ``stop_early`` every step runs.
    """
    n = writing.shape[0]
    ends = jnp.asarray(end_ids, jnp.int32).reshape(-1)
    shapes = jax.eval_shape(draw, logits, key, jnp.int32(0))[2]

    def body(carry):
        j, (logits, cache, writing, key), outs = carry
        key, token, extras = draw(logits, key, j)
        token = jnp.where(writing, token, pad_id)
        logits, cache = feed(cache, token, j)
        new = (token, writing) + tuple(extras)
        going = writing & ~jnp.isin(token, ends)
        return j + 1, (logits, cache, going, key), tuple(o.at[j].set(x) for o, x in zip(outs, new))

    def cond(carry):
        j, (_, _, writing, _), _ = carry
        return (j < steps) & jnp.any(writing) if stop_early else j < steps

    outs = (jnp.full((steps, n), pad_id, jnp.int32), jnp.zeros((steps, n), jnp.bool_)) + tuple(
        jnp.zeros((steps,) + s.shape, s.dtype) for s in shapes)
    j, (logits, cache, _, key), outs = jax.lax.while_loop(cond, body, (jnp.int32(0), (logits, cache, writing, key), outs))
    if skip is not None:
        key = jax.lax.fori_loop(j, steps, lambda _, k: skip(k), key)
    tokens, written, *extras = (jnp.swapaxes(x, 0, 1) for x in outs)
    return logits, cache, key, tokens, written, tuple(extras)



def refill_loop(draw: Callable, feed: Callable, refill: Callable, logits: Array, cache, *, pairs: int, steps: int,
                pad_id: int, end_ids):
    """Continuous batching: ``pairs`` sequences of up to ``steps`` tokens decoded on ``R`` rows.

    Row ``r`` starts on sequence ``r`` (``logits [R, V]`` and ``cache`` hold the rows' start
    states); when its sequence ends (one of ``end_ids`` written, or ``steps`` tokens) it takes
    the next sequence of the queue, so no row idles while sequences wait: the loop runs about
    ``sum(lengths) / R`` iterations instead of ``pairs / R`` times the longest length. Shapes
    are static (one compile whatever the lengths); the ``while_loop`` stops once the queue is
    drained and every row has ended.

    Callables, on the rows' sequence ``pair`` int32 ``[R]`` and step within it ``step``
    int32 ``[R]``: ``draw(logits, pair, step) -> (token int32 [R], extras)`` (a tuple of
    ``[R]`` arrays); ``feed(cache, token, step) -> (logits, cache)`` reads each row's token at
    its own step; ``refill(logits, cache, take bool [R], pair) -> (logits, cache)`` gives the
    ``take`` rows the start state of sequence ``pair``. A draw that depends only on
    ``(pair, step)`` and the sequence's own tokens makes each sequence the one a row of
    :func:`decode_loop` would write, whichever row serves it and when.

    Returns ``(tokens, written, extras, iterations)``: ``tokens`` int32 ``[pairs, steps]`` (pad
    after a sequence's end), ``written`` bool (its end id included), each of ``extras``
    ``[pairs, steps]`` (0 where not written) and the loop's iteration count.
    """
    rows = logits.shape[0]
    if not 1 <= rows <= pairs:
        raise ValueError(f"refill_loop: {rows} rows for {pairs} sequences; expected 1 <= rows <= sequences")
    ends = jnp.asarray(end_ids, jnp.int32).reshape(-1)
    row_idx = jnp.arange(rows, dtype=jnp.int32)
    shapes = jax.eval_shape(draw, logits, row_idx, row_idx)[1]

    def body(carry):
        it, nxt, pair, step, logits, cache, outs = carry
        active = pair < pairs
        token, extras = draw(logits, pair, step)
        token = jnp.where(active, token, pad_id)
        at = (jnp.where(active, pair, pairs), step)  # an idle row's writes fall outside and are dropped
        outs = tuple(o.at[at].set(x, mode="drop") for o, x in zip(outs, (token, active) + tuple(extras)))
        logits, cache = feed(cache, token, step)
        done = active & (jnp.isin(token, ends) | (step + 1 >= steps))
        new = jnp.where(done, nxt + jnp.cumsum(done, dtype=jnp.int32) - 1, pair)  # handed out in row order
        take = done & (new < pairs)
        logits, cache = jax.lax.cond(jnp.any(take), refill, lambda lg, c, *_: (lg, c), logits, cache, take, new)
        pair = jnp.where(done, jnp.minimum(new, pairs), pair)
        step = jnp.where(done, 0, step + 1)
        return it + 1, nxt + jnp.sum(done, dtype=jnp.int32), pair, step, logits, cache, outs

    def cond(carry):
        return jnp.any(carry[2] < pairs)

    outs = (jnp.full((pairs, steps), pad_id, jnp.int32), jnp.zeros((pairs, steps), jnp.bool_)) + tuple(
        jnp.zeros((pairs, steps) + s.shape[1:], s.dtype) for s in shapes)
    carry = (jnp.int32(0), jnp.int32(rows), row_idx, jnp.zeros((rows,), jnp.int32), logits, cache, outs)
    it, *_, (tokens, written, *extras) = jax.lax.while_loop(cond, body, carry)
    return tokens, written, tuple(extras), it


def _generate_draw(keys, temperature, top_k, top_p, greedy, logits, key, j):
    return key, sample_token(logits, None if greedy else keys[j], temperature, top_k, top_p), ()


def _generate_feed(model, params, lora, length, cache, token, j):
    logits, cache = model.decode(params, cache, token, length + j, lora=lora)
    return logits, cache


@functools.partial(jax.jit, static_argnames=("model", "max_new_tokens", "temperature", "top_k", "top_p",
                                             "eos_ids", "greedy"))
def _generate(model, params, input_ids, attention_mask, key, lora, *, max_new_tokens, temperature, top_k,
              top_p, eos_ids, greedy):
    b, length = input_ids.shape
    # greedy decoding draws nothing: no threefry in the program
    keys = jnp.zeros((max_new_tokens, 2), jnp.uint32) if greedy else prng.split(key, max_new_tokens)
    logits, cache = model.prefill(params, input_ids, attention_mask, length + max_new_tokens, lora=lora)
    draw = functools.partial(_generate_draw, keys, temperature, top_k, top_p, greedy)
    feed = functools.partial(_generate_feed, model, params, lora, length)
    tokens = decode_loop(draw, feed, logits[:, -1], cache, jnp.ones((b,), jnp.bool_), jnp.zeros((2,), jnp.uint32),
                         steps=max_new_tokens, pad_id=model.pad_id, end_ids=eos_ids if eos_ids else (-1,))[3]
    return jnp.concatenate([input_ids.astype(jnp.int32), tokens], axis=1)


def generate(model, params: dict, input_ids: Array, attention_mask: Array | None = None, *,
             max_new_tokens: int, key: Array | None = None, temperature: float = 1.0, top_k: int = 0,
             top_p: float = 1.0, eos_ids: tuple[int, ...] | None = None, lora=None) -> Array:
    """int32 ``[B, L + max_new_tokens]``: the left-padded prompt ``input_ids [B, L]`` followed by
    the generated tokens, ``model.pad_id`` after a row's end id (``eos_ids``, default
    ``model.eos_ids``). Greedy when ``key`` is None or ``temperature`` is 0."""
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
    input_ids = jnp.asarray(input_ids, jnp.int32)
    mask = jnp.ones(input_ids.shape, bool) if attention_mask is None else jnp.asarray(attention_mask).astype(bool)
    greedy = key is None or temperature == 0
    eos = tuple(int(e) for e in (model.eos_ids if eos_ids is None else eos_ids))
    return _generate(model, params, input_ids, mask, None if greedy else key, lora,
                     max_new_tokens=int(max_new_tokens), temperature=float(temperature), top_k=int(top_k),
                     top_p=float(top_p), eos_ids=eos, greedy=greedy)
