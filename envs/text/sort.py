"""``text/Sort-v0``: write the prompt's digits in ascending order.

Prompt ``d1 d2 ... dK =`` (K = ``params.num_digits`` <= ``max_digits``, left-padded), answer
the same digits sorted ascending, then EOS. Reward: :func:`jaxrl_envs.text.base.digit_rubric`
(``"dense"`` by default), range ``[0, 1]``.
"""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp

from jaxrl.verifiers import PAD, Task
from jaxrl_envs.text.base import TokenEnv, digit_potential, digit_prompt, digit_rubric
from jaxrl_envs.text.reverse import DigitParams


@dataclasses.dataclass(frozen=True)
class Sort(TokenEnv):
    max_digits: int = 6
    rubric: str = "dense"

    def __post_init__(self):
        if not 1 <= self.max_digits <= 32:
            raise ValueError(f"Sort needs 1 <= max_digits <= 32, got {self.max_digits}")
        digit_rubric(self.rubric)

    @property
    def name(self) -> str:
        return "text/Sort-v0"

    @property
    def default_params(self) -> DigitParams:
        return DigitParams(num_digits=self.max_digits, max_digits=self.max_digits)

    @property
    def prompt_len(self) -> int:
        return self.max_digits + 1

    @property
    def max_completion_len(self) -> int:
        return self.max_digits + 1

    @property
    def verifier(self):
        return digit_rubric(self.rubric)

    def potential(self, metrics, params):
        return digit_potential(self.rubric, metrics)

    def generate(self, key, params) -> Task:
        prompt = digit_prompt(key, params.num_digits, self.max_digits, params.held_out)
        nd = jnp.clip(jnp.asarray(params.num_digits, jnp.int32), 1, self.max_digits)
        body = prompt[:-1]
        # PAD (0) sorts before every digit: the nd digits are the last nd sorted entries.
        ordered = jnp.sort(body)
        j = jnp.arange(self.max_digits)
        answer = jnp.where(j < nd, ordered[jnp.clip(self.max_digits - nd + j, 0, self.max_digits - 1)], PAD)
        return Task(prompt, answer.astype(jnp.int32), nd)
