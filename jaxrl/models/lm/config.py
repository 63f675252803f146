"""The shape of a Hugging Face decoder, read from its ``config.json``: :class:`LMConfig`.

Both layouts of the rotary settings are read: transformers 4.x writes ``rope_theta`` and
``rope_scaling`` at the top level, transformers 5 nests them in ``rope_parameters``. Keys a
checkpoint may leave out take the defaults of that architecture's transformers config class
(e.g. Qwen3's ``head_dim`` is 128, Qwen2 always has q/k/v bias); keys with no default, an
unknown architecture or an unsupported rope type raise a one-line ``ValueError`` naming the
file and the key.
"""

from __future__ import annotations

import dataclasses
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

    @classmethod
    def from_hf(cls, cfg: dict, source: str = "config.json") -> LMConfig:
        """Read a transformers ``config.json`` dict; ``source`` names the file in errors."""
        return _from_hf(cfg, source)

    def to_hf(self) -> dict:
        """This config as a transformers ``config.json`` dict (rope in the 4.x top-level layout,
        which transformers 5 still reads)."""
        return _to_hf(self)


def _need(cfg: dict, key: str, source: str) -> Any:
    if key not in cfg or cfg[key] is None:
        raise ValueError(f"{source}: missing key {key!r}")
    return cfg[key]


def _ids(value) -> tuple[int, ...]:
    if value is None:
        return ()
    return tuple(int(v) for v in value) if isinstance(value, (list, tuple)) else (int(value),)


def _rope(cfg: dict, source: str) -> RopeConfig:
    params = cfg.get("rope_parameters") or cfg.get("rope_scaling") or {}
    where = "rope_parameters" if cfg.get("rope_parameters") else "rope_scaling"
    if params and all(isinstance(v, dict) for v in params.values()):   # nested per layer type
        distinct = {repr(sorted(v.items())) for v in params.values()}
        if len(distinct) != 1:
            raise ValueError(f"{source}: key {where!r} differs between layer types; unsupported")
        params = next(iter(params.values()))
    rope_type = params.get("rope_type", params.get("type", "default"))
    if rope_type not in ROPE_TYPES:
        raise ValueError(f"{source}: {where}.rope_type {rope_type!r} is unsupported (supported: {ROPE_TYPES})")
    theta = params.get("rope_theta", cfg.get("rope_theta", 10_000.0))
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
    if rope_type == "yarn" and "factor" not in scaling:
        scaling["factor"] = _need(cfg, "max_position_embeddings", source) / scaling["original_max_position_embeddings"]
    return RopeConfig(float(theta), rope_type, tuple(sorted(scaling.items())))


def _sliding(cfg: dict, arch: str, n_layers: int, source: str) -> tuple[int | None, tuple[bool, ...]]:
    window = cfg.get("sliding_window")
    if arch in ("Qwen2ForCausalLM", "Qwen3ForCausalLM") and not cfg.get("use_sliding_window", False):
        window = None
    if arch == "LlamaForCausalLM":
        window = None
    if window is None:
        return None, (False,) * n_layers
    if arch == "MistralForCausalLM":   # transformers applies Mistral's window to every layer
        return int(window), (True,) * n_layers
    types = cfg.get("layer_types")
    if types is None:
        first = cfg.get("max_window_layers", 28)
        types = ["sliding_attention" if i >= first else "full_attention" for i in range(n_layers)]
    if len(types) != n_layers:
        raise ValueError(f"{source}: key 'layer_types' has {len(types)} entries for {n_layers} layers")
    return int(window), tuple(t == "sliding_attention" for t in types)


def _from_hf(cfg: dict, source: str) -> LMConfig:
    archs = _need(cfg, "architectures", source)
    arch = archs[0] if isinstance(archs, (list, tuple)) and archs else archs
    if arch not in ARCHITECTURES:
        raise ValueError(f"{source}: key 'architectures' = {arch!r} is unsupported (supported: {ARCHITECTURES})")
    act = cfg.get("hidden_act", "silu")
    if act != "silu":
        raise ValueError(f"{source}: key 'hidden_act' = {act!r} is unsupported (only 'silu')")
    if cfg.get("mlp_bias", False):
        raise ValueError(f"{source}: key 'mlp_bias' = true is unsupported")
    hidden = int(_need(cfg, "hidden_size", source))
    heads = int(_need(cfg, "num_attention_heads", source))
    layers = int(_need(cfg, "num_hidden_layers", source))
    head_dim = cfg.get("head_dim") or (128 if arch == "Qwen3ForCausalLM" else hidden // heads)
    bias = {"Qwen2ForCausalLM": True, "MistralForCausalLM": False}.get(arch, bool(cfg.get("attention_bias", False)))
    window, sliding_layers = _sliding(cfg, arch, layers, source)
    return LMConfig(
        architecture=arch,
        vocab_size=int(_need(cfg, "vocab_size", source)),
        hidden_size=hidden,
        num_layers=layers,
        num_heads=heads,
        num_kv_heads=int(cfg.get("num_key_value_heads") or heads),
        head_dim=int(head_dim),
        intermediate_size=int(_need(cfg, "intermediate_size", source)),
        rms_norm_eps=float(cfg.get("rms_norm_eps", 1e-6)),
        rope=_rope(cfg, source),
        attention_bias=bias,
        o_bias=bias and arch in ("LlamaForCausalLM", "Qwen3ForCausalLM"),
        qk_norm=arch == "Qwen3ForCausalLM",
        tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)),
        sliding_window=window,
        sliding_layers=sliding_layers,
        max_position_embeddings=int(cfg.get("max_position_embeddings") or 32768),
        bos_token_id=cfg.get("bos_token_id"),
        eos_token_ids=_ids(cfg.get("eos_token_id")),
        pad_token_id=cfg.get("pad_token_id"),
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
