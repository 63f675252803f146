"""DQN, PQN and SAC recipes against rejax 0.1.3 on the same tasks, whole processes.

For each task, ours and (with ``--rejax-python``) rejax's run in fresh processes, one after
the other in the same invocation; the headline is each process's wall time from its start
(interpreter, imports, tracing, compile, training, evaluation: the whole process) with 16
seeds vmapped in one program. Each child also reports its compile and run times apart.

* ours: ``configs/{dqn,pqn}_cartpole.yaml`` and ``configs/sac_pendulum.yaml`` through
  ``jaxrl.run.trainer.make_train`` and the program's ``evaluate`` (16 greedy or
  deterministic episodes per seed) in one ``jit(vmap)``.
* rejax: its published ``configs/gymnax/cartpole.yaml`` (dqn, pqn sections) and
  ``pendulum.yaml`` (sac section) through its own API, ``jax.jit(jax.vmap(Algo.train,
  (None, 0)))``, with its periodic evaluation reduced to one at the end (``eval_freq =
  total_timesteps``); its evaluation callback's mean return per seed is the score. rejax
  needs gymnax < 1.0: install it in its own virtual env
  (``pip install rejax==0.1.3 'gymnax<1.0'``).

A seed is solved at a mean return >= 475 (CartPole-v1) or >= -200 (Pendulum-v1).
Run: ``python bench/offpolicy_vs_rejax.py [--tasks pqn sac dqn] [--rejax-python PY]``.
Result: ``bench/results/offpolicy_vs_rejax.json`` (one record per task and side; a run of
some tasks replaces their records and keeps the others', each record with its own time and load).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

_T_START = time.perf_counter()
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

SEEDS = 16
TASKS = {  # task: (our recipe, env id, solved threshold)
    "pqn": ("pqn_cartpole.yaml", "CartPole-v1", 475.0),
    "sac": ("sac_pendulum.yaml", "Pendulum-v1", -200.0),
    "dqn": ("dqn_cartpole.yaml", "CartPole-v1", 475.0),
}
#: rejax's published configs (configs/gymnax/cartpole.yaml and pendulum.yaml in its repository).
REJAX = {
    "pqn": ("PQN", dict(env="CartPole-v1", num_envs=16, num_steps=128, num_minibatches=16, max_grad_norm=10,
                        learning_rate=0.0003, num_epochs=5, total_timesteps=524288, eps_start=1, eps_end=0.05,
                        exploration_fraction=0.5, gamma=0.99, td_lambda=0.9, normalize_observations=False)),
    "sac": ("SAC", dict(env="Pendulum-v1", agent_kwargs={"activation": "swish"}, num_envs=1, buffer_size=10_000,
                        fill_buffer=256, batch_size=256, learning_rate=0.01, num_epochs=1, total_timesteps=10_000,
                        gamma=0.99, polyak=0.98, target_entropy_ratio=None, normalize_observations=True)),
    "dqn": ("DQN", dict(env="CartPole-v1", agent="DuelingQNetwork", agent_kwargs={"activation": "swish"}, num_envs=10,
                        buffer_size=50_000, fill_buffer=5_000, batch_size=100, max_grad_norm=10, learning_rate=0.001,
                        num_epochs=5, total_timesteps=100_000, polyak=0.98, eps_start=1, eps_end=0.05,
                        exploration_fraction=0.5, gamma=0.99, ddqn=True, normalize_observations=False)),
}


def _summary(returns, threshold: float) -> dict:
    import numpy as np

    r = np.asarray(returns, np.float64)
    return {"returns": r.round(2).tolist(), "mean_return": float(r.mean()), "solved": int((r >= threshold).sum())}


def child_ours(task: str) -> dict:
    import jax

    from jaxrl.algos.common.train import COMPILER_OPTIONS
    from jaxrl.run.build import build
    from jaxrl.run.config import load_config
    from jaxrl.run.trainer import make_train

    recipe, _, threshold = TASKS[task]
    cfg = load_config(str(ROOT / "configs" / recipe))
    program, train = build(cfg).program, make_train(cfg)

    def train_and_eval(key):
        train_key, eval_key = jax.random.split(key)
        state, _ = train(train_key)
        return program.evaluate(state, eval_key)["return_mean"]

    keys = jax.random.split(jax.random.PRNGKey(0), SEEDS)
    t0 = time.perf_counter()
    compiled = jax.jit(jax.vmap(train_and_eval), compiler_options=COMPILER_OPTIONS).lower(keys).compile()
    t1 = time.perf_counter()
    returns = jax.device_get(compiled(keys))
    t2 = time.perf_counter()
    env_steps = program.plan.total_env_steps
    return {"impl": "jaxrl", "env_steps_per_seed": env_steps, "compile_s": t1 - t0, "run_s": t2 - t1,
            "in_process_s": t2 - _T_START, **_summary(returns, threshold)}


def child_rejax(task: str) -> dict:
    import importlib.metadata

    import jax
    import rejax

    name, config = REJAX[task]
    algo_cls = getattr(rejax, name)
    config = {**config, "eval_freq": config["total_timesteps"], "skip_initial_evaluation": True}
    algo = algo_cls.create(**config)
    keys = jax.random.split(jax.random.PRNGKey(0), SEEDS)
    t0 = time.perf_counter()
    compiled = jax.jit(jax.vmap(algo_cls.train, in_axes=(None, 0))).lower(algo, keys).compile()
    t1 = time.perf_counter()
    _, evaluation = jax.device_get(compiled(algo, keys))
    t2 = time.perf_counter()
    returns = evaluation[1].reshape(SEEDS, -1).mean(axis=1)  # the callback's (lengths, returns)
    return {"impl": f"rejax {importlib.metadata.version('rejax')}", "env_steps_per_seed": config["total_timesteps"],
            "compile_s": t1 - t0, "run_s": t2 - t1, "in_process_s": t2 - _T_START,
            **_summary(returns, TASKS[task][2]),
            "versions": {n: importlib.metadata.version(n) for n in ("rejax", "gymnax", "jax", "flax")}}


def _spawn(python: str, side: str, task: str) -> dict:
    from bench import common

    env = {k: v for k, v in os.environ.items() if k not in ("JAX_COMPILATION_CACHE_DIR", "XLA_FLAGS")}
    env["JAX_PLATFORMS"] = "cpu"
    t0 = time.perf_counter()
    out = subprocess.run([python, __file__, "--child", side, "--task", task], capture_output=True, text=True,
                         env=env, cwd=str(ROOT))
    wall = time.perf_counter() - t0
    if out.returncode != 0:
        raise RuntimeError(f"{side} {task} child failed:\n{out.stderr[-4000:]}")
    rec = json.loads(out.stdout.strip().splitlines()[-1])
    return {"task": task, "side": side, "whole_process_s": wall, "load_average_1m_after": os.getloadavg()[0],
            "utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "command": common.command_line(), **rec}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tasks", nargs="+", default=list(TASKS), choices=list(TASKS))
    p.add_argument("--rejax-python", default=None, help="a Python with rejax 0.1.3 (and gymnax < 1.0) installed")
    p.add_argument("--child", choices=["ours", "rejax"], help=argparse.SUPPRESS)
    p.add_argument("--task", choices=list(TASKS), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        print(json.dumps((child_ours if args.child == "ours" else child_rejax)(args.task)))
        return
    from bench import common

    meta = common.metadata({"seeds": SEEDS, "note": "whole-process wall time per side, sides run one after "
                            "the other; the load average shows other work sharing the machine"})
    path = common.RESULTS_DIR / "offpolicy_vs_rejax.json"
    old = json.loads(path.read_text()) if path.exists() else {"meta": {}, "records": []}
    old_meta = {"utc": old["meta"].get("utc"), "command": old["meta"].get("command")}
    records = [{**old_meta, **r} for r in old["records"] if r["task"] not in args.tasks]
    for task in args.tasks:
        sides = [("ours", sys.executable)] + ([("rejax", args.rejax_python)] if args.rejax_python else [])
        for side, python in sides:
            rec = _spawn(python, side, task)
            records.append(rec)
            print(f"{task:4s} {rec['impl']:12s} whole process {rec['whole_process_s']:6.1f} s "
                  f"(compile {rec['compile_s']:.1f}, run {rec['run_s']:.1f}); solved {rec['solved']}/{SEEDS}, "
                  f"mean {rec['mean_return']:.1f}", flush=True)
            common.write_results("offpolicy_vs_rejax", records, meta)  # after each side: a cut run keeps its part


if __name__ == "__main__":
    main()
