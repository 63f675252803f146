"""SFT's loss: mean token cross-entropy on a demonstration's completion tokens only.

A demonstration is a prompt ``int32 [Lp]`` (left-padded with the task's pad id) and a
completion ``int32 [Lc]`` (the reference answer, its end-of-turn token, then the pad id).
One forward pass runs over ``prompt + completion`` (the pad id is "no token": never attended,
taking no position, as :mod:`jaxrl.models.lm` treats a left-padded batch); the hidden states
at positions ``Lp - 1 ..`` predict the completion. The targets are the completion's tokens
up to and including its first end-of-turn (the model must learn to stop); prompt tokens and
the padding after the end carry no loss and no gradient. The LM head runs in chunks of
positions under ``jax.checkpoint`` (:func:`token_stats`), so ``[N, T, V]`` float32 logits are
never held whole.
"""

from __future__ import annotations


import jax
import jax.numpy as jnp

from jaxrl.core.tokens import turn_tokens_written
from jaxrl.models.lm.head import chunked_head

Array = jax.Array


def completion_mask(completions: Array, end_of_turn: int) -> Array:
    """bool ``[N, Lc]``: the target tokens of each completion, through its first
    ``end_of_turn`` (all ``Lc`` when it has none)."""
    written = jax.vmap(turn_tokens_written, in_axes=(0, None))(completions, end_of_turn)
    return jnp.arange(completions.shape[1])[None, :] < written[:, None]


def _logp_hit(logits: Array, t: Array) -> tuple[Array, Array]:
    """log p(t) float32 ``[B, C]`` and whether ``t`` is the argmax."""
    target = jnp.take_along_axis(logits, t[..., None], axis=-1)[..., 0]
    hit = target >= jnp.max(logits, axis=-1)
    return target - jax.nn.logsumexp(logits, axis=-1), jax.lax.stop_gradient(hit)


def token_stats(params: dict, hidden: Array, targets: Array, chunk_size: int) -> tuple[Array, Array]:
    """``(log p(targets) float32 [B, L], target is the top logit bool [B, L])`` from final-normed
    ``hidden [B, L, D]``, the LM head applied ``chunk_size`` positions at a time
    (:func:`jaxrl.models.lm.head.chunked_head`: one chunk's logits alive at a time)."""
    return chunked_head(params, hidden, targets, chunk_size, _logp_hit)


def completion_hidden(model, base, adapters, prompts: Array, completions: Array, pad_id: int,
                      remat: bool = True) -> Array:
    """Final hidden states ``[N, Lc, D]`` of the positions that predict each completion token:
    one pass over ``prompt + completion`` (without its last token), pad ids masked; ``remat``:
    each layer's inside recomputed in the backward pass."""
    ids = jnp.concatenate([prompts, completions], axis=1)[:, :-1].astype(jnp.int32)
    hidden = model.hidden(base, ids, ids != pad_id, lora=adapters, remat=remat)
    return hidden[:, prompts.shape[1] - 1 :]


def sft_loss(model, head_chunk: int, pad_id: int, base, adapters, prompts: Array, completions: Array, mask: Array,
             denom: Array, remat: bool = True) -> tuple[Array, dict]:
    """``sum(-log p(target) * mask) / denom`` (``denom``: the whole batch's target count, so
    micro-batch losses add up to the batch's token mean) and the sums behind the metrics:
    ``hits`` (targets that are the top logit) and ``sequences_exact`` (rows whose every
    target is)."""
    hidden = completion_hidden(model, base, adapters, prompts, completions, pad_id, remat)
    logp, hit = token_stats(base, hidden, completions, head_chunk)
    nll = -jnp.sum(jnp.where(mask, logp, 0.0))
    hits = jnp.sum(hit & mask)
    exact = jnp.sum(jnp.all(hit | ~mask, axis=1))
    return nll / denom, {"hits": hits.astype(jnp.float32), "sequences_exact": exact.astype(jnp.float32)}
