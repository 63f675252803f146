"""``text/Reverse-v0``: write the prompt's digits in reverse order.

Prompt ``d1 d2 ... dK =`` (K = ``params.num_digits`` <= ``max_digits``, left-padded), answer
``dK ... d2 d1`` then EOS. Reward: :func:`jaxrl_envs.text.base.digit_rubric` (``"dense"`` by
default: half token accuracy, half exact match, gated on EOS), range ``[0, 1]``.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import jax.numpy as jnp
from flax import struct

from jaxrl.core.env import Range
from jaxrl.verifiers import PAD, Task
from jaxrl_envs.text.base import TokenEnv, digit_potential, digit_prompt, digit_rubric


@struct.dataclass
class DigitParams:
    num_digits: int = 8  # digits per prompt, 1 .. max_digits (a curriculum may raise it)
    held_out: bool = False  # draw prompts from the held-out split (evaluation only)
    step_rewards: int = 0  # 1: pay the rubric's partial credit token by token (same return)
    max_digits: int = struct.field(pytree_node=False, default=8)  # set by the env: the buffers' size

    bounds: ClassVar[dict] = {"num_digits": Range(ge=1, le="max_digits"), "step_rewards": Range(ge=0, le=1)}


@dataclasses.dataclass(frozen=True)
class Reverse(TokenEnv):
    max_digits: int = 8
    rubric: str = "dense"

    def __post_init__(self):
        if not 1 <= self.max_digits <= 32:
            raise ValueError(f"Reverse needs 1 <= max_digits <= 32, got {self.max_digits}")
        digit_rubric(self.rubric)  # validates the name

    @property
    def name(self) -> str:
        return "text/Reverse-v0"

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
        j = jnp.arange(self.max_digits)
        # Answer j is the prompt digit j places left of the free token (prompt[-2]).
        answer = jnp.where(j < nd, prompt[jnp.clip(self.max_digits - 1 - j, 0, None)], PAD)
        return Task(prompt, answer.astype(jnp.int32), nd)
