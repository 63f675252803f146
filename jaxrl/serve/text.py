"""Text on the wire for text tasks (``text/WordProblems-v0``, ``text/File-v0``, ...).

A served :class:`~jaxrl.text.task.TextTask` (any env whose innermost env is one) speaks
text besides token ids: every observation also carries ``"text"`` (the tokenizer's decoding
of ``obs``: the prompt, then the completion so far, pad ids dropped) and ``"final_text"``
(the same of ``final_obs``), and a step may send a string, ``{"action": "42"}``, the
completion. The string is tokenized with the task's own tokenizer, the task's end-of-turn id
is appended unless the text already ends the turn, and the tokens are stepped one by one
(each a batched step like any other) until the episode ends; the reply is the last step's,
with ``reward`` the sum over the tokens. Token ids (``{"action": 17}``) keep working.
"""

from __future__ import annotations

from typing import Any


def innermost(env: Any) -> Any:
    """The env under any wrappers (``.env`` chains)."""
    while hasattr(env, "env"):
        env = env.env
    return env


class TextCodec:
    """Decode observations and encode completions with a text task's tokenizer."""

    def __init__(self, task: Any):
        from jaxrl.text.task import _tokenizer

        self.task = task
        self.tokenizer = _tokenizer(str(task.tokenizer_path))
        self.eos = int(task.end_of_turn)

    @classmethod
    def of(cls, env: Any) -> "TextCodec | None":
        """A codec for ``env`` if it is a text task with a tokenizer, else ``None``."""
        from jaxrl.text.task import TextTask

        task = innermost(env)
        if not isinstance(task, TextTask) or not task.tokenizer_path:
            return None
        return cls(task)

    def decode(self, ids) -> str:
        return self.task.decode(ids)

    def encode(self, text: str) -> list[int]:
        """The completion's token ids, ending with the end-of-turn id."""
        ids = [int(i) for i in self.tokenizer.encode(text, add_special_tokens=False)]
        if self.eos not in ids:
            ids.append(self.eos)
        return ids[: ids.index(self.eos) + 1]
