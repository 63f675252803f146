"""Hugging Face causal LMs (Qwen2, Qwen3, Llama, Mistral) as pure JAX functions.

``load_lm(path)`` reads a checkpoint directory into an :class:`LM` and its parameter pytree;
``model.apply`` / ``prefill`` / ``extend`` / ``decode`` run it, :func:`generate` samples from
it, :mod:`~jaxrl.models.lm.lora` adds adapters, :mod:`~jaxrl.models.lm.head` computes
token log-probabilities without holding full float32 logits, and
:mod:`~jaxrl.models.lm.export` writes transformers- and PEFT-readable checkpoints;
:func:`init_params` makes fresh weights (models trained from scratch).
"""

from jaxrl.models.lm.config import LMConfig, RopeConfig
from jaxrl.models.lm.export import save_hf, save_peft
from jaxrl.models.lm.generate import generate, sample_token
from jaxrl.models.lm.head import last_token_logits, token_logprobs
from jaxrl.models.lm.init import init_params
from jaxrl.models.lm.load import Tokenizer, load_lm, load_tokenizer
from jaxrl.models.lm.lora import LoRAConfig, LoRAParams, init_lora, merge_lora
from jaxrl.models.lm.model import LM, KVCache

__all__ = ["LM", "KVCache", "LMConfig", "LoRAConfig", "LoRAParams", "RopeConfig", "Tokenizer", "generate",
           "init_lora", "init_params", "last_token_logits", "load_lm", "load_tokenizer", "merge_lora", "sample_token",
           "save_hf", "save_peft", "token_logprobs"]
