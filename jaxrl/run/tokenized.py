"""``env.tokenizer``: a token task in a checkpoint's tokenizer ids, read from a local directory.

The directory is a Hugging Face model or tokenizer directory: ``tokenizer.json`` (the
``tokenizers`` library's file), ``tokenizer_config.json`` (special tokens, chat template) and,
when present, ``config.json`` (the model's vocabulary size, which may exceed the
tokenizer's). The chat template is rendered once on the host with a placeholder user message
and split around it into the prefix and suffix ids every prompt is wrapped in.
"""

from __future__ import annotations

import json
import os

from jaxrl.adapters.tokenized import TokenizedTask, tokenize_task
from jaxrl.core.tokens import TokenTask
from jaxrl.text import chat
from jaxrl.text.chat import render_chat_affixes

__all__ = ["render_chat_affixes", "tokenizer_task"]  # render_chat_affixes lives in jaxrl.text.chat


def tokenizer_task(inner: TokenTask, path: str, chat_template: bool = True, system_prompt: str = "") -> TokenizedTask:
    """``inner`` in the ids of the tokenizer in directory ``path`` (module docstring)."""
    from jaxrl.models.lm import load_tokenizer

    tok = load_tokenizer(path)
    eot, pad = tok.special_tokens.get("eos_token"), tok.special_tokens.get("pad_token")
    if eot is None or tok.token_id(eot) is None:
        raise ValueError(f"{path}: tokenizer_config.json names no eos_token in the vocabulary (the end of a turn)")
    if pad is None or tok.token_id(pad) is None:
        raise ValueError(f"{path}: tokenizer_config.json names no pad_token in the vocabulary (prompts are left-padded with it)")
    if pad == eot:
        raise ValueError(f"{path}: pad_token and eos_token are both {pad!r}; the end of a turn must be visible to the model")
    model_config = os.path.join(path, "config.json")
    vocab = tok.vocab_size
    if os.path.isfile(model_config):
        with open(model_config, encoding="utf-8") as f:
            vocab = int(json.load(f).get("vocab_size", vocab))
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
        inner, tok.encode, tok.decode, vocab_size=vocab, pad_id=tok.token_id(pad), end_of_turn_id=tok.token_id(eot),
        prefix=tok.encode(prefix) if prefix else (), suffix=tok.encode(suffix) if suffix else (),
    )
