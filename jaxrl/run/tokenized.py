"""``env.tokenizer``: a token task in a checkpoint's tokenizer ids, read from a local directory.

The directory is a Hugging Face model or tokenizer directory: ``tokenizer.json`` (the
``tokenizers`` library's file), ``tokenizer_config.json`` (special tokens, chat template) and,
when present, ``config.json`` (the model's vocabulary size, which may exceed the
tokenizer's). The chat template is rendered once on the host with a placeholder user message
and split around it into the prefix and suffix ids every prompt is wrapped in.
"""

from __future__ import annotations

from jaxrl.adapters.tokenized import TokenizedTask, tokenize_task
from jaxrl.core.tokens import TokenTask
from jaxrl.text import chat, data
from jaxrl.text.chat import render_chat_affixes

__all__ = ["render_chat_affixes", "tokenizer_task"]  # render_chat_affixes lives in jaxrl.text.chat


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
