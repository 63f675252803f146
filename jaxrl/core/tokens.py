"""The token-episode contract: what an algorithm may know about an env whose actions are tokens.

A token episode is a dialogue with fixed caps: a prompt (``prompt_len`` tokens), then up to
``max_turns`` turns. In a turn the policy writes up to ``max_turn_tokens`` tokens, ending at
``end_of_turn`` (the verifiers' EOS) or at the cap; the environment then answers with
``max_reply_tokens`` tokens (feedback, a tool result, the next question; left-padded with
PAD) through :meth:`TokenTask.respond`, which also pays the turn's per-token rewards and says
whether the episode terminated or was truncated. The slots are fixed, so a whole dialogue is
``int32[dialogue_len]`` with ``dialogue_len = prompt_len + max_turns * (max_turn_tokens +
max_reply_tokens)``: turn ``k`` starts at ``prompt_len + k * (max_turn_tokens +
max_reply_tokens)``, its reply right after its ``max_turn_tokens`` slots.

A single completion is the one-turn case: :class:`TokenTask` is an env stepped one token
at a time (obs = prompt then completion, ``int32[prompt_len + max_completion_len]``) whose
default :meth:`TokenTask.start` / :meth:`TokenTask.respond` run its ``reset`` / ``step``, so
the dialogue rollout drives it like any other. :class:`DialogueTask` is the many-turn case:
a task writes ``start`` and ``respond`` and inherits a token-by-token ``reset`` / ``step``
(the Environment contract, for checks and adapters). Algorithms dispatch on
``isinstance(env, TokenTask)`` and never import the env suite.
"""

from __future__ import annotations

import abc
from typing import Any, Callable

import jax
import jax.numpy as jnp
from flax import struct

from jaxrl.core import spaces
from jaxrl.core.env import Environment, check_action_shape, first_timestep, transition, tree_select

Array = jax.Array

PAD = 0  #: padding id (prompts and replies are left-padded, unused slots hold it)
EOS = 1  #: end of a completion, and the default end-of-turn token


@struct.dataclass
class Turn:
    """The environment's answer to one policy turn."""

    reply: Array  # int32 [max_reply_tokens], left-padded with PAD (all PAD: no reply)
    rewards: Array  # float32 [max_turn_tokens], reward of each token of the turn just written
    terminated: Array  # bool [], the episode ended (no more turns)
    truncated: Array  # bool [], the episode was cut off by a limit
    info: dict  # str -> float32 [], the env's metrics (read on the episode's last turn)
    failed: Array | None = None  # bool [], the env could not answer (a remote session's fault): the episode is masked out


def reward_on_last_token(turn: Array, end_of_turn: int, reward: Array) -> Array:
    """float32 ``[Tt]``: ``reward`` on the turn's last written token (its first
    ``end_of_turn``, else the last slot), 0 elsewhere: a turn reward as per-token rewards."""
    is_end = turn == end_of_turn
    last = jnp.where(jnp.any(is_end), jnp.argmax(is_end), turn.shape[0] - 1)
    return jnp.where(jnp.arange(turn.shape[0]) == last, reward, 0.0).astype(jnp.float32)


def turn_tokens_written(turn: Array, end_of_turn: int) -> Array:
    """int32 ``[]``: tokens the policy wrote in ``turn`` (through its first end-of-turn)."""
    is_end = turn == end_of_turn
    return jnp.where(jnp.any(is_end), jnp.argmax(is_end) + 1, turn.shape[0]).astype(jnp.int32)


class TokenTask(Environment, metaclass=abc.ABCMeta):
    """An env whose actions are tokens of a fixed vocabulary (see the module docstring).

    Subclasses stepped token by token define ``reset`` / ``step`` and get the one-turn
    dialogue for free; multi-turn tasks subclass :class:`DialogueTask` instead.
    """

    @property
    @abc.abstractmethod
    def vocab_size(self) -> int:
        """Number of token ids; actions are ``int32`` in ``[0, vocab_size)``."""

    @property
    @abc.abstractmethod
    def prompt_len(self) -> int:
        """Prompt tokens at the front of every observation."""

    @property
    @abc.abstractmethod
    def max_completion_len(self) -> int:
        """The most tokens after the prompt (the token-by-token episode's step cap)."""

    @abc.abstractmethod
    def decode(self, tokens: Any) -> str:
        """Host-side text of a token sequence (numpy or list of ints), for transcripts."""

    @classmethod
    def in_tokenizer(cls, build: Callable[..., Environment], wording: Any) -> Environment:
        """A task of this kind in a tokenizer's ids, built once: ``build(**options)`` calls the
        registered factory, ``wording`` (:class:`jaxrl.text.tokenized.Wording`) says which
        tokenizer ``env.tokenizer`` asks for and what rows ``env.text`` gives. Each kind says
        how with this one method: here, a task of its own small vocabulary is built as
        registered and each symbol mapped to one tokenizer id (``wording.symbols``); a text
        task (:class:`jaxrl.text.task.TextTask`) is built from its rows in the tokenizer; a
        task that speaks a tokenizer natively is built with that tokenizer's path."""
        return wording.symbols(build())

    #: Info keys that evaluation reports per episode beside the reward, each with what to call
    #: it: ``(("turns", "turns to solve"),)`` makes ``jaxrl eval`` print that key's mean, std
    #: and 95% CI over the held-out episodes (a task's own figure of merit). The per-episode
    #: value is the key's info value at the episode's *last* step (episode figures such as
    #: ``turns`` or ``solved``); for the mean of a per-turn quantity, put its running mean
    #: over the turns in the info (docs/writing_a_token_task.md, "the format").
    eval_scores: tuple[tuple[str, str], ...] = ()

    #: Whether ``respond`` may report a failed episode (``Turn.failed``, e.g. a remote session
    #: that dropped): the rollout then masks such episodes out of the loss.
    can_fail: bool = False

    # -- the dialogue shape (one turn, no reply, unless a subclass says otherwise) --------

    @property
    def max_turns(self) -> int:
        """Policy turns per episode."""
        return 1

    @property
    def max_turn_tokens(self) -> int:
        """Token slots of one policy turn."""
        return self.max_completion_len

    @property
    def max_reply_tokens(self) -> int:
        """Token slots of one environment reply (0: the env never speaks)."""
        return 0

    @property
    def end_of_turn(self) -> int:
        """The token that ends a policy turn."""
        return EOS

    @property
    def pad_id(self) -> int:
        """The padding id: prompts and replies are left-padded with it and the slots after a
        turn's end hold it. A policy over a real tokenizer treats it as "no token" (never
        attended, no position), so it must be an id the task never needs as content."""
        return PAD

    @property
    def dialogue_len(self) -> int:
        """Tokens of a whole dialogue: prompt, then ``max_turns`` x (turn + reply) slots."""
        return self.prompt_len + self.max_turns * (self.max_turn_tokens + self.max_reply_tokens)

    def start(self, key: Array, params: Any) -> tuple[Any, Array, dict]:
        """``(state, prompt int32[prompt_len], zero info)`` of a new episode."""
        state, ts = self.reset(key, params)
        return state, ts.obs[: self.prompt_len], jax.tree_util.tree_map(jnp.zeros_like, ts.info)

    def respond(self, key: Array, state: Any, turn: Array, params: Any) -> tuple[Any, Turn]:
        """The env's answer to ``turn`` (int32 ``[max_turn_tokens]``, PAD after the
        end-of-turn). Default, the one-turn case: ``step`` through the turn's tokens."""
        keys = jax.random.split(key, turn.shape[0])
        _, ts0 = jax.eval_shape(self.step, keys[0], state, turn[0], params)
        zero_info = jax.tree_util.tree_map(lambda s: jnp.zeros(s.shape, s.dtype), ts0.info)

        def body(c, xs):
            state, alive, info, term, trunc = c
            k, tok = xs
            new, ts = self.step(k, state, tok, params)
            ended = alive & ts.done
            out = (
                tree_select(alive, new, state), alive & ~ts.done, tree_select(ended, ts.info, info),
                term | (ended & ts.terminated), trunc | (ended & ts.truncated & ~ts.terminated),
            )
            return out, jnp.where(alive, ts.reward, 0.0).astype(jnp.float32)

        false = jnp.zeros((), jnp.bool_)
        (state, alive, info, term, trunc), rewards = jax.lax.scan(
            body, (state, ~false, zero_info, false, false), (keys, turn))
        reply = jnp.full((self.max_reply_tokens,), self.pad_id, jnp.int32)
        return state, Turn(reply, rewards, term, trunc | alive, info)


@struct.dataclass
class DialogueState:
    """The token-by-token view of a dialogue (:class:`DialogueTask`'s ``reset`` / ``step``)."""

    inner: Any  # the task's own state (from start / respond)
    tokens: Array  # int32 [dialogue_len], the dialogue so far, PAD in unused slots
    turn: Array  # int32 [], current turn
    pos: Array  # int32 [], tokens written in the current turn
    done: Array  # bool []


class DialogueTask(TokenTask):
    """A multi-turn token task: subclasses define ``start``, ``respond``, the dialogue shape
    (``max_turns``, ``max_turn_tokens``, ``max_reply_tokens``), ``prompt_len``,
    ``vocab_size``, ``decode`` and ``default_params``. ``reset`` / ``step`` (one token per
    step, obs = the dialogue so far) are derived from them."""

    invalid_action_rule = "token ids are clipped into [0, vocab_size)"

    @abc.abstractmethod
    def start(self, key, params):
        """``(state, prompt int32[prompt_len], zero info)`` (see :meth:`TokenTask.start`)."""

    @abc.abstractmethod
    def respond(self, key, state, turn, params):
        """``(state, Turn)`` after the policy's ``turn`` (see :meth:`TokenTask.respond`)."""

    @property
    def max_completion_len(self) -> int:
        return self.dialogue_len - self.prompt_len

    def turn_start(self, turn: Array) -> Array:
        """int32 ``[]``: the dialogue position of turn ``turn``'s first slot."""
        return self.prompt_len + turn * (self.max_turn_tokens + self.max_reply_tokens)

    def reset(self, key, params):
        inner, prompt, info = self.start(key, params)
        tokens = jnp.full((self.dialogue_len,), self.pad_id, jnp.int32).at[: self.prompt_len].set(prompt)
        zero = jnp.zeros((), jnp.int32)
        return DialogueState(inner, tokens, zero, zero, jnp.zeros((), jnp.bool_)), first_timestep(tokens, info)

    def step(self, key, state, action, params):
        check_action_shape(self.name, action, ())
        token = jnp.clip(jnp.asarray(action, jnp.int32), 0, self.vocab_size - 1)
        start = self.turn_start(state.turn)
        tokens = state.tokens.at[start + state.pos].set(token)
        over = (token == self.end_of_turn) | (state.pos + 1 >= self.max_turn_tokens)
        turn = jax.lax.dynamic_slice_in_dim(tokens, start, self.max_turn_tokens)
        inner, answer = self.respond(key, state.inner, turn, params)
        last = state.turn + 1 >= self.max_turns
        term = over & answer.terminated
        trunc = over & ~answer.terminated & (answer.truncated | last)
        replied = jax.lax.dynamic_update_slice_in_dim(tokens, answer.reply, start + self.max_turn_tokens, 0)
        new = DialogueState(
            tree_select(over, inner, state.inner), jnp.where(over & ~(term | trunc), replied, tokens),
            jnp.where(over, state.turn + 1, state.turn), jnp.where(over, 0, state.pos + 1), term | trunc,
        )
        new = tree_select(state.done, state, new)  # a finished dialogue stays as it was
        reward = jnp.where(over & ~state.done, jnp.sum(answer.rewards), 0.0).astype(jnp.float32)
        info = jax.tree_util.tree_map(lambda v: jnp.where(term | trunc, v, 0.0).astype(jnp.float32), answer.info)
        return new, transition(new.tokens, reward, term & ~state.done, trunc & ~state.done, info)

    def observation_space(self, params):
        return spaces.Box(0, self.vocab_size - 1, (self.dialogue_len,), jnp.int32)

    def action_space(self, params):
        return spaces.Discrete(self.vocab_size)
