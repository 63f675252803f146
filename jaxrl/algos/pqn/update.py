"""PQN's train state, ``init`` and one update: an epsilon-greedy rollout of ``B`` envs,
Q(lambda) targets, epochs of shuffled minibatches. No replay buffer, no target network."""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax
from flax import struct

from jaxrl.algos.common import batching, optim
from jaxrl.algos.common.acting import epsilon_greedy, linear_epsilon
from jaxrl.algos.common.masks import legal_mask
from jaxrl.algos.common.train import epochs
from jaxrl.algos.pqn import losses
from jaxrl.algos.pqn.config import PQNConfig, hyperparams, plan
from jaxrl.core import rollout
from jaxrl.core.env import Environment
from jaxrl.models.qnetworks import QNetwork


@struct.dataclass
class PQNHyper:
    gamma: jax.Array  # float32 []
    td_lambda: jax.Array  # float32 []


@struct.dataclass
class PQNState:
    """Everything a PQN run depends on; every leaf is an array.

    Attributes:
      params: the Q-network's params.
      opt_state: :func:`jaxrl.algos.common.optim.adam`'s state (traced lr, max_grad_norm).
      env: env states and observations, leaves ``[B, ...]``.
      key: the PRNG key the next update splits.
      update_step: int32 ``[]``, updates done.
      hyper: the traced target values.
    """

    params: Any
    opt_state: Any
    env: rollout.EnvCarry
    key: jax.Array
    update_step: jax.Array
    hyper: PQNHyper


@struct.dataclass
class Batch:
    obs: jax.Array  # [N, *obs_shape]
    action: jax.Array  # int32 [N]
    target: jax.Array  # float32 [N], Q(lambda) returns


@struct.dataclass
class Learner:
    params: Any
    opt_state: Any


class Setup(NamedTuple):
    """Static pieces bound into the pure functions with ``functools.partial``."""

    env: Environment  # VmapEnv(EpisodeStatistics(AutoReset(env))), B envs
    env_params: Any
    network: QNetwork
    cfg: PQNConfig
    schedule: optim.Schedule
    optimizer: optax.GradientTransformation


def schedule(cfg: PQNConfig) -> optim.Schedule:
    """``cfg.optim``'s schedule, moved once per update (the default decays linearly to 0)."""
    p = plan(cfg)
    return optim.schedule(cfg.optim, p.num_updates, p.grad_steps_per_update)


def make_optimizer(cfg: PQNConfig, lr=None, max_grad_norm=None) -> optax.GradientTransformation:
    return optim.from_config(cfg.optim, schedule(cfg), lr, max_grad_norm)


def init(setup: Setup, key: jax.Array, hyper: dict | None = None) -> PQNState:
    """A fresh state; ``hyper`` (from :func:`~jaxrl.algos.pqn.config.hyperparams`) replaces
    the config's traced values."""
    values = hyperparams(setup.cfg, **(hyper or {}))
    key, net_key, env_key = jax.random.split(key, 3)
    env = rollout.reset(setup.env, setup.env_params, env_key)
    params = setup.network.init(net_key, jnp.asarray(env.obs[0], jnp.float32))
    opt_state = make_optimizer(setup.cfg, values["lr"], values["max_grad_norm"]).init(params)
    return PQNState(params, opt_state, env, key, jnp.zeros((), jnp.int32),
                    PQNHyper(values["gamma"], values["td_lambda"]))


def _policy(network: QNetwork, params, epsilon, obs, key) -> rollout.PolicyOutput:
    action = epsilon_greedy(network.apply(params, obs), epsilon, key, legal_mask(network, obs))
    zeros = jnp.zeros(action.shape, jnp.float32)
    return rollout.PolicyOutput(action, zeros, zeros)


def _grads(network: QNetwork, params, batch: Batch):
    return jax.grad(losses.q_loss, has_aux=True)(params, network, batch.obs, batch.action, batch.target)


def _sgd_step(setup: Setup, learner: Learner, mb: Batch):
    grads, metrics = batching.batch_mean(functools.partial(_grads, setup.network), learner.params, mb)
    updates, opt_state = setup.optimizer.update(grads, learner.opt_state, learner.params)
    return Learner(optax.apply_updates(learner.params, updates), opt_state), {
        **metrics, "grad_norm": optax.tree_utils.tree_l2_norm(grads)}


def _epoch(setup: Setup, batch: Batch, learner: Learner, key: jax.Array):
    perm = jax.random.permutation(key, batch.target.shape[0])
    shuffled = batching.minibatches(batch, perm, setup.cfg.num_minibatches)
    return jax.lax.scan(functools.partial(_sgd_step, setup), learner, shuffled)


def epsilon(cfg: PQNConfig, env_steps: jax.Array) -> jax.Array:
    decay = int(cfg.exploration_fraction * cfg.total_env_steps)
    return linear_epsilon(env_steps, cfg.epsilon_start, cfg.epsilon_end, decay)


def update(setup: Setup, state: PQNState) -> tuple[PQNState, dict]:
    """One PQN update; pure, no host I/O. Metrics: float32 scalars, the same keys every call."""
    cfg = setup.cfg
    key, rollout_key, epoch_key = jax.random.split(state.key, 3)
    eps = epsilon(cfg, state.update_step * cfg.num_envs * cfg.num_steps)
    policy = functools.partial(_policy, setup.network, state.params, eps)
    env, traj = rollout.collect(policy, setup.env, setup.env_params, state.env, rollout_key, cfg.num_steps)
    next_q_max = jnp.max(setup.network.apply(state.params, traj.next_obs), axis=-1)
    targets = losses.lambda_returns(traj.reward, next_q_max, traj.terminated, traj.truncated,
                                    state.hyper.gamma, state.hyper.td_lambda)
    # On a data mesh the minibatches are a global shuffle: one all-gather of what they read.
    whole, ep_done, ep_return = batching.replicate(
        (Batch(traj.obs, traj.action, targets), traj.episode_done, traj.episode_return), ndim=2
    )
    batch = jax.tree_util.tree_map(lambda x: jnp.reshape(x, (-1,) + x.shape[2:]), whole)
    epoch = functools.partial(_epoch, setup, batch)
    learner, metrics = epochs(epoch, Learner(state.params, state.opt_state), epoch_key, cfg.update_epochs)
    metrics = {k: jnp.mean(v) for k, v in metrics.items()}
    count = jnp.sum(ep_done.astype(jnp.float32))
    metrics.update(
        epsilon=eps, lr=optim.current_lr(state.opt_state, setup.schedule), episode_count=count,
        episode_return=jnp.sum(jnp.where(ep_done, ep_return, 0.0)) / jnp.maximum(count, 1.0),
    )
    new = state.replace(params=learner.params, opt_state=learner.opt_state, env=env, key=key,
                        update_step=state.update_step + 1)
    return new, {k: jnp.asarray(v, jnp.float32) for k, v in metrics.items()}
