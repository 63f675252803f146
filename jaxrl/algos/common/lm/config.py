"""The ``model`` section of an algorithm that trains a loaded checkpoint (GRPO's ``policy: hf``, SFT): one class, checked once.

:class:`ModelSection` holds the keys every such algorithm reads (``path``, ``dtype``,
``lora``, ``head_chunk``, ``remat``); :meth:`ModelSection.validate` rejects impossible values
with ``ValueError("model.<key>: ...")``. GRPO's section adds its small networks to it
(:class:`jaxrl.algos.grpo.config.ModelConfig`); SFT's is this class itself.
"""

from __future__ import annotations

import dataclasses
from typing import Literal, Union

from jaxrl.algos.contract import check

#: The projections LoRA can adapt (every linear layer of a decoder block).
ALL_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


@dataclasses.dataclass(frozen=True)
class LoRASection:
    """LoRA adapters on a loaded model (``<algo>.model.lora``); rank 0 = full fine-tuning."""

    rank: int = 0  # adapter rank r (0: train every weight of the model)
    alpha: float = 16.0  # scale alpha / r of the adapters' output
    targets: tuple[str, ...] = ALL_TARGETS  # adapted projections


def _count(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


@dataclasses.dataclass(frozen=True)
class ModelSection:
    """A loaded Hugging Face checkpoint as an algorithm's model (``<algo>.model``)."""

    path: str = ""  # a local Hugging Face checkpoint directory (config.json, *.safetensors); grpo: with policy hf
    dtype: Literal["float32", "bfloat16"] = "float32"  # weights and activations (softmax, log-probs, Adam: float32)
    lora: LoRASection = dataclasses.field(default_factory=LoRASection)  # adapters (rank 0: full fine-tuning)
    # positions per chunk of the LM head in the loss (0: the whole sequence at once); auto: grpo takes
    # the head whole when the memory estimate fits, else 64 (the choice is printed when the run starts); sft 64
    head_chunk: Union[Literal["auto"], int] = "auto"
    # the loss pass recomputes each layer's inside in its backward pass (less memory, about a third more
    # work); auto: grpo turns it off when the memory estimate fits; sft keeps it on
    remat: Union[Literal["auto"], bool] = "auto"

    def validate(self) -> None:
        """Reject impossible values with ``ValueError("model.<key>: <message>")``."""
        lora = self.lora
        check(self.dtype in ("float32", "bfloat16"), "model.dtype", f"expected float32 or bfloat16, got {self.dtype!r}")
        check(lora.rank >= 0, "model.lora.rank", f"must be >= 0, got {lora.rank}")
        check(lora.alpha > 0, "model.lora.alpha", f"must be > 0, got {lora.alpha}")
        check(lora.rank == 0 or (bool(lora.targets) and set(lora.targets) <= set(ALL_TARGETS)), "model.lora.targets",
              f"expected a non-empty subset of {ALL_TARGETS}, got {tuple(lora.targets)}")
        check(self.head_chunk == "auto" or (_count(self.head_chunk) and self.head_chunk >= 0), "model.head_chunk",
              f"expected auto or an integer >= 0 (0: the whole sequence), got {self.head_chunk!r}")
        check(self.remat == "auto" or isinstance(self.remat, bool), "model.remat",
              f"expected auto, true or false, got {self.remat!r}")
