"""Group rollouts: ``N`` lockstep episodes, finished members frozen and masked.

Control envs step once per action (:func:`group_rollout`). Token tasks run as dialogues
(:func:`dialogue_rollout`, the contract of :mod:`jaxrl.core.tokens`): per turn, the policy
decodes up to ``max_turn_tokens`` tokens with its key/value cache, the env answers the whole
turn at once (``respond``, vmapped), and its reply is prefilled into the cache in one pass.
Reply tokens and the slots after a turn's end are in the dialogue but out of the mask: they
carry no loss and no gradient. A single completion is the one-turn dialogue.
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
from flax import struct

from jaxrl.algos.common.lm.decode import sample
from jaxrl.algos.common.lm.policy import TokenPolicy
from jaxrl.algos.common.lm.refill import decode_queue
from jaxrl.core.env import Environment, tree_select
from jaxrl.core.tokens import TokenTask

Array = jax.Array


@struct.dataclass
class Rollout:
    """``N`` lockstep episodes of ``T`` steps (``N = groups x G``). For a token task ``T`` is
    the dialogue after the prompt (``dialogue_len - prompt_len``), env replies included."""

    obs: Array  # [N, T, *obs_shape], observation each action was chosen on; token task: int32 [N, dialogue_len]
    actions: Array  # int32 [N, T] (token task: the dialogue after the prompt)
    logp: Array  # float32 [N, T], behaviour log-prob (at the sampling temperature)
    mask: Array  # bool [N, T], the step was taken inside the episode
    entropy: Array  # float32 [N, T], entropy of the sampling distribution
    rewards: Array  # float32 [N, T], reward of each step (0 on masked steps)
    returns: Array  # float32 [N], episodic return (a token task: the verifier's reward)
    length: Array  # int32 [N], steps taken
    truncated: Array  # bool [N], ended by a limit (or still running at T)
    final_info: dict  # str -> float32 [N], the env's info on each episode's last step
    turns: Array | None = None  # int32 [N], policy turns taken (token tasks)
    failed: Array | None = None  # bool [N], the env failed the episode (a task that can_fail): masked, reward 0


@struct.dataclass
class _Carry:
    env_state: Any
    obs: Array  # [N, *obs_shape]
    policy_carry: Any
    logits: Array  # float32 [N, A]
    alive: Array  # bool [N]
    returns: Array  # float32 [N]
    length: Array  # int32 [N]
    truncated: Array  # bool [N]
    final_info: dict
    key: Array


def _rollout_step(policy: TokenPolicy, env: Environment, greedy: bool, params, env_params, temperature, c: _Carry, t):
    key, k_act, k_env = jax.random.split(c.key, 3)
    action, logp, entropy = sample(c.logits, temperature, greedy, k_act)
    n = action.shape[0]
    new_state, ts = jax.vmap(env.step, in_axes=(0, 0, 0, None))(jax.random.split(k_env, n), c.env_state, action, env_params)
    alive = c.alive
    env_state = tree_select(alive, new_state, c.env_state)
    obs = tree_select(alive, ts.obs, c.obs)
    ended = alive & ts.done
    step_reward = jnp.where(alive, ts.reward, 0.0).astype(jnp.float32)
    final_info = tree_select(ended, ts.info, c.final_info)
    policy_carry, logits = policy.step(params, c.policy_carry, obs, action, t)
    new = _Carry(
        env_state,
        obs,
        policy_carry,
        logits,
        alive & ~ts.done,
        c.returns + step_reward,
        c.length + alive.astype(jnp.int32),
        c.truncated | (ended & ts.truncated & ~ts.terminated),
        final_info,
        key,
    )
    return new, (c.obs, action, logp, alive, entropy, step_reward)


def group_rollout(
    policy: TokenPolicy,
    env: Environment,
    env_params,
    params,
    reset_keys: Array,
    key: Array,
    num_steps: int,
    temperature: Array,
    greedy: bool = False,
    group: int = 1,
    decode_rows: int = 0,
) -> Rollout:
    """Roll ``N = len(reset_keys)`` episodes for ``num_steps`` lockstep steps.

    Members sharing a reset key start identically; ``key`` seeds the (different) action
    and env keys of every member. Finished members stay frozen (state, obs) and masked.
    A token task runs :func:`dialogue_rollout` (its length is the dialogue's, ``num_steps``
    is not used); ``group``: consecutive runs of that many reset keys are equal (a GRPO
    group), so a policy that can share a prompt's prefill computes it once per group.
    ``decode_rows``: :func:`dialogue_rollout`'s (token tasks only).
    """
    if isinstance(env, TokenTask):
        return dialogue_rollout(policy, env, env_params, params, reset_keys, key, temperature, greedy, group,
                                decode_rows=decode_rows)
    if decode_rows:
        check_decode_rows(env, decode_rows)
    n = reset_keys.shape[0]
    env_state, ts = jax.vmap(env.reset, in_axes=(0, None))(reset_keys, env_params)
    policy_carry, logits = policy.start(params, ts.obs)
    zero_info = jax.tree_util.tree_map(jnp.zeros_like, ts.info)
    carry = _Carry(
        env_state, ts.obs, policy_carry, logits.astype(jnp.float32),
        jnp.ones((n,), jnp.bool_), jnp.zeros((n,), jnp.float32), jnp.zeros((n,), jnp.int32),
        jnp.zeros((n,), jnp.bool_), zero_info, key,
    )
    body = functools.partial(_rollout_step, policy, env, greedy, params, env_params, temperature)
    carry, (obs, actions, logp, mask, entropy, rewards) = jax.lax.scan(body, carry, jnp.arange(num_steps))
    swap = lambda x: jnp.swapaxes(x, 0, 1)  # noqa: E731  [T, N, ...] -> [N, T, ...]
    return Rollout(
        swap(obs), swap(actions), swap(logp), swap(mask), swap(entropy), swap(rewards),
        carry.returns, carry.length, carry.truncated | carry.alive, carry.final_info,
    )


# ---------------------------------------------------------------------------------------
# Token dialogues
# ---------------------------------------------------------------------------------------


@struct.dataclass
class _Dialogue:
    env_state: Any
    cache: Any  # the policy's key/value cache
    logits: Array  # float32 [N, V], next-token logits
    alive: Array  # bool [N]
    returns: Array  # float32 [N]
    length: Array  # int32 [N], policy tokens written
    turns: Array  # int32 [N]
    truncated: Array  # bool [N]
    final_info: dict
    key: Array
    failed: Array | None = None  # bool [N] (a task that can_fail)


def _turn(policy: TokenPolicy, task: TokenTask, params, env_params, temperature, greedy: bool, stop_early: bool,
          c: _Dialogue, k):
    """One policy turn (decode), the env's answer (respond) and its reply (prefill)."""
    tt, tr = task.max_turn_tokens, task.max_reply_tokens
    base = task.prompt_len + k * (tt + tr)
    # a turn's loop stops once every row has ended it where nothing reads what the skipped steps
    # would have written: a single-turn task, or a turn followed by a reply, with a policy to
    # which pad ids are no token (its cache after the turn is the full loop's). The project's
    # transformer reads a turn's pad slots as tokens, as its loss pass does: skipping them would
    # sample later turns from another distribution than the one the loss scores.
    ragged = stop_early and (task.max_turns == 1 or (tr > 0 and policy.pads_invisible))
    cache, logits, key, tokens, logp, mask, entropy = policy.decode(
        params, c.cache, c.logits, c.alive, c.key, base, temperature, greedy, tt, task.end_of_turn, task.pad_id, ragged)
    return _answer(policy, task, params, env_params, c, k, cache, logits, key, tokens, logp, mask, entropy)


def _answer(policy: TokenPolicy, task: TokenTask, params, env_params, c: _Dialogue, k, cache, logits, key, tokens, logp,
            mask, entropy):
    """A decoded turn's answer (respond) and its reply (prefill; not with ``cache`` None: a
    single turn, its reply never read)."""
    tt, tr = task.max_turn_tokens, task.max_reply_tokens
    base = task.prompt_len + k * (tt + tr)
    key, k_env = jax.random.split(key)
    n = tokens.shape[0]
    new_state, answer = jax.vmap(task.respond, in_axes=(0, 0, 0, None))(jax.random.split(k_env, n), c.env_state, tokens, env_params)
    alive = c.alive
    rewards = jnp.where(mask, answer.rewards, 0.0).astype(jnp.float32)
    term = alive & answer.terminated
    trunc = alive & ~answer.terminated & (answer.truncated | (k == task.max_turns - 1))
    going = alive & ~(term | trunc)
    reply = jnp.where(going[:, None], answer.reply, task.pad_id).astype(jnp.int32)
    if tr > 0 and cache is not None:
        cache, reply_logits = policy.extend(params, cache, reply, base + tt)
        logits = reply_logits[:, -1].astype(jnp.float32)
    new = _Dialogue(
        tree_select(alive, new_state, c.env_state), cache, logits, going, c.returns + jnp.sum(rewards, axis=1),
        c.length + jnp.sum(mask, axis=1, dtype=jnp.int32), c.turns + alive.astype(jnp.int32), c.truncated | trunc,
        tree_select(term | trunc, answer.info, c.final_info), key,
        None if c.failed is None else c.failed | (alive & answer.failed),
    )
    return new, (tokens, reply, logp, mask, entropy, rewards)


def check_decode_rows(env: Environment, rows: int, n: int | None = None, group: int = 1) -> None:
    """One-line refusals of ``decode_rows`` (``grpo.sampling.decode_rows``) for ``env`` and,
    given, a rollout of ``n`` completions in groups of ``group``."""
    if not isinstance(env, TokenTask):
        raise ValueError(f"sampling.decode_rows: refills rows of a token task's decode; {env.name} is not one "
                         f"(leave it at 0)")
    if env.max_turns != 1:
        raise ValueError(f"sampling.decode_rows: refilling rows decodes single-turn tasks only; {env.name} has "
                         f"max_turns {env.max_turns} (leave it at 0)")
    if n is not None and not 1 <= rows < n:
        raise ValueError(f"sampling.decode_rows: {rows} rows for {n} completions per rollout; expected 1 <= rows "
                         f"< {n} (0 = off)")
    if n is not None and n % group:
        raise ValueError(f"sampling.decode_rows: {n} completions are not whole groups of {group}")


def _with_reply_slots(x: Array, tr: int) -> Array:
    """``[K, N, Tt]`` per-turn values -> ``[N, K * (Tt + tr)]`` with zeros in the reply slots."""
    x = jnp.swapaxes(x, 0, 1)
    x = jnp.concatenate([x, jnp.zeros(x.shape[:2] + (tr,), x.dtype)], axis=2)
    return x.reshape(x.shape[0], -1)


def dialogue_rollout(
    policy: TokenPolicy,
    task: TokenTask,
    env_params,
    params,
    reset_keys: Array,
    key: Array,
    temperature: Array,
    greedy: bool = False,
    group: int = 1,
    stop_early: bool = True,
    decode_rows: int = 0,
) -> Rollout:
    """``N = len(reset_keys)`` dialogues of ``task`` in lockstep (module docstring).

    ``obs`` is the whole dialogue ``int32 [N, dialogue_len]`` (prompt, turns, replies);
    ``actions`` its part after the prompt; ``mask`` marks the tokens the policy wrote
    (replies and slots after a turn's end are out); ``rewards`` are paid on policy tokens.
    ``stop_early``: a turn's decode loop ends once every row has ended it (the same
    dialogues as running every step; the masked log-probs and entropies of skipped steps
    are 0 instead of those of discarded draws); with several turns only for a policy whose
    pad ids are invisible (``TokenPolicy.pads_invisible``), else later turns would read
    unwritten pad slots.
    ``decode_rows`` (``grpo.sampling.decode_rows``; 0 = off): a single-turn task's ``N``
    completions decoded on that many rows, a row that ends taking the next queued (prompt,
    sample) pair (:func:`jaxrl.algos.common.lm.refill.decode_queue`: each prompt prefilled
    once, one compile). Its samples equal those without it, key for key (each pair draws
    with its row of the step's uniforms, made alone).
    """
    n = reset_keys.shape[0]
    env_state, prompt, info = jax.vmap(task.start, in_axes=(0, None))(reset_keys, env_params)
    if decode_rows:  # decode_queue prefills each prompt itself
        check_decode_rows(task, decode_rows, n, group)
        cache, logits = None, None
    elif group > 1 and policy.start_grouped is not None:  # one prefill per group of equal prompts
        cache, logits = policy.start_grouped(params, prompt[::group], group)
    else:
        cache, logits = policy.start(params, prompt)
    zeros = jnp.zeros((n,), jnp.int32)
    carry = _Dialogue(
        env_state, cache, None if logits is None else logits.astype(jnp.float32), jnp.ones((n,), jnp.bool_),
        jnp.zeros((n,), jnp.float32), zeros, zeros, jnp.zeros((n,), jnp.bool_), info, key,
        jnp.zeros((n,), jnp.bool_) if task.can_fail else None,
    )
    if decode_rows:
        key, *turn = decode_queue(policy, params, prompt[::group], group, key, task.prompt_len, temperature, greedy,
                                  task.max_turn_tokens, task.end_of_turn, task.pad_id, decode_rows)[:5]
        carry, outs = _answer(policy, task, params, env_params, carry, 0, None, None, key, *turn)
        tokens, replies, logp, mask, entropy, rewards = (x[None] for x in outs)  # [K = 1, N, ...]
    else:
        body = functools.partial(_turn, policy, task, params, env_params, temperature, greedy, stop_early)
        carry, (tokens, replies, logp, mask, entropy, rewards) = jax.lax.scan(body, carry, jnp.arange(task.max_turns))
    tr = task.max_reply_tokens
    turns_and_replies = jnp.concatenate([tokens, replies], axis=2)  # [K, N, Tt + Tr]
    actions = jnp.swapaxes(turns_and_replies, 0, 1).reshape(n, -1)
    slots = functools.partial(_with_reply_slots, tr=tr)
    mask, rewards = slots(mask), slots(rewards)
    if carry.failed is not None:  # a failed episode trains nothing and earns nothing
        mask, rewards = mask & ~carry.failed[:, None], jnp.where(carry.failed[:, None], 0.0, rewards)
    return Rollout(
        jnp.concatenate([prompt.astype(jnp.int32), actions], axis=1), actions, slots(logp), mask,
        slots(entropy), rewards, carry.returns, carry.length, carry.truncated | carry.alive,
        carry.final_info, carry.turns, carry.failed,
    )
