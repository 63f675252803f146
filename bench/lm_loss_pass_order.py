"""What each memory saving of the loss pass costs: the order ``micro_batches: auto`` tries them in.

    python bench/lm_loss_pass_order.py [--shape small|medium] [--new-tokens 128] [--repeats 5]

One minibatch gradient of LoRA GRPO (``grpo.update._micro_grads``: the loss pass's forward and
backward, accumulated over the micro-batches) on a Qwen2-style decoder with random weights
(``bench/lm_memory_grid.py``'s shapes, no file read), 4 prompts x 4 samples, 32 prompt + 128 new
tokens (``--new-tokens``), one batch collected once. For each loss pass the automatic plan can choose (remat
off/on, LM head whole/in chunks of 64, 1/2/4 micro-batches) the gradient is compiled ahead of
time and timed, interleaved (CPU time of this process and wall, medians after a warm-up), beside
XLA's memory figure (argument + output + temporary - aliased bytes) and the estimate.

Results: ``bench/results/lm_loss_pass_order.json`` and ``.md``.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import os
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)

from bench import common  # noqa: E402
from bench import lm_memory  # noqa: E402
from bench.lm_memory_grid import SHAPES, hf_config  # noqa: E402

RESULTS = os.path.join(HERE, "results", "lm_loss_pass_order")
#: (remat, head chunk, micro-batches): the plan's options, in the order it tries them.
OPTIONS = ((False, 0, 1), (False, 64, 1), (True, 0, 1), (True, 64, 1), (False, 0, 2), (False, 0, 4), (True, 64, 4))


def setups(shape: str, new_tokens: int, prompts=4, samples=4, prompt_len=32, rank=16):
    """``{option: Setup}`` of every option over one model and weights, and that model's config."""
    import jax
    import jax.numpy as jnp

    from jaxrl.algos import grpo
    from jaxrl.algos.common.lm.policy import LMSpec, lm_policy
    from jaxrl.algos.grpo import update as U
    from jaxrl.models import lm
    from jaxrl.models.lm.config import LMConfig

    c = LMConfig.from_hf(hf_config(*SHAPES[shape]))
    model = lm.LM(c, dtype=jnp.float32, pad_id=c.vocab_size - 3, eos_ids=(c.vocab_size - 1,))
    weights = lm_memory.random_params(c, jnp.float32, jax.random.PRNGKey(0))
    lm_memory.PAD, lm_memory.EOS = c.vocab_size - 3, c.vocab_size - 1
    task = lm_memory.task_cls(c.vocab_size, prompt_len, new_tokens)
    base = grpo.GRPOConfig(
        num_prompts=prompts, group_size=samples, num_minibatches=1, eval_episodes=4,
        model=grpo.config.ModelConfig(policy="hf", path="<in memory>", lora=grpo.config.LoRASection(rank=rank, alpha=16.0)),
        loss=grpo.config.LossConfig(type="grpo", beta=0.0), optim=grpo.config.GRPOOptim(lr=1e-5))
    out = {}
    for remat, chunk, micro in OPTIONS:
        cfg = dataclasses.replace(base, micro_batches=micro,
                                  model=dataclasses.replace(base.model, remat=remat, head_chunk=chunk))
        spec = LMSpec(model, lm.LoRAConfig(rank, 16.0), task.pad_id, task.prompt_len, task.dialogue_len, chunk, remat)
        policy, params = lm_policy(spec, weights), task.default_params
        out[(remat, chunk, micro)] = U.Setup(cfg, task, params, params, policy, grpo.rollout_length(task, params, cfg),
                                             U.make_optimizer(cfg), U.schedule(cfg), None, U.shared_prefix_group(policy, cfg))
    return out, c, task


def main(args) -> None:
    import jax
    import numpy as np

    from jaxrl.algos import grpo
    from jaxrl.algos.grpo import update as U

    load_before = os.getloadavg()[0]
    by_option, c, task = setups(args.shape, args.new_tokens)
    first = by_option[OPTIONS[0]]
    state = U.init(first, jax.random.PRNGKey(0))
    _, batch, _ = jax.jit(functools.partial(U.collect, first))(state, jax.random.PRNGKey(1))
    adv = np.where(np.arange(batch.advantages.shape[0]) % 2 == 0, 1.0, -1.0).astype(np.float32)
    batch = batch.replace(advantages=adv)  # signed: every row carries a gradient
    runs, points = {}, []
    for option, setup in by_option.items():
        fn = jax.jit(functools.partial(U._micro_grads, setup))
        compiled, compile_s = common.compile_fn(fn, state.hyper, state.frozen, state.params, batch)
        runs[option] = functools.partial(compiled, state.hyper, state.frozen, state.params, batch)
        remat, chunk, micro = option
        est = grpo._memory(c, setup.cfg, task.dialogue_len, 1, 1, "tp", remat=remat, head_chunk=chunk,
                           micro_batches=micro, prompt_len=task.prompt_len)
        points.append({"remat": remat, "head_chunk": chunk, "micro_batches": micro, "compile_s": compile_s,
                       "xla": lm_memory.analysis(compiled), "estimate_total": est.total,
                       "estimate_activations": est.activations})
    timed = common.time_interleaved({str(k): v for k, v in runs.items()}, repeats=args.repeats)
    for p, option in zip(points, by_option):
        p["cpu_s"] = statistics.median(timed.cpu[str(option)])
        p["wall_s"] = statistics.median(timed.wall[str(option)])
    meta = common.metadata({"load_before": load_before, "load_after": os.getloadavg()[0], "git": common.git_rev(),
                            "shape": args.shape, "new_tokens": args.new_tokens, "repeats": args.repeats},
                           libraries=("jax", "jaxlib", "numpy", "flax", "optax"))
    common.write_record(RESULTS, {"meta": meta, "points": points}, write_markdown)


def write_markdown(record: dict, path: str) -> None:
    m, points = record["meta"], record["points"]
    base = points[0]
    lines = [
        "# What each memory saving of the loss pass costs",
        "",
        common.measured(m, m["machine"].get("jax_backend", "")),
        "",
        f"Command: `{m['command']}`. Shape `{m['shape']}` (hidden, layers, vocabulary, MLP, heads: "
        f"{', '.join(map(str, SHAPES[m['shape']]))}), LoRA rank 16, float32, 4 prompts x 4 samples, 32 prompt + {m['new_tokens']} "
        f"new tokens; one minibatch gradient (`grpo.update._micro_grads`), medians of {m['repeats']} interleaved calls.",
        "",
        "| remat | LM head | micro-batches | CPU s | x first | wall s | XLA MiB | x first | estimate MiB |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for p in points:
        xla, xla0 = p["xla"].get("peak_estimate", 0), base["xla"].get("peak_estimate", 0)
        lines.append(f"| {'on' if p['remat'] else 'off'} | {p['head_chunk'] or 'whole'} | {p['micro_batches']} | "
                     f"{p['cpu_s']:.3f} | {p['cpu_s'] / base['cpu_s']:.2f} | {p['wall_s']:.3f} | "
                     f"{xla / 2**20:,.1f} | {xla / xla0 if xla0 else float('nan'):.2f} | {p['estimate_total'] / 2**20:,.1f} |")
    lines += ["", "Rows in the order `micro_batches: auto` tries them (each micro-batch count after every remat and "
              "head-chunk option of the count before; `jaxrl.models.lm.memory.plan_loss_pass`)."]
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--shape", default="small", choices=sorted(SHAPES))
    p.add_argument("--new-tokens", type=int, default=128)
    p.add_argument("--repeats", type=int, default=5)
    return p.parse_args(argv)


if __name__ == "__main__":
    main(parse_args())
