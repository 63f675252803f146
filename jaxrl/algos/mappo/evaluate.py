"""MAPPO's evaluation: team returns of the greedy and the sampling shared policy."""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
from flax import struct

from jaxrl.algos.mappo.update import MAPPOState, Setup, apply, initial_memory, recurrent
from jaxrl.core.multiagent import MultiAgentEnv


@struct.dataclass
class _EvalCarry:
    env_state: Any
    obs: jax.Array  # [2N, A, F]
    state: jax.Array  # [2N, S]
    avail: jax.Array  # bool [2N, A, n]
    done: jax.Array  # bool [2N]
    ret: jax.Array  # float32 [2N], team return so far
    length: jax.Array  # int32 [2N]
    key: jax.Array
    t: jax.Array  # int32 []
    carry: Any = None  # torso gru: the (actor, critic) carries [2N, A, H]


def _step(setup: Setup, env: MultiAgentEnv, env_params, params, greedy: jax.Array, c: _EvalCarry) -> _EvalCarry:
    key, act_key, env_key = jax.random.split(c.key, 3)
    carry, dist, _ = apply(setup, params, c.obs, c.state, c.avail, c.carry, jnp.zeros(c.done.shape, bool))
    action = jnp.where(greedy[:, None], dist.mode(), dist.sample(act_key))
    keys = jax.random.split(env_key, c.obs.shape[0])
    env_state, ts = jax.vmap(env.step, in_axes=(0, 0, 0, None))(keys, c.env_state, action, env_params)
    live = ~c.done
    return _EvalCarry(env_state, ts.obs, ts.state, ts.avail_actions, c.done | ts.done,
                      c.ret + jnp.where(live, jnp.sum(ts.reward, axis=-1), 0.0), c.length + live.astype(jnp.int32),
                      key, c.t + 1, carry)


def evaluate(setup: Setup, env: MultiAgentEnv, env_params, max_steps: int, state: MAPPOState, key: jax.Array) -> dict:
    """Team returns (the sum over agents of their undiscounted returns) of ``eval_episodes``
    greedy and as many sampling episodes, each played until it ends or ``max_steps``.

    Returns ``{"return_mean", "return_std", "length_mean", "episode_returns" [N],
    "return_mean_stochastic", "episode_returns_stochastic" [N]}``.
    """
    n = setup.cfg.eval_episodes
    reset_key, key = jax.random.split(key)
    env_state, ts = jax.vmap(env.reset, in_axes=(0, None))(jax.random.split(reset_key, 2 * n), env_params)
    greedy = jnp.arange(2 * n) < n
    memory = initial_memory(setup, (2 * n,)).carry if recurrent(setup) else None  # zeros: no reset needed
    carry = _EvalCarry(env_state, ts.obs, ts.state, ts.avail_actions, jnp.zeros((2 * n,), bool),
                       jnp.zeros((2 * n,), jnp.float32), jnp.zeros((2 * n,), jnp.int32), key, jnp.zeros((), jnp.int32),
                       memory)
    body = functools.partial(_step, setup, env, env_params, state.params, greedy)
    final = jax.lax.while_loop(lambda c: (c.t < max_steps) & ~jnp.all(c.done), body, carry)
    det, sto = final.ret[:n], final.ret[n:]
    return {"return_mean": jnp.mean(det), "return_std": jnp.std(det),
            "length_mean": jnp.mean(final.length[:n].astype(jnp.float32)), "episode_returns": det,
            "return_mean_stochastic": jnp.mean(sto), "episode_returns_stochastic": sto}
