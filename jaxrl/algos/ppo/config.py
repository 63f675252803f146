"""PPO's configuration: the ``ppo:`` section, its validation, counts and traced values."""

from __future__ import annotations

import dataclasses
import math

import jax
from flax import struct

from jaxrl.algos.common.network import check_conv
from jaxrl.algos.common.onpolicy import check_ppo_family
from jaxrl.algos.common.optim import OptimConfig, traced_values
from jaxrl.algos.contract import AlgoConfig, Plan, check
from jaxrl.models.networks import DISTRIBUTIONS, LOG_STD_MODES


#: Torsos of ``ppo.network.torso``: a feed-forward MLP or a recurrent cell.
TORSOS = ("mlp", "gru", "lstm")


@dataclasses.dataclass(frozen=True)
class NetworkConfig:
    """The ``ppo.network`` section (static): which torso the actor-critic has.

    ``mlp``: :class:`~jaxrl.models.networks.ActorCritic` over ``hidden``. ``gru`` / ``lstm``:
    :class:`~jaxrl.models.recurrent.RecurrentActorCritic`, an embedding of ``hidden[0]``
    units, the cell, then per head an MLP of ``hidden[1:]``; its carry lives in the train
    state and is trained over whole env sequences (minibatches of envs, not of steps).
    ``prev_action`` appends the previous action (one-hot if discrete) to the observation
    (RL^2 / R2D2 style): the policy can integrate its own pushes to infer hidden velocities.
    ``conv`` puts a conv torso (:mod:`jaxrl.models.conv`) over image observations in front
    of either (one per head unless ``shared_torso``; one before a recurrent cell);
    ``channels`` sets its widths. ``image_leaf`` points the conv torso at one named
    ``[H, W, C]`` leaf of a flat structured observation (an env with ``unflatten_obs``, e.g.
    Jumanji's Snake ``grid``); the other leaves join its features, flat, before the MLP.
    """

    torso: str = "mlp"  # "mlp" | "gru" | "lstm"
    cell_size: int = 128  # units of the recurrent cell (unused by "mlp")
    prev_action: bool = False  # feed the previous action into the torso input (gru / lstm only)
    conv: str | None = None  # null: MLP on the flattened obs; nature_cnn | minatar_cnn | impala: conv torso on (H, W, C) images first
    channels: tuple[int, ...] | None = None  # conv widths per layer (per stage for impala); null: the torso's published ones
    image_leaf: str | None = None  # null: the conv reads the whole observation; a leaf name (e.g. grid): the conv reads that [H, W, C] leaf of a flat structured observation, the other leaves go to the MLP

    @property
    def recurrent(self) -> bool:
        return self.torso != "mlp"


@dataclasses.dataclass(frozen=True)
class PPOOptim(OptimConfig):
    """PPO's optimiser (``ppo.optim``): the rate decays linearly to 0 over every optimiser step."""

    lr: float = 2.5e-4
    max_grad_norm: float = 0.5
    adam_eps: float = 1e-5
    lr_end_frac: float = 0.0  # linear decay to lr * lr_end_frac over the run, moved at every optimiser step (0: CleanRL's anneal_lr)


@dataclasses.dataclass(frozen=True)
class PPOConfig(AlgoConfig):
    """PPO settings (the ``ppo:`` section). Never mutated: counts come from :func:`plan`.

    *Static* fields fix shapes, loop counts and program structure (changing one
    recompiles): ``num_envs``, ``num_steps``, ``total_env_steps``, ``update_epochs``,
    ``num_minibatches``, ``normalize_*``, ``hidden``, ``activation``,
    ``shared_torso``, ``network``, ``dist``, ``action_mask``, ``log_std``, ``init_log_std``,
    ``optim`` (but its ``lr`` and ``max_grad_norm``), ``eval_episodes``, ``eval_max_steps``
    and whether ``vf_clip_eps`` is ``None``.

    *Traced* fields live in the train state (``optim.lr`` and ``optim.max_grad_norm`` in the
    optimiser's, the rest in :class:`PPOHyperparams`), so a ``vmap`` over seeds x values of
    them is one compiled program (:func:`hyperparams`, which names them ``lr``,
    ``max_grad_norm``, ``clip_eps``, ``vf_clip_eps`` (its value), ``ent_coef``, ``vf_coef``,
    ``gamma``, ``gae_lambda``).
    """

    # --- rollout and loop counts (static) ---
    num_envs: int = 8  # parallel envs B
    num_steps: int = 64  # rollout length T per update; batch = num_envs * num_steps
    total_env_steps: int = 61_440  # whole run; a multiple of the batch
    update_epochs: int = 4  # passes over each batch
    num_minibatches: int = 4  # minibatches per epoch; must divide the batch
    # --- optimisation ---
    optim: PPOOptim = dataclasses.field(default_factory=PPOOptim)  # the optimiser: every algorithm's keys (jaxrl.algos.common.optim.OptimConfig), PPO's defaults
    # --- PPO objective (traced) ---
    gamma: float = 0.99  # discount
    gae_lambda: float = 0.95  # GAE lambda
    clip_eps: float = 0.2  # surrogate clip range: ratio in [1 - eps, 1 + eps]
    vf_clip_eps: float | None = None  # value clip range; None: no value clipping (static)
    ent_coef: float = 0.01  # entropy bonus coefficient
    vf_coef: float = 0.5  # value loss coefficient
    # --- normalisation (static switches) ---
    normalize_advantages: bool = True  # per minibatch, zero mean and unit std
    normalize_obs: bool = False  # running mean/std of observations (agent state)
    normalize_reward: bool = False  # divide rewards by the std of discounted returns
    # --- network (static) ---
    hidden: tuple[int, ...] = (64, 64)  # hidden widths of each torso
    activation: str = "tanh"  # one of networks.ACTIVATIONS
    shared_torso: bool = False  # one torso for actor and critic
    dist: str = "auto"  # "auto" | "categorical" | "gaussian" | "tanh_gaussian"
    action_mask: bool = True  # mask illegal actions where the env declares them (docs/masks.md)
    log_std: str = "state_independent"  # "state_independent" | "learned" (Gaussians)
    init_log_std: float = 0.0  # initial log std of the Gaussians
    network: NetworkConfig = dataclasses.field(default_factory=NetworkConfig)  # the torso (static)
    # --- evaluation (static) ---
    eval_episodes: int = 16  # episodes per policy (deterministic and stochastic)
    eval_max_steps: int | None = None  # episode cap; None: env params' max_steps_in_episode

    def validate(self) -> None:
        validate(self)


@struct.dataclass
class PPOHyperparams:
    """The traced hyperparameters (float32 ``[]`` each, or ``[S]`` under a vmap)."""

    clip_eps: jax.Array
    vf_clip_eps: jax.Array  # unused when PPOConfig.vf_clip_eps is None
    ent_coef: jax.Array
    vf_coef: jax.Array
    gamma: jax.Array
    gae_lambda: jax.Array


#: Every traced hyperparameter: the optimiser's (kept in its state) and :class:`PPOHyperparams`.
TRACED = ("lr", "max_grad_norm", "clip_eps", "vf_clip_eps", "ent_coef", "vf_coef", "gamma", "gae_lambda")


def hyperparams(cfg: PPOConfig, **overrides) -> dict:
    """``{name: float32 array}`` of every traced hyperparameter, ``overrides`` applied.

    ``hyperparams(cfg, lr=jnp.array([1e-3, 3e-4]))`` builds a batch to ``vmap`` over (the
    other values are broadcast to the same ``[2]`` shape).
    """
    values = {"lr": cfg.optim.lr, "max_grad_norm": cfg.optim.max_grad_norm, **{n: getattr(cfg, n) for n in TRACED[2:]}}
    if values["vf_clip_eps"] is None:
        values["vf_clip_eps"] = math.inf
    return traced_values(values, overrides, "PPO")


def loss_hyperparams(cfg: PPOConfig, **overrides) -> PPOHyperparams:
    """The loss's traced values (:class:`PPOHyperparams`) of ``cfg``, ``overrides`` applied."""
    values = hyperparams(cfg, **overrides)
    return PPOHyperparams(**{f.name: values[f.name] for f in dataclasses.fields(PPOHyperparams)})


def validate(cfg: PPOConfig) -> None:
    """Raise ``ValueError("<key>: <what is wrong>")`` for the first impossible setting."""
    check_ppo_family(cfg)
    check(isinstance(cfg.action_mask, bool), "action_mask", f"expected true or false, got {cfg.action_mask!r}")
    check(cfg.dist in ("auto",) + DISTRIBUTIONS, "dist", f"expected one of {['auto', *DISTRIBUTIONS]}, got {cfg.dist!r}")
    check(cfg.log_std in LOG_STD_MODES, "log_std", f"expected one of {list(LOG_STD_MODES)}, got {cfg.log_std!r}")
    check(cfg.network.torso in TORSOS, "network.torso", f"expected one of {list(TORSOS)}, got {cfg.network.torso!r}")
    check(
        isinstance(cfg.network.cell_size, int) and cfg.network.cell_size > 0,
        "network.cell_size",
        f"expected a positive integer, got {cfg.network.cell_size!r}",
    )
    check(
        isinstance(cfg.network.prev_action, bool),
        "network.prev_action",
        f"expected true or false, got {cfg.network.prev_action!r}",
    )
    check(
        cfg.network.recurrent or not cfg.network.prev_action,
        "network.prev_action",
        "the previous action is fed to a recurrent torso only (torso: gru | lstm), got torso: mlp",
    )
    check_conv(cfg.network)
    leaf = cfg.network.image_leaf
    check(leaf is None or (isinstance(leaf, str) and leaf != ""), "network.image_leaf", f"expected null or a leaf name, got {leaf!r}")
    check(leaf is None or cfg.network.conv is not None, "network.image_leaf",
          "set only with a conv torso (network.conv: nature_cnn | minatar_cnn | impala)")
    if cfg.network.recurrent:
        check(
            cfg.num_envs % cfg.num_minibatches == 0,
            "num_minibatches",
            f"{cfg.num_minibatches} does not divide num_envs = {cfg.num_envs} (a recurrent torso "
            "learns on minibatches of whole env sequences)",
        )
        check(
            not cfg.shared_torso,
            "shared_torso",
            f"a {cfg.network.torso} torso is always shared by actor and critic; shared_torso is for torso: mlp",
        )


def plan(cfg: PPOConfig) -> Plan:
    """Static counts of a (valid) config: updates, env steps and optimiser steps."""
    batch = cfg.num_envs * cfg.num_steps
    return Plan(
        num_updates=cfg.total_env_steps // batch,
        env_steps_per_update=batch,
        grad_steps_per_update=cfg.update_epochs * cfg.num_minibatches,
    )


def minibatch_size(cfg: PPOConfig) -> int:
    """Transitions per minibatch."""
    return cfg.num_envs * cfg.num_steps // cfg.num_minibatches
