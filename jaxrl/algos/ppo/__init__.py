"""Proximal Policy Optimisation (discrete and continuous), one program per update.

The pieces, one concern per module: :mod:`~jaxrl.algos.ppo.config` (the ``ppo:`` section),
:mod:`~jaxrl.algos.ppo.losses` (GAE and the losses), :mod:`~jaxrl.algos.ppo.update` (one
update, ``init``), :mod:`~jaxrl.algos.ppo.acting` and :mod:`~jaxrl.algos.ppo.evaluate`.
This module assembles them into the :class:`~jaxrl.algos.contract.Program` that
:data:`ENTRY` registers under ``algo: ppo``.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import jax

from jaxrl.algos.common import masks
from jaxrl.algos.common.assemble import env_batch, episode_cap
from jaxrl.algos.common.envs import batched_env, env_batch_axes
from jaxrl.algos.common.network import conv_fields
from jaxrl.algos.contract import (
    AlgoEntry, EnvSetup, EvalReport, Policy, Program, no_carry, replicated_axes,
)
from jaxrl.algos.ppo import acting, config, evaluate, losses, update
from jaxrl.algos.ppo.config import PPOConfig, PPOHyperparams, hyperparams
from jaxrl.algos.ppo.state import AgentState, Batch, LearnerState, PPOTrainState, Setup
from jaxrl.core import spaces
from jaxrl.core.env import Environment
from jaxrl.core.wrappers import RescaleAction, VmapEnv
from jaxrl.models import conv as conv_lib
from jaxrl.models.networks import ActorCritic
from jaxrl.models.recurrent import RecurrentActorCritic

__all__ = [
    "ENTRY", "PPOConfig", "PPOHyperparams", "PPOTrainState", "AgentState", "Batch", "LearnerState", "Setup",
    "acting", "agent_env", "build", "build_network", "config", "evaluate", "hyperparams", "losses", "make_setup",
    "make_act", "make_value", "resolve_dist", "update",
]


def resolve_dist(env: Environment, env_params: Any, cfg: PPOConfig) -> str:
    """The distribution kind for ``env``'s action space (``cfg.dist`` or the "auto" choice)."""
    space = env.action_space(env_params)
    discrete = isinstance(space, (spaces.Discrete, spaces.MultiDiscrete))
    dist = cfg.dist if cfg.dist != "auto" else ("categorical" if discrete else "gaussian")
    if discrete != (dist == "categorical"):
        raise ValueError(f"dist: {dist!r} does not fit the action space {space!r} of {env.name}")
    if not discrete and not isinstance(space, spaces.Box):
        raise ValueError(f"dist: PPO supports Discrete, MultiDiscrete and Box action spaces, got {space!r}")
    return dist


def agent_env(env: Environment, env_params: Any, cfg: PPOConfig) -> Environment:
    """The single env the policy acts in: continuous actions in ``[-1, 1]`` rescaled to the box.

    Drive it with :func:`make_act`'s ``act`` (for rendering, evaluation).
    """
    if isinstance(env.action_space(env_params), spaces.Box):
        return RescaleAction(env, -1.0, 1.0)
    return env


def build_network(env: Environment, env_params: Any, cfg: PPOConfig) -> ActorCritic:
    """The :class:`ActorCritic` for ``env`` and ``cfg`` (a :class:`RecurrentActorCritic`
    for ``network.torso: gru | lstm``), in a :class:`~jaxrl.algos.common.masks.MaskedPolicy`
    where the env declares legal actions (``cfg.action_mask``) or they are ``MultiDiscrete``."""
    network = _build_network(env, env_params, cfg)
    space = env.action_space(env_params)
    mask_fn = masks.action_mask_fn(env, env_params, cfg.action_mask)
    nvec = space.nvec if isinstance(space, spaces.MultiDiscrete) else None
    if nvec and cfg.network.prev_action:
        raise ValueError(f"network.prev_action: not supported with a MultiDiscrete action space ({space!r})")
    return network if mask_fn is None and nvec is None else masks.MaskedPolicy(network, mask_fn, nvec)


def _build_network(env: Environment, env_params: Any, cfg: PPOConfig) -> ActorCritic:
    dist = resolve_dist(env, env_params, cfg)
    space = env.action_space(env_params)
    if isinstance(space, spaces.MultiDiscrete):  # factorised: max(nvec) logits per component
        action_dim = len(space.nvec) * max(space.nvec)
    else:
        action_dim = space.n if dist == "categorical" else int(math.prod(space.shape))
    obs_shape = tuple(env.observation_space(env_params).shape)
    obs_ndim = max(len(obs_shape), 1)
    if cfg.network.image_leaf is None:
        conv = conv_fields(cfg.network, env, env_params)  # refuses a conv torso on non-image observations
    else:  # the conv reads one [H, W, C] leaf of a flat structured observation
        if len(obs_shape) != 1:
            raise ValueError(f"network.image_leaf: needs a flat observation with named leaves, {env.name} gives shape {obs_shape}")
        image = conv_lib.leaf_image(env, obs_shape[0], cfg.network.image_leaf, cfg.network.conv, cfg.network.channels)
        channels = None if cfg.network.channels is None else tuple(cfg.network.channels)
        conv = {"conv": cfg.network.conv, "channels": channels, "image": image}
    if cfg.network.recurrent:
        return RecurrentActorCritic(
            action_dim=action_dim, dist=dist, hidden=tuple(cfg.hidden), activation=cfg.activation,
            log_std=cfg.log_std, init_log_std=cfg.init_log_std, obs_ndim=obs_ndim,
            cell=cfg.network.torso, cell_size=cfg.network.cell_size, prev_action=cfg.network.prev_action, **conv,
        )
    return ActorCritic(
        action_dim=action_dim,
        dist=dist,
        hidden=tuple(cfg.hidden),
        activation=cfg.activation,
        shared_torso=cfg.shared_torso,
        log_std=cfg.log_std,
        init_log_std=cfg.init_log_std,
        obs_ndim=obs_ndim,
        **conv,
    )


def make_setup(env: Environment, env_params: Any, cfg: PPOConfig, vector: str = "auto") -> Setup:
    """The static pieces of one run: the batched auto-resetting env (on path ``vector``,
    :func:`~jaxrl.algos.common.envs.batched_env`), the network, counts."""
    plan = config.plan(cfg)
    network = build_network(env, env_params, cfg)
    train_env = batched_env(agent_env(env, env_params, cfg), cfg.num_envs, vector)
    schedule = update.schedule(cfg, plan)
    return Setup(train_env, env_params, network, cfg, plan, schedule, update.make_optimizer(cfg, plan))


def batch_axes(state: PPOTrainState) -> PPOTrainState:
    """The env batch is axis 0 of the env states, observations, return accumulators and
    a recurrent torso's memory."""
    axes = replicated_axes(state)
    env = env_batch_axes(state.env)
    memory = jax.tree_util.tree_map(lambda _: 0, state.memory)
    return axes.replace(env=env, return_acc=0, memory=memory)


def _feed_forward(cfg: PPOConfig, what: str) -> None:
    if cfg.network.recurrent:
        raise ValueError(f"{what}: a {cfg.network.torso} policy needs its carry; use the program's policy (Program.policy)")


def make_value(env: Environment, env_params: Any, cfg: PPOConfig):
    """``value(agent, obs) -> V(obs)``, the critic of a trained agent (probes, diagnostics);
    MLP torsos only."""
    _feed_forward(cfg, "make_value")
    return functools.partial(acting.value, build_network(env, env_params, cfg), cfg)


def make_act(env: Environment, env_params: Any, cfg: PPOConfig):
    """``act(agent, obs, key, deterministic=False) -> action`` for :func:`agent_env`'s env;
    MLP torsos only (a recurrent one acts through the program's :class:`Policy`)."""
    _feed_forward(cfg, "make_act")
    return functools.partial(acting.act, build_network(env, env_params, cfg), cfg)


def _agent(state: PPOTrainState) -> AgentState:
    return state.agent


def _policy(envs: EnvSetup, cfg: PPOConfig, network: ActorCritic) -> Policy:
    if cfg.network.recurrent:
        init_carry = functools.partial(acting.recurrent_init_carry, network)
        act = functools.partial(acting.recurrent_act, network, cfg)
    else:
        init_carry, act = no_carry, functools.partial(acting.policy_act, network, cfg)
    return Policy(env=agent_env(envs.env, envs.params, cfg), params=_agent, init_carry=init_carry, act=act)


def load_params(fresh: PPOTrainState, trained: PPOTrainState) -> PPOTrainState:
    """``fresh`` acting with ``trained``'s agent (params and normaliser statistics)."""
    return fresh.replace(agent=trained.agent)


def build(envs: EnvSetup, cfg: PPOConfig) -> Program:
    """PPO on ``envs.env`` as a :class:`~jaxrl.algos.contract.Program`."""
    if envs.curriculum is not None:
        raise ValueError("env.curriculum: PPO does not run a curriculum; remove it or use algo: grpo")
    setup = make_setup(envs.env, envs.params, cfg, envs.vector)
    eval_env = VmapEnv(agent_env(envs.env, envs.params, cfg), 2 * cfg.eval_episodes)
    network = setup.network
    max_steps = episode_cap(envs.env, envs.eval_params, cfg.eval_max_steps)
    return Program(
        update=functools.partial(update.update, setup),
        evaluate=functools.partial(evaluate.evaluate, setup, eval_env, envs.eval_params, max_steps),
        plan=setup.plan,
        batch_axes=batch_axes,
        report=EvalReport({"episode_returns": "deterministic", "episode_returns_stochastic": "stochastic"}),
        hyperparams=functools.partial(hyperparams, cfg),
        init_with=functools.partial(update.init, setup),
        batch=env_batch(cfg),
        policy=_policy(envs, cfg, network),
        load_params=load_params,
    )


ENTRY = AlgoEntry(
    name="ppo", config_cls=PPOConfig, build=build,
    description="PPO (clipped surrogate, GAE with truncation bootstrap), discrete and continuous",
)
