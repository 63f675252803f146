"""SFT's configuration: the ``sft:`` section and its traced values.

A run config reads::

    sft:
      batch_size: 16           # demonstrations per update
      num_updates: 200
      data: ""                 # "": the task's reference solver (its demonstrations); or a JSONL path
      allow_held_out_overlap: false  # true: train on rows of data whose prompt is held out
      eval_every: 0            # N > 0: the greedy held-out evaluation after every N-th update (heldout_*)
      model: {path: ..., dtype: float32, lora: {rank: 8, alpha: 16.0}, head_chunk: 64}
      optim: {lr: 1.0e-4, warmup_updates: 10, lr_end_frac: 0.1}
      warn: {after: 0.25, min_gain: 0.02, window: 10, solved_token_accuracy: 0.9}

``model`` is :class:`~jaxrl.algos.common.lm.config.ModelSection`, the keys of ``grpo.model``
with ``policy: hf`` (a run can go on as GRPO with ``--init-from``: the same ``path``,
``dtype`` and ``lora``); its ``head_chunk: auto`` is 64 and ``remat: auto`` on
(:func:`loss_pass`). ``optim`` has the keys of ``grpo.optim``
(:class:`~jaxrl.algos.common.optim.OptimConfig`, the section of every algorithm). ``warn``
is :class:`SFTWarn`: when the log says that token accuracy has stopped moving.
"""

from __future__ import annotations

import dataclasses
from jaxrl.algos.common.lm.config import ALL_TARGETS, LoRASection, ModelSection  # noqa: F401  (sft.config's names)
from jaxrl.algos.common.optim import OptimConfig as _OptimConfig, traced_values
from jaxrl.algos.contract import AlgoConfig, check

@dataclasses.dataclass(frozen=True)
class SFTOptim(_OptimConfig):
    """SFT's optimiser (``sft.optim``): one optimiser step per update."""

    lr: float = 1e-4
    adam_b2: float = 0.99


#: 0.4.0's name of :class:`SFTOptim` (the same defaults).
OptimConfig = SFTOptim


@dataclasses.dataclass(frozen=True)
class SFTWarn:
    """When the trainer reports, once, that SFT's token accuracy has not moved (``sft.warn``)."""

    after: float = 0.25  # the first check after this fraction of num_updates (0 = never warn) ...
    min_gain: float = 0.02  # ... then warn when token_accuracy over the last `window` updates rose less than this above its mean over the `window` updates that ended halfway through the run so far ...
    window: int = 10  # ... (updates averaged at each end) ...
    solved_token_accuracy: float = 0.9  # ... unless token_accuracy is already at least this


@dataclasses.dataclass(frozen=True)
class SFTConfig(AlgoConfig):
    """Supervised fine-tuning settings (the ``sft:`` section of a run config)."""

    batch_size: int = 16  # demonstrations per update (drawn without replacement, epoch by epoch)
    num_updates: int = 100  # updates in the run
    micro_batches: int = 1  # gradient accumulation: slices of a batch run one at a time; must divide it
    data: str = ""  # "": the task's demonstrations (its reference solver); else a JSONL with prompt/completion
    allow_held_out_overlap: bool = False  # train on rows of data whose prompt is a held-out prompt (refused by default: it inflates the held-out score)
    eval_episodes: int = 64  # held-out prompts answered greedily and scored by the task's verifier
    eval_held_out: str = "all"  # "all" scores every held-out row once (the first eval_episodes of them when there are more); "sample" draws eval_episodes rows with replacement
    eval_every: int = 0  # every N updates, the greedy held-out evaluation inside training: heldout_reward, heldout_<info key> (absent from other updates' records; 0 = off); with train.stop_at on one, updates_per_chunk must be a multiple of N
    eval_every_episodes: int = 64  # held-out prompts of that periodic evaluation (each row once, the first N of them, as eval_held_out says)
    model: ModelSection = dataclasses.field(default_factory=ModelSection)
    optim: SFTOptim = dataclasses.field(default_factory=SFTOptim)
    warn: SFTWarn = dataclasses.field(default_factory=SFTWarn)

    def validate(self) -> None:
        validate(self)


def validate(cfg: SFTConfig) -> None:
    """Reject impossible configs with ``ValueError("<key>: <message>")``."""
    for name in ("batch_size", "num_updates", "micro_batches", "eval_episodes", "eval_every_episodes"):
        check(getattr(cfg, name) >= 1, name, f"must be >= 1, got {getattr(cfg, name)}")
    check(cfg.eval_every >= 0, "eval_every", f"must be >= 0 (0 = no evaluation during training), got {cfg.eval_every}")
    check(cfg.eval_held_out in ("all", "sample"), "eval_held_out", f"expected all or sample, got {cfg.eval_held_out!r}")
    check(cfg.batch_size % cfg.micro_batches == 0, "micro_batches",
          f"{cfg.micro_batches} does not divide batch_size = {cfg.batch_size}")
    check(bool(cfg.model.path), "model.path", "SFT trains a loaded checkpoint: give its local directory")
    w = cfg.warn
    check(0.0 <= w.after <= 1.0, "warn.after", f"must be a fraction of num_updates in [0, 1] (0 = never warn), got {w.after}")
    check(0.0 <= w.min_gain <= 1.0, "warn.min_gain", f"must be a token-accuracy gain in [0, 1], got {w.min_gain}")
    check(w.window >= 1, "warn.window", f"must be >= 1 update, got {w.window}")
    check(0.0 < w.solved_token_accuracy <= 1.0, "warn.solved_token_accuracy", f"must be in (0, 1], got {w.solved_token_accuracy}")
    cfg.model.validate()
    cfg.optim.validate()


#: SFT's LM head chunk under ``model.head_chunk: auto`` (positions per chunk of the loss's head).
HEAD_CHUNK = 64


def loss_pass(m: ModelSection) -> tuple[int, bool]:
    """``(head_chunk, remat)`` of SFT's loss pass from ``sft.model``: ``auto`` is
    :data:`HEAD_CHUNK` positions per chunk and rematerialisation on."""
    return (HEAD_CHUNK if m.head_chunk == "auto" else int(m.head_chunk)), (True if m.remat == "auto" else bool(m.remat))


def hyperparams(cfg: SFTConfig, **overrides) -> dict:
    """``{name: float32 array}`` of the traced hyperparameters (the optimiser's ``lr`` and
    ``max_grad_norm``), ``overrides`` applied."""
    return traced_values({"lr": cfg.optim.lr, "max_grad_norm": cfg.optim.max_grad_norm}, overrides, "SFT")


def __getattr__(name: str):
    """``ModelConfig``, the 0.5 name of :class:`~jaxrl.algos.common.lm.config.ModelSection`, with a warning."""
    from jaxrl import _compat

    return _compat.moved_name(__name__, name)
