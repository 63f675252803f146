"""Parallel Q-learning (PQN, Gallici et al. 2024) for discrete actions: many envs, a
LayerNorm Q-network, Q(lambda) returns, epsilon-greedy acting, no replay buffer and no
target network.

:mod:`~jaxrl.algos.pqn.config` is the ``pqn:`` section, :mod:`~jaxrl.algos.pqn.losses` the
returns and loss, :mod:`~jaxrl.algos.pqn.update` the state and one update. This module
assembles the :class:`~jaxrl.algos.contract.Program` that :data:`ENTRY` registers
(with the Q-learning pieces of :mod:`jaxrl.algos.common.qlearning`).
"""

from __future__ import annotations

from jaxrl.algos.common import qlearning
from jaxrl.algos.common.assemble import env_axes
from jaxrl.algos.common.envs import batched_env
from jaxrl.algos.contract import AlgoEntry, EnvSetup, Program
from jaxrl.algos.pqn import config, losses, update
from jaxrl.algos.pqn.config import PQNConfig, hyperparams
from jaxrl.algos.pqn.update import PQNState, Setup

__all__ = ["ENTRY", "PQNConfig", "PQNState", "Setup", "build", "config", "hyperparams", "losses", "update"]


def build(envs: EnvSetup, cfg: PQNConfig) -> Program:
    """PQN on ``envs.env`` as a :class:`~jaxrl.algos.contract.Program`."""
    space = qlearning.discrete_actions(envs, "pqn")
    network = qlearning.q_network(envs, cfg, space.n, False)
    train_env = batched_env(envs.env, cfg.num_envs, envs.vector)
    setup = Setup(train_env, envs.params, network, cfg, update.schedule(cfg), update.make_optimizer(cfg))
    return qlearning.program(envs, cfg, network, setup, update.update, update.init, config.plan(cfg), hyperparams,
                             env_axes)


ENTRY = AlgoEntry(
    name="pqn", config_cls=PQNConfig, build=build,
    description="PQN (parallel Q-learning: LayerNorm Q-network, Q(lambda), no replay), discrete actions",
)
