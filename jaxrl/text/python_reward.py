"""``env.text.reward: {python: "module:function"}``: a text task scored by a Python function.

The function has TRL's ``reward_funcs`` signature::

    def reward(prompts: list[str], completions: list[str], **columns) -> list[float]

``prompts`` are the rows' user text (prefix and suffix included, before the chat template),
``completions`` the decoded completions (up to the end-of-turn, special tokens skipped), and
``columns`` every other field of the rows (``answer=[...]``, ...), one value per completion,
``None`` where a row lacks it. It is called on the host through one ``jax.pure_callback`` per
batch: under ``vmap`` (the rollout's batch, the seeds) the callback receives the whole batch
(``vmap_method="broadcast_all"``), so a single-turn GRPO update calls it once.
``pure_callback`` because a reward is a function of its inputs: the program stays pure (no
effect tokens, nothing serialised around it), and a deterministic function keeps runs and
resumes bit for bit. The function must therefore be deterministic.

Errors are one line naming the function: an unimportable module, a missing or non-callable
name (when the task is built), a result of the wrong length or with a non-finite value (when
it is called, or an exception of the function: :class:`PythonRewardError`, which ``jaxrl``
prints as one line through :func:`failure_line`). Guide and cost: docs/text_tasks.md.
"""

from __future__ import annotations

import importlib
import math
import traceback
from typing import Any, Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from jaxrl.text.callback_errors import quiet_callback_log, raised_in_callback
from jaxrl.verifiers import Task, Verifier

#: The rubric key that names a Python reward (the only key of such a ``reward`` mapping).
KEY = "python"


class PythonRewardError(ValueError):
    """A Python reward's result is unusable (wrong length, not numbers, not finite)."""


def reference(spec: dict) -> str | None:
    """The ``"module:function"`` of a ``reward`` mapping that names a Python reward, else
    None (an on-device rubric). ``ValueError`` for a malformed one."""
    if KEY not in spec:
        return None
    ref = spec[KEY]
    if len(spec) != 1:
        others = sorted(k for k in spec if k != KEY)
        raise ValueError(f"python: a Python reward takes no rubric keys (they configure the on-device rubric), got {others}")
    if not isinstance(ref, str) or ref.count(":") != 1 or not all(ref.split(":")):
        raise ValueError(f"python: expected 'module:function', got {ref!r}")
    return ref


def load_function(ref: str) -> Callable:
    """The callable ``ref`` (``"module:function"``, dotted names allowed on both sides) names;
    ``ValueError`` with one line when it cannot be imported or is not callable."""
    module_name, attr = ref.split(":")
    try:
        obj: Any = importlib.import_module(module_name)
    except Exception as exc:  # a broken module raises anything at import
        hint = "; put the directory that holds it on PYTHONPATH" if isinstance(exc, ModuleNotFoundError) else ""
        raise ValueError(f"python: {ref}: cannot import module {module_name!r} "
                         f"({type(exc).__name__}: {' '.join(str(exc).split())}){hint}") from None
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise ValueError(f"python: {ref}: module {module_name!r} has no {attr!r}")
        obj = getattr(obj, part)
    if not callable(obj):
        raise ValueError(f"python: {ref}: {attr!r} is not callable (a {type(obj).__name__})")
    return obj


class HostReward:
    """The host side of the callback: rows found by their prompt and answer ids, completions
    decoded, the function called once, its result checked (shapes in :meth:`__call__`)."""

    def __init__(self, ref: str, function: Callable, rows: dict[bytes, tuple[str, dict]], names: Sequence[str],
                 decode: Callable[[list[int]], str], eos_id: int, vocab: int):
        self.ref, self.function, self.rows, self.names = ref, function, rows, tuple(names)
        self.decode, self.eos_id, self.vocab = decode, int(eos_id), int(vocab)

    def _text(self, ids: np.ndarray) -> str:
        ids = ids.tolist()
        if self.eos_id in ids:
            ids = ids[: ids.index(self.eos_id)]
        return self.decode([i for i in ids if 0 <= i < self.vocab])

    def __call__(self, prompts: np.ndarray, answers: np.ndarray, answer_lens: np.ndarray, completions: np.ndarray) -> np.ndarray:
        """float32 rewards of shape ``completions.shape[:-1]`` for int32 prompts ``[..., Lp]``,
        answers ``[..., W]``, answer_lens ``[...]`` and completions ``[..., Lc]`` (the pad id
        after the end-of-turn)."""
        batch = completions.shape[:-1]
        p = np.asarray(prompts).reshape(-1, prompts.shape[-1])
        a, n = np.asarray(answers).reshape(-1, answers.shape[-1]), np.asarray(answer_lens).reshape(-1)
        c = np.asarray(completions).reshape(-1, completions.shape[-1])
        found = [self.rows.get(row_key(p[i], a[i], int(n[i])), ("", {})) for i in range(c.shape[0])]
        columns = {name: [cols.get(name) for _, cols in found] for name in self.names}
        try:
            out = self.function([text for text, _ in found], [self._text(c[i]) for i in range(c.shape[0])], **columns)
        except Exception as exc:  # the user's code: one line with where it failed
            where = traceback.extract_tb(exc.__traceback__)[-1]
            raise PythonRewardError(f"env.text.reward.python: {self.ref} raised {type(exc).__name__}: "
                                    f"{' '.join(str(exc).split())} ({where.filename}:{where.lineno})") from None
        return self.check(out, c.shape[0]).reshape(batch)

    def check(self, out: Any, count: int) -> np.ndarray:
        """``out`` as float32 ``[count]``, or :class:`PythonRewardError` naming the function."""
        try:
            values = [float(v) for v in out]
        except (TypeError, ValueError):
            raise PythonRewardError(f"env.text.reward.python: {self.ref} returned {type(out).__name__} "
                                    f"{_short(out)}; expected a list of {count} floats") from None
        if len(values) != count:
            raise PythonRewardError(f"env.text.reward.python: {self.ref} returned {len(values)} rewards "
                                    f"for {count} completions")
        bad = [i for i, v in enumerate(values) if not math.isfinite(v)]
        if bad:
            raise PythonRewardError(f"env.text.reward.python: {self.ref} returned {values[bad[0]]} for completion "
                                    f"{bad[0]} ({len(bad)} non-finite of {count})")
        return np.asarray(values, np.float32)


def failure_line(exc: BaseException) -> str | None:
    """The one line of a :class:`PythonRewardError` raised inside the callback, as JAX
    re-raises it (a ``JaxRuntimeError`` whose text holds the host traceback), else None."""
    return raised_in_callback(exc, PythonRewardError)


def _short(x: Any) -> str:
    text = " ".join(repr(x).split())
    return text if len(text) <= 60 else text[:57] + "..."


def row_key(prompt: np.ndarray, answer: np.ndarray, answer_len: int) -> bytes:
    """The lookup key of a row: its prompt ids and its answer's bytes."""
    return np.asarray(prompt, np.int32).tobytes() + b"|" + np.asarray(answer[:answer_len], np.int32).tobytes()


def verifier(host: HostReward) -> Verifier:
    """A :class:`~jaxrl.verifiers.Verifier` whose reward is ``host``'s, through one
    ``pure_callback`` per (vmapped) batch; metrics: ``python_reward`` (the same value)."""

    quiet_callback_log(PythonRewardError)  # it is re-raised and printed as one line

    def score(task: Task, completion: jax.Array):
        shape = jax.ShapeDtypeStruct(completion.shape[:-1], jnp.float32)
        r = jax.pure_callback(host, shape, task.prompt.astype(jnp.int32), task.answer.astype(jnp.int32),
                              task.answer_len.astype(jnp.int32), completion.astype(jnp.int32), vmap_method="broadcast_all")
        return r, {"python_reward": r}

    return Verifier(score, -math.inf, math.inf)


__all__ = ["KEY", "HostReward", "PythonRewardError", "failure_line", "load_function", "reference", "row_key", "verifier"]
