"""A recipe trained over a range of pole lengths, evaluated across (and beyond) it.

Trains ``configs/ppo_cartpole.yaml`` (nominal pole, half-length 0.5) and
``configs/ppo_cartpole_randomized.yaml`` (half-length drawn per episode from
``uniform(0.25, 1.0)``) for ``--seeds`` vmapped seeds each (the programs ``jaxrl train``
runs, through :func:`jaxrl.run.trainer.make_train`), then evaluates every seed's
deterministic policy at fixed lengths with ``--episodes`` episodes each, on the plain env
(no randomisation). Records the mean return per length and seed, the share of seeds whose
mean reaches 475, and each training's wall time (compile included). Usage::

    python bench/domain_randomization.py              # 4 seeds, 16 episodes per length
"""

from __future__ import annotations

import argparse
import functools
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from bench import common  # noqa: E402
import jaxrl  # noqa: E402
from jaxrl.run.build import build, seed_keys  # noqa: E402
from jaxrl.run.config import load_config  # noqa: E402
from jaxrl.run.trainer import make_train  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
NAME = "domain_randomization"
RECIPES = ("ppo_cartpole", "ppo_cartpole_randomized")
LENGTHS = (0.15, 0.25, 0.35, 0.5, 0.75, 1.0, 1.5, 2.0)
SOLVED = 475.0


def episode_return(policy, agent, env, params, key):
    """Return of one deterministic episode (``max_steps_in_episode`` steps at most)."""
    reset_key, key = jax.random.split(key)
    state, ts = env.reset(reset_key, params)

    def body(carry, k):
        state, obs, alive, total = carry
        _, action = policy.act(agent, policy.init_carry(agent), obs, k, True)
        state, ts = env.step(k, state, action, params)
        total = total + jnp.where(alive, ts.reward, 0.0)
        return (state, ts.obs, alive & ~ts.done, total), None

    carry = (state, ts.obs, jnp.bool_(True), jnp.float32(0.0))
    steps = int(params.max_steps_in_episode)
    return jax.lax.scan(body, carry, jax.random.split(key, steps))[0][3]


def evaluate(policy, states, lengths, episodes: int) -> np.ndarray:
    """Mean return ``[seeds, lengths]`` of each seed's deterministic policy at each length."""
    env, params = jaxrl.make("CartPole-v1")
    lengths = jnp.asarray(lengths, jnp.float32)

    def one(state, length, key):
        agent = policy.params(state)
        p = params.replace(length=length)
        keys = jax.random.split(key, episodes)
        return jnp.mean(jax.vmap(functools.partial(episode_return, policy, agent, env, p))(keys))

    per_length = jax.vmap(one, in_axes=(None, 0, None))
    per_seed = jax.vmap(per_length, in_axes=(0, None, None))
    return np.asarray(jax.jit(per_seed)(states, lengths, jax.random.PRNGKey(123)))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=4)
    ap.add_argument("--episodes", type=int, default=16)
    args = ap.parse_args()
    records = []
    for name in RECIPES:
        cfg = load_config(REPO / "configs" / f"{name}.yaml")
        start = time.perf_counter()
        train = jax.jit(jax.vmap(make_train(cfg)))
        states, _ = common.block(train(seed_keys(cfg.train.seed, args.seeds)))
        train_s = time.perf_counter() - start
        policy = build(cfg).program.policy
        returns = evaluate(policy, states, LENGTHS, args.episodes)
        record = {
            "recipe": name,
            "randomize": dict(cfg.env.randomize),
            "seeds": args.seeds,
            "episodes_per_length": args.episodes,
            "train_seconds_incl_compile": round(train_s, 2),
            "lengths": list(LENGTHS),
            "mean_return": [round(float(x), 1) for x in returns.mean(0)],
            "seeds_solved": [int(x) for x in (returns >= SOLVED).sum(0)],
            "per_seed": [[round(float(x), 1) for x in row] for row in returns],
        }
        records.append(record)
        print(name, record["mean_return"], record["seeds_solved"], f"{train_s:.1f}s", flush=True)
    meta = common.metadata({"note": "2-core machine shared with other engineers' jobs: timings are loaded"})
    common.write_results(NAME, records, meta)
    _write_markdown(records, meta)


def _write_markdown(records, meta) -> None:
    head = "| recipe | " + " | ".join(f"L={x}" for x in LENGTHS) + " | train s |"
    lines = [
        "# Domain randomisation: CartPole pole length",
        "",
        f"`{meta['command']}` on {meta['machine']['cpu_model']} ({meta['machine']['cpus_usable']} cores, "
        f"shared with other jobs), {meta['utc']}. Cells: mean deterministic return over "
        f"{records[0]['seeds']} seeds x {records[0]['episodes_per_length']} episodes at a fixed "
        "half-length L (nominal 0.5), and in brackets the seeds whose mean reaches 475.",
        "",
        head,
        "|" + "---|" * (len(LENGTHS) + 2),
    ]
    for r in records:
        cells = [f"{m:.0f} ({s})" for m, s in zip(r["mean_return"], r["seeds_solved"])]
        lines.append(f"| {r['recipe']} {r['randomize'] or ''} | " + " | ".join(cells) + f" | {r['train_seconds_incl_compile']} |")
    (common.RESULTS_DIR / f"{NAME}.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
