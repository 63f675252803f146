"""Shared helpers for the benchmarks in ``bench/``.

Every benchmark follows the same rules (see ``shared/BENCHMARKS.md``): compile time is
measured apart from steady state; steady state is the best *and* the median of several timed
repetitions (both recorded; the best is the headline); every output feeds the timed result;
results land in ``bench/results/`` with the machine, library versions and exact command.

Typical use::

    from bench import common
    compiled, compile_s = common.compile_fn(jax.jit(fn), *args)
    times = common.time_repeats(compiled, *args, repeats=5)
    common.write_results("my_bench", records, extra_meta={...})
"""

from __future__ import annotations

import csv
import dataclasses
import importlib.metadata
import json
import os
import platform
import shlex
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

RESULTS_DIR = Path(__file__).resolve().parent / "results"

DEFAULT_LIBRARIES = ("jax", "jaxlib", "numpy", "flax", "gymnax", "gymnasium", "brax", "mujoco")


# ----------------------------------------------------------------------------------------
# Machine and versions
# ----------------------------------------------------------------------------------------
def cpu_model() -> str:
    """The CPU model name from ``/proc/cpuinfo`` (or ``platform.processor()``)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def machine_info() -> dict[str, Any]:
    """CPU model, logical cores usable by this process, OS, Python and JAX devices."""
    info: dict[str, Any] = {
        "cpu_model": cpu_model(),
        "cpu_count": os.cpu_count(),
        "cpus_usable": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "platform": platform.platform(),
        "python": platform.python_version(),
    }
    try:
        import jax

        info["jax_backend"] = jax.default_backend()
        info["jax_devices"] = [str(d) for d in jax.devices()]
    except Exception as exc:  # report, never fail a benchmark over metadata
        info["jax_devices"] = f"unavailable: {exc}"
    try:
        info["load_average_1m"] = os.getloadavg()[0]
    except OSError:
        pass
    return info


def library_versions(names: Iterable[str] = DEFAULT_LIBRARIES) -> dict[str, str | None]:
    """Installed distribution versions (``None`` for what is not installed)."""
    out: dict[str, str | None] = {}
    for name in names:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = None
    return out


def command_line() -> str:
    """The exact command that ran this benchmark, shell-quoted."""
    return " ".join(shlex.quote(a) for a in [Path(sys.executable).name, *sys.argv])


# ----------------------------------------------------------------------------------------
# Timing
# ----------------------------------------------------------------------------------------
def block(tree: Any) -> Any:
    """``block_until_ready`` on every array leaf of ``tree``; returns ``tree``."""
    import jax

    return jax.block_until_ready(tree)


#: :func:`child_runs`' two settings: pinned to one core (a program's own work, no second
#: thread waiting) and the machine's default threads.
ONE_CORE_AND_DEFAULT = (("one core", ("taskset", "-c", "1")), ("default", ()))


def child_runs(script: str, args: Sequence[str], settings=ONE_CORE_AND_DEFAULT) -> dict[str, Any]:
    """``{label: JSON}``: ``script --child ARGS`` run once per ``(label, command prefix)`` of
    ``settings``, each printing its figures as JSON on its last line (a fresh process per
    setting, so threads and affinity are the process's from its start)."""
    import subprocess

    runs = {}
    for label, prefix in settings:
        out = subprocess.run([*prefix, sys.executable, script, "--child", *args], capture_output=True, text=True,
                             check=True).stdout
        runs[label] = json.loads(out.strip().splitlines()[-1])
    return runs


def timed_process(cmd: Sequence[str], log: str, cwd: str | None = None, env: dict | None = None,
                  nice: bool = True) -> dict[str, Any]:
    """Run ``cmd`` to its end (``nice``: under ``nice -n 19``; ``env``: variables added), its
    output in the file ``log``: its exit status, wall and CPU seconds (the child's user +
    system, what ``/usr/bin/time`` reports) and the load average before and after."""
    import resource
    import subprocess

    load_before = os.getloadavg()[0]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    with open(log, "w") as f:
        proc = subprocess.run([*(["nice", "-n", "19"] if nice else []), *cmd], cwd=cwd, stdout=f,
                              stderr=subprocess.STDOUT, env={**os.environ, **(env or {})})
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return {"returncode": proc.returncode, "wall_s": round(wall, 1),
            "cpu_s": round(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime, 1),
            "load_before": load_before, "load_after": os.getloadavg()[0]}


def serve_process(args: Sequence[str], nice: bool = False):
    """A ``jaxrl serve ARGS`` process started from the repository root (``nice``: under
    ``nice -n 19``); ``(process, its WebSocket URL)`` once it prints that it is ready."""
    import subprocess

    root = str(Path(__file__).resolve().parent.parent)
    cmd = (["nice", "-n", "19"] if nice else []) + [sys.executable, "-m", "jaxrl.cli", "serve", *args]
    proc = subprocess.Popen(cmd, cwd=root, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": root})
    line = ""
    while "(WebSocket " not in line:
        line = proc.stdout.readline()
        if not line:
            raise RuntimeError("jaxrl serve did not start: " + proc.stderr.read()[-2000:])
    return proc, line.split("(WebSocket ")[1].split(")")[0]


def compile_fn(jitted: Callable, *args, **kwargs) -> tuple[Callable, float]:
    """Lower and compile a ``jax.jit``-ed function ahead of time.

    Returns ``(compiled, seconds)``: the compiled executable (call it with the same
    arguments) and the wall time spent tracing, lowering and compiling.
    """
    start = time.perf_counter()
    compiled = jitted.lower(*args, **kwargs).compile()
    return compiled, time.perf_counter() - start


def time_repeats(fn: Callable, *args, repeats: int = 5, warmup: int = 1) -> list[float]:
    """Wall seconds of ``repeats`` calls of ``fn(*args)``, each blocked until ready.

    ``warmup`` untimed calls run first (caches, page faults, thread pools).
    """
    if repeats <= 0:
        raise ValueError(f"repeats must be > 0, got {repeats}")
    for _ in range(warmup):
        block(fn(*args))
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        block(fn(*args))
        times.append(time.perf_counter() - start)
    return times


@dataclasses.dataclass(frozen=True)
class Interleaved:
    """Timings of :func:`time_interleaved`, one list per side, in call order.

    Attributes:
      wall: wall seconds per timed call.
      cpu: CPU seconds of this process per timed call (every thread; less sensitive than
        wall time to other processes sharing the cores).
    """

    wall: dict[str, list[float]]
    cpu: dict[str, list[float]]


def time_interleaved(sides: dict[str, Callable[[], Any]], repeats: int, warmup: int = 1) -> Interleaved:
    """Interleaved timing of zero-argument callables (each call blocked until ready):
    ``warmup`` untimed calls of each side, then ``repeats`` rounds of one call per side,
    so that load from other processes hits every side alike."""
    if repeats <= 0:
        raise ValueError(f"repeats must be > 0, got {repeats}")
    for _ in range(warmup):
        for fn in sides.values():
            block(fn())
    wall: dict[str, list[float]] = {k: [] for k in sides}
    cpu: dict[str, list[float]] = {k: [] for k in sides}
    for _ in range(repeats):
        for k, fn in sides.items():
            start, start_cpu = time.perf_counter(), time.process_time()
            block(fn())
            wall[k].append(time.perf_counter() - start)
            cpu[k].append(time.process_time() - start_cpu)
    return Interleaved(wall, cpu)


def summarize(times: Sequence[float], work: float) -> dict[str, float]:
    """Rates from repeated timings of ``work`` units: best (headline) and median."""
    best, median = min(times), statistics.median(times)
    return {
        "best_s": best,
        "median_s": median,
        "rate_best": work / best,
        "rate_median": work / median,
        "repeats": len(times),
    }


# ----------------------------------------------------------------------------------------
# Results
# ----------------------------------------------------------------------------------------
def metadata(extra: dict[str, Any] | None = None, libraries: Iterable[str] = DEFAULT_LIBRARIES) -> dict[str, Any]:
    """The provenance block written next to every result: when, where, what, how."""
    meta = {
        "utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "command": command_line(),
        "machine": machine_info(),
        "versions": library_versions(libraries),
    }
    if extra:
        meta.update(extra)
    return meta


def dumps(obj: Any, indent: int = 1) -> str:
    """JSON text with every innermost list or dict (scalars only) on one line.

    Curves and per-point records stay one line per point, so a study record with thousands
    of points remains readable and its diffs small.
    """

    def flat(x: Any) -> bool:
        items = x.values() if isinstance(x, dict) else x
        return all(not isinstance(v, (dict, list)) for v in items)

    def go(x: Any, depth: int) -> str:
        if isinstance(x, (dict, list)) and x and not flat(x):
            pad, inner = " " * (indent * depth), " " * (indent * (depth + 1))
            if isinstance(x, dict):
                body = ",\n".join(f"{inner}{json.dumps(str(k))}: {go(v, depth + 1)}" for k, v in x.items())
                return "{\n" + body + "\n" + pad + "}"
            return "[\n" + ",\n".join(inner + go(v, depth + 1) for v in x) + "\n" + pad + "]"
        return json.dumps(x, default=str)

    return go(obj, 0) + "\n"


def run_meta(libraries: Iterable[str] = DEFAULT_LIBRARIES) -> dict[str, Any]:
    """The provenance of one record inside a study record that merges several runs: when,
    the command, the CPU, the load and the installed versions (``None`` ones left out)."""
    machine = machine_info()
    return {
        "utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "command": command_line(),
        "cpu_model": machine["cpu_model"],
        "cpus_usable": machine["cpus_usable"],
        "load_average_1m": machine.get("load_average_1m"),
        "versions": {k: v for k, v in library_versions(libraries).items() if v is not None},
    }


def write_results(
    name: str,
    records: list[dict[str, Any]],
    meta: dict[str, Any],
    results_dir: Path | str = RESULTS_DIR,
) -> dict[str, Path]:
    """Write ``<name>.json`` (meta + records) and ``<name>.csv`` in ``results_dir``.

    The CSV has one row per record and only its scalar fields (nested curves and
    provenance stay in the JSON). Returns the written paths by format.
    """
    results_dir = Path(results_dir)
    results_dir.mkdir(parents=True, exist_ok=True)
    json_path = results_dir / f"{name}.json"
    json_path.write_text(dumps({"meta": meta, "records": records}))
    csv_path = results_dir / f"{name}.csv"
    fields: list[str] = []
    for rec in records:
        fields.extend(k for k, v in rec.items() if k not in fields and not isinstance(v, dict) and not _nested_list(v))
    with csv_path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fields, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(records)
    return {"json": json_path, "csv": csv_path}


def git_rev(root: Path | str = Path(__file__).resolve().parent.parent) -> str:
    """The checkout's short commit, with ``+dirty`` when ``jaxrl/`` differs from it."""
    import subprocess

    try:
        rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True).stdout.strip()
        dirty = subprocess.run(["git", "diff", "--quiet", "HEAD", "--", "jaxrl"], cwd=root).returncode != 0
    except OSError:
        return "unknown"
    return rev + ("+dirty" if dirty else "")


def measured(meta: dict[str, Any], setting: str = "") -> str:
    """The first line of a record's markdown: when, on what (and ``setting``), under which load,
    at which commit (``meta`` from :func:`metadata` with ``load_before``, ``load_after``, ``git``)."""
    machine = meta["machine"]
    where = f"{machine['cpus_usable']} cores usable" + (f", {setting}" if setting else "")
    return (f"Measured {meta['utc']} on {machine['cpu_model']} ({where}; load average {meta['load_before']:.1f} "
            f"before, {meta['load_after']:.1f} after); jaxrl at {meta['git']}.")


def write_record(stem: str, record: dict[str, Any], markdown: Callable[[dict, str], None]) -> None:
    """``<stem>.json`` (the record) and ``<stem>.md`` (``markdown(record, path)``)."""
    with open(stem + ".json", "w") as f:
        f.write(dumps(record))
    markdown(record, stem + ".md")
    print(f"wrote {stem}.json and .md")


def _nested_list(v: Any) -> bool:
    return isinstance(v, list) and any(isinstance(x, (dict, list)) for x in v)


def plot_series(
    records: list[dict[str, Any]],
    *,
    x: str,
    y: str,
    series: Callable[[dict[str, Any]], str],
    path: Path | str,
    title: str = "",
    xlabel: str | None = None,
    ylabel: str | None = None,
    logx: bool = True,
    logy: bool = True,
) -> Path:
    """A line plot of ``y`` against ``x``, one line per ``series(record)``; saved as PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups: dict[str, list[tuple[float, float]]] = {}
    for rec in records:
        groups.setdefault(series(rec), []).append((rec[x], rec[y]))
    fig, ax = plt.subplots(figsize=(8, 5))
    # Beyond 10 lines the default colour cycle repeats: switch to 20 colours and markers.
    colors = plt.get_cmap("tab20" if len(groups) > 10 else "tab10").colors
    markers = "osD^v<>ph*"
    for i, (label, pts) in enumerate(sorted(groups.items())):
        pts.sort()
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker=markers[i % len(markers)],
                color=colors[i % len(colors)], label=label)
    if logx:
        ax.set_xscale("log", base=2)
    if logy:
        ax.set_yscale("log")
    ax.set_xlabel(xlabel or x)
    ax.set_ylabel(ylabel or y)
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def format_rate(rate: float) -> str:
    """``12.3M``-style steps/s."""
    if rate >= 1e6:
        return f"{rate / 1e6:.2f}M"
    if rate >= 1e3:
        return f"{rate / 1e3:.1f}k"
    return f"{rate:.0f}"


def train_and_evaluate(train: Callable, evaluate: Callable, key) -> tuple[Any, Any, Any]:
    """One seed's training, then its evaluation: ``(training curve [U] of episode returns,
    deterministic eval returns [E], stochastic eval returns [E])``; vmap it over keys."""
    import jax

    train_key, eval_key = jax.random.split(key)
    state, metrics = train(train_key)
    ev = evaluate(state, eval_key)
    return metrics["episode_return"], ev["episode_returns"], ev["episode_returns_stochastic"]


def ppo_recipe(config_path: str | Path, total_env_steps: int | None, overrides: tuple[str, ...] = ()):
    """``(run config, PPO config at total_env_steps per seed (None: the config's), program, run)``
    of a PPO recipe YAML (with ``key=value`` ``overrides``), built on the env object (no run directory):
    ``run(key)`` is :func:`train_and_evaluate` of that program, for ``jax.vmap`` over seed keys."""
    import functools

    import jaxrl
    from jaxrl.algos import ppo
    from jaxrl.algos.common.train import program_on
    from jaxrl.algos.common.train import train as train_program
    from jaxrl.run.config import load_config

    cfg = load_config(str(config_path), list(overrides))
    acfg = cfg.algo_config if total_env_steps is None else dataclasses.replace(cfg.algo_config, total_env_steps=total_env_steps)
    env, params = jaxrl.make(cfg.env.id)
    program = program_on(ppo, env, params, acfg)
    train = functools.partial(train_program, program, program.plan.num_updates)  # train_on's, on this program
    return cfg, acfg, program, functools.partial(train_and_evaluate, train, program.evaluate)
