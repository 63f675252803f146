"""``env: {mix: [...]}``: several token tasks in one GRPO run, each episode tagged with its source.

:class:`MixTask` is a :class:`~jaxrl.core.tokens.DialogueTask` over member tasks that share
one token shape (vocabulary, pad and end-of-turn ids, prompt length, turns, turn and reply
slots: :func:`check_shapes` refuses a mismatch with one line naming the member). ``start``
draws the episode's member from its reset key, by weight (``jax.random.categorical`` over
the log weights, from a key split off the reset key, so the draw is a pure function of the
run's key; a GRPO group shares its reset key and so its source); every member starts on
every row (``vmap`` runs them all: an on-device task costs its ``start`` and ``respond``
per row, a remote one opens sessions only for the rows drawn from it, through
``RemoteTask.start``'s ``active``) and the drawn member's prompt, state and answer are kept.

The episode's info carries its source: ``source/<name>`` (1 on the episodes drawn from
``<name>``), ``<name>/<key>`` (the member's own info key ``<key>``, 0 on other episodes) and
the keys every member reports, as they are. :func:`source_metrics` turns a batch's info and
rewards into per-source figures (``reward/<name>/mean`` ...), the means over that source's
episodes only; GRPO's update and evaluation log them. Guide: docs/remote_envs.md#mixing-tasks.
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
from flax import struct

from jaxrl.core import spaces
from jaxrl.core.tokens import DialogueTask, TokenTask, Turn

Array = jax.Array

#: The id a mixed env section runs under (run directories, records).
ENV_ID = "mix"
#: Info keys ``source/<name>``: 1 on the episodes drawn from ``<name>``.
SOURCE = "source/"
#: ``fold_in`` salt of the key that draws an episode's member from its reset key.
DRAW_SALT = 0x6D6978  # "mix"

#: The token shape every member must share, with what to call each part in an error.
SHAPE = (("vocab_size", "vocabulary"), ("pad_id", "pad id"), ("end_of_turn", "end-of-turn id"),
         ("prompt_len", "prompt length"), ("max_turns", "turns"), ("max_turn_tokens", "turn tokens"),
         ("max_reply_tokens", "reply tokens"))


def check_shapes(members: tuple[TokenTask, ...], names: tuple[str, ...]) -> None:
    """``ValueError`` (one line naming the member and the part) unless every member is a token
    task of the first member's shape (:data:`SHAPE`)."""
    for i, (task, name) in enumerate(zip(members, names)):
        if not isinstance(task, TokenTask):
            raise ValueError(f"env.mix[{i}] ({name}): {task.name} is not a token task; a mix trains a language model on token tasks")
    first = members[0]
    for i, (task, name) in enumerate(zip(members[1:], names[1:]), start=1):
        for attr, what in SHAPE:
            a, b = getattr(task, attr), getattr(first, attr)
            if a != b:
                hint = {"prompt_len": "set its prompt_len (text.prompt_len / remote.prompt_len) to match",
                        "max_turn_tokens": "set its completion_len (remote: turn_tokens) to match",
                        "max_reply_tokens": "set its reply_tokens to match",
                        "vocab_size": "the tasks must speak one tokenizer (env.tokenizer)"}.get(attr, "")
                raise ValueError(f"env.mix[{i}] ({name}): {what} {a} where env.mix[0] ({names[0]}) has {b}"
                                 + (f"; {hint}" if hint else ""))


@struct.dataclass
class MixParams:
    members: tuple  # each member's params, in order


@struct.dataclass
class MixState:
    source: Array  # int32 [], the member this episode was drawn from
    members: tuple  # each member's state (only the drawn one's is played)


@dataclasses.dataclass(frozen=True, eq=False)
class MixTask(DialogueTask):
    """Member token tasks mixed by weight (module docstring); build with :func:`mix_task`."""

    members: tuple
    names: tuple
    weights: tuple

    @property
    def name(self) -> str:
        return "mix:" + ",".join(self.names)

    @property
    def first(self) -> TokenTask:
        return self.members[0]

    @property
    def vocab_size(self) -> int:
        return self.first.vocab_size

    @property
    def prompt_len(self) -> int:
        return self.first.prompt_len

    @property
    def max_turns(self) -> int:
        return self.first.max_turns

    @property
    def max_turn_tokens(self) -> int:
        return self.first.max_turn_tokens

    @property
    def max_reply_tokens(self) -> int:
        return self.first.max_reply_tokens

    @property
    def end_of_turn(self) -> int:
        return self.first.end_of_turn

    @property
    def pad_id(self) -> int:
        return self.first.pad_id

    @property
    def can_fail(self) -> bool:  # type: ignore[override]
        return any(m.can_fail for m in self.members)

    @property
    def eval_scores(self) -> tuple:  # type: ignore[override]
        """The figures every member reports (a mean over all sources)."""
        shared = [s for s in self.members[0].eval_scores if all(s in m.eval_scores for m in self.members[1:])]
        return tuple(shared)

    @property
    def default_params(self) -> MixParams:
        return MixParams(tuple(m.default_params for m in self.members))

    def held_out_params(self, params):
        return MixParams(tuple(m.held_out_params(p) for m, p in zip(self.members, params.members)))

    def episode_bound(self, params):
        return self.max_turns * self.max_turn_tokens

    def draw(self, key) -> Array:
        """int32 ``[]``: the member of the episode whose reset key (or evaluation row index) is
        ``key``: by weight from a key folded off it (a row index ``i``: from ``PRNGKey(i)``)."""
        if jnp.issubdtype(jnp.result_type(key), jnp.signedinteger) and jnp.ndim(key) == 0:
            key = jax.random.PRNGKey(key)
        logits = jnp.log(jnp.asarray(self.weights, jnp.float32))
        return jax.random.categorical(jax.random.fold_in(key, DRAW_SALT), logits).astype(jnp.int32)

    # -- info --------------------------------------------------------------------------------

    def _shared_keys(self, infos: list[dict]) -> list[str]:
        return sorted(set.intersection(*(set(i) for i in infos)))

    def _info(self, source: Array, infos: list[dict]) -> dict:
        """The mix's info of an episode drawn from ``source``, from every member's ``infos``."""
        out = {}
        for i, (name, info) in enumerate(zip(self.names, infos)):
            on = source == i
            out[SOURCE + name] = on.astype(jnp.float32)
            for key, value in info.items():
                out[f"{name}/{key}"] = jnp.where(on, value, 0.0).astype(jnp.float32)
        for key in self._shared_keys(infos):
            out[key] = _pick(source, [info[key] for info in infos]).astype(jnp.float32)
        return out

    # -- the dialogue ------------------------------------------------------------------------

    def start(self, key, params):
        source = self.draw(key)
        started = [
            task.start(key, p, active=source == i) if _takes_active(task) else task.start(key, p)  # remote: its rows only
            for i, (task, p) in enumerate(zip(self.members, params.members))
        ]
        states, prompts, infos = (list(x) for x in zip(*started))
        prompt = _pick(source, prompts)
        return MixState(source, tuple(states)), prompt.astype(jnp.int32), self._info(source, infos)

    def respond(self, key, state, turn, params):
        answered = [task.respond(key, s, turn, p) for task, s, p in zip(self.members, state.members, params.members)]
        new_states, turns = [a[0] for a in answered], [a[1] for a in answered]
        src = state.source
        failed = None
        if self.can_fail:
            failed = _pick(src, [t.failed if t.failed is not None else jnp.zeros((), jnp.bool_) for t in turns])
        answer = Turn(
            _pick(src, [t.reply for t in turns]).astype(jnp.int32),
            _pick(src, [t.rewards for t in turns]).astype(jnp.float32),
            _pick(src, [jnp.asarray(t.terminated, jnp.bool_) for t in turns]),
            _pick(src, [jnp.asarray(t.truncated, jnp.bool_) for t in turns]),
            self._info(src, [t.info for t in turns]),
            failed,
        )
        return MixState(src, tuple(new_states)), answer

    def decode(self, tokens) -> str:
        return self.first.decode(tokens)

    def observation_space(self, params):
        return spaces.Box(0, self.vocab_size - 1, (self.dialogue_len,), jnp.int32)


def _pick(source: Array, values: list) -> Array:
    """``values[source]`` (arrays of one shape), a select per member."""
    out = jnp.asarray(values[0])
    for i, v in enumerate(values[1:], start=1):
        out = jnp.where(source == i, jnp.asarray(v), out)
    return out


def _takes_active(task) -> bool:
    """A task that starts host sessions (remote, verifiers): it starts them for its rows only."""
    if not task.can_fail:
        return False
    from jaxrl.text.remote import RemoteTask

    return isinstance(task, RemoteTask)


def mix_task(members: tuple[TokenTask, ...], names: tuple[str, ...], weights: tuple[float, ...]) -> MixTask:
    """The :class:`MixTask` of ``members`` (their shapes checked: :func:`check_shapes`)."""
    if not members or len(members) != len(names) or len(names) != len(weights):
        raise ValueError("env.mix: members, names and weights must be non-empty lists of one length")
    if any(not (math.isfinite(w) and w > 0) for w in weights):
        raise ValueError(f"env.mix: weights must be positive numbers, got {list(weights)}")
    check_shapes(tuple(members), tuple(names))
    return MixTask(tuple(members), tuple(names), tuple(float(w) for w in weights))


# ---------------------------------------------------------------------------------------
# Per-source figures
# ---------------------------------------------------------------------------------------


def source_metrics(info: dict, rewards: Array) -> tuple[dict, dict]:
    """``(plain info, per-source figures)`` of a batch: ``info`` (str -> float32 ``[N]``, the
    episodes' last info) without a mix's per-source keys, and for each source ``<name>``:
    ``source/<name>/frac`` (its share of the batch), ``reward/<name>/mean`` and ``/std``
    (over its episodes; NaN when the batch has none of them: the run's records then leave
    them out) and ``reward/<name>/<key>/mean`` for each of its info keys. An info without
    ``source/`` keys (no mix) comes back as it is, with no figures."""
    names = [k[len(SOURCE):] for k in info if k.startswith(SOURCE)]
    if not names:
        return info, {}
    plain, figures = {}, {}
    owned = set()
    for name in names:
        on = jnp.asarray(info[SOURCE + name], jnp.float32)
        count = jnp.sum(on)
        mean = lambda v: jnp.where(count > 0, jnp.sum(v * on) / jnp.maximum(count, 1.0), jnp.nan)  # noqa: E731
        r = jnp.asarray(rewards, jnp.float32)
        m = mean(r)
        figures[f"source/{name}/frac"] = jnp.mean(on)
        figures[f"reward/{name}/mean"] = m
        figures[f"reward/{name}/std"] = jnp.where(count > 0, jnp.sqrt(mean((r - jnp.where(count > 0, m, 0.0)) ** 2)), jnp.nan)
        owned.add(SOURCE + name)
        for key, value in info.items():
            if key.startswith(name + "/"):
                figures[f"reward/{key}/mean"] = mean(jnp.asarray(value, jnp.float32))
                owned.add(key)
    for key, value in info.items():
        if key not in owned:
            plain[key] = value
    return plain, figures


__all__ = ["DRAW_SALT", "ENV_ID", "SHAPE", "SOURCE", "MixParams", "MixState", "MixTask", "check_shapes", "mix_task",
           "source_metrics"]
