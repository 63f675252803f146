"""One MAPPO / IPPO update as a pure function of :class:`MAPPOState`.

Collect a ``[T, B]`` rollout of every agent with the shared policy (available actions
only) -> GAE per agent (truncated steps bootstrap from the critic at the final observation
and state, ``info["final_obs"]`` / ``info["final_state"]``) -> ``update_epochs`` x
``num_minibatches`` clipped-surrogate steps on the ``T * B * A`` agent samples, shuffled
together (JaxMARL's IPPO batches the same way). No host I/O: it is scanned, jitted,
vmapped over seeds and sharded over devices like PPO.
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax
from flax import struct
from jax.flatten_util import ravel_pytree

from jaxrl.algos.common import batching, optim
from jaxrl.algos.common.train import epochs
from jaxrl.algos.contract import Plan
from jaxrl.algos.mappo.config import MAPPOConfig, MAPPOHyperparams, hyperparams
from jaxrl.algos.mappo.network import MultiAgentActorCritic, actor_input, critic_input, masked
from jaxrl.algos.common.actor_critic import entropy_loss, gae, normalize_advantages, policy_loss, value_loss
from jaxrl.core.multiagent import MultiAgentEnv
from jaxrl.models import networks


@struct.dataclass
class MACarry:
    """The batched env between steps: its state and what the next action reads (``[B, ...]``)."""

    env_state: Any
    obs: jax.Array  # float32 [B, A, F]
    state: jax.Array  # float32 [B, S], the global state
    avail: jax.Array  # bool [B, A, n]


@struct.dataclass
class MAPPOState:
    """Everything a run depends on; every leaf an array (checkpointed whole)."""

    params: Any  # MultiAgentActorCritic's params (shared by every agent)
    opt_state: Any  # optim.adam's state (traced lr and max_grad_norm)
    env: MACarry
    key: jax.Array
    update_step: jax.Array  # int32 []
    hyper: MAPPOHyperparams


@struct.dataclass
class Transition:
    """One step of the batched env, ``[B, ...]`` (``[T, B, ...]`` after the scan)."""

    obs: jax.Array  # [B, A, F]
    state: jax.Array  # [B, S]
    avail: jax.Array  # bool [B, A, n]
    action: jax.Array  # int32 [B, A]
    log_prob: jax.Array  # float32 [B, A]
    value: jax.Array  # float32 [B, A]
    reward: jax.Array  # float32 [B, A]
    terminated: jax.Array  # bool [B]
    truncated: jax.Array  # bool [B]
    next_obs: jax.Array  # [B, A, F], before auto-reset
    next_state: jax.Array  # [B, S], before auto-reset
    episode_done: jax.Array  # bool [B]
    episode_return: jax.Array  # float32 [B], team return of the episode that ended
    episode_length: jax.Array  # int32 [B]


@struct.dataclass
class Batch:
    """Flat agent samples ``[N]`` for the learner."""

    actor_in: jax.Array
    critic_in: jax.Array | None  # None for a decentralised critic (it reads actor_in)
    avail: jax.Array
    action: jax.Array
    log_prob: jax.Array
    value: jax.Array
    advantage: jax.Array
    target: jax.Array


class Setup(NamedTuple):
    """Static pieces bound into the pure functions."""

    env: MultiAgentEnv  # auto-resetting, with episode statistics (one env; vmapped here)
    env_params: Any
    network: MultiAgentActorCritic
    cfg: MAPPOConfig
    plan: Plan
    schedule: optim.Schedule
    optimizer: optax.GradientTransformation


def make_optimizer(cfg: MAPPOConfig, plan: Plan, lr=None, max_grad_norm=None) -> optax.GradientTransformation:
    """:func:`~jaxrl.algos.common.optim.adam`, the rate decayed once per update (JaxMARL's)."""
    schedule = optim.schedule(cfg.optim, plan.num_updates, plan.grad_steps_per_update)
    return optim.from_config(cfg.optim, schedule, lr, max_grad_norm)


def apply(setup: Setup, params, obs, state, avail=None):
    """The policy (masked by ``avail``) and the values of every agent: ``obs [..., A, F]``,
    ``state [..., S]`` -> ``(Categorical [..., A], value [..., A])``."""
    cfg = setup.cfg
    logits, value = setup.network.apply(params, actor_input(cfg.agent_id, obs),
                                        critic_input(cfg.critic, cfg.agent_id, obs, state))
    return masked(logits, avail), value


def _env_step(setup: Setup, params, carry: MACarry, key: jax.Array) -> tuple[MACarry, Transition]:
    act_key, env_key = jax.random.split(key)
    dist, value = apply(setup, params, carry.obs, carry.state, carry.avail)
    action = dist.sample(act_key)
    keys = jax.random.split(env_key, carry.obs.shape[0])
    env_state, ts = jax.vmap(setup.env.step, in_axes=(0, 0, 0, None))(keys, carry.env_state, action, setup.env_params)
    info = ts.info
    step = Transition(carry.obs, carry.state, carry.avail, action, dist.log_prob(action), value, ts.reward,
                      ts.terminated, ts.truncated, info["final_obs"], info["final_state"], info["episode_done"],
                      info["episode_return"], info["episode_length"])
    return MACarry(env_state, ts.obs, ts.state, ts.avail_actions), step


def collect(setup: Setup, params, carry: MACarry, key: jax.Array) -> tuple[MACarry, Transition]:
    """``num_steps`` steps of the batched env (one ``lax.scan``): the carry and ``[T, B]`` steps."""
    return jax.lax.scan(functools.partial(_env_step, setup, params), carry, jax.random.split(key, setup.cfg.num_steps))


def reset(setup: Setup, key: jax.Array) -> MACarry:
    """``num_envs`` fresh episodes."""
    keys = jax.random.split(key, setup.cfg.num_envs)
    env_state, ts = jax.vmap(setup.env.reset, in_axes=(0, None))(keys, setup.env_params)
    return MACarry(env_state, ts.obs, ts.state, ts.avail_actions)


def mappo_loss(params, setup: Setup, hyper: MAPPOHyperparams, mb: Batch) -> tuple[jax.Array, dict]:
    """Clipped surrogate + ``vf_coef`` x (clipped) value loss - ``ent_coef`` x entropy on ``[N]`` samples
    (``mb.critic_in`` is ``None`` for a decentralised critic: it reads ``mb.actor_in``)."""
    critic_in = mb.actor_in if mb.critic_in is None else mb.critic_in
    logits, values = setup.network.apply(params, mb.actor_in, critic_in)
    dist = masked(logits, mb.avail)
    pi_loss, pi_m = policy_loss(dist.log_prob(mb.action), mb.log_prob, mb.advantage, hyper.clip_eps)
    v_loss, v_m = value_loss(values, mb.value, mb.target, None if setup.cfg.vf_clip_eps is None else hyper.vf_clip_eps)
    ent_loss, ent_m = entropy_loss(dist.entropy())
    loss = pi_loss + hyper.vf_coef * v_loss + hyper.ent_coef * ent_loss
    return loss, {"loss": loss, **pi_m, **v_m, **ent_m}


def _flat_loss(flat, unravel, setup: Setup, hyper: MAPPOHyperparams, mb: Batch) -> tuple[jax.Array, dict]:
    return mappo_loss(unravel(flat), setup, hyper, mb)


def _sgd_step(setup: Setup, hyper: MAPPOHyperparams, unravel, learner: tuple, mb: Batch) -> tuple[tuple, dict]:
    """One optimiser step; the params stay one flat vector for the whole update (one fused
    Adam kernel instead of one per leaf, as PPO does)."""
    flat, opt_state = learner
    grad_fn = jax.grad(_flat_loss, has_aux=True)
    grads, metrics = batching.batch_mean(lambda rep, b: grad_fn(rep[0], unravel, setup, rep[1], b), (flat, hyper), mb)
    updates, opt_state = setup.optimizer.update(grads, opt_state, flat)
    return (flat + updates, opt_state), {**metrics, "grad_norm": jnp.linalg.norm(grads)}


def _epoch(setup: Setup, hyper: MAPPOHyperparams, unravel, batch: Batch, learner: tuple, key: jax.Array) -> tuple[tuple, dict]:
    m = setup.cfg.num_minibatches
    perm = jax.random.permutation(key, batch.advantage.shape[0])
    shuffled = batching.minibatches(batch, perm, m)
    if setup.cfg.normalize_advantages:
        adv = batching.replicate(normalize_advantages(jnp.reshape(batch.advantage[perm], (m, -1)), axis=1), ndim=2)
        shuffled = shuffled.replace(advantage=batching.constrain_batch(adv, axis=1))
    return jax.lax.scan(functools.partial(_sgd_step, setup, hyper, unravel), learner, shuffled)


def _learning_batch(setup: Setup, params, hyper: MAPPOHyperparams, traj: Transition) -> Batch:
    """GAE per agent over ``[T, B, A]``, flattened to ``[T * B * A]`` samples."""
    cfg = setup.cfg
    next_in = critic_input(cfg.critic, cfg.agent_id, traj.next_obs, traj.next_state)
    next_value = setup.network.apply(params, next_in, method="value")  # the critic alone
    per_agent = lambda x: jnp.broadcast_to(x[..., None], traj.reward.shape)  # noqa: E731  [T, B] -> [T, B, A]
    shape = traj.reward.shape
    flat_ta = lambda x: jnp.reshape(x, (shape[0], -1))  # noqa: E731  [T, B, A] -> [T, B * A]
    adv, target = gae(flat_ta(traj.reward), flat_ta(traj.value), flat_ta(next_value), flat_ta(per_agent(traj.terminated)),
                      flat_ta(per_agent(traj.truncated)), hyper.gamma, hyper.gae_lambda)
    flat = lambda x: jnp.reshape(x, (-1,) + x.shape[3:])  # noqa: E731  [T, B, A, ...] -> [N, ...]
    critic_in = None if cfg.critic == "decentralised" else flat(critic_input(cfg.critic, cfg.agent_id, traj.obs, traj.state))
    return Batch(flat(actor_input(cfg.agent_id, traj.obs)), critic_in,
                 flat(traj.avail), flat(traj.action), flat(traj.log_prob), flat(traj.value),
                 jnp.reshape(adv, (-1,)), jnp.reshape(target, (-1,)))


def update(setup: Setup, state: MAPPOState) -> tuple[MAPPOState, dict]:
    """One update (rollout, GAE, epochs x minibatches); pure. Returns the new state and a
    flat dict of float32 scalars (``episode_return`` is the team return of the episodes
    that ended in this rollout)."""
    key, rollout_key, epoch_key = jax.random.split(state.key, 3)
    env, traj = collect(setup, state.params, state.env, rollout_key)
    traj = batching.replicate(traj, ndim=2)  # on a data mesh: the learner's batch, whole on every device
    batch = _learning_batch(setup, state.params, state.hyper, traj)
    flat, unravel = ravel_pytree(state.params)
    epoch = functools.partial(_epoch, setup, state.hyper, unravel, batch)
    (flat, opt_state), sgd = epochs(epoch, (flat, state.opt_state), epoch_key, setup.cfg.update_epochs)
    params = unravel(flat)
    count = jnp.sum(traj.episode_done.astype(jnp.float32))
    ret_sum = jnp.sum(jnp.where(traj.episode_done, traj.episode_return, 0.0))
    len_sum = jnp.sum(jnp.where(traj.episode_done, traj.episode_length, 0).astype(jnp.float32))
    metrics = {k: jnp.mean(v) for k, v in sgd.items()}
    metrics.update(episode_count=count, episode_return_sum=ret_sum, episode_return=ret_sum / jnp.maximum(count, 1.0),
                   episode_length=len_sum / jnp.maximum(count, 1.0), lr=optim.current_lr(state.opt_state, setup.schedule),
                   value_mean=jnp.mean(batch.value), reward_mean=jnp.mean(traj.reward))
    new = MAPPOState(params, opt_state, env, key, state.update_step + 1, state.hyper)
    return new, {k: jnp.asarray(v, jnp.float32) for k, v in metrics.items()}


def init(setup: Setup, key: jax.Array, hyper: dict | None = None) -> MAPPOState:
    """A fresh state: shared network params, optimiser, ``num_envs`` reset envs."""
    optim_hyper, loss_hyper = optim.split_traced(hyperparams(setup.cfg, **(hyper or {})))
    key, net_key, env_key = jax.random.split(key, 3)
    carry = reset(setup, env_key)
    cfg = setup.cfg
    params = networks.init_params(setup.network, net_key, actor_input(cfg.agent_id, carry.obs[0]),
                                  critic_input(cfg.critic, cfg.agent_id, carry.obs[0], carry.state[0]))
    optimizer = make_optimizer(cfg, setup.plan, optim_hyper["lr"], optim_hyper["max_grad_norm"])
    return MAPPOState(params, optimizer.init(ravel_pytree(params)[0]), carry, key, jnp.zeros((), jnp.int32), MAPPOHyperparams(**loss_hyper))
