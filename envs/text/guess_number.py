"""``text/GuessNumber-v0``: find a secret number by guessing, told "higher" or "lower".

The secret is uniform in ``[0, range_size)``. The prompt is ``=`` (left-padded): the range is
part of the task, not of the prompt. Each turn the policy guesses two digits then EOS
(``07$``); the environment replies ``<`` (the secret is lower), ``>`` (higher), ``=``
(found: the episode ends) or ``!`` (not a two-digit number). ``max_turns`` guesses at most
(then truncated). Reward: ``1 - (t - 1) / max_turns`` when found at turn ``t``, 0 when not,
on the last guess; training may add ``params.closeness = w`` per turn, ``w (1 - |g - s| /
range_size) / max_turns`` (0 at evaluation). Info: ``solved`` and ``solve_turns`` (``t`` when
found, else 0): mean turns to solve = ``mean(solve_turns) / mean(solved)``; binary search
needs at most ``log2(range_size) + 1``.

Held-out split: the secrets ``s`` with ``s % 4 == 3`` are evaluation's only; training draws the
others. The policy never sees the secret, so a policy that only memorised the training
secrets' guess sequences cannot find the held-out ones: it has to search.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import jax
import jax.numpy as jnp
from flax import struct

from jaxrl.core.env import Range

from jaxrl.core.tokens import PAD, Turn, reward_on_last_token
from jaxrl_envs.text.dialogue import SEP, DialogueEnv, value_of
from jaxrl_envs.text.vocab import EOS, ERROR, HIGHER, LOWER

Array = jax.Array


@struct.dataclass
class GuessNumberParams:
    closeness: float = 0.0  # per-turn reward for guesses near the secret (0 = the rubric)
    held_out: bool = False  # draw secrets from the held-out split (evaluation only)

    bounds: ClassVar[dict] = {"closeness": Range(ge=0, le=1)}


@struct.dataclass
class GuessNumberState:
    secret: Array  # int32 []
    turn: Array  # int32 [], guesses made


@dataclasses.dataclass(frozen=True)
class GuessNumber(DialogueEnv):
    range_size: int = 16
    turns: int = 6

    def __post_init__(self):
        if not (4 <= self.range_size <= 100 and self.range_size % 4 == 0 and 1 <= self.turns <= 12):
            raise ValueError(f"GuessNumber needs range_size in [4, 100] divisible by 4 and 1 <= turns <= 12; got {self}")

    name = "text/GuessNumber-v0"

    @property
    def default_params(self) -> GuessNumberParams:
        return GuessNumberParams()

    @property
    def prompt_len(self) -> int:
        return 1

    @property
    def max_turns(self) -> int:
        return self.turns

    @property
    def max_turn_tokens(self) -> int:
        return 3

    @property
    def max_reply_tokens(self) -> int:
        return 1

    def start(self, key, params):
        k = jax.random.randint(key, (), 0, self.range_size // 4)
        offset = jax.random.randint(jax.random.fold_in(key, 1), (), 0, 3)
        secret = 4 * k + jnp.where(params.held_out, 3, offset)
        zero = jnp.zeros((), jnp.float32)
        state = GuessNumberState(secret.astype(jnp.int32), jnp.zeros((), jnp.int32))
        return state, jnp.full((1,), SEP, jnp.int32), {"solved": zero, "solve_turns": zero}

    def respond(self, key, state, turn, params):
        guess, ok = value_of(turn[:2])
        ok = ok & (turn[2] == EOS)
        t = state.turn + 1
        found = ok & (guess == state.secret)
        reply = jnp.where(~ok, ERROR, jnp.where(found, SEP, jnp.where(state.secret < guess, LOWER, HIGHER)))
        near = jnp.clip(1.0 - jnp.abs(guess - state.secret) / self.range_size, 0.0, 1.0) * ok
        w = jnp.asarray(params.closeness, jnp.float32)
        reward = jnp.where(found, 1.0 - (t - 1) / self.turns, 0.0) + w * near / self.turns
        truncated = ~found & (t >= self.turns)
        info = {"solved": found.astype(jnp.float32), "solve_turns": jnp.where(found, t, 0).astype(jnp.float32)}
        reply = jnp.full((1,), PAD, jnp.int32).at[0].set(reply)
        return GuessNumberState(state.secret, t), Turn(reply, reward_on_last_token(turn, self.end_of_turn, reward), found, truncated, info)
