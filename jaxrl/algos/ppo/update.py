"""One PPO update (Schulman et al. 2017) as a pure function of :class:`PPOTrainState`.

Collect a ``[num_steps, num_envs]`` rollout -> (optionally) scale rewards -> GAE ->
``update_epochs`` x ``num_minibatches`` clipped-surrogate SGD steps -> merge the rollout's
observations into the normaliser. No host callback, no host transfer: it is ``scan``-ned,
``jit``-ted and ``vmap``-ped over seeds and traced hyperparameters.

Truncation vs termination: GAE bootstraps every step from ``V(next_obs)`` where
``next_obs`` is the observation the step reached *before* auto-reset
(``info["final_obs"]``); ``terminated`` zeroes that bootstrap, ``truncated`` keeps it.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import optax
from jax.flatten_util import ravel_pytree

from jaxrl.algos.common import batching, optim
from jaxrl.algos.common.optim import Schedule
from jaxrl.algos.common.train import epochs
from jaxrl.algos.contract import Plan
from jaxrl.algos.ppo.acting import policy_step, recurrent_policy_step, recurrent_values, value
from jaxrl.algos.ppo.config import PPOConfig, PPOHyperparams, hyperparams
from jaxrl.algos.ppo.losses import gae, normalize_advantages, ppo_loss, sequence_loss
from jaxrl.algos.ppo.state import AgentState, Batch, LearnerState, PPOTrainState, SequenceBatch, Setup
from jaxrl.core import rollout
from jaxrl.models import networks, normalize


def schedule(cfg: PPOConfig, plan: Plan) -> Schedule:
    """The learning-rate schedule of ``cfg.optim``, moved at every optimiser step (the
    default decays linearly to 0 over the run's optimiser steps)."""
    return optim.schedule(cfg.optim, plan.num_updates, plan.grad_steps_per_update, per_step=True)


def make_optimizer(cfg: PPOConfig, plan: Plan, lr=None, max_grad_norm=None) -> optax.GradientTransformation:
    """:func:`jaxrl.algos.common.optim.adam` for ``cfg`` (``lr``/``max_grad_norm`` may be traced)."""
    return optim.from_config(cfg.optim, schedule(cfg, plan), lr, max_grad_norm)


def _flat_loss(flat_params: jax.Array, unravel, setup: Setup, obs_stats, hyper: PPOHyperparams, mb):
    loss = sequence_loss if isinstance(mb, SequenceBatch) else ppo_loss
    return loss(unravel(flat_params), setup.network, obs_stats, setup.cfg, hyper, mb)


def _sgd_step(
    setup: Setup, hyper: PPOHyperparams, obs_stats: normalize.RunningStats, unravel, learner: LearnerState, mb: Batch
) -> tuple[LearnerState, dict]:
    """One optimiser step on a minibatch.

    The optimiser sees the gradient and the params as one flat vector: the same arithmetic
    as per-leaf Adam, but one fused kernel instead of one per leaf (a smaller program,
    faster to compile). The params stay flat across the update's steps and the gradient
    is taken with respect to the flat vector, so no step re-flattens anything.
    """
    grad_fn = jax.grad(_flat_loss, has_aux=True)

    def grads(replicated, batch):
        params, stats, hyp = replicated
        return grad_fn(params, unravel, setup, stats, hyp, batch)

    # on a data mesh: each device's slice, then one all-reduce of gradient and metrics
    flat_grads, metrics = batching.batch_mean(grads, (learner.params, obs_stats, hyper), mb)
    updates, opt_state = setup.optimizer.update(flat_grads, learner.opt_state, learner.params)
    return LearnerState(learner.params + updates, opt_state), {**metrics, "grad_norm": jnp.linalg.norm(flat_grads)}


def _epoch(
    setup: Setup,
    hyper: PPOHyperparams,
    obs_stats: normalize.RunningStats,
    unravel,
    batch: Batch,
    learner: LearnerState,
    key: jax.Array,
) -> tuple[LearnerState, dict]:
    """Shuffle the flat batch ``[N]`` into ``[M, N / M]`` minibatches and step on each.

    The advantages are normalised per minibatch here, for all ``M`` at once: on a data mesh
    the batch is whole on every device at this point (:func:`update` replicated it), so
    the statistics cost no collective, and each SGD step needs only one all-reduce
    (gradients and metrics together, :func:`jaxrl.parallel.batching.batch_mean`).
    """
    m = setup.cfg.num_minibatches
    perm = jax.random.permutation(key, batch.advantage.shape[0])
    shuffled = batching.minibatches(batch, perm, m)  # data mesh: each device gathers its slice
    if setup.cfg.normalize_advantages:  # statistics of whole minibatches, computed on every device
        adv = batching.replicate(normalize_advantages(jnp.reshape(batch.advantage[perm], (m, -1)), axis=1), ndim=2)
        shuffled = shuffled.replace(advantage=batching.constrain_batch(adv, axis=1))
    step = functools.partial(_sgd_step, setup, hyper, obs_stats, unravel)
    learner, metrics = jax.lax.scan(step, learner, shuffled)
    return learner, metrics


def _sequence_epoch(
    setup: Setup,
    hyper: PPOHyperparams,
    obs_stats: normalize.RunningStats,
    unravel,
    batch: SequenceBatch,
    learner: LearnerState,
    key: jax.Array,
) -> tuple[LearnerState, dict]:
    """:func:`_epoch` for a recurrent torso: shuffle the ``B`` env sequences (never the
    steps inside one) into ``[M, B / M, T]`` minibatches, each with its initial carries.

    Advantages are normalised over each minibatch's ``B / M * T`` steps.
    """
    m = setup.cfg.num_minibatches
    perm = jax.random.permutation(key, batch.start.shape[0])
    shuffled = batching.minibatches(batch, perm, m)  # leaves [M, B / M, T, ...] / [M, B / M, ...]
    if setup.cfg.normalize_advantages:
        adv = normalize_advantages(jnp.reshape(batch.steps.advantage[perm], (m, -1)), axis=1)
        adv = batching.replicate(jnp.reshape(adv, shuffled.steps.advantage.shape), ndim=2)
        shuffled = shuffled.replace(steps=shuffled.steps.replace(advantage=batching.constrain_batch(adv, axis=1)))
    step = functools.partial(_sgd_step, setup, hyper, obs_stats, unravel)
    return jax.lax.scan(step, learner, shuffled)


def _scale_rewards(
    cfg: PPOConfig, state: PPOTrainState, traj: rollout.Trajectory
) -> tuple[jax.Array, normalize.RunningStats, jax.Array]:
    """Rewards for learning: raw, or divided by the std of discounted returns."""
    if not cfg.normalize_reward:
        return traj.reward, state.agent.reward_stats, state.return_acc
    dones = jnp.logical_or(traj.terminated, traj.truncated)
    returns, acc = normalize.discounted_returns(state.return_acc, traj.reward, dones, state.hyper.gamma)
    stats = normalize.update(state.agent.reward_stats, returns)
    return normalize.scale(stats, traj.reward), stats, acc


def _episode_metrics(done: jax.Array, ret: jax.Array, length: jax.Array) -> dict:
    """Mean return and length of the episodes that ended (``traj.episode_*`` ``[T, B]``)."""
    count = jnp.sum(done.astype(jnp.float32))
    ret_sum = jnp.sum(jnp.where(done, ret, 0.0))
    len_sum = jnp.sum(jnp.where(done, length, 0).astype(jnp.float32))
    denom = jnp.maximum(count, 1.0)
    return {
        "episode_count": count,
        "episode_return_sum": ret_sum,
        "episode_return": ret_sum / denom,  # 0 when no episode ended in this rollout
        "episode_length": len_sum / denom,
    }


def _collect(setup: Setup, state: PPOTrainState, key: jax.Array):
    """The rollout: ``(env carry, memory, trajectory, V(next_obs) [T, B], starts [T, B] or None)``."""
    cfg, agent = setup.cfg, state.agent
    if not cfg.network.recurrent:
        policy = functools.partial(policy_step, setup.network, cfg, agent)
        env_carry, traj = rollout.collect(policy, setup.env, setup.env_params, state.env, key, cfg.num_steps)
        return env_carry, None, traj, value(setup.network, cfg, agent, traj.next_obs), None
    policy = functools.partial(recurrent_policy_step, setup.network, cfg, agent)
    env_carry, memory, traj, carries = rollout.collect_recurrent(
        policy, setup.env, setup.env_params, state.env, state.memory, key, cfg.num_steps
    )
    next_values = recurrent_values(setup.network, cfg, agent, carries, traj.next_obs)
    return env_carry, memory, traj, next_values, rollout.start_flags(state.memory, traj)


def update(setup: Setup, state: PPOTrainState) -> tuple[PPOTrainState, dict]:
    """One PPO update (rollout, advantages, epochs x minibatches); pure, no host I/O.

    Observation statistics are those of ``state`` throughout the update (so the first
    ratio is exactly 1); the rollout's observations are merged into them at the end.
    A recurrent torso learns on minibatches of whole env sequences (:func:`_sequence_epoch`)
    from the carry the rollout began with. Returns the new state and a flat dict of
    float32 scalars.
    """
    cfg, hyper, agent = setup.cfg, state.hyper, state.agent
    key, rollout_key, epoch_key = jax.random.split(state.key, 3)
    env_carry, memory, traj, next_values, starts = _collect(setup, state, rollout_key)
    rewards, reward_stats, return_acc = _scale_rewards(cfg, state, traj)
    adv, targets = gae(rewards, traj.value, next_values, traj.terminated, traj.truncated, hyper.gamma, hyper.gae_lambda)
    # On a data mesh the learner needs the whole batch on every device (the minibatches are
    # a global shuffle): one all-gather of everything the rest of the update reads.
    gathered = (Batch(traj.obs, traj.action, traj.log_prob, traj.value, adv, targets),
                traj.episode_done, traj.episode_return, traj.episode_length)
    if starts is None:
        whole, ep_done, ep_return, ep_length = batching.replicate(gathered, ndim=2)
        flat = lambda x: jnp.reshape(x, (-1,) + x.shape[2:])  # noqa: E731  [T, B, ...] -> [T*B, ...]
        batch = jax.tree_util.tree_map(flat, whole)
        steps, epoch_fn = batch, _epoch
    else:
        (whole, ep_done, ep_return, ep_length), starts = batching.replicate((gathered, starts), ndim=2)
        env_major = lambda x: jnp.swapaxes(x, 0, 1)  # noqa: E731  [T, B, ...] -> [B, T, ...]
        carry = batching.replicate(state.memory.carry, ndim=1)
        batch = SequenceBatch(jax.tree_util.tree_map(env_major, whole), env_major(starts), carry)
        steps, epoch_fn = batch.steps, _sequence_epoch
    flat_params, unravel = ravel_pytree(agent.params)
    epoch = functools.partial(epoch_fn, setup, hyper, agent.obs_stats, unravel, batch)
    learner, sgd_metrics = epochs(epoch, LearnerState(flat_params, state.opt_state), epoch_key, cfg.update_epochs)
    obs_stats = normalize.update(agent.obs_stats, whole.obs) if cfg.normalize_obs else agent.obs_stats
    new_state = PPOTrainState(
        agent=AgentState(unravel(learner.params), obs_stats, reward_stats),
        opt_state=learner.opt_state,
        env=env_carry,
        return_acc=return_acc,
        key=key,
        update_step=state.update_step + 1,
        hyper=hyper,
        memory=memory,
    )
    metrics = {k: jnp.mean(v) for k, v in sgd_metrics.items()}
    metrics.update(_episode_metrics(ep_done, ep_return, ep_length))
    metrics["lr"] = optim.current_lr(state.opt_state, setup.schedule)
    metrics["value_mean"] = jnp.mean(steps.value)
    metrics["advantage_std"] = jnp.std(steps.advantage)
    return new_state, {k: jnp.asarray(v, jnp.float32) for k, v in metrics.items()}


def init(setup: Setup, key: jax.Array, hyper: dict | None = None) -> PPOTrainState:
    """A fresh train state: network params, optimiser state, reset envs, empty statistics.

    ``hyper``: traced hyperparameters from :func:`~jaxrl.algos.ppo.config.hyperparams`
    (default: the config's values).
    """
    optim_hyper, loss_hyper = optim.split_traced(hyperparams(setup.cfg, **(hyper or {})))
    key, net_key, env_key = jax.random.split(key, 3)
    env_carry = rollout.reset(setup.env, setup.env_params, env_key)
    memory = None
    if setup.cfg.network.recurrent:
        num_envs = setup.cfg.num_envs
        memory = rollout.PolicyMemory(setup.network.initial_carry((num_envs,)), jnp.ones((num_envs,), bool))
        first = (memory.carry, jnp.asarray(env_carry.obs[None], jnp.float32), memory.start[None])
        params = networks.init_params(setup.network, net_key, *first)
    else:
        params = networks.init_params(setup.network, net_key, jnp.asarray(env_carry.obs[0], jnp.float32))
    obs_shape = env_carry.obs.shape[1:]
    agent = AgentState(params, normalize.init_stats(obs_shape), normalize.init_stats(()))
    optimizer = make_optimizer(setup.cfg, setup.plan, optim_hyper["lr"], optim_hyper["max_grad_norm"])
    return PPOTrainState(
        agent=agent,
        opt_state=optimizer.init(ravel_pytree(params)[0]),
        env=env_carry,
        return_acc=jnp.zeros((setup.cfg.num_envs,), jnp.float32),
        key=key,
        update_step=jnp.zeros((), jnp.int32),
        hyper=PPOHyperparams(**loss_hyper),
        memory=memory,
    )
