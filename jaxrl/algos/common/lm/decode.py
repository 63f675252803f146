"""A policy's turn of tokens: the draw of each token and the decode loop that writes a turn into a key/value cache.

:func:`decode_turn` runs :func:`jaxrl.models.lm.generate.decode_loop` (the one decode loop)
with the draw of a rollout: the rollout key split three ways per step, a token drawn from
``logits / temperature`` by inversion (:func:`jaxrl.core.prng.inverse_cdf`, one uniform per
row; greedy: the first argmax), its log-prob and the distribution's entropy kept for the
loss. GRPO's dialogues, its evaluation and SFT's evaluation all reach it through
:meth:`jaxrl.algos.common.lm.policy.TokenPolicy.decode`.
"""

from __future__ import annotations

import functools
from typing import Callable

import jax
import jax.numpy as jnp

from jaxrl.core import prng
from jaxrl.core.prng import first_argmax, gumbel_max, inverse_cdf_weights
from jaxrl.models.lm.generate import decode_loop

Array = jax.Array


def sample(logits: Array, temperature: Array, greedy: bool, key: Array, invert: bool = False,
           u: Array | None = None) -> tuple[Array, Array, Array]:
    """``(token int32 [N], logp [N], entropy [N])`` of ``logits [N, V] / temperature``: drawn by
    Gumbel-max (``jax.random.categorical``'s draw: small action spaces), or with ``invert`` by
    inversion (:func:`jaxrl.core.prng.inverse_cdf_weights`, one uniform per row: a
    vocabulary; ``u [N]`` the rows' uniforms, else ``key``'s)."""
    scaled = logits / temperature
    log_probs = jax.nn.log_softmax(scaled)
    probs = jnp.exp(log_probs)  # one exponential for the draw and the entropy
    if greedy:
        token = first_argmax(scaled)
    else:
        token = inverse_cdf_weights(key, probs, u) if invert else gumbel_max(key, scaled)
    logp = jnp.take_along_axis(log_probs, token[:, None], axis=1)[:, 0]
    return token, logp, -jnp.sum(probs * log_probs, axis=-1)


def _draw(temperature, greedy: bool, logits, key, j):
    key, k_act, _ = prng.split(key, 3)
    token, logp, entropy = sample(logits, temperature, greedy, k_act, invert=True)
    return key, token, (logp, entropy)


def _skip(key):
    return prng.split(key, 3)[0]  # _draw's split, the draw skipped


def _feed(extend: Callable, base, cache, token, j):
    cache, logits = extend(cache, token[:, None], base + j)
    return logits[:, -1].astype(jnp.float32), cache


def decode_turn(extend: Callable, cache, logits: Array, writing: Array, key: Array, base, temperature, greedy: bool,
                steps: int, end_of_turn: int, pad_id: int, stop_early: bool = True):
    """``(cache, logits, key, tokens, logp, mask, entropy)`` of one turn of up to ``steps`` tokens.

    ``extend(cache, tokens [N, 1], pos) -> (cache, logits [N, 1, V])`` writes a token at
    dialogue position ``pos`` (the first at ``base``); ``logits`` float32 ``[N, V]`` predict
    the first token; rows not ``writing`` (bool ``[N]``) write only the pad id. ``tokens``
    int32 ``[N, steps]`` (pad after a row's ``end_of_turn``), ``logp`` and ``entropy``
    float32 and ``mask`` bool (the row was writing: its end-of-turn included), each
    ``[N, steps]``; the cache and logits after the turn and the advanced ``key``.
    ``stop_early``: :func:`~jaxrl.models.lm.generate.decode_loop`'s (the same tokens, mask,
    masked values and key; the logits after the turn are only the full loop's without it).
    """
    logits, cache, key, tokens, mask, (logp, entropy) = decode_loop(
        functools.partial(_draw, temperature, greedy), functools.partial(_feed, extend, base), logits, cache, writing,
        key, steps=steps, pad_id=pad_id, end_ids=end_of_turn, stop_early=stop_early, skip=_skip)
    return cache, logits, key, tokens, logp, mask, entropy
