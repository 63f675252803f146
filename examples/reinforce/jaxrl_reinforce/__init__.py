"""REINFORCE with a learned value baseline, discrete actions: a jaxrl algorithm that lives
outside ``jaxrl/`` and registers through the ``jaxrl.algos`` entry point. One update rolls
``num_envs`` envs for ``num_steps`` steps, computes the discounted returns (bootstrapped by
the critic where the rollout or a truncation cuts an episode) and takes one Adam step.
``docs/writing_an_algorithm.md`` walks through this file.
"""

from __future__ import annotations

import dataclasses
import functools
import operator
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax
from flax import struct

from jaxrl.algos.common import optim
from jaxrl.algos.contract import (
    AlgoConfig, AlgoEntry, BatchSize, EnvSetup, EvalReport, Plan, Policy, Program, check, no_carry, replicated_axes,
)
from jaxrl.core import rollout, spaces
from jaxrl.core.wrappers import AutoReset, EpisodeStatistics, VmapEnv
from jaxrl.models import networks

TRACED = ("lr", "max_grad_norm", "gamma", "ent_coef", "vf_coef")  # live in the train state


@dataclasses.dataclass(frozen=True)
class ReinforceOptim(optim.OptimConfig):
    """The ``reinforce.optim`` section: the shared optimiser's keys, with this algorithm's defaults."""

    lr: float = 3e-3


@dataclasses.dataclass(frozen=True)
class ReinforceConfig(AlgoConfig):
    """The ``reinforce:`` section. :data:`TRACED` values are traced; the rest is static."""

    num_envs: int = 16  # parallel envs B (a multiple of the devices of an env split)
    num_steps: int = 64  # rollout length T: one gradient step per B * T env steps
    total_env_steps: int = 65_536  # whole run, a multiple of num_envs * num_steps
    optim: ReinforceOptim = dataclasses.field(default_factory=ReinforceOptim)  # clip, Adam, rate schedule
    gamma: float = 0.99  # discount
    ent_coef: float = 0.01  # entropy bonus coefficient
    vf_coef: float = 0.5  # value loss coefficient
    hidden: tuple[int, ...] = (64,)  # hidden widths of the actor's and the critic's MLP
    eval_episodes: int = 16  # greedy episodes per seed in evaluate

    def validate(self) -> None:
        for key in ("num_envs", "num_steps", "total_env_steps", "eval_episodes"):
            check(getattr(self, key) > 0, key, f"expected a positive integer, got {getattr(self, key)!r}")
        batch = self.num_envs * self.num_steps
        check(self.total_env_steps % batch == 0, "total_env_steps", f"not a multiple of num_envs * num_steps = {batch}")
        self.optim.validate()  # "optim.lr: expected > 0, got -1.0"
        check(0.0 < self.gamma <= 1.0, "gamma", f"expected 0 < gamma <= 1, got {self.gamma}")
        for key in ("ent_coef", "vf_coef"):
            check(getattr(self, key) >= 0.0, key, f"expected >= 0, got {getattr(self, key)}")
        check(len(self.hidden) > 0 and min(self.hidden) > 0, "hidden", f"expected positive widths, got {self.hidden}")


def hyperparams(cfg: ReinforceConfig, **overrides) -> dict:
    """``{name: float32 array}`` of the :data:`TRACED` values with ``overrides``, broadcast to
    one shape (``lr=jnp.array([1e-3, 3e-3])``: a ``[2]`` batch to ``vmap`` ``init_with`` over)."""
    check(set(overrides) <= set(TRACED), "hyperparams", f"unknown {sorted(set(overrides) - set(TRACED))}")
    config = {"lr": cfg.optim.lr, "max_grad_norm": cfg.optim.max_grad_norm, **{n: getattr(cfg, n) for n in TRACED[2:]}}
    values = {n: jnp.asarray(overrides.get(n, config[n]), jnp.float32) for n in TRACED}
    shape = jnp.broadcast_shapes(*(v.shape for v in values.values()))
    return {n: jnp.broadcast_to(v, shape) for n, v in values.items()}


@struct.dataclass
class LossHyper:
    gamma: jax.Array  # float32 [], like the two below
    ent_coef: jax.Array
    vf_coef: jax.Array


@struct.dataclass
class ReinforceState:
    params: Any  # the ActorCritic's params
    opt_state: Any  # optim.adam's state, holding the traced lr and max_grad_norm
    env: rollout.EnvCarry  # env states and observations, leaves [B, ...]
    key: jax.Array  # the PRNG key the next update splits
    update_step: jax.Array  # int32 [], updates done
    hyper: LossHyper  # gamma, ent_coef, vf_coef: float32 []


class Setup(NamedTuple):  # static pieces, bound with functools.partial
    env: Any  # VmapEnv(EpisodeStatistics(AutoReset(env))): B auto-resetting envs
    env_params: Any
    network: networks.ActorCritic
    cfg: ReinforceConfig
    optimizer: optax.GradientTransformation  # its update reads lr and max_grad_norm from opt_state


def discounted_returns(reward, next_value, terminated, truncated, gamma) -> jax.Array:
    """float32 ``[T, B]``: ``G_t = r_t + gamma * G'`` with ``G' = 0`` after a termination,
    ``V(next_obs_t)`` after a truncation or at ``t = T - 1``, else ``G_{t+1}``. Inputs
    ``[T, B]``; ``next_value`` is the critic at the observation reached before auto-reset."""

    def back(g_next, x):
        r, v_next, term, trunc = x
        g = r + gamma * jnp.where(term, 0.0, jnp.where(trunc, v_next, g_next))
        return g, g

    return jax.lax.scan(back, next_value[-1], (reward, next_value, terminated, truncated), reverse=True)[1]


def reinforce_loss(params, network, hyper: LossHyper, obs, action, returns) -> tuple[jax.Array, dict]:
    """``(loss, metrics)``: policy gradient with the critic as baseline, value regression and
    an entropy bonus, averaged over ``obs [..., *obs_shape]``, ``action`` and ``returns [...]``."""
    dist, value = network.apply(params, obs)
    pg = -jnp.mean(dist.log_prob(action) * jax.lax.stop_gradient(returns - value))
    vf = 0.5 * jnp.mean(jnp.square(returns - value))
    entropy = jnp.mean(dist.entropy())
    loss = pg + hyper.vf_coef * vf - hyper.ent_coef * entropy
    return loss, {"loss": loss, "pg_loss": pg, "vf_loss": vf, "entropy": entropy}


def policy_step(network, params, obs, key, deterministic: bool = False) -> rollout.PolicyOutput:
    """Actions for observations ``[..., *obs_shape]``: samples, or the mode if ``deterministic``."""
    dist, value = network.apply(params, obs)
    action = dist.mode() if deterministic else dist.sample(key)
    return rollout.PolicyOutput(action, dist.log_prob(action), value)


def act(network, params, carry, obs, key, deterministic: bool = False):
    """:attr:`Policy.act` of this stateless policy (``carry`` is ``()``)."""
    return carry, policy_step(network, params, obs, key, deterministic).action


def optimizer(cfg: ReinforceConfig, lr=None, max_grad_norm=None) -> optax.GradientTransformation:
    """The shared optimiser path of ``cfg.optim`` (clip, Adam, its schedule over the run's
    updates of one step each); ``lr`` and ``max_grad_norm`` (a sweep's) may be traced."""
    updates = cfg.total_env_steps // (cfg.num_envs * cfg.num_steps)
    return optim.from_config(cfg.optim, optim.schedule(cfg.optim, updates, 1), lr, max_grad_norm)


def init(setup: Setup, key: jax.Array, hyper: dict | None = None) -> ReinforceState:
    """A fresh state; ``hyper`` (from :func:`hyperparams`) replaces the config's values."""
    opt_hyper, loss_hyper = optim.split_traced(hyperparams(setup.cfg, **(hyper or {})))
    key, net_key, env_key = jax.random.split(key, 3)
    env = rollout.reset(setup.env, setup.env_params, env_key)
    params = networks.init_params(setup.network, net_key, jnp.asarray(env.obs[0], jnp.float32))
    opt_state = optimizer(setup.cfg, opt_hyper["lr"], opt_hyper["max_grad_norm"]).init(params)
    return ReinforceState(params, opt_state, env, key, jnp.zeros((), jnp.int32), LossHyper(**loss_hyper))


def update(setup: Setup, state: ReinforceState) -> tuple[ReinforceState, dict]:
    """Rollout, returns, one Adam step. Metrics: float32 scalars, the same keys every call."""
    key, rollout_key = jax.random.split(state.key)
    policy = functools.partial(policy_step, setup.network, state.params)
    env, traj = rollout.collect(policy, setup.env, setup.env_params, state.env, rollout_key, setup.cfg.num_steps)
    next_value = setup.network.apply(state.params, traj.next_obs)[1]
    returns = discounted_returns(traj.reward, next_value, traj.terminated, traj.truncated, state.hyper.gamma)
    grad_fn = jax.grad(reinforce_loss, has_aux=True)
    grads, metrics = grad_fn(state.params, setup.network, state.hyper, traj.obs, traj.action, returns)
    updates, opt_state = setup.optimizer.update(grads, state.opt_state, state.params)
    count = jnp.sum(traj.episode_done.astype(jnp.float32))  # episodes that ended in this rollout
    metrics.update(grad_norm=optax.global_norm(grads), episode_count=count, episode_return=jnp.sum(
        jnp.where(traj.episode_done, traj.episode_return, 0.0)) / jnp.maximum(count, 1.0))
    params = optax.apply_updates(state.params, updates)
    new = ReinforceState(params, opt_state, env, key, state.update_step + 1, state.hyper)
    return new, {k: jnp.asarray(v, jnp.float32) for k, v in metrics.items()}


def evaluate(setup: Setup, env, env_params, max_steps: int, state: ReinforceState, key) -> dict:
    """Undiscounted returns of the first greedy episode in each of the ``E`` envs of ``env``
    (auto-resetting, with episode statistics), rolled for ``max_steps`` steps: the env's
    episode limit, so every first episode ends. ``{"return_mean", "episode_returns" [E]}``."""
    reset_key, key = jax.random.split(key)
    greedy = functools.partial(policy_step, setup.network, state.params, deterministic=True)
    _, traj = rollout.collect(greedy, env, env_params, rollout.reset(env, env_params, reset_key), key, max_steps)
    first = jnp.argmax(traj.episode_done, axis=0)  # [E], the step at which each first episode ended
    returns = jnp.take_along_axis(traj.episode_return, first[None], axis=0)[0]
    return {"return_mean": jnp.mean(returns), "episode_returns": returns}


def batch_axes(state: ReinforceState) -> ReinforceState:
    """The env batch is axis 0 of the env states and observations; the rest is replicated."""
    return replicated_axes(state).replace(env=jax.tree_util.tree_map(lambda _: 0, state.env))


def build(envs: EnvSetup, cfg: ReinforceConfig) -> Program:
    """REINFORCE on ``envs.env`` as a :class:`~jaxrl.algos.contract.Program`."""
    space, obs_shape = envs.env.action_space(envs.params), envs.env.observation_space(envs.params).shape
    check(isinstance(space, spaces.Discrete), "env", f"reinforce needs a Discrete action space, got {space!r}")
    check(envs.curriculum is None, "env.curriculum", "reinforce runs no curriculum")
    max_steps = getattr(envs.eval_params, "max_steps_in_episode", None)
    check(max_steps is not None, "env", "the eval params have no max_steps_in_episode to cap an episode")
    network = networks.ActorCritic(action_dim=space.n, hidden=tuple(cfg.hidden), obs_ndim=max(len(obs_shape), 1))
    train_env = VmapEnv(EpisodeStatistics(AutoReset(envs.env)), cfg.num_envs)
    setup = Setup(train_env, envs.params, network, cfg, optimizer(cfg))
    eval_env = VmapEnv(EpisodeStatistics(AutoReset(envs.env)), cfg.eval_episodes)
    batch = cfg.num_envs * cfg.num_steps
    return Program(
        update=functools.partial(update, setup),
        evaluate=functools.partial(evaluate, setup, eval_env, envs.eval_params, int(max_steps)),
        plan=Plan(num_updates=cfg.total_env_steps // batch, env_steps_per_update=batch, grad_steps_per_update=1),
        batch_axes=batch_axes,  # sharding: which leaves an env split cuts
        report=EvalReport({"episode_returns": "deterministic"}),  # what `jaxrl eval` summarises
        hyperparams=functools.partial(hyperparams, cfg),
        init_with=functools.partial(init, setup),  # init(key) is init_with(key, hyperparams())
        batch=BatchSize("num_envs", cfg.num_envs, "envs"),  # must divide over the devices
        policy=Policy(envs.env, operator.attrgetter("params"), no_carry, functools.partial(act, network)),
    )


ENTRY = AlgoEntry("reinforce", ReinforceConfig, build, "REINFORCE with a learned baseline, discrete actions (example)")
