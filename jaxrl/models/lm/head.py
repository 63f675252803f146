"""The LM head applied in sequence chunks: token log-probabilities and entropies without ever
holding the full float32 logits ``[B, L, V]`` (a vocabulary of 150k makes them the largest
array of a policy-gradient step).

:func:`token_logprobs` (and any per-token statistic, :func:`chunked_head`) scans over chunks of
``chunk_size`` positions; the chunk body is under
``jax.checkpoint``, so the backward pass recomputes one chunk's logits at a time instead of
keeping every chunk's from the forward pass.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jaxrl.models.lm.model import precision

Array = jax.Array


def _logits(weight: Array, h: Array, tied: bool) -> Array:
    """float32 logits ``[B, C, V]`` of one chunk ``h [B, C, D]``."""
    spec = "bcd,vd->bcv" if tied else "bcd,dv->bcv"
    return jnp.einsum(spec, h, weight, preferred_element_type=jnp.float32, precision=precision(h.dtype))


def chunked_head(params: dict, hidden: Array, targets: Array, chunk_size: int, stats, *args) -> tuple[Array, ...]:
    """``stats(logits [B, C, V], targets [B, C], *args)`` (a tuple of ``[B, C]`` arrays) over
    the whole sequence of final-normed ``hidden [B, L, D]``, the LM head applied ``chunk_size``
    positions at a time under ``jax.checkpoint``; returns each output as ``[B, L]``.
    ``chunk_size`` 0 (or at least ``L``): the whole sequence at once, no loop and no
    recomputation (the full ``[B, L, V]`` logits live through the backward pass)."""
    b, length, d = hidden.shape
    tied = "lm_head" not in params
    weight = params["embed_tokens"] if tied else params["lm_head"]["kernel"]
    if chunk_size <= 0 or chunk_size >= length:
        return tuple(stats(_logits(weight, hidden, tied), targets.astype(jnp.int32), *args))
    chunk = chunk_size
    n = -(-length // chunk)
    pad = n * chunk - length
    h = jnp.pad(hidden, ((0, 0), (0, pad), (0, 0))).reshape(b, n, chunk, d).swapaxes(0, 1)
    t = jnp.pad(targets.astype(jnp.int32), ((0, 0), (0, pad))).reshape(b, n, chunk).swapaxes(0, 1)
    body = jax.checkpoint(lambda w, hc, tc, *a: stats(_logits(w, hc, tied), tc, *a))

    def step(carry, xs):
        return carry, body(weight, xs[0], xs[1], *args)

    _, out = jax.lax.scan(step, None, (h, t))
    return tuple(x.swapaxes(0, 1).reshape(b, n * chunk)[:, :length] for x in out)


def _logp_entropy(logits: Array, t: Array, temperature: Array) -> tuple[Array, Array]:
    """log p(t) and entropy float32 ``[B, C]`` at ``temperature``."""
    logits = logits / temperature
    lse = jax.nn.logsumexp(logits, axis=-1)
    target = jnp.take_along_axis(logits, t[..., None], axis=-1)[..., 0]
    p = jnp.exp(logits - lse[..., None])
    return target - lse, lse - jnp.sum(p * logits, axis=-1)


def token_logprobs(model, params: dict, hidden: Array, targets: Array, temperature: float | Array = 1.0,
                   chunk_size: int = 256) -> tuple[Array, Array]:
    """``log softmax(logits / temperature)[targets]`` and the entropy of that distribution,
    both float32 ``[B, L]``, from final-normed ``hidden [B, L, D]`` (``model.hidden``) and
    integer ``targets [B, L]``. Equal to the full-logits computation, values and gradients;
    ``chunk_size`` 0: the whole sequence in one piece (:func:`chunked_head`)."""
    return chunked_head(params, hidden, targets, chunk_size, _logp_entropy, jnp.asarray(temperature, jnp.float32))


def last_token_logits(model, params: dict, hidden: Array) -> Array:
    """float32 logits ``[B, V]`` of the last position of ``hidden [B, L, D]`` (the next-token
    distribution of a left-padded batch)."""
    return model.logits(params, hidden[:, -1])
