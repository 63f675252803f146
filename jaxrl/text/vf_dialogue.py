"""A multi-turn ``verifiers`` 0.4 environment driven by jaxrl's dialogue machinery.

In ``verifiers.v1`` a multi-turn environment is an ``Env`` whose ``run(task, agents)`` holds a
seat's exchange open and writes its user turns (``segment = await x.turn(message)`` returns the
model's reply). verifiers answers a turn by running the seat's harness, a chat program that
calls an OpenAI-compatible endpoint: no such endpoint reaches a model generating inside a
compiled rollout. So jaxrl runs the env's own ``setup`` / ``run`` / ``finalize`` and the task's
``@stop``, ``@reward`` and ``@metric`` methods, and stands in for the harness: the seat jaxrl
plays (``env.verifiers.seat``, else the only trainable one) is an :class:`_Exchange` whose
``turn`` parks the conversation until the device has generated the answer.

Each session's ``run`` is a task on the host's event loop: a reset waits for its first
``turn`` (the opening messages become the prompt); a step hands every session its decoded turn
at once (one ``asyncio.gather`` per host callback) and waits, under ``timeout_s``, for the next
``turn`` (the env reply, tokenized and loss-masked) or for ``run`` to return (the trace scored
by the task's own ``score``; the reward lands on the last turn). After ``turns`` policy turns,
or at a ``@stop`` or the seat's ``max_turns``, the next ``turn`` comes back ``terminated``. A
raising env or scorer, a timeout, an unplayable seat or a second exchange fail that session
(zero reward, masked, counted), with ``env.remote``'s failure fraction. Not driven: tool calls,
request / response hooks, ``send`` / ``steer``. Guide:
docs/remote_envs.md#multi-turn-environments.
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
from typing import Any

from jaxrl.text.remote import RemoteHost, SessionFault

#: The turns of an exchange, as the host waits for them.
TURN, DONE, FAULT = "turn", "done", "fault"


class SeatError(RuntimeError):
    """The env asked a seat jaxrl does not play for a turn (it needs its own model)."""


class ScoringError(RuntimeError):
    """The task's scoring raised (its ``@reward`` / ``@metric`` code)."""


def _vf():
    import verifiers.v1 as vf

    return vf


def seats(env: Any) -> list[str]:
    """The env's seats (its config's ``AgentConfig`` fields), in declaration order."""
    from verifiers.v1.configs.agent import agent_config_fields

    return list(agent_config_fields(env.config))


class _Seat:
    """One seat of ``agents``: jaxrl's policy (``played``) or a seat that cannot be run."""

    def __init__(self, host: VerifiersDialogueHost | None, episode: _Episode | None, name: str, played: bool, config: Any):
        self.host, self.episode, self.name, self.played, self.config = host, episode, name, played, config
        self.trainable = True

    def interaction(self, task: Any, **_: Any):
        if not self.played:
            raise SeatError(f"seat {self.name!r} needs its own model; jaxrl plays seat {self.host.seat!r} (env.verifiers.seat)")
        if self.episode.exchanges:
            raise SeatError(f"a second exchange of seat {self.name!r} in one episode (jaxrl plays one conversation per episode)")
        return _Exchange(self, task)

    async def run(self, task: Any, **_: Any):
        """A whole rollout with no user after the prompt: one turn, then the exchange closes."""
        async with self.interaction(task) as exchange:
            await exchange.turn()
        return exchange.trace


class _Agents:
    """``agents`` as ``Env.setup`` / ``Env.run`` see it (attribute per seat)."""

    def __init__(self, env: Any, host: VerifiersDialogueHost | None, episode: _Episode | None, played: str | None):
        from verifiers.v1.configs.agent import agent_config_fields

        fields = agent_config_fields(env.config)
        self._seats = {n: _Seat(host, episode, n, n == played, c) for n, c in fields.items()}

    def __getattr__(self, name: str) -> _Seat:
        seats_ = self.__dict__.get("_seats") or {}
        if name not in seats_:
            raise AttributeError(f"no agent {name!r}; this config declares {sorted(seats_)}")
        return seats_[name]


class _Exchange:
    """The played seat's exchange: ``turn`` sends the user's messages to the device and
    returns the completion as the seat's ``Segment``; closing scores the trace."""

    def __init__(self, seat: _Seat, task: Any):
        from verifiers.v1.state import state_cls
        from verifiers.v1.trace import AgentInfo, Trace, TraceTask

        self.seat, self.task, self.episode = seat, task, seat.episode
        self.trace = Trace(task=TraceTask(type=type(task).__name__, data=task.data, key=task.key, hash=task.hash),
                           state=state_cls(type(task))(), agent=AgentInfo(config=seat.config))
        self.started = self.over = self.closed = False
        self.stops = _trace_stops(task)
        self.episode.exchanges.append(self)

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        if exc[0] is None:
            await self.close()

    def _append(self, message: Any, sampled: bool = False) -> None:
        from verifiers.v1.graph import MessageNode

        n = len(self.trace.nodes)
        self.trace.nodes.append(MessageNode(parent=n - 1 if n else None, message=message, sampled=sampled))

    async def _refused(self) -> str | None:
        """Why the next model turn is refused (the turn cap, the seat's max_turns, a @stop), else None."""
        from verifiers.v1.session import call_hook
        from verifiers.v1.trace import Trace

        cap = self.seat.config.max_turns
        if self.episode.final or (cap is not None and self.trace.num_turns >= cap):
            return "max_turns"
        for stop in self.stops:
            result = await call_hook(stop, {Trace: self.trace})
            if not isinstance(result, bool):
                raise TypeError(f"@stop {stop.__name__} must return bool, got {type(result).__name__}")
            if result:
                return stop.__name__
        return None

    async def turn(self, message: Any = None):
        vf = _vf()
        from verifiers.v1.agent import Segment
        from verifiers.v1.dialects import parse_message

        if self.closed or self.over:
            raise RuntimeError("the exchange is over (the run ended); read interaction.trace")
        prompted = not self.started and self.task.data.prompt is not None
        if message is None and not prompted:
            raise ValueError("nothing to run a turn on: a bare turn() takes a prompted task's opening reply")
        if message is not None and prompted:
            raise ValueError("the task's prompt opens this exchange: take its first reply with a bare turn()")
        if prompted:
            data = self.task.data
            prompt = [vf.UserMessage(content=data.prompt)] if isinstance(data.prompt, str) else list(data.prompt)
            messages = ([vf.SystemMessage(content=data.system_prompt)] if data.system_prompt else []) + prompt
        elif isinstance(message, str):
            messages = [vf.UserMessage(content=message)]
        else:
            messages = [parse_message(m) if isinstance(m, dict) else m for m in message]
        self.started = True
        why = await self._refused()
        if why is not None:
            self.over = True
            self.trace.stop(why)
            return Segment(messages=[], terminated=True)
        for m in messages:
            self._append(m)
        text = await self.episode.ask(messages)
        reply = vf.AssistantMessage(content=text)
        self._append(reply, sampled=True)
        return Segment(messages=[reply])

    async def send(self, *_: Any, **__: Any):
        raise SeatError("send / steer (messages into a running turn) are not driven by jaxrl; use turn()")

    steer = send

    async def close(self):
        """Score the trace with the task's own ``score`` (idempotent); returns the trace."""
        if self.closed:
            return self.trace
        self.closed = True
        self.trace.stop("user_closed")
        if self.trace.num_turns == 0:
            raise SeatError("the exchange closed before the model's first turn")
        try:
            await self.task.score(self.trace)
        except Exception as exc:  # the task's own scoring code
            raise ScoringError(f"{type(exc).__name__}: {' '.join(str(exc).split())[:200]}") from None
        self.trace.is_completed, self.trace.ok = True, not self.trace.errors
        return self.trace


def _trace_stops(task: Any) -> list:
    from verifiers.v1.session import hook_boundary
    from verifiers.v1.trace import Trace

    return [fn for fn in task.hooks("stop") if hook_boundary(fn, allow_trace=True) is Trace]


@dataclasses.dataclass
class _Episode:
    """One session's exchange with the env, between the host's callbacks."""

    task: Any
    events: asyncio.Queue
    answer: asyncio.Future | None = None
    runner: asyncio.Task | None = None
    final: bool = False  # the turn being answered is the last one jaxrl generates
    exchanges: list = dataclasses.field(default_factory=list)

    async def ask(self, messages: list) -> str:
        """Park a turn: the host reads ``messages`` and answers with the completion."""
        self.answer = asyncio.get_running_loop().create_future()
        await self.events.put((TURN, messages))
        return await self.answer


class VerifiersDialogueHost(RemoteHost):
    """The sessions of a multi-turn :class:`~jaxrl.text.vf_env.VerifiersTask` (module docstring):
    ``splits`` holds the two task lists (the host's two "servers"), ``render(user text,
    system)`` the prompt ids."""

    label = "env.verifiers"

    def __init__(self, cfg: Any, rcfg: Any, codec: Any, render: Any, tasks: tuple[list, list], record: list | None = None,
                 *, env: Any, seat: str, splits: tuple[str, str]):
        super().__init__(rcfg, codec, record)
        self.vcfg, self.render, self.splits = cfg, render, dict(zip(splits, tasks))
        self.env, self.seat = env, seat
        self.episodes_: dict[int, _Episode] = {}
        self._final: set[int] = set()  # the slots whose turn being stepped is their last

    # -- one episode ------------------------------------------------------------------------

    async def _play(self, ep: _Episode) -> None:
        from verifiers.v1.episode import EnvInfo, Episode
        from verifiers.v1.trace import TraceTask

        env, task = self.env, ep.task
        try:
            agents = _Agents(env, self, ep, self.seat)
            await env.setup(agents)
            await env.run(task, agents)
            played = [x for x in ep.exchanges if x.closed]
            if not played:
                raise SeatError(f"run() ended without an exchange of seat {self.seat!r}")
            episode = Episode(env=EnvInfo(id=env.config.env_id), traces=[x.trace for x in played], ok=True,
                              task=TraceTask(type=type(task).__name__, data=task.data, key=task.key, hash=task.hash))
            await env.finalize(task, episode)
        except SeatError as exc:
            await ep.events.put((FAULT, f"unsupported: {exc}"))
            return
        except ScoringError as exc:
            await ep.events.put((FAULT, f"scoring: {exc}"))
            return
        except Exception as exc:  # the env's own code (run, setup, finalize)
            await ep.events.put((FAULT, f"env: {type(exc).__name__}: {' '.join(str(exc).split())[:200]}"))
            return
        trace = played[-1].trace
        if trace.errors:
            await ep.events.put((FAULT, f"scoring: {trace.errors[-1]}"))
            return
        await ep.events.put((DONE, trace.reward))

    async def _next(self, slot: int, ep: _Episode):
        """The episode's next event, or a fault (the episode is then cancelled)."""
        try:
            kind, value = await asyncio.wait_for(ep.events.get(), self.vcfg.timeout_s)
        except (TimeoutError, asyncio.TimeoutError):
            kind, value = FAULT, f"timeout: the env took more than {self.vcfg.timeout_s:g} s"
        if kind != TURN:
            self._end(slot)
        return kind, value

    def _end(self, slot: int) -> None:
        ep = self.episodes_.pop(slot, None)
        if ep is not None and ep.runner is not None and not ep.runner.done():
            ep.runner.cancel()

    def close(self) -> None:
        """End every open episode (its ``run`` cancelled), then the sessions and the loop."""
        if self._loop is not None and self.episodes_:
            async def end_all():
                for slot in list(self.episodes_):
                    self._end(slot)
                await asyncio.sleep(0)  # the cancelled runs unwind

            self._run(end_all())
        super().close()

    # -- the host's callbacks ---------------------------------------------------------------

    async def _reset_all(self, slots: list[int], seeds: list[int]):
        async def one(slot: int, seed: int):
            self._end(slot)  # an episode left open (an interrupted evaluation) is dropped
            tasks = self.splits[self.sessions[slot].url]
            ep = _Episode(tasks[seed % len(tasks)], asyncio.Queue())
            self.episodes_[slot] = ep
            ep.runner = asyncio.get_running_loop().create_task(self._play(ep))
            kind, value = await self._next(slot, ep)
            if kind == DONE:
                self._end(slot)
                return None, "malformed reply: the env ended the episode before the model's first turn"
            if kind == FAULT:
                return None, value
            try:
                return self.render(*_opening(value)), None
            except SessionFault as exc:
                self._end(slot)
                return None, str(exc)

        return await asyncio.gather(*(one(s, seed) for s, seed in zip(slots, seeds)))

    def step(self, slots, turn_index, live, turns):
        import numpy as np

        flat_slots, flat_turns = np.asarray(slots).reshape(-1), np.asarray(turn_index).reshape(-1)
        self._final = {int(s) for s, t in zip(flat_slots, flat_turns) if t + 1 >= self.cfg.turns}
        return super().step(slots, turn_index, live, turns)

    async def _step_all(self, slots: list[int], texts: list[str]):
        async def one(slot: int, text: str):
            ep = self.episodes_.get(slot)
            if ep is None or ep.answer is None or ep.answer.done():
                return None, "connection: the session has no open episode"
            ep.final = slot in self._final
            ep.answer.set_result(text)
            kind, value = await self._next(slot, ep)
            if kind == FAULT:
                return None, value
            if kind == DONE:
                if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                    return None, f"malformed reply: reward {value!r} is not a finite number"
                return (float(value), True, ""), None
            if slot in self._final:  # the env went on past the last turn it asked to be answered
                self._end(slot)
                return None, "malformed reply: the env asked for a turn after it was told the exchange is over"
            return (0.0, False, "\n\n".join(message_text(m.content) for m in value if m.content)), None

        return await asyncio.gather(*(one(s, t) for s, t in zip(slots, texts)))


def message_text(content: Any) -> str:
    """The text of a message's content (a string, or verifiers' content parts)."""
    if isinstance(content, str):
        return content
    from verifiers.v1.types import content_text

    return content_text(content)


def _opening(messages: list) -> tuple[str, str]:
    """``(user text, system)`` of an exchange's opening messages: the system message's text,
    the user messages' texts joined by a blank line (as ``TaskData.prompt_text`` joins them)."""
    system = "\n\n".join(message_text(m.content) for m in messages if getattr(m, "role", "") == "system")
    users = [message_text(m.content) for m in messages if getattr(m, "role", "") != "system" and m.content]
    if not users:
        raise SessionFault("malformed reply: the exchange opens with no user message")
    return "\n\n".join(users), system


def load_env(env_id: str, taskset_id: str, taskset_args: dict, env_args: dict) -> Any | None:
    """The ``Env`` of a taskset (``env_id``, else the one its package exports), built with
    its config; None for a plain taskset (verifiers' ``SingleAgentEnv``: single-turn)."""
    from verifiers.v1.envs.single_agent.env import SingleAgentEnv
    from verifiers.v1.utils import loaders

    try:
        cls = loaders.environment_class(taskset_id, env_id)
    except (ModuleNotFoundError, AttributeError, TypeError) as exc:
        raise ValueError(f"env.verifiers.env: {' '.join(str(exc).split())}") from None
    if cls is SingleAgentEnv:
        if env_args:
            raise ValueError(f"env.verifiers.env_args: {taskset_id} has no multi-turn env (its tasks are single-turn)")
        return None
    try:
        loaders.taskset_config_type(taskset_id)(**{**taskset_args, "id": taskset_id})
    except Exception as exc:  # pydantic's ValidationError: the args do not fit the taskset's config
        raise ValueError(f"env.verifiers.args: {taskset_id}'s config refuses them: {' '.join(str(exc).split())[:300]}") from None
    try:
        config = loaders.resolve_env_config({**env_args, "id": env_id, "taskset": {**taskset_args, "id": taskset_id}})
    except Exception as exc:  # pydantic's ValidationError
        raise ValueError(f"env.verifiers.env_args: {cls.__name__}'s config refuses them: {' '.join(str(exc).split())[:300]}") from None
    try:
        return cls(config)
    except Exception as exc:  # the env's own constructor
        raise ValueError(f"env.verifiers.env: {cls.__name__} could not be built: {type(exc).__name__}: "
                         f"{' '.join(str(exc).split())[:200]}") from None


def played_seat(env: Any, seat: str) -> str:
    """The seat jaxrl plays: ``seat`` if given (one of the env's), else the env's only seat,
    else the only one its ``setup`` leaves trainable; one-line ``ValueError`` otherwise."""
    names = seats(env)
    if seat:
        if seat not in names:
            raise ValueError(f"env.verifiers.seat: {type(env).__name__} has no seat {seat!r} (its seats: {names})")
        return seat
    if len(names) == 1:
        return names[0]
    probe = _Agents(env, None, None, None)  # setup only marks seats (trainable)
    try:
        asyncio.run(env.setup(probe))
    except Exception as exc:
        raise ValueError(f"env.verifiers.seat: {type(env).__name__}.setup failed: {type(exc).__name__}: {exc}") from None
    trainable = [n for n in names if probe._seats[n].trainable]
    if len(trainable) != 1:
        raise ValueError(f"env.verifiers.seat: {type(env).__name__} has seats {names} ({len(trainable)} trainable); "
                         "name the one jaxrl plays")
    return trainable[0]


__all__ = ["ScoringError", "SeatError", "VerifiersDialogueHost", "load_env", "message_text", "played_seat", "seats"]
