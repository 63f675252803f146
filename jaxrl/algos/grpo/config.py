"""GRPO's configuration: the ``grpo:`` section in four sub-sections, and its traced values.

A run config reads::

    grpo:
      num_prompts: 32          # batch shape and loop counts
      group_size: 8
      num_updates: 100
      model: {d_model: 64, n_layers: 2}      # the policy network
      loss: {type: dapo, eps_high: 0.28}     # advantages and the surrogate
      sampling: {temperature: 1.0}           # rollouts and batch shaping
      optim: {lr: 1.0e-3}                    # the optimiser

The curriculum and the evaluation params belong to the env (``env.curriculum``,
``env.eval_params``). ``eval_every: N`` runs the greedy held-out evaluation of ``jaxrl eval``
on ``eval_every_episodes`` prompts inside the compiled chunk after every N-th update
(:func:`~jaxrl.algos.grpo.evaluate.update_and_evaluate`): ``train.stop_at`` can then watch
``heldout_exact_match``; it reads each chunk's last update, so make ``train.updates_per_chunk``
a multiple of N (checked when the config is read; other updates' records leave the
figures out: no evaluation, never a stop).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Literal, Union

import jax
from flax import struct

from jaxrl.algos.common.lm.config import LoRASection, ModelSection  # noqa: F401  (LoRASection: grpo.config.LoRASection)
from jaxrl.algos.common.optim import OptimConfig as _OptimConfig, traced_values
from jaxrl.algos.contract import AlgoConfig, check
from jaxrl.algos.grpo.variants import LOSS_TYPES  # the variant table's keys


@dataclasses.dataclass(frozen=True)
class ModelConfig(ModelSection):
    """The policy network (``grpo.model``): a transformer for token tasks, else an MLP; or a
    Hugging Face checkpoint directory (``policy: hf``: the keys of
    :class:`~jaxrl.algos.common.lm.config.ModelSection`)."""

    policy: Literal["auto", "transformer", "mlp", "hf"] = "auto"  # auto: transformer for token tasks; hf: a loaded checkpoint
    d_model: int = 64  # transformer width
    n_layers: int = 2  # transformer blocks
    n_heads: int = 4  # attention heads
    positions: Literal["learned", "rope"] = "learned"  # transformer position encoding
    tie_embeddings: bool = False  # output head = the token embedding (GPT-2 weight tying)
    smear_keys: bool = False  # keys mixed with the previous position's (one-layer induction heads)
    hidden: tuple[int, ...] = (64, 64)  # MLP policy hidden widths
    # policy hf: the completion lengths the loss pass may run at; each micro-batch runs at the shortest
    # that holds its longest scored completion (the rest is padding, masked out: the same loss and
    # gradients). auto: a quarter and a half of the completion length when it is at least 64 tokens,
    # else none; [] : always the whole length
    length_buckets: Union[Literal["auto"], tuple[int, ...]] = "auto"

    def validate(self) -> None:
        """:meth:`ModelSection.validate`, the small networks' sizes and ``path`` with ``policy: hf`` only."""
        for name in ("d_model", "n_layers", "n_heads"):
            check(getattr(self, name) >= 1, f"model.{name}", f"must be >= 1, got {getattr(self, name)}")
        check(len(self.hidden) > 0 and all(h >= 1 for h in self.hidden), "model.hidden",
              f"expected positive widths, got {self.hidden!r}")
        check(self.d_model % self.n_heads == 0, "model.d_model", f"{self.d_model} is not divisible by model.n_heads={self.n_heads}")
        check(self.policy != "hf" or bool(self.path), "model.path", "policy hf needs a local checkpoint directory")
        check(self.policy == "hf" or not self.path, "model.path", f"only read by policy hf, got policy {self.policy!r}")
        check(self.length_buckets == "auto" or (isinstance(self.length_buckets, tuple) and all(
            isinstance(n, int) and not isinstance(n, bool) and n >= 1 for n in self.length_buckets)),
            "model.length_buckets", f"expected auto or a list of positive token counts, got {self.length_buckets!r}")
        super().validate()


@dataclasses.dataclass(frozen=True)
class LossConfig:
    """Advantages and the surrogate (``grpo.loss``); ``docs/grpo_losses.md`` compares them."""

    type: Literal["grpo", "dr_grpo", "dapo", "rloo", "cispo", "gspo"] = "grpo"  # the loss (docs/grpo_losses.md)
    eps_low: float = 0.2  # clip range below 1 (traced)
    eps_high: float = 0.2  # clip range above 1; DAPO's clip-higher uses 0.28 (traced)
    beta: float = 0.0  # KL-to-reference coefficient (traced); 0 skips the reference (static)
    # advantage scale (TRL's scale_rewards): the group's std, the batch's, or none; "auto" is the
    # variant's own: none for dr_grpo and rloo, group for the others
    scale_rewards: Literal["auto", "group", "batch", "none"] = "auto"
    cispo_clip_low: bool = False  # cispo: also clip its weight below at 1 - eps_low (TRL and the paper: upper cap only)
    token_credit: bool = False  # per-token advantages: group-centred reward-to-go (not with gspo)
    credit_discount: float = 1.0  # gamma of that reward-to-go (static)


@dataclasses.dataclass(frozen=True)
class SamplingConfig:
    """Rollouts and batch shaping (``grpo.sampling``)."""

    temperature: float = 1.0  # sampling temperature of rollouts and of the loss (traced)
    max_steps: int = 0  # rollout length T; 0 = a token task's max completion length or the env's limit
    dynamic_sampling: bool = False  # DAPO: mask groups whose rewards are all equal
    oversample: int = 1  # generate oversample * P groups and keep P (non-zero spread first)
    overlong_buffer: int = 0  # DAPO soft overlong punishment window L_cache (0 = off)
    overlong_penalty: float = 1.0  # scale of that punishment
    # single-turn token tasks: decode the P * G completions on this many rows, a row that ends taking the next
    # queued (prompt, sample) pair (continuous batching, one compile); 0 = off: every completion its own row
    decode_rows: int = 0


@dataclasses.dataclass(frozen=True)
class OffPolicyConfig:
    """Asynchronous GRPO (``grpo.off_policy``; ``docs/async_grpo.md``): update ``t`` trains on
    rollouts sampled with the parameters of update ``t - staleness`` (the initial ones for the
    first ``staleness`` updates), importance-corrected toward the parameters at the start of
    update ``t``. ``staleness: 0`` is on-policy GRPO, bit for bit (the other keys do nothing).
    ``overlap: true`` runs the generation of the next batch beside the update on the last one
    (:func:`~jaxrl.algos.grpo.update.overlapped_update`)."""

    staleness: int = 0  # k: updates between the parameters that sample a batch and the update that trains on it (static)
    # the importance-sampling correction pi_old / pi_behaviour of each sample: tis truncates it at
    # cap, mis zeroes it above cap (TRL's *_truncate / *_mask), none leaves it out (weight 1)
    correction: Literal["tis", "mis", "none"] = "tis"
    level: Literal["token", "sequence"] = "token"  # one weight per token, or per sequence (the product of its tokens')
    cap: float = 3.0  # C of the correction (TRL's vllm_importance_sampling_cap; static)
    # generate update t + 1's batch while update t learns, on the other device of a 2-device data mesh
    # (devices: 2), the batch in flight kept in the state; needs staleness >= 1; same figures as without
    overlap: bool = False


@dataclasses.dataclass(frozen=True)
class GRPOOptim(_OptimConfig):
    """GRPO's optimiser (``grpo.optim``): the rate moves once per update."""

    adam_b2: float = 0.99


#: 0.4.0's name of :class:`GRPOOptim` (the same defaults).
OptimConfig = GRPOOptim


@dataclasses.dataclass(frozen=True)
class WarnConfig:
    """When the trainer reports a stalled run, once, with what to try (``grpo.warn``)."""

    zero_std_frac: float = 0.5  # warn when frac_reward_zero_std averages above this ...
    min_entropy: float = 0.02  # ... or the sampled tokens' entropy (nats) averages below this ...
    patience: int = 30  # ... over the last this many updates (0 = never warn)
    solved_exact_match: float = 0.95  # updates whose sampled exact match is at least this do not count


@dataclasses.dataclass(frozen=True)
class GRPOConfig(AlgoConfig):
    """GRPO-family settings (the ``grpo:`` section of a run config)."""

    num_prompts: int = 32  # P: groups (prompts / start states) per update
    group_size: int = 8  # G: generations per group (same reset key, different sampling keys)
    num_updates: int = 100  # updates in the run
    num_epochs: int = 1  # optimisation passes over each batch (TRL's num_iterations)
    num_minibatches: int = 1  # gradient steps per pass; must divide P * G
    # gradient accumulation: slices of a minibatch run one at a time; must divide it. auto: 1 unless a loaded
    # model's update does not fit half the device (memory estimate), then the fewest slices that fit, tried
    # after remat and head chunking (printed when the run starts; a resume keeps the run's choice)
    micro_batches: Union[Literal["auto"], int] = "auto"
    eval_episodes: int = 512  # held-out prompts (token tasks) or episodes for evaluate
    eval_every: int = 0  # every N updates, evaluate's greedy held-out eval inside training: heldout_reward, heldout_<info key> (absent from other updates' records; 0 = off); with train.stop_at on one, updates_per_chunk must be a multiple of N
    eval_every_episodes: int = 64  # held-out prompts (or episodes) of that periodic evaluation
    eval_held_out: str = "all"  # text tasks: "all" scores every held-out row once (the first eval_episodes / eval_every_episodes of them when there are more); "sample" draws that many rows with replacement (tasks that generate prompts always draw)
    action_mask: bool = True  # control envs: sample only the legal actions where the env declares them (docs/masks.md)
    model: ModelConfig = dataclasses.field(default_factory=ModelConfig)
    loss: LossConfig = dataclasses.field(default_factory=LossConfig)
    sampling: SamplingConfig = dataclasses.field(default_factory=SamplingConfig)
    optim: GRPOOptim = dataclasses.field(default_factory=GRPOOptim)
    off_policy: OffPolicyConfig = dataclasses.field(default_factory=OffPolicyConfig)  # asynchronous GRPO: stale rollouts, corrected
    warn: WarnConfig = dataclasses.field(default_factory=WarnConfig)

    def validate(self) -> None:
        validate(self)


def _positive(cfg, names: tuple[str, ...], prefix: str = "") -> None:
    for name in names:
        value = getattr(cfg, name)
        check(value >= 1, prefix + name, f"must be >= 1, got {value}")


def validate(cfg: GRPOConfig) -> None:
    """Reject impossible configs with ``ValueError("<key>: <message>")``."""
    _positive(cfg, ("num_prompts", "num_updates", "num_epochs", "num_minibatches", "eval_episodes", "eval_every_episodes"))
    k = cfg.micro_batches
    check(k == "auto" or (isinstance(k, int) and not isinstance(k, bool) and k >= 1), "micro_batches",
          f"expected auto or an integer >= 1, got {k!r}")
    check(cfg.eval_held_out in ("all", "sample"), "eval_held_out", f"expected all or sample, got {cfg.eval_held_out!r}")
    check(cfg.eval_every >= 0, "eval_every", f"must be >= 0 (0 = no evaluation during training), got {cfg.eval_every}")
    check(isinstance(cfg.action_mask, bool), "action_mask", f"expected true or false, got {cfg.action_mask!r}")
    check(cfg.group_size >= 2, "group_size", f"group-relative advantages need >= 2 generations, got {cfg.group_size}")
    n = cfg.num_prompts * cfg.group_size
    check(n % cfg.num_minibatches == 0, "num_minibatches", f"{cfg.num_minibatches} does not divide num_prompts * group_size = {n}")
    mb = n // cfg.num_minibatches
    check(k == "auto" or mb % k == 0, "micro_batches", f"{k} does not divide the minibatch of {mb} sequences")
    m, loss, s, o = cfg.model, cfg.loss, cfg.sampling, cfg.optim
    check(loss.type in LOSS_TYPES, "loss.type", f"expected one of {LOSS_TYPES}, got {loss.type!r}")
    scales = ("auto", "group", "batch", "none")
    check(loss.scale_rewards in scales, "loss.scale_rewards", f"expected one of {scales}, got {loss.scale_rewards!r}")
    m.validate()
    check(0 <= loss.eps_low < 1, "loss.eps_low", f"must be in [0, 1), got {loss.eps_low}")
    check(loss.eps_high >= 0, "loss.eps_high", f"must be >= 0, got {loss.eps_high}")
    check(loss.beta >= 0, "loss.beta", f"must be >= 0, got {loss.beta}")
    check(not (loss.token_credit and loss.type == "gspo"), "loss.token_credit", "gspo's ratio and advantage are per sequence; use another loss.type")
    check(0.0 <= loss.credit_discount <= 1.0, "loss.credit_discount", f"must be in [0, 1], got {loss.credit_discount}")
    check(0 < s.temperature < math.inf, "sampling.temperature", f"must be a finite number > 0, got {s.temperature}")
    check(s.max_steps >= 0, "sampling.max_steps", f"must be >= 0, got {s.max_steps}")
    check(s.oversample >= 1, "sampling.oversample", f"must be >= 1, got {s.oversample}")
    check(s.oversample == 1 or s.dynamic_sampling, "sampling.oversample", "> 1 needs sampling.dynamic_sampling: true")
    check(s.overlong_buffer >= 0, "sampling.overlong_buffer", f"must be >= 0, got {s.overlong_buffer}")
    rows = s.decode_rows
    check(isinstance(rows, int) and not isinstance(rows, bool) and 0 <= rows < s.oversample * n, "sampling.decode_rows",
          f"expected an integer in [0, {s.oversample * n}) (0 = off; fewer rows than the rollout's "
          f"oversample * num_prompts * group_size completions), got {rows!r}")
    check(0 <= s.overlong_penalty < math.inf, "sampling.overlong_penalty", f"must be a finite number >= 0 (the scale of a punishment), got {s.overlong_penalty}")
    _validate_off_policy(cfg.off_policy)
    w = cfg.warn
    check(0.0 <= w.zero_std_frac <= 1.0, "warn.zero_std_frac", f"must be in [0, 1], got {w.zero_std_frac}")
    check(w.min_entropy >= 0, "warn.min_entropy", f"must be >= 0, got {w.min_entropy}")
    check(w.patience >= 0, "warn.patience", f"must be >= 0, got {w.patience}")
    o.validate()


def _validate_off_policy(op: OffPolicyConfig) -> None:
    k = op.staleness
    check(isinstance(k, int) and not isinstance(k, bool) and k >= 0, "off_policy.staleness",
          f"must be an integer >= 0 (0: on-policy), got {k!r}")
    check(op.correction in ("tis", "mis", "none"), "off_policy.correction", f"expected tis, mis or none, got {op.correction!r}")
    check(op.level in ("token", "sequence"), "off_policy.level", f"expected token or sequence, got {op.level!r}")
    check(1.0 <= op.cap < math.inf, "off_policy.cap", f"must be a finite number >= 1 (weights above it are truncated or masked), got {op.cap}")
    check(isinstance(op.overlap, bool), "off_policy.overlap", f"expected true or false, got {op.overlap!r}")
    check(not op.overlap or k >= 1, "off_policy.overlap",
          "needs staleness >= 1: the batch generated beside update t is trained on by update t + 1")


@struct.dataclass
class GRPOHyper:
    """Traced loss and sampling hyperparameters (float32 ``[]``; ``vmap`` for sweeps). The
    optimiser's (``lr``, ``max_grad_norm``) live in its state."""

    eps_low: jax.Array
    eps_high: jax.Array
    beta: jax.Array
    temperature: jax.Array


def hyperparams(cfg: GRPOConfig, **overrides) -> dict:
    """``{name: float32 array}`` of every traced hyperparameter, ``overrides`` applied
    (broadcast to one common shape, so a batch of values ``vmap`` s as a whole)."""
    values = {
        "lr": cfg.optim.lr, "max_grad_norm": cfg.optim.max_grad_norm, "eps_low": cfg.loss.eps_low,
        "eps_high": cfg.loss.eps_high, "beta": cfg.loss.beta, "temperature": cfg.sampling.temperature,
    }
    return traced_values(values, overrides, "GRPO")
