"""PPO's evaluation: undiscounted returns of the greedy and the sampling policy."""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
from flax import struct

from jaxrl.algos.common.masks import masked
from jaxrl.algos.ppo.acting import prepare_obs
from jaxrl.algos.ppo.config import PPOConfig
from jaxrl.algos.ppo.state import AgentState, PPOTrainState, Setup
from jaxrl.core.env import Environment
from jaxrl.models.networks import ActorCritic


@struct.dataclass
class _EvalCarry:
    env_state: Any
    obs: jax.Array  # [2N, *obs_shape]
    done: jax.Array  # bool [2N], the episode has ended
    ret: jax.Array  # float32 [2N], undiscounted return so far
    length: jax.Array  # int32 [2N], steps so far
    key: jax.Array
    t: jax.Array  # int32 [], steps taken by the loop
    carry: Any = None  # a recurrent torso's carry, leaves [2N, ...]; None for an MLP


def _eval_action(
    network: ActorCritic, cfg: PPOConfig, agent: AgentState, deterministic: jax.Array, obs: jax.Array, key: jax.Array,
    carry: Any = None,
) -> tuple[Any, jax.Array]:
    """Per episode: the mode where ``deterministic [2N]`` is set, a sample elsewhere; and
    the recurrent carry after the step (``None`` for an MLP)."""
    if carry is None:
        dist, _ = network.apply(agent.params, prepare_obs(cfg, agent.obs_stats, obs))
    else:  # one step of the sequence; the carry starts at zero, so no reset is needed
        x = prepare_obs(cfg, agent.obs_stats, obs)[None]
        carry, dist, _ = network.apply(agent.params, carry, x, jnp.zeros(x.shape[:2], bool))
    dist = masked(network, dist, obs if carry is None else obs[None])
    mode, sample = dist.mode(), dist.sample(key)
    if carry is not None:  # drop the time axis of length 1
        mode, sample = mode[0], sample[0]
    mask = jnp.reshape(deterministic, deterministic.shape + (1,) * (mode.ndim - 1))
    action = jnp.where(mask, mode, sample)
    if carry is not None:
        carry = network.record_action(carry, action)
    return carry, action


def _eval_step(
    env: Environment, env_params: Any, network: ActorCritic, cfg: PPOConfig, agent: AgentState,
    deterministic: jax.Array, c: _EvalCarry,
) -> _EvalCarry:
    key, act_key, env_key = jax.random.split(c.key, 3)
    carry, action = _eval_action(network, cfg, agent, deterministic, c.obs, act_key, c.carry)
    env_state, ts = env.step(env_key, c.env_state, action, env_params)
    live = jnp.logical_not(c.done)
    return _EvalCarry(
        env_state=env_state,
        obs=ts.obs,
        done=jnp.logical_or(c.done, ts.done),
        ret=c.ret + jnp.where(live, ts.reward, 0.0),
        length=c.length + live.astype(jnp.int32),
        key=key,
        t=c.t + 1,
        carry=carry,
    )


def _eval_continue(max_steps: int, c: _EvalCarry) -> jax.Array:
    return jnp.logical_and(c.t < max_steps, jnp.logical_not(jnp.all(c.done)))


def evaluate(
    setup: Setup, eval_env: Environment, eval_params: Any, max_steps: int, state: PPOTrainState, key: jax.Array
) -> dict:
    """Undiscounted returns of ``eval_episodes`` episodes with the mode and with samples.

    Both policies run in one loop over ``2 N`` envs (no auto-reset), each episode until
    it ends or ``max_steps`` steps; a recurrent torso carries its state from a zero carry. Returns ``{"return_mean", "return_std", "length_mean",
    "episode_returns" [N], "return_mean_stochastic", "return_std_stochastic",
    "episode_returns_stochastic" [N]}`` ("return_mean" is the deterministic policy's).
    """
    n = setup.cfg.eval_episodes
    reset_key, key = jax.random.split(key)
    env_state, ts = eval_env.reset(reset_key, eval_params)
    deterministic = jnp.arange(2 * n) < n
    memory = setup.network.initial_carry((2 * n,)) if setup.cfg.network.recurrent else None
    carry = _EvalCarry(
        env_state, ts.obs, jnp.zeros((2 * n,), bool), jnp.zeros((2 * n,), jnp.float32),
        jnp.zeros((2 * n,), jnp.int32), key, jnp.zeros((), jnp.int32), memory,
    )
    body = functools.partial(
        _eval_step, eval_env, eval_params, setup.network, setup.cfg, state.agent, deterministic
    )
    final = jax.lax.while_loop(functools.partial(_eval_continue, max_steps), body, carry)
    det_ret, sto_ret = final.ret[:n], final.ret[n:]
    return {
        "return_mean": jnp.mean(det_ret),
        "return_std": jnp.std(det_ret),
        "length_mean": jnp.mean(final.length[:n].astype(jnp.float32)),
        "episode_returns": det_ret,
        "return_mean_stochastic": jnp.mean(sto_ret),
        "return_std_stochastic": jnp.std(sto_ret),
        "episode_returns_stochastic": sto_ret,
    }
