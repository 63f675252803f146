"""``text/File-v0``: a text task over a local JSONL or Parquet file (``env.text.train``).

Each row has a ``prompt`` and an ``answer`` (column names configurable) and, optionally, a
reference ``completion`` (for SFT demonstrations); other columns are kept. Prompts are
rendered with the tokenizer's chat template and tokenized once; the reward is the rubric
``env.text.reward`` over the completion's bytes (default: the number inside
``<answer>...</answer>`` compared numerically, plus a small format term). See
``docs/text_tasks.md`` for the format, the options and the held-out rule.

Built without options (as the registry and the conformance checks do) it reads the small
sample shipped in ``envs/assets/text_sample.jsonl`` with the project's tokenizer
(``envs/assets/text_tokenizer``, made by its ``make.py``), holding out 1 prompt in 4 by the
hash rule (a file of the user's: 1 in 10 unless ``env.text.held_out_every`` says otherwise).
"""

from __future__ import annotations

import os

from jaxrl.text.task import TextTask, file_task, text_factory

ASSETS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "assets")
TOKENIZER = os.path.join(ASSETS, "text_tokenizer")  #: the project's byte-level BPE tokenizer directory
SAMPLE = os.path.join(ASSETS, "text_sample.jsonl")  #: the shipped sample rows
DEFAULT_REWARD = {"answer": "numeric", "extract": "answer_tag", "format_weight": 0.1}


@text_factory
def TextFile(**options) -> TextTask:
    """The task with ``options`` (:func:`jaxrl.text.task.file_task`'s keywords)."""
    defaults = {
        "tokenizer_path": TOKENIZER, "train": SAMPLE, "prompt_len": 64, "completion_len": 16, "answer_bytes": 16,
        "reward": DEFAULT_REWARD, "held_out_every": 10 if "train" in options else 4,  # the sample is small
    }
    return file_task("text/File-v0", {**defaults, **options})
