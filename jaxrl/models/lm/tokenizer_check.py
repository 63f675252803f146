"""Does transformers' ``AutoTokenizer`` give the ids a checkpoint's own ``tokenizer.json`` gives?

jaxrl encodes with ``tokenizer.json`` as the ``tokenizers`` library reads it. transformers 5's
``AutoTokenizer`` does so only for its generic backend (``TokenizersBackend``, alias
``PreTrainedTokenizerFast``): a model-specific class (``Qwen2Tokenizer``, ``LlamaTokenizer``)
takes the vocabulary and merges from ``tokenizer.json`` but rebuilds the normalizer,
pre-tokenizer and model options from its class defaults, and which class it picks depends on
``tokenizer_config.json``'s ``tokenizer_class`` *and* ``config.json``'s ``model_type``
(``qwen2`` checkpoints always get ``Qwen2Tokenizer``). A checkpoint whose ``tokenizer.json``
splits digits in groups then trains in jaxrl on one encoding and is scored in transformers
on another.

:func:`transformers_class` follows ``AutoTokenizer.from_pretrained``'s choice (transformers
5.23, ``models/auto/tokenization_auto.py``) for the model types jaxrl loads;
:func:`emulate` builds what that class's ``__init__`` builds, with ``tokenizers`` alone
(transformers need not be installed); :func:`mismatch` encodes :data:`PROBES` both ways and
returns the first string whose ids differ (the probes, and each token transformers would add
that tokenizer.json lacks). :func:`export_fix` makes an exported directory round-trip where
the files can (``tokenizer_class: PreTrainedTokenizerFast``).
"""

from __future__ import annotations

import copy
import json
import os
import sys
import unicodedata
from typing import Any, NamedTuple

#: Strings encoded both ways: digit runs, Unicode normal forms, whitespace, contractions, markup, CJK.
PROBES = (
    "Which is larger, 1234 or 987? 3.14159 + 2,718 = 5859.9",
    "Answer: 42\n#### 1000000",
    "caf\u00e9 vs cafe\u0301, \ufb01le \u2460 \uff21\uff22",
    "  two leading spaces\n\n\ttab and trailing  ",
    "I'm sure they'LL say we'd won't",
    "<think>x</think> <|im_start|>user\nhi<|im_end|>",
    "\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8 123 \u0645\u0631\u062d\u0628\u0627 \U0001f600",
    "def f(x):\n    return x**2  # comment",
)

#: transformers 5.23's TOKENIZER_MAPPING_NAMES for the model types jaxrl loads (mistral: without mistral_common).
REGISTERED = {"qwen2": "Qwen2Tokenizer", "qwen3": "Qwen2Tokenizer", "qwen2_moe": "Qwen2Tokenizer",
              "qwen3_moe": "Qwen2Tokenizer", "mistral": "TokenizersBackend"}
#: Model types whose declared tokenizer_class transformers overrides with the registered one.
FORCED = {"qwen2"}
#: Classes that load tokenizer.json as it is.
AS_IS = {"TokenizersBackend", "PreTrainedTokenizerFast", "PreTrainedTokenizer", "PythonBackend"}
AS_IS_CLASS = "PreTrainedTokenizerFast"  # what an export declares: transformers 4 and 5 read tokenizer.json as-is
QWEN2_REGEX = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"""
               r"""\s*[\r\n]+|\s+(?!\S)|\s+""")


class Mismatch(NamedTuple):
    """A probe string whose ids differ, the class transformers would use, and both encodings."""

    text: str
    transformers_class: str
    ours: list[int]
    theirs: list[int]

    def line(self, path: str) -> str:
        how = ("which adds tokenizer_config.json's added and special tokens that tokenizer.json lacks"
               if self.transformers_class == "TokenizersBackend" else
               "which rebuilds the pre-tokenizer and normalizer from its class defaults (and adds the config's tokens)")
        return (f"{path}: transformers' AutoTokenizer builds {self.transformers_class} here, {how}: {self.text!r} encodes "
                f"to {_ids(self.theirs)} there but to {_ids(self.ours)} with tokenizer.json, which jaxrl uses")


def _ids(ids: list[int]) -> str:
    return str(ids) if len(ids) <= 12 else f"[{', '.join(map(str, ids[:12]))}, ... ({len(ids)} ids)]"


def _read(path: str) -> dict:
    try:
        with open(path, encoding="utf-8") as f:
            value = json.load(f)
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def transformers_class(path: str, tokenizer_json: dict | None = None) -> str | None:
    """The tokenizer class ``AutoTokenizer.from_pretrained(path)`` picks in transformers 5
    (``"TokenizersBackend"`` for the generic one), or None when it cannot be told here
    (remote code: ``auto_map``)."""
    cfg = _read(os.path.join(path, "tokenizer_config.json"))
    model_type = _read(os.path.join(path, "config.json")).get("model_type")
    if cfg.get("auto_map"):
        return None
    declared = cfg.get("tokenizer_class") or _read(os.path.join(path, "config.json")).get("tokenizer_class")
    declared = declared.removesuffix("Fast") if isinstance(declared, str) else None
    if declared == "LlamaTokenizer" and model_type not in FORCED:
        state = tokenizer_json if tokenizer_json is not None else _read(os.path.join(path, "tokenizer.json"))
        if "ByteLevel" in json.dumps(state.get("pre_tokenizer")):  # a Llama-3-style file: the generic backend
            return "TokenizersBackend"
    registered = REGISTERED.get(model_type)
    if declared and registered and registered != declared:
        if registered in AS_IS:
            return "TokenizersBackend"
        name = registered if model_type in FORCED else declared
        return "TokenizersBackend" if name in AS_IS else name
    if declared:
        return "TokenizersBackend" if declared in AS_IS else declared
    return registered or "TokenizersBackend"


def emulate(path: str, cls: str, state: dict):
    """A ``tokenizers.Tokenizer`` as transformers' ``cls`` builds it from ``path`` (``state``:
    tokenizer.json's content): the class's own normalizer, pre-tokenizer and model options,
    then the added tokens transformers appends (:func:`extra_tokens`); None for a class not
    emulated here."""
    import tokenizers

    cfg = _read(os.path.join(path, "tokenizer_config.json"))
    state = copy.deepcopy(state)
    model = state.get("model") or {}
    vocab = model.get("vocab") or {}
    if isinstance(vocab, list):  # a Unigram list: [piece, score]
        vocab = {item[0] if isinstance(item, list) else item: i for i, item in enumerate(vocab)}
    merges = model.get("merges") or []
    if cls == "TokenizersBackend":
        defaults = {}
    elif cls == "Qwen2Tokenizer":
        prefix = bool(cfg.get("add_prefix_space") or False)
        state["model"] = {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                          "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                          "vocab": vocab, "merges": merges}
        state["normalizer"] = {"type": "NFC"}
        state["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": QWEN2_REGEX}, "behavior": "Isolated", "invert": False},
            {"type": "ByteLevel", "add_prefix_space": prefix, "trim_offsets": True, "use_regex": False}]}
        defaults = {"unk_token": "<|endoftext|>", "eos_token": "<|endoftext|>", "pad_token": "<|endoftext|>"}
    elif cls == "LlamaTokenizer":
        prefix = True if cfg.get("add_prefix_space") is None else bool(cfg["add_prefix_space"])
        scheme = ("always" if cfg.get("legacy", False) else "first") if prefix else "never"
        state["model"] = {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                          "end_of_word_suffix": None, "fuse_unk": True, "byte_fallback": True, "ignore_merges": False,
                          "vocab": vocab, "merges": merges}
        state["normalizer"] = None
        state["pre_tokenizer"] = {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": scheme, "split": False}
        defaults = {"unk_token": "<unk>", "bos_token": "<s>", "eos_token": "</s>"}
    else:
        return None
    tok = tokenizers.Tokenizer.from_str(json.dumps(state))
    for token in extra_tokens(state, cfg, defaults):  # one at a time: ids follow in this order, as transformers' add_tokens
        (tok.add_special_tokens if token.special else tok.add_tokens)([token])
    return tok


def extra_tokens(state: dict, cfg: dict, defaults: dict) -> list:
    """The ``tokenizers.AddedToken`` s transformers appends to what tokenizer.json holds:
    ``tokenizer_config.json``'s ``added_tokens_decoder`` entries it lacks (by id), then the
    named special tokens (the config's, else the class's ``defaults``) it lacks."""
    import tokenizers

    present = {t.get("content") for t in state.get("added_tokens") or [] if isinstance(t, dict)}
    model = (state.get("model") or {}).get("vocab")
    out = []
    decoder = cfg.get("added_tokens_decoder") or {}
    for idx in sorted((k for k in decoder if str(k).isdigit()), key=int):
        token = decoder[idx]
        if isinstance(token, dict) and isinstance(token.get("content"), str) and token["content"] not in present:
            present.add(token["content"])
            out.append(tokenizers.AddedToken(token["content"], single_word=bool(token.get("single_word")),
                                             lstrip=bool(token.get("lstrip")), rstrip=bool(token.get("rstrip")),
                                             normalized=bool(token.get("normalized", not token.get("special"))),
                                             special=bool(token.get("special"))))
    for key in ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"):
        value = cfg.get(key, defaults.get(key))
        value = value.get("content") if isinstance(value, dict) else value
        if isinstance(value, str) and value and value not in present and not (isinstance(model, dict) and value in model):
            present.add(value)
            out.append(tokenizers.AddedToken(value, special=True, normalized=False))
    return out


def mismatch(path: str, tokenizer=None, probes=PROBES, nfc: bool = True) -> Mismatch | None:
    """The first probe whose ids under transformers' ``AutoTokenizer`` (emulated) differ from
    ``tokenizer`` (default: ``path``'s ``tokenizer.json`` as ``tokenizers`` reads it); None
    when they agree or the class transformers would pick is not emulated here. ``nfc``: the
    probes in Unicode NFC form (as nearly all text is), so a class's NFC normalizer alone is
    no difference; False: also the probes' decomposed and compatibility characters."""
    import tokenizers

    if nfc:
        probes = [unicodedata.normalize("NFC", text) for text in probes]

    state = _read(os.path.join(path, "tokenizer.json"))
    if not state:
        return None
    cls = transformers_class(path, state)
    if cls is None:
        return None
    cfg = _read(os.path.join(path, "tokenizer_config.json"))
    try:
        added = [t.content for t in extra_tokens(state, cfg, {})]
        if cls == "TokenizersBackend" and not added:
            return None  # tokenizer.json read as it is, nothing appended
        theirs = emulate(path, cls, state)
        ours = tokenizer if tokenizer is not None else tokenizers.Tokenizer.from_str(json.dumps(state))
    except Exception:  # noqa: BLE001 - a file tokenizers cannot rebuild this way: nothing to compare
        return None
    if theirs is None:
        return None
    for text in [*probes, *(f"call {token} now" for token in added)]:
        a = ours.encode(text, add_special_tokens=False).ids
        b = theirs.encode(text, add_special_tokens=False).ids
        if a != b:
            return Mismatch(text, cls, list(a), list(b))
    return None


def export_fix(out_dir: str, shown: str | None = None) -> str | None:
    """Make ``AutoTokenizer.from_pretrained(out_dir)`` encode as ``out_dir/tokenizer.json`` does:
    where the class it would pick rebuilds the tokenizer differently, declare
    ``tokenizer_class: PreTrainedTokenizerFast`` (read as-is by transformers 4 and 5).
    Returns a warning line (naming ``shown``, default ``out_dir``) when text in NFC form still
    encodes differently (a ``qwen2`` ``config.json``: transformers 5 forces its class), else None."""
    if mismatch(out_dir, nfc=False) is None:
        return None
    path = os.path.join(out_dir, "tokenizer_config.json")
    cfg = _read(path)
    if cfg.get("tokenizer_class") != AS_IS_CLASS:
        cfg["tokenizer_class"] = AS_IS_CLASS
        with open(path, "w", encoding="utf-8") as f:
            json.dump(cfg, f, indent=2, ensure_ascii=False)
            f.write("\n")
    still = mismatch(out_dir)
    if still is None:
        return None
    shown = shown or out_dir
    why = (f"transformers 5 picks that class for every {_model_type(out_dir)!r} checkpoint whatever tokenizer_config.json says"
           if still.transformers_class != "TokenizersBackend" else "tokenizer_config.json names tokens tokenizer.json lacks")
    return (f"{still.line(shown)}; {why}, so load the tokenizer with transformers.PreTrainedTokenizerFast("
            f"tokenizer_file={os.path.join(shown, 'tokenizer.json')!r}) to get jaxrl's ids")


def _model_type(path: str) -> Any:
    return _read(os.path.join(path, "config.json")).get("model_type")


_checked: set[str] = set()


def warn_once(path: str, tokenizer) -> None:
    """Print one warning line (stderr, once per directory and process) when transformers'
    ``AutoTokenizer`` would encode text in NFC form differently from ``tokenizer``."""
    key = os.path.realpath(path)
    if key in _checked:
        return
    _checked.add(key)
    found = mismatch(path, tokenizer)
    if found is not None:
        print(f"jaxrl: warning: {found.line(path)}; `jaxrl export-hf` declares tokenizer_class: {AS_IS_CLASS} where that "
              "makes AutoTokenizer agree (docs/language_models.md)", file=sys.stderr, flush=True)
