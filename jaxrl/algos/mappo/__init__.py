"""MAPPO and IPPO: multi-agent PPO with one policy shared by every agent.

Runs on any :class:`~jaxrl.core.multiagent.MultiAgentEnv` (``jaxmarl/<id>``, or an env of
your own). ``algo: mappo`` values the global state (a centralised critic), ``algo: ippo``
each agent's own observation (``critic: decentralised``); both are one config class
(:mod:`~jaxrl.algos.mappo.config`) and one program, so ``jaxrl train / eval``, ``--seeds``,
``--resume``, checkpoints and ``devices:`` work as for PPO. Pieces:
:mod:`~jaxrl.algos.mappo.network` (actor, critic, masking), :mod:`~jaxrl.algos.mappo.update`
(rollout, GAE per agent, the loss, one update) and :mod:`~jaxrl.algos.mappo.evaluate`.
``docs/multi_agent.md`` has the contract and the recipes.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from jaxrl.algos.common import optim
from jaxrl.algos.common.assemble import env_batch, episode_cap
from jaxrl.algos.contract import AlgoEntry, EnvSetup, EvalReport, Policy, Program, replicated_axes
from jaxrl.algos.mappo import config, evaluate, network, update
from jaxrl.algos.mappo.config import IPPOConfig, MAPPOConfig, hyperparams
from jaxrl.algos.mappo.update import MAMemory, MAPPOState, Setup
from jaxrl.core import spaces
from jaxrl.core.multiagent import MultiAgentEnv, training_env

__all__ = ["ENTRY", "IPPO_ENTRY", "IPPOConfig", "MAMemory", "MAPPOConfig", "MAPPOState", "Setup", "act", "build", "config",
           "evaluate", "hyperparams", "make_setup", "network", "update"]


def make_setup(env: MultiAgentEnv, env_params, cfg: MAPPOConfig) -> Setup:
    """The static pieces of a run on ``env`` (a ``ValueError`` naming the key if it does not fit)."""
    if not isinstance(env, MultiAgentEnv):
        raise ValueError(f"env: {env.name} is a single-agent env; mappo / ippo need a multi-agent env "
                         "(jaxmarl/<id>, docs/multi_agent.md); use algo: ppo for it")
    space = env.action_space(env_params)
    if not isinstance(space, spaces.Discrete):
        raise ValueError(f"env: mappo needs a Discrete action space per agent, got {space!r}")
    plan = config.plan(cfg)
    if cfg.torso == "gru":
        sequences = cfg.num_envs * env.num_agents
        if sequences % cfg.num_minibatches:
            raise ValueError(f"num_minibatches: {cfg.num_minibatches} does not divide num_envs * agents = {sequences} "
                             "(torso gru shuffles whole agent sequences into minibatches)")
        net = network.RecurrentMultiAgentActorCritic(space.n, tuple(cfg.hidden), cfg.cell_size, cfg.activation)
    else:
        net = network.MultiAgentActorCritic(space.n, tuple(cfg.hidden), cfg.activation)
    groups = None
    if cfg.clip_per_network:  # which flat params are the critic's, from the params' shapes alone
        obs = jnp.zeros((env.num_agents, *env.observation_space(env_params).shape), jnp.float32)
        state = jnp.zeros(tuple(env.state_space(env_params).shape), jnp.float32)
        shapes = jax.eval_shape(lambda k: update.init_params(net, cfg, k, obs, state), jax.random.PRNGKey(0))
        groups = network.param_groups(shapes)
    sched = optim.schedule(cfg.optim, plan.num_updates, plan.grad_steps_per_update)
    return Setup(training_env(env), env_params, net, cfg, plan, sched, update.make_optimizer(cfg, plan, groups=groups))


def batch_axes(state: MAPPOState) -> MAPPOState:
    """The env batch is axis 0 of the env carry and the policy's memory; everything else is replicated."""
    axis0 = lambda tree: jax.tree_util.tree_map(lambda _: 0, tree)  # noqa: E731
    return replicated_axes(state).replace(env=axis0(state.env), memory=axis0(state.memory))


def act(setup: Setup, params, carry, obs, key, deterministic: bool):
    """:attr:`Policy.act`: every agent's action for one env's ``obs [A, F]`` (no mask: all
    actions count as available); a recurrent actor advances its carry ``[A, H]``."""
    x = network.actor_input(setup.cfg.agent_id, obs)
    if not update.recurrent(setup):
        logits = setup.network.apply(params, x, method="logits")
    else:
        start = jnp.zeros((1,) + x.shape[:-1], bool)
        carry, logits = setup.network.apply(params, carry, x[None], start, method="logits")
        logits = logits[0]
    dist = network.masked(logits, None)
    return carry, dist.mode() if deterministic else dist.sample(key)


def _init_carry(setup: Setup, params):
    """:attr:`Policy.init_carry`: the actor's zero carry ``[A, H]`` (``()`` for the MLP)."""
    if not update.recurrent(setup):
        return ()
    return setup.network.initial_carry((setup.env.num_agents,))[0]


def build(envs: EnvSetup, cfg: MAPPOConfig) -> Program:
    """MAPPO / IPPO on ``envs.env`` as a :class:`~jaxrl.algos.contract.Program`."""
    if envs.curriculum is not None:
        raise ValueError("env.curriculum: mappo does not run a curriculum; remove it")
    setup = make_setup(envs.env, envs.params, cfg)
    max_steps = episode_cap(envs.env, envs.eval_params, cfg.eval_max_steps)
    return Program(
        update=functools.partial(update.update, setup),
        evaluate=functools.partial(evaluate.evaluate, setup, envs.env, envs.eval_params, max_steps),
        plan=setup.plan,
        batch_axes=batch_axes,
        report=EvalReport({"episode_returns": "deterministic", "episode_returns_stochastic": "stochastic"},
                          metric="team return"),
        hyperparams=functools.partial(hyperparams, cfg),
        init_with=functools.partial(update.init, setup),
        batch=env_batch(cfg),
        policy=Policy(envs.env, lambda s: s.params, functools.partial(_init_carry, setup), functools.partial(act, setup)),
        load_params=lambda fresh, trained: fresh.replace(params=trained.params),
    )


ENTRY = AlgoEntry("mappo", MAPPOConfig, build,
                  "MAPPO: shared-parameter multi-agent PPO, centralised critic on the global state (multi-agent envs)")
IPPO_ENTRY = AlgoEntry("ippo", IPPOConfig, build,
                       "IPPO: shared-parameter multi-agent PPO, each agent's critic on its own observation (multi-agent envs)")
