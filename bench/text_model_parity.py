"""Parity of the text recipes' model (envs/assets/text_model) between transformers and jaxrl.

    python bench/text_model_parity.py [MODEL_DIR]

Needs torch + transformers (a fixture-making or GPU machine, never CI). Runs transformers'
``AutoModelForCausalLM`` (float32, eager attention) and ``jaxrl.models.lm.load_lm`` (float32,
highest matmul precision) on the same left-padded batch of the project's tokenizer ids, with
generate()'s positions, and prints the max |logit difference| over the real positions; writes
``bench/results/text_model_parity.json``. Shows the checkpoint ``make.py`` writes is one
transformers reads as the same function.
"""

from __future__ import annotations

import json
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
MODEL = os.path.join(os.path.dirname(HERE), "envs", "assets", "text_model")


def main(path: str = MODEL) -> None:
    import jax

    jax.config.update("jax_default_matmul_precision", "highest")
    import jax.numpy as jnp
    import torch
    import transformers

    from jaxrl.models.lm import load_lm, load_tokenizer

    tok = load_tokenizer(path)
    texts = ["Mia has 8 apples and buys 7 more.", "Sort these names: Ben, Ava", "<answer>15</answer> done"]
    rows = [tok.encode(t) for t in texts]
    width = max(map(len, rows)) + 3
    pad = tok.token_id(tok.special_tokens["pad_token"])
    ids = np.full((len(rows), width), pad, np.int64)
    for i, r in enumerate(rows):
        ids[i, width - len(r):] = r
    mask = ids != pad
    pos = np.clip(np.cumsum(mask, 1) - 1, 0, None)
    hf = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, attn_implementation="eager").eval()
    with torch.no_grad():
        want = hf(input_ids=torch.tensor(ids), attention_mask=torch.tensor(mask.astype(np.int64)),
                  position_ids=torch.tensor(pos)).logits.numpy()
    model, params = load_lm(path)
    got = np.asarray(model.apply(params, jnp.asarray(ids, jnp.int32), jnp.asarray(mask)))
    diff = float(np.abs(got - want)[mask].max())
    out = {"model": path, "max_abs_logit_diff": diff, "logit_scale": float(np.abs(want[mask]).max()),
           "transformers": transformers.__version__, "torch": torch.__version__, "jax": jax.__version__,
           "jax_device": str(jax.devices()[0])}
    print(json.dumps(out, indent=2))
    with open(os.path.join(HERE, "results", "text_model_parity.json"), "w") as f:
        json.dump(out, f, indent=2)
    sys.exit(0 if diff < 1e-4 else 1)


if __name__ == "__main__":
    main(*sys.argv[1:])
