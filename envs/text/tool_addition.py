"""``text/ToolAddition-v0``: add two numbers, with a calculator the policy may call.

Prompt ``aaa + bbb =`` (``digits``-digit operands, zero-padded, most significant digit
first). Two turns at most. In turn 1 the policy either answers (the sum in ``digits + 1``
digits, MSD first, then EOS; the episode ends) or calls the calculator: ``? aaa + bbb $``
(the call token, two ``digits``-digit operands of its choice, EOS). The environment computes
the call and replies ``ssss =``; a malformed call, or any call while ``params.tool == 0``
(the tool disabled), gets ``! =``. Turn 2 is then the answer. Reward: the exact match of the
answer (gated on EOS), on the answer's last token; training may mix in the answer's token
accuracy (``params.shaping = w``: ``(1 - w) exact + w token_accuracy``) and pay a call
``params.call_shaping`` times the fraction of its slots that match ``? aaa + bbb $`` with the
prompt's operands (0 at evaluation). Both shaping terms land on the turn's last token, or with
``params.step_rewards = 1`` on each token that earned them (the same return). Info:
``exact_match``, ``token_accuracy``, ``tool_calls`` (a well-formed call was made).

Held-out split: the single-turn tasks' rule on the prompt (the last digit of ``bbb`` is the
free token, :func:`jaxrl_envs.text.base.set_free_token`).
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import jax
import jax.numpy as jnp
from flax import struct

from jaxrl.core.env import Range

from jaxrl import verifiers as V
from jaxrl.core.tokens import EOS, PAD, Turn, reward_on_last_token
from jaxrl.verifiers import Task
from jaxrl_envs.text.base import right_align, set_free_token
from jaxrl_envs.text.dialogue import SEP, DialogueEnv, digits_of, token_hits, value_of
from jaxrl_envs.text.vocab import CALL, ERROR, PLUS

Array = jax.Array


@struct.dataclass
class ToolAdditionParams:
    tool: int = 1  # 1: the calculator answers calls; 0: every call gets "!="
    shaping: float = 0.0  # weight of the answer's token accuracy (0 = exact match only)
    call_shaping: float = 0.0  # weight of a call's match with "?" + the prompt's operands + EOS
    step_rewards: int = 0  # 1: pay both shaping terms token by token (same return; partial credit)
    held_out: bool = False  # draw prompts from the held-out split (evaluation only)

    bounds: ClassVar[dict] = {"tool": Range(ge=0, le=1), "shaping": Range(ge=0, le=1), "call_shaping": Range(ge=0, le=1),
                              "step_rewards": Range(ge=0, le=1)}


@struct.dataclass
class ToolAdditionState:
    task: Task  # prompt "aaa+bbb=", answer: the sum's digits
    turn: Array  # int32 [], turns answered
    called: Array  # bool [], a well-formed call was made


@dataclasses.dataclass(frozen=True)
class ToolAddition(DialogueEnv):
    digits: int = 3

    def __post_init__(self):
        if not 1 <= self.digits <= 4:
            raise ValueError(f"ToolAddition needs 1 <= digits <= 4, got {self.digits}")

    name = "text/ToolAddition-v0"

    @property
    def default_params(self) -> ToolAdditionParams:
        return ToolAdditionParams()

    @property
    def prompt_len(self) -> int:
        return 2 * self.digits + 2

    @property
    def max_turns(self) -> int:
        return 2

    @property
    def max_turn_tokens(self) -> int:
        return 2 * self.digits + 3  # "?" a "+" b EOS

    @property
    def max_reply_tokens(self) -> int:
        return self.digits + 2  # the sum's digits, "="

    @property
    def verifier(self) -> V.Verifier:
        return V.gate(V.has_eos, V.weighted_sum(("exact_match", 1.0, V.exact_match), ("token_accuracy", 0.0, V.token_accuracy)))

    def start(self, key, params):
        k_ops, k_free = jax.random.split(key)
        ops = jax.random.randint(k_ops, (2,), 0, 10**self.digits)
        plus, sep = jnp.full((1,), PLUS, jnp.int32), jnp.full((1,), SEP, jnp.int32)
        prompt = jnp.concatenate([digits_of(ops[0], self.digits), plus, digits_of(ops[1], self.digits), sep])
        prompt = set_free_token(k_free, prompt, params.held_out)
        a, _ = value_of(prompt[: self.digits])
        b, _ = value_of(prompt[self.digits + 1 : 2 * self.digits + 1])
        answer = jnp.concatenate([digits_of(a + b, self.digits + 1), jnp.full((self.max_turn_tokens - self.digits - 2,), PAD, jnp.int32)])
        task = Task(prompt, answer, jnp.int32(self.digits + 1))
        state = ToolAdditionState(task, jnp.zeros((), jnp.int32), jnp.zeros((), jnp.bool_))
        zero = jnp.zeros((), jnp.float32)
        return state, prompt, {"exact_match": zero, "token_accuracy": zero, "tool_calls": zero}

    def _call(self, turn: Array) -> tuple[Array, Array, Array]:
        """``(is_call, well_formed, value)`` of a turn read as ``? a + b $``."""
        d = self.digits
        a, ok_a = value_of(turn[1 : 1 + d])
        b, ok_b = value_of(turn[2 + d : 2 + 2 * d])
        well_formed = ok_a & ok_b & (turn[1 + d] == PLUS) & (turn[2 + 2 * d] == EOS)
        return turn[0] == CALL, (turn[0] == CALL) & well_formed, a + b

    def respond(self, key, state, turn, params):
        is_call, well_formed, value = self._call(turn)
        calling = is_call & (state.turn == 0)  # a call in the last turn is a (wrong) answer
        exact, m = self.verifier(state.task, turn)
        w = jnp.clip(jnp.asarray(params.shaping, jnp.float32), 0.0, 1.0)
        ideal = jnp.concatenate([jnp.full((1,), CALL, jnp.int32), state.task.prompt[:-1], jnp.full((1,), EOS, jnp.int32)])
        call_hits = jnp.asarray(params.call_shaping, jnp.float32) * (turn == ideal).astype(jnp.float32) / turn.shape[0]
        answer_hits = w * token_hits(turn, state.task.answer, state.task.answer_len, self.end_of_turn)
        # step_rewards: the shaping paid on each token it is earned by; else all on the last token
        per_token = jnp.where(calling, call_hits, answer_hits)
        stepped = jnp.asarray(params.step_rewards) != 0
        last = reward_on_last_token(turn, self.end_of_turn, jnp.where(calling, 0.0, (1.0 - w) * exact))
        rewards = jnp.where(stepped, per_token + last, reward_on_last_token(turn, self.end_of_turn, jnp.sum(per_token)) + last)
        works = well_formed & (jnp.asarray(params.tool) != 0)
        result = jnp.concatenate([digits_of(value, self.digits + 1), jnp.full((1,), SEP, jnp.int32)])
        error = right_align(jnp.array([ERROR, SEP], jnp.int32), jnp.int32(2), self.max_reply_tokens)
        called = state.called | (calling & well_formed)
        new = ToolAdditionState(state.task, state.turn + 1, called)
        info = {"exact_match": jnp.where(calling, 0.0, exact), "token_accuracy": jnp.where(calling, 0.0, m["token_accuracy"]),
                "tool_calls": called.astype(jnp.float32)}
        return new, Turn(jnp.where(works, result, error), rewards, ~calling,
                         jnp.zeros((), jnp.bool_), info)
