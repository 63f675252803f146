"""Make the text recipes' model: a small Qwen2-architecture decoder with fresh weights.

Deterministic (seed 0): ``python envs/assets/text_model/make.py`` writes ``config.json``,
``generation_config.json``, ``model.safetensors`` and the project's tokenizer files
(``envs/assets/text_tokenizer``) into this directory, a checkpoint that ``jaxrl.models.lm.load_lm``
and transformers' ``from_pretrained`` both read. Weights drawn as transformers initialises a
Qwen2 (``jaxrl.models.lm.init_params``); the text recipes train it from scratch (SFT, then GRPO).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile

import jax

HERE = os.path.dirname(os.path.abspath(__file__))
TOKENIZER = os.path.join(os.path.dirname(HERE), "text_tokenizer")

SIZES = dict(hidden_size=128, intermediate_size=384, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2)


def main(out: str = HERE) -> None:
    from jaxrl.models.lm import LM, LMConfig, init_params, load_tokenizer, save_hf

    tok = load_tokenizer(TOKENIZER)
    vocab = -(-tok.vocab_size // 64) * 64  # the embedding rounded up, as checkpoints do
    eos, pad = tok.token_id(tok.special_tokens["eos_token"]), tok.token_id(tok.special_tokens["pad_token"])
    hf = {
        "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_act": "silu", **SIZES,
        "vocab_size": vocab, "max_position_embeddings": 512, "rms_norm_eps": 1e-6, "rope_theta": 10000.0,
        "rope_scaling": None, "tie_word_embeddings": True, "initializer_range": 0.02, "attention_dropout": 0.0,
        "sliding_window": None, "use_sliding_window": False, "max_window_layers": SIZES["num_hidden_layers"],
        "bos_token_id": None, "eos_token_id": eos, "pad_token_id": pad, "torch_dtype": "float32", "use_cache": True,
    }
    config = LMConfig.from_hf(hf)
    params = init_params(config, jax.random.PRNGKey(0), std=hf["initializer_range"])
    with tempfile.TemporaryDirectory() as src:
        with open(os.path.join(src, "config.json"), "w", encoding="utf-8") as f:
            json.dump(hf, f, indent=2)
        with open(os.path.join(src, "generation_config.json"), "w", encoding="utf-8") as f:
            json.dump({"eos_token_id": eos, "pad_token_id": pad, "bos_token_id": None}, f, indent=2)
        for name in os.listdir(TOKENIZER):
            if name.endswith(".json"):
                shutil.copyfile(os.path.join(TOKENIZER, name), os.path.join(src, name))
        tmp_out = out + ".new"
        save_hf(tmp_out, LM(config, pad_id=pad, eos_ids=(eos,)), params, source=src)
    for name in os.listdir(tmp_out):
        os.replace(os.path.join(tmp_out, name), os.path.join(out, name))
    os.rmdir(tmp_out)
    print(f"wrote {out}: vocab {vocab}, {sum(x.size for x in jax.tree_util.tree_leaves(params)):,} parameters")


if __name__ == "__main__":
    main(*sys.argv[1:])
