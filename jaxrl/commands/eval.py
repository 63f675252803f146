"""``jaxrl eval RUN_DIR``'s handlers: a trained run scored, printed and written to ``eval.json``.

``jaxrl eval RUN [--episodes N]`` runs the program's own evaluation
(:mod:`jaxrl.run.evaluate`); ``-n PROMPTS -r ROLLOUTS`` samples a token-task run's held-out
prompts (:mod:`jaxrl.run.sampled`); ``--remote URL`` plays a served env from this host
(:mod:`jaxrl.run.remote`). Each handler checks its arguments before any work, loads the run
with :func:`jaxrl.run.evaluate.load_run` and prints the summary it writes. Failures raise and
reach the one-line handler of :func:`jaxrl.cli.main`.
"""

from __future__ import annotations

import os

import jax

from jaxrl.core import threefry
from jaxrl.run import compile_cache
from jaxrl.run.config import ConfigError
from jaxrl.run.evaluate import (
    EVAL_SEED_OFFSET, evaluate_run, format_summary, load_run, merge_summary, return_stats, sample_lines, write_summary,
)
from jaxrl.run.files import EVAL_FILE

__all__ = ["main_eval", "main_remote", "main_sampled"]


def main_eval(args) -> int:
    """``jaxrl eval RUN_DIR [--episodes N]``: print and write ``eval.json``; failures raise
    and reach the one-line handler of :func:`jaxrl.cli.main`."""
    from jaxrl.run import guards, rundir

    compile_cache.enable()  # before the first compile
    threefry.unroll_on_cpu()

    out_path = os.path.join(args.run_dir, EVAL_FILE)
    rundir.refuse_link(out_path)  # before the work, not after it
    guards.check_seed(args.seed, "--seed", guards.MAX_SEED - EVAL_SEED_OFFSET)
    if getattr(args, "remote", None):
        return main_remote(args, out_path)
    n, r = getattr(args, "prompts", None), getattr(args, "rollouts", None)
    if n is not None or r is not None:
        return main_sampled(args, out_path, n, r)
    cfg, built, states, step = load_run(args.run_dir, args.episodes, getattr(args, "step", None))
    summary = evaluate_run(built, states, seed=args.seed)
    summary["checkpoint_update"] = step
    write_summary(summary, out_path)
    print(format_summary(summary))
    for line in sample_lines(built, states, seed=args.seed):
        print(line)
    return 0


def main_sampled(args, out_path: str, n: int | None, r: int | None) -> int:
    """``jaxrl eval RUN -n N -r R`` (:mod:`jaxrl.run.sampled`): print it and add it to
    ``eval.json`` under ``"sampled"`` (the file's other entries are kept)."""
    from jaxrl.run import sampled

    if n is None or r is None:
        raise ConfigError("-n/--prompts and -r/--rollouts go together: e.g. jaxrl eval RUN -n 64 -r 8")
    if n < 1 or r < 1:
        raise ConfigError(f"-n/--prompts and -r/--rollouts: must be >= 1, got -n {n} -r {r}")
    if args.episodes is not None:
        raise ConfigError("--episodes does not apply with -n/-r (the prompts are -n)")
    cfg, built, states, step = load_run(args.run_dir, step=getattr(args, "step", None))
    if built.program.lm.rollouts is None:
        raise ConfigError(f"-n/-r: {cfg.algo} on {cfg.env.id} has no held-out prompts to sample (token-task runs only)")
    first = jax.tree_util.tree_map(lambda x: x[0], states)
    key = jax.random.PRNGKey(args.seed + EVAL_SEED_OFFSET)
    summary = {**sampled.summarise(built.program.lm.rollouts(first, key, n, r)), "checkpoint_update": step, "seed_of_run": 0}
    merge_summary(out_path, "sampled", summary)
    print(sampled.format_sampled(summary))
    return 0


def main_remote(args, out_path: str) -> int:
    """``jaxrl eval RUN --remote URL``: the run's deterministic policy (a language-model
    run: its greedy completions) against a served env (:mod:`jaxrl.run.remote`); the summary
    goes into ``eval.json`` under ``"remote"``."""
    from jaxrl.interop import openenv
    from jaxrl.run import remote

    if getattr(args, "prompts", None) is not None or getattr(args, "rollouts", None) is not None:
        raise ConfigError("--remote does not combine with -n/-r")
    cfg, built, states, step = load_run(args.run_dir, step=getattr(args, "step", None))
    if not remote.plays_remotely(built):
        raise ConfigError(f"--remote: {cfg.algo} on {cfg.env.id} has no acting policy to step a remote env with")
    episodes = args.episodes if args.episodes is not None else int(getattr(cfg.algo_config, "eval_episodes", 10))
    if episodes < 2:
        raise ConfigError(f"--episodes: need at least 2 episodes for a confidence interval, got {episodes}")
    space = remote.served_space(args.remote)
    seed = args.seed + EVAL_SEED_OFFSET
    lm = built.program.policy is None
    try:
        if lm:
            returns = remote.lm_returns(built, states, args.remote, episodes, seed, space, args.run_dir)
        else:
            returns = remote.policy_returns(built, states, args.remote, episodes, seed, space)
    except (ConnectionError, openenv.OpenEnvError, TimeoutError) as exc:
        raise ConfigError(f"--remote {args.remote}: {exc}") from None
    mode = "greedy" if lm else "deterministic"
    stats = {**return_stats(returns), "label": f"remote {mode} return"}
    summary = {"policies": {mode: stats}, "metric": "return", "remote": args.remote, "checkpoint_update": step}
    merge_summary(out_path, "remote", summary)
    print(format_summary(summary))
    return 0
