"""``text/Addition-v0``: add two numbers, answer least-significant digit first.

Prompt ``a_1 ... a_K + b_1 ... b_K =``: two K-digit numbers written most-significant digit
first, zero-padded to K digits, left-padded with PAD. Answer: the K + 1 digits of ``a + b``
*least*-significant first (the last one is the carry, possibly 0), then EOS. K is drawn per
prompt uniformly from ``[params.min_digits, params.num_digits]`` (both <= ``max_digits``), so a
curriculum raises ``num_digits`` while easier prompts stay in the mix. With
``params.zero_pad = 1`` every operand is written with ``max_digits`` digits (a K-digit value
gets leading zeros, the answer has ``max_digits + 1`` digits), so ``num_digits`` bounds the
values only and the layout never moves: a curriculum on it then trains the positions the
final task uses. Reward:
:func:`jaxrl_envs.text.base.digit_rubric` (``"dense"`` by default), range ``[0, 1]``.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import jax
import jax.numpy as jnp
from flax import struct

from jaxrl.core.env import Range
from jaxrl.verifiers import PAD, Task
from jaxrl_envs.text.base import DigitTask, set_free_token
from jaxrl_envs.text.vocab import DIGIT0, PLUS, SEP


@struct.dataclass
class AdditionParams:
    num_digits: int = 2  # most digits per operand (a curriculum raises it)
    min_digits: int = 1  # fewest digits per operand
    held_out: bool = False  # draw prompts from the held-out split (evaluation only)
    step_rewards: int = 0  # 1: pay the rubric's partial credit token by token (same return)
    zero_pad: int = 0  # 1: write every operand with max_digits digits (leading zeros), so that
    #                    num_digits only bounds the values and every prompt has one layout
    max_digits: int = struct.field(pytree_node=False, default=2)  # set by the env: the buffers' size

    bounds: ClassVar[dict] = {
        "num_digits": Range(ge=1, le="max_digits"),
        "min_digits": Range(ge=1, le="max_digits"),
        "step_rewards": Range(ge=0, le=1),
        "zero_pad": Range(ge=0, le=1),
    }


@dataclasses.dataclass(frozen=True)
class Addition(DigitTask):
    max_digits: int = 2
    rubric: str = "dense"

    SIZE = ("max_digits", 1, 8)  # a + b must fit in int32

    @property
    def name(self) -> str:
        return "text/Addition-v0"

    @property
    def default_params(self) -> AdditionParams:
        return AdditionParams(num_digits=self.max_digits, min_digits=self.max_digits, max_digits=self.max_digits)

    @property
    def prompt_len(self) -> int:
        return 2 * self.max_digits + 2

    @property
    def max_completion_len(self) -> int:
        return self.max_digits + 2

    def generate(self, key, params) -> Task:
        k_nd, k_digits, k_free = jax.random.split(key, 3)
        m = self.max_digits
        hi = jnp.clip(jnp.asarray(params.num_digits, jnp.int32), 1, m)
        lo = jnp.clip(jnp.asarray(params.min_digits, jnp.int32), 1, hi)
        nd = jax.random.randint(k_nd, (), lo, hi + 1)
        digits = jax.random.randint(k_digits, (2, m), 0, 10)  # operand digits, MSD first
        zero_pad = jnp.asarray(params.zero_pad, jnp.int32) > 0
        # zero_pad: operands below 10 ** nd written as max_digits digits (leading zeros)
        digits = jnp.where(zero_pad & (jnp.arange(m) < m - nd), 0, digits)
        nd = jnp.where(zero_pad, m, nd)
        # Compact prompt a(nd) + b(nd) = , right-aligned in prompt_len positions.
        width = self.prompt_len
        k = jnp.arange(width) - (width - (2 * nd + 2))
        a_tok = DIGIT0 + digits[0, jnp.clip(k, 0, m - 1)]
        b_tok = DIGIT0 + digits[1, jnp.clip(k - nd - 1, 0, m - 1)]
        prompt = jnp.where(k < nd, a_tok, jnp.where(k == nd, PLUS, jnp.where(k < 2 * nd + 1, b_tok, SEP)))
        prompt = jnp.where(k < 0, PAD, prompt).astype(jnp.int32)
        prompt = set_free_token(k_free, prompt, params.held_out)
        a, b = _operands(prompt, nd, m)
        total = a + b
        j = jnp.arange(m + 1)
        sum_digits = DIGIT0 + (total // (10 ** j.astype(jnp.int32))) % 10
        answer = jnp.where(j < nd + 1, sum_digits, PAD)
        return Task(prompt, answer.astype(jnp.int32), nd + 1)


def _operands(prompt: jax.Array, nd: jax.Array, max_digits: int) -> tuple[jax.Array, jax.Array]:
    """The two int32 operands of an addition prompt (int32 ``[2 * max_digits + 2]``)."""
    width = prompt.shape[0]
    k = jnp.arange(width) - (width - (2 * nd + 2))
    value = jnp.clip(prompt - DIGIT0, 0, 9)
    # Place value of a digit: 10 ** (digits to its right within its operand).
    a_place = jnp.where((k >= 0) & (k < nd), nd - 1 - k, -1)
    b_place = jnp.where((k > nd) & (k < 2 * nd + 1), 2 * nd - k, -1)
    pow10 = lambda p: jnp.where(p >= 0, 10 ** jnp.clip(p, 0, max_digits), 0)  # noqa: E731
    return jnp.sum(value * pow10(a_place)), jnp.sum(value * pow10(b_place))
