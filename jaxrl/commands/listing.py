"""``jaxrl list``: the registered algorithms and env ids with their descriptions, then the recipe configs.

The registry listing is remembered per installation (:mod:`jaxrl.run.answers`), so after the
first time the command imports no JAX.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

__all__ = ["config_dirs", "main_list", "registry_listing"]


def config_dirs() -> list[Path]:
    """Where ``jaxrl list`` looks for recipe configs: ``./configs`` and the repository's."""
    candidates = [Path.cwd() / "configs", Path(__file__).resolve().parent.parent.parent / "configs"]
    seen, out = set(), []
    for path in candidates:
        if path.is_dir() and path.resolve() not in seen:
            seen.add(path.resolve())
            out.append(path)
    return out


def registry_listing() -> str:
    """The registered algorithms and env ids with their descriptions (imports every plugin,
    hence JAX)."""
    from jaxrl.algos import registry as algo_registry
    from jaxrl.core import registry

    algos = algo_registry.algorithms()
    width = max((len(n) for n in algos), default=0)
    lines = [f"algorithms ({len(algos)}):"]
    lines += [f"  {name:<{width}}  {algos[name].description}".rstrip() for name in sorted(algos)]
    ids = registry.registered_ids()
    width = max((len(i) for i in ids), default=0)
    lines.append(f"environments ({len(ids)}):")
    lines += [f"  {env_id:<{width}}  {registry.spec(env_id).description}".rstrip() for env_id in ids]
    return "\n".join(lines) + "\n"


def main_list(args: argparse.Namespace) -> int:
    """Print the registered algorithms and env ids with their descriptions (remembered per
    installation by :mod:`jaxrl.run.answers`, so no JAX import after the first time), then
    the recipe configs."""
    from jaxrl.run import answers

    sys.stdout.write(answers.answer("list", registry_listing, remember=getattr(args, "fresh_process", False)))
    configs = sorted({p.name: p for d in config_dirs() for p in d.glob("*.yaml")}.values())
    if configs:
        print(f"configs ({len(configs)}):")
        for path in configs:
            print(f"  {path}")
    return 0
