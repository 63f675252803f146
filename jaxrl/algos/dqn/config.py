"""DQN's configuration: the ``dqn:`` section, its validation, counts and traced values."""

from __future__ import annotations

import dataclasses

from jaxrl.algos.common.network import QNetworkConfig, check_conv
from jaxrl.algos.common.optim import OptimConfig, traced_values
from jaxrl.algos.contract import AlgoConfig, Plan, check, check_mlp


@dataclasses.dataclass(frozen=True)
class DQNOptim(OptimConfig):
    """DQN's optimiser (``dqn.optim``): a constant rate unless ``lr_end_frac`` < 1 (then it moves once per update)."""

    lr: float = 1e-3
    max_grad_norm: float = 10.0


@dataclasses.dataclass(frozen=True)
class DQNConfig(AlgoConfig):
    """DQN settings (the ``dqn:`` section). Never mutated: counts come from :func:`plan`.

    Traced (live in the train state, sweepable): ``optim.lr``, ``optim.max_grad_norm``,
    ``gamma``, ``tau``. Everything else is static (shapes, loop counts, switches).
    """

    # --- acting and loop counts ---
    num_envs: int = 8  # parallel envs B
    steps_per_update: int = 4  # env steps of every env per update; batch = num_envs * steps_per_update
    total_env_steps: int = 80_000  # whole run, a multiple of the batch
    gradient_steps: int = 4  # optimiser steps per update
    batch_size: int = 128  # transitions per gradient step, a multiple of num_envs
    # --- replay ---
    buffer_size: int = 40_000  # transitions kept, a multiple of num_envs
    learning_starts: int = 2_000  # env steps (all envs) before the first gradient step
    n_step: int = 3  # n-step returns (1: one-step TD)
    # --- exploration: epsilon moves linearly from start to end over a fraction of the run ---
    epsilon_start: float = 1.0
    epsilon_end: float = 0.05  # exploration rate at the end of the schedule
    exploration_fraction: float = 0.25  # share of the run over which epsilon decays linearly
    # --- optimisation (traced) ---
    optim: DQNOptim = dataclasses.field(default_factory=DQNOptim)  # the optimiser: every algorithm's keys (jaxrl.algos.common.optim.OptimConfig), DQN's defaults
    gamma: float = 0.99  # discount
    loss: str = "mse"  # static: "mse" (half squared TD error) or "huber" (quadratic within 1, then linear)
    tau: float = 0.02  # target update: target <- tau * online + (1 - tau) * target (1: hard copy)
    target_update_every: int = 1  # gradient steps between target updates (static)
    # --- the Q-function (static) ---
    double: bool = True  # double DQN: the online net picks the bootstrap action
    dueling: bool = True  # dueling heads Q = V + A - mean(A)
    hidden: tuple[int, ...] = (64, 64)  # Q-network hidden widths
    activation: str = "relu"  # hidden activation (relu, tanh, ...)
    layer_norm: bool = False  # LayerNorm after each hidden layer
    network: QNetworkConfig = dataclasses.field(default_factory=QNetworkConfig)  # an optional conv torso before the hidden layers
    action_mask: bool = True  # greedy actions, exploration and targets over legal actions where the env declares them
    # --- evaluation (static) ---
    eval_episodes: int = 16  # greedy episodes per seed
    eval_max_steps: int | None = None  # episode cap; None: the env's max_steps_in_episode

    def validate(self) -> None:
        for key in ("num_envs", "steps_per_update", "total_env_steps", "gradient_steps", "batch_size",
                    "buffer_size", "n_step", "target_update_every", "eval_episodes"):
            value = getattr(self, key)
            check(isinstance(value, int) and value > 0, key, f"expected a positive integer, got {value!r}")
        batch = self.num_envs * self.steps_per_update
        check(self.total_env_steps % batch == 0, "total_env_steps",
              f"{self.total_env_steps} is not a multiple of num_envs * steps_per_update = {batch}")
        check(self.batch_size % self.num_envs == 0, "batch_size",
              f"{self.batch_size} is not a multiple of num_envs = {self.num_envs} (each env's column is sampled equally)")
        check(self.buffer_size % self.num_envs == 0, "buffer_size",
              f"{self.buffer_size} is not a multiple of num_envs = {self.num_envs}")
        rows = self.buffer_size // self.num_envs
        check(rows >= max(self.steps_per_update, self.n_step), "buffer_size",
              f"{rows} rows per env hold fewer than steps_per_update or n_step")
        check(self.learning_starts >= 0, "learning_starts", f"expected >= 0, got {self.learning_starts}")
        check(0.0 <= self.epsilon_end <= 1.0 and 0.0 <= self.epsilon_start <= 1.0, "epsilon_start",
              f"epsilons must lie in [0, 1], got {self.epsilon_start} and {self.epsilon_end}")
        check(0.0 <= self.exploration_fraction <= 1.0, "exploration_fraction",
              f"expected 0 <= fraction <= 1, got {self.exploration_fraction}")
        self.optim.validate()
        check(self.loss in LOSSES, "loss", f"expected one of {list(LOSSES)}, got {self.loss!r}")
        check(0.0 < self.gamma <= 1.0, "gamma", f"expected 0 < gamma <= 1, got {self.gamma}")
        check(0.0 < self.tau <= 1.0, "tau", f"expected 0 < tau <= 1, got {self.tau}")
        check_mlp(self.hidden, self.activation)
        check_conv(self.network)
        check(isinstance(self.action_mask, bool), "action_mask", f"expected true or false, got {self.action_mask!r}")
        check(self.eval_max_steps is None or (isinstance(self.eval_max_steps, int) and self.eval_max_steps > 0),
              "eval_max_steps", f"expected null or a positive integer, got {self.eval_max_steps!r}")


TRACED = ("lr", "max_grad_norm", "gamma", "tau")
LOSSES = ("mse", "huber")


def hyperparams(cfg: DQNConfig, **overrides) -> dict:
    """``{name: float32 array}`` of the :data:`TRACED` values, ``overrides`` applied."""
    values = {"lr": cfg.optim.lr, "max_grad_norm": cfg.optim.max_grad_norm, "gamma": cfg.gamma, "tau": cfg.tau}
    return traced_values(values, overrides, "DQN")


def plan(cfg: DQNConfig) -> Plan:
    """Static counts of a (valid) config."""
    batch = cfg.num_envs * cfg.steps_per_update
    return Plan(num_updates=cfg.total_env_steps // batch, env_steps_per_update=batch,
                grad_steps_per_update=cfg.gradient_steps)
