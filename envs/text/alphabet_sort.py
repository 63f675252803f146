"""``text/AlphabetSort-v0``: sort short names alphabetically.

A port of the verifiers library's alphabet-sort environment to tokens. Prompt
``n1 , n2 , ... , nN =``: N = ``params.num_names`` (2 .. ``max_names``) names of ``name_len``
random letters each, separated by commas, left-padded. Answer: the same names in
alphabetical (lexicographic) order, comma-separated, then EOS. Reward, as in the verifiers
library: the sequence similarity of completion and answer raised to the 4th power,
``gate(has_eos, similarity ** 4)`` (:func:`jaxrl.verifiers.lcs_ratio`), range ``[0, 1]``;
``exact_match`` and ``token_accuracy`` are logged alongside (weight 0).

Training from scratch on the sparse ``similarity ** 4`` is slow, so two dense, still
verifiable terms can be mixed in: ``params.shaping = w_a`` (token accuracy: the right token at
the right position) and ``params.shaping_sim = w_s`` (the similarity itself, not raised to the
4th power: it pays for copying names even in the wrong order). The episode reward is
``(1 - w_a - w_s) * gate(has_eos, similarity ** 4) + w_a * token_accuracy + w_s * similarity``.
``w_a = w_s = 0`` (the defaults, and what evaluation should use) is the verifiers library's
reward exactly.

``params.num_letters`` (default 26) draws the names from the first ``num_letters`` letters
only, a difficulty knob for a curriculum (``grpo.curriculum_param: num_letters``); the free
token that decides the held-out split (the prompt's last letter) still ranges over all 26.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import jax
import jax.numpy as jnp
from flax import struct

from jaxrl import verifiers as V
from jaxrl.core.env import Range
from jaxrl.verifiers import PAD, Task
from jaxrl_envs.text.base import TokenEnv, right_align, set_free_token
from jaxrl_envs.text.vocab import COMMA, LETTER_A, SEP

Array = jax.Array


@struct.dataclass
class AlphabetSortParams:
    num_names: int = 3  # names per prompt, 2 .. max_names
    shaping: float = 0.0  # weight of token accuracy mixed into the reward (0 = pure sim ** 4)
    shaping_sim: float = 0.0  # weight of the un-powered similarity mixed into the reward
    held_out: bool = False  # draw prompts from the held-out split (evaluation only)
    step_rewards: int = 0  # 1: pay the shaping term (shaping * token_accuracy) token by token
    num_letters: int = 26  # names are drawn from the first num_letters letters (a curriculum knob)
    max_names: int = struct.field(pytree_node=False, default=3)  # set by the env: the buffers' size

    bounds: ClassVar[dict] = {
        "num_names": Range(ge=2, le="max_names"),
        "num_letters": Range(ge=1, le=26),
        "shaping": Range(ge=0, le=1),
        "shaping_sim": Range(ge=0, le=1),
        "step_rewards": Range(ge=0, le=1),
    }


@dataclasses.dataclass(frozen=True)
class AlphabetSort(TokenEnv):
    max_names: int = 3
    name_len: int = 2

    def __post_init__(self):
        if not 2 <= self.max_names <= 8:
            raise ValueError(f"AlphabetSort needs 2 <= max_names <= 8, got {self.max_names}")
        if not 1 <= self.name_len <= 4:
            raise ValueError(f"AlphabetSort needs 1 <= name_len <= 4, got {self.name_len}")

    @property
    def name(self) -> str:
        return "text/AlphabetSort-v0"

    @property
    def default_params(self) -> AlphabetSortParams:
        return AlphabetSortParams(num_names=self.max_names, max_names=self.max_names)

    @property
    def _list_len(self) -> int:
        return self.max_names * (self.name_len + 1) - 1  # names and commas, no '='

    @property
    def prompt_len(self) -> int:
        return self._list_len + 1

    @property
    def max_completion_len(self) -> int:
        return self._list_len + 1

    @property
    def verifier(self):
        scored = V.weighted_sum(
            ("similarity_pow4", 1.0, V.power(V.similarity, 4.0)),
            ("exact_match", 0.0, V.exact_match),
            ("token_accuracy", 0.0, V.token_accuracy),
        )
        return V.gate(V.has_eos, scored)

    def _weights(self, params) -> tuple[Array, Array]:
        """(w_a, w_s): the shaping weights, clipped so that ``w_a + w_s <= 1``."""
        w_a = jnp.clip(jnp.asarray(params.shaping, jnp.float32), 0.0, 1.0)
        w_s = jnp.clip(jnp.asarray(params.shaping_sim, jnp.float32), 0.0, 1.0 - w_a)
        return w_a, w_s

    def potential(self, metrics, params):
        w_a, w_s = self._weights(params)
        return w_a * metrics["token_accuracy"] + w_s * metrics["similarity_pow4/similarity"]

    def shape_reward(self, reward, metrics, params):
        w_a, w_s = self._weights(params)
        return (1.0 - w_a - w_s) * reward + self.potential(metrics, params)

    def _join(self, names: jax.Array) -> jax.Array:
        """int32 ``[max_names * (name_len + 1)]``: every name followed by a comma."""
        commas = jnp.full((self.max_names, 1), COMMA, jnp.int32)
        return jnp.concatenate([names, commas], axis=1).reshape(-1)

    def generate(self, key, params) -> Task:
        k_names, k_free = jax.random.split(key)
        n = jnp.clip(jnp.asarray(params.num_names, jnp.int32), 2, self.max_names)
        alphabet = jnp.clip(jnp.asarray(params.num_letters, jnp.int32), 1, 26)
        letters = jax.random.randint(k_names, (self.max_names, self.name_len), 0, alphabet)
        length = n * (self.name_len + 1) - 1
        body = right_align(self._join(LETTER_A + letters), length, self._list_len)
        prompt = set_free_token(k_free, jnp.concatenate([body, jnp.full((1,), SEP, jnp.int32)]), params.held_out)
        # Read the (possibly re-drawn) names back from the prompt: the last n of max_names.
        grid = jnp.concatenate([jnp.full((1,), COMMA, jnp.int32), prompt[:-1]]).reshape(self.max_names, self.name_len + 1)
        names = grid[:, 1:] - LETTER_A  # [max_names, name_len], negative for PAD rows
        present = jnp.arange(self.max_names) >= self.max_names - n
        place = 26 ** jnp.arange(self.name_len - 1, -1, -1)
        sort_key = jnp.where(present, jnp.sum(names * place, axis=1), -1)  # absent names first
        ordered = names[jnp.argsort(sort_key)]
        joined = self._join(LETTER_A + ordered)  # absent rows first: skip them
        start = (self.max_names - n) * (self.name_len + 1)
        j = jnp.arange(self._list_len)
        answer = jnp.where(j < length, joined[jnp.clip(start + j, 0, joined.shape[0] - 1)], PAD)
        return Task(prompt, answer.astype(jnp.int32), length)
