"""Group rollouts: ``N`` lockstep episodes, finished members frozen and masked."""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
from flax import struct

from jaxrl.algos.grpo.policy import Policy
from jaxrl.core.env import Environment, tree_select

Array = jax.Array


@struct.dataclass
class Rollout:
    """``N`` lockstep episodes of ``T`` steps (``N = groups x G``)."""

    obs: Array  # [N, T, *obs_shape], observation each action was chosen on
    actions: Array  # int32 [N, T]
    logp: Array  # float32 [N, T], behaviour log-prob (at the sampling temperature)
    mask: Array  # bool [N, T], the step was taken inside the episode
    entropy: Array  # float32 [N, T], entropy of the sampling distribution
    rewards: Array  # float32 [N, T], reward of each step (0 on masked steps)
    returns: Array  # float32 [N], episodic return (a token task: the verifier's reward)
    length: Array  # int32 [N], steps taken
    truncated: Array  # bool [N], ended by a limit (or still running at T)
    final_info: dict  # str -> float32 [N], the env's info on each episode's last step


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


def _rollout_step(policy: Policy, env: Environment, greedy: bool, params, env_params, temperature, c: _Carry, t):
    key, k_act, k_env = jax.random.split(c.key, 3)
    scaled = c.logits / temperature
    if greedy:
        action = jnp.argmax(scaled, axis=-1).astype(jnp.int32)
    else:
        action = jax.random.categorical(k_act, scaled).astype(jnp.int32)
    log_probs = jax.nn.log_softmax(scaled)
    logp = jnp.take_along_axis(log_probs, action[:, None], axis=1)[:, 0]
    entropy = -jnp.sum(jnp.exp(log_probs) * log_probs, axis=-1)
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
    policy: Policy,
    env: Environment,
    env_params,
    params,
    reset_keys: Array,
    key: Array,
    num_steps: int,
    temperature: Array,
    greedy: bool = False,
) -> Rollout:
    """Roll ``N = len(reset_keys)`` episodes for ``num_steps`` lockstep steps.

    Members sharing a reset key start identically; ``key`` seeds the (different) action
    and env keys of every member. Finished members stay frozen (state, obs) and masked.
    """
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
