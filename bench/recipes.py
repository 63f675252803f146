"""Run the recipe configs through the trainer and record what they reach and how fast.

For each ``configs/<name>.yaml`` this runs exactly what ``jaxrl train configs/<name>.yaml``
runs (:func:`jaxrl.run.trainer.run`: chunked training, checkpoints, final evaluation) in a
fresh process, so compile time is included as a user sees it, and records:

* wall time of the whole run (compile included; a fresh process, no compilation cache),
  and of the first chunk (an upper bound on compile time) apart from the rest,
* the final evaluation (deterministic and stochastic policy: mean, std, 95% CI),
* the learning curve (training episode return against env steps),
* whether the target mean eval return (issue 3) was reached within the time budget,
* its own provenance (``meta``: time, command, CPU, load average, versions).

One record per recipe and override set, all in one study: ``bench/results/recipes.json``
(``.csv`` without the curves, ``.png`` one panel per record, ``.md`` the table). A run
replaces the records it re-measures and keeps the others. The run directory itself
(checkpoints, ``metrics.jsonl``) is temporary. Usage::

    python bench/recipes.py                       # the recipes in TARGETS, one seed each
    python bench/recipes.py ppo_pendulum --set ppo.optim.lr=1e-3
    python bench/recipes.py ppo_acrobot ppo_pendulum --set train.seeds=4
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import common  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
NAME = "recipes"

#: name -> (target mean deterministic eval return, time budget in seconds), from issue 3.
TARGETS = {
    "ppo_cartpole": (475.0, 60.0),
    "ppo_acrobot": (-100.0, 300.0),
    "ppo_mountaincar_continuous": (90.0, 300.0),
    "ppo_pendulum": (-250.0, 300.0),
    "ppo_brax_inverted_pendulum": (950.0, 120.0),  # issue 5
    "ppo_rnn_cartpole_pomdp": (475.0, 120.0),  # issue 15: >= 15/16 seeds in <= 2 minutes
}

_CHILD = """
import sys, time
t0 = time.perf_counter()
from jaxrl.run import config, trainer
cfg = config.load_config(sys.argv[1], sys.argv[4:])
trainer.run(cfg, run_dir=sys.argv[2], init_from=sys.argv[3] or None)
print("TOTAL_S", time.perf_counter() - t0)
"""


def run_recipe(name: str, overrides: list[str], init_from: str | None = None, keep_dir: str | None = None) -> dict:
    """Train one recipe in a fresh process; returns its record (curve included), with
    ``cpu_s_total``: the process's user + system seconds (what ``/usr/bin/time`` reports).
    ``init_from``: a run directory whose learned parameters start this run (``jaxrl train
    --init-from``); ``keep_dir``: the run directory, kept (else a temporary one)."""
    path = REPO / "configs" / f"{name}.yaml"
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(keep_dir) if keep_dir else Path(tmp) / "run"
        cmd = [sys.executable, "-c", _CHILD, str(path), str(run_dir), init_from or "", "train.progress=false", *overrides]
        log = Path(tmp) / "train.log"
        proc = common.timed_process(cmd, str(log), nice=False)
        if proc["returncode"] != 0:
            raise RuntimeError(f"{name} failed:\n{log.read_text()[-3000:]}")
        records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
        summary = json.loads((run_dir / "eval.json").read_text())
        stop = run_dir / "stopped.json"  # train.stop_at ended the run early
        stopped = json.loads(stop.read_text()) if stop.exists() else None
    record = make_record(name, " ".join(overrides), records, summary, proc["wall_s"], common.run_meta())
    record["stopped"] = stopped
    record["cpu_s_total"] = proc["cpu_s"]
    return record


def make_record(name: str, overrides: str, records: list[dict], summary: dict, wall_s_total: float | None, meta: dict) -> dict:
    """The record of one run from its ``metrics.jsonl`` rows and ``eval.json`` summary."""
    target, budget = TARGETS.get(name, (None, None))
    det = summary["policies"].get("deterministic") or summary["policies"]["greedy"]  # policy-gradient / Q-learning
    sto = summary["policies"].get("stochastic", {})
    per_seed = summary.get("per_seed", {}).get("return_mean", [])
    return {
        "recipe": name,
        "overrides": overrides,
        "env_steps_per_seed": records[-1]["env_steps"],
        "seeds": summary["seeds"],
        "wall_s_total": wall_s_total,
        "wall_s_first_chunk_incl_compile": round(records[0]["wall_time"], 2),
        "train_wall_s": round(records[-1]["wall_time"], 2),
        "steps_per_s_after_first_chunk": _steady_rate(records, summary["seeds"]),
        "eval_det_mean": round(det["mean"], 2),
        "eval_det_std": round(det["std"], 2),
        "eval_det_ci95": [round(det["ci95_low"], 2), round(det["ci95_high"], 2)],
        "eval_sto_mean": round(sto.get("mean", float("nan")), 2),
        "eval_episodes": det["episodes"],
        "updates": records[-1]["update"],
        # every score of the evaluation (PPO: deterministic, stochastic; GRPO: greedy reward,
        # exact match, a text task's own scores), as eval.json has them
        "policies": summary["policies"],
        "eval_det_mean_per_seed": [round(v, 2) for v in per_seed],
        # seeds whose own deterministic mean reaches the target (issue 15 counts seeds)
        "seeds_at_target": None if target is None or not per_seed else sum(v >= target for v in per_seed),
        "target": target,
        "budget_s": budget,
        "reached_target": None if target is None else bool(det["mean"] >= target),
        "within_budget": None if wall_s_total is None or budget is None else bool(wall_s_total <= budget),
        "meta": meta,
        # Updates in which an episode ended; with several seeds, the mean over seeds.
        "curve": {
            "env_steps": [r["env_steps"] for r in records if "episode_return" in r],
            "episode_return": [round(r["episode_return"], 3) for r in records if "episode_return" in r],
        },
    }


def _steady_rate(records: list[dict], seeds: int) -> float | None:
    """Env steps/s (all seeds) after the first chunk, whose wall time includes compilation."""
    first = records[0]["wall_time"]
    later = [r for r in records if r["wall_time"] > first]
    if not later:
        return None
    first_steps = max(r["env_steps"] for r in records if r["wall_time"] == first)
    return round((later[-1]["env_steps"] - first_steps) * seeds / (later[-1]["wall_time"] - first), 1)


def _label(rec: dict) -> str:
    return rec["recipe"] + (f" ({rec['overrides']})" if rec["overrides"] else "")


def plot_all(records: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cols = min(4, len(records))
    rows = -(-len(records) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4 * cols, 3.2 * rows), squeeze=False)
    for ax in axes.flat[len(records):]:
        ax.axis("off")
    for ax, rec in zip(axes.flat, records):
        ax.plot(rec["curve"]["env_steps"], rec["curve"]["episode_return"], lw=1.5)
        if rec["recipe"] in TARGETS:
            ax.axhline(TARGETS[rec["recipe"]][0], color="r", ls="--", lw=1, label="target")
        ax.set_title(_label(rec), fontsize=8)
        ax.set_xlabel("env steps")
        ax.grid(alpha=0.3)
    for row in axes:
        row[0].set_ylabel("training episode return")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def markdown(records: list[dict]) -> str:
    """``recipes.md``: one row per record, with where and when it was measured."""
    lines = [
        "# Recipe results (issue 3 and 5 targets)",
        "",
        "Generated by `bench/recipes.py` from `recipes.json` (each record's curve, exact command,",
        "machine, load and versions are there). Wall time: the whole `jaxrl train` command in a",
        "fresh process, compile included; eval: mean return of the deterministic policy with a",
        "Student-t 95% CI of the mean, the stochastic policy's mean beside it.",
        "",
        "| recipe | seeds | env steps per seed | wall s (whole command) | eval return (det.) | 95% CI | per seed | seeds >= target | stochastic | target | met (mean) | load avg 1m | measured |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in records:
        wall = r["wall_s_total"] if r["wall_s_total"] is not None else f"{r['train_wall_s']} (training only)"
        per_seed = ", ".join(str(v) for v in r["eval_det_mean_per_seed"]) if r["seeds"] > 1 else ""
        at = r.get("seeds_at_target")
        solved = "" if at is None or r["seeds"] == 1 else f"{at}/{r['seeds']}"
        target = "" if r["target"] is None else f">= {r['target']}"
        met = {None: "", True: "yes", False: "no"}[r["reached_target"]]
        load = r["meta"].get("load_average_1m")
        lines.append(
            f"| {_label(r)} | {r['seeds']} | {r['env_steps_per_seed']:,} | {wall} | {r['eval_det_mean']} ({r['eval_episodes']} ep.) | "
            f"{r['eval_det_ci95']} | {per_seed} | {solved} | {r['eval_sto_mean']} | {target} | {met} | "
            f"{'' if load is None else f'{load:.1f}'} | {(r['meta'].get('utc') or '')[:10]} |"
        )
    return "\n".join(lines) + "\n"


def write_study(records: dict[tuple[str, str], dict]) -> None:
    """Write ``recipes.{json,csv,png,md}`` from the records, the ``TARGETS`` recipes first."""
    order = {name: i for i, name in enumerate(TARGETS)}
    ordered = sorted(records.values(), key=lambda r: (order.get(r["recipe"], len(order)), r["recipe"], r["overrides"]))
    meta = {"note": "one record per recipe and override set; each carries its own provenance in 'meta'; "
                    "wall_s_total is the whole command in a fresh process (imports and compilation included)"}
    common.write_results(NAME, ordered, meta)
    plot_all(ordered, common.RESULTS_DIR / f"{NAME}.png")
    (common.RESULTS_DIR / f"{NAME}.md").write_text(markdown(ordered))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", default=list(TARGETS), help="recipe names (configs/<name>.yaml)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override for every recipe")
    args = parser.parse_args(argv)
    results_path = common.RESULTS_DIR / f"{NAME}.json"
    records = {}
    if results_path.exists():  # keep the records not re-run this time
        records = {(r["recipe"], r["overrides"]): r for r in json.loads(results_path.read_text()).get("records", [])}
    for name in args.names:
        record = run_recipe(name, args.set)
        records[(name, record["overrides"])] = record
        print(json.dumps({k: v for k, v in record.items() if k != "curve"}), flush=True)
    write_study(records)
    return 0


if __name__ == "__main__":
    sys.exit(main())
