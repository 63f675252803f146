"""One decode step's draw of a token: Gumbel-max (``jax.random.categorical``'s) against
inversion (:func:`jaxrl.core.prng.inverse_cdf`, GRPO's sampler since 0.9.0), and against
Gumbel-max with JAX's own CPU lowering of the Threefry hash (a 5-trip loop).

    python bench/lm_sampler.py [--repeats 200]

Shapes: the tiny checkpoint's batch (32 rows x 1,000 tokens) and Qwen2.5's vocabulary
(16 rows x 151,936). Each side is its own jitted program of ``(key, logits) -> token``
compiled ahead (compile time apart), called ``--repeats`` times on fresh keys, every token
read back; the figure is the median per call, in wall and process CPU microseconds, on the
machine's default threads and pinned to one core (``taskset`` is applied by re-running this
script under it when ``--one-core`` is given). Results: ``bench/results/lm_sampler.{json,md}``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from bench import common  # noqa: E402

SHAPES = ((32, 1000), (16, 151936))


def measure(repeats: int) -> list[dict]:
    import jax
    import jax.numpy as jnp

    from jaxrl.core import prng

    sides = {
        "gumbel_max (jax.random.gumbel, JAX's CPU lowering)": lambda k, l: jnp.argmax(l + jax.random.gumbel(k, l.shape), -1),
        "gumbel_max (prng, Threefry written out)": prng.gumbel_max,
        "inverse_cdf (prng)": prng.inverse_cdf,
    }
    rows = []
    for shape in SHAPES:
        logits = jax.random.normal(jax.random.PRNGKey(0), shape) * 3
        keys = jax.random.split(jax.random.PRNGKey(1), repeats + 1)
        for name, fn in sides.items():
            t0 = time.perf_counter()
            compiled = jax.jit(fn).lower(keys[0], logits).compile()
            compile_s = time.perf_counter() - t0
            jax.block_until_ready(compiled(keys[0], logits))
            wall, cpu = [], []
            for k in keys[1:]:
                w0, c0 = time.perf_counter(), time.process_time()
                int(compiled(k, logits)[0])  # read back
                wall.append(time.perf_counter() - w0)
                cpu.append(time.process_time() - c0)
            rows.append({"shape": list(shape), "side": name, "compile_s": compile_s,
                         "wall_us": 1e6 * statistics.median(wall), "cpu_us": 1e6 * statistics.median(cpu)})
    return rows


def write_markdown(record: dict, path: str) -> None:
    lines = ["# One token draw per decode step: Gumbel-max vs inversion", "",
             f"Measured {record['when']} on {record['machine']['cpu_model']} ({record['machine']['cpus_usable']} cores usable, "
             f"load average {record['load_before']:.1f} before, {record['load_after']:.1f} after); jax {record['versions'].get('jax')}.",
             "", f"Command: `{record['command']}`", "",
             "| rows x vocabulary | sampler | threads | wall us (median) | CPU us (median) | compile s |", "|---|---|---|---|---|---|"]
    for threads, rows in record["runs"].items():
        for r in rows:
            lines.append(f"| {r['shape'][0]} x {r['shape'][1]:,} | {r['side']} | {threads} | {r['wall_us']:,.0f} | "
                         f"{r['cpu_us']:,.0f} | {r['compile_s']:.2f} |")
    lines += ["", "Each side is `(key, logits) -> token` jitted alone, compiled ahead; every token read back; "
              f"{record['repeats']} calls on fresh keys. In a decode step the softmax the log-probs need is shared "
              "with inversion's (GRPO's `sample` makes `exp(log_softmax)` once), so inversion's figure here is an upper bound "
              "of what it adds to a step.", ""]
    with open(path, "w") as f:
        f.write("\n".join(lines))


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=200)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(measure(args.repeats)))
        return
    load_before = os.getloadavg()[0]
    runs = common.child_runs(__file__, ["--repeats", str(args.repeats)], common.ONE_CORE_AND_DEFAULT[::-1])
    record = {"when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "machine": common.machine_info(),
              "versions": common.library_versions(), "command": common.command_line(), "repeats": args.repeats,
              "load_before": load_before, "load_after": os.getloadavg()[0], "runs": runs}
    base = os.path.join(HERE, "results", "lm_sampler")
    with open(base + ".json", "w") as f:
        json.dump(record, f, indent=1)
    write_markdown(record, base + ".md")
    print(open(base + ".md").read())


if __name__ == "__main__":
    main()
