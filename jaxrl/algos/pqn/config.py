"""PQN's configuration: the ``pqn:`` section, its validation, counts and traced values."""

from __future__ import annotations

import dataclasses

from jaxrl.algos.common.network import QNetworkConfig, check_conv
from jaxrl.algos.common.optim import OptimConfig, traced_values
from jaxrl.algos.contract import AlgoConfig, Plan, check, check_mlp


@dataclasses.dataclass(frozen=True)
class PQNOptim(OptimConfig):
    """PQN's optimiser (``pqn.optim``): the rate decays linearly to 0, once per update."""

    lr: float = 3e-4
    max_grad_norm: float = 10.0
    lr_end_frac: float = 0.0


@dataclasses.dataclass(frozen=True)
class PQNConfig(AlgoConfig):
    """PQN settings (the ``pqn:`` section). Never mutated: counts come from :func:`plan`.

    Traced (live in the train state, sweepable): ``optim.lr``, ``optim.max_grad_norm``,
    ``gamma``, ``td_lambda``. Everything else is static.
    """

    # --- rollout and loop counts ---
    num_envs: int = 16  # parallel envs B
    num_steps: int = 128  # rollout length T per update; batch = num_envs * num_steps
    total_env_steps: int = 524_288  # whole run, a multiple of the batch
    update_epochs: int = 4  # passes over each batch
    num_minibatches: int = 16  # minibatches per epoch; must divide the batch
    # --- exploration: epsilon moves linearly from start to end over a fraction of the run ---
    epsilon_start: float = 1.0
    epsilon_end: float = 0.05  # exploration rate at the end of the schedule
    exploration_fraction: float = 0.5  # share of the run over which epsilon decays linearly
    # --- optimisation ---
    optim: PQNOptim = dataclasses.field(default_factory=PQNOptim)  # the optimiser: every algorithm's keys (jaxrl.algos.common.optim.OptimConfig), PQN's defaults
    gamma: float = 0.99  # discount (traced)
    td_lambda: float = 0.9  # lambda of the Q(lambda) returns (traced)
    # --- the Q-function (static) ---
    hidden: tuple[int, ...] = (128, 128)
    activation: str = "relu"  # hidden activation (relu, tanh, ...)
    layer_norm: bool = True  # what keeps TD stable without a target network
    network: QNetworkConfig = dataclasses.field(default_factory=QNetworkConfig)  # an optional conv torso before the hidden layers
    action_mask: bool = True  # greedy actions, exploration and targets over legal actions where the env declares them
    # --- evaluation (static) ---
    eval_episodes: int = 16  # greedy episodes per seed
    eval_max_steps: int | None = None  # episode cap; None: the env's max_steps_in_episode

    def validate(self) -> None:
        for key in ("num_envs", "num_steps", "total_env_steps", "update_epochs", "num_minibatches", "eval_episodes"):
            value = getattr(self, key)
            check(isinstance(value, int) and value > 0, key, f"expected a positive integer, got {value!r}")
        batch = self.num_envs * self.num_steps
        check(self.total_env_steps % batch == 0, "total_env_steps",
              f"{self.total_env_steps} is not a multiple of num_envs * num_steps = {batch}")
        check(batch % self.num_minibatches == 0, "num_minibatches",
              f"{self.num_minibatches} does not divide the batch num_envs * num_steps = {batch}")
        check(0.0 <= self.epsilon_end <= 1.0 and 0.0 <= self.epsilon_start <= 1.0, "epsilon_start",
              f"epsilons must lie in [0, 1], got {self.epsilon_start} and {self.epsilon_end}")
        check(0.0 <= self.exploration_fraction <= 1.0, "exploration_fraction",
              f"expected 0 <= fraction <= 1, got {self.exploration_fraction}")
        self.optim.validate()
        check(0.0 < self.gamma <= 1.0, "gamma", f"expected 0 < gamma <= 1, got {self.gamma}")
        check(0.0 <= self.td_lambda <= 1.0, "td_lambda", f"expected 0 <= td_lambda <= 1, got {self.td_lambda}")
        check_mlp(self.hidden, self.activation)
        check_conv(self.network)
        check(isinstance(self.action_mask, bool), "action_mask", f"expected true or false, got {self.action_mask!r}")
        check(self.eval_max_steps is None or (isinstance(self.eval_max_steps, int) and self.eval_max_steps > 0),
              "eval_max_steps", f"expected null or a positive integer, got {self.eval_max_steps!r}")


TRACED = ("lr", "max_grad_norm", "gamma", "td_lambda")


def hyperparams(cfg: PQNConfig, **overrides) -> dict:
    """``{name: float32 array}`` of the :data:`TRACED` values, ``overrides`` applied."""
    values = {"lr": cfg.optim.lr, "max_grad_norm": cfg.optim.max_grad_norm, "gamma": cfg.gamma, "td_lambda": cfg.td_lambda}
    return traced_values(values, overrides, "PQN")


def plan(cfg: PQNConfig) -> Plan:
    """Static counts of a (valid) config."""
    batch = cfg.num_envs * cfg.num_steps
    return Plan(num_updates=cfg.total_env_steps // batch, env_steps_per_update=batch,
                grad_steps_per_update=cfg.update_epochs * cfg.num_minibatches)
