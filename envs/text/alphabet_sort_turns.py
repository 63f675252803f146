"""``text/AlphabetSortTurns-v0``: multi-turn alphabet-sort, as the verifiers library's.

Turn 1's prompt ``n1 , n2 =`` brings ``first_names`` names of ``name_len`` random letters;
every later turn the environment replies with ``names_per_turn`` more (``n3 =``). Each turn
the policy answers with the *cumulative* list sorted alphabetically, comma-separated, then
EOS (the end-of-turn token). ``max_turns`` turns (3 by default: 2, 3, 4 names).

Reward: the mean over turns of ``gate(has_eos, similarity ** 4)`` against that turn's
answer (:func:`jaxrl.verifiers.lcs_ratio`), each turn paying its share ``1 / max_turns`` on
its last token, so per-token credit (``grpo.loss.token_credit``) credits a turn with its own
and the later turns' scores. ``params.shaping = w`` mixes in token accuracy for training:
a turn pays ``((1 - w) sim ** 4 + w token_accuracy) / max_turns`` (evaluation uses 0), on
its last token, or with ``params.step_rewards = 1`` the token-accuracy part on each right token.
Info on the last turn: ``similarity_pow4`` (mean over turns), ``turn_exact_match`` (mean),
``exact_match`` (every turn exact) and ``token_accuracy`` (mean).

Held-out split: the single-turn tasks' rule on the first prompt (its last letter is the free
token, :func:`jaxrl_envs.text.base.set_free_token`).
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import jax
import jax.numpy as jnp
from flax import struct

from jaxrl.core.env import Range

from jaxrl import verifiers as V
from jaxrl.core.tokens import PAD, Turn, reward_on_last_token
from jaxrl.verifiers import Task
from jaxrl_envs.text.base import set_free_token
from jaxrl_envs.text.dialogue import SEP, DialogueEnv, join_names, token_hits
from jaxrl_envs.text.vocab import LETTER_A

Array = jax.Array


@struct.dataclass
class AlphabetSortTurnsParams:
    shaping: float = 0.0  # weight of token accuracy mixed into each turn's reward (0 = the rubric)
    held_out: bool = False  # draw prompts from the held-out split (evaluation only)
    num_letters: int = 26  # names use the first num_letters letters (the free letter: all 26)
    step_rewards: int = 0  # 1: pay the shaping term token by token (same return; partial credit)

    bounds: ClassVar[dict] = {"shaping": Range(ge=0, le=1), "num_letters": Range(ge=1, le=26), "step_rewards": Range(ge=0, le=1)}


@struct.dataclass
class AlphabetSortTurnsState:
    names: Array  # int32 [total_names, name_len], letter offsets 0..25
    turn: Array  # int32 [], turns answered
    sums: Array  # float32 [3]: sim ** 4, exact match and token accuracy summed over turns
    all_exact: Array  # bool [], every turn so far exact


@dataclasses.dataclass(frozen=True)
class AlphabetSortTurns(DialogueEnv):
    turns: int = 3
    first_names: int = 2
    names_per_turn: int = 1
    name_len: int = 2

    def __post_init__(self):
        if not (1 <= self.turns <= 6 and 1 <= self.first_names and 1 <= self.names_per_turn and 1 <= self.name_len <= 4):
            raise ValueError(f"AlphabetSortTurns needs 1 <= turns <= 6, first_names >= 1, names_per_turn >= 1, 1 <= name_len <= 4; got {self}")

    name = "text/AlphabetSortTurns-v0"

    @property
    def default_params(self) -> AlphabetSortTurnsParams:
        return AlphabetSortTurnsParams()

    @property
    def total_names(self) -> int:
        return self.first_names + (self.turns - 1) * self.names_per_turn

    @property
    def prompt_len(self) -> int:
        return self.first_names * (self.name_len + 1)

    @property
    def max_turns(self) -> int:
        return self.turns

    @property
    def max_turn_tokens(self) -> int:
        return self.total_names * (self.name_len + 1)  # the longest list, then EOS

    @property
    def max_reply_tokens(self) -> int:
        return self.names_per_turn * (self.name_len + 1) if self.turns > 1 else 0

    @property
    def verifier(self) -> V.Verifier:
        return V.gate(V.has_eos, V.weighted_sum(
            ("similarity_pow4", 1.0, V.power(V.similarity, 4.0)),
            ("exact_match", 0.0, V.exact_match),
            ("token_accuracy", 0.0, V.token_accuracy),
        ))

    def start(self, key, params):
        k_names, k_free = jax.random.split(key)
        alphabet = jnp.clip(jnp.asarray(params.num_letters, jnp.int32), 1, 26)
        names = jax.random.randint(k_names, (self.total_names, self.name_len), 0, alphabet)
        prompt = join_names(LETTER_A + names[: self.first_names], SEP)
        prompt = set_free_token(k_free, prompt, params.held_out)
        names = names.at[self.first_names - 1, -1].set(prompt[-2] - LETTER_A)  # the re-drawn free letter
        state = AlphabetSortTurnsState(names, jnp.zeros((), jnp.int32), jnp.zeros((3,), jnp.float32), jnp.ones((), jnp.bool_))
        return state, prompt, self._info(state)

    def _info(self, state: AlphabetSortTurnsState) -> dict:
        n = jnp.maximum(state.turn, 1).astype(jnp.float32)
        return {
            "similarity_pow4": state.sums[0] / n, "turn_exact_match": state.sums[1] / n,
            "token_accuracy": state.sums[2] / n, "exact_match": state.all_exact.astype(jnp.float32),
        }

    def answer(self, names: Array, count: Array) -> Task:
        """The task of a turn: the first ``count`` names sorted, comma-separated (prompt: none)."""
        place = 26 ** jnp.arange(self.name_len - 1, -1, -1)
        present = jnp.arange(self.total_names) < count
        order = jnp.argsort(jnp.where(present, jnp.sum(names * place, axis=1), 26**self.name_len))
        joined = join_names(LETTER_A + names[order])  # present names first
        length = count * (self.name_len + 1) - 1
        answer = jnp.where(jnp.arange(joined.shape[0]) < length, joined, PAD)[: self.max_turn_tokens - 1]
        return Task(jnp.zeros((1,), jnp.int32), answer.astype(jnp.int32), jnp.asarray(length, jnp.int32))

    def respond(self, key, state, turn, params):
        count = self.first_names + state.turn * self.names_per_turn
        task = self.answer(state.names, count)
        sim4, m = self.verifier(task, turn)  # the gated rubric: 0 without EOS
        w = jnp.clip(jnp.asarray(params.shaping, jnp.float32), 0.0, 1.0)
        exact = m["exact_match"] * m["has_eos"]
        hits = w * token_hits(turn, task.answer, task.answer_len, self.end_of_turn) / self.turns
        # step_rewards: the shaping term paid on the tokens that earned it; else on the last token
        stepped = jnp.asarray(params.step_rewards) != 0
        rewards = reward_on_last_token(turn, self.end_of_turn, (1.0 - w) * sim4 / self.turns + jnp.where(stepped, 0.0, jnp.sum(hits)))
        rewards = rewards + jnp.where(stepped, hits, 0.0)
        new = AlphabetSortTurnsState(
            state.names, state.turn + 1, state.sums + jnp.stack([sim4, exact, m["token_accuracy"]]),
            state.all_exact & (exact > 0.5),
        )
        nxt = jax.lax.dynamic_slice_in_dim(state.names, jnp.minimum(count, self.total_names - self.names_per_turn), self.names_per_turn)
        reply = join_names(LETTER_A + nxt, SEP)[: self.max_reply_tokens]
        done = new.turn >= self.turns
        return new, Turn(reply, rewards, done, jnp.zeros((), jnp.bool_), self._info(new))
