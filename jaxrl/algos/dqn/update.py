"""DQN's train state, ``init`` and one update: act epsilon-greedily, store, learn, track."""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax
from flax import struct

from jaxrl.algos.common import batching, optim, replay
from jaxrl.algos.common.acting import epsilon_greedy, linear_epsilon
from jaxrl.algos.common.masks import legal_mask
from jaxrl.algos.dqn import losses
from jaxrl.algos.dqn.config import DQNConfig, hyperparams, plan
from jaxrl.core import rollout
from jaxrl.core.env import Environment
from jaxrl.models.qnetworks import QNetwork


@struct.dataclass
class DQNHyper:
    gamma: jax.Array  # float32 []
    tau: jax.Array  # float32 [], target update coefficient


@struct.dataclass
class DQNState:
    """Everything a DQN run depends on; every leaf is an array.

    Attributes:
      params, target_params: the online and the target Q-network's params.
      opt_state: :func:`jaxrl.algos.common.optim.adam`'s state (traced lr, max_grad_norm).
      env: env states and observations, leaves ``[B, ...]``.
      buffer: the replay buffer, data leaves ``[R, B, ...]``.
      key: the PRNG key the next update splits.
      update_step: int32 ``[]``, updates done; grad_step: int32 ``[]``, optimiser steps done.
      hyper: the traced loss values.
    """

    params: Any
    target_params: Any
    opt_state: Any
    env: rollout.EnvCarry
    buffer: replay.Replay
    key: jax.Array
    update_step: jax.Array
    grad_step: jax.Array
    hyper: DQNHyper


class Setup(NamedTuple):
    """Static pieces bound into the pure functions with ``functools.partial``."""

    env: Environment  # VmapEnv(EpisodeStatistics(AutoReset(env))), B envs
    env_params: Any
    network: QNetwork
    cfg: DQNConfig
    optimizer: optax.GradientTransformation


def schedule(cfg: DQNConfig) -> optim.Schedule:
    """``cfg.optim``'s schedule: linear decay to ``lr_end_frac`` of the rate over the run's updates (constant at 1)."""
    p = plan(cfg)
    return optim.schedule(cfg.optim, p.num_updates, p.grad_steps_per_update)


def make_optimizer(cfg: DQNConfig, lr=None, max_grad_norm=None) -> optax.GradientTransformation:
    return optim.from_config(cfg.optim, schedule(cfg), lr, max_grad_norm)


def example_transition(env: Environment, env_params: Any) -> replay.Transition:
    """One env's transition as the buffer stores it (shapes and dtypes)."""
    obs = jnp.zeros(env.observation_space(env_params).shape, jnp.float32)
    return replay.Transition(obs, jnp.zeros((), jnp.int32), jnp.zeros((), jnp.float32), obs,
                             jnp.zeros((), bool), jnp.zeros((), bool))


def init(setup: Setup, key: jax.Array, hyper: dict | None = None) -> DQNState:
    """A fresh state; ``hyper`` (from :func:`~jaxrl.algos.dqn.config.hyperparams`) replaces
    the config's traced values."""
    values = hyperparams(setup.cfg, **(hyper or {}))
    key, net_key, env_key = jax.random.split(key, 3)
    env = rollout.reset(setup.env, setup.env_params, env_key)
    params = setup.network.init(net_key, jnp.asarray(env.obs[0], jnp.float32))
    opt_state = make_optimizer(setup.cfg, values["lr"], values["max_grad_norm"]).init(params)
    single = example_transition(setup.env, setup.env_params)
    buffer = replay.init(single, setup.cfg.buffer_size, setup.cfg.num_envs)
    zero = jnp.zeros((), jnp.int32)
    return DQNState(params, params, opt_state, env, buffer, key, zero, zero,
                    DQNHyper(values["gamma"], values["tau"]))


def _policy(network: QNetwork, params, epsilon, obs, key) -> rollout.PolicyOutput:
    action = epsilon_greedy(network.apply(params, obs), epsilon, key, legal_mask(network, obs))
    zeros = jnp.zeros(action.shape, jnp.float32)
    return rollout.PolicyOutput(action, zeros, zeros)


def _grads(network: QNetwork, double: bool, huber: bool, replicated, batch: replay.Transition):
    params, target_params, gamma = replicated
    flat = jax.tree_util.tree_map(lambda x: x.reshape((-1,) + x.shape[2:]), batch)  # [B * n, L, ...]
    grad_fn = jax.grad(losses.dqn_loss, has_aux=True)
    return grad_fn(params, target_params, network, gamma, double, flat, huber)


@struct.dataclass
class Learner:
    """The part of the state a gradient step changes (the ``scan`` carry)."""

    params: Any
    target_params: Any
    opt_state: Any
    grad_step: jax.Array  # int32 []


def _gradient_step(setup: Setup, state: DQNState, ready: jax.Array, learner: Learner, key: jax.Array):
    """One sampled minibatch, one Adam step, a target update every ``target_update_every``
    steps; a no-op until the buffer holds ``learning_starts`` transitions (``ready``)."""
    cfg = setup.cfg
    batch = replay.sample(state.buffer, key, cfg.batch_size // cfg.num_envs, cfg.n_step)  # [B, n, L, ...]
    grads, metrics = batching.batch_mean(
        functools.partial(_grads, setup.network, cfg.double, cfg.loss == "huber"),
        (learner.params, learner.target_params, state.hyper.gamma), batch,
    )
    updates, opt_state = setup.optimizer.update(grads, learner.opt_state, learner.params)
    params = optax.apply_updates(learner.params, updates)
    step = learner.grad_step + 1
    tau = jnp.where(step % cfg.target_update_every == 0, state.hyper.tau, 0.0)
    target = jax.tree_util.tree_map(lambda t, p: t + tau * (p - t), learner.target_params, params)
    new = jax.tree_util.tree_map(
        lambda a, b: jnp.where(ready, a, b), Learner(params, target, opt_state, step), learner
    )
    metrics = {**metrics, "grad_norm": optax.tree_utils.tree_l2_norm(grads)}
    return new, jax.tree_util.tree_map(lambda m: jnp.where(ready, m, 0.0), metrics)


def epsilon(cfg: DQNConfig, env_steps: jax.Array, total_env_steps: int) -> jax.Array:
    decay = int(cfg.exploration_fraction * total_env_steps)
    return linear_epsilon(env_steps, cfg.epsilon_start, cfg.epsilon_end, decay)


def update(setup: Setup, state: DQNState) -> tuple[DQNState, dict]:
    """Act ``steps_per_update`` steps in every env, store them, then ``gradient_steps``
    minibatch steps. Metrics: float32 scalars, the same keys every call."""
    cfg = setup.cfg
    key, rollout_key, learn_key = jax.random.split(state.key, 3)
    per_update = cfg.num_envs * cfg.steps_per_update
    eps = epsilon(cfg, state.update_step * per_update, cfg.total_env_steps)
    policy = functools.partial(_policy, setup.network, state.params, eps)
    env, traj = rollout.collect(policy, setup.env, setup.env_params, state.env, rollout_key, cfg.steps_per_update)
    buffer = replay.add(state.buffer, replay.from_trajectory(traj))
    state = state.replace(env=env, buffer=buffer, key=key)
    stored = buffer.size * cfg.num_envs
    ready = jnp.logical_and(stored >= max(cfg.learning_starts, cfg.batch_size), buffer.size >= cfg.n_step)
    learner = Learner(state.params, state.target_params, state.opt_state, state.grad_step)
    step = functools.partial(_gradient_step, setup, state, ready)
    learner, metrics = jax.lax.scan(step, learner, jax.random.split(learn_key, cfg.gradient_steps))
    state = state.replace(params=learner.params, target_params=learner.target_params,
                          opt_state=learner.opt_state, grad_step=learner.grad_step)
    metrics = jax.tree_util.tree_map(jnp.mean, metrics)
    count = jnp.sum(traj.episode_done.astype(jnp.float32))
    metrics.update(
        epsilon=eps, episode_count=count,
        episode_return=jnp.sum(jnp.where(traj.episode_done, traj.episode_return, 0.0)) / jnp.maximum(count, 1.0),
    )
    state = state.replace(update_step=state.update_step + 1)
    return state, {k: jnp.asarray(v, jnp.float32) for k, v in metrics.items()}
