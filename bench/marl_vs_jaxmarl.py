"""jaxrl IPPO against JaxMARL's own IPPO script on MPE simple_spread, in the same run.

Both train JaxMARL's ``MPE_simple_spread_v3`` with JaxMARL's IPPO hyperparameters
(``baselines/IPPO/config/ippo_ff_mpe.yaml``: 16 envs x 128 steps, 4 epochs x 4
minibatches, lr 2.5e-4 annealed, tanh 64x64), ``--seeds`` seeds vmapped in one program on
each side, the whole training loop jitted. Compile (lower + compile) is timed apart; the
steady-state figure is env steps/s of the compiled program over ``--updates`` updates, best
and median of ``--repeats`` calls, every output consumed.

The peer is JaxMARL's script itself, ``baselines/IPPO/ippo_ff_mpe.py`` (Apache-2.0), read
from ``--peer`` (default ``bench/peers/jaxmarl_ippo_ff_mpe.py``; get it with
``git show <commit>:baselines/IPPO/ippo_ff_mpe.py`` from a JaxMARL clone, the commit is
recorded in the results). It runs unchanged: its imports that only log or parse configs
(wandb, hydra, omegaconf, matplotlib) and distrax, whose Categorical it uses, are stood in
for by the small modules below (distrax's Categorical: Gumbel-max sampling, log-softmax).
``--ablation UPDATES`` instead compares the time limit as truncation and as termination.
``--smax SEEDS`` instead trains MAPPO on SMAX 2s3z (``configs/mappo_smax_2s3z.yaml``; a smaller
budget with ``--set mappo.total_env_steps=N``), and with ``--smax-peer PATH`` also JaxMARL's
``baselines/MAPPO/mappo_rnn_smax.py`` (its GRU MAPPO, ``git show <commit>:...`` as above) at
the same env steps, one seed per call.
``--full`` also trains both at the recipe's whole budget (4,882 updates, 9,998,336 env steps)
and compares the final returns: the mean of the last 5% of updates' logged team return
(jaxrl: the finished episodes' team return; JaxMARL: ``returned_episode_returns``, each
agent's return times the number of agents, averaged: the same quantity) with JaxMARL's
published curve. Results: ``bench/results/marl_vs_jaxmarl.{json,md}``.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import sys
import time
import types
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

#: JaxMARL's ippo_ff_mpe.yaml (the values, as its script reads them).
JAXMARL_CONFIG = {
    "LR": 2.5e-4, "NUM_ENVS": 16, "NUM_STEPS": 128, "TOTAL_TIMESTEPS": 1e7, "UPDATE_EPOCHS": 4, "NUM_MINIBATCHES": 4,
    "GAMMA": 0.99, "GAE_LAMBDA": 0.95, "CLIP_EPS": 0.2, "ENT_COEF": 0.01, "VF_COEF": 0.5, "MAX_GRAD_NORM": 0.5,
    "ACTIVATION": "tanh", "ENV_NAME": "MPE_simple_spread_v3", "ENV_KWARGS": {}, "ANNEAL_LR": True,
}
FULL_UPDATES = 4882  # 1e7 // 128 // 16, as JaxMARL's script computes NUM_UPDATES
#: JaxMARL's published IPPO-FF curve on simple_spread (baselines/IPPO/ippo_ff_MPE_simple_spread_v3.png,
#: commit ea39f4b, 10 seeds, the same config): read off the plot.
PUBLISHED = {"source": "FLAIROx/JaxMARL baselines/IPPO/ippo_ff_MPE_simple_spread_v3.png @ ea39f4b (10 seeds, 1e7 steps)",
             "final_band": [-61.5, -59.5], "at_half_budget": -62.0}


def _stub_modules() -> None:
    """Stand-ins for the peer script's logging/config imports and distrax's Categorical."""
    class Categorical:
        def __init__(self, logits):
            self.logits = logits

        def sample(self, seed):
            return jax.random.categorical(seed, self.logits)

        def log_prob(self, value):
            logp = jax.nn.log_softmax(self.logits)
            return jnp.take_along_axis(logp, value[..., None].astype(jnp.int32), axis=-1)[..., 0]

        def entropy(self):
            logp = jax.nn.log_softmax(self.logits)
            return -jnp.sum(jnp.exp(logp) * logp, axis=-1)

    stubs = {"distrax": {"Categorical": Categorical}, "wandb": {"log": lambda *a, **k: None, "init": lambda *a, **k: None},
             "hydra": {"main": lambda **k: (lambda f: f)}, "omegaconf": {"OmegaConf": types.SimpleNamespace(to_container=dict)}}
    for name, attrs in stubs.items():
        module = types.ModuleType(name)  # always: main() (wandb.init, hydra) is never run here
        module.__dict__.update(attrs)
        sys.modules[name] = module


def load_peer(path: Path):
    _stub_modules()
    spec = importlib.util.spec_from_file_location("jaxmarl_ippo_ff_mpe", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def peer_train(peer, updates: int, seeds: int):
    config = dict(JAXMARL_CONFIG, TOTAL_TIMESTEPS=updates * 128 * 16)
    train = peer.make_train(config)

    def run(keys):
        out = jax.vmap(train)(keys)
        return out["metrics"]["returned_episode_returns"], out["runner_state"][0].params  # [seeds, updates]

    return jax.jit(run), jax.random.split(jax.random.PRNGKey(30), seeds)


def jaxrl_train(updates: int, seeds: int, algo: str = "ippo"):
    from jaxrl.algos.common.train import train
    from jaxrl.run import config as C
    from jaxrl.run.build import build, seed_keys

    cfg = C.load_config(str(ROOT / "configs" / f"{algo}_mpe_simple_spread.yaml"),
                        [f"{algo}.total_env_steps={updates * 2048}", f"train.updates_per_chunk={updates}"])
    program = build(cfg).program

    def run(keys):
        state, metrics = jax.vmap(lambda k: train(program, updates, k))(keys)
        return metrics["episode_return"], metrics["episode_count"], state.params

    return jax.jit(run), seed_keys(30, seeds)


def timed(fn, keys, repeats: int) -> dict:
    t0 = time.perf_counter()
    compiled = fn.lower(keys).compile()
    compile_s = time.perf_counter() - t0
    times, out = [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = jax.block_until_ready(compiled(keys))
        times.append(time.perf_counter() - t0)
    return {"compile_s": compile_s, "times_s": times, "best_s": min(times), "median_s": statistics.median(times)}, out


def final_return(curve: np.ndarray, counts: np.ndarray | None = None) -> float:
    """Mean of the last 5% of updates (jaxrl: updates where episodes ended, weighted by count)."""
    tail = max(curve.shape[-1] // 20, 1)
    c, r = curve[..., -tail:], None
    if counts is not None:
        w = counts[..., -tail:]
        r = float((c * w).sum() / max(w.sum(), 1))
    return r if r is not None else float(c.mean())


def full_side(side: str, peer, seeds: int, full: dict) -> None:
    """Train ``side`` at the whole budget; its final return per seed and a coarse curve."""
    if side.startswith("jaxrl_"):
        fn, keys = jaxrl_train(FULL_UPDATES, seeds, side.removeprefix("jaxrl_"))
        t, (ret, count, _) = timed(fn, keys, 1)
        ret, count = np.asarray(ret), np.asarray(count)
        curve = (ret * count).sum(0) / np.maximum(count.sum(0), 1)
        finals = [final_return(ret[i], count[i]) for i in range(len(ret))]
    else:
        fn, keys = peer_train(peer, FULL_UPDATES, seeds)
        t, (ret, _) = timed(fn, keys, 1)
        ret = np.asarray(ret)
        curve, finals = ret.mean(0), [final_return(ret[i]) for i in range(len(ret))]
    full[side] = {**t, "final_return_per_seed": finals, "final_return_mean": float(np.mean(finals)),
                  "curve_every_100_updates": [float(x) for x in curve[::100]]}
    print("full", side, finals, f"{t['best_s']:.1f} s", flush=True)


#: JaxMARL's mappo_homogenous_rnn_smax.yaml (the values, as its script reads them).
JAXMARL_SMAX_CONFIG = {
    "LR": 0.002, "NUM_ENVS": 128, "NUM_STEPS": 128, "TOTAL_TIMESTEPS": 1e7, "FC_DIM_SIZE": 128, "GRU_HIDDEN_DIM": 128,
    "UPDATE_EPOCHS": 4, "NUM_MINIBATCHES": 4, "GAMMA": 0.99, "GAE_LAMBDA": 0.95, "CLIP_EPS": 0.2, "SCALE_CLIP_EPS": False,
    "ENT_COEF": 0.0, "VF_COEF": 0.5, "MAX_GRAD_NORM": 0.25, "ACTIVATION": "relu", "OBS_WITH_AGENT_ID": True,
    "ENV_NAME": "HeuristicEnemySMAX", "MAP_NAME": "2s3z", "SEED": 0,
    "ENV_KWARGS": {"see_enemy_actions": True, "walls_cause_death": True, "attack_mode": "closest"}, "ANNEAL_LR": True,
}


def smax_peer(path: Path, map_name: str, agents: int, env_steps: int, seeds: int) -> dict:
    """JaxMARL's own ``baselines/MAPPO/mappo_rnn_smax.py`` on SMAX ``map_name`` (``agents``
    allies) at ``env_steps``, one seed per call
    (it logs through ``wandb.log`` in an ``io_callback``, which the stub records): per seed
    the mean of the last 5% of updates' team return (agent 0's ``returned_episode_returns``
    times the number of agents: SMAX pays every agent the same) and training win rate."""
    _stub_modules()
    logs: list[dict] = []
    sys.modules["wandb"].log = lambda d, **_: logs.append({k: np.asarray(v) for k, v in d.items() if k in ("returns", "win_rate")})
    spec = importlib.util.spec_from_file_location("jaxmarl_mappo_rnn_smax", path)
    peer = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(peer)
    config = dict(JAXMARL_SMAX_CONFIG, MAP_NAME=map_name, TOTAL_TIMESTEPS=env_steps)
    fn = jax.jit(peer.make_train(config))
    out = {"compile_s": [], "run_s": [], "final_train_team_return_per_seed": [], "final_train_win_rate_per_seed": []}
    for seed in range(seeds):
        logs.clear()
        key = jax.random.PRNGKey(30 + seed)
        t0 = time.perf_counter()
        compiled = fn.lower(key).compile()
        t1 = time.perf_counter()
        jax.block_until_ready(compiled(key))
        jax.effects_barrier()
        out["compile_s"].append(t1 - t0)
        out["run_s"].append(time.perf_counter() - t1)
        ret = np.array([float(x["returns"]) for x in logs]) * agents
        win = np.array([float(x["win_rate"]) for x in logs])
        out["final_train_team_return_per_seed"].append(final_return(ret))
        out["final_train_win_rate_per_seed"].append(final_return(win))
        out.setdefault("curve_every_10_pct", []).append(ret[:: max(len(ret) // 10, 1)].round(3).tolist())
    out["updates"] = len(logs)
    out["steps_per_s"] = seeds * env_steps / sum(out["run_s"])
    return out


def smax(seeds: int, out_dir: str, overrides=(), peer: str | None = None, peer_commit: str = "unknown") -> None:
    """jaxrl MAPPO on SMAX 2s3z at its recipe's budget (or ``mappo.total_env_steps`` from
    ``overrides``): training curve, greedy eval win rate (a won episode pays each agent 1 for
    the damage plus the bonus of 1: team return 2 x A); with ``peer``, JaxMARL's own MAPPO
    SMAX script (:func:`smax_peer`) at the same env steps, in the same run."""
    from jaxrl.algos.common.train import train
    from jaxrl.run import config as C
    from jaxrl.run.build import build, seed_keys

    cfg = C.load_config(str(ROOT / "configs" / "mappo_smax_2s3z.yaml"), list(overrides))
    built = build(cfg)
    program, updates, agents = built.program, built.program.plan.num_updates, built.envs.env.num_agents

    def run(keys):
        state, metrics = jax.vmap(lambda k: train(program, updates, k))(keys)
        ev = jax.vmap(program.evaluate)(state, keys)
        return metrics["episode_return"], metrics["episode_count"], ev["episode_returns"]

    load_before = os.getloadavg()
    t, (ret, count, ev) = timed(jax.jit(run), seed_keys(0, seeds), 1)
    ret, count, ev = np.asarray(ret), np.asarray(count), np.asarray(ev)
    a = cfg.algo_config
    torso = "GRU" if a.torso == "gru" else "feed-forward"
    clip = ", actor and critic clipped apart" if a.clip_per_network else ""
    record = {"env": cfg.env.id, "algo": f"mappo ({torso}, {a.critic} critic{', agent ids' if a.agent_id else ''}{clip})",
              "updates": updates, "env_steps": updates * program.plan.env_steps_per_update, "seeds": seeds, **t,
              "steps_per_s": seeds * updates * program.plan.env_steps_per_update / t["best_s"],
              "final_train_team_return_per_seed": [final_return(ret[i], count[i]) for i in range(seeds)],
              "eval_team_return_per_seed": ev.mean(-1).tolist(),
              "eval_win_rate_per_seed": (ev > 1.5 * agents).mean(-1).tolist(),
              "overrides": list(overrides),
              "curve_every_10_pct": [float(x) for x in ((ret * count).sum(0) / np.maximum(count.sum(0), 1))[::max(updates // 10, 1)]]}
    print("smax", json.dumps({k: v for k, v in record.items() if "curve" not in k}), flush=True)
    name = "marl_smax_2s3z.json" if record["env_steps"] >= 9_000_000 else f"marl_smax_2s3z_{record['env_steps']}.json"
    write(out_dir, record, load_before, name)  # jaxrl's side first: kept if the peer's run is stopped
    if peer:
        map_name = cfg.env.id.removeprefix("jaxmarl/SMAX-")  # the same map as jaxrl's side
        record["jaxmarl_mappo_rnn_smax"] = {"commit": peer_commit, **smax_peer(Path(peer), map_name, agents, record["env_steps"], seeds)}
        print("peer", json.dumps({k: v for k, v in record["jaxmarl_mappo_rnn_smax"].items() if "curve" not in k}), flush=True)
        write(out_dir, record, load_before, name)


def ablation(updates: int, seeds: int, out_dir: str) -> None:
    """jaxrl IPPO with the time limit as truncation (bootstrap: jaxrl) and as termination (no
    bootstrap: JaxMARL's GAE), everything else equal; team return over the last 10% of updates."""
    from jaxrl.adapters import jaxmarl as adapter

    record, real = {"updates": updates, "seeds": seeds}, adapter.JaxMARLEnv.step

    def as_terminal(self, key, state, actions, params):
        state, ts = real(self, key, state, actions, params)
        return state, ts.replace(terminated=ts.done, truncated=jnp.zeros((), bool))

    load_before = os.getloadavg()
    for variant in ("truncated", "terminal"):
        adapter.JaxMARLEnv.step = real if variant == "truncated" else as_terminal
        fn, keys = jaxrl_train(updates, seeds)
        t0 = time.perf_counter()
        ret, count, _ = jax.block_until_ready(fn(keys))
        ret, count, tail = np.asarray(ret), np.asarray(count), max(updates // 10, 1)
        record[variant] = {"wall_s": time.perf_counter() - t0, "last_10pct_team_return_per_seed": [
            float((ret[i, -tail:] * count[i, -tail:]).sum() / max(count[i, -tail:].sum(), 1)) for i in range(seeds)]}
        print(variant, json.dumps(record[variant]), flush=True)
    adapter.JaxMARLEnv.step = real
    write(out_dir, record, load_before, "marl_truncation_ablation.json")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--updates", type=int, default=100, help="updates per timed call (throughput)")
    p.add_argument("--seeds", type=int, default=1)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--full", action="store_true", help="also train both at the whole budget (returns)")
    p.add_argument("--full-seeds", type=int, default=4)
    p.add_argument("--peer", default=str(ROOT / "bench" / "peers" / "jaxmarl_ippo_ff_mpe.py"))
    p.add_argument("--peer-commit", default="unknown")
    p.add_argument("--out", default=str(ROOT / "bench" / "results"))
    p.add_argument("--set", action="append", default=[], help="config override for --smax (a.b=value)")
    p.add_argument("--smax", type=int, default=0, metavar="SEEDS", help="only: MAPPO on SMAX 2s3z with SEEDS seeds")
    p.add_argument("--smax-peer", default=None, metavar="PATH",
                   help="with --smax: also JaxMARL's baselines/MAPPO/mappo_rnn_smax.py from PATH at the same env steps")
    p.add_argument("--ablation", type=int, default=0, metavar="UPDATES",
                   help="only: time limit as truncation vs termination, UPDATES updates x --seeds seeds")
    args = p.parse_args(argv)
    if args.ablation:
        ablation(args.ablation, args.seeds, args.out)
        return 0
    if args.smax:
        smax(args.smax, args.out, args.set, args.smax_peer, args.peer_commit)
        return 0

    peer = load_peer(Path(args.peer))
    steps = args.updates * 2048 * args.seeds
    record = {"updates": args.updates, "seeds": args.seeds, "env_steps_per_call": steps, "sides": {}}
    load_before = os.getloadavg()
    for name, make in (("jaxrl_ippo", jaxrl_train), ("jaxmarl_ippo_ff_mpe", lambda u, s: peer_train(peer, u, s))):
        fn, keys = make(args.updates, args.seeds)
        t, _ = timed(fn, keys, args.repeats)
        t["steps_per_s_best"], t["steps_per_s_median"] = steps / t["best_s"], steps / t["median_s"]
        record["sides"][name] = t
        print(name, json.dumps({k: v for k, v in t.items() if k != "times_s"}), flush=True)
    s = record["sides"]
    record["ratio_best"] = s["jaxrl_ippo"]["steps_per_s_best"] / s["jaxmarl_ippo_ff_mpe"]["steps_per_s_best"]
    record["ratio_median"] = s["jaxrl_ippo"]["steps_per_s_median"] / s["jaxmarl_ippo_ff_mpe"]["steps_per_s_median"]
    record.update(published=PUBLISHED, peer_commit=args.peer_commit)
    write(args.out, record, load_before)
    if args.full:
        full = {}
        for side in ("jaxrl_ippo", "jaxmarl_ippo_ff_mpe", "jaxrl_mappo"):
            full_side(side, peer, args.full_seeds, full)
            record["full"] = {"updates": FULL_UPDATES, "env_steps": FULL_UPDATES * 2048, "seeds": args.full_seeds, **full}
            write(args.out, record, load_before)  # after each side: a killed run keeps what finished
    print(json.dumps({"ratio_best": record["ratio_best"]}), flush=True)
    return 0


def write(out_dir: str, record: dict, load_before, name: str = "marl_vs_jaxmarl.json") -> None:
    from bench import common

    record["load_average_before_after"] = [list(load_before), list(os.getloadavg())]
    record["meta"] = common.metadata(libraries=("jax", "jaxlib", "flax", "optax", "jaxmarl", "numpy"))
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / name).write_text(common.dumps(record))


if __name__ == "__main__":
    raise SystemExit(main())
