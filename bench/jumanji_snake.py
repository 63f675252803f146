"""The Jumanji smoke recipe: ``jaxrl train configs/ppo_jumanji_snake.yaml`` against a random policy.

Runs the recipe as a whole ``jaxrl train`` process (subprocess, wall time measured around
it, compile included) and reads its ``eval.json``; then, in this process, plays
``--episodes`` episodes of the same env and params with uniformly random actions (the
baseline the trained policy must beat). Writes ``bench/results/jumanji_snake.{json,csv,md}``.
Needs the ``[jumanji]`` extra. Usage::

    python bench/jumanji_snake.py                 # the recipe as it is, 256 random episodes
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from bench import common  # noqa: E402
import jaxrl  # noqa: E402
from jaxrl.run.config import load_config  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
NAME = "jumanji_snake"
CONFIG = REPO / "configs" / "ppo_jumanji_snake.yaml"


def random_returns(env_id: str, overrides: dict, episodes: int, seed: int = 0) -> np.ndarray:
    """Undiscounted returns ``[episodes]`` of uniformly random actions, one episode each,
    capped at the params' ``max_steps_in_episode``."""
    env, params = jaxrl.make(env_id, **overrides)
    space = env.action_space(params)
    steps = int(params.max_steps_in_episode)

    def episode(key):
        state, _ = env.reset(key, params)

        def body(carry, k):
            state, alive, total = carry
            state, ts = env.step(k, state, space.sample(k), params)
            return (state, alive & ~ts.done, total + jnp.where(alive, ts.reward, 0.0)), None

        return jax.lax.scan(body, (state, jnp.bool_(True), jnp.float32(0.0)), jax.random.split(key, steps))[0][2]

    keys = jax.random.split(jax.random.PRNGKey(seed), episodes)
    return np.asarray(jax.jit(jax.vmap(episode))(keys))


def train_with_cli(extra: list[str]) -> tuple[dict, float]:
    """``jaxrl train CONFIG`` in a subprocess; its ``eval.json`` and whole-process seconds."""
    out = Path(tempfile.mkdtemp(prefix="jumanji_snake_"))
    exe = shutil.which("jaxrl") or "jaxrl"
    start = time.perf_counter()
    subprocess.run([exe, "train", str(CONFIG), "--out", str(out / "run"), *extra], check=True, env=dict(os.environ))
    seconds = time.perf_counter() - start
    evaluation = json.loads((out / "run" / "eval.json").read_text())
    shutil.rmtree(out, ignore_errors=True)
    return evaluation, seconds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--episodes", type=int, default=256, help="random-policy episodes")
    ap.add_argument("--set", action="append", default=[], help="passed to jaxrl train as --set")
    args = ap.parse_args()
    cfg = load_config(CONFIG)
    evaluation, seconds = train_with_cli([x for s in args.set for x in ("--set", s)])
    print(json.dumps(evaluation, indent=1), f"\nwhole jaxrl train process: {seconds:.1f} s", flush=True)
    rand = random_returns(cfg.env.id, dict(cfg.env.params), args.episodes)
    print(f"random policy: mean return {rand.mean():.3f} over {rand.size} episodes", flush=True)
    record = {
        "recipe": CONFIG.stem,
        "env": cfg.env.id,
        "total_env_steps": cfg.algo_config.total_env_steps,
        "train_process_seconds": round(seconds, 1),
        "eval": evaluation,
        "random_mean_return": round(float(rand.mean()), 3),
        "random_episodes": int(rand.size),
    }
    meta = common.metadata({"note": "2-core machine shared with other engineers' jobs: timings are loaded"},
                           libraries=(*common.DEFAULT_LIBRARIES, "jumanji"))
    common.write_results(NAME, [record], meta)
    md = [
        "# Jumanji Snake-v1: the PPO smoke recipe against a random policy",
        "",
        f"`{meta['command']}` on {meta['machine']['cpu_model']} ({meta['machine']['cpus_usable']} cores, "
        f"shared with other jobs: load average {meta['machine'].get('load_average_1m')}), {meta['utc']}, "
        f"jumanji {meta['versions'].get('jumanji')}.",
        "",
        f"- `jaxrl train configs/{CONFIG.name}` ({record['total_env_steps']:,} env steps), whole process "
        f"{record['train_process_seconds']} s (compile included, loaded machine)",
        f"- its evaluation (eval.json): `{json.dumps(evaluation)}`",
        f"- uniformly random actions, same env and params: mean return {record['random_mean_return']} "
        f"over {record['random_episodes']} episodes",
    ]
    (common.RESULTS_DIR / f"{NAME}.md").write_text("\n".join(md) + "\n")


if __name__ == "__main__":
    main()
