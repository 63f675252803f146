"""``text/Reverse-v0``: write the prompt's digits in reverse order.

Prompt ``d1 d2 ... dK =`` (K = ``params.num_digits`` <= ``max_digits``, left-padded), answer
``dK ... d2 d1`` then EOS. Reward: :func:`jaxrl_envs.text.base.digit_rubric` (``"dense"`` by
default: half token accuracy, half exact match, gated on EOS), range ``[0, 1]``.
"""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp

from jaxrl.verifiers import PAD
from jaxrl_envs.text.base import DigitListTask, DigitParams  # noqa: F401  (DigitParams: importable from here as before)


@dataclasses.dataclass(frozen=True)
class Reverse(DigitListTask):
    max_digits: int = 8
    rubric: str = "dense"

    @property
    def name(self) -> str:
        return "text/Reverse-v0"

    def answer(self, prompt, num_digits):
        j = jnp.arange(self.max_digits)
        # Answer j is the prompt digit j places left of the free token (prompt[-2]).
        return jnp.where(j < num_digits, prompt[jnp.clip(self.max_digits - 1 - j, 0, None)], PAD)
