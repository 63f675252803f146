"""Generation throughput of the tiny transformer (KV-cache decoding + env steps + verifier)
against batch size.

    python bench/grpo_generation_throughput.py [--digits 8] [--sizes 1 8 64 256 1024 4096]

For each batch size B the jitted ``jaxrl.algos.grpo.group_rollout`` generates B completions
of ``T = digits + 1`` tokens (temperature sampling, every step's env transition and the
final verifier score included); tokens/s = B * T / time. The result depends on every
output (the returns and log-probs are summed). Compile time is reported apart; the figure
is the best of ``--reps`` timed calls after a warm-up.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
import time

import jax
import jax.numpy as jnp

from jaxrl.algos import grpo
from jaxrl.algos.contract import EnvSetup
from jaxrl.algos.grpo import rollout as rollout_lib
from jaxrl.algos.grpo import update as update_lib
from jaxrl_envs.text import Reverse

RESULTS = os.path.join(os.path.dirname(__file__), "results")


def generate(setup, params, key, size):
    keys = jax.random.split(key, size)
    ro = rollout_lib.group_rollout(setup.policy, setup.env, setup.env_params, params, keys, key, setup.num_steps, jnp.float32(1.0))
    return jnp.sum(ro.returns) + jnp.sum(ro.logp) + jnp.sum(ro.actions)


def main(argv=None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--digits", type=int, default=8)
    p.add_argument("--sizes", type=int, nargs="+", default=[1, 8, 64, 256, 1024, 4096])
    p.add_argument("--reps", type=int, default=5)
    args = p.parse_args(argv)
    env = Reverse(max_digits=args.digits)
    setup = grpo.make_setup(EnvSetup(env, env.default_params, env.default_params), grpo.GRPOConfig())
    params = update_lib.init(setup, jax.random.PRNGKey(0)).params
    rows = []
    for size in args.sizes:
        fn = jax.jit(functools.partial(generate, setup), static_argnums=2)
        t = time.perf_counter()
        jax.block_until_ready(fn(params, jax.random.PRNGKey(0), size))
        compile_s = time.perf_counter() - t
        best = float("inf")
        for r in range(args.reps):
            t = time.perf_counter()
            jax.block_until_ready(fn(params, jax.random.PRNGKey(r + 1), size))
            best = min(best, time.perf_counter() - t)
        tokens = size * setup.num_steps
        rows.append({"batch": size, "tokens": tokens, "best_s": round(best, 5), "tokens_per_s": round(tokens / best), "compile_s": round(compile_s, 2)})
        print(rows[-1], flush=True)
    result = {
        "task": f"reverse-{args.digits}", "model": "TransformerLM d64 x2 layers x4 heads (~106k params)",
        "rows": rows, "timing": f"best of {args.reps} after warm-up", "load_avg_1m": os.getloadavg()[0],
        "jax": jax.__version__, "cpu_count": os.cpu_count(), "command": " ".join(["python"] + sys.argv),
    }
    os.makedirs(RESULTS, exist_ok=True)
    with open(os.path.join(RESULTS, "grpo_generation_throughput.json"), "w") as f:
        json.dump(result, f, indent=1)
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(5, 3.5))
        ax.loglog([r["batch"] for r in rows], [r["tokens_per_s"] for r in rows], "o-")
        ax.set_xlabel("batch size (sequences)")
        ax.set_ylabel("generated tokens / s")
        ax.set_title(f"GRPO generation, {result['task']}, CPU")
        fig.tight_layout()
        fig.savefig(os.path.join(RESULTS, "grpo_generation_throughput.png"), dpi=100)
    except Exception as exc:  # the plot is a convenience; the JSON is the record
        print(f"plot skipped: {exc}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
