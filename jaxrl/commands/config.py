"""``jaxrl config ALGO``: every config key of a run of ``ALGO`` with its type, default and meaning.

The table is :func:`jaxrl.run.reference.text_table`'s; the command's answer is remembered per
installation like ``jaxrl list``'s (:mod:`jaxrl.run.answers`).
"""

from __future__ import annotations

import argparse
import sys

__all__ = ["config_table", "main_config"]


def config_table(args: argparse.Namespace) -> int:
    """Print every key of a run of ``args.algo`` (computed now, never remembered)."""
    from jaxrl.run.reference import text_table

    print(text_table(args.algo))
    return 0


def main_config(args: argparse.Namespace) -> int:
    """``jaxrl config ALGO``: :func:`config_table`, remembered per installation."""
    from jaxrl.run import answers

    def compute() -> str:
        return answers.captured(lambda: config_table(args))

    sys.stdout.write(answers.answer(f"config-{args.algo}", compute, remember=getattr(args, "fresh_process", False)))
    return 0
