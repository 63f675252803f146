"""The shared vocabulary of the token tasks (41 ids) and host-side encode/decode helpers.

====== ===================================================
id     token
====== ===================================================
0      ``PAD``  padding (prompts left-padded, answers right-padded)
1      ``EOS``  end of a completion (written ``$`` by :func:`decode`)
2      ``=``    end of a prompt
3      ``+``    addition operator
4      ``,``    separator between names
5-14   digits ``0``-``9``
15-40  letters ``a``-``z``
41     ``?``    a tool call (dialogue tasks)
42     ``<``    "lower" (reserved; the guessing game declares its own vocabulary)
43     ``>``    "higher" (reserved, likewise)
44     ``!``    an error / no tool
====== ===================================================

The single-turn tasks use the first 41 ids (``VOCAB_SIZE``, one policy head of 41 logits);
the dialogue tasks declare ``DIALOGUE_VOCAB_SIZE`` (45) to add the last four.
"""

from __future__ import annotations

import numpy as np

from jaxrl.verifiers import EOS, PAD

SEP = 2
PLUS = 3
COMMA = 4
DIGIT0 = 5
LETTER_A = 15
VOCAB_SIZE = 41
CALL = 41
LOWER = 42
HIGHER = 43
ERROR = 44
DIALOGUE_VOCAB_SIZE = 45

_SYMBOLS = {PAD: "", EOS: "$", SEP: "=", PLUS: "+", COMMA: ",", CALL: "?", LOWER: "<", HIGHER: ">", ERROR: "!"}


def token_str(token: int) -> str:
    """The printable form of one id (``?<id>`` for ids outside the vocabulary)."""
    t = int(token)
    if t in _SYMBOLS:
        return _SYMBOLS[t]
    if DIGIT0 <= t < DIGIT0 + 10:
        return str(t - DIGIT0)
    if LETTER_A <= t < LETTER_A + 26:
        return chr(ord("a") + t - LETTER_A)
    return f"?{t}"


def decode(tokens, stop_at_eos: bool = True) -> str:
    """Host-side text of a token array (PAD dropped; stops after the first EOS by default)."""
    out = []
    for t in np.asarray(tokens).reshape(-1).tolist():
        out.append(token_str(t))
        if stop_at_eos and t == EOS:
            break
    return "".join(out)


def encode(text: str) -> np.ndarray:
    """int32 ids of ``text`` (digits, lowercase letters, ``= + , $ ? < > !``); raises on anything else."""
    inverse = {v: k for k, v in _SYMBOLS.items() if v}
    ids = []
    for ch in text:
        if ch in inverse:
            ids.append(inverse[ch])
        elif ch.isdigit():
            ids.append(DIGIT0 + int(ch))
        elif "a" <= ch <= "z":
            ids.append(LETTER_A + ord(ch) - ord("a"))
        else:
            raise ValueError(f"character {ch!r} is not in the token-task vocabulary")
    return np.asarray(ids, np.int32)
