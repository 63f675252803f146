"""Every documented recipe's whole training run on seeds it was not tuned on (issue 42, item 1): one record.

    python bench/recipe_seeds.py --list                       # the quoted figures, their source, the cost
    python bench/recipe_seeds.py --all                        # every runnable claim, cheapest first
    python bench/recipe_seeds.py --all --max-cpu 200          # ... those costing <= 200 CPU-s a seed
    python bench/recipe_seeds.py ppo_cartpole grpo_sort       # named recipes, train.seed 1-4
    python bench/recipe_seeds.py ppo_acrobot --seeds 1 2 3 4 5 --set ppo.optim.lr=3e-3
    python bench/recipe_seeds.py --fold                       # rewrite the markdown from the record

Each seed is one fresh process running what ``jaxrl train configs/<name>.yaml --set
train.seed=S`` runs (``bench/recipes.py``'s ``run_recipe``: chunked training, the recipe's own
``train.stop_at`` where it has one, the final evaluation), one after the other; a GRPO stage
that starts from an SFT run (``--init-from``) runs that SFT recipe first with the same seed,
and both stages' figures and seconds are kept. :data:`CLAIMS` lists every shipped recipe whose
figure the docs quote: the figure, where it is quoted, the eval metric it reads (``eval.json``'s
policy key: PPO ``deterministic``, DQN/PQN ``greedy``, GRPO ``exact match`` or ``greedy``
reward, a text task's own score), the target and an estimate of one seed's CPU seconds.

The record, ``bench/results/recipe_seeds.{json,md}``, holds per recipe the per-seed final
figures, their range, the seeds at target, CPU and wall seconds and the load. It is written
after every seed: a recipe's stored seeds are kept unless it is re-run (``--rerun``), so a
sweep done in several invocations, or stopped part-way, loses nothing. A run with ``--set``
overrides (a retuning trial) is its own entry, beside the shipped recipe's.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import common  # noqa: E402
from bench.recipes import run_recipe  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "bench" / "results"
STEM = RESULTS / "recipe_seeds"


@dataclass(frozen=True)
class Claim:
    """A recipe's documented figure and how the sweep reads it."""

    metric: str  # eval.json policy key whose mean is the figure
    target: float | None  # the figure must be >= target (<= with lower_is_better); None: quoted, no target
    claim: str  # the figure as the docs quote it
    where: str  # where it is quoted
    cpu_s: float  # estimated CPU seconds of one seed's whole run (both stages), from bench/results
    source: str  # the record the estimate comes from
    init_from: str | None = None  # an SFT recipe whose run (same seed) this one starts from
    lower_is_better: bool = False
    runnable: str = ""  # why the sweep does not run it here ("" = it does)
    extra: tuple[str, str] | None = None  # (pip extra, module): --all runs it where the module imports

    def why_not(self) -> str:
        """Why ``--all`` skips it on this machine ("" = it runs it)."""
        if self.runnable:
            return self.runnable
        if self.extra and importlib.util.find_spec(self.extra[1]) is None:
            return f"needs the [{self.extra[0]}] extra (`pip install -e .[{self.extra[0]}]`), not installed here"
        return ""

    def met(self, value: float | None) -> bool | None:
        if self.target is None or value is None:
            return None
        return value <= self.target if self.lower_is_better else value >= self.target


R = "docs/results.md"
#: Every shipped recipe whose figure README.md, docs/*.md or its own header quotes, cheapest first.
CLAIMS: dict[str, Claim] = {
    "ppo_cartpole": Claim("deterministic", 475.0, "eval 500; 16/16 seeds >= 475", f"{R} (PPO); README.md; config header",
                          12, "this record (11.4-11.8 CPU-s)"),
    "ppo_acrobot": Claim("deterministic", -100.0, ">= -100 in 5 min: -85.7 in 18.7 s", f"{R} (PPO)", 20,
                         "recipes.json (18.7 s wall, load 3.5)"),
    "grpo_reverse": Claim("exact match", 0.95, "held-out greedy exact match 1.000, stops at 100-170 updates (seeds 0-7)",
                          f"{R} (GRPO, Ecosystem); README.md; config header", 30, "grpo_reverse_process.json (22.3 s wall)"),
    "dqn_cartpole": Claim("greedy", 475.0, ">= 475 on >= 15/16 seeds: 15/16, mean 496.1", f"{R} (issue 15); docs/value_methods.md",
                          30, "offpolicy_vs_rejax.json (41.4 s for 16 seeds vmapped)"),
    "ppo_mountaincar_continuous": Claim("deterministic", 90.0, ">= 90 in 5 min: 93.4 in 22.4 s", f"{R} (PPO)", 35,
                                        "recipes.json (22.4 s wall)"),
    "sac_pendulum": Claim("deterministic", -200.0, ">= -200 on >= 15/16 seeds: 15/16, mean -160.2", f"{R} (issue 15); docs/value_methods.md",
                          40, "offpolicy_vs_rejax.json (43.0 s for 16 seeds)"),
    "ppo_pendulum": Claim("deterministic", -250.0, ">= -250 in 5 min: -120.3 in 31.7 s", f"{R} (PPO)", 50,
                          "recipes.json (31.7 s wall)"),
    "pqn_cartpole": Claim("greedy", 475.0, ">= 475 on >= 15/16 seeds: 15/16, mean 485.5", f"{R} (issue 15); docs/value_methods.md",
                          50, "offpolicy_vs_rejax.json (68.6 s for 16 seeds)"),
    "ppo_rnn_cartpole_pomdp": Claim("deterministic", 475.0, ">= 475 on >= 15/16 seeds: 15/16, mean 491.8",
                                    f"{R} (issue 15); docs/recurrent.md", 50, "recipes.json (105 s for 16 seeds)"),
    "grpo_cartpole": Claim("greedy", 475.0, "GRPO on CartPole >= 475: 500 after 20 updates", f"{R} (GRPO)", 60,
                           "grpo_cartpole.json (110 s wall at load 18)"),
    "ppo_brax_inverted_pendulum": Claim("deterministic", 950.0, ">= 950 in 2 min: 1000 in 37.5 s",
                                        f"{R} (Physics); README.md; config header", 60, "recipes.json (37.5 s wall, quiet)"),
    "ppo_mjx_cartpole": Claim("deterministic", None, "1000 / 1000, stops at 256k of 409.6k steps", f"{R} (Physics); README.md",
                              30, "this record (26-29 CPU-s)"),
    "sac_brax_inverted_pendulum": Claim("deterministic", 950.0, ">= 950: 7 of 8 seeds at 1000.0",
                                        f"{R} (issue 15); docs/value_methods.md; config header", 100,
                                        "docs/value_methods.md (160 s whole command for 4 seeds)"),
    "grpo_tool_addition": Claim("exact match", 0.9, "held-out exact match >= 0.9 in 5 min: 1.000, stops at 300 updates",
                                f"{R} (issue 16); docs/dialogues.md", 150, "grpo_tool_addition.json (148 CPU-s)"),
    "grpo_guess_number": Claim("turns", 6.0, "held-out mean turns 3.82 (<= 6 = log2(16) + 1 + 1), 93.0% solved",
                               f"{R} (issue 16); docs/dialogues.md; config header", 160, "this record (154-164 CPU-s)",
                               lower_is_better=True),
    "grpo_sort": Claim("exact match", 0.9, "sort-6 >= 0.9: 0.912 at 825 updates (budget 1,200 updates)",
                       f"{R} (GRPO); config header", 170, "grpo_sort.json (106.6 CPU-s for 825 updates)"),
    "grpo_word_problems": Claim("correct", 0.9, "SFT 0.918, after GRPO 0.959 held-out correct (target >= 0.9)",
                                "docs/text_tasks.md; docs/sft.md; README.md", 180, "text_recipes.json (96.3 + 25.0 s wall, quiet)",
                                init_from="sft_word_problems"),
    "ppo_brax_inverted_double_pendulum": Claim("deterministic", None, "9,350.8 at 512k steps (max ~9,350)",
                                               f"{R} (Physics); README.md", 65, "this record (62-66 CPU-s)"),
    "grpo_alphabet_sort": Claim("greedy", 0.9, "held-out mean reward >= 0.9: 0.901 at 2,300 updates, seeds 0-4 all reach 0.9",
                                f"{R} (GRPO); config header", 220, "this record (213-220 CPU-s)"),
    "ppo_minatar_breakout_cnn_500k": Claim("stochastic", None, "training return 21.66 vs the MLP's 17.84 (8 held-out seeds)",
                                           f"{R} (issue 27); docs/networks.md; config header", 60,
                                           "this record (58-61 CPU-s)"),
    "ppo_playground_cartpole_balance": Claim("deterministic", None, "eval 997.2", f"{R} (Ecosystem)", 46,
                                             "this record (43-48 CPU-s)",
                                             extra=("playground", "mujoco_playground")),
    "ppo_craftax_classic_1m": Claim("stochastic", None, "training return 4.65, stochastic eval 4.32",
                                    f"{R} (Ecosystem)", 350, "this record (349-354 CPU-s)",
                                    extra=("craftax", "craftax")),
    "grpo_alphabet_sort_text": Claim("greedy", 0.9, "SFT 0.962, after GRPO 0.959 held-out reward (target >= 0.9)",
                                     "docs/text_tasks.md; docs/sft.md", 300, "this record (282-303 CPU-s, both stages)",
                                     init_from="sft_alphabet_sort_text"),
    "grpo_alphabet_sort_turns": Claim("greedy", 0.9, "held-out mean reward >= 0.9 in 5 min: 0.920 in 251.5 s",
                                      f"{R} (issue 16); docs/dialogues.md", 450, "this record (401-459 CPU-s)"),
    "ppo_jumanji_binpack": Claim("deterministic", None, "masked 0.68 vs unmasked 0.33 (4 seeds)",
                                 f"{R} (issue 27); docs/masks.md", 118, "this record (115-118 CPU-s)"),
    "ppo_jumanji_snake_cnn": Claim("stochastic", None, "sampling return 8.82 vs 1.59 unmasked (4 held-out seeds)",
                                   f"{R} (issue 27); docs/masks.md; config header", 73, "this record (69-73 CPU-s)"),
    "grpo_addition": Claim("exact match", 0.9, "2+2 >= 0.9: seeds 0-6 reach 0.9 (slowest 3,050 updates)",
                           f"{R} (GRPO); config header", 400, "this record (385-399 CPU-s for 6,500 updates)"),
    "mappo_smax_2s3z": Claim("deterministic", None, "team return 9.96 / 9.98, greedy win 0.97 / 1.00 at 999,424 steps",
                             f"{R} (issue 27); docs/multi_agent.md", 730, "this record (724-728 CPU-s at 999,424 steps)",
                             runnable="1e7 steps as shipped, hours on this CPU; the figure is at 999,424: "
                                      "name it with --set mappo.total_env_steps=999424"),
    "ippo_mpe_simple_spread": Claim("deterministic", None, "team return -40.0 (above JaxMARL's band), H200",
                                    f"{R} (issue 27); docs/multi_agent.md", 320, "this record (307-324 CPU-s)"),
    "pqn_minatar_breakout_cnn": Claim("greedy", None, "greedy eval 34.31 vs the MLP's 32.7 (4 seeds, 2M steps)",
                                      "bench/results/minatar_pqn.md; config header", 130, "this record (127-130 CPU-s)"),
}

#: Shipped recipes that quote no figure of their own run (listed in the record for completeness).
NOT_CLAIMED = {
    "ppo_cartpole_randomized": "figure is bench/domain_randomization.py's evaluation at fixed pole lengths, not the run's eval",
    "ppo_craftax_classic": "Craftax_Baselines' GPU settings; no CPU figure",
    "ppo_minatar_breakout": "10M steps (hours); bench/ecosystem_recipes.py runs shorter budgets",
    "ppo_minatar_breakout_500k": "the MLP side of the CNN comparison (ppo_minatar_breakout_cnn_500k)",
    "ppo_minatar_breakout_cnn": "10M-step GPU recipe",
    "ppo_jumanji_snake": "the MLP comparison of ppo_jumanji_snake_cnn",
    "ppo_jumanji_knapsack": "one seed quoted (15.73) beside random baselines; no target",
    "grpo_tool_addition_notool": "the tool-less comparison (0.002): a floor, not a target",
    "grpo_parity": "docs/rlvr.md uses it to show a stall",
    "grpo_lm_reverse": "a tiny random checkpoint: no figure claimed",
    "grpo_qwen2.5_0.5b_gsm8k": "for a GPU with local weights: no figure claimed",
    "sft_word_problems": "measured as the first stage of grpo_word_problems",
    "sft_alphabet_sort_text": "measured as the first stage of grpo_alphabet_sort_text",
    "sft_pick_larger": "another helper's (issue 42 item 2)",
    "grpo_pick_larger": "another helper's (issue 42 item 2)",
}


def _figures(rec: dict) -> dict:
    return {k: round(v["mean"], 4) for k, v in rec["policies"].items()}


def run_seed(name: str, claim: Claim, seed: int, overrides: list[str]) -> dict:
    """One seed of ``name`` (its SFT stage first where it has one): the per-seed row."""
    load = os.getloadavg()[0]
    sets = [*overrides, f"train.seed={seed}"]
    row: dict = {"seed": seed, "load_before": round(load, 2)}
    try:
        with tempfile.TemporaryDirectory() as tmp:
            wall = cpu = 0.0
            if claim.init_from:
                first = run_recipe(claim.init_from, [f"train.seed={seed}"], keep_dir=os.path.join(tmp, "init"))
                row["init"] = {"recipe": claim.init_from, "figures": _figures(first), "wall_s": first["wall_s_total"],
                               "cpu_s": first["cpu_s_total"], "figure": first["policies"].get(claim.metric, {}).get("mean")}
                wall, cpu = first["wall_s_total"], first["cpu_s_total"]
            rec = run_recipe(name, sets, init_from=os.path.join(tmp, "init") if claim.init_from else None)
    except RuntimeError as exc:
        row.update(error=str(exc)[-1500:], figure=None, at_target=False)
        return row
    pol = rec["policies"].get(claim.metric)
    if pol is None:
        raise SystemExit(f"recipe_seeds: {name}'s eval.json has no {claim.metric!r} score (it has {sorted(rec['policies'])})")
    row.update(figure=round(pol["mean"], 4), ci95=[round(pol["ci95_low"], 4), round(pol["ci95_high"], 4)],
               episodes=pol["episodes"], figures=_figures(rec), at_target=claim.met(pol["mean"]),
               env_steps=rec["env_steps_per_seed"], updates=rec["updates"], stopped=rec["stopped"],
               wall_s=round(wall + rec["wall_s_total"], 2), cpu_s=round(cpu + rec["cpu_s_total"], 1),
               load_after=round(os.getloadavg()[0], 2), curve=rec["curve"])
    return row


def summary(name: str, claim: Claim, rows: list[dict], overrides: list[str]) -> dict:
    """The recipe's entry of the record: its rows, range, seeds at target, seconds, load."""
    figs = [r["figure"] for r in rows if r.get("figure") is not None]
    return {
        "recipe": name, "overrides": overrides, "metric": claim.metric, "target": claim.target,
        "lower_is_better": claim.lower_is_better, "claim": claim.claim, "where": claim.where,
        "init_from": claim.init_from, "seeds": rows,
        "range": [min(figs), max(figs)] if figs else None,
        "seeds_at_target": None if claim.target is None else sum(bool(r.get("at_target")) for r in rows),
        "cpu_s": round(sum(r.get("cpu_s", 0.0) for r in rows), 1),
        "wall_s": round(sum(r.get("wall_s", 0.0) for r in rows), 1),
        "load": [min(r["load_before"] for r in rows), max(r["load_before"] for r in rows)],
        "utc": common.metadata()["utc"], "git": common.git_rev(),
    }


def load_record() -> dict:
    path = STEM.with_suffix(".json")
    record = json.loads(path.read_text()) if path.exists() else {"recipes": {}}
    _fold_old(record)
    return record


def _fold_old(record: dict) -> None:
    """Fold the per-recipe records (``recipe_seeds_<name>.json``) the first version wrote."""
    for path in sorted(RESULTS.glob("recipe_seeds_*.json")):
        old = json.loads(path.read_text())
        name = old["recipe"]
        claim = CLAIMS.get(name)
        if claim is None or name in record["recipes"] or claim.metric not in ("deterministic", "greedy"):
            continue  # the old records hold the deterministic (or greedy) mean only
        rows = [{"seed": r["seed"], "load_before": round(r["load_before"], 2), "figure": r["eval_det_mean"],
                 "ci95": r["eval_det_ci95"], "episodes": r["eval_episodes"], "at_target": claim.met(r["eval_det_mean"]),
                 "env_steps": r["env_steps"], "wall_s": r["wall_s"], "cpu_s": r["cpu_s"], "curve": r["curve"]}
                for r in old["seeds"]]
        entry = summary(name, claim, rows, old["overrides"])
        entry.update(utc=old["meta"]["utc"], git=old["meta"]["git"], folded_from=path.name)
        record["recipes"][name] = entry


def write(record: dict) -> None:
    order = {n: i for i, n in enumerate(CLAIMS)}
    record["recipes"] = dict(sorted(record["recipes"].items(),
                                    key=lambda kv: (order.get(kv[1]["recipe"], len(order)), kv[0])))
    record["meta"] = common.metadata({"git": common.git_rev(), "nice": 19,
                                      "note": "each recipe entry carries its own utc, git, loads and seconds"})
    common.write_record(str(STEM), record, markdown)


def _fmt(v) -> str:
    return "-" if v is None else f"{v:g}" if isinstance(v, float) else str(v)


def markdown(record: dict, path: str) -> None:
    lines = ["# Every documented recipe on seeds it was not tuned on (issue 42)", "",
             "`python bench/recipe_seeds.py --all` (or named recipes): each seed one fresh process running "
             "what `jaxrl train configs/<recipe>.yaml --set train.seed=S` runs (its `train.stop_at` where it has one, "
             "the final evaluation), `nice -n 19` on the shared 2-core CPU (one process at a time, or two sweeps "
             "side by side: wall seconds then count the wait for a core, CPU seconds do not); a GRPO recipe "
             "started from SFT runs its SFT recipe first with the same seed (seconds of both stages). Figure: the "
             "final evaluation's mean of the metric named (PPO/SAC: deterministic return; DQN/PQN: greedy return; "
             "GRPO: held-out greedy exact match, reward or the task's own score).", "",
             f"Machine: {record['meta']['machine']['cpu_model']}, {record['meta']['machine']['cpus_usable']} cores usable, "
             f"jax {record['meta']['versions'].get('jax')}; each recipe's row names when and at which commit it ran, and the "
             "1-minute load average before its seeds (other sessions shared the machine).", "",
             "## Results", "",
             "| recipe | metric | target | per-seed figure (train.seed: value) | range | seeds at target | CPU s | wall s | load 1m | measured |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for name, e in record["recipes"].items():
        per = ", ".join(f"{r['seed']}: {'failed' if r.get('error') else _fmt(r['figure'])}" for r in e["seeds"])
        tgt = "-" if e["target"] is None else ("<= " if e["lower_is_better"] else ">= ") + _fmt(e["target"])
        at = "-" if e["seeds_at_target"] is None else f"{e['seeds_at_target']} of {len(e['seeds'])}"
        rng = "-" if e["range"] is None else f"{_fmt(e['range'][0])} to {_fmt(e['range'][1])}"
        over = "".join(f" `{o}`" for o in e["overrides"])
        lines.append(f"| {e['recipe']}{over} | {e['metric']} | {tgt} | {per} | **{rng}** | {at} | {e['cpu_s']} | {e['wall_s']} | "
                     f"{e['load'][0]:.1f}-{e['load'][1]:.1f} | {e['utc'][:16]} at {e['git']} |")
    notes = [(n, e["note"]) for n, e in record["recipes"].items() if e.get("note")]
    if notes:
        lines += [""] + [f"- {n}: {note}" for n, note in notes]
    staged = [(n, e) for n, e in record["recipes"].items() if e.get("init_from")]
    if staged:
        lines += ["", "Two-stage recipes, the SFT stage alone (same seed) and after GRPO:", "",
                  "| recipe | seed | SFT figure | after GRPO | GRPO stopped at update | SFT CPU s | both stages CPU s |", "|---|---|---|---|---|---|---|"]
        for n, e in staged:
            for r in e["seeds"]:
                if "init" in r:
                    stop = (r.get("stopped") or {}).get("update", "-")
                    lines.append(f"| {n} | {r['seed']} | {_fmt(r['init']['figure'])} | {_fmt(r.get('figure'))} | {stop} | "
                                 f"{r['init']['cpu_s']} | {r.get('cpu_s', '-')} |")
    lines += ["", "## The documented figures and whether this record has them", "",
              "Cost: estimated CPU seconds of one seed's whole run, from the record named.", "",
              "| recipe | quoted before this sweep | where | metric | cost / seed (CPU s, source) | swept |", "|---|---|---|---|---|---|"]
    for name, c in CLAIMS.items():
        e = record["recipes"].get(name) or next((v for v in record["recipes"].values() if v["recipe"] == name), None)
        over = "".join(f" `{o}`" for o in (e or {}).get("overrides", []))
        swept = f"{len(e['seeds'])} seeds{over}" if e else ("not run: " + why if (why := c.why_not()) else "not swept")
        lines.append(f"| {name} | {c.claim} | {c.where} | {c.metric} | {c.cpu_s:g} ({c.source}) | {swept} |")
    lines += ["", "Shipped recipes with no figure of their own run quoted:", ""]
    lines += [f"- `{n}`: {why}" for n, why in NOT_CLAIMED.items()]
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def sweep(names: list[str], seeds: list[int], overrides: list[str], rerun: bool) -> None:
    record = load_record()
    for name in names:
        if not (REPO / "configs" / f"{name}.yaml").exists():
            raise SystemExit(f"recipe_seeds: no configs/{name}.yaml")
        claim = CLAIMS.get(name) or Claim("deterministic", None, "-", "-", 0, "-")
        key = " ".join([name, *overrides])  # a retuning trial is kept beside the shipped recipe's entry
        old = record["recipes"].get(key)
        rows = [] if rerun or old is None else [r for r in old["seeds"] if not r.get("error")]
        done = {r["seed"] for r in rows}
        todo = [s for s in seeds if s not in done]
        if not todo:
            print(f"{name}: seeds {seeds} already in the record (--rerun to measure again)", flush=True)
            continue
        mine: list[dict] = []  # the rows this invocation measured; every other seed's row is read from the record as written now
        for s in todo:
            row = run_seed(name, claim, s, overrides)
            mine.append(row)  # todo holds each seed once
            record = load_record()  # what other invocations wrote meanwhile is kept, their seeds of this entry too
            seen = {r["seed"] for r in mine}
            theirs = [r for r in record["recipes"].get(key, {}).get("seeds", []) if r["seed"] not in seen and not r.get("error")]
            rows = sorted([*mine, *theirs], key=lambda r: r["seed"])
            note = record["recipes"].get(key, {}).get("note")
            record["recipes"][key] = summary(name, claim, rows, overrides) | ({"note": note} if note else {})
            write(record)
            print(f"{name} seed {s}: {claim.metric} {row.get('figure')} (target {claim.target}), "
                  f"{row.get('wall_s')} s wall, {row.get('cpu_s')} s CPU{' ERROR' if row.get('error') else ''}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("recipes", nargs="*", help="configs/<recipe>.yaml names, e.g. ppo_cartpole")
    ap.add_argument("--all", action="store_true", help="every runnable recipe in CLAIMS, cheapest first")
    ap.add_argument("--max-cpu", type=float, default=None, help="with --all: only recipes estimated <= this CPU-s a seed")
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3, 4])
    ap.add_argument("--set", action="append", default=[], help="a config override, KEY=VALUE (repeatable)")
    ap.add_argument("--rerun", action="store_true", help="measure the recipes' stored seeds again")
    ap.add_argument("--list", action="store_true", help="print the documented figures and cost estimates")
    ap.add_argument("--fold", action="store_true", help="rewrite the record's markdown (folding older records)")
    args = ap.parse_args()
    if args.list:
        for name, c in sorted(CLAIMS.items(), key=lambda kv: kv[1].cpu_s):
            print(f"{name:36s} {c.cpu_s:6g} CPU-s/seed  {c.metric:13s} {c.claim}  [{c.where}]{'  NOT RUN: ' + why if (why := c.why_not()) else ''}")
        return
    if args.fold:
        write(load_record())
        return
    if args.all == bool(args.recipes):
        ap.error("name recipes or give --all (not both)")
    if args.recipes:
        unknown = [n for n in args.recipes if not (REPO / "configs" / f"{n}.yaml").exists()]
        if unknown:
            ap.error(f"no configs/<name>.yaml for {unknown}")
        names = args.recipes
    else:
        names = [n for n, c in sorted(CLAIMS.items(), key=lambda kv: kv[1].cpu_s)
                 if not c.why_not() and (args.max_cpu is None or c.cpu_s <= args.max_cpu)]
    sweep(names, args.seeds, args.set, args.rerun)


if __name__ == "__main__":
    main()
