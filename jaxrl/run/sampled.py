"""Sampled evaluation of token-task runs: ``jaxrl eval RUN -n PROMPTS -r ROLLOUTS``.

As ``vf-eval -n -r`` does: ``r`` completions (dialogues) sampled at the run's sampling
temperature for each of ``n`` held-out prompts, by the program's
:attr:`~jaxrl.algos.contract.LMHooks.rollouts` hook. The summary reports the sampled
reward's mean and std over all ``n * r`` completions, each prompt's mean, pass@k for
``k = 1, 2, 4, ... <= r`` (and ``r``) with the unbiased estimator of Chen et al. (2021),
the greedy score on the same prompts, and a few whole transcripts. A completion counts as
correct when its exact match is 1 (tasks that report one), else when its reward reaches
the task's maximum of 1.
"""

from __future__ import annotations

import math

import numpy as np


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k of one prompt: ``1 - C(n - c, k) / C(n, k)``, the probability that
    at least one of ``k`` completions drawn without replacement from ``n`` samples, ``c`` of
    them correct, is correct. Needs ``0 <= c <= n`` and ``1 <= k <= n``."""
    if not (0 <= c <= n and 1 <= k <= n):
        raise ValueError(f"pass@k needs 0 <= c <= n and 1 <= k <= n, got n={n}, c={c}, k={k}")
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def ks(r: int) -> list[int]:
    """The k reported for ``r`` rollouts: powers of two below ``r``, and ``r``."""
    out, k = [], 1
    while k < r:
        out.append(k)
        k *= 2
    return out + [r]


def summarise(result: dict) -> dict:
    """The summary of a ``rollouts`` result: ``rewards [n, r]``, ``greedy [n]``, optionally
    ``correct [n, r]`` / ``greedy_correct [n]`` (bool) and ``transcripts`` (list of str)."""
    rewards = np.asarray(result["rewards"], np.float64)
    n, r = rewards.shape
    correct = np.asarray(result["correct"], bool) if "correct" in result else rewards >= 1.0
    greedy = np.asarray(result["greedy"], np.float64)
    greedy_correct = np.asarray(result["greedy_correct"], bool) if "greedy_correct" in result else greedy >= 1.0
    counts = correct.sum(axis=1)
    return {
        "prompts": int(n),
        "rollouts": int(r),
        "correct_is": "exact match" if "correct" in result else "reward >= 1",
        "sampled_reward": {"mean": float(rewards.mean()), "std": float(rewards.std(ddof=1)) if rewards.size > 1 else 0.0},
        "per_prompt_mean": [round(float(v), 6) for v in rewards.mean(axis=1)],
        "pass_at_k": {str(k): float(np.mean([pass_at_k(r, int(c), k) for c in counts])) for k in ks(r)},
        "greedy_reward": float(greedy.mean()),
        "greedy_correct": float(greedy_correct.mean()),
        "transcripts": list(result.get("transcripts", [])),
    }


def format_sampled(s: dict, shown_prompts: int = 8) -> str:
    """Human-readable lines of a :func:`summarise` summary."""
    sr = s["sampled_reward"]
    per = s["per_prompt_mean"]
    more = f" ... ({len(per)} prompts)" if len(per) > shown_prompts else ""
    lines = [
        f"sampled (held-out, {s['prompts']} prompts x {s['rollouts']} rollouts): "
        f"reward {sr['mean']:.3f} +- {sr['std']:.3f} (std)",
        "  per-prompt mean reward: " + " ".join(f"{v:.2f}" for v in per[:shown_prompts]) + more,
        f"  pass@k ({s['correct_is']}): " + ", ".join(f"pass@{k} {v:.3f}" for k, v in s["pass_at_k"].items()),
        f"  greedy on the same prompts: reward {s['greedy_reward']:.3f}, "
        f"{s['correct_is']} {s['greedy_correct']:.3f}",
    ]
    if s["transcripts"]:
        lines.append("  transcripts (sampled):")
        lines.extend("    " + t for t in s["transcripts"])
    return "\n".join(lines)
