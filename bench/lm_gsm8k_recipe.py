"""The GPU recipe's cost: ``configs/grpo_qwen2.5_0.5b_gsm8k.yaml`` run by ``jaxrl train`` on a
Qwen2.5-0.5B-shaped model with random weights (nothing is downloaded, so no real checkpoint).

    python bench/lm_gsm8k_recipe.py [--updates 6] [--small]

Writes a random checkpoint of Qwen2.5-0.5B's shapes (``jaxrl.models.lm.init_params``, bf16,
494 M parameters; the project's tokenizer, so prompts are shorter than Qwen's tokenizer makes
them) and a GSM8K-format JSONL (``text/WordProblems-v0``'s problems as ``question`` /
``answer: "... #### n"``), then runs the config unchanged but for those paths and
``grpo.num_updates``. A random model never writes the end token, so every rollout runs its
full 320 tokens: the worst case of the config. Recorded from ``metrics.jsonl``: the first
chunk (compile + updates) and the steady seconds per update of the later chunks, the whole
process, and the device's peak memory. No learning figure: the weights are random.
``--small``: a 2-layer, hidden-64 stand-in (for a CPU smoke run). Results:
``bench/results/lm_gsm8k_recipe.json`` and ``.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)

from bench.lm_memory import QWEN25_05B  # noqa: E402

TOKENIZER = os.path.join(ROOT, "envs", "assets", "text_tokenizer")


def make_model(out: str, small: bool) -> None:
    import jax
    import jax.numpy as jnp

    from jaxrl.models.lm import LM, LMConfig, init_params, load_tokenizer, save_hf

    tok = load_tokenizer(TOKENIZER)
    eos, pad = tok.token_id(tok.special_tokens["eos_token"]), tok.token_id(tok.special_tokens["pad_token"])
    hf = dict(QWEN25_05B, bos_token_id=None, eos_token_id=eos, pad_token_id=pad)
    if small:
        hf.update(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                  vocab_size=1024, max_window_layers=2)
    config = LMConfig.from_hf(hf)
    with jax.default_device(jax.devices("cpu")[0]):
        params = init_params(config, jax.random.PRNGKey(0), jnp.bfloat16)
    src = tempfile.mkdtemp()
    with open(os.path.join(src, "config.json"), "w") as f:
        json.dump(hf, f)
    for name in os.listdir(TOKENIZER):
        if name.endswith(".json"):
            shutil.copyfile(os.path.join(TOKENIZER, name), os.path.join(src, name))
    save_hf(out, LM(config, jnp.bfloat16, pad, (eos,)), params, source=src)


def make_rows(out_dir: str) -> None:
    sys.path.insert(0, os.path.join(ROOT))
    from jaxrl_envs.text.word_problems import generate_rows

    for name, seed, n in (("train", 0, 2048), ("test", 1, 256)):
        with open(os.path.join(out_dir, f"{name}.jsonl"), "w") as f:
            for r in generate_rows(seed, n):
                f.write(json.dumps({"question": r["prompt"], "answer": f"Reasoning.\n#### {r['answer']}"}) + "\n")


# `jaxrl train ARGV` in a child process, then its device's memory statistics (peak_bytes_in_use
# on a GPU) printed on a line of their own, also when the command exits.
TRAIN_AND_PEAK = """
import json, sys
import jax
from jaxrl.cli import main
code = 1
try:
    code = main(json.loads(sys.argv[1])[1:])
finally:
    print("PEAK " + json.dumps(jax.devices()[0].memory_stats() or {}), flush=True)
sys.exit(code)
"""


def generation(model_dir: str, small: bool, rows: int = 128, prompt: int = 256, new: int = 320,
               rank: int = 32) -> dict:
    """Sampled tokens/s of :func:`jaxrl.models.lm.generate` at the recipe's batch (128 rows, 256
    prompt tokens, 320 new, LoRA rank 32 on every projection): compile, then the median of 3
    timed calls, every token fetched. A random model never ends a row, so every token counts."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    from jaxrl.models.lm import LoRAConfig, generate, init_lora, load_lm

    if small:
        rows, prompt, new = 16, 32, 32
    model, params = load_lm(model_dir, dtype=jnp.bfloat16)
    lora = init_lora(jax.random.PRNGKey(1), model, LoRAConfig(rank=rank, alpha=2.0 * rank), jnp.bfloat16)
    ids = jax.random.randint(jax.random.PRNGKey(2), (rows, prompt), 0, model.config.vocab_size - 1)

    def call(seed):
        out = generate(model, params, ids, max_new_tokens=new, key=jax.random.PRNGKey(seed), lora=lora,
                       eos_ids=())
        return np.asarray(out)

    t0 = time.perf_counter()
    call(0)
    first = time.perf_counter() - t0
    times = []
    for seed in (1, 2, 3):
        t0 = time.perf_counter()
        call(seed)
        times.append(time.perf_counter() - t0)
    steady = sorted(times)[1]
    return {"rows": rows, "prompt_tokens": prompt, "new_tokens": new, "lora_rank": rank,
            "first_call_s": round(first, 2), "steady_s": round(steady, 4),
            "tokens_per_s": round(rows * new / steady, 1),
            "memory_stats": jax.devices()[0].memory_stats() or {}}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--updates", type=int, default=6)
    ap.add_argument("--small", action="store_true")
    ap.add_argument("--set", action="append", default=[], help="further config overrides")
    args = ap.parse_args()
    # This process must not hold the accelerator while `jaxrl train` runs in its child: a JAX
    # client takes 75% of a GPU's memory when it starts, which left the training process a
    # quarter of the H200 (it failed loading its executable: CUDA_ERROR_OUT_OF_MEMORY). So the
    # weights are made on the CPU, and device memory is taken on demand here (generation()).
    os.environ["XLA_PYTHON_CLIENT_PREALLOCATE"] = "false"
    work = tempfile.mkdtemp()
    model, run = os.path.join(work, "model"), os.path.join(work, "run")
    t0 = time.perf_counter()
    make_model(model, args.small)
    make_rows(work)
    made = time.perf_counter() - t0
    sets = [f"env.tokenizer.path={model}", f"grpo.model.path={model}", f"env.text.train={work}/train.jsonl",
            f"env.text.held_out={work}/test.jsonl", f"grpo.num_updates={args.updates}", "train.updates_per_chunk=2",
            "train.checkpoint_every=0", "train.progress=false", "grpo.eval_episodes=16", *args.set]
    argv = ["jaxrl", "train", os.path.join(ROOT, "configs", "grpo_qwen2.5_0.5b_gsm8k.yaml"), "--out", run]
    for s in sets:
        argv += ["--set", s]
    cmd = [sys.executable, "-c", TRAIN_AND_PEAK, json.dumps(argv)]
    t0 = time.perf_counter()
    child_env = {k: v for k, v in os.environ.items() if k != "XLA_PYTHON_CLIENT_PREALLOCATE"}
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=child_env)
    whole = time.perf_counter() - t0
    noise = ("Source Location", "external/xla", "cuda_timer.cc", "Failed to allocate device memory")
    err = [ln for ln in proc.stderr.splitlines() if ln.strip() and not any(n in ln for n in noise)]
    print("\n".join(ln for ln in proc.stdout.splitlines() if not ln.startswith("PEAK "))[-4000:])
    print("\n".join(err)[-3000:])
    peaks = [json.loads(ln[len("PEAK "):]) for ln in proc.stdout.splitlines() if ln.startswith("PEAK ")]
    if proc.returncode != 0:
        sys.exit(f"jaxrl train failed (exit {proc.returncode}); nothing recorded")
    records = [json.loads(line) for line in open(os.path.join(run, "metrics.jsonl"))]
    walls = sorted({r["wall_time"] for r in records})
    steady = [(b - a) / 2 for a, b in zip(walls, walls[1:])]
    import jax

    from bench import common

    result = {
        "model": "Qwen2.5-0.5B shapes, random bf16 weights" if not args.small else "2-layer hidden-64 stand-in",
        "config": "configs/grpo_qwen2.5_0.5b_gsm8k.yaml (paths, num_updates, eval_episodes 16 overridden)",
        "sequences_per_update": 128, "completion_tokens": 320, "updates": len(records),
        "first_chunk_s_compile_and_2_updates": walls[0], "steady_s_per_update": steady,
        "device_memory_stats_after_training": peaks[-1] if peaks else None,
        "generation": generation(model, args.small),
        "overrides": args.set, "xla_flags": os.environ.get("XLA_FLAGS", ""), "whole_process_s": round(whole, 1), "model_and_rows_made_s": round(made, 1), "returncode": proc.returncode,
        "device": str(jax.devices()[0]), "machine": common.machine_info(),
    }
    name = "lm_gsm8k_recipe" + ("_small" if args.small else "")
    os.makedirs(os.path.join(HERE, "results"), exist_ok=True)
    with open(os.path.join(HERE, "results", name + ".json"), "w") as f:
        json.dump(result, f, indent=2)
    print(json.dumps({k: v for k, v in result.items() if k != "machine"}, indent=2))


if __name__ == "__main__":
    main()
