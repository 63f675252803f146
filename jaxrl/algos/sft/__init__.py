"""Supervised fine-tuning (``algo: sft``) of a loaded Hugging Face checkpoint on demonstrations.

The warm start before GRPO: mean token cross-entropy on each demonstration's completion
(prompt and padding masked, the end-of-turn a target), LoRA or full fine-tuning, then
``jaxrl train grpo.yaml --init-from runs/sft`` goes on from the learned weights. The
demonstrations are the task's own (``env.demonstrations("train")``, a text task's reference
solver) or a JSONL of ``prompt``/``completion`` rows encoded by the task (``sft.data``), so
the chat template, tokenizer and lengths are the task's. Evaluation answers held-out prompts
greedily and scores them with the task's verifier, as GRPO's does. One concern per module:
:mod:`~jaxrl.algos.sft.config`, :mod:`~jaxrl.algos.sft.losses`,
:mod:`~jaxrl.algos.sft.update`, :mod:`~jaxrl.algos.sft.evaluate`; ``docs/sft.md``.
"""

from __future__ import annotations

import functools
import os

import numpy as np

from jaxrl.algos.common.lm import program as lm_program
from jaxrl.algos.common.lm.model import load_model, lora_config
from jaxrl.algos.common.lm.policy import LMSpec, lm_policy
from jaxrl.algos.contract import (
    Alert, AlgoEntry, BatchSize, Curve, EnvSetup, LMHooks, ModelParams, Monitor, Plan, Program, replicated_axes,
)
from jaxrl.algos.sft import config, evaluate, losses, update
from jaxrl.algos.sft.config import SFTConfig, hyperparams
from jaxrl.algos.sft.update import Setup, SFTState
from jaxrl.core.tokens import TokenTask
from jaxrl.text.data import HeldOutOverlap

__all__ = ["ENTRY", "SFTConfig", "SFTState", "Setup", "alerts", "build", "config", "demonstrations", "evaluate", "hyperparams",
           "load_params", "losses", "make_setup", "update"]


def demonstrations(env, cfg: SFTConfig) -> tuple[np.ndarray, np.ndarray]:
    """``(prompts int32 [N, Lp], completions int32 [N, Lc])``: ``sft.data``'s JSONL encoded by
    the task (``env.encode_demonstrations(path)``), or the task's own
    (``env.demonstrations("train")``, its reference solver). Rows of ``sft.data`` whose prompt
    is one of the task's held-out prompts (also after stripping, case-folding and NFKC) are
    refused in one line (count, first row) unless ``sft.allow_held_out_overlap``."""
    if cfg.data:
        if not os.path.isfile(cfg.data):
            raise ValueError(f"data: {cfg.data!r} is not a file (a JSONL with prompt and completion columns)")
        encode = getattr(env, "encode_demonstrations", None)
        if encode is None:
            raise ValueError(f"data: {env.name} cannot encode a JSONL of demonstrations (a text task, env.text, can)")
        try:
            prompts, completions = encode(cfg.data, allow_held_out=cfg.allow_held_out_overlap)
        except HeldOutOverlap as exc:
            raise ValueError(f"data: {exc}: remove those rows, or set sft.allow_held_out_overlap: true to train on "
                             "them anyway") from None
    else:
        own = getattr(env, "demonstrations", None)
        if own is None:
            raise ValueError(f"data: {env.name} has no reference solver (demonstrations); give a JSONL path in sft.data")
        prompts, completions = own("train")
    return check_demonstrations(env, np.asarray(prompts), np.asarray(completions))


def check_demonstrations(env: TokenTask, prompts: np.ndarray, completions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The arrays as ``int32``, refused with ``ValueError("data: ...")`` unless they have the
    task's shapes (``[N, prompt_len]``, ``[N, max_turn_tokens]``), ``N >= 1`` and ids in the vocabulary."""
    want = (env.prompt_len, env.max_turn_tokens)
    if prompts.ndim != 2 or completions.ndim != 2 or (prompts.shape[1], completions.shape[1]) != want:
        raise ValueError(f"data: demonstrations of shapes {prompts.shape} and {completions.shape}; "
                         f"{env.name} needs [N, {want[0]}] prompts and [N, {want[1]}] completions")
    if prompts.shape[0] != completions.shape[0] or prompts.shape[0] == 0:
        raise ValueError(f"data: {prompts.shape[0]} prompts and {completions.shape[0]} completions; need as many, at least one")
    for name, a in (("prompts", prompts), ("completions", completions)):
        if a.min() < 0 or a.max() >= env.vocab_size:
            raise ValueError(f"data: {name} hold ids outside [0, {env.vocab_size})")
    return prompts.astype(np.int32), completions.astype(np.int32)


def make_setup(envs: EnvSetup, cfg: SFTConfig, data: tuple[np.ndarray, np.ndarray] | None = None) -> Setup:
    """The static pieces of one run; ``data``: ``(prompts, completions)`` arrays instead of
    :func:`demonstrations` (notebooks, tests)."""
    env = envs.env
    if not isinstance(env, TokenTask):
        raise ValueError(f"env: SFT needs a token task, {env.name} is not one")
    if env.max_turns != 1:
        raise ValueError(f"env: SFT trains single completions; {env.name} has {env.max_turns} turns")
    prompts, completions = demonstrations(env, cfg) if data is None else check_demonstrations(env, *map(np.asarray, data))
    model, weights = load_model(cfg.model, env.vocab_size, env.name)
    lcfg = lora_config(cfg.model.lora)
    policy = lm_policy(LMSpec(model, lcfg, env.pad_id, env.prompt_len, env.dialogue_len, *config.loss_pass(cfg.model)),
                       weights)
    return Setup(cfg, env, envs.eval_params, model, lcfg, weights, prompts, completions, update.make_optimizer(cfg),
                 update.schedule(cfg), policy)


def load_params(fresh: SFTState, trained) -> SFTState:
    """``fresh`` starting from ``trained``'s model (an SFT or GRPO state over the same
    checkpoint: its ``params`` and ``frozen``), with its own optimiser and data order."""
    return fresh.replace(params=trained.params, frozen=trained.frozen)


def _memory(lm_config, cfg: SFTConfig, seq_len: int, data: int, model: int, strategy: str):
    """Per-device memory of one update (:func:`jaxrl.models.lm.memory.estimate_memory`)."""
    from jaxrl.models.lm.memory import estimate_memory

    m = cfg.model
    head_chunk, remat = config.loss_pass(m)
    return estimate_memory(
        lm_config, batch=cfg.batch_size, seq_len=seq_len, param_dtype_bytes=2 if m.dtype == "bfloat16" else 4,
        full_finetune=m.lora.rank == 0, lora_rank=m.lora.rank, lora_targets=tuple(m.lora.targets), data=data,
        model=model, strategy=strategy, grad_accum=cfg.micro_batches,
        vocab_chunk=cfg.batch_size // cfg.micro_batches * (head_chunk or seq_len), remat=remat,
    )


def model_params(cfg: SFTConfig, seq_len: int) -> ModelParams:
    """The leaves a ``model`` mesh axis splits: the weights, frozen or trained, and Adam's moments."""
    return lm_program.model_params(cfg, "sft", ("params", "frozen", "opt_state"), _memory, seq_len)


STALL_HINT = (
    "another sft.optim.lr (from scratch a small model wants ~1e-3 to 3e-3, a pretrained one ~1e-5 to 1e-4), "
    "a larger budget (sft.num_updates), full fine-tuning (sft.model.lora.rank: 0) or a larger LoRA rank; "
    "see docs/tuning_text_tasks.md"
)


def alerts(cfg: SFTConfig) -> tuple[Alert, ...]:
    """SFT's stall warning (``sft.warn``): token accuracy over the last ``warn.window``
    updates rose less than ``warn.min_gain`` above its mean over the window that ended
    halfway through the run so far, checked from ``warn.after`` of the budget on, not
    counting updates whose token accuracy is already ``warn.solved_token_accuracy``."""
    w = cfg.warn
    if w.after == 0:
        return ()
    return (Alert("token_accuracy", False, w.min_gain, w.window, "SFT is not learning the completions", STALL_HINT,
                  ("token_accuracy", w.solved_token_accuracy), gain_from=max(1, round(w.after * cfg.num_updates))),)


def build(envs: EnvSetup, cfg: SFTConfig, data: tuple[np.ndarray, np.ndarray] | None = None) -> Program:
    """SFT on ``envs.env``'s demonstrations as a :class:`~jaxrl.algos.contract.Program`."""
    setup = make_setup(envs, cfg, data)
    env = setup.env
    info = lm_program.info_keys(env, envs.eval_params)
    tokens = cfg.batch_size * (env.prompt_len + env.max_turn_tokens)
    return Program(
        update=functools.partial(evaluate.update_and_evaluate if cfg.eval_every else update.update, setup),
        evaluate=functools.partial(evaluate.evaluate, setup),
        plan=Plan(cfg.num_updates, tokens, 1, step_unit="tokens"),
        batch_axes=replicated_axes,  # the batch is gathered inside the update
        report=lm_program.greedy_report(env, info, token=True),
        hyperparams=functools.partial(hyperparams, cfg),
        init_with=functools.partial(update.init, setup),
        batch=BatchSize("batch_size", cfg.batch_size, "demonstrations"),
        load_params=load_params,
        monitor=Monitor(Curve("loss", "training loss (completion tokens)"), alerts(cfg)),
        lm=LMHooks(
            samples=functools.partial(evaluate.samples, setup),
            rollouts=functools.partial(evaluate.sampled_rollouts, setup),
            model_params=model_params(cfg, env.prompt_len + env.max_turn_tokens),
        ),
    )


ENTRY = AlgoEntry(
    name="sft", config_cls=SFTConfig, build=build,
    description="supervised fine-tuning of a loaded model on demonstrations (completion tokens), LoRA or full",
)
