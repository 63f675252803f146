"""Soft actor-critic for continuous actions: a tanh-Gaussian actor, twin Q critics with
Polyak-averaged targets, a learned entropy temperature and the on-device replay buffer of
:mod:`jaxrl.algos.common.replay`.

:mod:`~jaxrl.algos.sac.config` is the ``sac:`` section, :mod:`~jaxrl.algos.sac.losses` the
losses, :mod:`~jaxrl.algos.sac.update` the state and one update. This module assembles the
:class:`~jaxrl.algos.contract.Program` that :data:`ENTRY` registers. The actor acts in
``[-1, 1]``; :class:`~jaxrl.core.wrappers.RescaleAction` maps that to the env's box.
"""

from __future__ import annotations

import functools
import math
import operator

from jaxrl.algos.common import replay
from jaxrl.algos.common.acting import eval_max_steps
from jaxrl.algos.common.assemble import env_and_buffer_axes, env_batch, greedy_returns, no_curriculum
from jaxrl.algos.common.envs import batched_env
from jaxrl.algos.contract import AlgoEntry, EnvSetup, EvalReport, Policy, Program, check, no_carry
from jaxrl.algos.sac import config, losses, update
from jaxrl.algos.sac.config import SACConfig, hyperparams
from jaxrl.algos.sac.update import SACState, Setup
from jaxrl.core import spaces
from jaxrl.core.wrappers import RescaleAction, VmapEnv
from jaxrl.models.qnetworks import SquashedGaussianActor, TwinQ

__all__ = ["ENTRY", "SACConfig", "SACState", "Setup", "build", "config", "hyperparams", "losses", "update"]


def act(actor: SquashedGaussianActor, params, carry, obs, key, deterministic: bool = False):
    """:attr:`Policy.act`: ``tanh(mean)``, or a sample, in ``[-1, 1]``."""
    dist = actor.apply(params, obs)
    return carry, dist.mode() if deterministic else dist.sample(key)


def _deterministic(actor: SquashedGaussianActor, params, obs, key):
    return actor.apply(params, obs).mode()


def build(envs: EnvSetup, cfg: SACConfig) -> Program:
    """SAC on ``envs.env`` as a :class:`~jaxrl.algos.contract.Program`."""
    space = envs.env.action_space(envs.params)
    check(isinstance(space, spaces.Box), "env", f"sac needs a Box action space, got {space!r}")
    no_curriculum(envs, "sac")
    action_dim = int(math.prod(space.shape))
    replay.check_memory(cfg.buffer_size, update.example_transition(envs.env, envs.params, action_dim), "buffer_size")
    obs_ndim = max(len(envs.env.observation_space(envs.params).shape), 1)
    actor = SquashedGaussianActor(action_dim, tuple(cfg.hidden), cfg.activation, obs_ndim=obs_ndim)
    critic = TwinQ(tuple(cfg.hidden), cfg.activation, obs_ndim)
    agent_env = RescaleAction(envs.env, -1.0, 1.0)
    train_env = batched_env(agent_env, cfg.num_envs, envs.vector)
    setup = Setup(train_env, envs.params, actor, critic, cfg, update.make_optimizer(cfg),
                  -cfg.target_entropy_scale * action_dim)
    eval_env = VmapEnv(agent_env, cfg.eval_episodes)
    max_steps = eval_max_steps(envs.eval_params, cfg.eval_max_steps)
    params = operator.attrgetter("learner.actor")
    return Program(
        update=functools.partial(update.update, setup),
        evaluate=functools.partial(greedy_returns, functools.partial(_deterministic, actor), params, eval_env,
                                   envs.eval_params, max_steps),
        plan=config.plan(cfg),
        batch_axes=env_and_buffer_axes,
        report=EvalReport({"episode_returns": "deterministic"}),
        hyperparams=functools.partial(hyperparams, cfg),
        init_with=functools.partial(update.init, setup),
        batch=env_batch(cfg),
        policy=Policy(agent_env, params, no_carry, functools.partial(act, actor)),
    )


ENTRY = AlgoEntry(
    name="sac", config_cls=SACConfig, build=build,
    description="SAC (tanh-Gaussian actor, twin critics, learned temperature, on-device replay), continuous actions",
)
