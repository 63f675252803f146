"""Evaluating and rendering a trained run, as library functions (the commands ``jaxrl eval``
and ``jaxrl render``, :mod:`jaxrl.commands.eval` and :mod:`jaxrl.commands.render`, call them).

Evaluation runs the program's own ``evaluate(state, key)`` (jitted, vmapped over the run's
seeds) and summarises the per-episode arrays its :class:`~jaxrl.algos.contract.EvalReport`
names (PPO: the deterministic and the stochastic policy's returns; GRPO: the greedy reward
and exact match). The summary of each pools the episodes of all seeds and reports

* ``mean`` and ``std`` (sample standard deviation, ``ddof=1``) of the return,
* a 95% confidence interval of the *mean* return from Student's t distribution:
  ``mean +- t_{0.975, n-1} * std / sqrt(n)`` (exact for normal returns, conservative
  compared with the normal approximation for small ``n``; zero width when every episode
  returns the same).

Rendering rolls one episode of seed 0's policy with the program's acting
:class:`~jaxrl.algos.contract.Policy` into frames through :mod:`jaxrl.core.render` (an
algorithm without one, a token task, has transcripts instead: :func:`sample_lines`). Remote
evaluation steps that policy from this host against an OpenEnv server (:func:`remote_returns`).
"""

from __future__ import annotations

import functools
import json
import math
import os
import statistics
from typing import Any, Callable

import jax
import numpy as np

from jaxrl.algos.common.train import COMPILER_OPTIONS
from jaxrl.algos.contract import EvalReport
from jaxrl.run import config as config_lib
from jaxrl.run.build import Built, build, seed_keys
from jaxrl.run.checkpoint import Checkpoints
from jaxrl.run.config import ConfigError, RunConfig
from jaxrl.run.files import CHECKPOINT_DIR, CONFIG_FILE

EVAL_SEED_OFFSET = 1_000_003  # eval keys never coincide with a training seed's key
#: ``evaluate`` output keys ``episode_source/<name>``: 1 on the episodes of a mixed task's source.
SOURCE_EPISODES = "episode_source/"


def return_stats(returns) -> dict:
    """Mean, sample std and a Student-t 95% CI of the mean of ``returns`` (any shape)."""
    x = np.asarray(returns, np.float64).ravel()
    n = int(x.size)
    if n == 0:
        raise ValueError("no episode returns to summarise")
    mean = float(x.mean())
    std = float(x.std(ddof=1)) if n > 1 else 0.0
    if n > 1:
        half = t_quantile(0.975, n - 1) * std / math.sqrt(n)
    else:
        half = math.inf
    return {"mean": mean, "std": std, "ci95_low": mean - half, "ci95_high": mean + half, "episodes": n}


def t_quantile(p: float, df: int) -> float:
    """The ``p`` quantile (``0.5 < p < 1``) of Student's t with ``df >= 1`` degrees of
    freedom: ``scipy.stats.t.ppf(p, df)`` to 3e-12 relative, without importing scipy (its
    cost: docs/performance.md). The normal quantile's Cornish-Fisher expansion, refined by
    Newton's method on the CDF below 1000 degrees; exact forms for ``df`` 1 and 2."""
    if not 0.5 < p < 1.0 or df < 1:
        raise ValueError(f"t_quantile needs 0.5 < p < 1 and df >= 1, got p={p}, df={df}")
    if df == 1:
        return math.tan(math.pi * (p - 0.5))
    if df == 2:
        return (2 * p - 1) / math.sqrt(2 * p * (1 - p))
    z = statistics.NormalDist().inv_cdf(p)
    terms = ((z**3 + z) / 4, (5 * z**5 + 16 * z**3 + 3 * z) / 96, (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / 384,
             (79 * z**9 + 776 * z**7 + 1482 * z**5 - 1920 * z**3 - 945 * z) / 92160)  # Abramowitz-Stegun 26.7.5
    t = z + sum(g / df ** (i + 1) for i, g in enumerate(terms))
    if df >= 1000:  # the expansion is exact to rounding here; lgamma's would not be
        return t
    log_norm = math.lgamma((df + 1) / 2) - math.lgamma(df / 2) - 0.5 * math.log(df * math.pi)
    for _ in range(50):
        inner = 0.5 * _betainc(0.5, df / 2, t * t / (df + t * t))  # P(0 < T < t)
        pdf = math.exp(log_norm - (df + 1) / 2 * math.log1p(t * t / df))
        step = (inner - (p - 0.5)) / pdf
        t -= step
        if abs(step) <= 1e-14 * abs(t):
            break
    return t


def _betainc(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta ``I_x(a, b)`` (Lentz's continued fraction, with the
    symmetry ``I_x(a, b) = 1 - I_{1-x}(b, a)`` where the fraction converges slowly)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    if x > (a + 1) / (a + b + 2):
        return 1.0 - _betainc(b, a, 1.0 - x)
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)) / a
    tiny = 1e-300
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    f = d
    for m in range(1, 500):
        for numerator in (m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
                          -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))):
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + numerator / c
            c = c if abs(c) > tiny else tiny
            f *= c * d
        if abs(c * d - 1.0) < 1e-16:
            break
    return front * f


def summarise(metrics: dict, report: EvalReport) -> dict:
    """The eval summary of an ``evaluate`` output (leaves ``[S, ...]`` over seeds)."""
    missing = [key for key in report.scores if key not in metrics]
    if missing:
        raise ValueError(f"evaluate returned no {missing}: got {sorted(metrics)}")
    phrases = report.phrases or {}
    policies = {
        label: {**return_stats(metrics[key]), "label": phrases.get(key, f"{label} {report.metric}")}
        for key, label in report.scores.items()
    }
    headline = next(iter(report.scores))
    scores = np.asarray(metrics[headline], np.float64)
    summary = {
        "policies": policies,
        "metric": report.metric,
        "seeds": int(scores.shape[0]),
        "per_seed": {f"{report.metric}_mean": scores.mean(axis=-1).tolist()},
        "interval": f"95% CI of the mean {report.metric}, Student t with n-1 dof, episodes of all seeds pooled",
    }
    sources = {k[len(SOURCE_EPISODES):]: np.asarray(v) > 0.5 for k, v in metrics.items() if k.startswith(SOURCE_EPISODES)}
    if sources:  # a mixed task (env.mix): the headline score over each source's episodes
        summary["sources"] = {
            name: {**(return_stats(scores[on]) if on.any() else {"episodes": 0}), "share": float(on.mean())}
            for name, on in sources.items()
        }
    if "held_out_rows" in metrics:  # a text task's held-out rows, each scored once per seed
        summary["held_out_rows"] = {"scored": int(scores.shape[-1]), "of": int(np.asarray(metrics["held_out_rows"]).ravel()[0])}
    return summary


def format_summary(summary: dict) -> str:
    """Human-readable lines of a summary."""
    lines = []
    for mode, s in summary["policies"].items():
        label = s.get("label", f"{mode} {summary.get('metric', 'return')}")
        lines.append(
            f"eval {label:<20} {s['mean']:.3f} +- {s['std']:.3f} (std) "
            f"95% CI [{s['ci95_low']:.3f}, {s['ci95_high']:.3f}] over {s['episodes']} episodes"
        )
    for name, s in summary.get("sources", {}).items():
        if s["episodes"]:
            lines.append(f"eval source {name:<14} {s['mean']:.3f} +- {s['std']:.3f} (std) 95% CI [{s['ci95_low']:.3f}, "
                         f"{s['ci95_high']:.3f}] over {s['episodes']} episodes ({s['share']:.0%} of them)")
        else:
            lines.append(f"eval source {name:<14} no episode drawn")
    rows = summary.get("held_out_rows")
    if rows:
        cap = "" if rows["scored"] == rows["of"] else f" (the first {rows['scored']}: eval_episodes or --episodes caps it)"
        seeds = f" per seed ({summary['seeds']} seeds)" if summary.get("seeds", 1) > 1 else ""
        lines.append(f"eval held-out rows: {rows['scored']} of {rows['of']} scored, each once{seeds}{cap}")
    return "\n".join(lines)


def write_summary(summary: dict, path: str) -> None:
    """Write ``summary`` as JSON, atomically; a symbolic link at ``path`` is refused."""
    from jaxrl.run import rundir

    rundir.write_text(path, json.dumps(summary, indent=2))


def merge_summary(path: str, key: str, summary: dict) -> None:
    """Write ``summary`` under ``key`` of the eval file at ``path``, keeping what it held
    (an unreadable or non-object file is replaced)."""
    previous = {}
    if os.path.exists(path):
        try:
            with open(path) as f:
                previous = json.load(f)
        except (OSError, ValueError):
            previous = {}
    write_summary({**(previous if isinstance(previous, dict) else {}), key: summary}, path)


def eval_program(built: Built) -> Any:
    """The jitted ``evaluate`` over a ``[S, ...]`` batch of states and ``[S]`` keys."""
    return jax.jit(jax.vmap(built.program.evaluate), compiler_options=COMPILER_OPTIONS)


def eval_keys(seed: int, num_seeds: int) -> jax.Array:
    """The ``[S]`` evaluation keys of a run trained with ``train.seed = seed``."""
    return _eval_keys(seed + EVAL_SEED_OFFSET, num_seeds)


@functools.partial(jax.jit, static_argnums=(0, 1))
def _eval_keys(seed: int, num_seeds: int) -> jax.Array:  # one small program instead of two
    return jax.random.split(jax.random.PRNGKey(seed), num_seeds)


def prepare_evaluate(built: Built, states: Any, seed: int = 0) -> Callable[[Any], Any]:
    """``states -> metrics`` (device arrays, not yet fetched) of a run trained with
    ``train.seed = seed``, compiled now for states shaped and placed like ``states`` (arrays
    or ``jax.ShapeDtypeStruct``): the trainer prepares it while the first chunk runs, so the
    end of a run only executes it. Same metrics as :func:`evaluate_states`."""
    keys = eval_keys(seed, jax.tree_util.tree_leaves(states)[0].shape[0])
    compiled = eval_program(built).lower(states, keys).compile()
    return lambda s: compiled(s, keys)


def evaluate_states(built: Built, states: Any, seed: int = 0) -> dict:
    """Run the program's ``evaluate`` on a ``[S, ...]`` batch of states; host metrics dict."""
    keys = eval_keys(seed, jax.tree_util.tree_leaves(states)[0].shape[0])
    return jax.device_get(eval_program(built)(states, keys))


def evaluate_run(built: Built, states: Any, seed: int = 0) -> dict:
    """The eval summary (see the module docstring) of trained ``states``."""
    return summarise(evaluate_states(built, states, seed), built.program.report)


# ------------------------------------------------------------------------------------------
# Loading a run
# ------------------------------------------------------------------------------------------


def with_episodes(cfg: RunConfig, episodes: int | None) -> RunConfig:
    """``cfg`` evaluating ``episodes`` episodes (a new config; ``cfg`` unchanged)."""
    if episodes is None:
        return cfg
    if episodes < 2:
        raise ConfigError(f"--episodes: need at least 2 episodes for a confidence interval, got {episodes}")
    try:
        algo_config = cfg.algo_config.with_eval_episodes(episodes)
        algo_config.validate()
    except ValueError as exc:
        raise ConfigError(f"--episodes: {exc}") from None
    return config_lib.replace_algo_config(cfg, algo_config)


def run_config(run_dir: str) -> RunConfig:
    """The resolved config saved in a run directory (read as bounded YAML)."""
    path = os.path.join(run_dir, CONFIG_FILE)
    if not os.path.lexists(path):
        raise ConfigError(f"{run_dir!r} is not a run directory (no {CONFIG_FILE})")
    return config_lib.load_config(path)


def load_run(run_dir: str, episodes: int | None = None, step: int | None = None):
    """``(cfg, built, states [S, ...], step)`` of checkpoint ``step`` of ``run_dir`` (default:
    the newest that verifies).

    The config is the one recorded with that checkpoint (what trained it), not the run's
    current ``config.yaml``, which may have been edited since; checkpoints of runs written
    before configs were recorded use ``config.yaml``. ``episodes`` replaces the algorithm's
    evaluation episode count (a new config object). The checkpoints are opened read-only:
    nothing in the run directory is created, cleaned up or deleted, so this is safe while
    the run is still training.
    """
    from jaxrl.run import checkpoint as ckpt_lib
    from jaxrl.run import guards

    fallback = run_config(run_dir)  # also: is this a run directory at all
    from jaxrl.run import rundir

    with Checkpoints(os.path.join(run_dir, CHECKPOINT_DIR), read_only=True, run_id=rundir.run_id(run_dir)) as ckpts:
        steps = ckpts.steps()
        if not steps:
            raise ConfigError(f"{run_dir!r} has no checkpoint yet")
        if step is not None and int(step) not in steps:
            raise ConfigError(f"--step {step}: {run_dir!r} has no checkpoint {step}; it has {', '.join(map(str, steps))}")
        damaged, builds = [], {}
        for candidate in [int(step)] if step is not None else reversed(steps):
            try:
                cfg = with_episodes(_recorded_config(ckpts, candidate, fallback), episodes)
                key = config_lib.dump_config(cfg)
                if key not in builds:
                    builds[key] = build(cfg)
                    guards.check_memory(cfg, builds[key])
                built = builds[key]
                template = jax.eval_shape(jax.vmap(built.program.init), seed_keys(cfg.train.seed, cfg.train.seeds))
                restored = ckpts.restore_verified(template, candidate)
            except ckpt_lib.CheckpointCorrupt as exc:
                if step is not None:
                    raise
                damaged.append(exc)
                continue
            ckpts.report_fallback(damaged, candidate)
            return cfg, built, restored.state, restored.step
    raise ckpt_lib.CheckpointError(
        f"no intact checkpoint in {ckpts.directory}: " + "; ".join(f"{e.step}: {e.reason}" for e in damaged)
    )


def _recorded_config(ckpts: Checkpoints, step: int, fallback: RunConfig) -> RunConfig:
    """The run config stored in checkpoint ``step``'s record (``fallback`` when it has none)."""
    meta = ckpts.record(step).get("meta") or {}
    raw = meta.get("config")
    if raw is None:
        return fallback
    try:
        return config_lib.config_from_dict(raw)
    except ConfigError as exc:
        from jaxrl.run.checkpoint import CheckpointCorrupt

        raise CheckpointCorrupt(step, ckpts.directory, f"its recorded config is not valid: {exc}") from None


def remote_action_map(policy_space, remote: dict):
    """``policy action -> action the server takes``: identity, or for a policy acting in a
    box of other bounds (PPO's ``[-1, 1]``) a clip and an affine map onto the server's box
    (as :class:`~jaxrl.core.wrappers.RescaleAction`)."""
    from jaxrl.core import spaces

    kind = remote.get("kind")
    if isinstance(policy_space, spaces.Discrete):
        if kind != "Discrete" or remote.get("n") != policy_space.n:
            raise ConfigError(f"--remote: the policy acts in {policy_space!r}, the server's action space is {_space_line(remote)}")
        return lambda a: int(np.asarray(a))
    if kind != "Box" or list(remote.get("shape", [])) != list(policy_space.shape):
        raise ConfigError(f"--remote: the policy acts in {policy_space!r}, the server's action space is {_space_line(remote)}")
    low, high = np.asarray(policy_space.low, np.float64), np.asarray(policy_space.high, np.float64)
    r_low, r_high = np.asarray(remote["low"], np.float64), np.asarray(remote["high"], np.float64)
    if np.array_equal(low, r_low) and np.array_equal(high, r_high):
        return lambda a: np.asarray(a, np.float64).tolist()
    return lambda a: (r_low + (np.clip(np.asarray(a, np.float64), low, high) - low) / (high - low) * (r_high - r_low)).tolist()


def _space_line(spec: dict) -> str:
    return f"Discrete({spec.get('n')})" if spec.get("kind") == "Discrete" else f"{spec.get('kind')}(shape={spec.get('shape')})"


def remote_returns(act, url: str, episodes: int, seed: int, obs_dtype, action_map, max_steps: int = 1_000_000) -> list[float]:
    """Returns of ``episodes`` host-stepped episodes on the OpenEnv server at ``url``:
    episode ``i`` is ``reset(seed=seed + i)``; ``act(key, obs)`` acts (a fresh actor per
    episode from ``act()``), step ``t`` with ``fold_in(PRNGKey(seed + i), t)``."""
    from jaxrl.interop.openenv import OpenEnvClient

    returns = []
    with OpenEnvClient(url) as client:
        for i in range(episodes):
            actor, key = act(), jax.random.PRNGKey(seed + i)
            result, total, t = client.reset(seed=seed + i), 0.0, 0
            while t == 0 or not result.done:
                if t >= max_steps:
                    raise ConfigError(f"--remote: episode {i} did not end within {max_steps} steps")
                action = actor(jax.random.fold_in(key, t), np.asarray(result.obs, obs_dtype))
                result = client.step(action_map(action))
                total, t = total + float(result.reward), t + 1
            returns.append(total)
    return returns


def _fresh_actor(policy, agent, step):
    """An episode's ``act(key, obs)``: a fresh carry, the one compiled ``step``."""
    carry = [policy.init_carry(agent)]

    def act(key, obs):
        carry[0], action = step(carry[0], key, obs)
        return action

    return act


def sample_lines(built: Built, states: Any, seed: int = 0, num: int = 5) -> list[str]:
    """The program's printable episodes (GRPO: held-out prompts with greedy completions and
    rewards) for the first seed; empty if it has none."""
    if built.program.lm.samples is None:
        return []
    first = jax.tree_util.tree_map(lambda x: x[0], states)
    lines = built.program.lm.samples(first, jax.random.PRNGKey(seed + EVAL_SEED_OFFSET), num)
    return ["samples (held-out prompt -> greedy completion):", *("  " + line for line in lines)] if lines else []


# ------------------------------------------------------------------------------------------
# Rendering
# ------------------------------------------------------------------------------------------


def _act(policy, agent, deterministic: bool, carry, key, obs):
    return policy.act(agent, carry, obs, key, deterministic)


def episode_actor(policy, agent, deterministic: bool = True):
    """``act(key, obs) -> action`` for one episode of ``policy`` (host loop, e.g.
    :func:`jaxrl.core.render.rollout`): the carry starts from ``policy.init_carry`` and is
    threaded from each step to the next (a recurrent policy keeps its memory)."""
    return actor_factory(policy, agent, deterministic)()


def actor_factory(policy, agent, deterministic: bool = True):
    """``() -> act``: each call a fresh :func:`episode_actor` (a new carry), all sharing one
    compiled step, for episodes stepped one after another (``jaxrl eval --remote``)."""
    return functools.partial(_fresh_actor, policy, agent, jax.jit(functools.partial(_act, policy, agent, deterministic)))


def render_frames(built: Built, states: Any, steps: int, deterministic: bool = True, seed: int = 0):
    """Frames (``uint8[H, W, 3]``) of one episode of seed 0's trained policy."""
    from jaxrl.core import render

    policy = built.program.policy
    if policy is None:
        raise ConfigError("this algorithm has no acting policy to render; `jaxrl eval RUN` prints its episodes")
    first = jax.tree_util.tree_map(lambda x: x[0], states)
    agent = policy.params(first)
    act = episode_actor(policy, agent, deterministic)
    rollout_states = render.rollout(policy.env, built.envs.eval_params, act, jax.random.PRNGKey(seed), steps)
    return render.rollout_frames(policy.env, built.envs.eval_params, rollout_states)


def save_run_gif(built: Built, states: Any, path: str, steps: int, deterministic: bool = True, seed: int = 0,
                 fps: int = 30) -> tuple[int, int]:
    """One episode of seed 0's trained policy (:func:`render_frames`) written to ``path`` as a
    GIF; returns the states rendered and the frames stored (a frame equal to the one before
    lengthens that one instead)."""
    from jaxrl.core import render

    frames = render_frames(built, states, steps, deterministic, seed)
    render.save_gif(frames, path, fps=fps)
    return len(frames), render.gif_frame_count(path)


def __getattr__(name: str):
    """The command handlers that moved to :mod:`jaxrl.commands` (with a warning)."""
    from jaxrl import _compat

    return _compat.moved_name(__name__, name)
