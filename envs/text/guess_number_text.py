"""``text/GuessNumberText-v0``: guess a secret number in text, told "Higher than 17." or "Lower than 17.".

A multi-turn text task in a real tokenizer's ids (default: the project's byte-level BPE,
``envs/assets/text_tokenizer``). The prompt is one user message rendered with the chat
template: "I am thinking of a number from 1 to 32. Guess it. Answer with the number only."
Each policy turn (``turn_tokens`` = 6 tokens, ended by the tokenizer's eos) is decoded to
bytes on device (:class:`jaxrl.text.bytes.ByteTable`) and its guess is the last run of ASCII
digits (leading zeros allowed; none, or a value outside ``1 .. 32``: not a guess). The
environment's reply is a user message of the chat, joined on device from the phrasebook
(:mod:`jaxrl.text.phrasebook`): "Higher than N." / "Lower than N." (N, the guess, written
with digit fragments), "Correct!" (the episode terminates) or "Say a number from 1 to 32.";
``turns`` = 8 guesses at most (then truncated).

Reward (on the turn's last token, as ``text/GuessRange-v0``): ``1 - (t - 1) / turns`` for the
guess that finds the secret at turn ``t``, else 0. Info (``eval_scores``): ``solved``,
``turns`` (``t``, or ``turns + 1`` when never found), ``guesses`` (the running fraction of
turns that were a guess in range).

Held-out split, a fixed rule on the secret: held out iff ``secret % 8 == 3`` (3, 11, 19, 27;
:func:`is_held_out`); training draws the other 28 uniformly, evaluation
(``held_out_params``) these 4. Binary search solves every secret within
``ceil(log2(32)) + 1 = 6`` turns.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from jaxrl.core.env import Range
from jaxrl.core.tokens import DialogueTask, Turn, reward_on_last_token
from jaxrl.text import data
from jaxrl.text.bytes import ByteTable, decode_bytes
from jaxrl.text.phrasebook import NUMBER, Phrasebook, chat_reply_affixes
from jaxrl_envs.text.text_file import TOKENIZER

Array = jax.Array

LOW, HIGH = 1, 32  #: the secret's range
HELD_OUT_EVERY, HELD_OUT_REST = 8, 3  #: secret % 8 == 3 is held out
PROMPT = f"I am thinking of a number from {LOW} to {HIGH}. Guess it. Answer with the number only."
FRAGMENTS = {
    "higher": "Higher than ", "lower": "Lower than ", "period": ".", "correct": "Correct!",
    "invalid": f"Say a number from {LOW} to {HIGH}.",
}


def is_held_out(secret):
    """bool: ``secret`` belongs to the held-out split (ints or arrays)."""
    return secret % HELD_OUT_EVERY == HELD_OUT_REST


def last_number(text: Array, n: Array, max_value: int) -> tuple[Array, Array]:
    """``(found bool[], value int32[])``: the last run of ASCII digits of ``text[:n]`` (uint8
    ``[B]``) as an integer; ``found`` is False when there is none or it exceeds ``max_value``
    (checked on every digit, so a long run never overflows)."""
    c = jnp.asarray(text).astype(jnp.int32)
    i = jnp.arange(c.shape[0])
    digit = (i < n) & (c >= 48) & (c <= 57)
    end = jnp.max(jnp.where(digit, i, -1))
    start = jnp.max(jnp.where(~digit & (i < end), i, -1)) + 1
    run = digit & (i >= start) & (i <= end)
    place = end - i  # the power of ten of each digit of the run
    big = run & (c != 48) & (place >= len(str(max_value)))  # a non-zero digit beyond max_value's width
    powers = jnp.asarray([10**k for k in range(len(str(max_value)))], jnp.int32)
    small = run & (place < len(str(max_value)))
    value = jnp.sum(jnp.where(small, (c - 48) * powers[jnp.clip(place, 0, len(str(max_value)) - 1)], 0))
    found = (end >= 0) & ~jnp.any(big) & (value <= max_value)
    return found, value.astype(jnp.int32)


@struct.dataclass
class GuessNumberTextParams:
    held_out: bool = False  # draw the secret from the held-out split (evaluation)

    bounds: ClassVar[dict] = {"held_out": Range(ge=0, le=1)}


@struct.dataclass
class GuessNumberTextState:
    secret: Array  # int32 []
    turn: Array  # int32 [], turns answered
    guesses: Array  # int32 [], turns that were a guess in range


@dataclasses.dataclass(frozen=True)
class _Built:
    tokenizer: Any
    vocab: int
    pad: int
    eos: int
    prompt: tuple[int, ...]
    table: ByteTable
    book: Phrasebook


@functools.lru_cache(maxsize=8)
def _build(tokenizer_path: str, reply_tokens: int) -> _Built:
    from jaxrl.models.lm import load_tokenizer
    from jaxrl.text import chat

    try:
        tok = load_tokenizer(tokenizer_path)
    except (OSError, ValueError) as exc:
        raise ValueError(f"tokenizer_path: {exc}") from None
    pad, eos = data.special_ids(tok, tokenizer_path)
    vocab = data.model_vocab_size(tokenizer_path, tok)
    rendered = chat.render_prompt(chat.chat_template(tok, tokenizer_path), chat.special_strings(tok), PROMPT)
    before, after = chat_reply_affixes(tok, tokenizer_path)
    book = Phrasebook.build(
        tok, {**FRAGMENTS, "open": before, "close": after}, pad_id=pad, max_reply_tokens=reply_tokens, max_number=HIGH,
        shapes=[("open", w, NUMBER, "period", "close") for w in ("higher", "lower")]
        + [("open", w, "close") for w in ("correct", "invalid")],
    )
    table = ByteTable.from_tokenizer(tok, vocab, eos)
    return _Built(tok, int(vocab), pad, eos, tuple(int(i) for i in tok.encode(rendered)), table, book)


@dataclasses.dataclass(frozen=True)
class GuessNumberText(DialogueTask):
    """The task (module docstring); fields are the dialogue's caps and the tokenizer."""

    tokenizer_path: str = TOKENIZER
    turns: int = 8
    turn_tokens: int = 6
    reply_tokens: int = 24

    name = "text/GuessNumberText-v0"
    eval_scores = (("solved", "solved"), ("turns", "turns to solve"))
    invalid_action_rule = "token ids are clipped into [0, vocab_size); a turn without a number in 1..32 gets 'Say a number'"

    @classmethod
    def in_tokenizer(cls, build, wording):
        """Built once with ``env.tokenizer.path``: the task speaks a tokenizer natively (its own
        chat template, no system prompt), so it takes only the path; errors name the key."""
        wording.refuse_text()
        t = wording.tokenizer
        if t is None:
            return build()
        if not t.chat_template or t.system_prompt:
            raise ValueError(f"env.tokenizer: {wording.env_id} takes only a path (its own chat template, no system prompt)")
        try:
            return build(tokenizer_path=t.path)
        except (OSError, TypeError, ValueError) as exc:
            raise ValueError(f"env.tokenizer.path: {' '.join(str(exc).split())}") from None

    def __post_init__(self):
        if not 1 <= self.turns <= 32 or not 1 <= self.turn_tokens <= 64:
            raise ValueError(f"GuessNumberText needs 1 <= turns <= 32 and 1 <= turn_tokens <= 64, got {self}")
        _build(str(self.tokenizer_path), int(self.reply_tokens))  # errors now, not inside a program

    @property
    def built(self) -> _Built:
        return _build(str(self.tokenizer_path), int(self.reply_tokens))

    @property
    def phrasebook(self) -> Phrasebook:
        return self.built.book

    @property
    def vocab_size(self) -> int:
        return self.built.vocab

    @property
    def prompt_len(self) -> int:
        return len(self.built.prompt)

    @property
    def max_turns(self) -> int:
        return self.turns

    @property
    def max_turn_tokens(self) -> int:
        return self.turn_tokens

    @property
    def max_reply_tokens(self) -> int:
        return self.reply_tokens

    @property
    def pad_id(self) -> int:
        return self.built.pad

    @property
    def end_of_turn(self) -> int:
        return self.built.eos

    @property
    def default_params(self) -> GuessNumberTextParams:
        return GuessNumberTextParams()

    def held_out_params(self, params):
        return params.replace(held_out=True)

    def decode(self, tokens) -> str:
        """``tokenizer.decode`` of the ids that are not the pad id (special tokens kept)."""
        ids = [int(t) for t in np.asarray(tokens).reshape(-1) if int(t) != self.pad_id]
        return self.built.tokenizer.decode(ids, skip_special_tokens=False)

    def start(self, key, params):
        values = jnp.arange(LOW, HIGH + 1)
        allowed = is_held_out(values) == jnp.asarray(params.held_out, jnp.bool_)
        secret = (LOW + jax.random.categorical(key, jnp.where(allowed, 0.0, -jnp.inf))).astype(jnp.int32)
        zero = jnp.zeros((), jnp.int32)
        info = {k: jnp.zeros((), jnp.float32) for k in ("solved", "turns", "guesses")}
        return GuessNumberTextState(secret, zero, zero), jnp.asarray(self.built.prompt, jnp.int32), info

    def guess(self, turn: Array) -> tuple[Array, Array]:
        """``(valid bool[], guess int32[])`` of a turn's ids: its text's last number, valid in 1..32."""
        text, n = decode_bytes(self.built.table, jnp.clip(turn.astype(jnp.int32), 0, self.vocab_size - 1))
        found, value = last_number(text, n, HIGH)
        return found & (value >= LOW), value

    def respond(self, key, state, turn, params):
        del key, params
        book = self.phrasebook
        valid, g = self.guess(turn)
        t = state.turn + 1
        found = valid & (g == state.secret)
        number = book.number(g)
        blank = jnp.full(number.shape, -1, jnp.int32)

        def shape(word, digits, period):
            return jnp.concatenate([jnp.asarray(book.parts("open", word)), digits, jnp.asarray(book.parts(period)),
                                    jnp.asarray(book.parts("close"))])

        parts = jnp.where(~valid, shape("invalid", blank, None), jnp.where(
            found, shape("correct", blank, None),
            jnp.where(state.secret > g, shape("higher", number, "period"), shape("lower", number, "period"))))
        reward = jnp.where(found, 1.0 - (t - 1) / self.turns, 0.0).astype(jnp.float32)
        guesses = state.guesses + valid.astype(jnp.int32)
        info = {
            "solved": found.astype(jnp.float32),
            "turns": jnp.where(found, t, self.turns + 1).astype(jnp.float32),
            "guesses": (guesses / t).astype(jnp.float32),
        }
        new = GuessNumberTextState(state.secret, t, guesses)
        return new, Turn(book.reply(parts), reward_on_last_token(turn, self.end_of_turn, reward), found,
                         ~found & (t >= self.turns), info)


__all__ = ["GuessNumberText", "GuessNumberTextParams", "GuessNumberTextState", "is_held_out", "last_number"]
