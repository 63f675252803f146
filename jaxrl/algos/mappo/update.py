"""One MAPPO / IPPO update as a pure function of :class:`MAPPOState`.

Collect a ``[T, B]`` rollout of every agent with the shared policy (available actions
only) -> GAE per agent (truncated steps bootstrap from the critic at the final observation
and state, ``info["final_obs"]`` / ``info["final_state"]``) -> ``update_epochs`` x
``num_minibatches`` clipped-surrogate steps on the ``T * B * A`` agent samples, shuffled
together (JaxMARL's IPPO batches the same way). With ``torso: gru`` the policy's carries
(:class:`MAMemory`) go from one rollout to the next, and the learner shuffles the ``B * A``
whole agent sequences instead, each replayed from the carries it began with (JaxMARL's
recurrent MAPPO batches so). No host I/O: it is scanned, jitted, vmapped over seeds and
sharded over devices like PPO.
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
from jaxrl.algos.mappo.network import MultiAgentActorCritic, RecurrentMultiAgentActorCritic, actor_input, critic_input, masked
from jaxrl.algos.common.actor_critic import entropy_loss, gae, normalize_advantages, policy_loss, value_loss
from jaxrl.core import rollout
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
class MAMemory:
    """A recurrent policy's side of the batched env, carried across rollouts (``torso: gru``)."""

    carry: Any  # (actor, critic) carries, float32 [B, A, H] each
    start: jax.Array  # bool [B]: the current observation is an episode's first (carries reset before it)


@struct.dataclass
class MAPPOState:
    """Everything a run depends on; every leaf an array (checkpointed whole)."""

    params: Any  # the network's params (shared by every agent)
    opt_state: Any  # optim.adam's state (traced lr and max_grad_norm)
    env: MACarry
    key: jax.Array
    update_step: jax.Array  # int32 []
    hyper: MAPPOHyperparams
    memory: MAMemory | None = None  # torso gru only


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
    critic_carry: Any = None  # torso gru: the critic's carry after the step [B, A, H] (bootstraps next_state)


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


@struct.dataclass
class SequenceBatch:
    """Whole agent sequences for a recurrent torso, sequence-major: ``steps`` leaves
    ``[N, T, ...]`` (``N = B * A``), ``start`` bool ``[N, T]`` (carries reset before the step),
    ``carry`` the (actor, critic) carries before step 0, ``[N, H]`` each."""

    steps: Batch
    start: jax.Array
    carry: Any


class Setup(NamedTuple):
    """Static pieces bound into the pure functions."""

    env: MultiAgentEnv  # auto-resetting, with episode statistics (one env; vmapped here)
    env_params: Any
    network: MultiAgentActorCritic | RecurrentMultiAgentActorCritic
    cfg: MAPPOConfig
    plan: Plan
    schedule: optim.Schedule
    optimizer: optax.GradientTransformation


def make_optimizer(cfg: MAPPOConfig, plan: Plan, lr=None, max_grad_norm=None,
                   groups=None) -> optax.GradientTransformation:
    """:func:`~jaxrl.algos.common.optim.adam`, the rate decayed once per update (JaxMARL's);
    ``groups`` (:func:`~jaxrl.algos.mappo.network.param_groups`) clips actor and critic apart."""
    schedule = optim.schedule(cfg.optim, plan.num_updates, plan.grad_steps_per_update)
    return optim.from_config(cfg.optim, schedule, lr, max_grad_norm, groups)


def recurrent(setup: Setup) -> bool:
    """Whether the network carries memory (``torso: gru``)."""
    return setup.cfg.torso != "mlp"


def apply(setup: Setup, params, obs, state, avail=None, carry=None, start=None):
    """The policy (masked by ``avail``) and the values of every agent: ``obs [..., A, F]``,
    ``state [..., S]`` -> ``(carry, Categorical [..., A], value [..., A])``. A recurrent
    network takes one step from ``carry`` (leaves ``[..., A, H]``; reset where ``start
    [...]``); the feed-forward one passes ``carry`` through."""
    cfg = setup.cfg
    x, c = actor_input(cfg.agent_id, obs), critic_input(cfg.critic, cfg.agent_id, obs, state)
    if not recurrent(setup):
        logits, value = setup.network.apply(params, x, c)
        return carry, masked(logits, avail), value
    start = jnp.broadcast_to(start[..., None], obs.shape[:-1])[None]
    carry, logits, value = setup.network.apply(params, carry, x[None], c[None], start)
    return carry, masked(logits[0], avail), value[0]


def _env_step(setup: Setup, params, carry: tuple[MACarry, MAMemory | None], key: jax.Array):
    env, memory = carry
    act_key, env_key = jax.random.split(key)
    policy_carry, start = (None, None) if memory is None else (memory.carry, memory.start)
    policy_carry, dist, value = apply(setup, params, env.obs, env.state, env.avail, policy_carry, start)
    action = dist.sample(act_key)
    keys = jax.random.split(env_key, env.obs.shape[0])
    env_state, ts = jax.vmap(setup.env.step, in_axes=(0, 0, 0, None))(keys, env.env_state, action, setup.env_params)
    info = ts.info
    step = Transition(env.obs, env.state, env.avail, action, dist.log_prob(action), value, ts.reward,
                      ts.terminated, ts.truncated, info["final_obs"], info["final_state"], info["episode_done"],
                      info["episode_return"], info["episode_length"], None if memory is None else policy_carry[1])
    memory = None if memory is None else MAMemory(policy_carry, ts.done)  # an auto-reset began a new episode
    return (MACarry(env_state, ts.obs, ts.state, ts.avail_actions), memory), step


def collect(setup: Setup, params, carry: MACarry, key: jax.Array,
            memory: MAMemory | None = None) -> tuple[MACarry, MAMemory | None, Transition]:
    """``num_steps`` steps of the batched env (one ``lax.scan``): the carry, the policy's
    memory (``None`` for the feed-forward torso) and ``[T, B]`` steps."""
    keys = jax.random.split(key, setup.cfg.num_steps)
    (carry, memory), traj = jax.lax.scan(functools.partial(_env_step, setup, params), (carry, memory), keys)
    return carry, memory, traj


def reset(setup: Setup, key: jax.Array) -> MACarry:
    """``num_envs`` fresh episodes."""
    keys = jax.random.split(key, setup.cfg.num_envs)
    env_state, ts = jax.vmap(setup.env.reset, in_axes=(0, None))(keys, setup.env_params)
    return MACarry(env_state, ts.obs, ts.state, ts.avail_actions)


def initial_memory(setup: Setup, batch_shape: tuple[int, ...]) -> MAMemory:
    """Zero carries for ``batch_shape + (A,)`` agents, every env at an episode start."""
    return MAMemory(setup.network.initial_carry(tuple(batch_shape) + (setup.env.num_agents,)),
                    jnp.ones(batch_shape, bool))


def mappo_loss(params, setup: Setup, hyper: MAPPOHyperparams, mb: Batch | SequenceBatch) -> tuple[jax.Array, dict]:
    """Clipped surrogate + ``vf_coef`` x (clipped) value loss - ``ent_coef`` x entropy on ``[N]`` samples
    (``mb.critic_in`` is ``None`` for a decentralised critic: it reads ``mb.actor_in``), or
    on ``[N, T]`` steps of whole sequences, replayed from their carries (the rollout's
    computation, so the first ratio is 1 to rounding); means over every step."""
    if isinstance(mb, SequenceBatch):
        time_major = lambda x: jnp.swapaxes(x, 0, 1)  # noqa: E731  [N, T, ...] -> [T, N, ...]
        steps = jax.tree_util.tree_map(time_major, mb.steps)
        critic_in = steps.actor_in if steps.critic_in is None else steps.critic_in
        _, logits, values = setup.network.apply(params, mb.carry, steps.actor_in, critic_in, time_major(mb.start))
        mb = steps
    else:
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


def _epoch(setup: Setup, hyper: MAPPOHyperparams, unravel, batch: Batch | SequenceBatch, learner: tuple,
           key: jax.Array) -> tuple[tuple, dict]:
    """Shuffle the samples (or whole sequences) into ``num_minibatches`` and step on each;
    advantages normalised over each minibatch's steps."""
    m = setup.cfg.num_minibatches
    steps = batch.steps if isinstance(batch, SequenceBatch) else batch
    perm = jax.random.permutation(key, steps.advantage.shape[0])
    shuffled = batching.minibatches(batch, perm, m)
    if setup.cfg.normalize_advantages:
        mb_steps = shuffled.steps if isinstance(batch, SequenceBatch) else shuffled
        adv = normalize_advantages(jnp.reshape(steps.advantage[perm], (m, -1)), axis=1)
        adv = batching.replicate(jnp.reshape(adv, mb_steps.advantage.shape), ndim=2)
        mb_steps = mb_steps.replace(advantage=batching.constrain_batch(adv, axis=1))
        shuffled = shuffled.replace(steps=mb_steps) if isinstance(batch, SequenceBatch) else mb_steps
    return jax.lax.scan(functools.partial(_sgd_step, setup, hyper, unravel), learner, shuffled)


def _next_values(setup: Setup, params, traj: Transition) -> jax.Array:
    """float32 ``[T, B, A]``: the critic at each step's final observation and state (before
    auto-reset), a recurrent one from its carry after the step, as if the episode went on:
    the bootstrap of a truncated step. One batched call, not a scan."""
    cfg = setup.cfg
    next_in = critic_input(cfg.critic, cfg.agent_id, traj.next_obs, traj.next_state)
    if not recurrent(setup):
        return setup.network.apply(params, next_in, method="value")  # the critic alone
    start = jnp.zeros((1,) + next_in.shape[:-1], bool)
    return setup.network.apply(params, traj.critic_carry, next_in[None], start, method="value")[1][0]


def _learning_batch(setup: Setup, params, hyper: MAPPOHyperparams, traj: Transition, memory: MAMemory | None):
    """GAE per agent over ``[T, B, A]``, flattened to ``[T * B * A]`` samples, or (recurrent,
    ``memory`` the one the rollout began with) to ``B * A`` sequences of ``T`` steps."""
    cfg = setup.cfg
    next_value = _next_values(setup, params, traj)
    per_agent = lambda x: jnp.broadcast_to(x[..., None], traj.reward.shape)  # noqa: E731  [T, B] -> [T, B, A]
    shape = traj.reward.shape
    flat_ta = lambda x: jnp.reshape(x, (shape[0], -1))  # noqa: E731  [T, B, A] -> [T, B * A]
    adv, target = gae(flat_ta(traj.reward), flat_ta(traj.value), flat_ta(next_value), flat_ta(per_agent(traj.terminated)),
                      flat_ta(per_agent(traj.truncated)), hyper.gamma, hyper.gae_lambda)
    critic_in = None if cfg.critic == "decentralised" else critic_input(cfg.critic, cfg.agent_id, traj.obs, traj.state)
    steps = Batch(actor_input(cfg.agent_id, traj.obs), critic_in, traj.avail, traj.action, traj.log_prob, traj.value,
                  jnp.reshape(adv, shape), jnp.reshape(target, shape))  # leaves [T, B, A, ...]
    if memory is None:
        return jax.tree_util.tree_map(lambda x: jnp.reshape(x, (-1,) + x.shape[3:]), steps)  # [T * B * A, ...]
    # agent-major sequences: [T, B, A, ...] -> [B * A, T, ...]
    seq = lambda x: jnp.reshape(jnp.moveaxis(x, 0, 2), (shape[1] * shape[2], shape[0]) + x.shape[3:])  # noqa: E731
    starts = rollout.start_flags(memory, traj)  # [T, B]
    carry = jax.tree_util.tree_map(lambda c: jnp.reshape(c, (-1,) + c.shape[2:]), memory.carry)  # [B * A, H]
    return SequenceBatch(jax.tree_util.tree_map(seq, steps), seq(per_agent(starts)), carry)


def update(setup: Setup, state: MAPPOState) -> tuple[MAPPOState, dict]:
    """One update (rollout, GAE, epochs x minibatches); pure. Returns the new state and a
    flat dict of float32 scalars (``episode_return`` is the team return of the episodes
    that ended in this rollout)."""
    key, rollout_key, epoch_key = jax.random.split(state.key, 3)
    env, memory, traj = collect(setup, state.params, state.env, rollout_key, state.memory)
    traj = batching.replicate(traj, ndim=2)  # on a data mesh: the learner's batch, whole on every device
    began = None if memory is None else batching.replicate(state.memory, ndim=1)
    batch = _learning_batch(setup, state.params, state.hyper, traj, began)
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
                   value_mean=jnp.mean(traj.value), reward_mean=jnp.mean(traj.reward))
    new = MAPPOState(params, opt_state, env, key, state.update_step + 1, state.hyper, memory)
    return new, {k: jnp.asarray(v, jnp.float32) for k, v in metrics.items()}


def init(setup: Setup, key: jax.Array, hyper: dict | None = None) -> MAPPOState:
    """A fresh state: shared network params, optimiser, ``num_envs`` reset envs."""
    optim_hyper, loss_hyper = optim.split_traced(hyperparams(setup.cfg, **(hyper or {})))
    key, net_key, env_key = jax.random.split(key, 3)
    carry = reset(setup, env_key)
    params = init_params(setup.network, setup.cfg, net_key, carry.obs[0], carry.state[0])
    # setup.optimizer's state with this seed's traced lr / max_grad_norm; the clipping groups
    # of clip_per_network only act in update (clipping keeps no state), so none are needed here
    optimizer = make_optimizer(setup.cfg, setup.plan, optim_hyper["lr"], optim_hyper["max_grad_norm"])
    memory = initial_memory(setup, (setup.cfg.num_envs,)) if recurrent(setup) else None
    return MAPPOState(params, optimizer.init(ravel_pytree(params)[0]), carry, key, jnp.zeros((), jnp.int32),
                      MAPPOHyperparams(**loss_hyper), memory)


def init_params(network, cfg: MAPPOConfig, key: jax.Array, obs: jax.Array, state: jax.Array):
    """``network``'s params for one env's ``obs [A, F]`` and ``state [S]``."""
    x, c = actor_input(cfg.agent_id, obs), critic_input(cfg.critic, cfg.agent_id, obs, state)
    if cfg.torso == "mlp":
        return networks.init_params(network, key, x, c)
    first = network.initial_carry(x.shape[:-1]), x[None], c[None], jnp.ones((1,) + x.shape[:-1], bool)
    return networks.init_params(network, key, *first)
