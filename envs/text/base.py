"""The token-task environment: a prompt in, one token per step, a verifier's reward at the end.

A token task is an :class:`~jaxrl.core.env.Environment` whose episode is one completion:

* ``reset(key, params)`` draws a :class:`~jaxrl.verifiers.Task` from the task's procedural
  generator (a pure function of the key and the difficulty params) — from the *training*
  split, or from the *held-out* split when ``params.held_out`` is true.
* ``obs`` is ``int32[prompt_len + max_completion_len]``: the left-padded prompt followed by
  the tokens generated so far (PAD after them). Fixed shape, so it can sit in a scan carry.
* ``action`` is the next token id, a scalar of ``Discrete(VOCAB_SIZE)``; ids outside the
  vocabulary are clipped into it (the documented invalid-action rule); an action of another
  shape is refused when ``step`` is traced.
* ``terminated`` when the token is EOS; ``truncated`` when ``max_completion_len`` tokens were
  written without one. The reward is 0 before the last step and the verifier's score of the
  completion on it; ``info`` carries the verifier's metrics on the last step (0 before).
* **Step rewards** (``params.step_rewards``: 0 = off, the default; 1 = on): the partial-credit part of the
  reward is paid as it is earned instead of all at the end. With ``phi(c)`` the task's
  :meth:`TokenEnv.potential` of the completion written so far (e.g. ``w * token_accuracy``),
  step ``t`` pays ``phi(c_<=t) - phi(c_<t)`` and the last step pays ``R - phi(c_<last)``
  with ``R`` the episode's (shaped) reward. The sum over the episode is ``R`` exactly (the
  return is unchanged, only its timing is), so a learner that credits each token with the
  rewards from that token on (``grpo.token_credit``) sees which tokens earned the partial
  credit.
* Stepping a finished episode is harmless: the completion no longer changes and the reward
  and flags repeat the final step's (callers mask finished episodes, as the GRPO rollout does).

**Held-out split.** Every prompt's last content token (the one just before ``=``) is its
*free* token. A prompt is held out iff ``(hash(prompt with the free token blanked) + value of
the free token) % A == 0`` with ``A`` the free token's alphabet (10 digits or 26 letters),
so exactly one value in ``A`` of the free token is held out for every rest of the prompt.
The training generator draws the free token uniformly from the other ``A - 1`` values and the
held-out generator sets it to the held-out value: training can never produce a held-out
prompt, and both splits are uniform over their prompts. :func:`is_held_out` recomputes it.
"""

from __future__ import annotations

import abc
from typing import ClassVar

import jax
import jax.numpy as jnp
from flax import struct

from jaxrl.core import spaces
from jaxrl.core.env import Range, check_action_shape, first_timestep, transition
from jaxrl.core.tokens import TokenTask
from jaxrl.verifiers import EOS, PAD, Task, Verifier
from jaxrl_envs.text.vocab import DIGIT0, LETTER_A, SEP, VOCAB_SIZE

Array = jax.Array


@struct.dataclass
class TokenState:
    task: Task
    completion: Array  # int32 [max_completion_len], tokens written so far, PAD after
    time: Array  # int32 [], tokens written in this episode
    done: Array  # bool [], the episode has ended (EOS or truncation)
    potential: Array  # float32 [], phi of the completion before the last token (step rewards)


# ---------------------------------------------------------------------------------------
# The held-out split
# ---------------------------------------------------------------------------------------


def _mix(h: Array) -> Array:
    """A 32-bit integer finaliser (murmur3's fmix32) on uint32."""
    h = h ^ (h >> 16)
    h = h * jnp.uint32(0x85EBCA6B)
    h = h ^ (h >> 13)
    h = h * jnp.uint32(0xC2B2AE35)
    return h ^ (h >> 16)


def rest_hash(prompt: Array) -> Array:
    """uint32 ``[]``: hash of ``prompt`` (int32 ``[Lp]``) with its free token ``prompt[-2]`` blanked."""
    p = prompt.astype(jnp.uint32).at[-2].set(jnp.uint32(PAD))
    pos = jnp.arange(p.shape[0], dtype=jnp.uint32)
    return _mix(jnp.sum(_mix(p + jnp.uint32(0x9E3779B9) * (pos + 1)), dtype=jnp.uint32))


def _free_alphabet(token: Array) -> tuple[Array, Array]:
    """(offset, size) of the alphabet ``token`` belongs to: digits (5, 10) or letters (15, 26)."""
    is_letter = token >= LETTER_A
    return jnp.where(is_letter, LETTER_A, DIGIT0), jnp.where(is_letter, 26, 10)


def is_held_out(prompt: Array) -> Array:
    """bool ``[]``: ``prompt`` (int32 ``[Lp]``, ending ``free, =``) belongs to the held-out split."""
    offset, size = _free_alphabet(prompt[-2])
    value = (prompt[-2] - offset).astype(jnp.uint32)
    return ((rest_hash(prompt) + value) % size.astype(jnp.uint32)) == 0


def set_free_token(key: Array, prompt: Array, held_out: Array) -> Array:
    """``prompt`` with its free token ``prompt[-2]`` redrawn inside its alphabet so that
    :func:`is_held_out` equals ``held_out``: uniform over the ``A - 1`` training values, or
    the one held-out value."""
    offset, size = _free_alphabet(prompt[-2])
    size_u = size.astype(jnp.uint32)
    target = (size_u - rest_hash(prompt) % size_u) % size_u  # the held-out value
    shift = jax.random.randint(key, (), 1, size).astype(jnp.uint32)
    value = jnp.where(held_out, target, (target + shift) % size_u)
    return prompt.at[-2].set(offset + value.astype(jnp.int32))


# ---------------------------------------------------------------------------------------
# The environment
# ---------------------------------------------------------------------------------------


class TokenEnv(TokenTask):
    """Base of the token tasks. Subclasses are frozen dataclasses of static sizes that define
    ``prompt_len``, ``max_completion_len``, ``default_params``, ``generate(key, params) ->
    Task`` (honouring ``params.held_out``) and ``verifier``; a subclass that leaves one out
    cannot be instantiated (they are abstract)."""

    invalid_action_rule = "token ids are clipped into [0, VOCAB_SIZE)"
    vocab_size = VOCAB_SIZE

    @property
    @abc.abstractmethod
    def prompt_len(self) -> int:
        """Tokens of the (left-padded) prompt."""

    @property
    @abc.abstractmethod
    def max_completion_len(self) -> int:
        """Most tokens of a completion, EOS included."""

    @property
    @abc.abstractmethod
    def verifier(self) -> Verifier:
        """The total reward function ``(task, completion) -> (reward, metrics)``."""

    @abc.abstractmethod
    def generate(self, key: Array, params) -> Task:
        """A task of the split ``params.held_out`` asks for: a pure function of ``key``."""

    def decode(self, tokens) -> str:
        from jaxrl_envs.text.vocab import decode

        return decode(tokens)

    def held_out_params(self, params):
        """``params`` with the held-out split switched on."""
        return params.replace(held_out=True)

    def shape_reward(self, reward: Array, metrics: dict, params) -> Array:
        """The episode's reward from the verifier's ``reward`` and ``metrics`` (identity here;
        a task may mix in a logged, verifiable term under a params-controlled weight)."""
        del metrics, params
        return reward

    def potential(self, metrics: dict, params) -> Array:
        """float32 ``[]``: the partial credit ``phi`` a completion-so-far has earned, from the
        verifier's ``metrics`` on it (0 here: no step rewards). Paid step by step when
        ``params.step_rewards`` is true; its final value is part of the episode's reward."""
        del metrics, params
        return jnp.zeros((), jnp.float32)

    def _step_potential(self, metrics: dict, params) -> Array:
        on = jnp.asarray(getattr(params, "step_rewards", 0)) != 0  # 0/1 (a number, as configs need)
        return jnp.where(on, self.potential(metrics, params), 0.0).astype(jnp.float32)

    def _obs(self, state: TokenState) -> Array:
        return jnp.concatenate([state.task.prompt, state.completion]).astype(jnp.int32)

    def _zero_metrics(self, task: Task) -> dict:
        _, metrics = self.verifier(task, jnp.full((self.max_completion_len,), EOS, jnp.int32))
        return {k: jnp.zeros((), jnp.float32) for k in metrics}

    def reset(self, key, params):
        task = self.generate(key, params)
        completion = jnp.full((self.max_completion_len,), PAD, jnp.int32)
        state = TokenState(task, completion, jnp.zeros((), jnp.int32), jnp.zeros((), jnp.bool_), jnp.zeros((), jnp.float32))
        return state, first_timestep(self._obs(state), self._zero_metrics(task))

    def step(self, key, state, action, params):
        del key  # deterministic given the token
        check_action_shape(self.name, action, ())
        token = jnp.clip(jnp.asarray(action, jnp.int32), 0, VOCAB_SIZE - 1)
        pos = jnp.clip(state.time, 0, self.max_completion_len - 1)
        written = state.completion.at[pos].set(token)
        completion = jnp.where(state.done, state.completion, written)
        time = jnp.where(state.done, state.time, state.time + 1)
        ended_eos = jnp.any(completion == EOS)
        terminated = ended_eos
        truncated = (time >= self.max_completion_len) & ~ended_eos
        done = terminated | truncated
        reward, metrics = self.verifier(state.task, completion)
        phi = self._step_potential(metrics, params)
        # Before the end: the partial credit earned by this token. At the end: the rest of the
        # episode's reward. (A finished episode keeps its last potential: repeats are equal.)
        final = self.shape_reward(reward, metrics, params)
        reward = jnp.where(done, final - state.potential, phi - state.potential).astype(jnp.float32)
        info = {k: jnp.where(done, v, 0.0).astype(jnp.float32) for k, v in metrics.items()}
        new = TokenState(state.task, completion, time, done, jnp.where(done, state.potential, phi))
        return new, transition(self._obs(new), reward, terminated, truncated, info)

    def observation_space(self, params):
        return spaces.Box(0, VOCAB_SIZE - 1, (self.prompt_len + self.max_completion_len,), jnp.int32)

    def action_space(self, params):
        return spaces.Discrete(VOCAB_SIZE)


@struct.dataclass
class DigitParams:
    num_digits: int = 8  # digits per prompt, 1 .. max_digits (a curriculum may raise it)
    held_out: bool = False  # draw prompts from the held-out split (evaluation only)
    step_rewards: int = 0  # 1: pay the rubric's partial credit token by token (same return)
    max_digits: int = struct.field(pytree_node=False, default=8)  # set by the env: the buffers' size

    bounds: ClassVar[dict] = {"num_digits": Range(ge=1, le="max_digits"), "step_rewards": Range(ge=0, le=1)}


class DigitTask(TokenEnv):
    """Base of the digit tasks (reverse, sort, addition, parity): the reward is a
    :func:`digit_rubric` named by the ``rubric`` field, its partial credit
    :func:`digit_potential`, and the size field ``SIZE = (name, low, high)`` is checked at
    construction. Subclasses are frozen dataclasses with the size field and ``rubric``."""

    SIZE: ClassVar[tuple[str, int, int]]

    def __post_init__(self):
        field, low, high = self.SIZE
        value = getattr(self, field)
        if not low <= value <= high:
            raise ValueError(f"{type(self).__name__} needs {low} <= {field} <= {high}, got {value}")
        digit_rubric(self.rubric)  # validates the name

    @property
    def verifier(self) -> Verifier:
        return digit_rubric(self.rubric)

    def potential(self, metrics, params):
        return digit_potential(self.rubric, metrics)


class DigitListTask(DigitTask):
    """A digit task whose prompt is ``d1 ... dK =`` (:func:`digit_prompt`, K =
    ``params.num_digits``) and whose answer is K digits computed from it by :meth:`answer`,
    then EOS. Its params carry ``num_digits``, ``held_out``, ``step_rewards``."""

    SIZE = ("max_digits", 1, 32)

    @property
    def default_params(self):
        return DigitParams(num_digits=self.max_digits, max_digits=self.max_digits)

    @property
    def prompt_len(self) -> int:
        return self.max_digits + 1

    @property
    def max_completion_len(self) -> int:
        return self.max_digits + 1

    @abc.abstractmethod
    def answer(self, prompt: Array, num_digits: Array) -> Array:
        """int32 ``[max_digits]``: the answer's ``num_digits`` tokens, PAD after."""

    def generate(self, key, params) -> Task:
        prompt = digit_prompt(key, params.num_digits, self.max_digits, params.held_out)
        nd = jnp.clip(jnp.asarray(params.num_digits, jnp.int32), 1, self.max_digits)
        return Task(prompt, self.answer(prompt, nd).astype(jnp.int32), nd)


def right_align(content: Array, length: Array, width: int) -> Array:
    """int32 ``[width]``: the first ``length`` entries of ``content`` right-aligned, PAD before.

    ``content``: int32 ``[C]`` with ``C <= width``; ``length``: int32 ``[]`` in ``[0, C]``.
    """
    pos = jnp.arange(width)
    k = pos - (width - length)
    gathered = content[jnp.clip(k, 0, content.shape[0] - 1)]
    return jnp.where(k >= 0, gathered, PAD).astype(jnp.int32)


def digit_prompt(key: Array, num_digits: Array, max_digits: int, held_out: Array) -> Array:
    """int32 ``[max_digits + 1]``: ``num_digits`` random digit tokens right-aligned, then ``=``,
    with the free (last) digit drawn for the requested split."""
    k_digits, k_free = jax.random.split(key)
    nd = jnp.clip(jnp.asarray(num_digits, jnp.int32), 1, max_digits)
    digits = DIGIT0 + jax.random.randint(k_digits, (max_digits,), 0, 10)
    body = right_align(digits, nd, max_digits)
    prompt = jnp.concatenate([body, jnp.full((1,), SEP, jnp.int32)])
    return set_free_token(k_free, prompt, held_out)


def digit_potential(rubric: str, metrics: dict) -> Array:
    """The partial credit of a digit rubric: ``0.5 * token_accuracy`` for ``"dense"``, 0 for
    ``"exact"`` (which has none)."""
    if rubric == "dense":
        return 0.5 * metrics["token_accuracy"]
    return jnp.zeros((), jnp.float32)


def digit_rubric(rubric: str) -> Verifier:
    """The reward of the digit tasks (reverse, sort, addition), by name.

    * ``"exact"``: ``gate(has_eos, exact_match)`` — 1 for the exact answer followed by EOS.
    * ``"dense"``: ``0.5 * token_accuracy + 0.5 * exact_match`` — partial credit per
      correct position (the EOS counts as one more position; a completion without it can earn
      partial credit but never the exact half), 1 only for the exact answer, verifiable.

    Both log ``exact_match``, ``token_accuracy`` and ``has_eos``; range ``[0, 1]``.
    """
    from jaxrl import verifiers as V

    if rubric == "exact":
        inner = V.weighted_sum(("exact_match", 1.0, V.exact_match), ("token_accuracy", 0.0, V.token_accuracy))
        return V.gate(V.has_eos, inner)
    if rubric == "dense":
        return V.weighted_sum(
            ("exact_match", 0.5, V.exact_match),
            ("token_accuracy", 0.5, V.token_accuracy),
            ("has_eos", 0.0, V.has_eos),
        )
    raise ValueError(f"unknown rubric {rubric!r}: expected 'exact' or 'dense'")
