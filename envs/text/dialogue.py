"""Shared pieces of the dialogue token tasks (multi-turn, tools): their vocabulary and split.

A dialogue task is a :class:`~jaxrl.core.tokens.DialogueTask`: ``start`` draws a prompt from
the training or held-out split (the single-turn tasks' rule, :func:`jaxrl_envs.text.base.
set_free_token` on the prompt's free token), ``respond`` answers each policy turn with reply
tokens and per-token rewards. The vocabulary is the single-turn tasks' plus ``? < > !``
(:data:`jaxrl_envs.text.vocab.DIALOGUE_VOCAB_SIZE`).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jaxrl.core.tokens import PAD, DialogueTask
from jaxrl_envs.text.vocab import COMMA, DIALOGUE_VOCAB_SIZE, DIGIT0, SEP

Array = jax.Array


class DialogueEnv(DialogueTask):
    """Base of the dialogue tasks: the extended vocabulary, text decoding, the held-out switch."""

    vocab_size = DIALOGUE_VOCAB_SIZE

    def decode(self, tokens) -> str:
        from jaxrl_envs.text.vocab import decode

        return decode(tokens)

    def held_out_params(self, params):
        """``params`` with the held-out split switched on."""
        return params.replace(held_out=True)


def join_names(names: Array, end: int = COMMA) -> Array:
    """int32 ``[n * (L + 1)]``: letter-token names ``[n, L]`` each followed by a comma, the
    last by ``end``."""
    seps = jnp.full((names.shape[0], 1), COMMA, jnp.int32).at[-1, 0].set(end)
    return jnp.concatenate([names.astype(jnp.int32), seps], axis=1).reshape(-1)


def token_hits(turn: Array, answer: Array, answer_len: Array, end_of_turn: int) -> Array:
    """float32 ``[Tt]``: the per-token split of :func:`jaxrl.verifiers.token_accuracy` of
    ``turn`` against ``answer`` followed by ``end_of_turn``: slot ``i`` holds ``1 / n`` when it
    is right (``n = max(answer_len + 1, tokens written)``), else 0, so the sum is the token
    accuracy. Paying it slot by slot (``params.step_rewards``) credits each token with its own
    correctness instead of the turn's average: partial credit inside a turn."""
    width = turn.shape[0]
    pos = jnp.arange(width)
    answer = jnp.pad(answer.astype(jnp.int32), (0, max(width - answer.shape[0], 0)), constant_values=PAD)[:width]
    target = jnp.where(pos < answer_len, answer, jnp.where(pos == answer_len, end_of_turn, -2))
    is_end = turn == end_of_turn
    emitted = jnp.where(jnp.any(is_end), jnp.argmax(is_end) + 1, width)
    hit = (turn == target) & (pos < emitted) & (pos <= answer_len)
    return (hit / jnp.maximum(jnp.maximum(answer_len + 1, emitted), 1)).astype(jnp.float32)


def digits_of(value: Array, width: int) -> Array:
    """int32 ``[width]``: digit tokens of ``value`` (``0 <= value < 10 ** width``), MSD first."""
    place = 10 ** jnp.arange(width - 1, -1, -1)
    return (DIGIT0 + (value // place) % 10).astype(jnp.int32)


def value_of(tokens: Array) -> tuple[Array, Array]:
    """``(value int32 [], ok bool [])`` of digit tokens ``[w]`` (MSD first); ``ok`` is False
    if any token is not a digit (the value then counts those as 0)."""
    d = tokens.astype(jnp.int32) - DIGIT0
    ok = jnp.all((d >= 0) & (d <= 9))
    place = 10 ** jnp.arange(tokens.shape[0] - 1, -1, -1)
    return jnp.sum(jnp.clip(d, 0, 9) * place).astype(jnp.int32), ok


__all__ = ["DialogueEnv", "SEP", "digits_of", "join_names", "token_hits", "value_of"]
