"""``text/GuessRange-v0``: find a secret in the range the prompt names, told "higher" or "lower".

The prompt is two number tokens ``lo hi``: a range of ``n = hi - lo + 1`` values inside
``[0, window)``, ``n`` uniform in ``[min_size, max_size]``, then ``lo`` uniform over the split's
starts; the secret is uniform in the range.
Each turn the policy writes one number token (its guess); the environment replies ``<`` (the
secret is lower), ``>`` (higher), ``=`` (found: the episode ends) or ``!`` (not a number).
``max_turns`` guesses at most (then truncated). The task declares its own vocabulary: one
token per number (``vocab_size = 6 + window``, see :data:`SYMBOLS`).

Reward (the rubric): ``1 - (t - 1) / max_turns`` on the guess that finds the secret at turn
``t``, else 0. Training may add ``params.bits = w``: each guess pays ``w`` times the
information it gained, ``log2(c_before / c_after) / log2(n)`` with ``c`` the count of values
still consistent with the replies (a solved episode gains ``w`` in all; 0 at evaluation);
``params.turn_cost = 1`` pays the rubric's turn penalty as it is incurred, ``-1 / max_turns``
a miss and 1 the find (a solved episode's return unchanged, an unsolved one -1 instead of 0),
so per-token credit charges each turn with its own cost.
Info (``eval_scores``): ``solved``; ``turns`` (``t``, or ``max_turns + 1`` when not found: a
mean that never hides a failure); ``bisection_turns``, what the search ``(l + h) // 2`` needs.

Held-out split, a rule on the range: ``[lo, hi]`` is held out iff ``(lo + 3 n) % K == 4``
with ``K = max_size - min_size + 1`` sizes, so one start in ``K`` is held out for every size
(:func:`is_held_out`); training draws only the others. Evaluation's ranges are pairs
``(lo, hi)`` no training prompt names (each bound alone appears in training): the policy has
to search inside a range it has never been given.
"""

from __future__ import annotations

import dataclasses
import math
from typing import ClassVar

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from jaxrl.core.env import Range
from jaxrl.core.tokens import PAD, DialogueTask, Turn

Array = jax.Array

FOUND, LOWER, HIGHER, ERROR = 2, 3, 4, 5
NUM0 = 6  #: the token of the number 0; number ``v`` is ``NUM0 + v``
#: The non-number tokens (PAD and EOS are the contract's fixed ids; EOS is never needed here).
SYMBOLS = {PAD: "", 1: "$", FOUND: "=", LOWER: "<", HIGHER: ">", ERROR: "!"}


@struct.dataclass
class GuessRangeParams:
    bits: float = 0.0  # weight of the per-guess information reward (training shaping; 0 = the rubric)
    turn_cost: int = 0  # 1: pay the rubric's turn penalty as incurred (-1/max_turns a miss, +1 the find)
    held_out: bool = False  # draw ranges from the held-out split (evaluation only)

    bounds: ClassVar[dict] = {"bits": Range(ge=0, le=1), "turn_cost": Range(ge=0, le=1)}


@struct.dataclass
class GuessRangeState:
    secret: Array  # int32 [], the number to find
    lo: Array  # int32 [], smallest value still consistent with the replies
    hi: Array  # int32 [], largest value still consistent with the replies
    size: Array  # int32 [], n of the prompt's range
    turn: Array  # int32 [], guesses made
    bisection: Array  # int32 [], guesses the textbook search needs for this range and secret


def is_held_out(lo, hi, min_size: int = 9, max_size: int = 16):
    """bool: the range ``[lo, hi]`` belongs to the held-out split (arrays or ints)."""
    return (lo + 3 * (hi - lo + 1)) % (max_size - min_size + 1) == 4


def bisection_turns(lo: Array, hi: Array, secret: Array, max_size: int) -> Array:
    """int32 ``[]``: guesses the textbook search (guess ``(l + h) // 2``) makes to find ``secret``."""

    def body(_, c):
        l, h, t, done = c
        g = (l + h) // 2
        found = g == secret
        return (jnp.where(secret > g, g + 1, l), jnp.where(secret < g, g - 1, h), t + (~done).astype(jnp.int32),
                done | found)

    zero = jnp.zeros((), jnp.int32)
    _, _, t, _ = jax.lax.fori_loop(0, int(math.log2(max_size)) + 1, body, (lo, hi, zero, jnp.zeros((), jnp.bool_)))
    return t


@dataclasses.dataclass(frozen=True)
class GuessRange(DialogueTask):
    window: int = 32
    min_size: int = 9
    max_size: int = 16
    turns: int = 8

    def __post_init__(self):
        if not (2 <= self.min_size <= self.max_size <= self.window <= 250 and self.max_size - self.min_size >= 4):
            raise ValueError(f"GuessRange needs 2 <= min_size <= max_size <= window <= 250 and at least 5 sizes; got {self}")
        if not 1 <= self.turns <= 32:
            raise ValueError(f"GuessRange needs 1 <= turns <= 32, got {self.turns}")

    name = "text/GuessRange-v0"
    eval_scores = (("turns", "turns to solve (unsolved: max_turns + 1)"), ("solved", "solve rate"),
                   ("bisection_turns", "turns bisection needs"))
    invalid_action_rule = "token ids are clipped into [0, vocab_size); a non-number guess gets the reply '!'"

    @property
    def vocab_size(self) -> int:
        return NUM0 + self.window

    @property
    def default_params(self) -> GuessRangeParams:
        return GuessRangeParams()

    @property
    def prompt_len(self) -> int:
        return 2

    @property
    def max_turns(self) -> int:
        return self.turns

    @property
    def max_turn_tokens(self) -> int:
        return 1

    @property
    def max_reply_tokens(self) -> int:
        return 1

    def decode(self, tokens) -> str:
        out = []
        for t in np.asarray(tokens).reshape(-1).tolist():
            if t in SYMBOLS:
                out += [SYMBOLS[t]] if t != PAD else []
            elif NUM0 <= t < NUM0 + self.window:
                out.append(str(t - NUM0))
            else:
                out.append(f"?{t}")
        return " ".join(out)

    def held_out_params(self, params):
        return params.replace(held_out=True)

    def draw_range(self, key: Array, held_out: Array) -> tuple[Array, Array]:
        """``(lo, size)`` int32 of a range from the requested split: the size uniform, then
        ``lo`` uniform over that split's starts in ``[0, window - size]``."""
        k_size, k_lo = jax.random.split(key)
        size = jax.random.randint(k_size, (), self.min_size, self.max_size + 1)
        starts = jnp.arange(self.window)
        allowed = (starts <= self.window - size) & (is_held_out(starts, starts + size - 1, self.min_size, self.max_size) == held_out)
        lo = jax.random.categorical(k_lo, jnp.where(allowed, 0.0, -jnp.inf))
        return lo.astype(jnp.int32), size.astype(jnp.int32)

    def start(self, key, params):
        k_range, k_secret = jax.random.split(key)
        lo, size = self.draw_range(k_range, jnp.asarray(params.held_out))
        secret = lo + jax.random.randint(k_secret, (), 0, size)
        secret = secret.astype(jnp.int32)
        bisection = bisection_turns(lo, lo + size - 1, secret, self.max_size)
        state = GuessRangeState(secret, lo, lo + size - 1, size, jnp.zeros((), jnp.int32), bisection)
        prompt = (NUM0 + jnp.stack([lo, lo + size - 1])).astype(jnp.int32)
        zero = jnp.zeros((), jnp.float32)
        return state, prompt, {"solved": zero, "turns": zero, "bisection_turns": zero}

    def respond(self, key, state, turn, params):
        del key
        guess = turn[0].astype(jnp.int32) - NUM0
        ok = (guess >= 0) & (guess < self.window)
        t = state.turn + 1
        found = ok & (guess == state.secret)
        lower = ok & (state.secret < guess)
        higher = ok & (state.secret > guess)
        reply = jnp.where(~ok, ERROR, jnp.where(found, FOUND, jnp.where(lower, LOWER, HIGHER)))
        lo = jnp.where(higher, jnp.maximum(state.lo, guess + 1), state.lo)
        hi = jnp.where(lower, jnp.minimum(state.hi, guess - 1), state.hi)
        lo, hi = jnp.where(found, state.secret, lo), jnp.where(found, state.secret, hi)
        gained = jnp.log2((state.hi - state.lo + 1) / (hi - lo + 1)) / jnp.log2(state.size.astype(jnp.float32))
        rubric = jnp.where(found, 1.0 - (t - 1) / self.turns, 0.0)
        rubric = jnp.where(jnp.asarray(params.turn_cost) != 0, jnp.where(found, 1.0, -1.0 / self.turns), rubric)
        reward = rubric + jnp.asarray(params.bits, jnp.float32) * gained
        truncated = ~found & (t >= self.turns)
        info = {
            "solved": found.astype(jnp.float32),
            "turns": jnp.where(found, t, self.turns + 1).astype(jnp.float32),
            "bisection_turns": state.bisection.astype(jnp.float32),
        }
        new = state.replace(lo=lo, hi=hi, turn=t)
        return new, Turn(jnp.full((1,), reply, jnp.int32), reward.astype(jnp.float32).reshape(1), found, truncated, info)
