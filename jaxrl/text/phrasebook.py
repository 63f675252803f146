"""A task's phrasebook: text fragments tokenized once on the host, joined into replies on device.

A dialogue task over a real tokenizer answers each policy turn with text ("Higher than 17.",
a tool's result, the next question). Tokenizing inside the compiled program is impossible,
so the task names its fragments up front; :meth:`Phrasebook.build` tokenizes each once (no
chat template) and stores the ids as a static table (``bytes``: the phrasebook is hashable
and becomes a constant of the program, like :class:`jaxrl.text.bytes.ByteTable`). On device,
:meth:`Phrasebook.reply` concatenates the ids of a sequence of fragment indices (``-1`` =
none) and left-pads them with the pad id to the contract's reply shape; :meth:`Phrasebook.number`
writes a non-negative integer as digit fragments ``"0"`` .. ``"9"`` (always present), the
tool-result mechanism.

What is checked at construction (``ValueError`` naming the fragment or reply shape): every
fragment is non-empty, round-trips through the tokenizer and holds no pad id; every reply
``shape`` the task declares (a tuple of fragment names and :data:`NUMBER` slots, the numbers
ranging over ``0 .. max_number``) is expanded to every text it can produce, and for each (1)
the joined ids decode to the joined text, (2) they equal the tokenizer's own encoding of that
text (byte-level BPE may merge across a boundary: a tokenizer that merges digits makes
"17" one token, and is refused), (3) they fit ``max_reply_tokens``. A reply of a declared
shape is therefore never cut; :meth:`reply` on parts no shape declares keeps the last
``width`` tokens (documented, the caller's contract). :func:`chat_reply_affixes` gives the
chat template's text around a user message that follows an assistant turn.
"""

from __future__ import annotations

import dataclasses
import itertools
from typing import Any, Mapping, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from jaxrl.text import chat

Array = jax.Array

NUMBER = "#"  #: a slot of a reply shape holding a non-negative integer written with digit fragments
DIGITS = tuple(str(d) for d in range(10))  #: the digit fragments' names (and texts), indices 0 .. 9
_MAX_EXPANSIONS = 200_000  # texts a construction checks at most (shapes x number values)


@dataclasses.dataclass(frozen=True)
class Phrasebook:
    """Fragment ids as a static table; build with :meth:`build`.

    ``ids`` is int32 ``[len(names), width]`` (fragment ``i``'s ids, ``pad_id`` after),
    ``lengths`` int32 ``[len(names)]``, both raw bytes. Fragments ``0 .. 9`` are the digits.
    """

    names: tuple[str, ...]
    texts: tuple[str, ...]
    width: int  # the longest fragment, in tokens
    ids: bytes
    lengths: bytes
    pad_id: int
    max_reply_tokens: int
    max_number: int  # the largest integer a NUMBER slot writes (0: no number)

    @classmethod
    def build(
        cls,
        tokenizer: Any,
        fragments: Mapping[str, str],
        *,
        pad_id: int,
        max_reply_tokens: int,
        shapes: Sequence[Sequence[str]],
        max_number: int = 0,
    ) -> "Phrasebook":
        """Tokenize ``fragments`` (name -> text) with ``tokenizer`` (``encode(text)`` and
        ``decode(ids)``, e.g. :class:`jaxrl.models.lm.Tokenizer`) and check every reply of
        ``shapes`` (module docstring); the digit fragments are added first."""
        clash = sorted(set(fragments) & set(DIGITS + (NUMBER,)))
        if clash:
            raise ValueError(f"fragment {clash[0]!r}: the names 0-9 and {NUMBER!r} are the phrasebook's own")
        if not isinstance(max_reply_tokens, int) or max_reply_tokens < 1:
            raise ValueError(f"max_reply_tokens: expected an integer >= 1, got {max_reply_tokens!r}")
        if not isinstance(max_number, int) or max_number < 0:
            raise ValueError(f"max_number: expected an integer >= 0, got {max_number!r}")
        names = DIGITS + tuple(fragments)
        texts = DIGITS + tuple(fragments[n] for n in fragments)
        encoded = []
        for name, text in zip(names, texts):
            if not isinstance(text, str) or not text:
                raise ValueError(f"fragment {name!r}: expected a non-empty string, got {text!r}")
            ids = [int(i) for i in tokenizer.encode(text)]
            if not ids or tokenizer.decode(ids) != text:
                raise ValueError(f"fragment {name!r}: {text!r} does not round-trip through the tokenizer ({ids})")
            if pad_id in ids:
                raise ValueError(f"fragment {name!r}: {text!r} encodes to the pad id {pad_id}")
            encoded.append(ids)
        width = max(map(len, encoded))
        table = np.full((len(names), width), pad_id, np.int32)
        for i, ids in enumerate(encoded):
            table[i, : len(ids)] = ids
        book = cls(names, texts, int(width), table.tobytes(), np.asarray(list(map(len, encoded)), np.int32).tobytes(),
                   int(pad_id), int(max_reply_tokens), int(max_number))
        book._check_shapes(tokenizer, encoded, shapes)
        return book

    def _check_shapes(self, tokenizer, encoded: list[list[int]], shapes) -> None:
        if not shapes:
            raise ValueError("shapes: declare at least one reply shape (a tuple of fragment names and NUMBER slots)")
        numbers = [list(map(int, str(v))) for v in range(self.max_number + 1)]
        for shape in shapes:
            shape = tuple(shape)
            unknown = [n for n in shape if n != NUMBER and n not in self.names]
            if unknown:
                raise ValueError(f"reply shape {shape}: no fragment named {unknown[0]!r}")
            slots = shape.count(NUMBER)
            if slots and self.max_number == 0:
                raise ValueError(f"reply shape {shape}: a NUMBER slot needs max_number >= 1")
            if len(numbers) ** slots > _MAX_EXPANSIONS:
                raise ValueError(f"reply shape {shape}: {len(numbers)}**{slots} texts to check, more than {_MAX_EXPANSIONS}")
            for values in itertools.product(numbers, repeat=slots):
                digits = iter(values)
                parts = [i for n in shape for i in (next(digits) if n == NUMBER else [self.index(n)])]
                ids = [t for i in parts for t in encoded[i]]
                text = "".join(self.texts[i] for i in parts)
                if tokenizer.decode(ids) != text:
                    raise ValueError(f"reply shape {shape}: the joined fragments of {text!r} decode to {tokenizer.decode(ids)!r}")
                if [int(i) for i in tokenizer.encode(text)] != ids:
                    raise ValueError(
                        f"reply shape {shape}: the tokenizer encodes {text!r} as {tokenizer.encode(text)}, not as its "
                        f"fragments' ids {ids} (tokens merge across a fragment boundary; a reply must be the tokenizer's "
                        "own encoding of its text)")
                if len(ids) > self.max_reply_tokens:
                    raise ValueError(
                        f"max_reply_tokens: {self.max_reply_tokens} is too small: the reply {text!r} (shape {shape}) "
                        f"is {len(ids)} tokens")

    # -- host side --------------------------------------------------------------------------

    def index(self, name: str) -> int:
        """The fragment index of ``name`` (``ValueError`` if unknown)."""
        try:
            return self.names.index(name)
        except ValueError:
            raise ValueError(f"no fragment named {name!r} (fragments: {', '.join(self.names)})") from None

    def parts(self, *names: str) -> np.ndarray:
        """int32 ``[len(names)]`` fragment indices of ``names`` (``None`` -> -1, no fragment)."""
        return np.asarray([-1 if n is None else self.index(n) for n in names], np.int32)

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """``(ids int32 [F, width], lengths int32 [F])`` as NumPy arrays."""
        return np.frombuffer(self.ids, np.int32).reshape(len(self.names), self.width), np.frombuffer(self.lengths, np.int32)

    @property
    def number_digits(self) -> int:
        """Digit slots :meth:`number` writes: the digits of ``max_number``."""
        return len(str(self.max_number))

    # -- device side ------------------------------------------------------------------------

    def number(self, value: Array) -> Array:
        """int32 ``[number_digits]``: the decimal digits of ``value`` (clipped into
        ``[0, max_number]``) as fragment indices, most significant first, ``-1`` before the
        first (so a reply shows no leading zeros; 0 is ``"0"``)."""
        k = self.number_digits
        v = jnp.clip(jnp.asarray(value, jnp.int32), 0, self.max_number)
        powers = jnp.asarray([10 ** (k - 1 - j) for j in range(k)], jnp.int32)
        digits = (v // powers) % 10
        shown = (v >= powers) | (powers == 1)
        return jnp.where(shown, digits, -1).astype(jnp.int32)

    def reply(self, parts: Array, width: int | None = None) -> Array:
        """int32 ``[width]`` (default ``max_reply_tokens``): the ids of fragments ``parts``
        (int ``[k]``; ``-1`` or any index outside the table = none) concatenated and
        left-padded with ``pad_id``. A reply longer than ``width`` keeps its last ``width``
        tokens; replies of the shapes checked at construction always fit ``max_reply_tokens``."""
        width = self.max_reply_tokens if width is None else int(width)
        table_np, lengths_np = self.arrays()
        flat, lengths = jnp.asarray(table_np.reshape(-1)), jnp.asarray(lengths_np)
        parts = jnp.asarray(parts, jnp.int32).reshape(-1)
        if parts.shape[0] == 0 or width == 0:
            return jnp.full((width,), self.pad_id, jnp.int32)
        valid = (parts >= 0) & (parts < len(self.names))
        safe = jnp.where(valid, parts, 0)
        lens = jnp.where(valid, lengths[safe], 0)
        ends = jnp.cumsum(lens)  # int32 [k]: end of each fragment's ids
        total = ends[-1]
        q = jnp.arange(width, dtype=jnp.int32) + total - width  # the reply's token index at each slot
        frag = jnp.clip(jnp.searchsorted(ends, q, side="right"), 0, parts.shape[0] - 1)
        offset = jnp.clip(q - (ends[frag] - lens[frag]), 0, self.width - 1)
        return jnp.where(q >= 0, flat[safe[frag] * self.width + offset], self.pad_id).astype(jnp.int32)


def chat_reply_affixes(tokenizer: Any, source: str = "the tokenizer") -> tuple[str, str]:
    """``(before, after)``: the chat template's text between an assistant turn's end-of-turn
    token and the next user message, and after that message up to the opened assistant turn.

    Rendered from the chat ``[user, assistant, user]`` with the assistant's turn opened; the
    template must close the assistant's message with the eos text (the token that ends a
    policy turn, which the policy writes itself), else ``ValueError``.
    """
    template = chat.chat_template(tokenizer, source)
    specials = chat.special_strings(tokenizer)
    marks = ["\u2063JAXRL_A\u2063", "\u2063JAXRL_B\u2063", "\u2063JAXRL_C\u2063"]
    messages = [{"role": r, "content": m} for r, m in zip(("user", "assistant", "user"), marks)]
    text = chat._compiled(template).render(messages=messages, add_generation_prompt=True, **specials)
    if any(text.count(m) != 1 for m in marks):
        raise ValueError(f"{source}: the chat template does not place each message exactly once")
    between, after = text.split(marks[1])[1].split(marks[2])
    eos = specials["eos_token"]
    if not eos or not between.startswith(eos):
        raise ValueError(f"{source}: the chat template does not end an assistant message with the eos token {eos!r}")
    return between[len(eos):], after


__all__ = ["DIGITS", "NUMBER", "Phrasebook", "chat_reply_affixes"]
