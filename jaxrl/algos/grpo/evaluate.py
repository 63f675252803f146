"""GRPO's evaluation: greedy episodes on the held-out split, the same evaluation every
``eval_every`` updates inside training (:func:`update_and_evaluate`), printable samples, and
``r`` sampled dialogues per held-out prompt (``jaxrl eval -n -r``)."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from jaxrl.algos.common.train import COMPILER_OPTIONS
from jaxrl.algos.grpo.rollout import Rollout, group_rollout
from jaxrl.algos.grpo import update as update_lib
from jaxrl.algos.grpo.update import GRPOState, Setup, acting_params
from jaxrl.core.tokens import TokenTask
from jaxrl.text.mix import SOURCE, source_metrics
from jaxrl.text.task import evaluation_rows, evaluation_starts

Array = jax.Array


def _ci95(x: Array) -> Array:
    """Half-width of the normal-approximation 95% interval of the mean of ``x [N]``."""
    return 1.96 * jnp.std(x, ddof=1) / jnp.sqrt(x.shape[0])


def eval_rollout(setup: Setup, params, key: Array, episodes: int | None = None) -> Rollout:
    """Greedy episodes on the evaluation params (held-out prompts for token tasks): a text
    task's held-out rows each once, at most ``episodes`` of them (default ``eval_episodes``),
    or ``episodes`` drawn ones (``eval_held_out: sample``, tasks that generate their prompts):
    :func:`jaxrl.text.task.evaluation_starts`."""
    k_reset, k_roll = jax.random.split(key)
    starts = evaluation_starts(setup.env, setup.eval_params, setup.cfg.eval_episodes if episodes is None else episodes,
                               k_reset, setup.cfg.eval_held_out)
    return group_rollout(
        setup.policy, setup.env, setup.eval_params, params, starts, k_roll, setup.num_steps, jnp.float32(1.0),
        greedy=True,
    )


def evaluate(setup: Setup, state: GRPOState, key: Array) -> dict:
    """Greedy evaluation over ``eval_episodes`` (held-out prompts for token tasks).

    Returns ``episode_returns`` (float32 ``[E]``, the trainer's eval convention: per-episode
    return of the greedy policy, i.e. the verifier reward for token tasks), for a token
    task ``episode_returns_exact_match`` (the per-prompt 0/1 exact match, so ``jaxrl eval``
    summarises it with its own 95% interval), ``episode_returns_<key>`` for every key of a
    token task's :attr:`~jaxrl.core.tokens.TokenTask.eval_scores`, and scalars:
    ``return_mean``, ``return_ci95``, ``length_mean`` and, for every info key (e.g. ``exact_match``), its mean and ``_ci95``
    (normal-approximation half-width); ``held_out_rows`` (int32 ``[]``, the rows of the split)
    when the episodes are a text task's rows, each once (:func:`eval_rollout`); for a mixed
    task (``env.mix``) its per-source figures (:func:`jaxrl.text.mix.source_metrics`) and
    ``episode_source/<name>`` (float32 ``[E]``, 1 on that source's episodes).
    """
    ro = eval_rollout(setup, acting_params(state), key)
    out = {
        **_rows(setup),
        "episode_returns": ro.returns,
        "return_mean": jnp.mean(ro.returns),
        "return_ci95": _ci95(ro.returns),
        "length_mean": jnp.mean(ro.length.astype(jnp.float32)),
    }
    info, by_source = source_metrics(ro.final_info, ro.returns)  # a mixed task's: reward/<source>/mean ...
    for name, value in info.items():
        out[name] = jnp.mean(value)
        out[f"{name}_ci95"] = _ci95(value)
    out.update(by_source)
    out.update({f"episode_{k}": v for k, v in ro.final_info.items() if k.startswith(SOURCE)})  # jaxrl eval: per source
    if "exact_match" in ro.final_info:
        out["episode_returns_exact_match"] = ro.final_info["exact_match"]
    for name, _ in setup.env.eval_scores if isinstance(setup.env, TokenTask) else ():  # the task's own figures
        out[f"episode_returns_{name}"] = ro.final_info[name]
    return out


def _rows(setup: Setup) -> dict:
    rows = evaluation_rows(setup.env, setup.eval_params, setup.cfg.eval_held_out)
    return {"held_out_rows": jnp.int32(rows)} if rows else {}


#: ``fold_in`` salt of the in-training evaluation's key: a stream of the evaluated state's key
#: that no update draws from (they ``split`` it), so evaluating changes no training bit, and a
#: checkpoint (which holds that key) reproduces its evaluation and resumes bit for bit.
HELDOUT_SALT = 0x6576616C  # "eval"


def heldout_key(state: GRPOState) -> Array:
    """The key of the in-training evaluation of ``state`` (the state after an update):
    ``evaluate`` with ``eval_episodes = eval_every_episodes`` and this key gives its figures."""
    return jax.random.fold_in(state.key, HELDOUT_SALT)


def heldout_metrics(setup: Setup, params, key: Array) -> dict:
    """The figures of :func:`evaluate` on ``eval_every_episodes`` greedy held-out episodes (a
    text task's held-out rows, each once, the same rows at every evaluation), as update
    metrics: ``heldout_reward`` (its ``return_mean``) and ``heldout_<key>`` for every
    info key (``exact_match``, a task's :attr:`~jaxrl.core.tokens.TokenTask.eval_scores`...),
    float32 ``[]``."""
    ro = eval_rollout(setup, params, key, setup.cfg.eval_every_episodes)
    out = {"heldout_reward": jnp.mean(ro.returns)}
    info, by_source = source_metrics(ro.final_info, ro.returns)  # a mixed task's, as heldout_reward/<source>/mean ...
    for name, value in info.items():
        out[f"heldout_{name}"] = jnp.mean(value)
    out.update({f"heldout_{k}": v for k, v in by_source.items()})
    return {k: jnp.asarray(v, jnp.float32) for k, v in out.items()}


def update_and_evaluate(setup: Setup, state: GRPOState) -> tuple[GRPOState, dict]:
    """:func:`~jaxrl.algos.grpo.update.update`, then, after every ``eval_every``-th update
    (``update_step`` a multiple of it), :func:`heldout_metrics` of the new state's
    parameters with its :func:`heldout_key`; the other updates log NaN for them (no
    evaluation: never a 0, never a ``train.stop_at``). A ``lax.cond`` in the compiled chunk,
    no host round trip; with several seeds (``vmap``) both branches run every update and the
    NaNs are selected."""
    new, metrics = update_lib.update(setup, state)
    key = heldout_key(new)
    figures = functools.partial(heldout_metrics, setup)
    shapes = jax.eval_shape(figures, acting_params(new), key)

    def skipped(params, key):
        return {k: jnp.full(s.shape, jnp.nan, s.dtype) for k, s in shapes.items()}

    due = new.update_step % setup.cfg.eval_every == 0
    return new, {**metrics, **jax.lax.cond(due, figures, skipped, acting_params(new), key)}


def transcript(task: TokenTask, dialogue, turns: int) -> str:
    """Host-side text of one dialogue's part after the prompt (numpy ``int32 [dialogue_len]``):
    its first ``turns`` policy turns, each followed by the env's reply after `` | ``."""
    tt, tr, lp = task.max_turn_tokens, task.max_reply_tokens, task.prompt_len
    parts = []
    for k in range(turns):
        start = lp + k * (tt + tr)
        parts.append(task.decode(dialogue[start : start + tt]))
        reply = task.decode(dialogue[start + tt : start + tt + tr]) if tr else ""
        if reply and k < turns - 1:
            parts.append(reply)
    return " | ".join(parts)


def sample_completions(setup: Setup, params, key: Array, num: int = 5) -> list[tuple[str, str, float]]:
    """Host-side ``(prompt, completion, reward)`` of ``num`` greedy held-out episodes of a
    token task (for ``jaxrl eval`` and notebooks); a dialogue's completion is its
    :func:`transcript`."""
    env = setup.env
    if not isinstance(env, TokenTask):
        raise TypeError(f"{env.name} is not a token task; it has no text to show")
    ro = jax.device_get(eval_rollout(setup, params, key))
    lp = env.prompt_len
    n = min(num, ro.returns.shape[0])
    return [(env.decode(ro.obs[i, :lp]), transcript(env, ro.obs[i], int(ro.turns[i])), float(ro.returns[i])) for i in range(n)]


def samples(setup: Setup, state: GRPOState, key: Array, num: int = 5) -> list[str]:
    """:attr:`jaxrl.algos.contract.Program.samples` of a token task: greedy held-out
    prompts with their completions and rewards."""
    return [
        f"{prompt!r} -> {completion!r}  reward {reward:.3f}"
        for prompt, completion, reward in sample_completions(setup, acting_params(state), key, num)
    ]


def marked_transcript(task: TokenTask, dialogue, turns: int) -> str:
    """Host-side text of one whole dialogue (numpy ``int32 [dialogue_len]``) with its parts
    marked: ``[prompt] ... [policy] ... [env] ... [policy] ...`` (``turns`` policy turns)."""
    tt, tr, lp = task.max_turn_tokens, task.max_reply_tokens, task.prompt_len
    parts = [f"[prompt] {task.decode(dialogue[:lp])}"]
    for k in range(turns):
        start = lp + k * (tt + tr)
        parts.append(f"[policy] {task.decode(dialogue[start : start + tt])}")
        reply = task.decode(dialogue[start + tt : start + tt + tr]) if tr else ""
        if reply and k < turns - 1:
            parts.append(f"[env] {reply}")
    return " ".join(parts)


def _sampled(setup: Setup, n: int, r: int, params, key: Array) -> tuple[Rollout, Rollout]:
    """``r`` sampled dialogues on each of ``n`` held-out prompts (a text task's first ``n``
    rows, or all when it has fewer: :func:`eval_rollout`'s rule), and the greedy one of each."""
    k_reset, k_roll, k_greedy = jax.random.split(key, 3)
    prompts = evaluation_starts(setup.env, setup.eval_params, n, k_reset, setup.cfg.eval_held_out)
    temperature = jnp.float32(setup.cfg.sampling.temperature)
    sampled = group_rollout(
        setup.policy, setup.env, setup.eval_params, params, jnp.repeat(prompts, r, axis=0), k_roll, setup.num_steps,
        temperature, group=r,
    )
    greedy = group_rollout(
        setup.policy, setup.env, setup.eval_params, params, prompts, k_greedy, setup.num_steps, jnp.float32(1.0),
        greedy=True,
    )
    return sampled, greedy


def sampled_rollouts(setup: Setup, state: GRPOState, key: Array, n: int, r: int, shown: int = 3) -> dict:
    """:attr:`jaxrl.algos.contract.Program.rollouts` of a token task (``jaxrl eval -n -r``).

    Host-side numpy (``n``: at most a text task's held-out rows): ``rewards`` float
    ``[n, r]`` (sampled at ``sampling.temperature``,
    held-out prompts, the eval params), ``greedy`` float ``[n]``; when the task reports
    ``exact_match``, ``correct`` bool ``[n, r]`` and ``greedy_correct`` bool ``[n]``;
    ``transcripts``: the first sampled dialogue of the first ``shown`` prompts, whole, with
    its reward.
    """
    if not isinstance(setup.env, TokenTask):
        raise TypeError(f"{setup.env.name} is not a token task; it has no held-out prompts to sample")
    run = jax.jit(functools.partial(_sampled, setup, n, r), compiler_options=COMPILER_OPTIONS)
    sampled, greedy = jax.device_get(run(acting_params(state), key))
    n = greedy.returns.shape[0]
    out = {"rewards": np.asarray(sampled.returns).reshape(n, r), "greedy": np.asarray(greedy.returns)}
    if "exact_match" in sampled.final_info:
        out["correct"] = np.asarray(sampled.final_info["exact_match"]).reshape(n, r) > 0.5
        out["greedy_correct"] = np.asarray(greedy.final_info["exact_match"]) > 0.5
    out["transcripts"] = [
        f"{marked_transcript(setup.env, sampled.obs[i * r], int(sampled.turns[i * r]))}  -> reward {float(sampled.returns[i * r]):.3f}"
        for i in range(min(shown, n))
    ]
    return out
