"""Aggregate final scores over seeds and tasks, as rliable does (``jaxrl compare``).

A method's scores form a matrix ``[runs, tasks]`` (one row per seed, one column per env);
every statistic reduces the last two axes of a ``[..., runs, tasks]`` array, so the
bootstrap computes all of its replicates in a few NumPy operations:

* :func:`iqm`: the interquartile mean, the 25% trimmed mean of all ``runs * tasks`` scores
  (``scipy.stats.trim_mean(x, 0.25, axis=None)``);
* :func:`mean`, :func:`median`: of the per-task mean scores;
* :func:`optimality_gap`: ``mean(max(gamma - x, 0))``, how far below ``gamma`` on average;
* :func:`probability_of_improvement`: ``P(X > Y) + P(X = Y) / 2`` per task (the Mann-Whitney
  U statistic over ``n_x * n_y``), averaged over tasks.

Intervals are percentile intervals of a stratified bootstrap (:func:`stratified_resamples`):
each replicate redraws the runs of every task, with replacement, from that task's own runs
(rliable's ``StratifiedBootstrap``); for ``P(X > Y)`` the two methods are redrawn
independently (``StratifiedIndependentBootstrap``). Scores are normalised per task to
``(x - low) / (high - low)`` before they are pooled across tasks (:data:`DEFAULT_RANGES`,
``--normalize``). :func:`read_run` takes a run directory's final per-seed scores (its
``eval.json``, or a ``metrics.jsonl`` metric); :func:`load_methods` reads a command line's runs
(``jaxrl compare``, :mod:`jaxrl.commands.compare`): it refuses two copies of one run (one run id) and warns of runs with the same config and seed
(not independent seeds). The guide is docs/compare.md.
"""

from __future__ import annotations

import dataclasses
import io
import json
import math
import os
import zlib
from collections.abc import Callable

import numpy as np

from jaxrl.run import rundir, yamlio
from jaxrl.run.files import CONFIG_FILE, EVAL_FILE, METRICS_FILE
from jaxrl.run.rundir import RunDirError

CONFIDENCE = 0.95
#: Episode-return range each env allows (``low`` = the worst return, ``high`` = the best):
#: the default normalisation of these tasks, so that 1.0 means the return cap (CartPole-v1
#: balanced for all 500 steps) and 0.0 the floor. Other tasks need ``--normalize``.
DEFAULT_RANGES = {"CartPole-v1": (0.0, 500.0), "Acrobot-v1": (-500.0, 0.0), "MountainCar-v0": (-200.0, 0.0)}
#: Config keys that do not make two runs different methods (where and how a run is
#: written, which seeds, which env): runs equal apart from these form one method.
NOT_METHOD_KEYS = (
    "train.seed", "train.seeds", "train.out_dir", "train.progress", "train.loggers", "train.keep_checkpoints",
    "train.checkpoint_every", "train.updates_per_chunk", "train.log_seeds", "devices", "shard",
)
MAX_ELEMENTS = 1 << 22  # scores resampled per bootstrap block (bounds the memory of large suites)
MAX_REPS = 200_000  # bootstrap resamples (rliable's intervals use 2,000-50,000)


class CompareError(RunDirError):
    """A run cannot be compared as asked; the message is one line (exit 2)."""


# ------------------------------------------------------------------------------------------
# Statistics of score arrays [..., runs, tasks]
# ------------------------------------------------------------------------------------------


def iqm(scores: np.ndarray) -> np.ndarray:
    """Interquartile mean of all ``runs * tasks`` scores: sort, drop ``int(n / 4)`` from
    each end, average the rest (``scipy.stats.trim_mean(x, 0.25, axis=None)``). Shape ``[...]``."""
    flat = np.sort(scores.reshape(*scores.shape[:-2], -1), axis=-1)
    n = flat.shape[-1]
    cut = int(0.25 * n)
    return flat[..., cut : n - cut].mean(axis=-1)


def mean(scores: np.ndarray) -> np.ndarray:
    """Mean over tasks of the per-task mean score. Shape ``[...]``."""
    return scores.mean(axis=-2).mean(axis=-1)


def median(scores: np.ndarray) -> np.ndarray:
    """Median over tasks of the per-task mean score. Shape ``[...]``."""
    return np.median(scores.mean(axis=-2), axis=-1)


def optimality_gap(scores: np.ndarray, gamma: float = 1.0) -> np.ndarray:
    """``mean(max(gamma - x, 0))`` over runs and tasks: the average shortfall below
    ``gamma`` (scores above it count as ``gamma``). Shape ``[...]``."""
    return np.maximum(gamma - scores, 0.0).mean(axis=(-2, -1))


def improvement_per_task(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """``P(X > Y) + P(X = Y) / 2`` per task over all run pairs (Mann-Whitney U over
    ``n_x * n_y``); ``x`` ``[..., n_x, tasks]``, ``y`` ``[..., n_y, tasks]`` -> ``[..., tasks]``."""
    a, b = x[..., :, None, :], y[..., None, :, :]
    return (a > b).mean(axis=(-3, -2)) + 0.5 * (a == b).mean(axis=(-3, -2))


def probability_of_improvement(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """:func:`improvement_per_task` averaged over tasks. Shape ``[...]``."""
    return improvement_per_task(x, y).mean(axis=-1)


def statistics(gamma: float) -> dict[str, Callable[[np.ndarray], np.ndarray]]:
    """The aggregate statistics reported for each method, by name (table order)."""
    return {"IQM": iqm, "mean": mean, "median": median, "optimality gap": lambda x: optimality_gap(x, gamma)}


# ------------------------------------------------------------------------------------------
# Stratified bootstrap
# ------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Interval:
    """A point estimate and its bootstrap percentile interval."""

    point: float
    low: float
    high: float

    def text(self, digits: int = 3) -> str:
        return f"{self.point:.{digits}f} [{self.low:.{digits}f}, {self.high:.{digits}f}]"


def stratified_resamples(scores: np.ndarray, reps: int, rng: np.random.Generator):
    """Yield blocks ``[k, runs, tasks]`` (``k`` summing to ``reps``) of stratified
    resamples of ``scores`` ``[runs, tasks]``: each task's column redrawn with replacement
    from its own runs."""
    runs, tasks = scores.shape
    block = max(1, MAX_ELEMENTS // (runs * tasks))
    columns = np.arange(tasks)
    for start in range(0, reps, block):
        idx = rng.integers(0, runs, size=(min(block, reps - start), runs, tasks))
        yield scores[idx, columns]


def replicates(scores: np.ndarray, stats: dict, reps: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """``{name: float[reps]}``: every statistic of ``stats`` on the same ``reps``
    stratified resamples of ``scores`` ``[runs, tasks]``."""
    blocks: dict[str, list] = {key: [] for key in stats}
    for sample in stratified_resamples(scores, reps, rng):
        for key, fn in stats.items():
            blocks[key].append(fn(sample))
    return {key: np.concatenate(found) for key, found in blocks.items()}


def percentile_interval(replicates: np.ndarray, point: float, confidence: float = CONFIDENCE) -> Interval:
    """The ``confidence`` percentile interval of bootstrap ``replicates`` ``[reps]``
    (``np.percentile``, linear interpolation, as arch's ``conf_int(method="percentile")``)."""
    tail = 100.0 * (1.0 - confidence) / 2.0
    low, high = np.percentile(replicates, [tail, 100.0 - tail])
    return Interval(float(point), float(low), float(high))


def _rng(seed: int, *names: str) -> np.random.Generator:
    """A generator of ``seed`` and the method names: one method's intervals do not depend on
    which other methods are compared, nor on their order."""
    return np.random.default_rng([seed, *(zlib.crc32(n.encode("utf-8")) for n in names)])


def aggregate(scores: np.ndarray, reps: int = 2000, seed: int = 0, gamma: float = 1.0, name: str = "",
              confidence: float = CONFIDENCE) -> dict[str, Interval]:
    """Every statistic of :func:`statistics` for one method's ``scores`` ``[runs, tasks]``,
    with its stratified bootstrap interval (all statistics share the ``reps`` resamples)."""
    stats = statistics(gamma)
    scores = np.asarray(scores, np.float64)
    found = replicates(scores, stats, reps, _rng(seed, name))
    return {key: percentile_interval(found[key], fn(scores), confidence) for key, fn in stats.items()}


def improvement(x: np.ndarray, y: np.ndarray, reps: int = 2000, seed: int = 0, names: tuple[str, str] = ("", ""),
                confidence: float = CONFIDENCE) -> Interval:
    """``P(X > Y)`` averaged over tasks, with the interval of a bootstrap that redraws
    ``x`` ``[n_x, tasks]`` and ``y`` ``[n_y, tasks]`` independently, each stratified by task."""
    x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
    rx, ry = _rng(seed, *names, "x"), _rng(seed, *names, "y")
    blocks = [probability_of_improvement(a, b) for a, b in zip(stratified_resamples(x, reps, rx),
                                                               stratified_resamples(y, reps, ry))]
    return percentile_interval(np.concatenate(blocks), probability_of_improvement(x, y), confidence)


# ------------------------------------------------------------------------------------------
# Reading runs
# ------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class RunScores:
    """One run directory's final scores: one per seed, on one task."""

    path: str
    task: str  # the config's env.id
    config: dict  # config.yaml as plain data
    scores: np.ndarray  # float64[seeds]
    source: str  # where the scores came from, in words


def _read_json(path: str) -> object:
    if not os.path.isfile(path) or os.path.getsize(path) > (16 << 20):
        raise CompareError(f"{path} is not a regular file of at most 16 MiB")
    try:
        with open(path, "rb") as f:
            return json.loads(f.read())
    except (ValueError, UnicodeDecodeError):
        raise CompareError(f"{path} is not valid JSON") from None
    except RecursionError:
        raise CompareError(f"{path} is not valid JSON (nested too deeply)") from None


def _plain_numbers(values, depth: int = 0) -> bool:
    """``values`` is a number, None, or a list (at most two levels) of them; no bool, no string."""
    if isinstance(values, list):
        return depth < 2 and all(_plain_numbers(v, depth + 1) for v in values)
    return values is None or (isinstance(values, (int, float)) and not isinstance(values, bool))


def _numbers(values, where: str) -> np.ndarray:
    """``values`` as float64 (NaN: no value); a value that is not a number, rows of unequal
    length, an infinity or nothing at all is refused in one line naming ``where``."""
    try:
        if not _plain_numbers(values):
            raise TypeError
        arr = np.asarray(values, np.float64)
    except (TypeError, ValueError):
        raise CompareError(f"{where} holds a value that is not a number (or rows of unequal length)") from None
    if arr.size == 0 or np.isinf(arr).any():
        raise CompareError(f"{where} is empty or holds an infinite value")
    return arr


def eval_scores(run_dir: str) -> tuple[np.ndarray, str]:
    """Per-seed final scores from ``eval.json`` (what ``jaxrl train`` writes at the end
    and ``jaxrl eval`` rewrites): the per-seed mean of the headline policy's metric."""
    path = os.path.join(run_dir, EVAL_FILE)
    summary = _read_json(path)
    metric = summary.get("metric") if isinstance(summary, dict) else None
    per_seed = summary.get("per_seed") if isinstance(summary, dict) else None
    key = f"{metric}_mean"
    if not isinstance(per_seed, dict) or key not in per_seed:
        raise CompareError(f"{path} has no per-seed scores (per_seed.{key}); rerun `jaxrl eval {run_dir}`")
    scores = _numbers(per_seed[key], f"{path} per_seed.{key}")
    if scores.ndim != 1 or np.isnan(scores).any():
        raise CompareError(f"{path} per_seed.{key} is not a list of finite numbers")
    policies = summary.get("policies") or {}
    first = next(iter(policies.values()), {}) if isinstance(policies, dict) else {}
    label = first.get("label", metric) if isinstance(first, dict) else metric
    step = summary.get("checkpoint_update")
    return scores, f"eval.json: per-seed mean {label}" + (f" (checkpoint {step})" if step is not None else "")


def metric_scores(run_dir: str, metric: str, seeds: int, last: int = 1) -> tuple[np.ndarray, str]:
    """Per-seed scores from ``metrics.jsonl``: ``metric`` averaged over the last ``last``
    records that hold it. A multi-seed run needs per-seed records (``train.log_seeds:
    per_seed``); seeds with no value there (no episode ended) are skipped in the average."""
    from jaxrl.run import logging as log_lib

    path = os.path.join(run_dir, METRICS_FILE)
    records = [r for r in log_lib.read_metrics(path) if metric in r]
    if not records:
        raise CompareError(f"{path} has no records of --metric {metric!r}")
    rows = []
    for rec in records[-last:]:
        value = rec[metric]
        if not isinstance(value, list):
            if seeds > 1:
                raise CompareError(f"{path} records {metric} as a mean over {seeds} seeds; train with "
                                   "--set train.log_seeds=per_seed, or compare eval.json scores (leave out --metric)")
            value = [value]
        rows.append([math.nan if v is None else v for v in value])
    table = _numbers(rows, f"{path} {metric}")
    if np.isnan(table).all(axis=0).any():
        raise CompareError(f"{path}: a seed has no {metric} in the last {last} records; raise --last")
    return np.nanmean(table, axis=0), f"metrics.jsonl: {metric}, mean of the last {len(rows)} records"


def read_run(run_dir: str, metric: str | None = None, last: int = 1) -> RunScores:
    """A run directory's task (``env.id``) and final per-seed scores: ``eval.json`` by
    default, ``metric`` from ``metrics.jsonl`` when given."""
    if not os.path.isdir(run_dir):
        raise CompareError(f"run {run_dir!r} does not exist or is not a directory")
    try:
        config = yamlio.read_file(os.path.join(run_dir, CONFIG_FILE))
    except yamlio.YamlError as exc:
        raise CompareError(f"{run_dir!r} is not a run directory: {CONFIG_FILE} {exc}") from None
    env = config.get("env") if isinstance(config, dict) else None
    if not isinstance(env, dict) or not isinstance(env.get("id"), str):
        raise CompareError(f"{os.path.join(run_dir, CONFIG_FILE)} names no env.id")
    train = config.get("train") or {}
    seeds = train.get("seeds", 1) if isinstance(train, dict) else None
    if isinstance(seeds, bool) or not isinstance(seeds, int) or seeds < 1:
        raise CompareError(f"{os.path.join(run_dir, CONFIG_FILE)}: train.seeds is not a positive integer ({yamlio.short(seeds)})")
    if metric is not None:
        scores, source = metric_scores(run_dir, metric, seeds, last)
    elif os.path.lexists(os.path.join(run_dir, EVAL_FILE)):
        scores, source = eval_scores(run_dir)
    else:
        raise CompareError(f"run {run_dir!r} has no {EVAL_FILE}: run `jaxrl eval {run_dir}`, or pass --metric NAME "
                           f"to score it from {METRICS_FILE}")
    if scores.size != seeds:
        raise CompareError(f"run {run_dir!r} trained {seeds} seeds but its {source.split(':')[0]} holds {scores.size} scores")
    return RunScores(run_dir, env["id"], config, scores, source)


# ------------------------------------------------------------------------------------------
# Runs -> methods -> score matrices
# ------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Method:
    """A method's runs and its raw score matrix ``[seeds, tasks]`` (tasks in the order given)."""

    name: str
    runs: tuple[RunScores, ...]
    tasks: tuple[str, ...]
    scores: np.ndarray  # float64[seeds, tasks], raw


def parse_method(text: str) -> tuple[str, list[str]]:
    """``NAME=RUN,RUN,...`` -> ``(NAME, [RUN, ...])``."""
    name, sep, runs = text.partition("=")
    paths = [p for p in runs.split(",") if p]
    if not sep or not name.strip() or not paths:
        raise CompareError(f"--method {text!r}: expected NAME=RUN[,RUN...]")
    return name.strip(), paths


def _method_key(run: RunScores) -> dict:
    return {k: v for k, v in rundir.flat(run.config).items() if not k.startswith("env.") and k not in NOT_METHOD_KEYS}


def auto_methods(runs: list[RunScores]) -> list[tuple[str, list[RunScores]]]:
    """Runs whose configs agree apart from ``env`` and :data:`NOT_METHOD_KEYS` form one
    method, named by the keys in which the methods differ (``ppo.lr=0.0015``), or by the
    algorithm when there is one method (by its first run's folder when the name gets long)."""
    found: dict[str, tuple[dict, list[RunScores]]] = {}
    for run in runs:
        key = _method_key(run)
        found.setdefault(json.dumps(key, sort_keys=True, default=str), (key, []))[1].append(run)
    groups = list(found.values())
    differ = sorted({k for key, _ in groups for k in key if any(other.get(k) != key.get(k) for other, _ in groups)})
    out, taken = [], set()
    for key, members in groups:
        name = ", ".join(f"{k}={yamlio.short(key.get(k))}" for k in differ) or str(key.get("algo", "method"))
        if len(name) > 48 or name in taken:
            name = os.path.basename(os.path.normpath(members[0].path))
        while name in taken:
            name += "'"
        taken.add(name)
        out.append((name, members))
    return out


def make_method(name: str, runs: list[RunScores]) -> Method:
    """One method's score matrix: the seeds of its runs on each task, concatenated."""
    by_task: dict[str, list[RunScores]] = {}
    for run in runs:
        by_task.setdefault(run.task, []).append(run)
    for task, members in by_task.items():
        envs = {json.dumps(m.config.get("env"), sort_keys=True, default=str) for m in members}
        if len(envs) > 1:
            raise CompareError(f"method {name!r}: its runs on {task} differ in their env settings "
                               f"({', '.join(m.path for m in members)}); put them in different methods")
    columns = {task: np.concatenate([m.scores for m in members]) for task, members in by_task.items()}
    sizes = {task: col.size for task, col in columns.items()}
    if len(set(sizes.values())) > 1:
        raise CompareError(f"method {name!r} has different seed counts per task "
                           f"({', '.join(f'{t}: {n}' for t, n in sizes.items())}); the stratified bootstrap needs one count")
    tasks = tuple(sorted(columns))
    return Method(name, tuple(runs), tasks, np.stack([columns[t] for t in tasks], axis=1))


def check_tasks(methods: list[Method]) -> tuple[str, ...]:
    """The tasks every method was scored on (all must have the same)."""
    tasks = methods[0].tasks
    for m in methods[1:]:
        if m.tasks != tasks:
            raise CompareError(f"methods cover different tasks: {methods[0].name!r} has {', '.join(tasks)}; "
                               f"{m.name!r} has {', '.join(m.tasks)}; each method needs runs on every task")
    return tasks


def parse_ranges(items: list[str] | None, tasks: tuple[str, ...], raw: bool = False, changed=()) -> dict | None:
    """``{task: (low, high)}`` from ``--normalize TASK=LOW:HIGH`` over :data:`DEFAULT_RANGES`
    (not for the ``changed`` tasks, whose env params were changed: their range may differ),
    or None for raw scores (``raw``, or one task with no range)."""
    given = {}
    for item in items or []:
        task, sep, bounds = item.rpartition("=")
        low, colon, high = bounds.partition(":")
        try:
            lo, hi = float(low), float(high)
        except ValueError:
            lo = hi = math.nan
        if not sep or not colon or not (math.isfinite(lo) and math.isfinite(hi)) or lo == hi:
            raise CompareError(f"--normalize {item!r}: expected TASK=LOW:HIGH with finite LOW != HIGH")
        if task not in tasks:
            raise CompareError(f"--normalize {item!r}: no run is on task {task!r} (tasks: {', '.join(tasks)})")
        given[task] = (lo, hi)
    if raw:
        if given:
            raise CompareError("--raw and --normalize exclude each other")
        return None
    ranges = {t: given.get(t, None if t in changed else DEFAULT_RANGES.get(t)) for t in tasks}
    missing = [t for t, r in ranges.items() if r is None]
    if missing and len(tasks) == 1:
        return None
    if missing:
        raise CompareError(f"no score range for {', '.join(t + (' (its env params changed)' if t in changed else '') for t in missing)}: scores are pooled across tasks only after "
                           f"normalising; pass --normalize {missing[0]}=LOW:HIGH (or --raw)")
    return ranges


def normalise(scores: np.ndarray, tasks: tuple[str, ...], ranges: dict | None) -> np.ndarray:
    """``(x - low) / (high - low)`` per task column (``ranges`` None: unchanged)."""
    if ranges is None:
        return scores
    low = np.array([ranges[t][0] for t in tasks])
    high = np.array([ranges[t][1] for t in tasks])
    return (scores - low) / (high - low)


# ------------------------------------------------------------------------------------------
# The comparison: compute, print, write, plot
# ------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Pair:
    """``P(X > Y)`` of method ``x`` over method ``y`` (averaged over tasks, and per task)."""

    x: str
    y: str
    interval: Interval
    per_task: tuple[float, ...]


@dataclasses.dataclass(frozen=True)
class Comparison:
    """Every method's aggregate statistics and every pair's probability of improvement."""

    tasks: tuple[str, ...]
    ranges: dict | None  # {task: (low, high)}; None: raw scores
    gamma: float | None  # the optimality-gap threshold; None: not reported
    reps: int
    seed: int
    methods: tuple[Method, ...]
    stats: dict  # method name -> statistic name -> Interval
    pairs: tuple[Pair, ...]


def compare(methods: list[Method], ranges: dict | None, gamma: float | None, reps: int = 2000, seed: int = 0) -> Comparison:
    """Aggregate every method (normalised by ``ranges``) and every pair ``i < j``."""
    tasks = check_tasks(methods)
    scores = {m.name: normalise(m.scores, tasks, ranges) for m in methods}
    stats = {}
    for name, matrix in scores.items():
        found = aggregate(matrix, reps, seed, 1.0 if gamma is None else gamma, name)
        stats[name] = found if gamma is not None else {k: v for k, v in found.items() if k != "optimality gap"}
    pairs = []
    for i, a in enumerate(methods):
        for b in methods[i + 1 :]:
            x, y = scores[a.name], scores[b.name]
            pairs.append(Pair(a.name, b.name, improvement(x, y, reps, seed, (a.name, b.name)),
                              tuple(float(v) for v in improvement_per_task(x, y))))
    return Comparison(tasks, ranges, gamma, reps, seed, tuple(methods), stats, tuple(pairs))


def format_comparison(c: Comparison) -> str:
    """The printed report: sources, the method x statistic table, per-task means, pairs."""
    pct = f"{100 * CONFIDENCE:g}%"
    lines = [f"scores: {c.methods[0].runs[0].source}"]
    if c.ranges is None:
        lines.append("raw scores (not normalised)")
    else:
        lines.append("normalised per task, (x - low) / (high - low): "
                     + ", ".join(f"{t} [{lo:g}, {hi:g}]" for t, (lo, hi) in c.ranges.items()))
    lines.append(f"{pct} stratified bootstrap intervals, {c.reps} resamples, seed {c.seed}"
                 + (f"; optimality gap below {c.gamma:g}" if c.gamma is not None else ""))
    names = list(next(iter(c.stats.values())))
    width = max(len("method"), *(len(m.name) for m in c.methods))
    lines.append(f"{'method':<{width}}  {'seeds x tasks':>13}  " + "  ".join(f"{n:<24}" for n in names).rstrip())
    for m in c.methods:
        shape = f"{m.scores.shape[0]} x {m.scores.shape[1]}"
        lines.append(f"{m.name:<{width}}  {shape:>13}  " + "  ".join(f"{c.stats[m.name][n].text():<24}" for n in names).rstrip())
    lines.append("mean raw score per task: " + "; ".join(
        f"{t}: " + ", ".join(f"{m.name} {m.scores[:, i].mean():.4g}" for m in c.methods) for i, t in enumerate(c.tasks)))
    if c.pairs:
        lines.append(f"probability of improvement P(X > Y) (ties count 1/2), averaged over tasks, {pct} interval:")
        for p in c.pairs:
            lines.append(f"  P({p.x} > {p.y}) = {p.interval.text()}")
    return "\n".join(lines)


def comparison_json(c: Comparison) -> dict:
    """The comparison as plain JSON data (``--json``)."""
    as_dict = dataclasses.asdict
    return {
        "tasks": list(c.tasks), "normalize": None if c.ranges is None else {t: list(r) for t, r in c.ranges.items()},
        "gamma": c.gamma, "reps": c.reps, "seed": c.seed, "confidence": CONFIDENCE,
        "interval": "percentile interval of a stratified bootstrap (runs redrawn within each task)",
        "methods": {
            m.name: {
                "runs": [r.path for r in m.runs], "sources": sorted({r.source for r in m.runs}),
                "scores_raw": m.scores.tolist(), "stats": {k: as_dict(v) for k, v in c.stats[m.name].items()},
            }
            for m in c.methods
        },
        "improvement": [{"x": p.x, "y": p.y, **as_dict(p.interval), "per_task": dict(zip(c.tasks, p.per_task))}
                        for p in c.pairs],
    }


def _interval_bars(ax, intervals: list[Interval], labels: list[str], colours: list[str]) -> None:
    """One horizontal bar from ``low`` to ``high`` and a tick at ``point`` per interval."""
    for i, (iv, colour) in enumerate(zip(intervals, colours)):
        ax.barh(i, iv.high - iv.low, left=iv.low, height=0.6, color=colour, alpha=0.75)
        ax.vlines(iv.point, i - 0.3, i + 0.3, color="black", linewidth=1.5)
    ax.set_yticks(range(len(intervals)), labels)
    ax.invert_yaxis()
    ax.grid(axis="x", alpha=0.3)


def plot_comparison(c: Comparison, path: str) -> None:
    """rliable-style interval plot (``plot_interval_estimates``): a panel per statistic with
    a bar per method, and a panel of ``P(X > Y)`` per pair (0.5, no difference, dotted)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise CompareError("--plot needs matplotlib: pip install 'matplotlib>=3.8,<4'") from None
    names = list(next(iter(c.stats.values())))
    panels = len(names) + (1 if c.pairs else 0)
    fig, axes = plt.subplots(1, panels, figsize=(3.4 * panels, 0.6 * max(len(c.methods), len(c.pairs)) + 1.6), squeeze=False)
    cycle = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    colours = [cycle[i % len(cycle)] for i in range(len(c.methods))]
    for k, (ax, stat) in enumerate(zip(axes[0], names)):
        labels = [m.name if k == 0 else "" for m in c.methods]
        _interval_bars(ax, [c.stats[m.name][stat] for m in c.methods], labels, colours)
        ax.set_title(stat)
    if c.pairs:
        ax = axes[0][-1]
        _interval_bars(ax, [p.interval for p in c.pairs], [f"P({p.x} > {p.y})" for p in c.pairs], ["grey"] * len(c.pairs))
        ax.axvline(0.5, color="red", linestyle=":", linewidth=1)
        ax.yaxis.tick_right()
        ax.set_xlim(-0.02, 1.02)
        ax.set_title("probability of improvement")
    scale = "raw score" if c.ranges is None else "normalised score"
    fig.suptitle(f"{scale}, {100 * CONFIDENCE:g}% stratified bootstrap intervals over {', '.join(c.tasks)}", fontsize=9)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    rundir.write_bytes(path, buf.getvalue())


def _refuse_copies(paths: list[str]) -> None:
    """Two directories with one run identity (:func:`jaxrl.run.rundir.run_id`) are copies of
    one run: their scores are one run's seeds, not independent ones."""
    seen: dict[str, str] = {}
    for path in paths:
        ident = rundir.run_id(path) if os.path.isdir(path) else None
        if ident is not None and ident in seen:
            raise CompareError(f"runs {seen[ident]!r} and {path!r} are copies of one run (run id {ident}); "
                               "name each run once")
        if ident is not None:
            seen[ident] = path


#: Config keys that change where and how a run reports, never its scores.
REPORTING_KEYS = ("train.out_dir", "train.progress", "train.loggers", "train.keep_checkpoints", "train.checkpoint_every",
                  "train.updates_per_chunk", "train.log_seeds")


def same_runs(methods: list[Method]) -> list[tuple[str, str]]:
    """Pairs of runs with one config (apart from :data:`REPORTING_KEYS`) and one ``train.seed``:
    a deterministic trainer gives both the same scores, so they are not independent seeds."""
    found: dict[str, str] = {}
    pairs = []
    for run in (r for m in methods for r in m.runs):
        flat = {k: v for k, v in rundir.flat(run.config).items() if k not in REPORTING_KEYS}
        key = json.dumps(flat, sort_keys=True, default=str)
        if key in found:
            pairs.append((found[key], run.path))
        else:
            found[key] = run.path
    return pairs


def load_methods(run_args: list[str], method_args: list[str] | None, metric: str | None, last: int) -> list[Method]:
    """Read every run named on the command line and group them (``--method`` first, in
    order; then the positional runs by :func:`auto_methods`)."""
    named = [parse_method(text) for text in method_args or []]
    seen: set[str] = set()
    for path in [p for _, paths in named for p in paths] + list(run_args):
        key = os.path.realpath(path)
        if key in seen:
            raise CompareError(f"run {path!r} is named twice")
        seen.add(key)
    names = [n for n, _ in named]
    if len(set(names)) < len(names):
        raise CompareError(f"--method: two methods are called {next(n for n in names if names.count(n) > 1)!r}")
    _refuse_copies([p for _, paths in named for p in paths] + list(run_args))
    methods = [make_method(name, [read_run(p, metric, last) for p in paths]) for name, paths in named]
    auto = auto_methods([read_run(p, metric, last) for p in run_args])
    for name, runs in auto:
        while name in names:
            name += "'"
        methods.append(make_method(name, runs))
    if not methods:
        raise CompareError("name at least one run: jaxrl compare RUN [RUN ...] or --method NAME=RUN,RUN")
    return methods


def __getattr__(name: str):
    """``main_compare`` moved to :mod:`jaxrl.commands.compare` (with a warning)."""
    from jaxrl import _compat

    return _compat.moved_name(__name__, name)
