"""``env: {remote: {url: ws://host:port}}``: an OpenEnv server's text environment as a token task.

:class:`RemoteTask` is a :class:`~jaxrl.core.tokens.DialogueTask` whose ``start`` and
``respond`` run on the host through one ``jax.pure_callback`` each, under ``vmap``
(``vmap_method="broadcast_all"``): one call per turn receives the whole batch, and
:class:`RemoteHost` sends every session's message at once (``asyncio.gather`` over
:class:`~jaxrl.interop.openenv.AsyncOpenEnvClient` sessions, one connection per session,
each message under ``timeout_s``). ``start`` resets a session with a seed drawn from the
episode's key (a GRPO group shares its key, so its members get the same prompt from a
deterministic server) and tokenizes the observation's text into the prompt; ``respond``
decodes the turn, sends it as the string action, and tokenizes the reply's text into the
reply slots (left-padded, loss-masked like every env reply). The reward is the server's,
on the turn's last token.

A session that fails — a refused or dropped connection, no reply within ``timeout_s``, an
error reply, a malformed reply (no text, a reward that is not a finite number), a reply
naming another episode — ends its episode with zero reward and ``Turn.failed`` set (the
rollout masks it out of the loss; ``remote_failed`` in the metrics counts it); its
connection is closed, so a late reply can never be read as another message's. A turn in
which more than ``max_failure_frac`` of the live sessions fail raises
:class:`RemoteEnvError` (``jaxrl`` prints it as one line). Guide: docs/remote_envs.md.
"""

from __future__ import annotations

import asyncio
import atexit
import dataclasses
import logging
import math
import threading
from typing import Any, Callable, ClassVar, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from jaxrl.core import spaces
from jaxrl.core.env import Range
from jaxrl.core.tokens import DialogueTask, Turn, reward_on_last_token
from jaxrl.interop import openenv
from jaxrl.text.callback_errors import quiet_callback_log, raised_in_callback
from jaxrl.text.config import RemoteConfig, check_remote

Array = jax.Array
log = logging.getLogger("jaxrl.remote")

#: The id a remote env section runs under (run directories, records).
ENV_ID = "remote"
#: Seconds at least that opening a session's connection may take (its messages: timeout_s).
CONNECT_S = 10.0


class RemoteEnvError(RuntimeError):
    """Too many sessions of one turn failed; raised inside the host callback."""


def failure_line(exc: BaseException) -> str | None:
    """The one line of a :class:`RemoteEnvError`, raised directly or inside the callback (as
    JAX re-raises it: a ``JaxRuntimeError`` whose text holds the host traceback), else None."""
    if isinstance(exc, RemoteEnvError):
        return str(exc)
    return raised_in_callback(exc, RemoteEnvError)


# ---------------------------------------------------------------------------------------
# The host side
# ---------------------------------------------------------------------------------------


@dataclasses.dataclass
class Codec:
    """Text <-> the model's ids on the host: prompts and replies wrapped in the chat template's
    user turn (empty affixes: the text as it is), completions decoded up to the end of turn."""

    encode: Callable[[str], Sequence[int]]
    decode: Callable[[list[int]], str]
    pad_id: int
    end_of_turn: int
    vocab: int
    prefix: tuple[int, ...] = ()  # before a prompt's text
    suffix: tuple[int, ...] = ()  # after it (the assistant's turn opens)
    reply_prefix: tuple[int, ...] = ()  # before a reply's text (the policy's turn just ended)
    reply_suffix: tuple[int, ...] = ()

    def completion(self, ids: np.ndarray) -> str:
        ids = [int(i) for i in ids]
        if self.end_of_turn in ids:
            ids = ids[: ids.index(self.end_of_turn)]
        return self.decode([i for i in ids if i != self.pad_id and 0 <= i < self.vocab])

    def prompt(self, text: str) -> list[int]:
        return [*self.prefix, *self.encode(text), *self.suffix]

    def reply(self, text: str) -> list[int]:
        return [*self.reply_prefix, *self.encode(text), *self.reply_suffix]


class SessionFault(Exception):
    """Why one session failed (its message names the kind: connection, timeout, ...)."""


def left_pad(ids: Sequence[int], length: int, pad: int) -> np.ndarray:
    out = np.full((length,), pad, np.int32)
    if length and ids:
        ids = list(ids)[-length:]
        out[length - len(ids):] = ids
    return out


def _text(observation: Any, key: str) -> str:
    if isinstance(observation, str):
        return observation
    value = observation.get(key) if isinstance(observation, dict) else None
    if not isinstance(value, str):
        raise SessionFault(f"malformed reply: the observation has no text field {key!r}")
    return value


def _episode_of(observation: Any) -> Any:
    if not isinstance(observation, dict):
        return None
    meta = observation.get("metadata")
    return observation.get("episode_id", meta.get("episode_id") if isinstance(meta, dict) else None)


@dataclasses.dataclass
class _Session:
    client: Any = None  # an AsyncOpenEnvClient, or None (connect at the next reset)
    episode: str = ""  # the episode id sent with the last reset
    url: str = ""


class RemoteHost:
    """The sessions behind a :class:`RemoteTask`, stepped on an event loop in a thread.

    Slots are handed out at each reset (the lowest free first) and freed when the episode
    ends (done, failed, or its last turn); a slot keeps its connection between episodes.
    ``counts``: ``sessions`` (episodes started), ``steps``, ``failed`` (by kind under
    ``faults``); ``record`` (a list, or None) receives ``(prompt ids, completion ids,
    reward)`` of every step, for tests and transcripts.
    """

    #: The config section named in its log lines and errors.
    label = "env.remote"

    def __init__(self, cfg: RemoteConfig, codec: Codec, record: list | None = None):
        self.cfg, self.codec, self.record = cfg, codec, record
        self.sessions: list[_Session] = []
        self.free: list[int] = []
        self.prompts: dict[int, np.ndarray] = {}
        self.counts = {"sessions": 0, "steps": 0, "failed": 0}
        self.faults: dict[str, int] = {}
        self.episodes = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._lock = threading.Lock()

    # -- the loop ---------------------------------------------------------------------------

    def _run(self, coro):
        with self._lock:
            if self._loop is None:
                self._loop = asyncio.new_event_loop()
                threading.Thread(target=self._loop.run_forever, name="jaxrl-remote", daemon=True).start()
                atexit.register(self.close)  # end the sessions (the server frees their slots) when the process ends
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    def close(self) -> None:
        """Close every session and stop the loop (the host can start again later)."""
        if self._loop is None:
            return
        atexit.unregister(self.close)

        async def close_all():
            await asyncio.gather(*(s.client.close() for s in self.sessions if s.client is not None), return_exceptions=True)

        self._run(close_all())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._loop, self.sessions, self.free = None, [], []

    # -- slots ------------------------------------------------------------------------------

    def _take(self, url: str) -> int:
        if self.free:
            self.free.sort()
            slot = self.free.pop(0)
        else:
            self.sessions.append(_Session())
            slot = len(self.sessions) - 1
        self.sessions[slot].url = url  # a connection to another server is closed at the reset (_reset_all)
        return slot

    def _release(self, slot: int) -> None:
        if slot not in self.free:
            self.free.append(slot)

    async def _drop(self, session: _Session) -> None:
        client, session.client = session.client, None
        if client is not None:
            try:
                await asyncio.wait_for(client.close(), 1.0)
            except Exception:  # closing a broken connection: nothing to recover
                pass

    async def _client(self, session: _Session):
        if session.client is None:
            t = self.cfg.timeout_s  # opening a connection may take longer than a step (CONNECT_S at least)
            session.client = openenv.AsyncOpenEnvClient(session.url, connect_timeout=max(t, CONNECT_S), message_timeout=t)
        return session.client

    async def _guarded(self, session: _Session, coro_fn) -> tuple[Any, str | None]:
        """``(result, None)`` or ``(None, why)``; a fault closes the session's connection."""
        try:
            return await asyncio.wait_for(coro_fn(await self._client(session)), CONNECT_S + 2 * self.cfg.timeout_s), None
        except SessionFault as exc:
            why = str(exc)
        except (TimeoutError, asyncio.TimeoutError):
            why = f"timeout: no reply within {self.cfg.timeout_s:g} s"
        except openenv.OpenEnvError as exc:
            why = f"error reply: {exc}"
        except ConnectionError as exc:
            why = f"connection: {exc}"
        except Exception as exc:  # anything else a server can provoke in the client
            why = f"{type(exc).__name__}: {exc}"
        await self._drop(session)
        return None, why

    # -- reset ------------------------------------------------------------------------------

    def reset(self, seeds: np.ndarray, held_out: np.ndarray, active: np.ndarray | None = None
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(slot int32, prompt int32 [prompt_len], failed bool)`` per row, for int32 seeds of
        any batch shape (``held_out``: the same shape, nonzero: the evaluation server).
        ``active`` (bool, the same shape; None: all): rows not active start no session (slot
        -1, an all-pad prompt, not failed): the rows of a mix drawn from another task."""
        shape = np.shape(seeds)
        seeds, held_out = np.asarray(seeds).reshape(-1), np.broadcast_to(held_out, shape).reshape(-1)
        active = np.ones(seeds.shape, np.bool_) if active is None else np.broadcast_to(active, shape).reshape(-1)
        rows = [i for i in range(len(seeds)) if active[i]]
        url = [self.cfg.eval_url if (held_out[i] and self.cfg.eval_url) else self.cfg.url for i in rows]
        slots = [self._take(u) for u in url]
        for slot in slots:
            self.episodes += 1
            self.sessions[slot].episode = f"jaxrl-{slot}-{self.episodes}"
        results = self._run(self._reset_all(slots, [int(seeds[i]) for i in rows])) if rows else []
        lp, codec = self.cfg.prompt_len, self.codec
        prompts = np.full((len(seeds), lp), codec.pad_id, np.int32)
        failed = np.zeros((len(seeds),), np.bool_)
        out_slots = np.full((len(seeds),), -1, np.int32)
        faults = []
        for i, slot, (ids, why) in zip(rows, slots, results):
            out_slots[i] = slot
            if why is None and len(ids) > lp:
                why = f"prompt of {len(ids)} tokens > {self.label}.prompt_len {lp}"
            if why is None:
                prompts[i] = left_pad(ids, lp, codec.pad_id)
                self.prompts[slot] = prompts[i]
            else:
                prompts[i, -1] = codec.end_of_turn  # a failed session still gets a non-empty prompt
                failed[i] = True
                faults.append((slot, why))
                self._release(slot)
        self.counts["sessions"] += len(slots)
        self._faults(faults, len(slots), "reset")
        return out_slots.reshape(shape), prompts.reshape(shape + (lp,)), failed.reshape(shape)

    async def _reset_all(self, slots: list[int], seeds: list[int]):
        async def one(slot: int, seed: int):
            session = self.sessions[slot]
            if session.client is not None and session.client.url != openenv.urls(session.url)[0]:
                await self._drop(session)  # the slot served the other split's server before

            async def call(client):
                result = await client.reset(seed=seed, episode_id=session.episode)
                other = _episode_of(result.observation)
                if other is not None and other != session.episode:
                    raise SessionFault(f"reply for another session: episode {other!r}, sent {session.episode!r}")
                return self.codec.prompt(_text(result.observation, self.cfg.observation_key))

            return await self._guarded(session, call)

        return await asyncio.gather(*(one(s, seed) for s, seed in zip(slots, seeds)))

    # -- step -------------------------------------------------------------------------------

    def step(self, slots: np.ndarray, turn_index: np.ndarray, live: np.ndarray, turns: np.ndarray
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """``(reply int32 [reply_tokens], reward float32, done bool, failed bool)`` per row for
        int32 slots, turn indices, bool ``live`` (rows whose episode goes on) and turns int32
        ``[..., turn_tokens]``; rows not live are left alone (zeros)."""
        shape = np.shape(slots)
        slots, turn_index = np.asarray(slots).reshape(-1), np.asarray(turn_index).reshape(-1)
        live, turns = np.asarray(live).reshape(-1), np.asarray(turns).reshape(len(slots), -1)
        rows = [i for i in range(len(slots)) if live[i]]
        texts = [self.codec.completion(turns[i]) for i in rows]
        results = self._run(self._step_all([int(slots[i]) for i in rows], texts))
        tr, codec = self.cfg.reply_tokens, self.codec
        replies = np.full((len(slots), tr), codec.pad_id, np.int32)
        rewards = np.zeros((len(slots),), np.float32)
        done, failed = np.zeros((len(slots),), np.bool_), np.zeros((len(slots),), np.bool_)
        faults = []
        for i, (result, why) in zip(rows, results):
            slot = int(slots[i])
            if why is None:
                reward, over, text = result
                replies[i] = left_pad(codec.reply(text), tr, codec.pad_id) if tr else replies[i]
                rewards[i], done[i] = reward, over
                if self.record is not None:
                    self.record.append((self.prompts.get(slot), turns[i].copy(), float(reward)))
            else:
                failed[i] = True
                faults.append((slot, why))
            if failed[i] or done[i] or turn_index[i] + 1 >= self.cfg.turns:
                self._release(slot)
        self.counts["steps"] += len(rows)
        self._faults(faults, len(rows), "step")
        return (replies.reshape(shape + (tr,)), rewards.reshape(shape), done.reshape(shape), failed.reshape(shape))

    async def _step_all(self, slots: list[int], texts: list[str]):
        field = self.cfg.action_field

        async def one(slot: int, text: str):
            session = self.sessions[slot] if 0 <= slot < len(self.sessions) else None
            if session is None or session.client is None:  # never reset here (a resumed run's episode), or dropped
                return None, "connection: the session has no open episode"

            async def call(client):
                result = await client.step_data({field: text})
                other = _episode_of(result.observation)
                if other is not None and other != session.episode:
                    raise SessionFault(f"reply for another session: episode {other!r}, sent {session.episode!r}")
                reward = result.reward
                if isinstance(reward, bool) or not isinstance(reward, (int, float)) or not math.isfinite(reward):
                    raise SessionFault(f"malformed reply: reward {reward!r} is not a finite number")
                if not isinstance(result.done, bool):
                    raise SessionFault(f"malformed reply: done {result.done!r} is not true or false")
                text_out = "" if result.done else _text(result.observation, self.cfg.observation_key)
                return float(reward), result.done, text_out

            return await self._guarded(session, call)

        return await asyncio.gather(*(one(s, t) for s, t in zip(slots, texts)))

    def _faults(self, faults: list[tuple[int, str]], live: int, what: str) -> None:
        for slot, why in faults:
            kind = why.split(":", 1)[0]
            self.faults[kind] = self.faults.get(kind, 0) + 1
            episode = self.sessions[slot].episode if 0 <= slot < len(self.sessions) else "no episode"
            log.warning("%s: session %d (%s) failed at %s: %s", self.label, slot, episode, what, why)
        self.counts["failed"] += len(faults)
        if live and len(faults) / live > self.cfg.max_failure_frac:
            slot, why = faults[0]
            raise RemoteEnvError(f"{self.label}: {len(faults)} of {live} sessions failed at one {what} (more than "
                                 f"max_failure_frac {self.cfg.max_failure_frac:g}); first: session {slot}: {why}")


# ---------------------------------------------------------------------------------------
# The task
# ---------------------------------------------------------------------------------------


@struct.dataclass
class RemoteParams:
    held_out: bool = False  # evaluation: sessions on env.remote.eval_url (when set)

    bounds: ClassVar[dict] = {"held_out": Range(ge=0, le=1)}


@struct.dataclass
class RemoteState:
    slot: Array  # int32 [], the host's session slot
    turn: Array  # int32 [], turns answered
    done: Array  # bool [], the episode ended (done or failed)
    failed: Array  # bool [], the session failed


@dataclasses.dataclass(frozen=True)
class RemoteTask(DialogueTask):
    """A server's text environment, stepped on the host (module docstring)."""

    url: str
    prompt_length: int
    turn_count: int
    turn_length: int
    reply_length: int
    vocab: int
    pad: int
    eot: int
    host: RemoteHost = dataclasses.field(compare=False, hash=False, repr=False)

    can_fail: ClassVar[bool] = True
    eval_scores = ()

    @property
    def name(self) -> str:
        return f"{ENV_ID}:{self.url}"

    @property
    def vocab_size(self) -> int:
        return self.vocab

    @property
    def prompt_len(self) -> int:
        return self.prompt_length

    @property
    def max_turns(self) -> int:
        return self.turn_count

    @property
    def max_turn_tokens(self) -> int:
        return self.turn_length

    @property
    def max_reply_tokens(self) -> int:
        return self.reply_length

    @property
    def end_of_turn(self) -> int:
        return self.eot

    @property
    def pad_id(self) -> int:
        return self.pad

    @property
    def default_params(self) -> RemoteParams:
        return RemoteParams()

    def held_out_params(self, params):
        return params.replace(held_out=True)

    def episode_bound(self, params):
        return self.max_turns * self.max_turn_tokens

    def start(self, key, params, active=None):
        """A new episode (a session reset on the server); ``active`` (bool ``[]``, None: true):
        false starts none, the episode already over (a mix's row drawn from another task)."""
        if jnp.issubdtype(key.dtype, jnp.signedinteger) and key.ndim == 0:  # a row index (evaluation): the seed
            seed = key.astype(jnp.int32)
        else:
            seed = (jax.random.bits(key, (), jnp.uint32) >> 1).astype(jnp.int32)
        shapes = (jax.ShapeDtypeStruct((), jnp.int32), jax.ShapeDtypeStruct((self.prompt_len,), jnp.int32),
                  jax.ShapeDtypeStruct((), jnp.bool_))
        on = jnp.ones((), jnp.bool_) if active is None else jnp.asarray(active, jnp.bool_)
        slot, prompt, failed = jax.pure_callback(self.host.reset, shapes, seed, jnp.asarray(params.held_out, jnp.int32),
                                                 on, vmap_method="broadcast_all")
        state = RemoteState(slot, jnp.int32(0), failed | ~on, failed)
        return state, prompt, {"remote_failed": jnp.float32(0)}

    def respond(self, key, state, turn, params):
        shapes = (jax.ShapeDtypeStruct((self.max_reply_tokens,), jnp.int32), jax.ShapeDtypeStruct((), jnp.float32),
                  jax.ShapeDtypeStruct((), jnp.bool_), jax.ShapeDtypeStruct((), jnp.bool_))
        reply, reward, done, failed = jax.pure_callback(
            self.host.step, shapes, state.slot, state.turn, ~state.done, turn.astype(jnp.int32), vmap_method="broadcast_all")
        failed = state.failed | failed
        ended = state.done | done | failed
        reward = jnp.where(failed, 0.0, reward)
        rewards = reward_on_last_token(turn, self.eot, reward)
        info = {"remote_failed": failed.astype(jnp.float32)}
        new = RemoteState(state.slot, state.turn + 1, ended, failed)
        return new, Turn(jnp.where(ended, self.pad, reply), rewards, ended, jnp.zeros((), jnp.bool_), info, failed)

    def decode(self, tokens) -> str:
        return self.host.codec.decode([int(t) for t in np.asarray(tokens).reshape(-1) if int(t) != self.pad])

    def observation_space(self, params):
        return spaces.Box(0, self.vocab - 1, (self.dialogue_len,), jnp.int32)


# ---------------------------------------------------------------------------------------
# Building
# ---------------------------------------------------------------------------------------


def _accepts_string(schema: Any) -> bool:
    if not isinstance(schema, dict) or not schema:
        return True  # an unconstrained field
    kinds = schema.get("type")
    if kinds is not None:
        return "string" in (kinds if isinstance(kinds, list) else [kinds])
    options = schema.get("anyOf") or schema.get("oneOf")
    return True if options is None else any(_accepts_string(o) for o in options)


def check_schema(cfg: RemoteConfig, url: str, key: str = "url") -> None:
    """``ValueError`` (one line, naming the mismatch) unless ``url``'s ``GET /schema`` takes
    a string in the action field and may carry the text field in its observations."""
    try:
        found = openenv.schema(url, timeout=cfg.timeout_s)
    except (ConnectionError, ValueError) as exc:
        raise ValueError(f"env.remote.{key}: {' '.join(str(exc).split())}") from None
    action, observation = found.get("action"), found.get("observation")
    if not isinstance(action, dict) or not isinstance(observation, dict):
        raise ValueError(f"env.remote.{key}: {url}/schema has no action and observation schemas (an OpenEnv server?)")
    props = action.get("properties")
    if isinstance(props, dict):
        if cfg.action_field not in props:
            raise ValueError(f"env.remote.action_field: {url}'s action has no field {cfg.action_field!r} "
                             f"(its fields: {sorted(k for k in props if k != 'metadata')})")
        if not _accepts_string(props[cfg.action_field]):
            raise ValueError(f"env.remote.action_field: {url}'s action field {cfg.action_field!r} takes "
                             f"{props[cfg.action_field].get('type')}, not a string (a text environment takes its completion as text)")
    props = observation.get("properties")
    if isinstance(props, dict) and cfg.observation_key not in props and observation.get("additionalProperties") is False:
        raise ValueError(f"env.remote.observation_key: {url}'s observation has no field {cfg.observation_key!r} "
                         f"(its fields: {sorted(props)})")


def tokenizer_codec(path: str, chat_template: bool, system_prompt: str) -> Codec:
    """The :class:`Codec` of the tokenizer in directory ``path`` (with the chat template's
    user-turn affixes around prompts and replies when ``chat_template``)."""
    from jaxrl.models.lm import load_tokenizer
    from jaxrl.text import chat, data

    tok = load_tokenizer(path)
    pad, eot = data.special_ids(tok, path)
    vocab = data.model_vocab_size(path, tok)
    codec = Codec(tok.encode, lambda ids: tok.decode(ids, skip_special_tokens=True), pad, eot, vocab)
    if chat_template:
        template = chat.chat_template(tok, path)
        prefix, suffix = chat.render_chat_affixes(template, chat.special_strings(tok), system_prompt)
        reply_prefix, reply_suffix = chat.render_chat_affixes(template, chat.special_strings(tok), "")
        codec.prefix, codec.suffix = tuple(tok.encode(prefix)), tuple(tok.encode(suffix))
        codec.reply_prefix, codec.reply_suffix = tuple(tok.encode(reply_prefix)), tuple(tok.encode(reply_suffix))
    elif system_prompt:
        raise ValueError("system_prompt needs chat_template: true")
    return codec


def remote_task(cfg: RemoteConfig, codec: Codec, record: list | None = None) -> RemoteTask:
    """The :class:`RemoteTask` of ``cfg`` over ``codec`` (schema checked when ``cfg.check_schema``)."""
    check_remote(cfg)
    if cfg.check_schema:
        check_schema(cfg, cfg.url)
        if cfg.eval_url:
            check_schema(cfg, cfg.eval_url, "eval_url")
    for name, ids in (("prompt", codec.prefix + codec.suffix), ("reply", codec.reply_prefix + codec.reply_suffix)):
        room = cfg.prompt_len if name == "prompt" else cfg.reply_tokens
        if name == "reply" and cfg.turns == 1:
            continue
        if len(ids) >= room:
            key = "prompt_len" if name == "prompt" else "reply_tokens"
            raise ValueError(f"env.remote.{key}: {room} leaves no room for text after the chat template's {len(ids)} tokens")
    quiet_callback_log(RemoteEnvError)  # it is re-raised and printed as one line
    host = RemoteHost(cfg, codec, record)
    return RemoteTask(cfg.url, cfg.prompt_len, cfg.turns, cfg.turn_tokens, cfg.reply_tokens, codec.vocab,
                      codec.pad_id, codec.end_of_turn, host)


__all__ = [
    "ENV_ID", "Codec", "RemoteConfig", "RemoteEnvError", "RemoteHost", "RemoteParams", "RemoteState", "RemoteTask",
    "check_remote", "check_schema", "failure_line", "remote_task", "tokenizer_codec",
]
