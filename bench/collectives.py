"""Latency of one all-reduce: a flat vector against the same numbers as a tuple of pieces.

    python bench/collectives.py                 # forced CPU host devices 2 and 4
    python bench/collectives.py --real          # the machine's own devices (e.g. GPUs)

Why it exists: GSPMD all-reduces a gradient as a *tuple* (one piece per kernel and bias),
and XLA's CPU collectives pay a rendezvous per tuple element. This measures the gap that
made ``jaxrl.algos.common.batching.batch_mean`` all-reduce one flat vector instead (the pieces are the
17 gradient/metric pieces of the two-layer actor-critic in ``bench/scaling.py``'s PPO).

Each program is ``K`` all-reduces in a ``lax.scan`` (the carry feeds the next one, so none
can be dropped or merged), under ``shard_map`` over the first ``n`` devices; the compile is
apart, the steady state is the best of the repeats. Writes ``bench/results/collectives.*``
(forced host devices) or ``collectives_real.*`` (``--real``), one current record each.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import common  # noqa: E402

K = 200  # all-reduces per call
#: The pieces of a two-layer (64, 64) actor-critic's CartPole gradient and 5 metrics.
PIECES = [(64,), (64, 4), (64,), (64, 64), (64,), (64, 4), (64,), (64, 64), (2,), (2, 64), (1,), (1, 64)] + [()] * 5


def worker(devices: list[int], repeats: int) -> list[dict]:
    import math

    import jax
    import jax.numpy as jnp
    from jax.sharding import PartitionSpec

    from jaxrl.parallel import sharding

    size = sum(math.prod(s) for s in PIECES)
    records = []
    for n in devices:
        mesh = sharding.make_mesh(n)

        def flat(x):
            def body(c, _):
                return jax.lax.psum(c * 1.0001, sharding.DATA) / n, None
            return jax.lax.scan(body, x, None, length=K)[0]

        def pieces(xs):
            def body(c, _):
                return tuple(jax.lax.psum(v * 1.0001, sharding.DATA) / n for v in c), None
            return jax.lax.scan(body, xs, None, length=K)[0]

        for kind, fn, arg in (("flat", flat, jnp.ones((size,))), ("tuple", pieces, tuple(jnp.ones(s) for s in PIECES))):
            prog = jax.jit(jax.shard_map(fn, mesh=mesh, in_specs=PartitionSpec(), out_specs=PartitionSpec(),
                                         check_vma=False))
            compiled, compile_s = common.compile_fn(prog, arg)
            times = common.time_repeats(compiled, arg, repeats=repeats)
            records.append({"devices": n, "kind": kind, "pieces": 1 if kind == "flat" else len(PIECES),
                            "floats": size, "us_per_all_reduce": min(times) / K * 1e6,
                            "us_per_all_reduce_median": sorted(times)[len(times) // 2] / K * 1e6,
                            "compile_s": round(compile_s, 3)})
    return records


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--devices", type=int, nargs="+", default=[2, 4])
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--real", action="store_true", help="use the machine's real devices")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        print(json.dumps(worker(args.devices, args.repeats)))
        return 0
    env = dict(os.environ)
    if not args.real:
        env["XLA_FLAGS"] = f"{env.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count={max(args.devices)}".strip()
        env["JAX_PLATFORMS"] = "cpu"
    cmd = [sys.executable, __file__, "--worker", "--repeats", str(args.repeats), "--devices", *map(str, args.devices)]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if proc.returncode:
        raise RuntimeError(f"worker failed:\n{proc.stderr[-3000:]}")
    records = json.loads(proc.stdout.strip().splitlines()[-1])
    meta = common.metadata({"forced_host_devices": not args.real, "all_reduces_per_call": K})
    paths = common.write_results("collectives_real" if args.real else "collectives", records, meta)
    for r in records:
        print(f"{r['devices']} devices  {r['kind']:5s} ({r['pieces']:2d} pieces, {r['floats']} floats): "
              f"{r['us_per_all_reduce']:8.1f} us per all-reduce")
    print("wrote", *paths.values())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
