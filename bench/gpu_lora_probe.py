"""Which formulation of the LoRA adapters, and which XLA options, compile on this GPU.

    python bench/gpu_lora_probe.py [--layers 2] [--parallel 4] [--out DIR]

The GSM8K recipe's LoRA backward failed XLA's GPU GEMM autotuning on the lent GPUs
(``bench/results/lm_gsm8k_recipe_gpu.md``). This compiles the failing computation in
isolation: the loss pass's forward and backward (``LM.hidden`` + a scalar, gradients for the
adapters) of a Qwen2.5-0.5B-shaped decoder cut to ``--layers`` layers, LoRA rank 32 on every
projection, 32 rows of 576 tokens (the recipe's micro-batch: 18,432 tokens), bf16. Each
formulation x XLA_FLAGS case runs in its own process (flags are read when the backend
starts); each records whether it compiled, the compile seconds, the steady step seconds and
the first line of the error. ``dot`` cases compile the failing dot alone
(``bf16[18432,32] @ bf16[32,128]``, forward and backward). Writes ``gpu_lora_probe.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

FLAG_SETS = {
    "default": "",
    "no_triton_gemm": "--xla_gpu_enable_triton_gemm=false",
    "autotune_0": "--xla_gpu_autotune_level=0",
    "no_triton_no_lt": "--xla_gpu_enable_triton_gemm=false --xla_gpu_enable_cublaslt=false",
}
FORMS = ("dot", "factored", "padded64", "merged", "reduce", "f32")


def case(form: str, layers: int, rows: int, length: int, rank: int) -> dict:
    """One formulation, in this process: compile, run twice, time the second."""
    import jax
    import jax.numpy as jnp

    sys.path.insert(0, ROOT)
    from bench.lm_memory import QWEN25_05B
    from jaxrl.models.lm import LM, LMConfig, init_params
    from jaxrl.models.lm import model as model_mod
    from jaxrl.models.lm.lora import LoRAConfig, init_lora
    from jaxrl.models.lm.ops import matmul

    rec: dict = {"form": form, "xla_flags": os.environ.get("XLA_FLAGS", ""), "jax": jax.__version__,
                 "device": str(jax.devices()[0])}
    if form == "dot":
        x = jnp.ones((rows * length, rank), jnp.bfloat16)
        b = jnp.ones((rank, 128), jnp.bfloat16)
        fn = jax.jit(jax.grad(lambda x, b: jnp.sum((x @ b).astype(jnp.float32) ** 2), argnums=(0, 1)))
        args = (x, b)
    else:
        def delta(x, ab, scale):
            a, b = ab["a"], ab["b"]
            if form == "padded64":
                pad = (-a.shape[-1]) % 64
                a, b = jnp.pad(a, ((0, 0), (0, pad))), jnp.pad(b, ((0, pad), (0, 0)))
            if form == "reduce":  # the rank contraction as a broadcast multiply + sum, not a dot
                h = matmul(x.astype(a.dtype), a)
                return (scale * jnp.einsum("...r,ro->...o", h, b, preferred_element_type=jnp.float32)).astype(x.dtype)
            if form == "f32":
                h = matmul(x.astype(jnp.float32), a.astype(jnp.float32))
                return (scale * matmul(h, b.astype(jnp.float32))).astype(x.dtype)
            h = matmul(x.astype(a.dtype), a)
            return (scale * matmul(h, b)).astype(x.dtype)

        def linear(x, p, lora_p, scale):
            kernel = p["kernel"]
            if lora_p is not None and form == "merged":
                kernel = kernel + (scale * (lora_p["a"].astype(jnp.float32) @ lora_p["b"].astype(jnp.float32))).astype(kernel.dtype)
            y = matmul(x, kernel)
            if "bias" in p:
                y = y + p["bias"]
            if lora_p is not None and form != "merged":
                y = y + delta(x, lora_p, scale)
            return y

        model_mod._linear = linear
        hf = dict(QWEN25_05B, num_hidden_layers=layers, max_window_layers=layers)
        config = LMConfig.from_hf(hf)
        model = LM(config, jnp.bfloat16, 151643, (151645,))
        params = init_params(config, jax.random.PRNGKey(0), jnp.bfloat16)
        lora = init_lora(jax.random.PRNGKey(1), model, LoRAConfig(rank=rank, alpha=2.0 * rank), jnp.bfloat16)
        ids = jax.random.randint(jax.random.PRNGKey(2), (rows, length), 0, 151000)
        mask = jnp.ones((rows, length), bool)

        def loss(lora, params, ids, mask):
            h = model.hidden(params, ids, mask, lora=lora, remat=True)
            return jnp.mean(h.astype(jnp.float32) ** 2)

        fn = jax.jit(jax.grad(loss))
        args = (lora, params, ids, mask)
    t0 = time.perf_counter()
    try:
        compiled = fn.lower(*args).compile()
    except Exception as exc:  # noqa: BLE001 -- the point is to record it
        rec.update(ok=False, compile_s=round(time.perf_counter() - t0, 2), error=type(exc).__name__ + ": " + str(exc)[:1500])
        return rec
    rec.update(ok=True, compile_s=round(time.perf_counter() - t0, 2))
    jax.block_until_ready(compiled(*args))
    t0 = time.perf_counter()
    jax.block_until_ready(compiled(*args))
    rec["step_s"] = round(time.perf_counter() - t0, 5)
    return rec


def run_case(form: str, flags: str, args) -> dict:
    env = dict(os.environ, XLA_FLAGS=flags, XLA_PYTHON_CLIENT_MEM_FRACTION=str(round(0.9 / args.parallel, 3)),
               PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    cmd = [sys.executable, __file__, "--one", form, "--layers", str(args.layers)]
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=args.timeout)
    except subprocess.TimeoutExpired:
        return {"form": form, "xla_flags": flags, "ok": False, "error": f"timeout after {args.timeout} s"}
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if not lines:
        return {"form": form, "xla_flags": flags, "ok": False, "returncode": proc.returncode,
                "error": (proc.stderr or proc.stdout)[-1500:], "wall_s": round(time.perf_counter() - t0, 1)}
    rec = json.loads(lines[-1])
    rec["wall_s"] = round(time.perf_counter() - t0, 1)
    return rec


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--one", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--parallel", type=int, default=4)
    ap.add_argument("--timeout", type=int, default=240)
    ap.add_argument("--forms", default=",".join(FORMS))
    ap.add_argument("--flags", default=",".join(FLAG_SETS))
    ap.add_argument("--out", default=os.path.join(HERE, "results"))
    args = ap.parse_args()
    if args.one:
        print(json.dumps(case(args.one, args.layers, 32, 576, 32)), flush=True)
        return
    todo = [(f, FLAG_SETS[k]) for k in args.flags.split(",") for f in args.forms.split(",")]
    with ThreadPoolExecutor(args.parallel) as pool:
        results = list(pool.map(lambda t: run_case(*t, args), todo))
    for r in results:
        print(f"{r['form']:>9} {r.get('xla_flags') or '(none)':<70} ok={r['ok']} compile={r.get('compile_s')} "
              f"step={r.get('step_s')} {('' if r['ok'] else r.get('error', '')[:300])}", flush=True)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "gpu_lora_probe.json"), "w") as f:
        json.dump({"layers": args.layers, "rows": 32, "length": 576, "rank": 32, "cases": results}, f, indent=2)


if __name__ == "__main__":
    main()
