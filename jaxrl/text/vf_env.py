"""``env: {verifiers: NAME}``: an installed ``verifiers`` 0.4 taskset as a GRPO task.

``verifiers`` 0.4 is its ``verifiers.v1`` stack: an environment's data half is a
``Taskset`` (a package exporting its ``Taskset`` subclass, loaded by id with its
``TasksetConfig``) whose ``load()`` yields ``Task`` objects (``data.prompt``, a string or
chat messages) and whose rewards are the task's ``@reward`` / ``@metric`` methods, run by
``Task.score(trace)`` on a ``Trace`` of the conversation. This module reads the tasks once
when the run is built (``num_tasks`` at most; the task at position ``i`` is held out for
evaluation iff ``i % held_out_every == 0``), renders each prompt in the model's chat
template on the host, and scores each completion through the task's own ``score`` on a
trace of ``[system?, user, assistant]`` (its reward: the trace's weighted sum).

Generation and the update stay on device: :class:`VerifiersTask` is a
:class:`~jaxrl.text.remote.RemoteTask` whose host (:class:`VerifiersHost`, a
:class:`~jaxrl.text.remote.RemoteHost`) scores a turn's completions together
(``asyncio.gather`` on the host's loop, under ``timeout_s``), with the remote env's failure
rules: a task whose scoring raises, records an error, times out or returns no finite reward
fails its episode (zero reward, masked, ``remote_failed``); more than ``max_failure_frac`` of
a batch failing stops the run with one line. A single-turn task whose prompt is more than
one user message fails its episode. A taskset whose package exports a multi-turn ``Env``
(or one named by ``env.verifiers.env``) is played turn by turn instead, its ``Env.run``
writing the user turns (:mod:`jaxrl.text.vf_dialogue`). Needs the ``[verifiers]`` extra.
Guide: docs/remote_envs.md#verifiers-environments.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import math
from typing import Any

from jaxrl.text.callback_errors import quiet_callback_log
from jaxrl.text.config import RemoteConfig, VerifiersConfig, check_verifiers
from jaxrl.text import vf_dialogue
from jaxrl.text.remote import RemoteEnvError, RemoteHost, RemoteTask, SessionFault, tokenizer_codec

#: The id a verifiers env section runs under (run directories, records).
ENV_ID = "verifiers"
INSTALL = "pip install 'jaxrl[verifiers]'"
TRAIN, HELD = "train", "held_out"  # the host's two "servers": the task lists


def _v1():
    try:
        import verifiers.v1 as vf
        from verifiers.v1.utils import loaders
    except ImportError:
        raise ValueError(f"env.verifiers: needs the verifiers package (0.4): {INSTALL}") from None
    return vf, loaders


def load_tasks(cfg: VerifiersConfig, taskset: Any = None) -> list:
    """The taskset's tasks (at most ``num_tasks``; of ``taskset`` when given, else one built
    from ``cfg``); one-line ``ValueError`` naming the key."""
    if taskset is None:
        taskset = load_taskset(cfg)
    if not cfg.num_tasks and not taskset.bounded:
        raise ValueError(f"env.verifiers.num_tasks: {cfg.id} yields tasks forever; set how many to read")
    tasks = list(itertools.islice(iter(taskset), cfg.num_tasks or None))
    if not tasks:
        raise ValueError(f"env.verifiers.id: {cfg.id} yielded no task")
    return tasks


def load_taskset(cfg: VerifiersConfig) -> Any:
    """The taskset of ``cfg`` built with its config; one-line ``ValueError`` naming the key."""
    vf, loaders = _v1()
    try:
        cls = loaders.taskset_class(cfg.id)
        config = loaders.taskset_config_type(cfg.id)(**{**cfg.args, "id": cfg.id})
    except (ModuleNotFoundError, AttributeError, TypeError) as exc:
        raise ValueError(f"env.verifiers.id: {' '.join(str(exc).split())}") from None
    except Exception as exc:  # pydantic's ValidationError: the args do not fit the taskset's config
        raise ValueError(f"env.verifiers.args: {cfg.id}'s config refuses them: {' '.join(str(exc).split())[:300]}") from None
    return cls(config)


def split_tasks(tasks: list, every: int) -> tuple[list, list]:
    """``(train, held out)``: position ``i`` held out iff ``every`` and ``i % every == 0``
    (no held-out task: evaluation uses the training ones)."""
    held = [t for i, t in enumerate(tasks) if every and i % every == 0]
    train = [t for i, t in enumerate(tasks) if not (every and i % every == 0)]
    return (train or held), (held or train)


def prompt_parts(data: Any) -> tuple[str, str]:
    """``(user text, system prompt)`` of a task's data; :class:`SessionFault` for a prompt
    that is not one user message (after an optional system message)."""
    prompt, system = data.prompt, data.system_prompt or ""
    if isinstance(prompt, str):
        return prompt, system
    messages = list(prompt or [])
    if messages and getattr(messages[0], "role", None) == "system":
        system = system or vf_dialogue.message_text(messages[0].content)
        messages = messages[1:]
    if len(messages) != 1 or getattr(messages[0], "role", None) != "user":
        raise SessionFault(f"malformed reply: the task's prompt is {len(messages)} messages, not one user message")
    return vf_dialogue.message_text(messages[0].content), system


class VerifiersHost(RemoteHost):
    """The tasks of a :class:`VerifiersTask`: a reset picks a task by seed, a step scores."""

    label = "env.verifiers"

    def __init__(self, cfg: VerifiersConfig, rcfg: RemoteConfig, codec, render, tasks: tuple[list, list],
                 record: list | None = None):
        super().__init__(rcfg, codec, record)
        self.vcfg, self.render, self.splits = cfg, render, {TRAIN: tasks[0], HELD: tasks[1]}
        self.current: dict[int, Any] = {}

    async def _reset_all(self, slots: list[int], seeds: list[int]):
        out = []
        for slot, seed in zip(slots, seeds):
            tasks = self.splits[self.sessions[slot].url]
            task = tasks[seed % len(tasks)]
            self.current[slot] = task
            try:
                out.append((self.render(*prompt_parts(task.data)), None))
            except SessionFault as exc:
                out.append((None, str(exc)))
        return out

    async def _step_all(self, slots: list[int], texts: list[str]):
        return await asyncio.gather(*(self._score(slot, text) for slot, text in zip(slots, texts)))

    async def _score(self, slot: int, text: str):
        task = self.current.pop(slot, None)
        if task is None:
            return None, "connection: the session has no open episode"
        try:
            trace = self._trace(task, text)
            await asyncio.wait_for(task.score(trace), self.vcfg.timeout_s)
        except (TimeoutError, asyncio.TimeoutError):
            return None, f"timeout: no score within {self.vcfg.timeout_s:g} s"
        except SessionFault as exc:
            return None, str(exc)
        except Exception as exc:  # the task's own scoring code
            return None, f"scoring: {type(exc).__name__}: {' '.join(str(exc).split())[:200]}"
        if trace.errors:
            return None, f"scoring: {trace.errors[-1]}"
        reward = trace.reward
        if isinstance(reward, bool) or not isinstance(reward, (int, float)) or not math.isfinite(reward):
            return None, f"malformed reply: reward {reward!r} is not a finite number"
        return (float(reward), True, ""), None

    def _trace(self, task: Any, text: str):
        vf, _ = _v1()
        from verifiers.v1.graph import MessageNode
        from verifiers.v1.trace import AgentInfo, Trace, TraceTask

        user, system = prompt_parts(task.data)
        messages = ([vf.SystemMessage(content=system)] if system else []) + [vf.UserMessage(content=user)]
        nodes = [MessageNode(parent=i - 1 if i else None, message=m) for i, m in enumerate(messages)]
        nodes.append(MessageNode(parent=len(messages) - 1, message=vf.AssistantMessage(content=text), sampled=True))
        return Trace(task=TraceTask(type=type(task).__name__, data=task.data, key=task.key, hash=task.hash),
                     agent=AgentInfo(config=vf.AgentConfig()), nodes=nodes)


@dataclasses.dataclass(frozen=True)
class VerifiersTask(RemoteTask):
    """A verifiers taskset's tasks, scored on the host (module docstring)."""

    @property
    def name(self) -> str:
        return f"{ENV_ID}:{self.url}"


def _renderer(path: str, chat_template: bool, system_prompt: str):
    """``render(user text, system) -> ids``: the prompt in the tokenizer's chat template (a
    task's own system prompt wins over ``env.tokenizer.system_prompt``), or plain."""
    from jaxrl.models.lm import load_tokenizer
    from jaxrl.text import chat

    tok = load_tokenizer(path)
    template = chat.chat_template(tok, path) if chat_template else None
    specials = chat.special_strings(tok) if chat_template else {}

    def render(text: str, system: str) -> list[int]:
        system = system or system_prompt
        try:
            s = chat.render_prompt(template, specials, text, system) if chat_template else chat.plain_prompt(text, system)
        except ValueError as exc:
            raise SessionFault(f"malformed reply: {exc}") from None
        return list(tok.encode(s))

    return render


def verifiers_task(cfg: VerifiersConfig, tokenizer_path: str, chat_template: bool = True, system_prompt: str = "",
                   record: list | None = None) -> VerifiersTask:
    """The :class:`VerifiersTask` of ``cfg`` in the tokenizer at ``tokenizer_path``."""
    check_verifiers(cfg)
    _v1()
    env = vf_dialogue.load_env(cfg.env, cfg.id, cfg.args, cfg.env_args)
    if env is None and cfg.turns > 1:
        raise ValueError(f"env.verifiers.turns: {cfg.id} has no multi-turn env (its tasks are single-turn); "
                         "turns > 1 needs one (env.verifiers.env)")
    if env is None and cfg.seat:
        raise ValueError(f"env.verifiers.seat: {cfg.id} has no multi-turn env (no seats to choose from)")
    tasks = split_tasks(load_tasks(cfg, env.taskset if env is not None else None), cfg.held_out_every)
    # completions decoded as text; prompts rendered per task; a multi-turn env's replies in the user turn
    codec = tokenizer_codec(tokenizer_path, chat_template and env is not None, "")
    render = _renderer(tokenizer_path, chat_template, system_prompt)
    turns, reply = (1, 0) if env is None else (cfg.turns, cfg.reply_tokens)
    if turns > 1 and len(codec.reply_prefix + codec.reply_suffix) >= reply:
        raise ValueError(f"env.verifiers.reply_tokens: {reply} leaves no room for text after the chat template's "
                         f"{len(codec.reply_prefix + codec.reply_suffix)} tokens")
    rcfg = RemoteConfig(url=TRAIN, eval_url=HELD, prompt_len=cfg.prompt_len, turns=turns, turn_tokens=cfg.turn_tokens,
                        reply_tokens=reply, timeout_s=cfg.timeout_s, max_failure_frac=cfg.max_failure_frac,
                        check_schema=False)
    quiet_callback_log(RemoteEnvError)
    if env is None:
        host = VerifiersHost(cfg, rcfg, codec, render, tasks, record)
    else:
        host = vf_dialogue.VerifiersDialogueHost(cfg, rcfg, codec, render, tasks, record, env=env,
                                                 seat=vf_dialogue.played_seat(env, cfg.seat), splits=(TRAIN, HELD))
    return VerifiersTask(cfg.id, cfg.prompt_len, turns, cfg.turn_tokens, reply, codec.vocab, codec.pad_id,
                         codec.end_of_turn, host)


__all__ = ["ENV_ID", "INSTALL", "VerifiersHost", "VerifiersTask", "load_taskset", "load_tasks", "prompt_parts", "split_tasks",
           "verifiers_task"]
