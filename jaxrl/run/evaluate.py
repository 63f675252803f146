"""Evaluate and render a trained run: ``jaxrl eval RUN_DIR`` and ``jaxrl render RUN_DIR``.

Evaluation runs the algorithm's own ``evaluate(state, key)`` (jitted, vmapped over the
run's seeds). By convention it returns per-episode undiscounted returns as
``"episode_returns"`` (deterministic policy: the distribution's mode) and
``"episode_returns_stochastic"`` (actions sampled); every ``episode_returns*`` array found
is summarised. The summary of each policy pools the episodes of all seeds and reports

* ``mean`` and ``std`` (sample standard deviation, ``ddof=1``) of the return,
* a 95% confidence interval of the *mean* return from Student's t distribution:
  ``mean +- t_{0.975, n-1} * std / sqrt(n)`` (exact for normal returns, conservative
  compared with the normal approximation for small ``n``; zero width when every episode
  returns the same).

Rendering rolls one episode of seed 0's policy in the algorithm's acting env (the
algorithm module's ``agent_env``) with its ``make_act`` policy and writes a GIF through
:mod:`jaxrl.core.render`.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from typing import Any

import jax
import numpy as np

from jaxrl.run import config as config_lib
from jaxrl.run.config import ConfigError, RunConfig

RETURNS_KEY = "episode_returns"
EVAL_SEED_OFFSET = 1_000_003  # eval keys never coincide with a training seed's key


def return_stats(returns) -> dict:
    """Mean, sample std and a Student-t 95% CI of the mean of ``returns`` (any shape)."""
    x = np.asarray(returns, np.float64).ravel()
    n = int(x.size)
    if n == 0:
        raise ValueError("no episode returns to summarise")
    mean = float(x.mean())
    std = float(x.std(ddof=1)) if n > 1 else 0.0
    if n > 1:
        from scipy import stats

        half = float(stats.t.ppf(0.975, n - 1)) * std / math.sqrt(n)
    else:
        half = math.inf
    return {"mean": mean, "std": std, "ci95_low": mean - half, "ci95_high": mean + half, "episodes": n}


def _mode_name(key: str) -> str:
    suffix = key[len(RETURNS_KEY) :].lstrip("_")
    return suffix or "deterministic"


def summarise(metrics: dict) -> dict:
    """The eval summary of an ``evaluate`` output (leaves ``[S, ...]`` over seeds)."""
    policies = {}
    for key in sorted(metrics):
        if key.startswith(RETURNS_KEY):
            policies[_mode_name(key)] = return_stats(metrics[key])
    if not policies:
        raise ValueError(f"the algorithm's evaluate returned no {RETURNS_KEY!r}: got {sorted(metrics)}")
    seeds = int(np.asarray(metrics[RETURNS_KEY if RETURNS_KEY in metrics else sorted(metrics)[0]]).shape[0])
    per_seed = {}
    if RETURNS_KEY in metrics:
        per_seed["return_mean"] = np.asarray(metrics[RETURNS_KEY], np.float64).mean(axis=-1).tolist()
    return {
        "policies": policies,
        "seeds": seeds,
        "per_seed": per_seed,
        "interval": "95% CI of the mean return, Student t with n-1 dof, episodes of all seeds pooled",
    }


def format_summary(summary: dict) -> str:
    """Human-readable lines of a summary."""
    lines = []
    for mode, s in summary["policies"].items():
        lines.append(
            f"eval {mode:<13} return {s['mean']:.2f} +- {s['std']:.2f} (std) "
            f"95% CI [{s['ci95_low']:.2f}, {s['ci95_high']:.2f}] over {s['episodes']} episodes"
        )
    return "\n".join(lines)


def write_summary(summary: dict, path: str) -> None:
    """Write ``summary`` as JSON, atomically; a symbolic link at ``path`` is refused."""
    from jaxrl.run import rundir

    rundir.write_text(path, json.dumps(summary, indent=2))


def evaluate_states(built, states: Any, seed: int = 0) -> dict:
    """Run ``built.algo.evaluate`` on a ``[S, ...]`` batch of states; host metrics dict."""
    num_seeds = jax.tree_util.tree_leaves(states)[0].shape[0]
    keys = jax.random.split(jax.random.PRNGKey(seed + EVAL_SEED_OFFSET), num_seeds)
    metrics = jax.jit(jax.vmap(built.algo.evaluate))(states, keys)
    return jax.device_get(metrics)


def evaluate_run(built, states: Any, cfg: RunConfig, seed: int = 0) -> dict:
    """The eval summary (see the module docstring) of trained ``states``."""
    return summarise(evaluate_states(built, states, seed))


# ------------------------------------------------------------------------------------------
# Loading a run
# ------------------------------------------------------------------------------------------


def with_episodes(cfg: RunConfig, episodes: int | None) -> RunConfig:
    """``cfg`` with the algorithm's ``eval_episodes`` set (a new config; ``cfg`` unchanged)."""
    if episodes is None:
        return cfg
    if episodes < 2:
        raise ConfigError(f"--episodes: need at least 2 episodes for a confidence interval, got {episodes}")
    names = {f.name for f in dataclasses.fields(cfg.algo_config)}
    if "eval_episodes" not in names:
        raise ConfigError(f"--episodes: the {cfg.algo} config has no eval_episodes field")
    return config_lib.with_overrides(cfg, [f"{cfg.algo}.eval_episodes={episodes}"])


def run_config(run_dir: str) -> RunConfig:
    """The resolved config saved in a run directory (read as bounded YAML)."""
    from jaxrl.run import trainer

    path = os.path.join(run_dir, trainer.CONFIG_FILE)
    if not os.path.lexists(path):
        raise ConfigError(f"{run_dir!r} is not a run directory (no {trainer.CONFIG_FILE})")
    return config_lib.load_config(path)


def load_run(run_dir: str, episodes: int | None = None):
    """``(cfg, built, states [S, ...], step)`` of the newest verified checkpoint in ``run_dir``.

    ``episodes`` replaces the algorithm's ``eval_episodes`` (a new config object). The
    checkpoints are opened read-only: nothing in the run directory is created, cleaned up
    or deleted, so this is safe while the run is still training.
    """
    from jaxrl.run import guards, trainer
    from jaxrl.run.checkpoint import Checkpoints

    cfg = with_episodes(run_config(run_dir), episodes)
    built = trainer.build(cfg)
    guards.check_memory(cfg, built)
    keys = trainer.seed_keys(cfg.train.seed, cfg.train.seeds)
    template = jax.eval_shape(jax.vmap(built.algo.init), keys)
    with Checkpoints(os.path.join(run_dir, trainer.CHECKPOINT_DIR), read_only=True) as ckpts:
        if not ckpts.steps():
            raise ConfigError(f"{run_dir!r} has no checkpoint yet")
        restored = ckpts.restore_verified(template)
    return cfg, built, restored.state, restored.step


def main_eval(args) -> int:
    """``jaxrl eval RUN_DIR [--episodes N]``: print and write ``eval.json``; failures raise
    and reach the one-line handler of :func:`jaxrl.cli.main`."""
    from jaxrl.run import guards, rundir, trainer

    out_path = os.path.join(args.run_dir, trainer.EVAL_FILE)
    rundir.refuse_link(out_path)  # before the work, not after it
    guards.check_seed(args.seed, "--seed", guards.MAX_SEED - EVAL_SEED_OFFSET)
    cfg, built, states, step = load_run(args.run_dir, args.episodes)
    summary = evaluate_run(built, states, cfg, seed=args.seed)
    summary["checkpoint_update"] = step
    write_summary(summary, out_path)
    print(format_summary(summary))
    for line in sample_lines(cfg, built, states, seed=args.seed):
        print(line)
    return 0


def sample_lines(cfg: RunConfig, built, states: Any, seed: int = 0, num: int = 5) -> list[str]:
    """The algorithm's own sample printout (``eval_samples`` hook, e.g. GRPO's prompts with
    greedy completions and rewards) for the first seed; empty if it has none."""
    hook = config_lib.algo_hook(config_lib.algo_entry(cfg.algo), "eval_samples")
    if hook is None:
        return []
    first = jax.tree_util.tree_map(lambda x: x[0], states)
    lines = hook(built.env, built.env_params, cfg.algo_config, first, jax.random.PRNGKey(seed + EVAL_SEED_OFFSET), num)
    return ["samples (held-out prompt -> greedy completion):", *("  " + line for line in lines)] if lines else []


# ------------------------------------------------------------------------------------------
# Rendering
# ------------------------------------------------------------------------------------------


def acting_pieces(cfg: RunConfig, built):
    """``(env, act)`` for rendering: the algorithm's acting env and ``act(agent, obs, key, det)``.

    Looked up on the registry entry (``make_act``, ``agent_env``) or, failing that, in the
    module that defines the entry's ``make``.
    """
    entry = config_lib.algo_entry(cfg.algo)
    make_act = config_lib.algo_hook(entry, "make_act")
    agent_env = config_lib.algo_hook(entry, "agent_env")
    if make_act is None:
        raise ConfigError(f"algo: {cfg.algo!r} provides no make_act, so it cannot render")
    env = agent_env(built.env, built.env_params, cfg.algo_config) if agent_env else built.env
    return env, make_act(built.env, built.env_params, cfg.algo_config)


def policy_params(state: Any) -> Any:
    """What ``act`` takes from a train state: its ``agent`` (params + normaliser stats)."""
    return getattr(state, "agent", state)


def _greedy_or_sample(act, agent, deterministic: bool, key, obs):
    return act(agent, obs, key, deterministic)


def render_frames(cfg: RunConfig, built, states: Any, steps: int, deterministic: bool = True, seed: int = 0):
    """Frames (``uint8[H, W, 3]``) of one episode of seed 0's trained policy."""
    import functools

    from jaxrl.core import render

    env, act = acting_pieces(cfg, built)
    agent = jax.tree_util.tree_map(lambda x: x[0], policy_params(states))
    policy = jax.jit(functools.partial(_greedy_or_sample, act, agent, deterministic))
    rollout_states = render.rollout(env, built.env_params, policy, jax.random.PRNGKey(seed), steps)
    return render.rollout_frames(env, built.env_params, rollout_states)


def check_render_args(args) -> None:
    """``--steps`` and ``--fps`` positive; ``--out`` a file in an existing directory."""
    for name in ("steps", "fps"):
        value = getattr(args, name)
        if value < 1:
            raise ConfigError(f"--{name}: must be >= 1, got {value}")
    folder = os.path.dirname(os.path.abspath(args.out))
    if not os.path.isdir(folder):
        raise ConfigError(f"--out {args.out!r}: the folder {folder!r} does not exist")
    if os.path.isdir(args.out):
        raise ConfigError(f"--out {args.out!r} is a directory; name a .gif file")


def main_render(args) -> int:
    """``jaxrl render RUN_DIR --out FILE.gif``; failures raise (see :func:`main_eval`)."""
    from jaxrl.core import render
    from jaxrl.run import guards

    check_render_args(args)
    guards.check_seed(args.seed, "--seed")
    cfg, built, states, _ = load_run(args.run_dir)
    frames = render_frames(cfg, built, states, args.steps, not args.stochastic, args.seed)
    render.save_gif(frames, args.out, fps=args.fps)
    print(f"jaxrl: wrote {len(frames)} frames to {args.out}")
    return 0
