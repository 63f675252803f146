"""Chat templates rendered on the host, the way ``transformers`` renders them.

A checkpoint's ``tokenizer_config.json`` carries a Jinja chat template. It is rendered in
a sandboxed environment (no attribute access to Python internals, ``raise_exception`` and
``tojson`` as transformers provides them, ``trim_blocks`` / ``lstrip_blocks``), with the
assistant's turn opened (``add_generation_prompt=True``): the text a model continues.

* :func:`render_prompt`: the whole text of one prompt, ``[system?, user]``.
* :func:`render_chat_affixes`: the text before and after the user message, for tasks that
  splice token ids between them (:mod:`jaxrl.text.tokenized`).
* :func:`plain_prompt`: a prompt without any template (base checkpoints): the system prompt,
  then the user text between a prefix and a suffix.
* :func:`chat_template` / :func:`special_strings`: what a loaded tokenizer gives the two.
"""

from __future__ import annotations

import functools
import json
from typing import Any

_MARK = "\u2063JAXRL_PROMPT\u2063"  # placeholder user content, split out of the rendered template
SPECIAL_NAMES = ("bos_token", "eos_token", "pad_token", "unk_token")


@functools.lru_cache(maxsize=8)
def _compiled(template: str):
    """``template`` compiled in the sandboxed Jinja environment every template is rendered in
    (cached: a dataset renders one template thousands of times)."""
    import jinja2
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.filters["tojson"] = lambda x, **_: json.dumps(x, ensure_ascii=False)
    env.globals["raise_exception"] = raise_exception
    return env.from_string(template)


def _messages(user_text: str, system_prompt: str) -> list[dict]:
    return ([{"role": "system", "content": system_prompt}] if system_prompt else []) + [{"role": "user", "content": user_text}]


def render_prompt(template: str, specials: dict, user_text: str, system_prompt: str = "") -> str:
    """The text of the chat ``[system (if system_prompt), user]`` rendered by ``template``
    with the assistant's turn opened; ``specials`` are the template's named tokens
    (``{"eos_token": "<|im_end|>", ...}``). A template that does not compile or fails while
    rendering (a syntax error, ``raise_exception``, what the sandbox refuses, any error of
    its own) raises :class:`TemplateFailure`, one line."""
    try:
        return _compiled(template).render(
            messages=_messages(user_text, system_prompt), add_generation_prompt=True, **specials)
    except RecursionError:
        raise TemplateFailure("the chat template failed: it recursed too deeply") from None
    except Exception as exc:  # noqa: BLE001  the template is the checkpoint's code: any failure is its
        raise TemplateFailure(f"the chat template failed: {_one_line(exc)}") from None


class TemplateFailure(ValueError):
    """A chat template that does not compile or render (the message is one line)."""


def _one_line(exc: BaseException, limit: int = 200) -> str:
    text = " ".join(str(exc).split())
    text = text if len(text) <= limit else text[: limit - 3] + "..."
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def plain_prompt(user_text: str, system_prompt: str = "", prefix: str = "", suffix: str = "") -> str:
    """A prompt without a chat template: ``system_prompt`` and a newline (when given), then
    ``prefix + user_text + suffix`` (e.g. ``"Question: "`` and ``"\\nAnswer:"``)."""
    return (f"{system_prompt}\n" if system_prompt else "") + prefix + user_text + suffix


def render_chat_affixes(template: str, special: dict, system_prompt: str = "") -> tuple[str, str]:
    """``(prefix, suffix)`` text of the chat ``template`` around one user message, with the
    assistant's turn opened (``add_generation_prompt``), in a sandboxed Jinja environment."""
    text = render_prompt(template, special, _MARK, system_prompt)
    if text.count(_MARK) != 1:
        raise ValueError("the chat template does not place the user message exactly once")
    prefix, suffix = text.split(_MARK)
    return prefix, suffix


def chat_template(tok: Any, source: str = "the tokenizer") -> str:
    """The chat template of a loaded :class:`jaxrl.models.lm.Tokenizer` (the ``default`` one
    when it names several); ``ValueError`` naming ``source`` when it has none."""
    template = tok.chat_template
    if isinstance(template, list):  # several named templates: the default one
        template = next((t.get("template") for t in template if t.get("name") == "default"), None)
    if not isinstance(template, str):
        raise ValueError(f"{source}: the tokenizer has no chat_template (a base checkpoint: prompts without a template "
                         "need chat_template: false; a system prompt and a prompt prefix / suffix still apply)")
    return template


def special_strings(tok: Any) -> dict[str, str]:
    """``{bos_token, eos_token, pad_token, unk_token}`` text of a loaded tokenizer ("" if unset)."""
    return {k: tok.special_tokens.get(k) or "" for k in SPECIAL_NAMES}


__all__ = ["TemplateFailure", "chat_template", "plain_prompt", "render_chat_affixes", "render_prompt", "special_strings"]
