"""The language-model policy's one home: what GRPO, SFT and evaluation share about a loaded checkpoint and a token policy.

One concern per module: :mod:`~jaxrl.algos.common.lm.config` (the ``model`` section,
:class:`ModelSection`), :mod:`~jaxrl.algos.common.lm.model` (loading the checkpoint, the
train state's weights or adapters, ``--init-from`` compatibility),
:mod:`~jaxrl.algos.common.lm.policy` (:class:`TokenPolicy`, a loaded checkpoint as one),
:mod:`~jaxrl.algos.common.lm.decode` (a turn of tokens through the one decode loop) and
:mod:`~jaxrl.algos.common.lm.program` (the evaluation report, the Hugging Face export and the
weights a ``model`` mesh axis splits). The names of the former ``jaxrl/algos/common/lm.py``
stay importable from here.
"""

from jaxrl.algos.common.lm.config import ALL_TARGETS, LoRASection, ModelSection
from jaxrl.algos.common.lm.decode import decode_turn
from jaxrl.algos.common.lm.model import (
    SHARED_MODEL_KEYS, load_model, lm_dtype, lora_config, model_mismatch, split, trainable,
)
from jaxrl.algos.common.lm.policy import LMSpec, TokenPolicy, lm_policy

__all__ = [
    "ALL_TARGETS", "LMSpec", "LoRASection", "ModelSection", "SHARED_MODEL_KEYS", "TokenPolicy", "decode_turn",
    "lm_dtype", "lm_policy", "load_model", "lora_config", "model_mismatch", "split", "trainable",
]
