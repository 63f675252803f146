"""Masked against unmasked PPO on Jumanji (issue 27): equal env steps, several seeds each.

For each recipe (``configs/ppo_jumanji_<env>.yaml``) trains, each as a fresh whole process
(``bench/recipes.py``'s runner, compile included), with ``train.seeds=N`` vmapped: the recipe
as it is (masked: the env declares its legal actions) and with ``ppo.action_mask=false``;
then plays ``--episodes`` episodes of two baselines in this process: uniformly random
actions, and uniformly random *legal* actions (the mask's own baseline). Writes
``bench/results/masked_ppo.{json,md}`` with the machine's load average (the 2-core machine
is shared: wall times are loaded). Needs the ``[jumanji]`` extra. Usage::

    python bench/masked_ppo.py                          # snake and binpack, 4 seeds
    python bench/masked_ppo.py --recipes knapsack --seeds 4
    python bench/masked_ppo.py --baselines-only         # just the random baselines
    python bench/masked_ppo.py --recipes snake_cnn --compare ppo_jumanji_snake --no-unmasked

``--compare RECIPE`` also trains RECIPE (masked) at the same env steps and seeds (e.g. the MLP
Snake recipe against the conv one; ``--compare-set key=value`` overrides for it alone),
recorded as ``compare``; ``--no-unmasked`` skips the unmasked run.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from bench import common  # noqa: E402
from bench.recipes import run_recipe  # noqa: E402
import jaxrl  # noqa: E402
from jaxrl.algos.common.masks import action_mask_fn  # noqa: E402
from jaxrl.core import spaces  # noqa: E402
from jaxrl.models.distributions import Categorical, MultiCategorical  # noqa: E402
from jaxrl.run.config import load_config  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
NAME = "masked_ppo"


def baseline_returns(env_id: str, overrides: dict, episodes: int, max_steps: int, legal: bool, seed: int = 0) -> np.ndarray:
    """Undiscounted returns ``[episodes]`` of uniformly random actions (``legal``: uniform
    over the legal actions of each observation), each episode capped at ``max_steps``."""
    env, params = jaxrl.make(env_id, **overrides)
    space = env.action_space(params)
    mask_fn = action_mask_fn(env, params) if legal else None

    def act(key, obs):
        if mask_fn is None:
            return space.sample(key)
        mask = mask_fn(obs)
        if isinstance(space, spaces.MultiDiscrete):
            return MultiCategorical(jnp.zeros(mask.shape), mask, space.nvec).sample(key)
        return Categorical(jnp.zeros(mask.shape), mask).sample(key)

    def episode(key):
        state, ts = env.reset(key, params)

        def body(carry, k):
            state, obs, alive, total = carry
            state, ts = env.step(k, state, act(k, obs), params)
            return (state, ts.obs, alive & ~ts.done, total + jnp.where(alive, ts.reward, 0.0)), None

        init = (state, ts.obs, jnp.bool_(True), jnp.float32(0.0))
        return jax.lax.scan(body, init, jax.random.split(key, max_steps))[0][3]

    keys = jax.random.split(jax.random.PRNGKey(seed), episodes)
    return np.asarray(jax.jit(jax.vmap(episode))(keys))


def _cap(cfg) -> int:
    params = dict(cfg.env.params)
    if "max_steps_in_episode" in params:
        return int(params["max_steps_in_episode"])
    if cfg.algo_config.eval_max_steps is not None:
        return int(cfg.algo_config.eval_max_steps)
    env, p = jaxrl.make(cfg.env.id, **params)
    return int(env.episode_bound(p))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--recipes", nargs="+", default=["snake", "binpack"], help="ppo_jumanji_<name>.yaml recipes")
    ap.add_argument("--seeds", type=int, default=4, help="seeds per run (vmapped, train.seeds)")
    ap.add_argument("--episodes", type=int, default=256, help="episodes per random baseline")
    ap.add_argument("--baselines-only", action="store_true", help="skip training")
    ap.add_argument("--set", action="append", default=[], help="extra overrides for every run (key=value)")
    ap.add_argument("--compare", default=None, help="another recipe trained at the same env steps (e.g. ppo_jumanji_snake)")
    ap.add_argument("--compare-set", action="append", default=[], help="overrides for the --compare run only (key=value)")
    ap.add_argument("--no-unmasked", action="store_true", help="skip the ppo.action_mask=false run")
    args = ap.parse_args()
    out_json = common.RESULTS_DIR / f"{NAME}.json"
    old = json.loads(out_json.read_text())["records"] if out_json.exists() else []
    records = [r for r in old if r["recipe"] not in {f"ppo_jumanji_{n}" for n in args.recipes}]
    for name in args.recipes:
        recipe = f"ppo_jumanji_{name}"
        cfg = load_config(REPO / "configs" / f"{recipe}.yaml")
        cap = _cap(cfg)
        rec = {"recipe": recipe, "env": cfg.env.id, "seeds": args.seeds, "set": list(args.set),
               "env_steps_per_seed": cfg.algo_config.total_env_steps, "load_average_1m_before": os.getloadavg()[0]}
        for legal in (False, True):
            r = baseline_returns(cfg.env.id, dict(cfg.env.params), args.episodes, cap, legal)
            rec["random_legal" if legal else "random"] = {"mean": round(float(r.mean()), 3), "std": round(float(r.std()), 3),
                                                          "episodes": int(r.size)}
        print(recipe, "baselines", rec["random"], rec["random_legal"], flush=True)
        if not args.baselines_only:
            runs = [("masked", recipe, [])] + ([] if args.no_unmasked else [("unmasked", recipe, ["ppo.action_mask=false"])])
            if args.compare:
                runs.append(("compare", args.compare, [f"ppo.total_env_steps={cfg.algo_config.total_env_steps}", *args.compare_set]))
                rec["compare_recipe"] = " ".join([args.compare, *args.compare_set])
            for label, which, extra in runs:
                run = run_recipe(which, [f"train.seeds={args.seeds}", *extra, *args.set])
                # cpu_s_total: what the run costs without the other jobs' load
                rec[label] = {k: run[k] for k in ("eval_det_mean", "eval_det_ci95", "eval_sto_mean", "eval_det_mean_per_seed",
                                                 "wall_s_total", "wall_s_first_chunk_incl_compile", "curve", "cpu_s_total")}
                rec[label]["load_average_1m_after"] = os.getloadavg()[0]
                print(recipe, label, {k: v for k, v in rec[label].items() if k != "curve"}, flush=True)
        _keep_comparison(rec, next((r for r in old if r["recipe"] == recipe), None), bool(args.compare))
        records.append(rec)
        # merge with what is on disk now (another invocation may have written other recipes meanwhile)
        latest = json.loads(out_json.read_text())["records"] if out_json.exists() else []
        records = [r for r in latest if r["recipe"] not in {x["recipe"] for x in records}] + records
        meta = common.metadata({"note": "wall times depend on the machine's load: see each run's load averages"},
                               libraries=(*common.DEFAULT_LIBRARIES, "jumanji"))
        common.write_results(NAME, records, meta)
        write_markdown(records, meta)


def _keep_comparison(rec: dict, previous: dict | None, compared_now: bool) -> None:
    """Carry ``previous``'s ``--compare`` run into ``rec`` when this invocation made none and
    trained the same seeds, steps and overrides (with the masked run it was made beside)."""
    if compared_now or previous is None or "compare" not in previous:
        return
    if (previous["seeds"], previous["env_steps_per_seed"], previous.get("set")) != (rec["seeds"], rec["env_steps_per_seed"], rec["set"]):
        return
    rec["compare"], rec["compare_recipe"] = previous["compare"], previous["compare_recipe"]
    rec["compare_masked"] = previous.get("compare_masked", previous["masked"])


def write_markdown(records: list[dict], meta: dict) -> None:
    md = [
        "# Masked against unmasked PPO on Jumanji (issue 27)",
        "",
        f"`{meta['command']}` on {meta['machine']['cpu_model']} ({meta['machine']['cpus_usable']} cores; each row's load "
        f"averages are in its last column), {meta['utc']}, jumanji {meta['versions'].get('jumanji')}. Each run is a fresh process running `jaxrl.run.trainer.run` "
        "(compile included) with its seeds vmapped; returns are the final evaluation's means over all seeds' "
        "episodes, greedy (det.; per-seed means listed) and sampling (stoch.); baselines are uniformly random actions and uniformly random legal "
        "actions in the same env and params. Load average (1 min) recorded before each recipe and after each run.",
        "",
        "| recipe | env steps / seed | seeds | masked return (det.) | per seed | masked (stoch.) | unmasked return (det.) | "
        "per seed | unmasked (stoch.) | "
        "random legal | random | masked wall s (CPU s) | unmasked wall s (CPU s) | load before / after runs |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in records:
        m, u = r.get("masked", {}), r.get("unmasked", {})
        md.append(
            f"| {r['recipe']} | {r['env_steps_per_seed']:,} | {r['seeds']} | {m.get('eval_det_mean', '-')} | "
            f"{m.get('eval_det_mean_per_seed', '-')} | {m.get('eval_sto_mean', '-')} | {u.get('eval_det_mean', '-')} | "
            f"{u.get('eval_det_mean_per_seed', '-')} | {u.get('eval_sto_mean', '-')} | "
            f"{r['random_legal']['mean']} | {r['random']['mean']} | {m.get('wall_s_total', '-')} ({m.get('cpu_s_total', '-')}) | "
            f"{u.get('wall_s_total', '-')} ({u.get('cpu_s_total', '-')}) | "
            f"{r['load_average_1m_before']:.1f} / {m.get('load_average_1m_after', 0):.1f}, {u.get('load_average_1m_after', 0):.1f} |"
        )
    compared = [r for r in records if "compare" in r]
    if compared:
        md += [
            "",
            "Against another recipe at equal env steps and seeds (`--compare`, both masked): returns det. (per seed) / stoch.; "
            "CPU s = user + system of the whole training process (`getrusage` of the child, what `/usr/bin/time` reports).",
            "",
            "| recipe | compared with | env steps / seed | seeds | recipe det. (per seed) / stoch. | compared det. (per seed) / stoch. | "
            "random legal | random | recipe wall s (CPU s) | compared wall s (CPU s) | load before / after runs |",
            "|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for r in compared:
            m, c = r.get("compare_masked", r["masked"]), r["compare"]  # the masked run of the same invocation
            md.append(
                f"| {r['recipe']} | {r['compare_recipe']} | {r['env_steps_per_seed']:,} | {r['seeds']} | {m['eval_det_mean']} "
                f"{m['eval_det_mean_per_seed']} / **{m['eval_sto_mean']}** | {c['eval_det_mean']} {c['eval_det_mean_per_seed']} / "
                f"**{c['eval_sto_mean']}** | {r['random_legal']['mean']} | {r['random']['mean']} | {m['wall_s_total']} "
                f"({m['cpu_s_total']}) | {c['wall_s_total']} ({c['cpu_s_total']}) | {m.get('load_average_1m_before', r['load_average_1m_before']):.1f} / "
                f"{m['load_average_1m_after']:.1f}, {c['load_average_1m_after']:.1f} |"
            )
    notes = [f"- {r['recipe']}: {r['note']}" for r in records if r.get("note")]
    md += ["", "Notes:", "", *notes] if notes else []
    (common.RESULTS_DIR / f"{NAME}.md").write_text("\n".join(md) + "\n")


if __name__ == "__main__":
    main()
