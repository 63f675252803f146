"""The ``jaxrl eval`` and ``jaxrl render`` commands: parsed arguments to printed lines and files.

Each handler checks its arguments before any work, loads the run with
:func:`jaxrl.run.evaluate.load_run`, calls the library side of :mod:`jaxrl.run.evaluate`
(summaries, remote episodes, frames) or :mod:`jaxrl.run.sampled`, prints the result and
writes ``eval.json`` (or the GIF). Failures raise and reach the one-line handler of
:func:`jaxrl.cli.main`.
"""

from __future__ import annotations

import os

import jax
import numpy as np

from jaxrl.core import threefry
from jaxrl.core.tokens import TokenTask
from jaxrl.run import compile_cache
from jaxrl.run.config import ConfigError
from jaxrl.run.evaluate import (
    EVAL_SEED_OFFSET, actor_factory, evaluate_run, format_summary, load_run, merge_summary, remote_action_map,
    remote_returns, render_frames, return_stats, sample_lines, write_summary,
)
from jaxrl.run.files import EVAL_FILE
from jaxrl.text.task import TextTask

__all__ = ["check_render_args", "main_eval", "main_remote", "main_render", "main_sampled", "remote_completions"]


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
    """``jaxrl eval RUN --remote URL``: the run's deterministic policy against a served env
    (``jaxrl serve`` or any OpenEnv server speaking jaxrl's observation shape), stepped from
    this host; the summary goes into ``eval.json`` under ``"remote"``."""
    from jaxrl.interop import openenv

    if getattr(args, "prompts", None) is not None or getattr(args, "rollouts", None) is not None:
        raise ConfigError("--remote does not combine with -n/-r")
    cfg, built, states, step = load_run(args.run_dir, step=getattr(args, "step", None))
    policy = built.program.policy
    lm = built.program.lm.model_params
    if policy is None and (lm is None or lm.export is None or not isinstance(built.envs.env.unwrapped, TokenTask)):
        raise ConfigError(f"--remote: {cfg.algo} on {cfg.env.id} has no acting policy to step a remote env with")
    episodes = args.episodes if args.episodes is not None else int(getattr(cfg.algo_config, "eval_episodes", 10))
    if episodes < 2:
        raise ConfigError(f"--episodes: need at least 2 episodes for a confidence interval, got {episodes}")
    try:
        schema = openenv.schema(args.remote)
    except (ConnectionError, ValueError) as exc:
        raise ConfigError(f"--remote: {exc}") from None
    remote_space = (schema.get("action") or {}).get("x-jaxrl-space")
    if not remote_space:
        raise ConfigError(f"--remote {args.remote}: the server's /schema names no x-jaxrl-space (not a jaxrl serve server)")
    if policy is None:
        return _remote_lm(args, out_path, built, states, step, episodes, remote_space)
    action_map = remote_action_map(policy.env.action_space(built.envs.eval_params), remote_space)
    obs_space = policy.env.observation_space(built.envs.eval_params)
    agent = policy.params(jax.tree_util.tree_map(lambda x: x[0], states))
    act = actor_factory(policy, agent, deterministic=True)
    try:
        returns = remote_returns(act, args.remote, episodes, args.seed + EVAL_SEED_OFFSET, np.dtype(obs_space.dtype), action_map)
    except (ConnectionError, openenv.OpenEnvError, TimeoutError) as exc:
        raise ConfigError(f"--remote {args.remote}: {exc}") from None
    return _report_remote(out_path, args.remote, step, returns, "deterministic")


def _report_remote(out_path: str, url: str, step: int, returns: list[float], mode: str) -> int:
    """Print the remote returns' summary and add it to ``eval.json`` under ``"remote"``."""
    stats = {**return_stats(returns), "label": f"remote {mode} return"}
    summary = {"policies": {mode: stats}, "metric": "return", "remote": url, "checkpoint_update": step}
    merge_summary(out_path, "remote", summary)
    print(format_summary(summary))
    return 0


def _remote_lm(args, out_path: str, built, states, step: int, episodes: int, remote_space: dict) -> int:
    """``jaxrl eval RUN --remote URL`` for a language-model run (GRPO, SFT): the trained model
    (seed 0, written out as ``export-hf`` writes it, into a temporary directory) completes
    each served prompt greedily, and the completion goes back as one string action (a text
    task) or token by token; the summary goes into ``eval.json`` under ``"remote"``."""
    import tempfile

    from jaxrl.interop import openenv
    from jaxrl.models.lm import load_lm

    task = built.envs.env.unwrapped
    vocab = task.action_space(built.envs.eval_params).n
    if remote_space.get("kind") != "Discrete" or remote_space.get("n") != vocab:
        raise ConfigError(f"--remote: the run's model writes tokens of a vocabulary of {vocab}, the server's action space is "
                          f"{remote_space.get('kind')}({remote_space.get('n', remote_space.get('shape'))}); serve the run's "
                          f"task: jaxrl serve {args.run_dir} --held-out")
    state = jax.device_get(jax.tree_util.tree_map(lambda x: x[0], states))
    with tempfile.TemporaryDirectory(prefix="jaxrl-remote-") as tmp:
        out = built.program.lm.model_params.export(state, os.path.join(tmp, "model"), False)
        model, params = load_lm(out)
    try:
        returns = remote_completions(model, params, task, args.remote, episodes, args.seed + EVAL_SEED_OFFSET)
    except (ConnectionError, openenv.OpenEnvError, TimeoutError) as exc:
        raise ConfigError(f"--remote {args.remote}: {exc}") from None
    return _report_remote(out_path, args.remote, step, returns, "greedy")


def remote_completions(model, params, task, url: str, episodes: int, seed: int, as_text: bool | None = None) -> list[float]:
    """Returns of ``episodes`` served token-task episodes (``reset(seed=seed + i)``), each
    completed greedily by ``model``: one generate call on the left-padded prompt (the task's
    ``prompt_len``, so one compiled program), then the completion up to the task's
    end-of-turn id sent as text when the server speaks text (its observation has ``"text"``),
    else as token ids one step each (``as_text`` True / False: always that way)."""
    from jaxrl.interop.openenv import OpenEnvClient
    from jaxrl.models.lm import generate

    eot, pad = int(task.end_of_turn), int(task.pad_id)
    returns = []
    with OpenEnvClient(url) as client:
        for i in range(episodes):
            result = client.reset(seed=seed + i)
            prompt = np.asarray(result.obs, np.int32)[: task.prompt_len]
            if prompt.shape != (task.prompt_len,):
                raise ConfigError(f"--remote: the served observation holds {prompt.size} tokens, the run's task a prompt of "
                                  f"{task.prompt_len}: serve the run's own task (jaxrl serve RUN --held-out)")
            mask = np.cumsum(prompt != pad) > 0  # the left padding
            out = generate(model, params, prompt[None], mask[None].astype(np.int32),
                           max_new_tokens=int(task.max_completion_len), eos_ids=(eot,))
            tokens = [int(t) for t in np.asarray(out)[0, task.prompt_len:]]
            tokens = tokens[: tokens.index(eot) + 1] if eot in tokens else tokens
            total = 0.0
            speaks_text = isinstance(task, TextTask) and isinstance(result.observation, dict) and "text" in result.observation
            if speaks_text if as_text is None else as_text:
                result = client.step(task.decode(tokens[:-1] if tokens and tokens[-1] == eot else tokens))
                total += float(result.reward)
            else:
                for token in tokens:
                    result = client.step(token)
                    total += float(result.reward)
                    if result.done:
                        break
            if not result.done:
                raise ConfigError(f"--remote: episode {i} did not end after the completion (multi-turn tasks are not played "
                                  "remotely)")
            returns.append(total)
    return returns


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

    compile_cache.enable()
    threefry.unroll_on_cpu()

    check_render_args(args)
    guards.check_seed(args.seed, "--seed")
    cfg, built, states, _ = load_run(args.run_dir, step=getattr(args, "step", None))
    if built.program.policy is None and built.program.lm.samples is not None:
        print("jaxrl: this run's episodes are token sequences; transcripts instead of frames:")
        for line in sample_lines(built, states, seed=args.seed):
            print(line)
        return 0
    try:
        frames = render_frames(built, states, args.steps, not args.stochastic, args.seed)
    except NotImplementedError as exc:  # the env has no renderer
        raise ConfigError(f"render: {exc or 'this env does not render'}; `jaxrl eval {args.run_dir}` scores the run without frames") from None
    render.save_gif(frames, args.out, fps=args.fps)
    stored = render.gif_frame_count(args.out)
    merged = len(frames) - stored
    note = f" ({len(frames)} states; {merged} repeated frames shown by lengthening the previous one)" if merged else ""
    print(f"jaxrl: wrote {stored} frames ({len(frames) - 1} env steps) to {args.out}{note}")
    return 0
