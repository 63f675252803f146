"""Run logging: metrics as JSONL, a tqdm progress bar, a learning-curve PNG.

``metrics.jsonl`` holds one JSON object per update::

    {"update": 12, "env_steps": 6144, "wall_time": 3.41, "loss": 0.52, "episode_return": 187.0, ...}

``update`` counts updates done (1-based), ``env_steps`` is env steps *per seed* after that
update, and ``wall_time`` is seconds since the run started (excluding time before a
resume) at the end of the chunk that ran the update: updates inside one jitted chunk
finish together, so they share a wall time. With several seeds the metrics are either the
mean with ``<name>/min`` and ``<name>/max`` (``log_seeds: mean``) or a list with one value
per seed (``log_seeds: per_seed``). When the metrics count finished episodes
(``episode_count``), the per-episode averages ``episode_return`` and ``episode_length`` of an
update in which no episode ended are left out (``None`` for that seed in per-seed lists),
so curves never show a fake 0 return.

The file survives crashes: each chunk's records go out in one append (never through a
symbolic link), readers skip a torn or garbled line instead of failing, and a resumed run
calls :func:`repair_metrics`, which keeps the good records up to its checkpoint, rewrites
the file atomically and says what it dropped or found missing.
"""

from __future__ import annotations

import io
import json
import math
import os
import sys
from typing import Iterable, Sequence

import numpy as np

from jaxrl.run import rundir

RETURN_KEYS = ("episode_return", "return_mean", "mean_return", "return")
#: Averages over the episodes that ended in an update: meaningless when none ended.
EPISODE_AVERAGES = ("episode_return", "episode_length")


def _scalar(x) -> float:
    return float(x)


def chunk_records(
    metrics: dict,
    first_update: int,
    num_active: int,
    env_steps_per_update: int,
    wall_time: float,
    log_seeds: str = "mean",
) -> list[dict]:
    """One record per update of a chunk.

    Args:
      metrics: name -> ``float[S, K]`` host array (S seeds, K updates in the chunk).
      first_update: updates done before the chunk.
      num_active: how many of the K updates ran (the last chunk may run fewer).
      env_steps_per_update: env steps per update and seed.
      wall_time: seconds since the run started, at the end of the chunk.
      log_seeds: ``"mean"`` (mean, min, max over seeds) or ``"per_seed"`` (lists).
    """
    counts = metrics.get("episode_count")
    records = []
    for i in range(num_active):
        update = first_update + i + 1
        rec = {"update": update, "env_steps": update * env_steps_per_update, "wall_time": round(wall_time, 4)}
        for name, values in metrics.items():
            column = np.asarray(values, np.float64)[:, i]
            finished = None
            if name in EPISODE_AVERAGES and counts is not None:
                finished = np.asarray(counts)[:, i] > 0  # seeds in which an episode ended
            rec.update(_aggregate(name, column, finished, log_seeds))
        records.append(rec)
    return records


#: Metric-name prefixes of figures measured on some updates only (NaN on the others): their
#: records leave the key out where it was not measured, as for episode averages.
MEASURED_SOMETIMES = ("heldout_", "reward/")  # reward/<source>/...: a mixed task's source not drawn (env.mix)


def _aggregate(name: str, column: np.ndarray, finished: np.ndarray | None, log_seeds: str) -> dict:
    """The record entries of one metric over seeds (``column`` ``[S]``).

    Per-episode averages (``finished`` given) only count seeds in which an episode ended:
    a seed without one reports no value (``None`` per seed; the key is left out when no
    seed finished one), never a fake 0. Metrics of :data:`MEASURED_SOMETIMES` likewise skip
    the updates where they are NaN (not measured).
    """
    if name.startswith(MEASURED_SOMETIMES):  # NaN: not measured at this update (e.g. grpo.eval_every)
        finite = np.isfinite(column)
        finished = finite if finished is None else finished & finite
    if column.shape[0] == 1:
        return {name: _scalar(column[0])} if finished is None or finished[0] else {}
    if finished is not None:
        if log_seeds == "per_seed":
            return {name: [_scalar(v) if f else None for v, f in zip(column, finished)]}
        column = column[finished]
        if column.size == 0:
            return {}
    if log_seeds == "per_seed":
        return {name: [_scalar(v) for v in column]}
    return {name: _scalar(column.mean()), f"{name}/min": _scalar(column.min()), f"{name}/max": _scalar(column.max())}


class MetricsLog:
    """Appends records to ``metrics.jsonl`` (one write per chunk, never through a link)."""

    def __init__(self, path: str):
        self.path = path
        self._fd: int | None = rundir.open_append(path)

    def write(self, records: Iterable[dict]) -> None:
        data = "".join(json.dumps(rec) + "\n" for rec in records).encode("utf-8")
        if data:
            rundir.write_all(self._fd, data)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def _parse(line: bytes) -> dict | None:
    """A record of one line, or None when the line is torn or garbled."""
    try:
        rec = json.loads(line)
    except (ValueError, UnicodeDecodeError):
        return None
    ok = isinstance(rec, dict) and isinstance(rec.get("update"), int) and not isinstance(rec.get("update"), bool)
    return rec if ok else None


def _read_lines(path: str) -> list[bytes]:
    """The lines of a regular file: a FIFO or device (``metrics.jsonl -> /dev/zero``) would
    block or never end, so it is refused in one line (:class:`~jaxrl.run.rundir.RunDirError`)."""
    import stat

    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)  # a FIFO opens without a writer
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise rundir.RunDirError(f"{rundir.display_path(path)} is not a regular file; refusing to read it (remove it first)")
        return f.read().split(b"\n")


def read_metrics(path: str) -> list[dict]:
    """The good records of a ``metrics.jsonl`` file (empty if there is none); torn or
    garbled lines are skipped."""
    if not os.path.exists(path):
        return []
    return [rec for rec in map(_parse, _read_lines(path)) if rec is not None]


def repair_metrics(path: str, last_update: int) -> tuple[list[dict], list[str]]:
    """Keep the good records of updates ``<= last_update`` (a resumed run redoes the rest)
    and rewrite the file atomically; returns ``(kept, warnings)``, one line per problem:
    a missing file, torn or garbled lines dropped, updates whose records are missing."""
    name = os.path.basename(path)
    rundir.refuse_link(path)  # rewritten below: a link's target is neither read nor replaced
    if not os.path.exists(path):
        if last_update <= 0:
            return [], []
        return [], [f"{name} is missing: the records of updates 1-{last_update} are lost; the run continues"]
    lines = [line for line in _read_lines(path) if line.strip()]
    parsed = [_parse(line) for line in lines]
    warnings = []
    bad = sum(rec is None for rec in parsed)
    if bad:
        torn = parsed[-1] is None
        what = "a torn last line" if bad == 1 and torn else f"{bad} unreadable line{'s' if bad > 1 else ''}"
        warnings.append(f"{name}: dropped {what} (a crash or a full disk mid-write)")
    kept, seen = [], set()
    for rec in parsed:
        if rec is not None and rec["update"] <= last_update and rec["update"] not in seen:
            seen.add(rec["update"])
            kept.append(rec)
    missing = last_update - len(seen)
    if missing > 0:
        warnings.append(f"{name}: the records of {missing} of updates 1-{last_update} are missing; the run continues")
    rundir.write_text(path, "".join(json.dumps(rec) + "\n" for rec in kept))
    return kept, warnings


def truncate_metrics(path: str, last_update: int) -> list[dict]:
    """Drop records after ``last_update`` (a resumed run rewrites them); returns the kept."""
    return repair_metrics(path, last_update)[0]


def return_key(names: Iterable[str]) -> str | None:
    """The metric that holds the training return, if any (for progress and plots)."""
    names = list(names)
    for key in RETURN_KEYS:
        if key in names:
            return key
    candidates = [n for n in names if "return" in n and "/" not in n]
    return candidates[0] if candidates else None


def as_floats(values) -> np.ndarray:
    """Numbers (or lists with ``None`` for a missing seed) as a float array with NaNs."""
    return np.array([[np.nan if x is None else x for x in v] if isinstance(v, list) else v for v in values], np.float64)


def curve_labels(records: Sequence[dict], curve=None, step_unit: str = "env steps") -> tuple:
    """``(metric key, y label, x label)`` of a learning curve: ``curve.metric`` named by its
    label (e.g. "sampled reward (return_mean)"), else the training return, against
    ``step_unit`` per seed."""
    key = curve.metric if curve is not None else return_key({k for r in records for k in r})
    label = f"{curve.label} ({key})" if curve is not None else key
    return key, label, f"{step_unit} (per seed)"


def plot_learning_curve(records: Sequence[dict], path: str, title: str = "", curve=None, step_unit: str = "env steps") -> str | None:
    """Write a PNG of the training return (or ``curve.metric``, labelled ``curve.label``, a
    :class:`~jaxrl.algos.contract.Curve`) against ``step_unit`` (mean and min-max band)."""
    key, label, xlabel = curve_labels(records, curve, step_unit)
    records = [r for r in records if key is not None and key in r]
    if not records:
        return None
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure  # not pyplot: no global figure state, no backend switch

    steps = np.array([r["env_steps"] for r in records], np.float64)
    values = as_floats([r[key] for r in records])
    fig = Figure(figsize=(6, 4))
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    if values.ndim == 2:  # per-seed lists
        for s in range(values.shape[1]):
            ax.plot(steps, values[:, s], lw=0.8, alpha=0.6)
        ax.plot(steps, np.nanmean(values, axis=1), lw=2, color="k", label="mean")
    else:
        ax.plot(steps, values, lw=2, label=label)
        if f"{key}/min" in records[-1]:
            lo = as_floats([r.get(f"{key}/min") for r in records])
            hi = as_floats([r.get(f"{key}/max") for r in records])
            ax.fill_between(steps, lo, hi, alpha=0.25, label="min-max over seeds")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(label)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right")
    fig.tight_layout()
    png = io.BytesIO()
    fig.savefig(png, format="png", dpi=100)
    rundir.write_bytes(path, png.getvalue())
    return path


class Progress:
    """A tqdm bar over ``unit`` (env steps or tokens, all seeds) with their rate, the recent
    training metric (named ``label``: "return", "sampled reward") and ETA."""

    def __init__(self, total: int, initial: int = 0, enabled: bool = True, unit: str = "env steps", label: str = "return"):
        from tqdm.auto import tqdm

        self.label = label
        self._bar = tqdm(
            total=total, initial=initial, unit=" " + unit, unit_scale=True, disable=not enabled, dynamic_ncols=True
        )

    def update(self, steps: int, recent_return: float | None = None) -> None:
        if recent_return is not None and math.isfinite(recent_return):
            value = f"{recent_return:.3f}" if abs(recent_return) < 10 else f"{recent_return:.1f}"
            self._bar.set_postfix_str(f"{self.label} {value}", refresh=False)
        self._bar.update(steps)

    def write(self, line: str | None) -> None:
        """Print ``line`` above the bar on stdout (nothing for ``None``)."""
        if line:
            self._bar.write(line, file=sys.stdout)

    def close(self) -> None:
        self._bar.close()
