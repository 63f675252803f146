"""A token task in a checkpoint's tokenizer ids: the symbol map for a task of its own vocabulary, and the one door every env id is built through.

A task of :mod:`jaxrl.core.tokens` writes its prompts, turns and replies in ids it invents
(digits 5-14, letters 15-40, ...). A pretrained language model reads and writes its
tokenizer's ids. :class:`TokenizedTask` sits between them, inside the program:

* ``start``: the task's prompt, each symbol mapped to its tokenizer id, wrapped in the chat
  template's prefix and suffix ids (``<|im_start|>user\\n`` ... ``<|im_start|>assistant\\n``)
  and left-padded with the tokenizer's pad id;
* ``respond``: the policy's turn mapped back (a tokenizer id that is no symbol of the task
  becomes the task's ``unknown`` symbol, one that is never part of an answer), the task
  answers, and its reply is mapped forward.

Rewards, flags and info are the task's own. Each symbol must be exactly one tokenizer id
(checked when the wrapper is made); the tables are static, so the wrapper stays hashable.
:func:`tokenizer_task` reads the tokenizer from a local Hugging Face directory
(``tokenizer.json``, ``tokenizer_config.json``, ``config.json`` for the vocabulary size) and
renders the chat template once on the host into the prefix and suffix ids.

:func:`registered` builds a registered env once as ``env.tokenizer`` and ``env.text`` ask
(:class:`Wording`): each kind of token task says how with one classmethod,
:meth:`jaxrl.core.tokens.TokenTask.in_tokenizer` (the symbol map above, by default; a text
task is built from its rows in the tokenizer, a task that speaks a tokenizer natively with
that tokenizer's path).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from jaxrl.core import registry
from jaxrl.core.env import Environment, replace_params
from jaxrl.core.tokens import DialogueTask, TokenTask, Turn
from jaxrl.text import chat, data
from jaxrl.text.chat import render_chat_affixes
from jaxrl.text.config import TextConfig, TokenizerConfig

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


def tokenizer_task(inner: TokenTask, path: str, chat_template: bool = True, system_prompt: str = "") -> TokenizedTask:
    """``inner`` in the ids of the tokenizer in directory ``path`` (module docstring)."""
    from jaxrl.models.lm import load_tokenizer

    tok = load_tokenizer(path)
    pad_id, eot_id = data.special_ids(tok, path)
    vocab = data.model_vocab_size(path, tok)
    prefix = suffix = ""
    if chat_template:
        try:
            template = chat.chat_template(tok, path)
        except ValueError as exc:
            raise ValueError(f"{exc} (set env.tokenizer.chat_template: false)") from None
        prefix, suffix = render_chat_affixes(template, chat.special_strings(tok), system_prompt)
    elif system_prompt:
        raise ValueError("system_prompt needs chat_template: true")
    return tokenize_task(
        inner, tok.encode, tok.decode, vocab_size=vocab, pad_id=pad_id, end_of_turn_id=eot_id,
        prefix=tok.encode(prefix) if prefix else (), suffix=tok.encode(suffix) if suffix else (),
    )


# ---------------------------------------------------------------------------------------
# Building a registered env in a tokenizer's ids
# ---------------------------------------------------------------------------------------


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())


@dataclasses.dataclass(frozen=True)
class Wording:
    """What ``env.tokenizer`` and ``env.text`` ask of the task ``env_id``: the tokenizer its
    ids are put into (None: its own) and, for a text task, its rows, lengths and rubric.
    Errors are ``ValueError`` lines naming the config key."""

    env_id: str
    tokenizer: TokenizerConfig | None = None
    text: TextConfig | None = None

    def refuse_text(self) -> None:
        """``env.text`` given to a task that is no text task: refused."""
        if self.text is not None:
            raise ValueError(f"env.text: only text tasks (text/File-v0, text/WordProblems-v0, ...) read it, {self.env_id} is not one")

    def symbols(self, task: Environment) -> Environment:
        """``task`` (its own small vocabulary) in the tokenizer's ids, each symbol mapped to one
        id (:func:`tokenizer_task`); ``task`` itself when no tokenizer is asked for."""
        self.refuse_text()
        if self.tokenizer is None:
            return task
        if not isinstance(task, TokenTask):
            raise ValueError(f"env.tokenizer: only token tasks speak a tokenizer's ids, {self.env_id} is not one")
        t = self.tokenizer
        try:
            return tokenizer_task(task, t.path, t.chat_template, t.system_prompt)
        except (OSError, ValueError) as exc:
            raise ValueError(f"env.tokenizer: {_one_line(exc)}") from None


def _build(spec: registry.EnvSpec, **options) -> Environment:
    """``spec``'s env, its factory called with ``options`` beside the registered keywords."""
    return dataclasses.replace(spec, kwargs=tuple({**dict(spec.kwargs), **options}.items())).build()


def registered(env_id: str, tokenizer: TokenizerConfig | None = None, text: TextConfig | None = None
               ) -> tuple[Environment, Any]:
    """``(env, params)`` of the registered ``env_id`` (as :func:`jaxrl.core.registry.make`
    gives them, without overrides), built once in the ids of ``tokenizer`` and, for a text
    task, from the rows of ``text``: the kind of task its factory makes decides how
    (:meth:`jaxrl.core.tokens.TokenTask.in_tokenizer`; an env that is no token task is built as
    registered, and refuses a tokenizer or text). ``ValueError`` names the config key."""
    spec = registry.spec(env_id)
    kind = getattr(spec.factory(), "in_tokenizer", TokenTask.in_tokenizer)
    env = kind(functools.partial(_build, spec), Wording(env_id, tokenizer, text))
    return env, replace_params(env.default_params, **dict(spec.param_defaults))


def tokenized_symbols(task: TokenizedTask) -> dict[str, int]:
    """``{symbol: tokenizer id}`` of ``task`` (for docs and tests)."""
    table = np.frombuffer(task.to_outer_table, np.int32)
    return {text: int(table[i]) for i, text in enumerate(symbol_table(task.inner))}


__all__ = [
    "TokenizedTask", "Wording", "registered", "render_chat_affixes", "symbol_table", "tokenize_task", "tokenized_symbols",
    "tokenizer_task",
]
