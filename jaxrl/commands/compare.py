"""``jaxrl compare RUN...``: runs aggregated over seeds and tasks, with stratified bootstrap intervals.

The statistics are :mod:`jaxrl.run.aggregate`'s; this handler checks the numeric options,
reads the runs, prints the comparison and writes ``--json`` / ``--plot`` when asked
(docs/compare.md).
"""

from __future__ import annotations

import json
import math
import os
import sys

from jaxrl.run import rundir
from jaxrl.run.aggregate import (
    MAX_REPS, CompareError, check_tasks, compare, comparison_json, format_comparison, load_methods, parse_ranges,
    plot_comparison, same_runs,
)

__all__ = ["main_compare"]


def main_compare(args) -> int:
    """``jaxrl compare RUN... [--method NAME=RUN,...] [--normalize TASK=LOW:HIGH] ...``:
    print the comparison, and write ``--json`` / ``--plot`` when asked."""
    checks = [
        (100 <= args.reps <= MAX_REPS, f"--reps: need at least 100 and at most {MAX_REPS:,} bootstrap resamples, got {args.reps:,}"),
        (args.seed >= 0, f"--seed: must be >= 0, got {args.seed}"), (args.last >= 1, f"--last: must be >= 1, got {args.last}"),
        (args.gamma is None or math.isfinite(args.gamma), f"--gamma: must be finite, got {args.gamma}"),
        *((os.path.isdir(os.path.dirname(os.path.abspath(out))) and not os.path.isdir(out),
           f"{out!r}: name a file in an existing folder") for out in (args.json, args.plot) if out),
    ]
    for ok, line in checks:
        if not ok:
            raise CompareError(line)
    methods = load_methods(args.runs, args.method, args.metric, args.last)
    tasks = check_tasks(methods)
    changed = {r.task for m in methods for r in m.runs if r.config["env"].get("params") or r.config["env"].get("eval_params")}
    ranges = parse_ranges(args.normalize, tasks, args.raw, changed)
    gamma = args.gamma if args.gamma is not None else (1.0 if ranges is not None else None)
    result = compare(methods, ranges, gamma, args.reps, args.seed)
    for a, b in same_runs(methods):
        print(f"jaxrl: warning: {a!r} and {b!r} trained the same config with the same train.seed; their scores are "
              "counted as independent seeds but are one run's", file=sys.stderr)
    print(format_comparison(result))
    if args.json:
        rundir.write_text(args.json, json.dumps(comparison_json(result), indent=2))
        print(f"jaxrl: wrote {args.json}")
    if args.plot:
        plot_comparison(result, args.plot)
        print(f"jaxrl: wrote {args.plot}")
    return 0
