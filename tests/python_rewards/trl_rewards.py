"""Rewards in TRL's ``reward_funcs`` signature for tests/test_text_python_reward.py (put on
``sys.path`` by that test, as tests/plugin_pkg is by the plugin tests)."""

import re

CALLS: list[int] = []  # the batch size of every call, to count the callbacks


def _normalize(text: str) -> str:
    """The on-device rubric's ``exact``: A-Z lower-cased, stripped, whitespace runs as one space."""
    text = "".join(c.lower() if "A" <= c <= "Z" else c for c in text)
    return " ".join(text.split())


def exact_answer_tag(prompts, completions, answer, **columns):
    """1.0 when the text between the first ``<answer>`` and the first ``</answer>`` after it
    equals the row's ``answer`` (normalized), else 0.0: the rubric ``{answer: exact, extract: answer_tag}``."""
    CALLS.append(len(completions))
    out = []
    for completion, want in zip(completions, answer):
        m = re.search(r"<answer>(.*?)</answer>", completion, re.S)
        out.append(1.0 if m is not None and _normalize(m.group(1)) == _normalize(want) else 0.0)
    return out


def by_level(prompts, completions, level, **columns):
    """The row's ``level`` column times the completion's length (reads a column that is no answer)."""
    CALLS.append(len(completions))
    return [float(lv) * len(c) for lv, c in zip(level, completions)]


def echo_prompt_length(prompts, completions, **columns):
    """The prompt's length in characters."""
    return [float(len(p)) for p in prompts]


def one_short(prompts, completions, **columns):
    return [0.0] * (len(completions) - 1)


def not_finite(prompts, completions, **columns):
    return [float("nan")] * len(completions)


def raises(prompts, completions, **columns):
    return [1.0 / 0 for _ in completions]


NOT_CALLABLE = 3
