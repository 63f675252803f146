"""Read a Hugging Face checkpoint directory: :func:`load_lm` (config + safetensors -> an
:class:`~jaxrl.models.lm.model.LM` and its params pytree) and :func:`load_tokenizer`.

Every problem with the directory (a missing file, an unknown architecture, a missing or
unexpected tensor, a wrong shape) is a one-line ``ValueError`` naming the file and the key.
"""

from __future__ import annotations

import json
import os
import re
from typing import Any

import jax.numpy as jnp
import ml_dtypes  # noqa: F401  (registers bfloat16 with numpy, which safetensors' numpy reader needs)
import numpy as np

from jaxrl.models.lm.config import LMConfig
from jaxrl.models.lm.model import LM

_ATTN = ("q_proj", "k_proj", "v_proj", "o_proj")
_MLP = ("gate_proj", "up_proj", "down_proj")
# tensors some checkpoints carry that the model recomputes (old Llama saved rotary buffers)
_IGNORED = re.compile(r"model\.layers\.\d+\.self_attn\.rotary_emb\.inv_freq")


def _read_json(path: str, required: bool = True) -> dict | None:
    if not os.path.exists(path):
        if required:
            raise ValueError(f"{path}: file not found")
        return None
    with open(path, encoding="utf-8") as f:
        try:
            return json.load(f)
        except json.JSONDecodeError as e:
            raise ValueError(f"{path}: not valid JSON ({e})") from None


def hf_names(config: LMConfig) -> dict[str, tuple[tuple[str, ...], int | None, bool]]:
    """Every tensor of a checkpoint of ``config``: HF name -> (pytree path, layer index or None,
    transposed)."""
    names: dict[str, tuple[tuple[str, ...], int | None, bool]] = {
        "model.embed_tokens.weight": (("embed_tokens",), None, False),
        "model.norm.weight": (("norm",), None, False),
    }
    if not config.tie_word_embeddings:
        names["lm_head.weight"] = (("lm_head", "kernel"), None, True)
    for i in range(config.num_layers):
        pre = f"model.layers.{i}."
        for norm in ("input_layernorm", "post_attention_layernorm"):
            names[f"{pre}{norm}.weight"] = (("layers", norm), i, False)
        for proj in _ATTN:
            names[f"{pre}self_attn.{proj}.weight"] = (("layers", proj, "kernel"), i, True)
            if (config.attention_bias and proj != "o_proj") or (config.o_bias and proj == "o_proj"):
                names[f"{pre}self_attn.{proj}.bias"] = (("layers", proj, "bias"), i, False)
        for proj in _MLP:
            names[f"{pre}mlp.{proj}.weight"] = (("layers", proj, "kernel"), i, True)
        if config.qk_norm:
            for norm in ("q_norm", "k_norm"):
                names[f"{pre}self_attn.{norm}.weight"] = (("layers", norm), i, False)
    return names


def expected_shapes(config: LMConfig) -> dict[tuple[str, ...], tuple[int, ...]]:
    """The pytree shape of every parameter (layers stacked on the leading axis)."""
    c = config
    q, kv, d, f, n = c.num_heads * c.head_dim, c.num_kv_heads * c.head_dim, c.hidden_size, c.intermediate_size, c.num_layers
    io = {"q_proj": (d, q), "k_proj": (d, kv), "v_proj": (d, kv), "o_proj": (q, d),
          "gate_proj": (d, f), "up_proj": (d, f), "down_proj": (f, d)}
    shapes = {("embed_tokens",): (c.vocab_size, d), ("norm",): (d,),
              ("layers", "input_layernorm"): (n, d), ("layers", "post_attention_layernorm"): (n, d)}
    if not c.tie_word_embeddings:
        shapes[("lm_head", "kernel")] = (d, c.vocab_size)
    for proj, (i, o) in io.items():
        shapes[("layers", proj, "kernel")] = (n, i, o)
    for proj in ("q_proj", "k_proj", "v_proj"):
        if c.attention_bias:
            shapes[("layers", proj, "bias")] = (n, io[proj][1])
    if c.o_bias:
        shapes[("layers", "o_proj", "bias")] = (n, d)
    if c.qk_norm:
        shapes[("layers", "q_norm")] = shapes[("layers", "k_norm")] = (n, c.head_dim)
    return shapes


def _weight_files(path: str) -> dict[str, str]:
    """HF tensor name -> the safetensors file holding it."""
    from safetensors import safe_open

    index = os.path.join(path, "model.safetensors.index.json")
    single = os.path.join(path, "model.safetensors")
    if os.path.exists(index):
        weight_map = _read_json(index).get("weight_map")
        if not isinstance(weight_map, dict):
            raise ValueError(f"{index}: missing key 'weight_map'")
        files = {name: os.path.join(path, f) for name, f in weight_map.items()}
        for f in set(files.values()):
            if not os.path.exists(f):
                raise ValueError(f"{f}: file not found (listed in {index})")
        return files
    if os.path.exists(single):
        with safe_open(single, framework="np") as f:
            return {name: single for name in f.keys()}
    raise ValueError(f"{single}: file not found (nor {index})")


def _set(tree: dict, path: tuple[str, ...], value) -> None:
    for key in path[:-1]:
        tree = tree.setdefault(key, {})
    tree[path[-1]] = value


def load_params(path: str, config: LMConfig, dtype=jnp.float32) -> dict:
    """The params pytree of the checkpoint in ``path`` (stacked layers, ``[in, out]`` kernels,
    cast to ``dtype``)."""
    from safetensors import safe_open

    names = hf_names(config)
    files = _weight_files(path)
    tied_head = config.tie_word_embeddings and "lm_head.weight" in files   # a duplicate of the table
    extra = sorted(n for n in files if n not in names and not _IGNORED.fullmatch(n)
                   and not (tied_head and n == "lm_head.weight"))
    if extra:
        raise ValueError(f"{path}: unexpected tensor {extra[0]!r} ({len(extra)} unexpected in all)")
    missing = sorted(n for n in names if n not in files)
    if missing:
        raise ValueError(f"{path}: missing tensor {missing[0]!r} ({len(missing)} missing in all)")
    np_dtype = np.dtype(jnp.dtype(dtype))
    shapes = expected_shapes(config)
    stacks: dict[tuple[str, ...], list] = {}
    flat: dict[tuple[str, ...], np.ndarray] = {}
    by_file: dict[str, list[str]] = {}
    for name in names:
        by_file.setdefault(files[name], []).append(name)
    for file, file_names in sorted(by_file.items()):
        with safe_open(file, framework="np") as f:
            for name in file_names:
                tree_path, layer, transposed = names[name]
                t = f.get_tensor(name)
                t = t.T if transposed else t
                want = shapes[tree_path][1:] if layer is not None else shapes[tree_path]
                if t.shape != want:
                    hf_shape = t.T.shape if transposed else t.shape
                    raise ValueError(f"{file}: tensor {name!r} has shape {list(hf_shape)}, expected "
                                     f"{list(want[::-1] if transposed else want)}")
                t = t.astype(np_dtype)
                if layer is None:
                    flat[tree_path] = t
                else:
                    stacks.setdefault(tree_path, [None] * config.num_layers)[layer] = t
    if tied_head:
        with safe_open(files["lm_head.weight"], framework="np") as f:
            head = f.get_tensor("lm_head.weight")
        if head.shape != flat[("embed_tokens",)].shape or not np.array_equal(head.astype(np_dtype),
                                                                          flat[("embed_tokens",)]):
            raise ValueError(f"{path}: unexpected tensor 'lm_head.weight': tie_word_embeddings is true but it "
                             "differs from model.embed_tokens.weight")
    params: dict = {}
    for tree_path, t in flat.items():
        _set(params, tree_path, jnp.asarray(t))
    for tree_path, ts in stacks.items():
        _set(params, tree_path, jnp.asarray(np.stack(ts)))
    return params


def _generation_ids(path: str, config: LMConfig) -> tuple[int, tuple[int, ...]]:
    gen = _read_json(os.path.join(path, "generation_config.json"), required=False) or {}
    eos = gen.get("eos_token_id", None)
    eos_ids = config.eos_token_ids if eos is None else tuple(int(e) for e in (eos if isinstance(eos, list) else [eos]))
    pad = gen.get("pad_token_id", config.pad_token_id)
    if pad is None:
        pad = eos_ids[0] if eos_ids else 0
    return int(pad), eos_ids


def load_lm(path: str, dtype=jnp.float32) -> tuple[LM, dict]:
    """``(LM, params)`` from a Hugging Face checkpoint directory: ``config.json``, optional
    ``generation_config.json`` (eos / pad ids), ``model.safetensors`` or the sharded
    ``model.safetensors.index.json``. Parameters and compute in ``dtype``."""
    path = os.fspath(path)
    if not os.path.isdir(path):
        raise ValueError(f"{path}: checkpoint directory not found")
    config_file = os.path.join(path, "config.json")
    config = LMConfig.from_hf(_read_json(config_file), source=config_file)
    pad, eos_ids = _generation_ids(path, config)
    model = LM(config=config, dtype=dtype, pad_id=pad, eos_ids=eos_ids)
    return model, load_params(path, config, dtype)


# -- tokenizer ---------------------------------------------------------------------------------

def _token_text(value: Any) -> str | None:
    return value.get("content") if isinstance(value, dict) else value


class Tokenizer:
    """A ``tokenizers.Tokenizer`` (from ``tokenizer.json``) with what ``tokenizer_config.json``
    adds: the chat template (a Jinja string, None if absent) and the named special tokens."""

    SPECIAL = ("bos_token", "eos_token", "pad_token", "unk_token")

    def __init__(self, tokenizer, chat_template: str | None, special_tokens: dict[str, str]):
        self.tokenizer = tokenizer
        self.chat_template = chat_template
        self.special_tokens = special_tokens   # e.g. {"eos_token": "<|im_end|>"}

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=add_special_tokens).ids

    def decode(self, ids, skip_special_tokens: bool = False) -> str:
        return self.tokenizer.decode([int(i) for i in ids], skip_special_tokens=skip_special_tokens)

    def token_id(self, name: str) -> int | None:
        """The id of a named special token (``"eos_token"``) or of a token string."""
        text = self.special_tokens.get(name, name)
        return None if text is None else self.tokenizer.token_to_id(text)

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.get_vocab_size(with_added_tokens=True)

    def token_bytes(self) -> list[bytes]:
        """The bytes each id stands for (index = id): what a completion decodes to on device,
        token by token (a token may hold part of a UTF-8 character). Added/special tokens give
        their text; byte-level BPE tokens are mapped back through GPT-2's byte alphabet;
        SentencePiece pieces turn ``<0xNN>`` into the byte and ``▁`` into a space."""
        added = {i: t.content for i, t in self.tokenizer.get_added_tokens_decoder().items()}
        state = json.loads(self.tokenizer.to_str())
        byte_level = "ByteLevel" in json.dumps(state.get("decoder"))
        table = _byte_decoder()
        out = []
        for i in range(self.vocab_size):
            piece = self.tokenizer.id_to_token(i)
            if i in added or piece is None:
                out.append((added.get(i) or "").encode("utf-8"))
            elif byte_level:
                out.append(bytes(table[ch] for ch in piece))
            elif re.fullmatch(r"<0x[0-9A-Fa-f]{2}>", piece):
                out.append(bytes([int(piece[3:5], 16)]))
            else:
                out.append(piece.replace("\u2581", " ").encode("utf-8"))
        return out


def _byte_decoder() -> dict[str, int]:
    """GPT-2's byte-level alphabet, reversed: the printable character standing for each byte."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    chars, extra = list(printable), 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + extra)
            extra += 1
    return {chr(c): b for b, c in zip(printable, chars)}


def load_tokenizer(path: str) -> Tokenizer:
    """The tokenizer of a checkpoint directory (``tokenizer.json`` + ``tokenizer_config.json``;
    the chat template may also sit in ``chat_template.jinja``)."""
    import tokenizers

    path = os.fspath(path)
    tok_file = os.path.join(path, "tokenizer.json")
    if not os.path.exists(tok_file):
        raise ValueError(f"{tok_file}: file not found")
    cfg = _read_json(os.path.join(path, "tokenizer_config.json"), required=False) or {}
    template = cfg.get("chat_template")
    jinja = os.path.join(path, "chat_template.jinja")
    if template is None and os.path.exists(jinja):
        with open(jinja, encoding="utf-8") as f:
            template = f.read()
    special = {k: _token_text(cfg.get(k)) for k in Tokenizer.SPECIAL if cfg.get(k) is not None}
    return Tokenizer(tokenizers.Tokenizer.from_file(tok_file), template, special)
