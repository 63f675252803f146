"""``text/Sort-v0``: write the prompt's digits in ascending order.

Prompt ``d1 d2 ... dK =`` (K = ``params.num_digits`` <= ``max_digits``, left-padded), answer
the same digits sorted ascending, then EOS. Reward: :func:`jaxrl_envs.text.base.digit_rubric`
(``"dense"`` by default), range ``[0, 1]``.
"""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp

from jaxrl.verifiers import PAD
from jaxrl_envs.text.base import DigitListTask
from jaxrl_envs.text.base import DigitParams  # noqa: F401  (importable from here as before)


@dataclasses.dataclass(frozen=True)
class Sort(DigitListTask):
    max_digits: int = 6
    rubric: str = "dense"

    @property
    def name(self) -> str:
        return "text/Sort-v0"

    def answer(self, prompt, num_digits):
        # PAD (0) sorts before every digit: the nd digits are the last nd sorted entries.
        ordered = jnp.sort(prompt[:-1])
        j = jnp.arange(self.max_digits)
        return jnp.where(j < num_digits, ordered[jnp.clip(self.max_digits - num_digits + j, 0, self.max_digits - 1)], PAD)
