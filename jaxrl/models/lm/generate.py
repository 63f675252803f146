"""Sampling from an :class:`~jaxrl.models.lm.model.LM` the way transformers' ``generate`` does:
the prompt is prefilled once, then one jitted ``lax.scan`` of cached decode steps; a row that
has produced an end id writes ``model.pad_id`` from then on. Logits processors in
transformers' order: temperature, top-k, top-p.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from jaxrl.core.prng import first_argmax, gumbel_max

Array = jax.Array


def sample_token(logits: Array, key: Array | None, temperature: float = 1.0, top_k: int = 0,
                 top_p: float = 1.0) -> Array:
    """Next token int32 ``[B]`` from float32 ``logits [B, V]``: argmax when ``key`` is None or
    ``temperature`` is 0, else a draw from ``softmax(logits / temperature)`` restricted to the
    ``top_k`` most likely tokens (0 = all) and to the smallest set whose probability reaches
    ``top_p``."""
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
    return gumbel_max(key, logits)


@functools.partial(jax.jit, static_argnames=("model", "max_new_tokens", "temperature", "top_k", "top_p",
                                             "eos_ids", "greedy"))
def _generate(model, params, input_ids, attention_mask, key, lora, *, max_new_tokens, temperature, top_k,
              top_p, eos_ids, greedy):
    b, length = input_ids.shape
    eos = jnp.asarray(eos_ids if eos_ids else (-1,), jnp.int32)
    def draw(logits, k):
        return sample_token(logits, None if greedy else k, temperature, top_k, top_p)

    # greedy decoding draws nothing: no threefry in the program
    keys = jnp.zeros((max_new_tokens, 2), jnp.uint32) if greedy else jax.random.split(key, max_new_tokens)
    logits, cache = model.prefill(params, input_ids, attention_mask, length + max_new_tokens, lora=lora)
    first = draw(logits[:, -1], keys[0])
    done = jnp.isin(first, eos)

    def step(carry, xs):
        cache, token, done = carry
        slot, k = xs
        logits, cache = model.decode(params, cache, token, slot, lora=lora)
        nxt = jnp.where(done, model.pad_id, draw(logits, k))
        return (cache, nxt, done | jnp.isin(nxt, eos)), nxt

    slots = length + jnp.arange(max_new_tokens - 1, dtype=jnp.int32)
    _, rest = jax.lax.scan(step, (cache, first, done), (slots, keys[1:]))
    return jnp.concatenate([input_ids.astype(jnp.int32), first[:, None], rest.T], axis=1)


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
