"""What GRPO and SFT build alike around a token task or a loaded model.

The evaluation report (held-out greedy reward, exact match, the task's own scores), the
Hugging Face export of a trained state, and the :class:`~jaxrl.algos.contract.ModelParams`
through which a ``model`` mesh axis splits the weights.

Each takes the algorithm's ``model`` section (``path``, ``dtype``, ``lora``) and, where a
message names a key, the section name (``"grpo"``, ``"sft"``).
"""

from __future__ import annotations

import functools
import os
from typing import Any, Callable

import jax
import jax.numpy as jnp

from jaxrl.algos.common.lm.model import lm_dtype, lora_config
from jaxrl.algos.contract import EvalReport, ModelParams, leaves_under
from jaxrl.core.env import Environment


def info_keys(env: Environment, eval_params: Any) -> set:
    """The keys of ``env``'s ``info`` (``exact_match``?), from an abstract reset."""
    return set(jax.eval_shape(env.reset, jax.random.PRNGKey(0), eval_params)[1].info)


def greedy_report(env: Environment, info: set, token: bool) -> EvalReport:
    """The greedy scores ``evaluate`` reports: the reward (``token``: a token task's
    held-out reward, else the return), the exact match where ``info`` has one, and a token
    task's ``eval_scores``."""
    scores = {"episode_returns": "greedy"}
    phrases = {"episode_returns": "held-out greedy reward" if token else "greedy return"}
    if "exact_match" in info:
        scores["episode_returns_exact_match"] = "exact match"
        phrases["episode_returns_exact_match"] = "held-out greedy exact match" if token else "greedy exact match"
    for name, phrase in env.eval_scores if token else ():
        scores[f"episode_returns_{name}"] = name
        phrases[f"episode_returns_{name}"] = f"held-out greedy {phrase}"
    return EvalReport(scores, metric="reward" if token else "return", phrases=phrases)


def export_hf(model_cfg: Any, section: str, state: Any, out_dir: str, adapters_only: bool = False) -> str:
    """One seed's trained model (``state``, unbatched: ``params``, and ``frozen`` under
    LoRA) as a Hugging Face directory: the base with LoRA merged, or the full fine-tuned
    weights, in the checkpoint's dtype, with the source's config, generation config and
    tokenizer files; ``adapters_only``: PEFT's ``adapter_config.json`` and
    ``adapter_model.safetensors`` (LoRA runs only)."""
    from jaxrl.models import lm

    model, base = lm.load_lm(model_cfg.path, dtype=lm_dtype(model_cfg.dtype))
    lcfg = lora_config(model_cfg.lora)
    if lcfg is None:
        if adapters_only:
            raise ValueError(f"adapters only: this run fine-tuned every weight ({section}.model.lora.rank 0); "
                             "export the whole model")
        weights = jax.tree_util.tree_map(lambda w, b: jnp.asarray(w, b.dtype), state.params, base)
        return lm.save_hf(out_dir, model, weights, source=model_cfg.path)
    if adapters_only:
        return lm.save_peft(out_dir, model, state.params, lcfg, os.path.abspath(model_cfg.path))
    return lm.save_hf(out_dir, model, state.frozen, lora=state.params, lora_config=lcfg, source=model_cfg.path)


def model_params(cfg: Any, section: str, leaves: tuple[str, ...], memory: Callable, seq_len: int) -> ModelParams:
    """The :class:`ModelParams` of a run on ``cfg.model``'s checkpoint: ``True`` on the
    state's fields ``leaves`` (the weights and the optimiser moments that mirror them), the
    checkpoint's heads, ``memory(lm_config, cfg, seq_len, data, model, strategy)`` as the
    estimate and :func:`export_hf` as the export."""
    from jaxrl.models.lm.load import read_config

    c = read_config(cfg.model.path)
    if seq_len > c.max_position_embeddings:   # RoPE past the trained positions: another model, silently
        raise ValueError(f"model.path: a sequence of {seq_len} tokens (the task's prompt and completion) is longer than "
                         f"the checkpoint's max_position_embeddings = {c.max_position_embeddings}; shorten the "
                         "task's prompts or completions (env.text.prompt_len, completion_len)")
    return ModelParams(functools.partial(leaves_under, names=leaves), c.num_heads, c.num_kv_heads,
                       functools.partial(memory, c, cfg, seq_len), functools.partial(export_hf, cfg.model, section))
