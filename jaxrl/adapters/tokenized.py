"""A token task spoken in a real tokenizer's ids: the same task, verifier and dialogue, with
every symbol of its own small vocabulary mapped to one id of a checkpoint's tokenizer.

A task of :mod:`jaxrl.core.tokens` writes its prompts, turns and replies in ids it invents
(digits 5-14, letters 15-40, ...). A pretrained language model reads and writes its
tokenizer's ids. :class:`TokenizedTask` sits between them, inside the program:

* ``start``: the task's prompt, each symbol mapped to its tokenizer id, wrapped in the chat
  template's prefix and suffix ids (``<|im_start|>user\\n`` ... ``<|im_start|>assistant\\n``)
  and left-padded with the tokenizer's pad id;
* ``respond``: the policy's turn mapped back (a tokenizer id that is no symbol of the task
  becomes the task's ``unknown`` symbol, one that is never part of an answer), the task
  answers, and its reply is mapped forward.

Rewards, flags and info are the task's own. Each symbol must be exactly one id of the
tokenizer (a byte-level BPE keeps every single byte: digits, letters and punctuation are);
the mapping is checked when the wrapper is made. The tables are static (bytes), so the
wrapper stays hashable and jit-friendly like every env.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from jaxrl.core.tokens import DialogueTask, TokenTask, Turn

Array = jax.Array


@dataclasses.dataclass(frozen=True)
class TokenizedTask(DialogueTask):
    """``inner`` with its ids mapped into a tokenizer's (see the module docstring)."""

    inner: TokenTask
    outer_vocab: int  # the model's vocabulary (its logits), >= the tokenizer's ids
    to_outer_table: bytes  # int32 [inner.vocab_size]: inner id -> tokenizer id
    to_inner_table: bytes  # int32 [outer_vocab]: tokenizer id -> inner id (unknown ids -> the unknown symbol)
    prefix: tuple[int, ...]  # chat-template ids before the prompt's content
    suffix: tuple[int, ...]  # chat-template ids after it (the assistant's turn opens)
    outer_pad: int
    outer_end_of_turn: int
    detokenize: Callable[[list[int]], str] = dataclasses.field(default=str, compare=False, hash=False, repr=False)

    # -- the shape: the inner task's, with a longer prompt ------------------------------------

    @property
    def name(self) -> str:
        return f"{self.inner.name}@tokenizer"

    @property
    def vocab_size(self) -> int:
        return self.outer_vocab

    @property
    def prompt_len(self) -> int:
        return len(self.prefix) + self.inner.prompt_len + len(self.suffix)

    @property
    def max_turns(self) -> int:
        return self.inner.max_turns

    @property
    def max_turn_tokens(self) -> int:
        return self.inner.max_turn_tokens

    @property
    def max_reply_tokens(self) -> int:
        return self.inner.max_reply_tokens

    @property
    def end_of_turn(self) -> int:
        return self.outer_end_of_turn

    @property
    def pad_id(self) -> int:
        return self.outer_pad

    @property
    def default_params(self):
        return self.inner.default_params

    @property
    def eval_scores(self):
        return self.inner.eval_scores

    def held_out_params(self, params):
        return self.inner.held_out_params(params)

    def episode_bound(self, params):
        """Token steps of the longest dialogue: every turn written to its cap."""
        return self.max_turns * self.max_turn_tokens

    # -- the mapping ------------------------------------------------------------------------

    def to_outer(self, tokens: Array) -> Array:
        """Inner ids -> tokenizer ids (elementwise; out-of-range ids are clipped first)."""
        table = jnp.asarray(np.frombuffer(self.to_outer_table, np.int32))
        return table[jnp.clip(tokens, 0, table.shape[0] - 1)]

    def to_inner(self, tokens: Array) -> Array:
        """Tokenizer ids -> inner ids (ids outside the model's vocabulary are clipped first)."""
        table = jnp.asarray(np.frombuffer(self.to_inner_table, np.int32))
        return table[jnp.clip(tokens, 0, table.shape[0] - 1)]

    def start(self, key, params):
        state, prompt, info = self.inner.start(key, params)
        full = jnp.concatenate([
            jnp.asarray(self.prefix, jnp.int32), self.to_outer(prompt.astype(jnp.int32)), jnp.asarray(self.suffix, jnp.int32),
        ])
        real = full != self.outer_pad
        order = jnp.argsort(real, stable=True)  # pads first, the real tokens after them in order
        return state, full[order], info

    def respond(self, key, state, turn, params):
        state, answer = self.inner.respond(key, state, self.to_inner(turn.astype(jnp.int32)), params)
        return state, Turn(self.to_outer(answer.reply), answer.rewards, answer.terminated, answer.truncated, answer.info)

    def decode(self, tokens) -> str:
        ids = [int(t) for t in np.asarray(tokens).reshape(-1) if int(t) != self.outer_pad]
        return self.detokenize(ids)


def symbol_table(inner: TokenTask) -> list[str]:
    """The printable symbol of every id of ``inner`` (its own ``decode`` of the single id)."""
    return [inner.decode(np.asarray([i], np.int32)) for i in range(inner.vocab_size)]


def tokenize_task(
    inner: TokenTask,
    encode: Callable[[str], Sequence[int]],
    decode: Callable[[list[int]], str],
    *,
    vocab_size: int,
    pad_id: int,
    end_of_turn_id: int,
    prefix: Sequence[int] = (),
    suffix: Sequence[int] = (),
    unknown: str = "=",
) -> TokenizedTask:
    """``inner`` in a tokenizer's ids.

    ``encode(text) -> ids`` (no special tokens added) and ``decode(ids) -> text`` are the
    tokenizer's; ``vocab_size`` the model's (its logits); ``pad_id`` and ``end_of_turn_id``
    the ids that play the task's PAD and end-of-turn; ``prefix``/``suffix`` the chat
    template's ids around a prompt; ``unknown`` the task symbol that a tokenizer id outside the
    mapping reads as (never a correct answer symbol: ``=`` ends prompts). Raises ``ValueError``
    naming the symbol when a symbol is not exactly one token, or two symbols share an id.
    """
    symbols = symbol_table(inner)
    to_outer = np.zeros((inner.vocab_size,), np.int32)
    seen: dict[int, str] = {}
    for i, text in enumerate(symbols):
        if i == inner.pad_id:
            outer = pad_id
        elif i == inner.end_of_turn:
            outer = end_of_turn_id
        else:
            ids = list(encode(text))
            if len(ids) != 1:
                raise ValueError(f"{inner.name}: symbol {text!r} (id {i}) is {len(ids)} tokens in this tokenizer {ids}; each symbol must be one token")
            outer = int(ids[0])
        if not 0 <= outer < vocab_size:
            raise ValueError(f"{inner.name}: symbol {text!r} maps to id {outer}, outside the model's vocabulary of {vocab_size}")
        if outer in seen:
            raise ValueError(f"{inner.name}: symbols {seen[outer]!r} and {text!r} map to the same tokenizer id {outer}")
        seen[outer] = text
        to_outer[i] = outer
    if unknown not in symbols:
        raise ValueError(f"{inner.name}: the unknown symbol {unknown!r} is not in the task's vocabulary")
    to_inner = np.full((vocab_size,), symbols.index(unknown), np.int32)
    to_inner[to_outer] = np.arange(inner.vocab_size, dtype=np.int32)
    for name, ids in (("prefix", prefix), ("suffix", suffix)):
        if pad_id in ids:
            raise ValueError(f"{inner.name}: the chat template's {name} contains the pad id {pad_id}")
    return TokenizedTask(
        inner, int(vocab_size), to_outer.tobytes(), to_inner.tobytes(), tuple(int(t) for t in prefix),
        tuple(int(t) for t in suffix), int(pad_id), int(end_of_turn_id), decode,
    )


def tokenized_symbols(task: TokenizedTask) -> dict[str, int]:
    """``{symbol: tokenizer id}`` of ``task`` (for docs and tests)."""
    table = np.frombuffer(task.to_outer_table, np.int32)
    return {text: int(table[i]) for i, text in enumerate(symbol_table(task.inner))}


__all__ = ["TokenizedTask", "symbol_table", "tokenize_task", "tokenized_symbols"]
