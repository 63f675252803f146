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
from typing import Any

from jaxrl.adapters.tokenized import TokenizedTask, tokenize_task
from jaxrl.core.tokens import TokenTask

_MARK = "\u2063JAXRL_PROMPT\u2063"  # placeholder user content, split out of the rendered template


def _read_json(path: str) -> dict:
    if not os.path.isfile(path):
        return {}
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a JSON object")
    return data


def _token_text(value: Any) -> str | None:
    """A special token as tokenizer_config.json writes it: a string or ``{"content": ...}``."""
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) else None


def render_chat_affixes(template: str, special: dict, system_prompt: str = "") -> tuple[str, str]:
    """``(prefix, suffix)`` text of the chat ``template`` around one user message, with the
    assistant's turn opened (``add_generation_prompt``), in a sandboxed Jinja environment."""
    import jinja2
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.filters["tojson"] = lambda x, **_: json.dumps(x, ensure_ascii=False)
    env.globals["raise_exception"] = raise_exception
    messages = ([{"role": "system", "content": system_prompt}] if system_prompt else []) + [{"role": "user", "content": _MARK}]
    text = env.from_string(template).render(messages=messages, add_generation_prompt=True, **special)
    if text.count(_MARK) != 1:
        raise ValueError("the chat template does not place the user message exactly once")
    prefix, suffix = text.split(_MARK)
    return prefix, suffix


def tokenizer_task(inner: TokenTask, path: str, chat_template: bool = True, system_prompt: str = "") -> TokenizedTask:
    """``inner`` in the ids of the tokenizer in directory ``path`` (module docstring)."""
    from tokenizers import Tokenizer

    file = os.path.join(path, "tokenizer.json")
    if not os.path.isfile(file):
        raise ValueError(f"{path}: no tokenizer.json")
    tok = Tokenizer.from_file(file)
    config = _read_json(os.path.join(path, "tokenizer_config.json"))
    model_config = _read_json(os.path.join(path, "config.json"))
    special = {k: _token_text(config.get(k)) for k in ("bos_token", "eos_token", "pad_token", "unk_token")}
    eot, pad = special["eos_token"], special["pad_token"]
    if eot is None or tok.token_to_id(eot) is None:
        raise ValueError(f"{path}: tokenizer_config.json names no eos_token in the vocabulary (the end of a turn)")
    if pad is None or tok.token_to_id(pad) is None:
        raise ValueError(f"{path}: tokenizer_config.json names no pad_token in the vocabulary (prompts are left-padded with it)")
    if pad == eot:
        raise ValueError(f"{path}: pad_token and eos_token are both {pad!r}; the end of a turn must be visible to the model")
    vocab = int(model_config.get("vocab_size", tok.get_vocab_size(with_added_tokens=True)))
    prefix = suffix = ""
    if chat_template:
        template = config.get("chat_template")
        if isinstance(template, list):  # several named templates: the default one
            template = next((t.get("template") for t in template if t.get("name") == "default"), None)
        if not isinstance(template, str):
            raise ValueError(f"{path}: tokenizer_config.json has no chat_template (set env.tokenizer.chat_template: false)")
        prefix, suffix = render_chat_affixes(template, {k: v or "" for k, v in special.items()}, system_prompt)
    elif system_prompt:
        raise ValueError("system_prompt needs chat_template: true")

    def encode(text: str) -> list[int]:
        return tok.encode(text, add_special_tokens=False).ids

    def decode(ids: list[int]) -> str:
        return tok.decode(ids, skip_special_tokens=False)

    return tokenize_task(
        inner, encode, decode, vocab_size=vocab, pad_id=tok.token_to_id(pad), end_of_turn_id=tok.token_to_id(eot),
        prefix=encode(prefix) if prefix else (), suffix=encode(suffix) if suffix else (),
    )
