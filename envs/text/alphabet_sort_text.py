"""``text/AlphabetSortText-v0``: the Environments Hub alphabet-sort task, in text.

A prompt lists 3 or 4 distinct first names, comma-separated ("Sort these names
alphabetically: Olivia, Ben, Zoe"); the answer and the reference completion are the same
names in alphabetical order, comma-separated ("Ben, Olivia, Zoe"). The reward is the
verifiers library's: the similarity ratio of the completion and the answer (``difflib``'s
ratio) raised to the 4th power, the rubric ``{answer: similarity, extract: whole, power: 4}``
(``env.text.reward`` replaces it). The names come from a fixed list of 48, several sharing
a first letter, so the order sometimes depends on the second letter.

Rows come from a seeded host-side generator (:func:`generate_rows`), split by the hash rule
of :func:`jaxrl.text.data.is_held_out` and tokenized once (:func:`jaxrl.text.task.text_task`).
"""

from __future__ import annotations

import random

from jaxrl.text.data import distinct_rows
from jaxrl.text.task import TextTask, procedural_task, text_factory
from jaxrl_envs.text.text_file import TOKENIZER

NAMES = (
    "Aaron", "Abby", "Alice", "Amber", "Ben", "Bella", "Carl", "Chloe", "Cora", "Dan", "Daisy", "Eli",
    "Emma", "Eva", "Finn", "Fred", "Grace", "Gus", "Hana", "Hugo", "Ian", "Iris", "Jack", "Jade",
    "Kai", "Kate", "Leo", "Lily", "Luna", "Max", "Mia", "Nina", "Noah", "Olivia", "Omar", "Paul",
    "Pia", "Quinn", "Rosa", "Ruby", "Sam", "Sara", "Tom", "Uma", "Vera", "Will", "Yara", "Zoe",
)
PROMPT = "Sort these names alphabetically: {names}\nReply with the sorted names, comma-separated."
DEFAULT_REWARD = {"answer": "similarity", "extract": "whole", "power": 4.0}


def generate_rows(seed: int, count: int) -> list[dict]:
    """``count`` rows ``{prompt, answer, completion}`` (distinct prompts) from ``seed``."""

    def draw(rng: random.Random) -> dict:
        names = rng.sample(NAMES, rng.choice((3, 4)))
        answer = ", ".join(sorted(names))
        return {"prompt": PROMPT.format(names=", ".join(names)), "answer": answer, "completion": answer}

    return distinct_rows(seed, count, draw)


@text_factory
def AlphabetSortText(**options) -> TextTask:
    """The task with ``options`` (:func:`jaxrl.text.task.procedural_task`'s keywords)."""
    defaults = {"tokenizer_path": TOKENIZER, "prompt_len": 36, "completion_len": 12, "answer_bytes": 32, "reward": DEFAULT_REWARD}
    return procedural_task("text/AlphabetSortText-v0", generate_rows, {**defaults, **options})
