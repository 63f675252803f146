"""The shape of a Hugging Face decoder, read from its ``config.json``: :class:`LMConfig`.

Both layouts of the rotary settings are read: transformers 4.x writes ``rope_theta`` and
``rope_scaling`` at the top level, transformers 5 nests them in ``rope_parameters``. Keys a
checkpoint may leave out take the defaults of that architecture's transformers config class
(e.g. Qwen3's ``head_dim`` is 128, Qwen2 always has q/k/v bias); keys with no default, an
unknown architecture or an unsupported rope type raise a one-line ``ValueError`` naming the
file and the key.

Every value is checked before anything is built from it: sizes are positive integers (``1e3``
is read as 1000, ``512.5`` is refused), the heads divide into the key/value heads, ``rms_norm_eps``
lies in ``(0, 1)``, ``rope_theta`` and the rope scaling factors are finite and positive, and the
parameter count the sizes imply (:func:`parameter_count`) is at most :data:`MAX_PARAMETERS`
(the message gives the estimate).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

ARCHITECTURES = ("Qwen2ForCausalLM", "Qwen3ForCausalLM", "LlamaForCausalLM", "MistralForCausalLM")
ROPE_TYPES = ("default", "linear", "llama3", "yarn")
_MODEL_TYPE = {"Qwen2ForCausalLM": "qwen2", "Qwen3ForCausalLM": "qwen3",
               "LlamaForCausalLM": "llama", "MistralForCausalLM": "mistral"}
# rope_scaling keys kept per rope type (everything else in the dict is ignored)
_ROPE_KEYS = {
    "default": (),
    "linear": ("factor",),
    "llama3": ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"),
    "yarn": ("factor", "original_max_position_embeddings", "attention_factor", "beta_fast", "beta_slow",
             "mscale", "mscale_all_dim", "truncate"),
}
# rope_scaling values that must be finite and > 0 where given
_ROPE_POSITIVE = ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings",
                  "attention_factor", "beta_fast", "beta_slow")
#: The most parameters a loaded config may imply: well above the largest checkpoint of these
#: architectures (Llama 3.1 405B); a larger count is a corrupt or hostile config.json.
MAX_PARAMETERS = 2 * 10**12
#: The most layers a loaded config may have (the largest supported checkpoints have 126).
MAX_LAYERS = 4096
_ROPE_REQUIRED = {"linear": ("factor",), "llama3": ("factor", "low_freq_factor", "high_freq_factor"),
                  "yarn": ()}


@dataclasses.dataclass(frozen=True)
class RopeConfig:
    """Rotary embedding settings: ``theta`` (the base) and the scaling of ``rope_type``.

    ``scaling`` holds the type's parameters as sorted ``(key, value)`` pairs (hashable), e.g.
    ``(("factor", 8.0), ("high_freq_factor", 4.0), ...)`` for llama3.
    """

    theta: float = 10_000.0
    rope_type: str = "default"
    scaling: tuple[tuple[str, Any], ...] = ()

    def get(self, key: str, default: Any = None) -> Any:
        return dict(self.scaling).get(key, default)


@dataclasses.dataclass(frozen=True)
class LMConfig:
    """A decoder's hyperparameters (HF names in comments where they differ)."""

    architecture: str                     # config["architectures"][0]
    vocab_size: int
    hidden_size: int
    num_layers: int                       # num_hidden_layers
    num_heads: int                        # num_attention_heads
    num_kv_heads: int                     # num_key_value_heads
    head_dim: int
    intermediate_size: int
    rms_norm_eps: float
    rope: RopeConfig
    attention_bias: bool                  # bias on q/k/v projections
    o_bias: bool                          # bias on o_proj (Llama/Qwen3 with attention_bias)
    qk_norm: bool                         # RMSNorm over head_dim of q and k (Qwen3)
    tie_word_embeddings: bool
    sliding_window: int | None = None     # None = full attention everywhere
    sliding_layers: tuple[bool, ...] = () # per layer: does the sliding window apply
    max_position_embeddings: int = 32768
    bos_token_id: int | None = None
    eos_token_ids: tuple[int, ...] = ()
    pad_token_id: int | None = None

    @property
    def model_type(self) -> str:
        return _MODEL_TYPE[self.architecture]

    @property
    def num_parameters(self) -> int:
        """The parameter count of a checkpoint of this config (:func:`parameter_count`)."""
        return parameter_count(self.vocab_size, self.hidden_size, self.num_layers, self.num_heads,
                               self.num_kv_heads, self.head_dim, self.intermediate_size, self.tie_word_embeddings)

    @classmethod
    def from_hf(cls, cfg: dict, source: str = "config.json") -> LMConfig:
        """Read a transformers ``config.json`` dict; ``source`` names the file in errors."""
        return _from_hf(cfg, source)

    def to_hf(self) -> dict:
        """This config as a transformers ``config.json`` dict (rope in the 4.x top-level layout,
        which transformers 5 still reads)."""
        return _to_hf(self)


def parameter_count(vocab: int, hidden: int, layers: int, heads: int, kv_heads: int, head_dim: int,
                    intermediate: int, tied: bool) -> int:
    """Parameters of a decoder of these sizes (weights and norms; the few biases left out):
    the embedding table (twice when the head is untied), and per layer q/k/v/o, the SwiGLU
    MLP and two norms."""
    q, kv = heads * head_dim, kv_heads * head_dim
    per_layer = hidden * (2 * q + 2 * kv) + 3 * hidden * intermediate + 2 * hidden
    return vocab * hidden * (1 if tied else 2) + hidden + layers * per_layer


def _need(cfg: dict, key: str, source: str) -> Any:
    if key not in cfg or cfg[key] is None:
        raise ValueError(f"{source}: missing key {key!r}")
    return cfg[key]


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _whole(value, what: str, source: str, low: int = 1) -> int:
    """``value`` as an int >= ``low`` (a float with no fraction, like JSON's ``1e3``, counts)."""
    if not _is_number(value) or value != int(value) or value < low:
        kind = "a positive integer" if low == 1 else f"an integer >= {low}"
        raise ValueError(f"{source}: key {what!r} must be {kind}, got {value!r}")
    return int(value)


def _size(cfg: dict, key: str, source: str, default: Any = None) -> int:
    """A positive integer size; ``default`` when the key is absent or null (None: required)."""
    value = cfg.get(key)
    if value is None:
        if default is None:
            raise ValueError(f"{source}: missing key {key!r}")
        return default
    return _whole(value, key, source)


def _ids(value, key: str, source: str) -> tuple[int, ...]:
    if value is None:
        return ()
    return tuple(_whole(v, key, source, low=0) for v in (value if isinstance(value, (list, tuple)) else [value]))


def _id(cfg: dict, key: str, source: str) -> int | None:
    return None if cfg.get(key) is None else _whole(cfg[key], key, source, low=0)


def _positive(value, what: str, source: str, below: float = math.inf) -> float:
    """``value`` as a finite float in ``(0, below)``."""
    if not _is_number(value) or not 0 < value < below:
        bound = "" if below == math.inf else f" and below {below:g}"
        raise ValueError(f"{source}: key {what!r} must be a finite number above 0{bound}, got {value!r}")
    return float(value)


def _rope(cfg: dict, source: str) -> RopeConfig:
    params = cfg.get("rope_parameters") or cfg.get("rope_scaling") or {}
    where = "rope_parameters" if cfg.get("rope_parameters") else "rope_scaling"
    if params and all(isinstance(v, dict) for v in params.values()):   # nested per layer type
        distinct = {repr(sorted(v.items())) for v in params.values()}
        if len(distinct) != 1:
            raise ValueError(f"{source}: key {where!r} differs between layer types; unsupported")
        params = next(iter(params.values()))
    if not isinstance(params, dict):
        raise ValueError(f"{source}: key {where!r} must be a mapping, got {params!r}")
    rope_type = params.get("rope_type", params.get("type", "default"))
    if rope_type not in ROPE_TYPES:
        raise ValueError(f"{source}: {where}.rope_type {rope_type!r} is unsupported (supported: {ROPE_TYPES})")
    theta = _positive(params.get("rope_theta", cfg.get("rope_theta", 10_000.0)), "rope_theta", source)
    prf = params.get("partial_rotary_factor", cfg.get("partial_rotary_factor", 1.0))
    if prf not in (None, 1.0):
        raise ValueError(f"{source}: key 'partial_rotary_factor' = {prf} is unsupported (only 1.0)")
    for key in _ROPE_REQUIRED.get(rope_type, ()):
        if params.get(key) is None:
            raise ValueError(f"{source}: missing key {where}.{key!r} for rope_type {rope_type!r}")
    scaling = {k: params[k] for k in _ROPE_KEYS[rope_type] if params.get(k) is not None}
    if rope_type in ("llama3", "yarn"):
        scaling.setdefault("original_max_position_embeddings",
                           cfg.get("original_max_position_embeddings", cfg.get("max_position_embeddings")))
        if scaling["original_max_position_embeddings"] is None:
            raise ValueError(f"{source}: missing key {where}.'original_max_position_embeddings'")
    for key in _ROPE_POSITIVE:
        if key in scaling:
            _positive(scaling[key], f"{where}.{key}", source)
    if rope_type == "llama3" and not scaling["high_freq_factor"] > scaling["low_freq_factor"]:
        raise ValueError(f"{source}: key {where}.'high_freq_factor' must be above low_freq_factor "
                         f"({scaling['low_freq_factor']}), got {scaling['high_freq_factor']}")
    if rope_type == "yarn" and "factor" not in scaling:
        scaling["factor"] = _size(cfg, "max_position_embeddings", source) / scaling["original_max_position_embeddings"]
    return RopeConfig(theta, rope_type, tuple(sorted(scaling.items())))


def _sliding(cfg: dict, arch: str, n_layers: int, source: str) -> tuple[int | None, tuple[bool, ...]]:
    window = cfg.get("sliding_window")
    if arch in ("Qwen2ForCausalLM", "Qwen3ForCausalLM") and not cfg.get("use_sliding_window", False):
        window = None
    if arch == "LlamaForCausalLM":
        window = None
    if window is None:
        return None, (False,) * n_layers
    window = _whole(window, "sliding_window", source)
    if arch == "MistralForCausalLM":   # transformers applies Mistral's window to every layer
        return window, (True,) * n_layers
    types = cfg.get("layer_types")
    if types is None:
        first = cfg.get("max_window_layers", 28)
        types = ["sliding_attention" if i >= first else "full_attention" for i in range(n_layers)]
    if not isinstance(types, (list, tuple)) or len(types) != n_layers:
        raise ValueError(f"{source}: key 'layer_types' must list one type per layer ({n_layers})")
    return window, tuple(t == "sliding_attention" for t in types)


def _sizes(cfg: dict, arch: str, source: str) -> dict[str, int]:
    """The integer sizes of a config, checked (module docstring), before anything uses them."""
    hidden = _size(cfg, "hidden_size", source)
    heads = _size(cfg, "num_attention_heads", source)
    kv_heads = _size(cfg, "num_key_value_heads", source, default=heads)
    if heads % kv_heads:
        raise ValueError(f"{source}: key 'num_attention_heads' = {heads} is not a multiple of "
                         f"num_key_value_heads = {kv_heads}")
    default_head_dim = 128 if arch == "Qwen3ForCausalLM" else hidden // heads
    if default_head_dim < 1 and cfg.get("head_dim") is None:
        raise ValueError(f"{source}: key 'num_attention_heads' = {heads} exceeds hidden_size = {hidden}")
    sizes = {
        "vocab_size": _size(cfg, "vocab_size", source), "hidden_size": hidden,
        "num_layers": _size(cfg, "num_hidden_layers", source), "num_heads": heads, "num_kv_heads": kv_heads,
        "head_dim": _size(cfg, "head_dim", source, default=default_head_dim),
        "intermediate_size": _size(cfg, "intermediate_size", source),
        "max_position_embeddings": _size(cfg, "max_position_embeddings", source, default=32768),
    }
    count = parameter_count(sizes["vocab_size"], hidden, sizes["num_layers"], heads, kv_heads, sizes["head_dim"],
                            sizes["intermediate_size"], bool(cfg.get("tie_word_embeddings", False)))
    if count > MAX_PARAMETERS or sizes["num_layers"] > MAX_LAYERS:
        raise ValueError(f"{source}: its sizes (num_hidden_layers={sizes['num_layers']}, hidden_size={hidden}, "
                         f"intermediate_size={sizes['intermediate_size']}, vocab_size={sizes['vocab_size']}) make a model "
                         f"of ~{count:.3g} parameters ({4 * count:.3g} bytes in float32); at most {MAX_PARAMETERS:.0e} "
                         f"parameters and {MAX_LAYERS} layers are read")
    return sizes


def _from_hf(cfg: dict, source: str) -> LMConfig:
    if not isinstance(cfg, dict):
        raise ValueError(f"{source}: expected a JSON object, got {type(cfg).__name__}")
    archs = _need(cfg, "architectures", source)
    arch = archs[0] if isinstance(archs, (list, tuple)) and archs else archs
    if not isinstance(arch, str) or arch not in ARCHITECTURES:
        raise ValueError(f"{source}: key 'architectures' = {arch!r} is unsupported (supported: {ARCHITECTURES})")
    act = cfg.get("hidden_act", "silu")
    if act != "silu":
        raise ValueError(f"{source}: key 'hidden_act' = {act!r} is unsupported (only 'silu')")
    if cfg.get("mlp_bias", False):
        raise ValueError(f"{source}: key 'mlp_bias' = true is unsupported")
    sizes = _sizes(cfg, arch, source)
    bias = {"Qwen2ForCausalLM": True, "MistralForCausalLM": False}.get(arch, bool(cfg.get("attention_bias", False)))
    window, sliding_layers = _sliding(cfg, arch, sizes["num_layers"], source)
    return LMConfig(
        architecture=arch,
        **sizes,
        rms_norm_eps=_positive(cfg.get("rms_norm_eps", 1e-6), "rms_norm_eps", source, below=1.0),
        rope=_rope(cfg, source),
        attention_bias=bias,
        o_bias=bias and arch in ("LlamaForCausalLM", "Qwen3ForCausalLM"),
        qk_norm=arch == "Qwen3ForCausalLM",
        tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)),
        sliding_window=window,
        sliding_layers=sliding_layers,
        bos_token_id=_id(cfg, "bos_token_id", source),
        eos_token_ids=_ids(cfg.get("eos_token_id"), "eos_token_id", source),
        pad_token_id=_id(cfg, "pad_token_id", source),
    )


def _to_hf(c: LMConfig) -> dict:
    out = {
        "architectures": [c.architecture], "model_type": c.model_type, "vocab_size": c.vocab_size,
        "hidden_size": c.hidden_size, "num_hidden_layers": c.num_layers,
        "num_attention_heads": c.num_heads, "num_key_value_heads": c.num_kv_heads,
        "head_dim": c.head_dim, "intermediate_size": c.intermediate_size, "hidden_act": "silu",
        "rms_norm_eps": c.rms_norm_eps, "rope_theta": c.rope.theta,
        "rope_scaling": None if c.rope.rope_type == "default" else {"rope_type": c.rope.rope_type,
                                                                    **dict(c.rope.scaling)},
        "tie_word_embeddings": c.tie_word_embeddings,
        "max_position_embeddings": c.max_position_embeddings,
        "bos_token_id": c.bos_token_id, "pad_token_id": c.pad_token_id,
        "eos_token_id": list(c.eos_token_ids) if len(c.eos_token_ids) != 1 else c.eos_token_ids[0],
    }
    if c.architecture != "Qwen2ForCausalLM":
        out["attention_bias"] = c.attention_bias
    if c.architecture in ("Qwen2ForCausalLM", "Qwen3ForCausalLM"):
        out["use_sliding_window"] = c.sliding_window is not None
        out["sliding_window"] = c.sliding_window
        if c.sliding_window is not None:
            out["layer_types"] = ["sliding_attention" if s else "full_attention" for s in c.sliding_layers]
    elif c.architecture == "MistralForCausalLM":
        out["sliding_window"] = c.sliding_window
    return out
