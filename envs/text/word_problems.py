"""``text/WordProblems-v0``: arithmetic word problems in text, the answer inside ``<answer>`` tags.

A prompt is one sentence pair such as "Mia has 8 apples and buys 7 more. How many apples
does Mia have now?"; the answer is the number (``15``) and the reference completion is
``<answer>15</answer>``. Numbers are small on purpose, so that a tiny model trained for
minutes can learn the task: both operands in ``0 .. 9``, one ``+`` or ``-``, the result
``>= 0`` (so ``0 .. 18``). Five sentence templates (buys, finds, gives away, takes out,
together), 16 names and 12 objects.

Rows come from a seeded host-side generator (:func:`generate_rows`, plain Python:
deterministic for a seed on every machine), split by the hash rule of
:func:`jaxrl.text.data.is_held_out` (a prompt is held out iff its text's stable hash is
``0 mod held_out_every``), and tokenized once (:func:`jaxrl.text.task.text_task`). Reward:
the rubric ``{answer: numeric, extract: answer_tag, format_weight: 0.1}`` by default
(``env.text.reward`` replaces it).
"""

from __future__ import annotations

import random

from jaxrl.text.data import distinct_rows
from jaxrl.text.task import TextTask, procedural_task, text_factory
from jaxrl_envs.text.text_file import TOKENIZER

NAMES = ("Mia", "Leo", "Ava", "Sam", "Zoe", "Max", "Ivy", "Ben", "Eli", "Amy", "Tom", "Kai", "Lily", "Noah", "Emma", "Jack")
OBJECTS = (
    ("apple", "apples"), ("book", "books"), ("coin", "coins"), ("pen", "pens"), ("shell", "shells"), ("card", "cards"),
    ("egg", "eggs"), ("ball", "balls"), ("stamp", "stamps"), ("cookie", "cookies"), ("marble", "marbles"), ("kite", "kites"),
)
MAX_OPERAND = 9  #: both operands are drawn from 0 .. MAX_OPERAND
DEFAULT_REWARD = {"answer": "numeric", "extract": "answer_tag", "format_weight": 0.1}


def _count(n: int, obj: tuple[str, str]) -> str:
    return f"{n} {obj[0] if n == 1 else obj[1]}"


def make_problem(rng: random.Random) -> tuple[str, int]:
    """One ``(prompt text, answer)`` drawn with ``rng``."""
    name, other = rng.sample(NAMES, 2)
    obj = rng.choice(OBJECTS)
    a, b = rng.randint(0, MAX_OPERAND), rng.randint(0, MAX_OPERAND)
    kind = rng.randrange(5)
    if kind >= 2 and b > a:  # subtraction: keep the result >= 0
        a, b = b, a
    plural = obj[1]
    if kind == 0:
        return f"{name} has {_count(a, obj)} and buys {b} more. How many {plural} does {name} have now?", a + b
    if kind == 1:
        return f"{name} has {_count(a, obj)}. {other} has {_count(b, obj)}. How many {plural} do they have together?", a + b
    if kind == 2:
        return f"{name} has {_count(a, obj)} and gives {b} to {other}. How many {plural} does {name} have left?", a - b
    if kind == 3:
        return f"There are {_count(a, obj)} in a box. {name} takes {b} out. How many {plural} are left in the box?", a - b
    return f"{name} had {_count(a, obj)} and lost {b}. How many {plural} does {name} have now?", a - b


def generate_rows(seed: int, count: int) -> list[dict]:
    """``count`` rows ``{prompt, answer, completion}`` (distinct prompts) from ``seed``."""

    def draw(rng: random.Random) -> dict:
        prompt, answer = make_problem(rng)
        return {"prompt": prompt, "answer": str(answer), "completion": f"<answer>{answer}</answer>"}

    return distinct_rows(seed, count, draw)


@text_factory
def WordProblems(**options) -> TextTask:
    """The task with ``options`` (:func:`jaxrl.text.task.procedural_task`'s keywords)."""
    defaults = {"tokenizer_path": TOKENIZER, "prompt_len": 40, "completion_len": 12, "answer_bytes": 8, "reward": DEFAULT_REWARD}
    return procedural_task("text/WordProblems-v0", generate_rows, {**defaults, **options})
