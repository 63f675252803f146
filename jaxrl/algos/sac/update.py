"""SAC's train state, ``init`` and one update: act (uniformly at first), store, learn."""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax
from flax import struct

from jaxrl.algos.common import batching, optim, replay
from jaxrl.algos.sac import losses
from jaxrl.algos.sac.config import SACConfig, hyperparams, plan
from jaxrl.core import prng, rollout
from jaxrl.core.env import Environment
from jaxrl.models.qnetworks import SquashedGaussianActor, TwinQ, squashed_sample


@struct.dataclass
class SACHyper:
    gamma: jax.Array  # float32 []
    tau: jax.Array  # float32 [], Polyak coefficient of the target critics


@struct.dataclass
class Learner:
    """What a gradient step changes (the ``scan`` carry); ``log_alpha`` float32 ``[]``."""

    actor: Any
    critic: Any
    target_critic: Any
    log_alpha: jax.Array
    actor_opt: Any
    critic_opt: Any
    alpha_opt: Any


@struct.dataclass
class SACState:
    """Everything a SAC run depends on; every leaf is an array.

    Attributes:
      learner: the networks' and the temperature's params and optimiser states.
      env: env states and observations, leaves ``[B, ...]`` (actions in ``[-1, 1]``).
      buffer: the replay buffer, data leaves ``[R, B, ...]``.
      key: the PRNG key the next update splits.
      update_step: int32 ``[]``, updates done.
      hyper: the traced loss values.
    """

    learner: Learner
    env: rollout.EnvCarry
    buffer: replay.Replay
    key: jax.Array
    update_step: jax.Array
    hyper: SACHyper


class Setup(NamedTuple):
    """Static pieces bound into the pure functions with ``functools.partial``."""

    env: Environment  # VmapEnv(EpisodeStatistics(AutoReset(RescaleAction(env)))), B envs
    env_params: Any
    actor: SquashedGaussianActor
    critic: TwinQ
    cfg: SACConfig
    optimizer: optax.GradientTransformation  # one path for actor, critics and temperature
    target_entropy: float


def make_optimizer(cfg: SACConfig, lr=None, max_grad_norm=None) -> optax.GradientTransformation:
    """``cfg.optim``'s optimiser, its rate moved once per update (constant by default)."""
    p = plan(cfg)
    return optim.from_config(cfg.optim, optim.schedule(cfg.optim, p.num_updates, p.grad_steps_per_update), lr, max_grad_norm)


def example_transition(env: Environment, env_params: Any, action_dim: int) -> replay.Transition:
    """One env's transition as the buffer stores it (shapes and dtypes)."""
    obs = jnp.zeros(env.observation_space(env_params).shape, jnp.float32)
    return replay.Transition(obs, jnp.zeros((action_dim,), jnp.float32), jnp.zeros((), jnp.float32), obs,
                             jnp.zeros((), bool), jnp.zeros((), bool))


def init(setup: Setup, key: jax.Array, hyper: dict | None = None) -> SACState:
    """A fresh state; ``hyper`` (from :func:`~jaxrl.algos.sac.config.hyperparams`) replaces
    the config's traced values."""
    values = hyperparams(setup.cfg, **(hyper or {}))
    key, actor_key, critic_key, env_key = jax.random.split(key, 4)
    env = rollout.reset(setup.env, setup.env_params, env_key)
    obs = jnp.asarray(env.obs[0], jnp.float32)
    actor = setup.actor.init(actor_key, obs)
    critic = setup.critic.init(critic_key, obs, jnp.zeros((setup.actor.action_dim,), jnp.float32))
    log_alpha = jnp.log(jnp.asarray(setup.cfg.init_alpha, jnp.float32))
    opt = make_optimizer(setup.cfg, values["lr"], values["max_grad_norm"])
    learner = Learner(actor, critic, critic, log_alpha, opt.init(actor), opt.init(critic), opt.init(log_alpha))
    single = example_transition(setup.env, setup.env_params, setup.actor.action_dim)
    buffer = replay.init(single, setup.cfg.buffer_size, setup.cfg.num_envs)
    return SACState(learner, env, buffer, key, jnp.zeros((), jnp.int32), SACHyper(values["gamma"], values["tau"]))


def _policy(actor: SquashedGaussianActor, params, uniform: jax.Array, obs, key) -> rollout.PolicyOutput:
    """Sampled actions in ``[-1, 1]``, or uniform ones while ``uniform`` (warm-up)."""
    noise_key, uniform_key = jax.random.split(key)
    dist = actor.apply(params, obs)
    action, _ = squashed_sample(dist, prng.normal(noise_key, dist.mean.shape))
    random = prng.uniform(uniform_key, action.shape, minval=-1.0, maxval=1.0)
    action = jnp.where(uniform, random, action)
    zeros = jnp.zeros(action.shape[:-1], jnp.float32)
    return rollout.PolicyOutput(action, zeros, zeros)


class _Batch(NamedTuple):
    data: replay.Transition  # leaves [B, n, 1, ...]
    noise: jax.Array  # [B, n, D], for the actor loss
    next_noise: jax.Array  # [B, n, D], for the soft target


def _grads(setup: Setup, replicated, batch: _Batch):
    """Gradients of the three losses at the current params (all from the same batch)."""
    learner, hyper = replicated
    flat = jax.tree_util.tree_map(lambda x: x.reshape((-1,) + x.shape[3:]), batch.data)  # [B * n, ...]
    noise, next_noise = (x.reshape((-1,) + x.shape[2:]) for x in (batch.noise, batch.next_noise))
    alpha = jnp.exp(learner.log_alpha)
    target = jax.lax.stop_gradient(losses.soft_target(
        setup.actor, setup.critic, learner.actor, learner.target_critic, alpha, hyper.gamma, flat, next_noise))
    g_critic, m_critic = jax.grad(losses.critic_loss, has_aux=True)(learner.critic, setup.critic, target, flat)
    g_actor, (m_actor, logp) = jax.grad(losses.actor_loss, has_aux=True)(
        learner.actor, setup.actor, setup.critic, learner.critic, alpha, flat.obs, noise)
    g_alpha, m_alpha = jax.grad(losses.alpha_loss, has_aux=True)(learner.log_alpha, logp, setup.target_entropy)
    return (g_actor, g_critic, g_alpha), {**m_critic, **m_actor, **m_alpha}


def _gradient_step(setup: Setup, state: SACState, ready: jax.Array, learner: Learner, key: jax.Array):
    """One minibatch: critic, actor and temperature steps from the same params, then the
    target critics' Polyak update; a no-op until ``learning_starts`` (``ready``)."""
    cfg = setup.cfg
    sample_key, noise_key = jax.random.split(key)
    data = replay.sample(state.buffer, sample_key, cfg.batch_size // cfg.num_envs)
    noise = prng.normal(noise_key, (2,) + data.action.shape[:2] + data.action.shape[3:])
    grads, metrics = batching.batch_mean(
        functools.partial(_grads, setup), (learner, state.hyper), _Batch(data, noise[0], noise[1])
    )
    g_actor, g_critic, g_alpha = grads
    opt = setup.optimizer
    u_actor, actor_opt = opt.update(g_actor, learner.actor_opt, learner.actor)
    u_critic, critic_opt = opt.update(g_critic, learner.critic_opt, learner.critic)
    u_alpha, alpha_opt = opt.update(g_alpha, learner.alpha_opt, learner.log_alpha)
    critic = optax.apply_updates(learner.critic, u_critic)
    tau = state.hyper.tau
    target = jax.tree_util.tree_map(lambda t, p: t + tau * (p - t), learner.target_critic, critic)
    new = Learner(optax.apply_updates(learner.actor, u_actor), critic, target,
                  learner.log_alpha + u_alpha, actor_opt, critic_opt, alpha_opt)
    new = jax.tree_util.tree_map(lambda a, b: jnp.where(ready, a, b), new, learner)
    return new, jax.tree_util.tree_map(lambda m: jnp.where(ready, m, 0.0), metrics)


def update(setup: Setup, state: SACState) -> tuple[SACState, dict]:
    """Act ``steps_per_update`` steps in every env, store them, then ``gradient_steps``
    minibatch steps. Metrics: float32 scalars, the same keys every call."""
    cfg = setup.cfg
    key, rollout_key, learn_key = jax.random.split(state.key, 3)
    steps_done = state.update_step * cfg.num_envs * cfg.steps_per_update
    policy = functools.partial(_policy, setup.actor, state.learner.actor, steps_done < cfg.learning_starts)
    env, traj = rollout.collect(policy, setup.env, setup.env_params, state.env, rollout_key, cfg.steps_per_update)
    buffer = replay.add(state.buffer, replay.from_trajectory(traj))
    state = state.replace(env=env, buffer=buffer, key=key)
    ready = buffer.size * cfg.num_envs >= max(cfg.learning_starts, 1)
    step = functools.partial(_gradient_step, setup, state, ready)
    learner, metrics = jax.lax.scan(step, state.learner, jax.random.split(learn_key, cfg.gradient_steps))
    metrics = jax.tree_util.tree_map(jnp.mean, metrics)
    count = jnp.sum(traj.episode_done.astype(jnp.float32))
    metrics.update(
        episode_count=count,
        episode_return=jnp.sum(jnp.where(traj.episode_done, traj.episode_return, 0.0)) / jnp.maximum(count, 1.0),
    )
    state = state.replace(learner=learner, update_step=state.update_step + 1)
    return state, {k: jnp.asarray(v, jnp.float32) for k, v in metrics.items()}
