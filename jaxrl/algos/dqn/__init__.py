"""Deep Q-learning for discrete actions: double DQN (dueling optional), a target network
updated hard or by Polyak averaging, an epsilon-greedy schedule, n-step returns and the
on-device replay buffer of :mod:`jaxrl.algos.common.replay`.

:mod:`~jaxrl.algos.dqn.config` is the ``dqn:`` section, :mod:`~jaxrl.algos.dqn.losses` the
targets and loss, :mod:`~jaxrl.algos.dqn.update` the state and one update. This module
assembles the :class:`~jaxrl.algos.contract.Program` that :data:`ENTRY` registers
(with the Q-learning pieces of :mod:`jaxrl.algos.common.qlearning`).
"""

from __future__ import annotations

from jaxrl.algos.common import qlearning, replay
from jaxrl.algos.common.assemble import env_and_buffer_axes
from jaxrl.algos.common.envs import batched_env
from jaxrl.algos.contract import AlgoEntry, EnvSetup, Program
from jaxrl.algos.dqn import config, losses, update
from jaxrl.algos.dqn.config import DQNConfig, hyperparams
from jaxrl.algos.dqn.update import DQNState, Setup

__all__ = ["ENTRY", "DQNConfig", "DQNState", "Setup", "build", "config", "hyperparams", "losses", "update"]


def build(envs: EnvSetup, cfg: DQNConfig) -> Program:
    """DQN on ``envs.env`` as a :class:`~jaxrl.algos.contract.Program`."""
    space = qlearning.discrete_actions(envs, "dqn")
    replay.check_memory(cfg.buffer_size, update.example_transition(envs.env, envs.params), "buffer_size")
    network = qlearning.q_network(envs, cfg, space.n, cfg.dueling)
    train_env = batched_env(envs.env, cfg.num_envs, envs.vector)
    setup = Setup(train_env, envs.params, network, cfg, update.make_optimizer(cfg))
    return qlearning.program(envs, cfg, network, setup, update.update, update.init, config.plan(cfg), hyperparams,
                             env_and_buffer_axes)


ENTRY = AlgoEntry(
    name="dqn", config_cls=DQNConfig, build=build,
    description="DQN (double, dueling optional, n-step, on-device replay), discrete actions",
)
