"""The ``jaxrl check-env`` command: a registered env through
:func:`jaxrl.core.check.check_env`, its verdict as the exit code.

The check itself (and the report it prints) lives in :mod:`jaxrl.core.check`, the lowest
layer; this handler only makes the env by id, runs the check and maps the outcome to an
exit code. Importing this module imports no JAX.
"""

from __future__ import annotations

import argparse
import sys

__all__ = ["main_check_env"]


def main_check_env(args: argparse.Namespace) -> int:
    """``jaxrl check-env ENV_ID [--steps N] [--envs N] [--seed S] [--only A,B]``: 0 if every
    check passed, 1 if one failed, 2 for an unknown id or bad arguments."""
    import jax

    from jaxrl.core import registry
    from jaxrl.core.check import check_env

    only = [name.strip() for name in args.only.split(",") if name.strip()] if getattr(args, "only", None) else None
    try:
        env, params = registry.make(args.env_id)
        report = check_env(env, params, num_steps=args.steps, num_envs=args.envs, key=jax.random.PRNGKey(args.seed), only=only)
    except (KeyError, ValueError, TypeError) as exc:
        print(f"jaxrl check-env: {exc.args[0] if exc.args else exc}", file=sys.stderr)
        return 2
    return 0 if report.passed else 1
