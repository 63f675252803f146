"""Write what transformers and PEFT read back: :func:`save_hf` (a full checkpoint, LoRA merged)
and :func:`save_peft` (the adapters alone).

Both write into a temporary sibling directory and rename it into place at the end, so a
crash never leaves a half-written checkpoint under ``out_dir``.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sys
import tempfile

import jax.numpy as jnp
import ml_dtypes  # noqa: F401  (bfloat16 for safetensors' numpy writer)
import numpy as np

from jaxrl.models.lm import tokenizer_check
from jaxrl.models.lm.load import hf_names
from jaxrl.models.lm.lora import LoRAConfig, LoRAParams, merge_lora

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja",
                   "vocab.json", "merges.txt", "tokenizer.model", "added_tokens.json")
_DTYPE_NAMES = {"float32": "float32", "bfloat16": "bfloat16", "float16": "float16"}
_MODULE = {"q_proj": "self_attn", "k_proj": "self_attn", "v_proj": "self_attn", "o_proj": "self_attn",
           "gate_proj": "mlp", "up_proj": "mlp", "down_proj": "mlp"}


@contextlib.contextmanager
def _atomic_dir(out_dir: str):
    """Yield a temporary directory beside ``out_dir``; on success it replaces ``out_dir``."""
    out_dir = os.path.abspath(os.fspath(out_dir))
    parent = os.path.dirname(out_dir)
    os.makedirs(parent, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=f".{os.path.basename(out_dir)}.", dir=parent)
    try:
        yield tmp
        old = None
        if os.path.exists(out_dir):
            old = tempfile.mkdtemp(prefix=f".{os.path.basename(out_dir)}.old.", dir=parent)
            os.rename(out_dir, os.path.join(old, "x"))
        os.rename(tmp, out_dir)
        if old is not None:
            shutil.rmtree(old)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _write_json(path: str, obj: dict) -> None:
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=2)
        f.write("\n")


def _get(tree: dict, path: tuple[str, ...]):
    for key in path:
        tree = tree[key]
    return tree


def hf_state_dict(model, params: dict) -> dict[str, np.ndarray]:
    """The params as HF-named numpy arrays (``[out, in]`` weights), in the params' dtype."""
    out = {}
    for name, (path, layer, transposed) in hf_names(model.config).items():
        t = np.asarray(_get(params, path))
        t = t[layer] if layer is not None else t
        out[name] = np.ascontiguousarray(t.T if transposed else t)
    return out


def save_hf(out_dir: str, model, params: dict, *, lora: LoRAParams | None = None,
            lora_config: LoRAConfig | None = None, source: str | None = None) -> str:
    """Write a transformers checkpoint of ``model``/``params`` (with ``lora`` merged) to
    ``out_dir``: ``config.json`` (``source``'s, when given, else :meth:`LMConfig.to_hf`; its
    ``torch_dtype``/``dtype`` set to the saved dtype), ``model.safetensors``, and
    ``generation_config.json`` plus tokenizer files copied from ``source``; where transformers'
    ``AutoTokenizer`` would rebuild that tokenizer differently, ``tokenizer_config.json`` declares
    the class that reads ``tokenizer.json`` as it is (:func:`tokenizer_check.export_fix`).
    Returns ``out_dir``."""
    from safetensors.numpy import save_file

    if lora is not None:
        if lora_config is None:
            raise ValueError("save_hf: lora given without lora_config")
        params = merge_lora(model, params, lora, lora_config)
    dtype_name = _DTYPE_NAMES[jnp.dtype(model.dtype).name]
    config = model.config.to_hf()
    if source is not None:
        with open(os.path.join(source, "config.json"), encoding="utf-8") as f:
            config = json.load(f)
    config["torch_dtype"] = config["dtype"] = dtype_name
    tensors = hf_state_dict(model, params)
    with _atomic_dir(out_dir) as tmp:
        _write_json(os.path.join(tmp, "config.json"), config)
        save_file(tensors, os.path.join(tmp, "model.safetensors"), metadata={"format": "pt"})
        copied = False
        for name in ("generation_config.json", *TOKENIZER_FILES):
            if source is not None and os.path.exists(os.path.join(source, name)):
                shutil.copyfile(os.path.join(source, name), os.path.join(tmp, name))
                copied |= name == "generation_config.json"
        if not copied:
            _write_json(os.path.join(tmp, "generation_config.json"),
                        {"eos_token_id": list(model.eos_ids), "pad_token_id": model.pad_id,
                         "bos_token_id": model.config.bos_token_id})
        problem = tokenizer_check.export_fix(tmp, shown=out_dir)  # AutoTokenizer: the ids of tokenizer.json
    if problem:
        print(f"jaxrl: warning: {problem}", file=sys.stderr, flush=True)
    return out_dir


def save_peft(out_dir: str, model, lora: LoRAParams, lora_config: LoRAConfig,
              base_model_name_or_path: str) -> str:
    """Write the adapters as PEFT does: ``adapter_config.json`` and ``adapter_model.safetensors``
    with ``base_model.model.model.layers.{i}.self_attn.q_proj.lora_A.weight [r, in]`` and
    ``...lora_B.weight [out, r]`` (float32). Returns ``out_dir``."""
    from safetensors.numpy import save_file

    if abs(lora.scale - lora_config.scale) > 1e-12 or set(lora) != set(lora_config.targets):
        raise ValueError(f"save_peft: the adapters (scale {lora.scale}, targets {sorted(lora)}) do not match "
                         f"{lora_config}")
    tensors = {}
    for target, ab in lora.items():
        a, b = np.asarray(ab["a"], np.float32), np.asarray(ab["b"], np.float32)
        for i in range(model.config.num_layers):
            pre = f"base_model.model.model.layers.{i}.{_MODULE[target]}.{target}"
            tensors[f"{pre}.lora_A.weight"] = np.ascontiguousarray(a[i].T)
            tensors[f"{pre}.lora_B.weight"] = np.ascontiguousarray(b[i].T)
    adapter_config = {
        "peft_type": "LORA", "task_type": "CAUSAL_LM", "r": lora_config.rank,
        "lora_alpha": lora_config.alpha, "target_modules": list(lora_config.targets),
        "lora_dropout": 0.0, "bias": "none", "fan_in_fan_out": False, "use_rslora": False,
        "init_lora_weights": True, "inference_mode": True, "modules_to_save": None,
        "base_model_name_or_path": base_model_name_or_path,
    }
    with _atomic_dir(out_dir) as tmp:
        _write_json(os.path.join(tmp, "adapter_config.json"), adapter_config)
        save_file(tensors, os.path.join(tmp, "adapter_model.safetensors"), metadata={"format": "pt"})
    return out_dir
