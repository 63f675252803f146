"""Read a Hugging Face checkpoint directory: :func:`load_lm` (config + safetensors -> an
:class:`~jaxrl.models.lm.model.LM` and its params pytree) and :func:`load_tokenizer`.

Every problem with the directory (a missing file, an unknown architecture, a missing or
unexpected tensor, a wrong shape) is a one-line ``ValueError`` naming the file and the key.

Hostile directories are refused the same way, before anything is read: every file must be a
regular file (a FIFO, a device or a symlink to one is refused by name, checked with
``os.stat``, so nothing blocks or reads without end) of bounded size (JSON files
:data:`MAX_JSON_BYTES`, ``tokenizer.json`` :data:`MAX_TOKENIZER_BYTES`, a safetensors file at
most what the config's parameter count can fill, :func:`max_weight_bytes`); the weight files
an index names must lie inside the directory (no absolute path, no ``..``, no folder linked
from elsewhere; a symlinked file, as in the Hugging Face cache, is followed to a regular file); weights must be floating point
(:data:`WEIGHT_DTYPES`); and the parameters must fit this machine's memory.
"""

from __future__ import annotations

import json
import os
import re
import stat
from typing import Any

import jax.numpy as jnp
import ml_dtypes  # noqa: F401  (registers bfloat16 with numpy, which safetensors' numpy reader needs)
import numpy as np

from jaxrl.models.lm import tokenizer_check
from jaxrl.models.lm.config import LMConfig
from jaxrl.models.lm.model import LM

MAX_JSON_BYTES = 16 << 20  # config.json, generation_config.json, the index, tokenizer_config.json
MAX_TOKENIZER_BYTES = 512 << 20  # tokenizer.json (the largest vocabularies are ~40 MB)
MAX_TEMPLATE_BYTES = 1 << 20  # chat_template.jinja
#: safetensors dtypes a weight may have (cast to the model's dtype on load)
WEIGHT_DTYPES = ("F16", "BF16", "F32", "F64")
_KINDS = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
          (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a directory"))

_ATTN = ("q_proj", "k_proj", "v_proj", "o_proj")
_MLP = ("gate_proj", "up_proj", "down_proj")
# tensors some checkpoints carry that the model recomputes (old Llama saved rotary buffers)
_IGNORED = re.compile(r"model\.layers\.\d+\.self_attn\.rotary_emb\.inv_freq")


def regular_file(path: str, max_bytes: int, what: str = "bytes allowed") -> int | None:
    """The size of ``path`` if it is a regular file (symlinks followed) of at most ``max_bytes``;
    None if it does not exist. Anything else (a FIFO, a device, a socket, a directory) is a
    one-line ``ValueError`` naming it: ``os.stat`` looks without opening, so nothing blocks."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ValueError(f"{path}: cannot be read ({exc.strerror or type(exc).__name__})") from None
    if not stat.S_ISREG(st.st_mode):
        kind = next((name for test, name in _KINDS if test(st.st_mode)), "not a regular file")
        raise ValueError(f"{path}: is {kind}, not a regular file")
    if st.st_size > max_bytes:
        raise ValueError(f"{path}: {st.st_size:,} bytes, more than the {max_bytes:,} {what}")
    return st.st_size


def read_bytes(path: str, max_bytes: int) -> bytes | None:
    """The bytes of the regular file ``path`` (:func:`regular_file`), None if it does not exist."""
    if regular_file(path, max_bytes) is None:
        return None
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)   # replaced by a FIFO since: no wait
    except OSError as exc:
        raise ValueError(f"{path}: cannot be read ({exc.strerror or type(exc).__name__})") from None
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ValueError(f"{path}: is not a regular file")
        data = f.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise ValueError(f"{path}: more than the {max_bytes:,} bytes allowed")
    return data


def read_json(path: str, required: bool = True) -> dict | None:
    """The JSON object in the regular file ``path`` (at most :data:`MAX_JSON_BYTES`); None when
    absent and not ``required``. A file that is no JSON object is a one-line ``ValueError``."""
    data = read_bytes(path, MAX_JSON_BYTES)
    if data is None:
        if required:
            raise ValueError(f"{path}: file not found")
        return None
    try:
        value = json.loads(data)
    except (ValueError, UnicodeDecodeError) as e:
        raise ValueError(f"{path}: not valid JSON ({e})") from None
    except RecursionError:
        raise ValueError(f"{path}: not valid JSON (nested too deeply)") from None
    if not isinstance(value, dict):
        raise ValueError(f"{path}: expected a JSON object, got {type(value).__name__}")
    return value


def read_config(path: str) -> LMConfig:
    """The checked :class:`LMConfig` of the checkpoint directory ``path`` (its ``config.json``)."""
    config_file = os.path.join(os.fspath(path), "config.json")
    return LMConfig.from_hf(read_json(config_file), source=config_file)


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


def max_weight_bytes(config: LMConfig) -> int:
    """The most bytes a safetensors file of a checkpoint of ``config`` can need: every
    parameter (and a tied head's duplicate) at 8 bytes, plus 64 MiB for the header and
    tensors the model recomputes."""
    return 8 * (config.num_parameters + config.vocab_size * config.hidden_size) + (64 << 20)


def _index_entry(path: str, index: str, name: Any, file: Any) -> str:
    """The path of the weight file an index entry names, which must lie inside ``path``."""
    if not isinstance(name, str) or not isinstance(file, str) or not file or "\0" in file:
        raise ValueError(f"{index}: weight_map entry {name!r}: {file!r} is not a file name")
    parts = os.path.normpath(file).split(os.sep)
    full = os.path.join(path, os.path.normpath(file))
    root, folder = os.path.realpath(path), os.path.realpath(os.path.dirname(full))
    if os.path.isabs(file) or parts[0] == ".." or os.path.commonpath([root, folder]) != root:
        raise ValueError(f"{index}: weight_map entry {name!r} names {file!r}, outside the checkpoint directory")
    return full


def _weight_files(path: str, config: LMConfig) -> dict[str, str]:
    """HF tensor name -> the safetensors file holding it (each checked by :func:`regular_file`)."""
    index = os.path.join(path, "model.safetensors.index.json")
    single = os.path.join(path, "model.safetensors")
    cap = max_weight_bytes(config)
    if regular_file(index, MAX_JSON_BYTES) is not None:
        weight_map = read_json(index).get("weight_map")
        if not isinstance(weight_map, dict):
            raise ValueError(f"{index}: missing key 'weight_map'")
        files = {name: _index_entry(path, index, name, f) for name, f in weight_map.items()}
        for f in sorted(set(files.values())):
            if regular_file(f, cap, "bytes a checkpoint of config.json can need") is None:
                raise ValueError(f"{f}: file not found (listed in {index})")
        return files
    if regular_file(single, cap, "bytes a checkpoint of config.json can need") is not None:
        with _safe_open(single) as f:
            return {name: single for name in f.keys()}
    raise ValueError(f"{single}: file not found (nor {index})")


def _safe_open(file: str):
    from safetensors import safe_open

    try:
        return safe_open(file, framework="np")
    except Exception as exc:  # safetensors raises its own SafetensorError for a bad header
        raise ValueError(f"{file}: not a readable safetensors file ({' '.join(str(exc).split())[:200]})") from None


def _set(tree: dict, path: tuple[str, ...], value) -> None:
    for key in path[:-1]:
        tree = tree.setdefault(key, {})
    tree[path[-1]] = value


def load_params(path: str, config: LMConfig, dtype=jnp.float32) -> dict:
    """The params pytree of the checkpoint in ``path`` (stacked layers, ``[in, out]`` kernels,
    cast to ``dtype``)."""
    names = hf_names(config)
    files = _weight_files(path, config)
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
        with _safe_open(file) as f:
            for name in file_names:
                tree_path, layer, transposed = names[name]
                header = f.get_slice(name)   # dtype and shape checked before the tensor is read
                kind = header.get_dtype()
                if kind not in WEIGHT_DTYPES:
                    raise ValueError(f"{file}: tensor {name!r} has dtype {kind}, expected a floating-point weight "
                                     f"({', '.join(WEIGHT_DTYPES)})")
                want = shapes[tree_path][1:] if layer is not None else shapes[tree_path]
                hf_want = want[::-1] if transposed else want
                if tuple(header.get_shape()) != tuple(hf_want):
                    raise ValueError(f"{file}: tensor {name!r} has shape {list(header.get_shape())}, expected "
                                     f"{list(hf_want)}")
                t = f.get_tensor(name)
                t = (t.T if transposed else t).astype(np_dtype)
                if layer is None:
                    flat[tree_path] = t
                else:
                    stacks.setdefault(tree_path, [None] * config.num_layers)[layer] = t
    if tied_head:
        with _safe_open(files["lm_head.weight"]) as f:
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
    file = os.path.join(path, "generation_config.json")
    gen = read_json(file, required=False) or {}
    eos = gen.get("eos_token_id", None)
    eos_ids = config.eos_token_ids if eos is None else tuple(eos if isinstance(eos, list) else [eos])
    pad = gen.get("pad_token_id", config.pad_token_id)
    if pad is None:
        pad = eos_ids[0] if eos_ids else 0
    for key, value in (("eos_token_id", e) for e in eos_ids) if eos is not None else ():
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"{file}: key {key!r} must be a token id (an integer >= 0), got {value!r}")
    if isinstance(pad, bool) or not isinstance(pad, int) or pad < 0:
        raise ValueError(f"{file}: key 'pad_token_id' must be a token id (an integer >= 0), got {pad!r}")
    return int(pad), tuple(int(e) for e in eos_ids)


def _physical_memory() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def check_fits(config: LMConfig, dtype, source: str) -> None:
    """Refuse a model whose parameters alone exceed this machine's memory (before reading any)."""
    need = config.num_parameters * np.dtype(jnp.dtype(dtype)).itemsize
    have = _physical_memory()
    if have is not None and need > have:
        raise ValueError(f"{source}: ~{config.num_parameters:.3g} parameters need ~{need / 2**30:,.1f} GiB in "
                         f"{jnp.dtype(dtype).name}, more than this machine's {have / 2**30:,.1f} GiB of memory")


def load_lm(path: str, dtype=jnp.float32) -> tuple[LM, dict]:
    """``(LM, params)`` from a Hugging Face checkpoint directory: ``config.json``, optional
    ``generation_config.json`` (eos / pad ids), ``model.safetensors`` or the sharded
    ``model.safetensors.index.json``. Parameters and compute in ``dtype``."""
    path = os.fspath(path)
    if not os.path.isdir(path):
        raise ValueError(f"{path}: checkpoint directory not found")
    config = read_config(path)
    check_fits(config, dtype, os.path.join(path, "config.json"))
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
    data = read_bytes(tok_file, MAX_TOKENIZER_BYTES)
    if data is None:
        raise ValueError(f"{tok_file}: file not found")
    cfg = read_json(os.path.join(path, "tokenizer_config.json"), required=False) or {}
    template = cfg.get("chat_template")
    jinja = os.path.join(path, "chat_template.jinja")
    if template is None:
        text = read_bytes(jinja, MAX_TEMPLATE_BYTES)
        template = None if text is None else _utf8(text, jinja)
    special = {k: _token_text(cfg.get(k)) for k in Tokenizer.SPECIAL if cfg.get(k) is not None}
    try:
        tokenizer = tokenizers.Tokenizer.from_str(_utf8(data, tok_file))
    except Exception as exc:  # tokenizers raises a bare Exception for a file it cannot parse
        raise ValueError(f"{tok_file}: not a tokenizers file ({' '.join(str(exc).split())[:200]})") from None
    tokenizer_check.warn_once(path, tokenizer)  # transformers' AutoTokenizer may rebuild it differently
    return Tokenizer(tokenizer, template, special)


def _utf8(data: bytes, path: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"{path}: not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start})") from None
