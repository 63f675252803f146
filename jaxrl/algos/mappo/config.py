"""MAPPO's and IPPO's configuration: the ``mappo:`` / ``ippo:`` sections, checks, counts.

The defaults are JaxMARL's IPPO hyperparameters for MPE (``baselines/IPPO/config/
ippo_ff_mpe.yaml``: 16 envs x 128 steps, 4 epochs x 4 minibatches, lr 2.5e-4 annealed per
update, clip 0.2 on the ratio and the value, entropy 0.01, tanh 64x64 actor and critic).
"""

from __future__ import annotations

import dataclasses
import math

import jax
from flax import struct

from jaxrl.algos.common.onpolicy import check_ppo_family
from jaxrl.algos.common.optim import OptimConfig, traced_values
from jaxrl.algos.contract import AlgoConfig, Plan, check

CRITICS = ("centralised", "decentralised")
TORSOS = ("mlp", "gru")


@dataclasses.dataclass(frozen=True)
class MAPPOOptim(OptimConfig):
    """MAPPO's and IPPO's optimiser (``mappo.optim``): JaxMARL's, the rate decayed to 0 once per update."""

    lr: float = 2.5e-4
    max_grad_norm: float = 0.5
    adam_eps: float = 1e-5
    lr_end_frac: float = 0.0


@dataclasses.dataclass(frozen=True)
class MAPPOConfig(AlgoConfig):
    """Multi-agent PPO with one policy shared by every agent (the ``mappo:`` section).

    ``critic: centralised`` (MAPPO) values the global state plus the agent's one-hot id;
    ``decentralised`` (IPPO) values the agent's own observation. ``torso: gru`` gives actor
    and critic each a GRU (JaxMARL's recurrent MAPPO); it learns on whole sequences, one
    per agent of each env, shuffled into minibatches. Static: the counts, ``optim`` (but its
    ``lr`` and ``max_grad_norm``), ``hidden``, ``activation``, ``torso``, ``cell_size``,
    ``critic``, ``agent_id``, ``clip_per_network``, ``normalize_advantages``, ``eval_*`` and
    whether ``vf_clip_eps`` is ``None``. Traced (in the train state, sweepable): ``optim.lr``, ``optim.max_grad_norm``,
    ``gamma``, ``gae_lambda``, ``clip_eps``, ``vf_clip_eps``, ``ent_coef``, ``vf_coef``.
    """

    # --- rollout and loop counts (static) ---
    num_envs: int = 16  # parallel envs B (each holds every agent)
    num_steps: int = 128  # rollout length T; a batch is B * T env steps, B * T * A agent samples
    total_env_steps: int = 9_998_336  # whole run: JaxMARL's 1e7 TOTAL_TIMESTEPS as its script rounds it (4,882 updates)
    update_epochs: int = 4  # passes over each batch
    num_minibatches: int = 4  # minibatches per epoch; must divide B * T (torso gru: B * agents, the sequences)
    # --- optimisation ---
    optim: MAPPOOptim = dataclasses.field(default_factory=MAPPOOptim)  # the optimiser: every algorithm's keys (jaxrl.algos.common.optim.OptimConfig), JaxMARL's defaults
    # --- PPO objective (traced) ---
    gamma: float = 0.99  # discount
    gae_lambda: float = 0.95  # GAE lambda
    clip_eps: float = 0.2  # surrogate clip range
    vf_clip_eps: float | None = 0.2  # value clip range (JaxMARL clips with CLIP_EPS); None: off
    ent_coef: float = 0.01  # entropy bonus coefficient
    vf_coef: float = 0.5  # value loss coefficient
    normalize_advantages: bool = True  # static: per minibatch, zero mean and unit std
    # --- network (static) ---
    critic: str = "centralised"  # "centralised" (global state + agent id) | "decentralised" (own obs)
    agent_id: bool = False  # append the agent's one-hot id to the actor's observation
    hidden: tuple[int, ...] = (64, 64)  # hidden widths of the actor's and the critic's MLP (gru: hidden[0] embeds, hidden[1:] follow the cell)
    activation: str = "tanh"  # one of networks.ACTIVATIONS
    torso: str = "mlp"  # "mlp" | "gru" (actor and critic each a GRU, reset at episode starts)
    cell_size: int = 128  # units of each GRU (unused by "mlp")
    clip_per_network: bool = False  # clip the actor's and the critic's gradients each by its own norm (JaxMARL's MAPPO: one optimiser each); false: one norm over both
    # --- evaluation (static) ---
    eval_episodes: int = 16  # episodes per policy (greedy and sampling)
    eval_max_steps: int | None = None  # episode cap; None: the env's episode bound

    def validate(self) -> None:
        check_ppo_family(self)
        check(self.critic in CRITICS, "critic", f"expected one of {list(CRITICS)}, got {self.critic!r}")
        check(self.torso in TORSOS, "torso", f"expected one of {list(TORSOS)}, got {self.torso!r}")
        if self.torso == "gru":
            check(len(self.hidden) >= 1, "hidden", "torso gru needs hidden[0], the width of the embedding before the cell")
            check(isinstance(self.cell_size, int) and self.cell_size >= 1, "cell_size",
                  f"expected an integer >= 1, got {self.cell_size!r}")


@dataclasses.dataclass(frozen=True)
class IPPOConfig(MAPPOConfig):
    """IPPO (the ``ippo:`` section): :class:`MAPPOConfig` with a decentralised critic by default."""

    critic: str = "decentralised"  # "decentralised" (own obs, IPPO) | "centralised" (MAPPO)


@struct.dataclass
class MAPPOHyperparams:
    """The loss's traced hyperparameters (float32 ``[]`` each, ``[S]`` under a vmap)."""

    clip_eps: jax.Array
    vf_clip_eps: jax.Array  # unused when MAPPOConfig.vf_clip_eps is None
    ent_coef: jax.Array
    vf_coef: jax.Array
    gamma: jax.Array
    gae_lambda: jax.Array


TRACED = ("lr", "max_grad_norm", "clip_eps", "vf_clip_eps", "ent_coef", "vf_coef", "gamma", "gae_lambda")


def hyperparams(cfg: MAPPOConfig, **overrides) -> dict:
    """``{name: float32 array}`` of every traced hyperparameter, ``overrides`` applied."""
    values = {"lr": cfg.optim.lr, "max_grad_norm": cfg.optim.max_grad_norm, **{n: getattr(cfg, n) for n in TRACED[2:]}}
    if values["vf_clip_eps"] is None:
        values["vf_clip_eps"] = math.inf
    return traced_values(values, overrides, "MAPPO")


def plan(cfg: MAPPOConfig) -> Plan:
    """Static counts: updates, env steps (every agent acts in one env step), optimiser steps."""
    batch = cfg.num_envs * cfg.num_steps
    return Plan(cfg.total_env_steps // batch, batch, cfg.update_epochs * cfg.num_minibatches)
