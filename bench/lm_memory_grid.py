"""The memory estimate against XLA's own figure for one compiled GRPO update, over a grid.

    python bench/lm_memory_grid.py [--shapes small medium] [--qwen05]

For each point a Qwen2-style decoder with random weights (no file read) is set up for LoRA
GRPO (beta 0.04) the way ``grpo.make_setup`` does for a loaded checkpoint, the automatic
loss-pass plan applied; ``grpo.update.update`` is lowered on the abstract train state, with
the state donated as ``jaxrl train`` jits it, and compiled (nothing runs). XLA's figure is
``memory_analysis()``'s argument + output + temporary - aliased bytes; the estimate is
``jaxrl.algos.grpo._memory`` (``jaxrl.models.lm.memory.estimate_memory``) for the same run.
Grid: model shapes x {LoRA rank 16, full} x {float32, bfloat16} x {1, 4 micro-batches}, plus
remat and head-chunk overrides at one point. ``--qwen05``: two points at Qwen2.5-0.5B's shapes
(slow: minutes each on 2 cores). One device only (a ``data`` axis splits sequences, a
``model`` axis weights; neither is in this grid).

Results: ``bench/results/lm_memory_grid.json`` and ``.md``.
"""

from __future__ import annotations

import argparse
import functools
import itertools
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)

from bench import common  # noqa: E402
from bench import lm_memory  # noqa: E402

RESULTS = os.path.join(HERE, "results", "lm_memory_grid")
SHAPES = {  # hidden, layers, vocabulary, MLP, query heads, kv heads, head dim
    "small": (256, 2, 8192, 704, 4, 2, 64),
    "medium": (512, 4, 32768, 1408, 8, 2, 64),
    "qwen2.5-0.5b": (896, 24, 151936, 4864, 14, 2, 64),
}


def hf_config(d, layers, vocab, mlp, hq, hkv, hd) -> dict:
    return {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "vocab_size": vocab, "hidden_size": d,
            "intermediate_size": mlp, "num_hidden_layers": layers, "num_attention_heads": hq,
            "num_key_value_heads": hkv, "head_dim": hd, "hidden_act": "silu", "max_position_embeddings": 4096,
            "rms_norm_eps": 1e-6, "rope_theta": 1e6, "tie_word_embeddings": True, "bos_token_id": vocab - 3,
            "eos_token_id": vocab - 1, "pad_token_id": vocab - 3, "torch_dtype": "float32"}


def point(shape: str, rank: int, dtype: str, micro: int, prompts=4, samples=4, prompt_len=32, new_tokens=32,
          remat="auto", head_chunk="auto") -> dict:
    import jax
    import jax.numpy as jnp

    from jaxrl.algos import grpo
    from jaxrl.algos.grpo import update as U
    from jaxrl.algos.common.lm.policy import LMSpec, lm_policy
    from jaxrl.models import lm
    from jaxrl.models.lm.config import LMConfig

    c = LMConfig.from_hf(hf_config(*SHAPES[shape]))
    model = lm.LM(c, dtype=jnp.dtype(dtype), pad_id=c.vocab_size - 3, eos_ids=(c.vocab_size - 1,))
    weights = lm_memory.random_params(c, jnp.dtype(dtype), jax.random.PRNGKey(0))
    lm_memory.PAD, lm_memory.EOS = c.vocab_size - 3, c.vocab_size - 1  # the bench task's ids in this vocabulary
    task = lm_memory.task_cls(c.vocab_size, prompt_len, new_tokens)
    cfg = grpo.GRPOConfig(
        num_prompts=prompts, group_size=samples, num_minibatches=1, micro_batches=micro, eval_episodes=4,
        model=grpo.config.ModelConfig(policy="hf", path="<in memory>", dtype=dtype,
                                      lora=grpo.config.LoRASection(rank=rank, alpha=16.0), remat=remat,
                                      head_chunk=head_chunk),
        loss=grpo.config.LossConfig(type="grpo", beta=0.04), optim=grpo.config.GRPOOptim(lr=1e-5))
    plan = grpo.loss_pass_plan(c, cfg, task.dialogue_len, task.prompt_len)
    spec = LMSpec(model, lm.LoRAConfig(rank, 16.0) if rank else None, task.pad_id, task.prompt_len, task.dialogue_len,
                  plan.head_chunk, plan.remat)
    policy = lm_policy(spec, weights)
    params = task.default_params
    setup = U.Setup(cfg, task, params, params, policy, grpo.rollout_length(task, params, cfg), U.make_optimizer(cfg),
                    U.schedule(cfg), None, U.shared_prefix_group(policy, cfg))
    abstract = jax.eval_shape(functools.partial(U.init, setup), jax.random.PRNGKey(0))
    t0 = time.perf_counter()
    compiled = jax.jit(functools.partial(U.update, setup), donate_argnums=0).lower(abstract).compile()
    compile_s = time.perf_counter() - t0
    m = lm_memory.analysis(compiled)
    est = grpo._memory(c, cfg, task.dialogue_len, 1, 1, "tp", prompt_len=task.prompt_len)
    return {"shape": shape, "lora_rank": rank, "dtype": dtype, "micro_batches": micro, "batch": f"{prompts} x {samples}",
            "prompt_len": prompt_len, "new_tokens": new_tokens, "remat": plan.remat, "head_chunk": plan.head_chunk,
            "xla": m, "estimate_total": est.total, "estimate_parts": {
                "weights": est.weights, "grads": est.grads, "optimizer": est.optimizer, "kv_cache": est.kv_cache,
                "activations": est.activations},
            "ratio": est.total / m["peak_estimate"], "compile_s": compile_s}


def write_markdown(record: dict, path: str) -> None:
    m = record["meta"]
    lines = [
        "# The memory estimate against XLA's figure for one compiled GRPO update",
        "",
        common.measured(m, m["machine"].get("jax_backend", "")),
        "",
        f"Command: `{m['command']}`",
        "",
        "| shape | LoRA rank | dtype | batch | prompt + new tokens | micro-batches | remat | head chunk | XLA (MiB) | "
        "estimate (MiB) | estimate / XLA |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in record["points"]:
        lines.append(f"| {r['shape']} | {r['lora_rank'] or 'full'} | {r['dtype']} | {r['batch']} | "
                     f"{r['prompt_len']} + {r['new_tokens']} | {r['micro_batches']} | {r['remat']} | "
                     f"{r['head_chunk'] or 'whole'} | {r['xla']['peak_estimate'] / 2**20:,.1f} | "
                     f"{r['estimate_total'] / 2**20:,.1f} | **{r['ratio']:.2f}** |")
    ratios = [r["ratio"] for r in record["points"]]
    lines += ["", f"Range of estimate / XLA: {min(ratios):.2f} to {max(ratios):.2f} over {len(ratios)} points.", "",
              *record["notes"]]
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


NOTES = [
    "- XLA's figure: the compiled update's argument + output + temporary bytes minus the aliased ones (the train "
    "state is donated, as `jaxrl train` does); buffers are reused inside the temporaries, so this is the program's "
    "peak as XLA assigns it.",
    "- Batch: 4 prompts x 4 samples, 32 prompt + 32 new tokens; KL beta 0.04 (a reference pass; under full "
    "fine-tuning a float32 reference copy in the state).",
    "- The estimate's model (`jaxrl.models.lm.memory.estimate_memory`): the state; the gradients; and the larger of "
    "generation's KV cache and the loss pass, whose peak is the LM head's backward (3 float32 logits-sized arrays) "
    "on top of the kept layer activations (every layer's without remat, each layer's input with remat; "
    "`KEEP_FACTOR` x the named per-token tensors, fitted on the small shape). On XLA:CPU bf16 is computed in "
    "float32: activations at 4 bytes and a float32 copy of the weights.",
    "- Not in this grid: more than one device (`bench/results/lm_memory_devices.md`: 1 device, 2 (data) and 2 x model 2 through `jaxrl train`'s own build), and GPU.",
]


def main(args) -> None:
    load_before = os.getloadavg()[0]
    git = common.git_rev()
    grid = [dict(shape=s, rank=r, dtype=d, micro=mb) for s, r, d, mb in
            itertools.product(args.shapes, (16, 0), ("float32", "bfloat16"), (1, 4))]
    grid += [dict(shape=args.shapes[0], rank=16, dtype="float32", micro=1, remat=True, head_chunk=0),
             dict(shape=args.shapes[0], rank=16, dtype="float32", micro=1, remat=True, head_chunk=16),
             dict(shape=args.shapes[0], rank=16, dtype="float32", micro=1, new_tokens=64)]
    if args.qwen05_only:
        grid = []
    if args.qwen05 or args.qwen05_only:
        grid += [dict(shape="qwen2.5-0.5b", rank=16, dtype="bfloat16", micro=1, prompts=2, samples=2, new_tokens=16),
                 dict(shape="qwen2.5-0.5b", rank=16, dtype="float32", micro=1, prompts=2, samples=2, new_tokens=16)]
    points = []
    if args.append and os.path.exists(RESULTS + ".json"):
        import json

        with open(RESULTS + ".json") as f:
            points = json.load(f)["points"]
    for g in grid:
        r = point(**g)
        print(f"{r['shape']} r{r['lora_rank']} {r['dtype']} mb{r['micro_batches']} remat={r['remat']} "
              f"chunk={r['head_chunk']}: XLA {r['xla']['peak_estimate'] / 2**20:,.1f} MiB, estimate "
              f"{r['estimate_total'] / 2**20:,.1f} MiB, ratio {r['ratio']:.2f}", flush=True)
        points.append(r)
        meta = common.metadata({"load_before": load_before, "load_after": os.getloadavg()[0], "git": git},
                               libraries=("jax", "jaxlib", "numpy", "flax", "optax"))
        common.write_record(RESULTS, {"meta": meta, "points": points, "notes": NOTES}, write_markdown)  # after each point


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--shapes", nargs="+", default=["small", "medium"], choices=sorted(SHAPES))
    p.add_argument("--qwen05", action="store_true", help="add two points at Qwen2.5-0.5B's shapes (slow)")
    p.add_argument("--qwen05-only", action="store_true", help="only those two points")
    p.add_argument("--append", action="store_true", help="keep the record's points and add these")
    return p.parse_args(argv)


if __name__ == "__main__":
    main(parse_args())
