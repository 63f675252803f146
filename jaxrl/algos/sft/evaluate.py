"""SFT's evaluation: completions of held-out prompts scored by the task's own verifier.

The decode is GRPO's single-turn dialogue rollout on a loaded model, step for step, through
the same :class:`~jaxrl.algos.common.lm.policy.TokenPolicy`: the prompt prefilled once (pad
ids invisible), then up to ``max_turn_tokens`` cached decode steps (the one decode loop), the
pad id written after the end-of-turn, the turn answered by ``task.respond``; the same key
splits, so a greedy SFT score and GRPO's evaluation of the same weights are the same numbers
(tests/test_sft.py checks it). ``samples`` prints greedy transcripts, ``sampled_rollouts``
serves ``jaxrl eval -n N -r R`` (``r`` draws at temperature 1 per prompt and the greedy one).
``sft.eval_every`` runs the same greedy evaluation inside training (:func:`update_and_evaluate`).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from jaxrl.algos.common.train import COMPILER_OPTIONS
from jaxrl.algos.sft import update as update_lib
from jaxrl.algos.sft.update import Setup, SFTState, model_params
from jaxrl.text.task import evaluation_rows, evaluation_starts

Array = jax.Array


@struct.dataclass
class Completions:
    """``N`` single-turn episodes."""

    prompts: Array  # int32 [N, Lp]
    tokens: Array  # int32 [N, Tt], pad id after the end-of-turn
    returns: Array  # float32 [N], the verifier's reward
    length: Array  # int32 [N], tokens written
    final_info: dict  # str -> float32 [N], the task's metrics (exact_match, ...)


def complete(setup: Setup, params, reset_keys: Array, key: Array, greedy: bool) -> Completions:
    """One completion per entry of ``reset_keys`` (keys, or a text task's row indices:
    :func:`jaxrl.text.task.evaluation_starts`) on the held-out params, greedy or sampled at
    temperature 1: the prompt prefilled, the turn decoded (:meth:`TokenPolicy.decode
    <jaxrl.algos.common.lm.policy.TokenPolicy.decode>`), answered by ``task.respond``."""
    task, policy = setup.env, setup.policy
    n = reset_keys.shape[0]
    env_state, prompt, _ = jax.vmap(task.start, in_axes=(0, None))(reset_keys, setup.eval_params)
    prompt = prompt.astype(jnp.int32)
    cache, logits = policy.start(params, prompt)
    _, _, key, tokens, _, mask, _ = policy.decode(
        params, cache, logits.astype(jnp.float32), jnp.ones((n,), jnp.bool_), key, task.prompt_len, jnp.float32(1.0),
        greedy, task.max_turn_tokens, task.end_of_turn, task.pad_id)
    key, k_env = jax.random.split(key)
    _, answer = jax.vmap(task.respond, in_axes=(0, 0, 0, None))(jax.random.split(k_env, n), env_state, tokens, setup.eval_params)
    rewards = jnp.where(mask, answer.rewards, 0.0).astype(jnp.float32)
    return Completions(prompt, tokens, jnp.sum(rewards, axis=1), jnp.sum(mask, axis=1, dtype=jnp.int32), answer.info)


def _ci95(x: Array) -> Array:
    return 1.96 * jnp.std(x, ddof=1) / jnp.sqrt(x.shape[0])


def eval_completions(setup: Setup, params, key: Array) -> Completions:
    """Greedy completions of the held-out prompts: each held-out row once, at most
    ``eval_episodes`` of them, or ``eval_episodes`` drawn ones (``eval_held_out: sample``):
    :func:`jaxrl.text.task.evaluation_starts` (GRPO's key use)."""
    k_reset, k_roll = jax.random.split(key)
    starts = evaluation_starts(setup.env, setup.eval_params, setup.cfg.eval_episodes, k_reset, setup.cfg.eval_held_out)
    return complete(setup, params, starts, k_roll, greedy=True)


def evaluate(setup: Setup, state: SFTState, key: Array) -> dict:
    """``episode_returns`` float32 ``[E]`` (the verifier's reward of each greedy completion),
    ``episode_returns_exact_match`` when the task reports ``exact_match``,
    ``episode_returns_<key>`` for the task's ``eval_scores``, and scalar means with
    ``_ci95`` half-widths, and ``held_out_rows`` when every row is scored once (the keys of
    GRPO's evaluation of a token task)."""
    ro = eval_completions(setup, model_params(state), key)
    rows = evaluation_rows(setup.env, setup.eval_params, setup.cfg.eval_held_out)
    out = {**({"held_out_rows": jnp.int32(rows)} if rows else {}),
           "episode_returns": ro.returns, "return_mean": jnp.mean(ro.returns), "return_ci95": _ci95(ro.returns),
           "length_mean": jnp.mean(ro.length.astype(jnp.float32))}
    for name, value in ro.final_info.items():
        out[name] = jnp.mean(value)
        out[f"{name}_ci95"] = _ci95(value)
    if "exact_match" in ro.final_info:
        out["episode_returns_exact_match"] = ro.final_info["exact_match"]
    for name, _ in setup.env.eval_scores:
        out[f"episode_returns_{name}"] = ro.final_info[name]
    return out


#: ``fold_in`` salt of the in-training evaluation's key (GRPO's): a stream of the data key no
#: batch order draws from, so evaluating changes no training bit and resume stays bit for bit.
HELDOUT_SALT = 0x6576616C  # "eval"


def heldout_key(state: SFTState) -> Array:
    """The key of the in-training evaluation of ``state`` (the state after an update; the data
    key folded with the salt and ``update_step``): ``evaluate`` with ``eval_episodes =
    eval_every_episodes`` and this key gives its figures."""
    return jax.random.fold_in(jax.random.fold_in(state.key, HELDOUT_SALT), state.update_step)


def heldout_metrics(setup: Setup, params, key: Array) -> dict:
    """The figures of :func:`evaluate` on ``eval_every_episodes`` greedy held-out completions
    (a text task's held-out rows, each once, the same rows at every evaluation) as update
    metrics, float32 ``[]``: ``heldout_reward`` (its ``return_mean``) and ``heldout_<key>``
    for every info key of the task (``exact_match``, ``correct``, ...)."""
    k_reset, k_roll = jax.random.split(key)
    starts = evaluation_starts(setup.env, setup.eval_params, setup.cfg.eval_every_episodes, k_reset, setup.cfg.eval_held_out)
    ro = complete(setup, params, starts, k_roll, greedy=True)
    out = {"heldout_reward": jnp.mean(ro.returns)}
    for name, value in ro.final_info.items():
        out[f"heldout_{name}"] = jnp.mean(value)
    return {k: jnp.asarray(v, jnp.float32) for k, v in out.items()}


def update_and_evaluate(setup: Setup, state: SFTState) -> tuple[SFTState, dict]:
    """:func:`~jaxrl.algos.sft.update.update`, then, after every ``eval_every``-th update
    (``update_step`` a multiple of it), :func:`heldout_metrics` of the new parameters with
    :func:`heldout_key`; the other updates log NaN for them (not measured: absent from the
    records, never a ``train.stop_at``). A ``lax.cond`` inside the compiled chunk, as GRPO's
    ``grpo.eval_every``; with several seeds (``vmap``) both branches run and the NaNs are selected."""
    new, metrics = update_lib.update(setup, state)
    key = heldout_key(new)
    figures = functools.partial(heldout_metrics, setup)
    params = model_params(new)
    shapes = jax.eval_shape(figures, params, key)

    def skipped(params, key):
        return {k: jnp.full(s.shape, jnp.nan, s.dtype) for k, s in shapes.items()}

    due = new.update_step % setup.cfg.eval_every == 0
    return new, {**metrics, **jax.lax.cond(due, figures, skipped, params, key)}


def samples(setup: Setup, state: SFTState, key: Array, num: int = 5) -> list[str]:
    """Greedy held-out prompts with their completions and rewards (``jaxrl eval``)."""
    ro = jax.device_get(eval_completions(setup, model_params(state), key))
    task = setup.env
    return [f"{task.decode(ro.prompts[i])!r} -> {task.decode(ro.tokens[i])!r}  reward {float(ro.returns[i]):.3f}"
            for i in range(min(num, ro.returns.shape[0]))]


def _sampled(setup: Setup, n: int, r: int, params, key: Array) -> tuple[Completions, Completions]:
    k_reset, k_roll, k_greedy = jax.random.split(key, 3)
    prompts = evaluation_starts(setup.env, setup.eval_params, n, k_reset, setup.cfg.eval_held_out)
    return (complete(setup, params, jnp.repeat(prompts, r, axis=0), k_roll, greedy=False),
            complete(setup, params, prompts, k_greedy, greedy=True))


def sampled_rollouts(setup: Setup, state: SFTState, key: Array, n: int, r: int, shown: int = 3) -> dict:
    """:attr:`jaxrl.algos.contract.Program.rollouts`: ``rewards [n, r]`` (temperature 1),
    ``greedy [n]``, ``correct`` / ``greedy_correct`` when the task reports ``exact_match``, and
    the first sample of the first ``shown`` prompts as text."""
    run = jax.jit(functools.partial(_sampled, setup, n, r), compiler_options=COMPILER_OPTIONS)
    sampled, greedy = jax.device_get(run(model_params(state), key))
    n = greedy.returns.shape[0]  # at most the held-out rows
    out = {"rewards": np.asarray(sampled.returns).reshape(n, r), "greedy": np.asarray(greedy.returns)}
    if "exact_match" in sampled.final_info:
        out["correct"] = np.asarray(sampled.final_info["exact_match"]).reshape(n, r) > 0.5
        out["greedy_correct"] = np.asarray(greedy.final_info["exact_match"]) > 0.5
    task = setup.env
    out["transcripts"] = [
        f"[prompt] {task.decode(sampled.prompts[i * r])} [policy] {task.decode(sampled.tokens[i * r])}"
        f"  -> reward {float(sampled.returns[i * r]):.3f}" for i in range(min(shown, n))
    ]
    return out
