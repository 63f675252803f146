"""Completions as a policy's turns, for the remote and verifiers env tests."""

from __future__ import annotations

import numpy as np


def encode_turns(codec, texts, length: int) -> np.ndarray:
    """int32 ``[len(texts), length]``: each text's ids, the end of turn, pad ids after."""
    out = np.full((len(texts), length), codec.pad_id, np.int32)
    for i, text in enumerate(texts):
        ids = [*codec.encode(text)][: length - 1] + [codec.end_of_turn]
        out[i, : len(ids)] = ids
    return out
