"""How robust is the CartPole recipe? Solved seeds per (budget, learning rate, seed set).

Each (budget, network, seed set) is one compiled program: ``16 seeds x len(lrs)`` runs vmapped together,
the learning rate traced (``PPOHyperparams.lr``), each followed by the deterministic
evaluation (16 episodes). A seed is solved at a mean evaluation return >= 475. Static
settings (budget) take one program each.

Run: ``python bench/ppo_cartpole_sweep.py [--budgets 40960 51200] [--hidden 64,64 64]
[--lrs 2e-3 4e-3 6e-3] [--seed-sets 0 1 2]``. Results: ``bench/results/ppo_cartpole_sweep.{json,md}``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import jaxrl  # noqa: E402
from bench.common import RESULTS_DIR, command_line, metadata, write_results  # noqa: E402
from jaxrl.algos import ppo  # noqa: E402
from jaxrl.algos.common.train import COMPILER_OPTIONS

from jaxrl.algos.common.train import program_on, train_on as train_fn

SEEDS = 16
BASE = dict(num_envs=8, num_steps=64, update_epochs=4, num_minibatches=4, eval_episodes=16)


def solved_grid(budget: int, hidden: tuple[int, ...], lrs: list[float], seed_set: int) -> np.ndarray:
    """Deterministic eval returns ``[len(lrs), 16]`` for one budget, network and seed set."""
    env, params = jaxrl.make("CartPole-v1")
    cfg = ppo.PPOConfig(**BASE, total_env_steps=budget, hidden=hidden)
    algo = program_on(ppo, env, params, cfg)
    train = train_fn(ppo, env, params, cfg)

    def one(key, lr):
        train_key, eval_key = jax.random.split(key)
        state, _ = train(train_key, ppo.hyperparams(cfg, lr=lr))
        return algo.evaluate(state, eval_key)["return_mean"]

    keys = jnp.tile(jax.random.split(jax.random.key(seed_set), SEEDS), (len(lrs),))
    lr = jnp.repeat(jnp.asarray(lrs, jnp.float32), SEEDS)
    program = jax.jit(jax.vmap(one), compiler_options=COMPILER_OPTIONS)
    return np.asarray(program(keys, lr)).reshape(len(lrs), SEEDS)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--budgets", type=int, nargs="+", default=[40960, 51200])
    ap.add_argument("--hidden", nargs="+", default=["64,64", "64"], help="hidden widths, comma-separated")
    ap.add_argument("--lrs", type=float, nargs="+", default=[2e-3, 4e-3, 6e-3])
    ap.add_argument("--seed-sets", type=int, nargs="+", default=[0, 1, 2])
    args = ap.parse_args()
    rows = []
    nets = [tuple(int(w) for w in h.split(",")) for h in args.hidden]
    grid = [(b, h) for b in args.budgets for h in nets]
    for budget, hidden in grid:
        for seed_set in args.seed_sets:
            t0 = time.perf_counter()
            returns = solved_grid(budget, hidden, args.lrs, seed_set)
            print(f"budget {budget} hidden {hidden} seed set {seed_set}: {time.perf_counter() - t0:.1f} s", flush=True)
            for lr, row in zip(args.lrs, returns):
                rows.append(dict(budget=budget, hidden=list(hidden), lr=lr, seed_set=seed_set, solved=int((row >= 475).sum()),
                                 mean=float(row.mean()), min=float(row.min()), returns=row.tolist()))
    write_results("ppo_cartpole_sweep", rows, metadata())
    lines = [
        "# CartPole PPO recipe sweep: solved seeds (of 16, deterministic eval >= 475)",
        "",
        f"Command: `{command_line()}`; 8 envs x 64 steps, 4 epochs x 4 minibatches, "
        "lr annealed to 0. One column per (learning rate); one row per (budget, seed set).",
        "",
        "| budget | hidden | seed set | " + " | ".join(f"lr {lr:g}" for lr in args.lrs) + " |",
        "|---|---|---|" + "---|" * len(args.lrs),
    ]
    for budget, hidden in grid:
        for seed_set in args.seed_sets:
            cells = [r for r in rows if r["budget"] == budget and tuple(r["hidden"]) == hidden and r["seed_set"] == seed_set]
            lines.append(f"| {budget} | {hidden} | {seed_set} | " + " | ".join(f"{r['solved']}/16 (min {r['min']:.0f})" for r in cells) + " |")
    lines += ["", "Totals over seed sets:", ""]
    for budget, hidden in grid:
        for lr in args.lrs:
            cells = [r for r in rows if r["budget"] == budget and tuple(r["hidden"]) == hidden and r["lr"] == lr]
            lines.append(f"- budget {budget}, hidden {hidden}, lr {lr:g}: {sum(r['solved'] for r in cells)}/{16 * len(cells)}")
    (RESULTS_DIR / "ppo_cartpole_sweep.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
