"""``jaxrl export-hf RUN_DIR --out DIR``: a run's trained language model as a Hugging Face directory.

The export itself is :func:`jaxrl.run.export.export_hf`.
"""

from __future__ import annotations

import argparse

__all__ = ["main_export_hf"]


def main_export_hf(args: argparse.Namespace) -> int:
    """``jaxrl export-hf RUN_DIR --out DIR [--adapters-only] [--seed S] [--step N] [--force]``."""
    from jaxrl.run.export import export_hf

    out = export_hf(args.run_dir, args.out, args.seed, args.step, args.adapters_only, getattr(args, "force", False))
    print(f"jaxrl: wrote {out}")
    return 0
