"""``env.tokenizer`` and ``env.text``: the sections that put a token task into a tokenizer's ids and give a text task its rows.

The sections' dataclasses and the checks that need no file: :func:`check_text` runs when a
config is read (:mod:`jaxrl.run.config` turns its ``ValueError`` into a ``ConfigError``); the
files, the rubric and the task's own keys are checked when the task is built
(:mod:`jaxrl.text.tokenized`). :func:`text_options` gives a text task's factory the options
the two sections set, and :func:`keyed` names the config key of a factory's error.
Guide: docs/text_tasks.md.
"""

from __future__ import annotations

import dataclasses
import math


@dataclasses.dataclass(frozen=True)
class TokenizerConfig:
    """A token task spoken in a checkpoint's tokenizer (:mod:`jaxrl.text.tokenized`)."""

    path: str = ""  # a local directory with tokenizer.json (and tokenizer_config.json, config.json); unset: <algo>.model.path
    chat_template: bool = True  # wrap prompts in the tokenizer's chat template (user turn, assistant opens)
    system_prompt: str = ""  # a system message for the chat template ("" = none)


#: The largest lengths ``env.text`` takes: arrays of ``rows x length`` are built on the host
#: and kept on device, so a value far above any real prompt or answer is refused at once.
MAX_TOKENS = 1 << 17  # prompt_len, completion_len (the longest context of the supported checkpoints)
MAX_BYTES = 1 << 16  # answer_bytes, completion_bytes
#: Rows a procedural task may draw (about max(num_train * k / (k - 1), num_held_out * k) for
#: held_out_every = k); its defaults (4096, 512, 10) mirror jaxrl.text.task.procedural_task.
MAX_DRAWN_ROWS = 1 << 22
PROCEDURAL_DEFAULTS = {"num_train": 4096, "num_held_out": 512, "held_out_every": 10}


@dataclasses.dataclass(frozen=True)
class TextConfig:
    """A text task's rows, lengths and reward (:mod:`jaxrl.text.task`, docs/text_tasks.md); 0, "", null: the task's."""

    train: str = ""  # a JSONL or Parquet file of rows, or a dataset saved on disk (a Dataset.save_to_disk directory, Arrow/Parquet shards) (text/File-v0)
    held_out: str = ""  # a second file (or saved dataset) of held-out rows ("": the hash rule of held_out_every)
    held_out_every: int = 0  # k of the hash rule: a prompt is held out iff blake2b(prompt) % k == 0 (task default 10)
    prompt_column: str = "prompt"  # the row field holding the prompt text
    answer_column: str = "answer"  # the row field holding the reference answer (compared by the rubric)
    answer_after: str = ""  # the answer is the text after the last such marker, stripped (GSM8K: "####"); "": the whole field
    completion_column: str = "completion"  # the row field holding a reference completion (optional; SFT)
    prompt_len: int = 0  # prompt tokens, chat template included (longer rows are dropped and counted)
    completion_len: int = 0  # the most completion tokens (the episode's cap; a reference completion + eos must fit)
    answer_bytes: int = 0  # the longest answer, in UTF-8 bytes
    completion_bytes: int = 0  # completion bytes the rubric reads (0: completion_len x the longest token)
    reward: dict = dataclasses.field(default_factory=dict)  # the on-device rubric: {answer, extract, tag, format_weight, ...}; or {python: "module:function"}, a TRL-style reward_funcs called on the host
    system_prompt: str | None = None  # a system message (null: env.tokenizer.system_prompt)
    prompt_prefix: str = ""  # text before each prompt (a base checkpoint's format, e.g. "Question: "; inside the user turn with a chat template)
    prompt_suffix: str = ""  # text after each prompt (e.g. "\nAnswer:")
    num_train: int = 0  # procedural tasks: training prompts generated (task default 4096)
    num_held_out: int = 0  # procedural tasks: held-out prompts generated (task default 512)
    seed: int | None = None  # procedural tasks: the generator's seed (task default 0)



def check_text(text: TextConfig) -> None:
    """``env.text`` before anything is read (files, rubric and keys are checked at build)."""
    for name in ("held_out_every", "prompt_len", "completion_len", "answer_bytes", "completion_bytes", "num_train", "num_held_out", "seed"):
        if (value := getattr(text, name)) is not None and value < 0:
            raise ValueError(f"env.text.{name}: must be >= 0 (0: the task's default), got {value}")
    if text.held_out_every == 1:
        raise ValueError("env.text.held_out_every: the hash rule needs k >= 2 (k = 1 holds out every prompt)")
    if text.held_out and text.held_out_every:
        raise ValueError("env.text.held_out_every: a held-out file (env.text.held_out) is given; use one or the other")
    if text.held_out and not text.train:
        raise ValueError("env.text.held_out: needs env.text.train (the training rows)")
    for names, cap, unit in ((("prompt_len", "completion_len"), MAX_TOKENS, "tokens"),
                             (("answer_bytes", "completion_bytes"), MAX_BYTES, "bytes")):
        for name in names:
            if getattr(text, name) > cap:
                raise ValueError(f"env.text.{name}: at most {cap:,} {unit} (a table of rows x {name} is built), "
                                 f"got {getattr(text, name):,}")
    if not text.train:
        _check_drawn_rows(text)


def _check_drawn_rows(text: TextConfig) -> None:
    """A procedural task draws enough rows to fill both splits by the hash rule: bounded."""
    value = {k: getattr(text, k) or default for k, default in PROCEDURAL_DEFAULTS.items()}
    k = value["held_out_every"]
    drawn = max(value["num_train"] * k / max(k - 1, 1), value["num_held_out"] * k)
    if drawn > MAX_DRAWN_ROWS:
        culprit = "num_train" if value["num_train"] * k / max(k - 1, 1) >= value["num_held_out"] * k else (
            "held_out_every" if text.held_out_every else "num_held_out")
        raise ValueError(f"env.text.{culprit}: num_train={value['num_train']:,}, num_held_out={value['num_held_out']:,} "
                         f"and held_out_every={k:,} need ~{drawn:,.0f} generated rows, more than the {MAX_DRAWN_ROWS:,} "
                         "a procedural task draws")


#: env.text keys -> the text task option each sets (a key left at its default sets nothing).
TEXT_KEYS = (
    "train", "held_out", "held_out_every", "prompt_column", "answer_column", "completion_column", "answer_after", "prompt_len",
    "completion_len", "answer_bytes", "completion_bytes", "reward", "num_train", "num_held_out", "seed", "prompt_prefix",
    "prompt_suffix",
)
#: Options of jaxrl.text.task that are keys of env.tokenizer, for error messages.
TOKENIZER_OPTIONS = {"tokenizer_path": "env.tokenizer.path", "chat_template": "env.tokenizer.chat_template"}


def text_options(tokenizer: TokenizerConfig | None, text: TextConfig | None) -> dict:
    """The options ``env.text`` and ``env.tokenizer`` give a text task's factory (keys left at
    their defaults give none; ``env.text.system_prompt`` wins over the tokenizer's)."""
    options = {}
    if text is not None:
        defaults = TextConfig()
        options = {k: getattr(text, k) for k in TEXT_KEYS if getattr(text, k) != getattr(defaults, k)}
    system = text.system_prompt if text is not None else None
    if tokenizer is not None:
        options.update(tokenizer_path=tokenizer.path, chat_template=tokenizer.chat_template)
        system = tokenizer.system_prompt if system is None else system
    if system:
        options["system_prompt"] = system
    return options


def keyed(exc: Exception) -> ValueError:
    """A text task factory's error (``"option: why"``) as one line naming its config key
    (``env.tokenizer.path: ...``, ``env.text.prompt_len: ...``; else ``env.text: ...``)."""
    message = " ".join(str(exc).split())
    option, _, rest = message.partition(": ")
    if option in TOKENIZER_OPTIONS:
        return ValueError(f"{TOKENIZER_OPTIONS[option]}: {rest}")
    if option in TEXT_KEYS or option == "system_prompt":
        return ValueError(f"env.text.{option}: {rest}")
    return ValueError(f"env.text: {message}")


# ---------------------------------------------------------------------------------------
# env.remote (jaxrl.text.remote; docs/remote_envs.md)
# ---------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class RemoteConfig:
    """An OpenEnv server's text environment trained on remotely (docs/remote_envs.md)."""

    url: str = ""  # the server, ws://host:port (or http://; /ws is added)
    eval_url: str = ""  # a server of the held-out split for evaluation ("": url)
    prompt_len: int = 128  # prompt tokens (chat template included); a longer prompt fails its session
    turns: int = 1  # policy turns per episode (the server may end it earlier with done)
    turn_tokens: int = 64  # token slots of one policy turn (its end-of-turn included)
    reply_tokens: int = 0  # token slots of one env reply (turns > 1 needs them); a longer reply keeps its last tokens
    timeout_s: float = 30.0  # seconds each reset and step may take before its session fails
    max_failure_frac: float = 0.25  # stop the run when more than this fraction of a turn's sessions fail
    observation_key: str = "text"  # the observation's field holding the text (a string observation: itself)
    action_field: str = "action"  # the action's field the completion is sent in (jaxrl serve: action)
    check_schema: bool = True  # read GET /schema when the run is built and refuse a mismatch


def check_remote(cfg: RemoteConfig) -> None:
    """``ValueError`` naming the ``env.remote`` key that cannot work (no network needed)."""
    if not cfg.url:
        raise ValueError("env.remote.url: not set; name the OpenEnv server, e.g. ws://127.0.0.1:8000")
    from jaxrl.interop.openenv import urls

    for key in ("url", "eval_url"):
        if getattr(cfg, key):
            try:
                urls(getattr(cfg, key))
            except ValueError as exc:
                raise ValueError(f"env.remote.{key}: {exc}") from None
    for key in ("prompt_len", "turns", "turn_tokens"):
        if isinstance(getattr(cfg, key), bool) or getattr(cfg, key) < 1:
            raise ValueError(f"env.remote.{key}: must be >= 1, got {getattr(cfg, key)!r}")
    if cfg.reply_tokens < 0:
        raise ValueError(f"env.remote.reply_tokens: must be >= 0, got {cfg.reply_tokens}")
    if cfg.turns > 1 and cfg.reply_tokens < 1:
        raise ValueError(f"env.remote.reply_tokens: turns {cfg.turns} > 1 needs reply slots for the env's replies (>= 1)")
    if not (math.isfinite(cfg.timeout_s) and cfg.timeout_s > 0):
        raise ValueError(f"env.remote.timeout_s: must be a positive number of seconds, got {cfg.timeout_s}")
    if not 0 <= cfg.max_failure_frac <= 1:
        raise ValueError(f"env.remote.max_failure_frac: must be in [0, 1], got {cfg.max_failure_frac}")
    for key in ("observation_key", "action_field"):
        if not getattr(cfg, key):
            raise ValueError(f"env.remote.{key}: must not be empty")


# ---------------------------------------------------------------------------------------
# env.verifiers (jaxrl.text.vf_env; docs/remote_envs.md#verifiers-environments)
# ---------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class VerifiersConfig:
    """An installed ``verifiers`` (0.4, ``verifiers.v1``) taskset trained on: its tasks' prompts, its rewards."""

    id: str = ""  # the taskset's id (its package name, e.g. my-taskset); env: {verifiers: NAME} sets it
    args: dict = dataclasses.field(default_factory=dict)  # the taskset config's fields (TasksetConfig of its class)
    prompt_len: int = 128  # prompt tokens (chat template included); a longer prompt fails its episode
    turn_tokens: int = 64  # token slots of the completion (its end-of-turn included)
    held_out_every: int = 10  # the task at position i is held out (evaluation only) iff i % k == 0 (0: none held out)
    num_tasks: int = 0  # read at most this many tasks of the taskset (0: all; an infinite taskset needs a number)
    timeout_s: float = 30.0  # seconds one batch's scoring (a multi-turn env: its next turn, or its end and scoring) may take before its episodes fail
    max_failure_frac: float = 0.25  # stop the run when more than this fraction of a batch's episodes fail to score
    env: str = ""  # a verifiers Env id run over the taskset ("": the taskset package's own Env, if it exports one; else single-turn)
    env_args: dict = dataclasses.field(default_factory=dict)  # the Env config's fields (multi-turn envs)
    seat: str = ""  # the Env's seat (AgentConfig field) jaxrl's policy plays ("": its only seat, or the only one left trainable)
    turns: int = 1  # policy turns per episode of a multi-turn env (its next turn after the last comes back terminated)
    reply_tokens: int = 0  # token slots of one env reply (turns > 1 needs them); a longer reply keeps its last tokens


def check_verifiers(cfg: VerifiersConfig) -> None:
    """``ValueError`` naming the ``env.verifiers`` key that cannot work (nothing imported)."""
    if not cfg.id:
        raise ValueError("env.verifiers: no taskset named; e.g. env: {verifiers: my-taskset}")
    for key in ("prompt_len", "turn_tokens", "turns"):
        if isinstance(getattr(cfg, key), bool) or getattr(cfg, key) < 1:
            raise ValueError(f"env.verifiers.{key}: must be >= 1, got {getattr(cfg, key)!r}")
    if cfg.reply_tokens < 0:
        raise ValueError(f"env.verifiers.reply_tokens: must be >= 0, got {cfg.reply_tokens}")
    if cfg.turns > 1 and cfg.reply_tokens < 1:
        raise ValueError(f"env.verifiers.reply_tokens: turns {cfg.turns} > 1 needs reply slots for the env's replies (>= 1)")
    if cfg.held_out_every < 0 or cfg.held_out_every == 1:
        raise ValueError(f"env.verifiers.held_out_every: 0 (none) or k >= 2, got {cfg.held_out_every}")
    if cfg.num_tasks < 0:
        raise ValueError(f"env.verifiers.num_tasks: must be >= 0 (0: all), got {cfg.num_tasks}")
    if not (math.isfinite(cfg.timeout_s) and cfg.timeout_s > 0):
        raise ValueError(f"env.verifiers.timeout_s: must be a positive number of seconds, got {cfg.timeout_s}")
    if not 0 <= cfg.max_failure_frac <= 1:
        raise ValueError(f"env.verifiers.max_failure_frac: must be in [0, 1], got {cfg.max_failure_frac}")


# ---------------------------------------------------------------------------------------
# env.mix (jaxrl.text.mix; docs/remote_envs.md#mixing-tasks)
# ---------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class MixMember:
    """One task of a mixed run: a registered token task (``id``) or a server (``remote``)."""

    id: str = ""  # a registered token task, e.g. text/WordProblems-v0 ("": remote or verifiers must be set)
    remote: RemoteConfig | None = None  # or an OpenEnv server's text env (as env.remote)
    verifiers: VerifiersConfig | None = None  # or an installed verifiers taskset (as env.verifiers)
    weight: float = 1.0  # the share of the batch's prompt groups drawn from this task (relative to the others)
    name: str = ""  # its source tag in the metrics (reward/<name>/mean); "": the id without text/ (remote: remote; verifiers: its id)
    params: dict = dataclasses.field(default_factory=dict)  # overrides of the task's default params
    eval_params: dict = dataclasses.field(default_factory=dict)  # further overrides at evaluation
    tokenizer: TokenizerConfig | None = None  # its own chat template / system prompt (path: env.tokenizer.path's)
    text: TextConfig | None = None  # a text task's rows, lengths and reward (as env.text)


#: A source tag: letters, digits, ``_ . -`` (it becomes part of metric keys).
SOURCE_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-")
#: The most tasks one run mixes (each one's respond runs on every row of the batch).
MAX_MIX = 16


def source_name(member: MixMember) -> str:
    """The source tag of ``member``: its ``name``, else its id without ``text/`` (``remote``)."""
    if member.name:
        return member.name
    if member.remote is not None:
        return "remote"
    if member.verifiers is not None:
        return member.verifiers.id.replace("/", "_")
    return member.id.split("/", 1)[1] if member.id.startswith("text/") else member.id.replace("/", "_")


def check_mix(members: tuple[MixMember, ...]) -> None:
    """``ValueError`` naming the ``env.mix[i]`` key that cannot work (nothing is built)."""
    if not members:
        raise ValueError("env.mix: an empty list; give at least one task, e.g. [{id: text/WordProblems-v0}]")
    if len(members) > MAX_MIX:
        raise ValueError(f"env.mix: {len(members)} tasks, at most {MAX_MIX} (each one's respond runs on every row)")
    seen: dict[str, int] = {}
    for i, m in enumerate(members):
        at = f"env.mix[{i}]"
        kinds = [k for k in ("id", "remote", "verifiers") if getattr(m, k)]
        if len(kinds) != 1:
            raise ValueError(f"{at}: give exactly one of id (a registered token task), remote (a server) and verifiers "
                             f"(a taskset)" + (f", not {' and '.join(kinds)}" if kinds else ""))
        w = m.weight
        if isinstance(w, bool) or not isinstance(w, (int, float)) or not (math.isfinite(w) and w > 0):
            raise ValueError(f"{at}.weight: must be a positive number, got {w!r}")
        if m.verifiers is not None:
            given = [k for k in ("params", "eval_params", "text") if getattr(m, k)]
            if given:
                raise ValueError(f"{at}.{given[0]}: a verifiers taskset holds its tasks and rewards, not this key")
            try:
                check_verifiers(m.verifiers)
            except ValueError as exc:
                raise ValueError(str(exc).replace("env.verifiers", f"{at}.verifiers", 1)) from None
        if m.remote is not None:
            given = [k for k in ("params", "eval_params", "text") if getattr(m, k)]
            if given:
                raise ValueError(f"{at}.{given[0]}: a remote task takes its settings from the server, not this key")
            try:
                check_remote(m.remote)
            except ValueError as exc:
                raise ValueError(str(exc).replace("env.remote.", f"{at}.remote.", 1)) from None
        elif m.text is not None:
            try:
                check_text(m.text)
            except ValueError as exc:
                raise ValueError(str(exc).replace("env.text.", f"{at}.text.", 1)) from None
        if m.tokenizer is not None and m.tokenizer.path:
            raise ValueError(f"{at}.tokenizer.path: the tasks of a mix share env.tokenizer.path (one model's "
                             "vocabulary); set it there, and only chat_template / system_prompt here")
        name = source_name(m)
        if not name or not set(name) <= SOURCE_CHARS:
            raise ValueError(f"{at}.name: {name!r} is no source tag (letters, digits, _ . - only)")
        if "loss" in name.lower():
            raise ValueError(f"{at}.name: {name!r} would read as a loss metric (reward/{name}/mean); choose another name")
        if name in seen:
            raise ValueError(f"{at}.name: source {name!r} is env.mix[{seen[name]}]'s too; give each task its own name")
        seen[name] = i


__all__ = [
    "MAX_BYTES", "MAX_DRAWN_ROWS", "MAX_MIX", "MAX_TOKENS", "PROCEDURAL_DEFAULTS", "SOURCE_CHARS", "TEXT_KEYS",
    "TOKENIZER_OPTIONS", "MixMember", "RemoteConfig", "TextConfig", "TokenizerConfig", "VerifiersConfig", "check_mix",
    "check_remote", "check_text", "check_verifiers", "keyed", "source_name", "text_options",
]
