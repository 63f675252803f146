"""``TextTask``: a token env over text rows, rewarded by a byte verifier (a rubric) at the end.

The rows (prompt, answer, optional reference completion) are tokenized once on the host by
:mod:`jaxrl.text.data` and stored in the task as static tables (``bytes``, so the task stays
hashable and the tables become constants of the program, like
:class:`jaxrl.text.tokenized.TokenizedTask`'s):

* ``reset`` draws a row uniformly from the training table, or from the held-out table when
  ``params.held_out``; given an int32 row index (``[]``) instead of a key it starts at that
  row (modulo the table's rows), which is how evaluation scores every held-out row once
  (:func:`evaluation_starts`); ``obs`` = the left-padded prompt then the completion so far
  (``int32[prompt_len + max_completion_len]``, the pad id in unwritten slots);
* ``step`` writes one token (ids clipped into ``[0, vocab_size)``); the episode terminates
  at the tokenizer's eos and is truncated after ``max_completion_len`` tokens. The reward is
  0 before the end and the rubric's score of the completion (decoded to bytes on device)
  on the last step; ``info`` carries the rubric's metrics on the last step, 0 before;
* ``respond`` (the dialogue rollout's path) scores a whole turn with one rubric call.

:func:`text_task` builds one from rows; :func:`procedural_task` and :func:`file_task` are the
two sources (a seeded generator of rows, or a JSONL/Parquet file). Guide: docs/text_tasks.md.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from typing import Any, Callable, ClassVar, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from jaxrl.core import spaces
from jaxrl.core.env import Range, check_action_shape, first_timestep, transition
from jaxrl.core.tokens import TokenTask, Turn, reward_on_last_token
from jaxrl.text import data
from jaxrl.text.bytes import ByteTable
from jaxrl.text.config import keyed, text_options
from jaxrl.verifiers import Task, Verifier

Array = jax.Array


@struct.dataclass
class TextTaskParams:
    held_out: bool = False  # draw prompts from the held-out table (evaluation)

    bounds: ClassVar[dict] = {"held_out": Range(ge=0, le=1)}


@struct.dataclass
class TextState:
    task: Task  # prompt int32 [Lp], answer int32 [answer_bytes] (UTF-8 bytes), answer_len int32 []
    completion: Array  # int32 [max_completion_len], tokens written so far, pad id after
    time: Array  # int32 [], tokens written
    done: Array  # bool []


@dataclasses.dataclass(frozen=True)
class TextSplit:
    """One split's rows as raw bytes (see :class:`jaxrl.text.data.Encoded` for the shapes)."""

    count: int
    prompts: bytes  # int32 [count, prompt_len]
    answers: bytes  # int32 [count, answer_bytes]
    answer_lens: bytes  # int32 [count]
    completions: bytes  # int32 [count, completion_len], b"" when the rows have none

    @classmethod
    def of(cls, enc: data.Encoded) -> "TextSplit":
        c = b"" if enc.completions is None else enc.completions.astype(np.int32).tobytes()
        return cls(len(enc), enc.prompts.tobytes(), enc.answers.tobytes(), enc.answer_lens.tobytes(), c)


@dataclasses.dataclass(frozen=True)
class TextTask(TokenTask):
    """A token env over tokenized text rows (module docstring); build with :func:`text_task`."""

    task_name: str
    vocab: int  # the model's vocabulary (actions), >= the tokenizer's ids
    prompt_length: int
    completion_length: int
    answer_width: int  # answer bytes per row
    pad: int
    byte_table: ByteTable = dataclasses.field(repr=False)  # id -> bytes; its eos_id ends a completion
    train: TextSplit = dataclasses.field(repr=False)
    held: TextSplit = dataclasses.field(repr=False)  # the training split again when there are no held-out rows
    reward_spec: str = "{}"  # the rubric dict as JSON (jaxrl.text.rubric.rubric)
    max_bytes: int = 0  # bytes of a completion the rubric reads (0: max_completion_len x the longest token)
    tokenizer_path: str = ""
    report: tuple = dataclasses.field(default=(), compare=False, hash=False, repr=False)  # (train, held-out) RowReport
    texts: tuple = dataclasses.field(default=((), ()), compare=False, hash=False, repr=False)  # prompt texts per split
    detokenize: Callable[[list[int]], str] = dataclasses.field(default=str, compare=False, hash=False, repr=False)
    chat_template: bool = True  # prompts are rendered with the tokenizer's chat template
    system_prompt: str = ""  # ... after this system message (without a template: on the line before the prompt)
    prompt_prefix: str = ""  # text before each row's prompt (inside the user message with a template)
    prompt_suffix: str = ""  # text after it
    fields: tuple = dataclasses.field(default=((), ()), compare=False, hash=False, repr=False)  # per split, each row's other fields (Python rewards)

    invalid_action_rule = "token ids are clipped into [0, vocab_size)"

    @classmethod
    def in_tokenizer(cls, build: Callable[..., "TextTask"], wording) -> "TextTask":
        """The text task built once from ``env.text``'s rows, lengths and rubric in
        ``env.tokenizer``'s ids (:func:`jaxrl.text.config.text_options`; errors name the
        config key); its rows kept and dropped are printed (:meth:`summary`)."""
        try:
            task = build(**text_options(wording.tokenizer, wording.text))
        except (TypeError, ValueError) as exc:
            raise keyed(exc) from None
        print(task.summary(), flush=True)
        return task

    @property
    def eval_scores(self) -> tuple[tuple[str, str], ...]:
        """The rubric's ``correct``; none for a Python reward (its figure is the reward)."""
        return () if self.python_reward else (("correct", "correct answers"),)

    # -- the token-task shape ---------------------------------------------------------------

    @property
    def name(self) -> str:
        return self.task_name

    @property
    def vocab_size(self) -> int:
        return self.vocab

    @property
    def prompt_len(self) -> int:
        return self.prompt_length

    @property
    def max_completion_len(self) -> int:
        return self.completion_length

    @property
    def pad_id(self) -> int:
        return self.pad

    @property
    def end_of_turn(self) -> int:
        return self.byte_table.eos_id

    @property
    def default_params(self) -> TextTaskParams:
        return TextTaskParams()

    def held_out_params(self, params):
        return params.replace(held_out=True)

    @property
    def python_reward(self) -> str | None:
        """``"module:function"`` when ``reward_spec`` names a Python reward, else None."""
        from jaxrl.text import python_reward

        return python_reward.reference(json.loads(self.reward_spec))

    @functools.cached_property
    def verifier(self) -> Verifier:
        """The rubric of ``reward_spec`` over this task's byte table, or the Python reward it
        names called through a host callback (:mod:`jaxrl.text.python_reward`)."""
        ref = self.python_reward
        if ref is not None:
            return self._python_verifier(ref)
        from jaxrl.text.rubric import rubric

        return rubric(json.loads(self.reward_spec), self.byte_table, self.max_bytes or None)

    def _python_verifier(self, ref: str) -> Verifier:
        from jaxrl.text import python_reward

        rows, names = {}, set()
        splits = [("train", self.texts[0], self.fields[0])]
        if self.held is not self.train:  # else the training rows serve both
            splits.insert(0, ("held_out", self.texts[1], self.fields[1]))
        for split, texts, fields in splits:
            a = self.arrays(split)
            for i, (text, cols) in enumerate(zip(texts, fields)):
                rows.setdefault(python_reward.row_key(a["prompts"][i], a["answers"][i], int(a["answer_lens"][i])), (text, cols))
                names.update(cols)
        tok = _tokenizer(self.tokenizer_path)
        host = python_reward.HostReward(ref, python_reward.load_function(ref), rows, sorted(names),
                                        functools.partial(tok.decode, skip_special_tokens=True), self.end_of_turn, tok.vocab_size)
        return python_reward.verifier(host)

    # -- the tables -------------------------------------------------------------------------

    def _split(self, split: str) -> TextSplit:
        if split not in ("train", "held_out"):
            raise ValueError(f"split must be 'train' or 'held_out', got {split!r}")
        return self.train if split == "train" else self.held

    def arrays(self, split: str = "train") -> dict[str, np.ndarray]:
        """numpy views of a split's tables: ``prompts``, ``answers``, ``answer_lens``."""
        s = self._split(split)
        return {
            "prompts": np.frombuffer(s.prompts, np.int32).reshape(s.count, self.prompt_length),
            "answers": np.frombuffer(s.answers, np.int32).reshape(s.count, self.answer_width),
            "answer_lens": np.frombuffer(s.answer_lens, np.int32),
        }

    def demonstrations(self, split: str = "train") -> tuple[np.ndarray, np.ndarray]:
        """int32 ``[N, prompt_len]`` prompts (left-padded with ``pad_id``) and int32
        ``[N, max_completion_len]`` reference completions (then eos, ``pad_id`` after)."""
        s = self._split(split)
        if not s.completions:
            raise ValueError(f"{self.name}: its rows have no reference completions (a 'completion' column or a solver)")
        completions = np.frombuffer(s.completions, np.int32).reshape(s.count, self.completion_length)
        return self.arrays(split)["prompts"].copy(), completions.copy()

    def encode_demonstrations(self, path: str, columns: data.Columns = data.Columns(), *,
                              allow_held_out: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """A JSONL/Parquet file of demonstrations (``prompt`` and ``completion`` columns) as
        :meth:`demonstrations` gives them: the same tokenizer, chat template, system prompt and
        lengths as this task's prompts. Bad rows are counted and printed, never truncated;
        ``ValueError`` when none is usable. Rows whose prompt is one of the task's held-out
        prompts (or equal to one after stripping, case-folding and NFKC,
        :func:`jaxrl.text.data.prompt_key`) raise :class:`jaxrl.text.data.HeldOutOverlap`
        unless ``allow_held_out`` (then their count is printed)."""
        raw = data.read_rows(path)
        rows = [dict(r, **{columns.answer: ""}) if isinstance(r, dict) else r for r in raw]
        rows, system = framed(rows, columns.prompt, self.chat_template, self.system_prompt, self.prompt_prefix, self.prompt_suffix)
        if self.held is not self.train:  # (without held-out rows evaluation reads the training rows)
            hits = data.held_out_matches([r.get(columns.prompt) if isinstance(r, dict) else None for r in rows], self.texts[1])
            if hits and not allow_held_out:
                raise data.HeldOutOverlap(path, len(hits), len(rows), hits[0] + 1, raw[hits[0]][columns.prompt])
            if hits:
                print(f"{self.name}: {path}: {len(hits)} of {len(rows)} demonstrations have a held-out prompt "
                      "(trained on: allowed)")
        enc = data.encode_rows(
            rows, _tokenizer(self.tokenizer_path), prompt_len=self.prompt_length, answer_bytes=self.answer_width,
            completion_len=self.completion_length, chat_template=self.chat_template, system_prompt=system,
            columns=columns, source=path,
        )
        print(f"{self.name}: demonstrations {enc.report.summary()}")
        return enc.prompts.astype(np.int32), enc.completions.astype(np.int32)

    def prompt_texts(self, split: str = "train") -> tuple[str, ...]:
        """The user text of every row of a split (before the chat template, the prompt
        prefix and suffix included; without a template the whole prompt), host-side."""
        return self.texts[0] if split == "train" or self.held is self.train else self.texts[1]

    def summary(self) -> str:
        """The rows kept and dropped, a line per split (printed when a run is built)."""
        train, held = self.report
        second = held.summary() if self.held is not self.train else "no held-out rows: evaluation draws from the training rows"
        return f"{self.name}: {train.summary()}\n{self.name}: {second}"

    def rows(self, params) -> int:
        """Rows of the table ``params`` selects (the held-out one for :meth:`held_out_params`);
        host-side, ``params`` concrete."""
        return self.held.count if bool(np.asarray(params.held_out)) else self.train.count

    def _draw(self, key: Array, s: TextSplit) -> Task:
        if is_row_index(key):
            i = jnp.asarray(key, jnp.int32) % s.count
        else:
            i = jax.random.randint(key, (), 0, s.count)
        prompts = np.frombuffer(s.prompts, np.int32).reshape(s.count, self.prompt_length)
        answers = np.frombuffer(s.answers, np.int32).reshape(s.count, self.answer_width)
        return Task(jnp.asarray(prompts)[i], jnp.asarray(answers)[i], jnp.asarray(np.frombuffer(s.answer_lens, np.int32))[i])

    # -- the environment --------------------------------------------------------------------

    def _obs(self, state: TextState) -> Array:
        return jnp.concatenate([state.task.prompt, state.completion]).astype(jnp.int32)

    def _zero_info(self, task: Task) -> dict:
        completion = jax.ShapeDtypeStruct((self.completion_length,), jnp.int32)
        _, metrics = jax.eval_shape(lambda t, c: self.verifier(t, c), task, completion)
        return {k: jnp.zeros((), jnp.float32) for k in metrics}

    def reset(self, key, params):
        """A new episode: a row drawn with ``key``, or row ``key`` of the split when ``key`` is
        an int32 row index ``[]`` (module docstring)."""
        train, held = self._draw(key, self.train), self._draw(key, self.held)
        task = jax.tree_util.tree_map(lambda h, t: jnp.where(params.held_out, h, t), held, train)
        completion = jnp.full((self.completion_length,), self.pad, jnp.int32)
        state = TextState(task, completion, jnp.zeros((), jnp.int32), jnp.zeros((), jnp.bool_))
        return state, first_timestep(self._obs(state), self._zero_info(task))

    def step(self, key, state, action, params):
        del key, params  # deterministic given the token
        check_action_shape(self.name, action, ())
        token = jnp.clip(jnp.asarray(action, jnp.int32), 0, self.vocab - 1)
        pos = jnp.clip(state.time, 0, self.completion_length - 1)
        completion = jnp.where(state.done, state.completion, state.completion.at[pos].set(token))
        time = jnp.where(state.done, state.time, state.time + 1)
        terminated = jnp.any(completion == self.end_of_turn)
        truncated = (time >= self.completion_length) & ~terminated
        done = terminated | truncated
        reward, metrics = self.verifier(state.task, completion)
        new = TextState(state.task, completion, time, done)
        info = {k: jnp.where(done, v, 0.0).astype(jnp.float32) for k, v in metrics.items()}
        return new, transition(self._obs(new), jnp.where(done, reward, 0.0).astype(jnp.float32), terminated, truncated, info)

    def respond(self, key, state, turn, params):
        """The whole turn scored by one rubric call: the same reward (on the turn's last token),
        flags and info as stepping through it token by token, without a rubric per token."""
        del key, params
        turn = jnp.clip(turn.astype(jnp.int32), 0, self.vocab - 1)
        eos = self.end_of_turn
        is_end = turn == eos
        ended = jnp.any(is_end)
        written = jnp.where(ended, jnp.argmax(is_end) + 1, turn.shape[0]).astype(jnp.int32)
        completion = jnp.where(jnp.arange(turn.shape[0]) < written, turn, self.pad)
        reward, metrics = self.verifier(state.task, completion)
        info = {k: v.astype(jnp.float32) for k, v in metrics.items()}
        new = TextState(state.task, completion, written, jnp.ones((), jnp.bool_))
        reply = jnp.full((self.max_reply_tokens,), self.pad, jnp.int32)
        return new, Turn(reply, reward_on_last_token(turn, eos, reward), ended, ~ended, info)

    def observation_space(self, params):
        return spaces.Box(0, self.vocab - 1, (self.prompt_length + self.completion_length,), jnp.int32)

    def action_space(self, params):
        return spaces.Discrete(self.vocab)

    def decode(self, tokens) -> str:
        """``tokenizer.decode`` of the ids that are not the pad id (special tokens kept)."""
        return self.detokenize([int(t) for t in np.asarray(tokens).reshape(-1) if int(t) != self.pad])


def is_row_index(key) -> bool:
    """``key`` is a row index (a signed integer scalar), not a PRNG key (uint32 ``[2]`` or a
    typed key): decided from its dtype and shape, at trace time."""
    dtype = jnp.result_type(key) if not hasattr(key, "dtype") else key.dtype
    return jnp.issubdtype(dtype, jnp.signedinteger) and jnp.ndim(key) == 0


#: ``held_out`` modes of :func:`evaluation_starts` (``grpo.eval_held_out``, ``sft.eval_held_out``).
EVAL_HELD_OUT = ("all", "sample")


def evaluation_starts(env, params, episodes: int, key: Array, held_out: str = "all") -> Array:
    """What an evaluation vmaps ``reset`` / ``start`` over, one entry per episode.

    ``held_out == "all"`` and ``env`` a :class:`TextTask` (a table of rows): int32
    ``[min(episodes, rows)]`` row indices ``0, 1, ...`` of the split ``params`` selects, so each
    row is scored exactly once (``episodes`` caps it at the first rows; no padding, the shape
    is static); the same figure for the same weights whatever ``key``. Otherwise
    (``"sample"``, or a task that generates its prompts): ``episodes`` keys split from ``key``,
    each episode's row drawn with replacement.
    """
    if held_out not in EVAL_HELD_OUT:
        raise ValueError(f"eval_held_out: expected one of {EVAL_HELD_OUT}, got {held_out!r}")
    if held_out == "all" and isinstance(env, TextTask):
        return jnp.arange(min(int(episodes), env.rows(params)), dtype=jnp.int32)
    return jax.random.split(key, episodes)


def evaluation_rows(env, params, held_out: str = "all") -> int:
    """Rows of the evaluated split when :func:`evaluation_starts` enumerates them, else 0."""
    return env.rows(params) if held_out == "all" and isinstance(env, TextTask) else 0


# ---------------------------------------------------------------------------------------
# Building
# ---------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=8)
def _tokenizer(path: str):
    from jaxrl.models.lm import load_tokenizer

    return load_tokenizer(path)


def framed(rows: Sequence[Any], column: str, chat_template: bool, system_prompt: str, prefix: str, suffix: str
           ) -> tuple[list, str]:
    """``(rows, system prompt for the template)``: each row's prompt between ``prefix`` and
    ``suffix``; without a chat template also after the system prompt and a newline
    (:func:`jaxrl.text.chat.plain_prompt`), the template then getting none. Rows that are not
    objects with a string prompt are left as they are (``encode_rows`` counts them as bad)."""
    from jaxrl.text import chat

    system = "" if chat_template else system_prompt
    if not (prefix or suffix or system):
        return list(rows), system_prompt

    def frame(row):
        if not (isinstance(row, dict) and isinstance(row.get(column), str)):
            return row
        return {**row, column: chat.plain_prompt(row[column], system, prefix, suffix)}

    return [frame(r) for r in rows], system_prompt if chat_template else ""


def _check_template(tok, chat_template: bool, source: str, system_prompt: str) -> None:
    """A tokenizer without a chat template, or with one that does not render a prompt (with
    ``system_prompt``: some templates refuse a system role), refused now, naming the option."""
    if not chat_template:
        return
    from jaxrl.text import chat

    try:
        chat.render_prompt(chat.chat_template(tok, source), chat.special_strings(tok), "x", system_prompt)
    except ValueError as exc:
        raise ValueError(f"chat_template: {exc}") from None


def _positive(options: dict, *names: str) -> None:
    for name in names:
        value = options[name]
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{name}: expected an integer >= 1, got {value!r}")


def text_task(
    name: str,
    train_rows: Sequence[Any],
    held_rows: Sequence[Any],
    *,
    tokenizer_path: str,
    prompt_len: int,
    completion_len: int,
    answer_bytes: int,
    reward: dict,
    chat_template: bool = True,
    system_prompt: str = "",
    prompt_prefix: str = "",
    prompt_suffix: str = "",
    columns: data.Columns = data.Columns(),
    completions: bool = True,
    completion_bytes: int = 0,
    sources: tuple[str, str] = ("train", "held out"),
) -> TextTask:
    """A :class:`TextTask` from rows (:func:`jaxrl.text.data.encode_rows` for the row format).

    ``held_rows`` empty: evaluation draws from the training rows (``summary`` says so).
    ``completions``: encode the rows' reference completions (for ``demonstrations``).
    ``completion_bytes``: bytes of a completion the rubric reads (0: all it can hold).
    ``prompt_prefix`` / ``prompt_suffix`` frame each row's prompt; ``chat_template`` false
    (a base checkpoint) puts the system prompt, if any, on the line before it (:func:`framed`).
    ``ValueError`` names the option at fault (``prompt_len: ...``, ``reward: ...``,
    ``chat_template: ...`` for a tokenizer without a template or one that fails).
    """
    options = {"prompt_len": prompt_len, "completion_len": completion_len, "answer_bytes": answer_bytes}
    _positive(options, *options)
    for option, value in (("system_prompt", system_prompt), ("prompt_prefix", prompt_prefix), ("prompt_suffix", prompt_suffix)):
        if not isinstance(value, str):
            raise ValueError(f"{option}: expected a string, got {value!r}")
    try:
        tok = _tokenizer(str(tokenizer_path))
    except (OSError, ValueError) as exc:
        raise ValueError(f"tokenizer_path: {exc}") from None
    _check_template(tok, chat_template, str(tokenizer_path), system_prompt)
    pad_id, eos_id = data.special_ids(tok, str(tokenizer_path))
    vocab = data.model_vocab_size(tokenizer_path, tok)
    table = ByteTable.from_tokenizer(tok, vocab, eos_id)
    if not isinstance(reward, dict):
        raise ValueError(f"reward: expected a mapping (the rubric), got {reward!r}")
    try:  # traced once here, so a bad rubric is an error now, naming the key, not inside the algorithm
        from jaxrl.text import python_reward
        from jaxrl.text.rubric import rubric

        ref = python_reward.reference(dict(reward))
        if ref is not None:  # the function is imported now: a bad name is an error before anything compiles
            python_reward.load_function(ref)
            verifier = python_reward.verifier(None)
        else:
            verifier = rubric(dict(reward), table, completion_bytes or None)
        shapes = Task(*(jax.ShapeDtypeStruct(s, jnp.int32) for s in ((prompt_len,), (answer_bytes,), ())))
        jax.eval_shape(lambda t, c: verifier(t, c), shapes, jax.ShapeDtypeStruct((completion_len,), jnp.int32))
    except (TypeError, ValueError, KeyError) as exc:
        raise ValueError(f"reward: {exc}") from None
    frame = functools.partial(framed, column=columns.prompt, chat_template=chat_template, system_prompt=system_prompt,
                              prefix=prompt_prefix, suffix=prompt_suffix)
    (train_rows, system), (held_rows, _) = frame(train_rows), frame(held_rows)
    encode = functools.partial(
        data.encode_rows, tokenizer=tok, prompt_len=prompt_len, answer_bytes=answer_bytes,
        completion_len=completion_len if completions else None, chat_template=chat_template,
        system_prompt=system, columns=columns,
    )
    train = encode(train_rows, source=sources[0])
    held = encode(held_rows, source=sources[1], allow_empty=True)
    train_split = TextSplit.of(train)
    held_split = TextSplit.of(held) if len(held) else train_split
    return TextTask(
        name, int(vocab), int(prompt_len), int(completion_len), int(answer_bytes), pad_id, table,
        train_split, held_split, json.dumps(reward, sort_keys=True), int(completion_bytes), str(tokenizer_path),
        (train.report, held.report), (train.texts, held.texts), functools.partial(tok.decode, skip_special_tokens=False),
        bool(chat_template), str(system_prompt), str(prompt_prefix), str(prompt_suffix), (train.fields, held.fields),
    )


#: Options every text task takes (``env.text`` keys), and the procedural / file ones.
COMMON_OPTIONS = (
    "tokenizer_path", "chat_template", "system_prompt", "prompt_prefix", "prompt_suffix", "prompt_len", "completion_len",
    "answer_bytes", "reward", "held_out_every", "completion_bytes",
)
PROCEDURAL_OPTIONS = COMMON_OPTIONS + ("num_train", "num_held_out", "seed")
FILE_OPTIONS = COMMON_OPTIONS + ("train", "held_out", "prompt_column", "answer_column", "completion_column", "answer_after")


def _check_options(name: str, options: dict, known: tuple[str, ...]) -> None:
    unknown = sorted(set(options) - set(known))
    if unknown:
        raise TypeError(f"{unknown[0]}: not an option of {name} (its options: {', '.join(known)})")


def _common(options: dict) -> dict:
    keys = ("tokenizer_path", "chat_template", "system_prompt", "prompt_prefix", "prompt_suffix", "prompt_len",
            "completion_len", "answer_bytes", "reward", "completion_bytes")
    return {k: options[k] for k in keys if k in options}


def procedural_task(name: str, generate: Callable[[int, int], list[dict]], options: dict) -> TextTask:
    """A :class:`TextTask` over rows from ``generate(seed, count)`` (distinct prompts, a
    prefix of a longer call's rows), split by the hash rule into ``num_train`` training and
    ``num_held_out`` held-out rows. ``options``: :data:`PROCEDURAL_OPTIONS` (the text options
    plus ``num_train`` (4096), ``num_held_out`` (512), ``seed`` (0), ``held_out_every`` (10))."""
    _check_options(name, options, PROCEDURAL_OPTIONS)
    o = {"num_train": 4096, "num_held_out": 512, "seed": 0, "held_out_every": 10, **options}
    _positive(o, "num_train", "num_held_out", "held_out_every")
    key = json.dumps({k: o[k] for k in sorted(o)}, sort_keys=True, default=str)
    return _procedural(name, generate, key)


@functools.lru_cache(maxsize=16)
def _procedural(name: str, generate: Callable, key: str) -> TextTask:
    o = json.loads(key)
    k, want_train, want_held = o["held_out_every"], o["num_train"], o["num_held_out"]
    if k < 2:
        raise ValueError(f"held_out_every: the hash rule needs k >= 2, got {k}")
    count = int(1.2 * max(want_train * k / (k - 1), want_held * k)) + 64
    rows = generate(o["seed"], count)
    train, held = data.split_rows(rows, k)
    if len(train) < want_train or len(held) < want_held:
        raise ValueError(f"num_train: {name} made {len(train)} training and {len(held)} held-out prompts, fewer than asked")
    return text_task(name, train[:want_train], held[:want_held], **_common(o),
                     sources=(f"{name} (seed {o['seed']})", f"{name} (seed {o['seed']}, held out: hash % {k} == 0)"))


def file_task(name: str, options: dict) -> TextTask:
    """A :class:`TextTask` over a JSONL/Parquet file. ``options``: :data:`FILE_OPTIONS`:
    ``train`` (the file), ``held_out`` (a second file; else the hash rule with
    ``held_out_every`` (10)), the column names, and the text options. Completions are encoded
    when any row has the completion column (a row without it is then a bad row). A training
    row whose prompt is also a held-out prompt, or equal to one after stripping, case-folding
    and NFKC (:func:`jaxrl.text.data.drop_held_out`), is dropped and counted in the report."""
    _check_options(name, options, FILE_OPTIONS)
    o = {"held_out": "", "held_out_every": 10, **options}
    if not o.get("train"):
        raise ValueError("train: the path of a JSONL or Parquet file (or a dataset saved on disk) is required")
    columns = data.Columns(o.get("prompt_column", "prompt"), o.get("answer_column", "answer"),
                           o.get("completion_column", "completion"), o.get("answer_after", ""))
    rows = _read(o["train"], "train")
    if o["held_out"]:
        held = _read(o["held_out"], "held_out")
        train = data.drop_held_out(rows, held, columns.prompt, exact="prompt also in the held-out file")
        sources = (o["train"], o["held_out"])
    else:
        _positive(o, "held_out_every")
        train, held = data.split_rows(rows, o["held_out_every"], columns.prompt)
        train = data.drop_held_out(train, held, columns.prompt)  # near-duplicates hash apart
        sources = (o["train"], f"{o['train']} (held out: hash % {o['held_out_every']} == 0)")
    has_completion = any(isinstance(r, dict) and columns.completion in r for r in rows)
    return text_task(name, train, held, **_common(o), columns=columns, completions=has_completion, sources=sources)


def text_factory(make: Callable[..., TextTask]) -> Callable[..., TextTask]:
    """Mark ``make(**options) -> TextTask``, a registered entry point, as a text task's factory:
    :func:`jaxrl.text.tokenized.registered` then builds it once with the options of
    ``env.text`` and ``env.tokenizer`` (:meth:`TextTask.in_tokenizer`)."""
    make.in_tokenizer = TextTask.in_tokenizer
    return make


def _read(path: str, option: str) -> list:
    try:
        return data.read_rows(path)
    except (OSError, ImportError, ValueError) as exc:
        raise ValueError(f"{option}: {exc}") from None


__all__ = [
    "EVAL_HELD_OUT", "FILE_OPTIONS", "PROCEDURAL_OPTIONS", "TextSplit", "TextState", "TextTask", "TextTaskParams",
    "evaluation_rows", "evaluation_starts", "file_task", "is_row_index", "procedural_task", "text_factory", "text_task",
]
