"""The LM head applied in sequence chunks: token log-probabilities and entropies without ever
holding the full float32 logits ``[B, L, V]`` (a vocabulary of 150k makes them the largest
array of a policy-gradient step).

:func:`token_logprobs` scans over chunks of ``chunk_size`` positions; the chunk body is under
``jax.checkpoint``, so the backward pass recomputes one chunk's logits at a time instead of
keeping every chunk's from the forward pass.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from jaxrl.models.lm.model import precision

Array = jax.Array


def _chunk_stats(weight: Array, temperature: Array, h: Array, t: Array, *, tied: bool) -> tuple[Array, Array]:
    """log p(t) and entropy float32 ``[B, C]`` of one chunk ``h [B, C, D]``, targets ``t [B, C]``."""
    spec = "bcd,vd->bcv" if tied else "bcd,dv->bcv"
    logits = jnp.einsum(spec, h, weight, preferred_element_type=jnp.float32, precision=precision(h.dtype))
    logits = logits / temperature
    lse = jax.nn.logsumexp(logits, axis=-1)
    target = jnp.take_along_axis(logits, t[..., None], axis=-1)[..., 0]
    p = jnp.exp(logits - lse[..., None])
    return target - lse, lse - jnp.sum(p * logits, axis=-1)


def token_logprobs(model, params: dict, hidden: Array, targets: Array, temperature: float | Array = 1.0,
                   chunk_size: int = 256) -> tuple[Array, Array]:
    """``log softmax(logits / temperature)[targets]`` and the entropy of that distribution,
    both float32 ``[B, L]``, from final-normed ``hidden [B, L, D]`` (``model.hidden``) and
    integer ``targets [B, L]``. Equal to the full-logits computation, values and gradients."""
    b, length, d = hidden.shape
    chunk = max(1, min(chunk_size, length))
    n = -(-length // chunk)
    pad = n * chunk - length
    h = jnp.pad(hidden, ((0, 0), (0, pad), (0, 0))).reshape(b, n, chunk, d).swapaxes(0, 1)
    t = jnp.pad(targets.astype(jnp.int32), ((0, 0), (0, pad))).reshape(b, n, chunk).swapaxes(0, 1)
    tied = "lm_head" not in params
    weight = params["embed_tokens"] if tied else params["lm_head"]["kernel"]
    body = jax.checkpoint(functools.partial(_chunk_stats, tied=tied))
    temperature = jnp.asarray(temperature, jnp.float32)

    def step(carry, xs):
        return carry, body(weight, temperature, xs[0], xs[1])

    _, (logp, ent) = jax.lax.scan(step, None, (h, t))
    unchunk = lambda x: x.swapaxes(0, 1).reshape(b, n * chunk)[:, :length]  # noqa: E731
    return unchunk(logp), unchunk(ent)


def last_token_logits(model, params: dict, hidden: Array) -> Array:
    """float32 logits ``[B, V]`` of the last position of ``hidden [B, L, D]`` (the next-token
    distribution of a left-padded batch)."""
    return model.logits(params, hidden[:, -1])
