"""Token ids -> UTF-8 bytes on device: a static id -> bytes table and a vectorised decoder.

A :class:`ByteTable` holds, for every id of the model's vocabulary, the bytes that id stands
for (``Tokenizer.token_bytes``: byte-level BPE pieces mapped back through GPT-2's alphabet,
special tokens as their text, ids beyond the tokenizer empty). :func:`decode_bytes` turns a
completion's ids into its byte string inside the compiled program: each id's row is
gathered and the rows are compacted to the front (exclusive cumulative sum of the lengths
gives every token's start; output byte ``p`` belongs to the token whose span holds ``p``,
found by ``searchsorted``). For a byte-level tokenizer the result equals
``tokenizer.decode(ids, skip_special_tokens=False).encode()`` up to invalid UTF-8 (decode
turns an invalid sequence into U+FFFD; the bytes keep it as is, so
``bytes(out[:n]).decode("utf-8", "replace")`` is the decoded text). SentencePiece-style
tokenizers differ where their decoder strips the leading space of the first piece or
replaces each invalid byte separately; see ``tests/test_text_bytes.py``.

The table is static (stored as ``bytes``, so the dataclass is hashable and can sit in a
jitted function's static arguments or a task's fields); it becomes a constant of the
program.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

Array = jax.Array


@dataclasses.dataclass(frozen=True)
class ByteTable:
    """The bytes of every id of a vocabulary, padded to the longest token.

    ``table`` is uint8 ``[vocab, width]`` (row ``i`` = id ``i``'s bytes, zeros after),
    ``lengths`` int32 ``[vocab]``, both stored as raw bytes; ``eos_id`` ends a completion.
    """

    vocab: int  # rows: the model's vocabulary (may exceed the tokenizer's)
    width: int  # W: the longest token, in bytes (at least 1)
    table: bytes  # uint8 [vocab, width]
    lengths: bytes  # int32 [vocab]; 0 for ids with no text
    eos_id: int  # a completion ends at its first eos_id (exclusive)

    @classmethod
    def from_token_bytes(cls, pieces: list[bytes], vocab: int, eos_id: int) -> "ByteTable":
        """A table from each id's bytes (``pieces[i]`` = id ``i``); ids ``>= len(pieces)`` are empty."""
        if vocab < len(pieces):
            raise ValueError(f"vocab={vocab} is smaller than the tokenizer's {len(pieces)} ids")
        if not 0 <= eos_id < vocab:
            raise ValueError(f"eos_id={eos_id} is outside the vocabulary [0, {vocab})")
        width = max([1, *map(len, pieces)])
        table = np.zeros((vocab, width), np.uint8)
        lengths = np.zeros((vocab,), np.int32)
        for i, piece in enumerate(pieces):
            table[i, : len(piece)] = np.frombuffer(bytes(piece), np.uint8)
            lengths[i] = len(piece)
        return cls(int(vocab), int(width), table.tobytes(), lengths.tobytes(), int(eos_id))

    @classmethod
    def from_tokenizer(cls, tok, vocab: int | None = None, eos_id: int | None = None) -> "ByteTable":
        """A table from a :class:`jaxrl.models.lm.Tokenizer` (its ``token_bytes()``).

        ``vocab`` defaults to the tokenizer's size, ``eos_id`` to its ``eos_token``.
        """
        pieces = tok.token_bytes()
        if eos_id is None:
            eos_id = tok.token_id("eos_token")
            if eos_id is None:
                raise ValueError("the tokenizer names no eos_token: pass eos_id")
        return cls.from_token_bytes(pieces, len(pieces) if vocab is None else vocab, eos_id)

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """``(table uint8 [vocab, width], lengths int32 [vocab])`` as NumPy arrays."""
        table = np.frombuffer(self.table, np.uint8).reshape(self.vocab, self.width)
        return table, np.frombuffer(self.lengths, np.int32)


def decode_bytes(table: ByteTable, ids: Array, max_bytes: int | None = None) -> tuple[Array, Array]:
    """The bytes of ``ids`` up to the first ``eos_id`` (exclusive), compacted to the front.

    ``ids``: int ``[L]`` (any values: negative ids and ids ``>= table.vocab`` stand for no
    bytes). Returns ``(text uint8[B], n int32[])`` with ``B = max_bytes or L * width``:
    ``text[:n]`` is the decoded byte string, zeros after. Text longer than ``B`` is cut at
    ``B`` bytes (possibly inside a UTF-8 character) and ``n == B``. ``vmap`` for a batch.
    """
    rows_np, lengths_np = table.arrays()
    flat = jnp.asarray(rows_np.reshape(-1))
    lengths = jnp.asarray(lengths_np)
    ids = jnp.asarray(ids).astype(jnp.int32)
    length = ids.shape[-1]
    size = int(max_bytes) if max_bytes is not None else length * table.width
    if length == 0 or size == 0:
        return jnp.zeros((size,), jnp.uint8), jnp.zeros((), jnp.int32)
    valid = (ids >= 0) & (ids < table.vocab)
    safe = jnp.where(valid, ids, 0)
    is_eos = ids == table.eos_id
    before_eos = jnp.cumsum(is_eos.astype(jnp.int32)) == 0
    lens = jnp.where(valid & before_eos, lengths[safe], 0)
    ends = jnp.cumsum(lens)  # int32 [L]: end of each token's bytes
    total = ends[-1]
    pos = jnp.arange(size, dtype=jnp.int32)
    tok = jnp.clip(jnp.searchsorted(ends, pos, side="right"), 0, length - 1)  # token holding byte p
    offset = pos - (ends[tok] - lens[tok])
    src = safe[tok] * table.width + jnp.clip(offset, 0, table.width - 1)
    text = jnp.where(pos < total, flat[src], 0).astype(jnp.uint8)
    return text, jnp.minimum(total, size).astype(jnp.int32)
