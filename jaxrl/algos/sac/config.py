"""SAC's configuration: the ``sac:`` section, its validation, counts and traced values."""

from __future__ import annotations

import dataclasses

from jaxrl.algos.common.optim import OptimConfig, traced_values
from jaxrl.algos.contract import AlgoConfig, Plan, check, check_mlp


@dataclasses.dataclass(frozen=True)
class SACOptim(OptimConfig):
    """SAC's optimiser (``sac.optim``), one for the actor, the critics and the temperature."""

    lr: float = 1e-3
    max_grad_norm: float = 10.0


@dataclasses.dataclass(frozen=True)
class SACConfig(AlgoConfig):
    """SAC settings (the ``sac:`` section). Never mutated: counts come from :func:`plan`.

    Traced (live in the train state, sweepable): ``optim.lr``, ``optim.max_grad_norm``,
    ``gamma``, ``tau``. Everything else is static.
    """

    # --- acting and loop counts ---
    num_envs: int = 1  # parallel envs B
    steps_per_update: int = 1  # env steps of every env per update; batch = num_envs * steps_per_update
    total_env_steps: int = 10_000  # whole run, a multiple of the batch
    gradient_steps: int = 1  # optimiser steps (critic, actor and temperature each) per update
    batch_size: int = 256  # transitions per gradient step, a multiple of num_envs
    # --- replay ---
    buffer_size: int = 10_000  # transitions kept, a multiple of num_envs
    learning_starts: int = 256  # env steps (all envs) of uniform random actions before learning
    # --- optimisation (traced) ---
    optim: SACOptim = dataclasses.field(default_factory=SACOptim)  # the optimiser: every algorithm's keys (jaxrl.algos.common.optim.OptimConfig), SAC's defaults
    gamma: float = 0.99  # discount
    tau: float = 0.005  # Polyak coefficient of the target critics
    # --- entropy (static) ---
    init_alpha: float = 1.0  # initial temperature
    target_entropy_scale: float = 1.0  # target entropy = -scale * action dimensions
    # --- networks (static) ---
    hidden: tuple[int, ...] = (64, 64)  # of the actor and of each critic
    activation: str = "relu"  # hidden activation of actor and critics
    # --- evaluation (static) ---
    eval_episodes: int = 16  # deterministic episodes per seed
    eval_max_steps: int | None = None  # episode cap; None: the env's max_steps_in_episode

    def validate(self) -> None:
        for key in ("num_envs", "steps_per_update", "total_env_steps", "gradient_steps", "batch_size",
                    "buffer_size", "eval_episodes"):
            value = getattr(self, key)
            check(isinstance(value, int) and value > 0, key, f"expected a positive integer, got {value!r}")
        batch = self.num_envs * self.steps_per_update
        check(self.total_env_steps % batch == 0, "total_env_steps",
              f"{self.total_env_steps} is not a multiple of num_envs * steps_per_update = {batch}")
        check(self.batch_size % self.num_envs == 0, "batch_size",
              f"{self.batch_size} is not a multiple of num_envs = {self.num_envs} (each env's column is sampled equally)")
        check(self.buffer_size % self.num_envs == 0, "buffer_size",
              f"{self.buffer_size} is not a multiple of num_envs = {self.num_envs}")
        check(self.buffer_size // self.num_envs >= self.steps_per_update, "buffer_size",
              "fewer rows per env than steps_per_update")
        check(self.learning_starts >= 0, "learning_starts", f"expected >= 0, got {self.learning_starts}")
        self.optim.validate()
        check(0.0 < self.gamma <= 1.0, "gamma", f"expected 0 < gamma <= 1, got {self.gamma}")
        check(0.0 < self.tau <= 1.0, "tau", f"expected 0 < tau <= 1, got {self.tau}")
        check(self.init_alpha > 0.0, "init_alpha", f"expected > 0, got {self.init_alpha}")
        check_mlp(self.hidden, self.activation)
        check(self.eval_max_steps is None or (isinstance(self.eval_max_steps, int) and self.eval_max_steps > 0),
              "eval_max_steps", f"expected null or a positive integer, got {self.eval_max_steps!r}")


TRACED = ("lr", "max_grad_norm", "gamma", "tau")


def hyperparams(cfg: SACConfig, **overrides) -> dict:
    """``{name: float32 array}`` of the :data:`TRACED` values, ``overrides`` applied."""
    values = {"lr": cfg.optim.lr, "max_grad_norm": cfg.optim.max_grad_norm, "gamma": cfg.gamma, "tau": cfg.tau}
    return traced_values(values, overrides, "SAC")


def plan(cfg: SACConfig) -> Plan:
    """Static counts of a (valid) config."""
    batch = cfg.num_envs * cfg.steps_per_update
    return Plan(num_updates=cfg.total_env_steps // batch, env_steps_per_update=batch,
                grad_steps_per_update=cfg.gradient_steps)
