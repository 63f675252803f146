"""``text/Parity-v0``: the parity of K bits (the newcomer case of issue 16, item 6).

Prompt ``b1 b2 ... bK =`` (bits written ``0``/``1``, K = ``num_bits``), answer ``0`` for an
even number of ones, ``1`` for an odd one, then EOS. Reward:
:func:`jaxrl_envs.text.base.digit_rubric` (``"dense"`` by default: half token accuracy, the
EOS counting as a position, half exact match), range ``[0, 1]``.

The held-out split is a set of bit patterns: a pattern is held out when a hash of its index
is ``0 mod 4`` (about a quarter of the ``2**K``); training never draws one, so a policy
scores on it only by computing parity, not by having memorised the pattern. Answering one
digit always scores about a half of the exact matches: the collapse the trainer reports.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import jax
import jax.numpy as jnp
from flax import struct

from jaxrl.core.env import Range
from jaxrl.verifiers import PAD, Task
from jaxrl_envs.text.base import DigitTask, _mix
from jaxrl_envs.text.vocab import DIGIT0, SEP


@struct.dataclass
class ParityParams:
    held_out: bool = False  # draw prompts from the held-out split (evaluation only)
    step_rewards: int = 0  # 1: pay the rubric's partial credit token by token (same return)

    bounds: ClassVar[dict] = {"step_rewards": Range(ge=0, le=1)}


def held_out_patterns(num_bits: int) -> jax.Array:
    """bool ``[2**num_bits]``: which bit patterns (by index) are held out."""
    index = jnp.arange(2**num_bits, dtype=jnp.uint32)
    return (_mix(index * jnp.uint32(0x9E3779B9) + jnp.uint32(num_bits)) % 4) == 0


@dataclasses.dataclass(frozen=True)
class Parity(DigitTask):
    num_bits: int = 6
    rubric: str = "dense"

    SIZE = ("num_bits", 2, 16)

    @property
    def name(self) -> str:
        return "text/Parity-v0"

    @property
    def default_params(self) -> ParityParams:
        return ParityParams()

    @property
    def prompt_len(self) -> int:
        return self.num_bits + 1

    @property
    def max_completion_len(self) -> int:
        return 2

    def generate(self, key, params) -> Task:
        split = held_out_patterns(self.num_bits) == jnp.asarray(params.held_out)
        index = jax.random.choice(key, 2**self.num_bits, p=split / jnp.sum(split))
        bits = (index >> jnp.arange(self.num_bits)) & 1
        prompt = jnp.concatenate([DIGIT0 + bits, jnp.full((1,), SEP)]).astype(jnp.int32)
        answer = jnp.array([DIGIT0, PAD]).at[0].add(jnp.sum(bits) % 2)[:1]
        return Task(prompt, answer.astype(jnp.int32), jnp.ones((), jnp.int32))
