"""Asynchronous GRPO: updates/s with the next batch's generation overlapped with the update, vs synchronous.

    python bench/grpo_async_overlap.py [--repeats 5] [--updates-per-chunk 5] [--set KEY=VALUE ...]

Two forced XLA host devices (``--xla_force_host_platform_device_count=2``, set here before JAX
starts). The reverse recipe (``configs/grpo_reverse.yaml``: Reverse-8, a one-layer transformer,
32 prompts x 8 generations, DAPO, beta 0.04) at staleness 1 with TIS, the same batch on every
side, compiled through the trainer's own pieces (``jaxrl.run.program``: layout, chunk, compile):

- ``sync, 1 device``: generation, then the update (``devices: 1``);
- ``sync, 1 device, 1 core``: the same, with every thread of the process held on one core
  while it runs (``os.sched_setaffinity`` per thread): XLA:CPU runs every device on one
  thread pool sized to the machine, so this is how one device gets one core, the issue's
  one-device-per-core baseline;
- ``sync, 2 devices``: the same, each batch split over the two devices (``devices: 2``: the
  data-parallel split of ``docs/scale_out.md``);
- ``overlap, 2 devices``: ``grpo.off_policy.overlap: true``, generation of update t + 1 on one
  device while update t learns on the other, inside one compiled step;
- ``overlap, 1 device``: the overlapped schedule with its halves one after the other (the cost
  of the schedule alone).

Each side's chunk (``--updates-per-chunk`` updates in one ``lax.scan``) is compiled first (the
seconds recorded apart), then timed interleaved with the others (``bench.common.time_interleaved``:
a warm-up round, then ``--repeats`` rounds of one chunk per side, so load from other processes
hits every side alike), every output (the donated state fed back in, the metrics, the NaN
flag) blocked on. Updates/s = updates per chunk / the chunk's wall seconds, best and median.
Every side runs the same number of updates from the same seed; the record holds the largest
difference of the final parameters and of the logged rewards between the sides. Then the two
halves of an update (generation; shaping and learning) are timed alone on one device: their
sum over the longer is the most overlap can gain. Results:
``bench/results/grpo_async_overlap.json`` and ``.md``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import time

os.environ["XLA_FLAGS"] = os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=2"
os.environ.setdefault("JAX_PLATFORMS", "cpu")

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from bench import common  # noqa: E402

RESULTS = os.path.join(HERE, "results", "grpo_async_overlap")
CONFIG = os.path.join(ROOT, "configs", "grpo_reverse.yaml")
#: (name, devices, overlap, pinned: every thread of the process on one core while the side runs)
SIDES = [("sync, 1 device", 1, False, False), ("sync, 1 device, 1 core", 1, False, True),
         ("sync, 2 devices", 2, False, False), ("overlap, 2 devices", 2, True, False),
         ("overlap, 1 device", 1, True, False)]


def pin_threads(cpus: set[int]) -> None:
    """Every thread of this process (XLA's pool included) allowed on ``cpus`` only."""
    for task in os.listdir(f"/proc/{os.getpid()}/task"):
        try:
            os.sched_setaffinity(int(task), cpus)
        except OSError:  # a thread that ended meanwhile
            pass


@contextlib.contextmanager
def held_to(cpus: set[int] | None):
    """Every thread of this process on ``cpus`` inside the block (None: left as they are)."""
    if cpus is None:
        yield
        return
    everywhere = os.sched_getaffinity(0)
    pin_threads(cpus)
    try:
        yield
    finally:
        pin_threads(everywhere)


class Side:
    """One configuration's compiled chunk and its live state (fed back in after every call).
    ``one_core``: each call runs with the whole process on one core (XLA:CPU has no thread
    pool per device, so this is how a device gets one core of its own)."""

    def __init__(self, devices: int, overlap: bool, updates_per_chunk: int, sets: list[str], one_core: bool = False):
        from jaxrl.parallel import sharding
        from jaxrl.run import build as build_lib, config as config_lib, program

        cfg = config_lib.load_config(CONFIG, [
            "grpo.off_policy.staleness=1", "grpo.off_policy.correction=tis", f"grpo.off_policy.overlap={str(overlap).lower()}",
            f"devices={devices}", "shard=envs", f"train.updates_per_chunk={updates_per_chunk}", "train.stop_at=null",
            "train.progress=false", *sets])
        built = build_lib.build(cfg)
        keys = build_lib.seed_keys(cfg.train.seed, cfg.train.seeds)
        self.layout = program.make_layout(cfg, built, keys)
        chunk = program.make_chunk(built.program.update, updates_per_chunk, self.layout)
        state, n_active = program.chunk_args(built, keys, self.layout)
        t0 = time.perf_counter()
        self.compiled = program.compile_chunk(chunk, state, n_active, self.layout)
        self.compile_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        self.state = common.block(sharding.init_sharded(jax.vmap(built.program.init), self.layout)(keys))
        self.init_s = time.perf_counter() - t0
        self.n_active = jax.device_put(jnp.int32(updates_per_chunk), self.layout.replicated)
        self.rewards: list[float] = []
        self.cfg, self.built = cfg, built
        self.cores = {min(os.sched_getaffinity(0))} if one_core else None

    def __call__(self):
        with held_to(self.cores):
            self.state, metrics, finite = self.compiled(self.state, self.n_active)
            common.block((self.state, metrics, finite))
        if not bool(np.all(np.asarray(finite))):
            raise SystemExit("a NaN in the state")
        self.rewards.extend(np.asarray(metrics["reward"]).reshape(-1).tolist())
        return self.state


def halves(side: Side) -> dict:
    """The two halves of an overlapped update, each alone on one device, from ``side``'s state
    (one device, overlap: it holds a batch in flight): ``{"generation": fn, "learning": fn}``,
    each a zero-argument call of a compiled one-update program whose outputs are blocked on."""
    from jaxrl.algos import grpo
    from jaxrl.algos.grpo import update

    setup = grpo.make_setup(side.built.envs, side.cfg.algo_config)
    state = side.state
    gen = jax.jit(jax.vmap(lambda s: update.sample_pending(setup, s))).lower(state).compile()
    learn = jax.jit(jax.vmap(lambda s: update.learn(setup, s, update.shape_batch(setup, s, s.pending, s.pending_ref)))).lower(state).compile()
    return {"generation": lambda: gen(state), "learning": lambda: learn(state)}


def critical_path_bound(half: dict) -> float:
    """(g + l) / max(g, l) of the halves' median CPU seconds (less sensitive than wall seconds to
    other processes): the synchronous update's work over the overlapped one's critical path."""
    g, l = half["generation"]["cpu_median_s"], half["learning"]["cpu_median_s"]
    return (g + l) / max(g, l)


def _params(side: Side) -> np.ndarray:
    from jaxrl.parallel import sharding

    return np.concatenate([np.asarray(x).ravel() for x in jax.tree_util.tree_leaves(sharding.fetch(side.state.params))])


def main(args) -> None:
    load_before = os.getloadavg()[0]
    git = common.git_rev()
    if jax.device_count() < 2:
        raise SystemExit(f"needs 2 devices, this process has {jax.device_count()}")
    sides = {}
    for name, devices, overlap, pinned in SIDES:
        sides[name] = Side(devices, overlap, args.updates_per_chunk, args.set, one_core=pinned)
        print(f"{name}: compiled in {sides[name].compile_s:.1f} s", flush=True)
    timed = common.time_interleaved(sides, repeats=args.repeats)
    u = args.updates_per_chunk
    base = sides["sync, 1 device"]
    rows = []
    for name, devices, overlap, pinned in SIDES:
        wall, cpu = timed.wall[name], timed.cpu[name]
        s = sides[name]
        rows.append({
            "side": name, "devices": devices, "overlap": overlap, "one_core": pinned, "compile_s": round(s.compile_s, 2),
            "init_s": round(s.init_s, 2), "chunk_wall_s": [round(t, 4) for t in wall], "chunk_cpu_s": [round(t, 4) for t in cpu],
            "updates_per_s_best": u / min(wall), "updates_per_s_median": u / statistics.median(wall),
            "cpu_s_per_update_median": statistics.median(cpu) / u,
            "max_abs_param_diff_vs_sync_1_device": float(np.max(np.abs(_params(s) - _params(base)))),
            "max_abs_reward_diff_vs_sync_1_device": float(np.max(np.abs(np.asarray(s.rewards) - np.asarray(base.rewards)))),
            "updates_run": len(s.rewards),
        })
        print(rows[-1], flush=True)
    by = {r["side"]: r for r in rows}
    parts = common.time_interleaved(halves(sides["overlap, 1 device"]), repeats=args.repeats * u)
    half = {name: {"best_s": min(w), "median_s": statistics.median(w), "cpu_median_s": statistics.median(parts.cpu[name])}
            for name, w in parts.wall.items()}
    half["critical_path_bound"] = critical_path_bound(half)
    print(half, flush=True)
    speedup = {
        "overlap_2_vs_sync_1_best": by["overlap, 2 devices"]["updates_per_s_best"] / by["sync, 1 device"]["updates_per_s_best"],
        "overlap_2_vs_sync_2_best": by["overlap, 2 devices"]["updates_per_s_best"] / by["sync, 2 devices"]["updates_per_s_best"],
        "overlap_2_vs_sync_1_median": by["overlap, 2 devices"]["updates_per_s_median"] / by["sync, 1 device"]["updates_per_s_median"],
        "overlap_2_vs_sync_2_median": by["overlap, 2 devices"]["updates_per_s_median"] / by["sync, 2 devices"]["updates_per_s_median"],
        "overlap_2_vs_sync_1_core_best": by["overlap, 2 devices"]["updates_per_s_best"] / by["sync, 1 device, 1 core"]["updates_per_s_best"],
        "overlap_2_vs_sync_1_core_median": by["overlap, 2 devices"]["updates_per_s_median"] / by["sync, 1 device, 1 core"]["updates_per_s_median"],
    }
    g = base.cfg.algo_config
    meta = common.metadata({"load_before": load_before, "load_after": os.getloadavg()[0], "git": git},
                           libraries=("jax", "jaxlib", "numpy", "flax", "optax"))
    record = {"meta": meta, "batch": {"num_prompts": g.num_prompts, "group_size": g.group_size,
                                      "num_minibatches": g.num_minibatches, "staleness": 1, "correction": "tis",
                                      "sets": args.set},
              "updates_per_chunk": u, "repeats": args.repeats, "sides": rows, "speedup": speedup, "halves": half,
              "notes": args.note}
    common.write_record(RESULTS, record, write_markdown)


def write_markdown(record: dict, path: str) -> None:
    m, b, sp, h = record["meta"], record["batch"], record["speedup"], record["halves"]
    lines = ["# Asynchronous GRPO: generation overlapped with the update, updates/s", "",
             common.measured(m, "2 forced XLA host devices"), "",
             f"Command: `{m['command']}`", "",
             f"`configs/grpo_reverse.yaml` (Reverse-8, one-layer transformer, DAPO, beta 0.04) at "
             f"{b['num_prompts']} prompts x {b['group_size']} generations, {b['num_minibatches']} minibatches, staleness "
             f"{b['staleness']} with {b['correction']}{' (' + ', '.join(b['sets']) + ')' if b['sets'] else ''}; chunks of "
             f"{record['updates_per_chunk']} updates, {record['repeats']} interleaved rounds after a warm-up round.", "",
             "| side | compile s | updates/s best | updates/s median | CPU s per update (median) | max |param diff| vs sync 1 device | max |reward diff| |",
             "|---|---|---|---|---|---|---|"]
    for r in record["sides"]:
        lines.append(f"| {r['side']} | {r['compile_s']:.1f} | {r['updates_per_s_best']:.2f} | {r['updates_per_s_median']:.2f} | "
                     f"{r['cpu_s_per_update_median']:.3f} | {r['max_abs_param_diff_vs_sync_1_device']:.2g} | "
                     f"{r['max_abs_reward_diff_vs_sync_1_device']:.2g} |")
    lines += ["", f"Overlapped on 2 devices vs synchronous on 1: {sp['overlap_2_vs_sync_1_best']:.2f}x (best), "
              f"{sp['overlap_2_vs_sync_1_median']:.2f}x (median); vs synchronous split over the same 2 devices: "
              f"{sp['overlap_2_vs_sync_2_best']:.2f}x (best), {sp['overlap_2_vs_sync_2_median']:.2f}x (median)."
              + (f" Against synchronous on 1 device with the process on one core (a device per core): "
                 f"{sp['overlap_2_vs_sync_1_core_best']:.2f}x (best), {sp['overlap_2_vs_sync_1_core_median']:.2f}x "
                 f"(median)." if "overlap_2_vs_sync_1_core_best" in sp else ""), "",
              f"The halves alone, one update each on one device (median wall / CPU seconds): generation "
              f"{h['generation']['median_s']:.3f} / {h['generation']['cpu_median_s']:.3f}, learning "
              f"{h['learning']['median_s']:.3f} / {h['learning']['cpu_median_s']:.3f}: overlapping them can at best "
              f"run an update in the longer one's time, (g + l) / max(g, l) of their CPU seconds = "
              f"{h['critical_path_bound']:.2f}x the synchronous rate, given a free core for each device.", "",
              *[f"- {n}" for n in record.get("notes", [])]]
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--updates-per-chunk", type=int, default=5)
    p.add_argument("--set", action="append", default=[], help="a config override for every side (KEY=VALUE)")
    p.add_argument("--note", action="append", default=[], help="a line for the record's notes (the conditions)")
    return p.parse_args(argv)


if __name__ == "__main__":
    main(parse_args())
