"""The memory estimate against XLA's figure on 1 and 2 devices, through ``jaxrl train``'s own path.

    python bench/lm_memory_devices.py

``bench/lm_memory_grid.py`` compiles one update on one device. Here each point is a shipped
GRPO config (with overrides), built as ``jaxrl train`` builds it (``run.build``,
``run.program.make_layout``: with ``devices: 2`` the prompt groups are split over a ``data``
axis, with ``mesh.model: 2`` the weights over a ``model`` axis), one update compiled as the
run's chunk (state donated, sharded), nothing run. XLA's figure is the compiled program's
argument + output + temporary - aliased bytes, which for a partitioned program are one
device's; the estimate is the program's own per-device figure
(``program.lm.model_params.estimate(data, model, strategy)``, the one the memory guard and the
loss-pass plan use). Two host devices are forced on the CPU
(``--xla_force_host_platform_device_count=2``). Results: ``bench/results/lm_memory_devices.json``
and ``.md``.
"""

from __future__ import annotations

import os
import sys

os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=2").strip()

import time  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)

from bench import common  # noqa: E402

RESULTS = os.path.join(HERE, "results", "lm_memory_devices")
REVERSE = ["env.params.num_digits=8", "grpo.num_prompts=8", "grpo.group_size=8"]
WORDS = ["grpo.num_prompts=8", "grpo.group_size=8"]
GRID = [  # (label, config, overrides)
    ("LoRA r8, f32", "configs/grpo_lm_reverse.yaml", REVERSE),
    ("LoRA r8, f32", "configs/grpo_lm_reverse.yaml", REVERSE + ["grpo.micro_batches=4"]),
    ("LoRA r8, bf16", "configs/grpo_lm_reverse.yaml", REVERSE + ["grpo.model.dtype=bfloat16"]),
    ("full, f32", "configs/grpo_word_problems.yaml", WORDS),
    ("full, f32", "configs/grpo_word_problems.yaml", WORDS + ["grpo.micro_batches=4"]),
    ("full, f32", "configs/grpo_word_problems.yaml", WORDS + ["grpo.model.remat=true"]),
]
LAYOUTS = [("1 device", ["devices=1"]), ("2 devices, data", ["devices=2"]),
           ("2 devices, model (tp)", ["devices=2", "mesh.model=2"])]


def point(path: str, overrides: list[str]) -> dict:
    import jax

    from jaxrl.parallel import sharding
    from jaxrl.run.build import build, seed_keys
    from jaxrl.run.config import load_config
    from jaxrl.run.guards import compiled_bytes
    from jaxrl.run.program import chunk_args, compile_chunk, make_chunk, make_layout

    cfg = load_config(os.path.join(ROOT, path), overrides + ["train.seeds=1", "train.checkpoint_every=0"])
    built = build(cfg)
    keys = seed_keys(cfg.train.seed, cfg.train.seeds)
    layout = make_layout(cfg, built, keys)
    chunk = make_chunk(built.program.update, 1, layout)
    t0 = time.perf_counter()
    compiled = compile_chunk(chunk, *chunk_args(built, keys, layout), layout)
    compile_s = time.perf_counter() - t0
    xla = sum(compiled_bytes(compiled))  # what the run's memory guard reads
    m = compiled.memory_analysis()
    n_dev = sharding.mesh_size(layout.mesh)
    model = cfg.mesh.model
    est = built.program.lm.model_params.estimate(max(1, n_dev // model), model, cfg.mesh.strategy)
    a = cfg.algo_config
    return {"config": path, "overrides": overrides, "devices": n_dev, "mesh_model": model, "layout": layout.mode,
            "batch": f"{a.num_prompts} x {a.group_size}", "micro_batches": a.micro_batches,
            "dtype": a.model.dtype, "lora_rank": a.model.lora.rank, "xla_per_device": xla,
            "xla_parts": {"argument": int(m.argument_size_in_bytes), "output": int(m.output_size_in_bytes),
                          "temp": int(m.temp_size_in_bytes), "alias": int(m.alias_size_in_bytes)},
            "estimate_per_device": est.total, "estimate_parts": est.parts(), "ratio": est.total / xla,
            "compile_s": round(compile_s, 2)}


def write_markdown(record: dict, path: str) -> None:
    m = record["meta"]
    lines = [
        "# The memory estimate against XLA's figure on 1 and 2 devices (jaxrl train's own build)", "",
        common.measured(m, "two forced XLA host devices"), "", "Command: `python3 bench/lm_memory_devices.py`", "",
        "| point | config overrides | layout | XLA per device (MiB) | estimate per device (MiB) | estimate / XLA |",
        "|---|---|---|---|---|---|",
    ]
    for r in record["points"]:
        lines.append(f"| {r['label']} | `{' '.join(r['overrides'])}` | {r['layout_label']} | "
                     f"{r['xla_per_device'] / 2**20:,.1f} | {r['estimate_per_device'] / 2**20:,.1f} | "
                     f"**{r['ratio']:.2f}** |")
    ratios = [r["ratio"] for r in record["points"]]
    lines += ["", f"Range of estimate / XLA: {min(ratios):.2f} to {max(ratios):.2f} over {len(ratios)} points.", "",
              *record["notes"]]
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


NOTES = [
    "- `configs/grpo_lm_reverse.yaml`: the 2-layer hidden-64 Qwen2 test fixture with LoRA rank 8, Reverse with 8 "
    "digits; `configs/grpo_word_problems.yaml`: the 0.89M-parameter CPU text model, full fine-tuning. Both at "
    "8 prompts x 8 samples, one seed, one update per chunk.",
    "- XLA's figure: argument + output + temporary - aliased bytes of the compiled chunk (for a program partitioned "
    "over the mesh: one device's). The estimate: the program's per-device figure, as the memory guard uses it.",
]


def main() -> None:
    load_before = os.getloadavg()[0]
    git = common.git_rev()
    points = []
    for label, path, overrides in GRID:
        for layout_label, extra in LAYOUTS:
            try:
                r = point(path, overrides + extra)
            except Exception as exc:  # noqa: BLE001 -- a layout a config cannot take is recorded, not fatal
                print(f"{label} {overrides} {layout_label}: {type(exc).__name__}: {exc}", flush=True)
                continue
            r.update(label=label, layout_label=layout_label)
            print(f"{label} {' '.join(overrides)} [{layout_label}]: XLA {r['xla_per_device'] / 2**20:,.1f} MiB, "
                  f"estimate {r['estimate_per_device'] / 2**20:,.1f} MiB, ratio {r['ratio']:.2f}", flush=True)
            points.append(r)
            meta = common.metadata({"load_before": load_before, "load_after": os.getloadavg()[0], "git": git},
                                   libraries=("jax", "jaxlib", "numpy", "flax", "optax"))
            common.write_record(RESULTS, {"meta": meta, "points": points, "notes": NOTES}, write_markdown)


if __name__ == "__main__":
    main()
