"""``jaxrl train``'s handler: the command line's arguments to :func:`jaxrl.run.trainer.run`.

``jaxrl train CONFIG [--set k=v ...] [--seeds N] [--out DIR] [--resume DIR] [--init-from DIR]``;
multi-process runs join their processes first (:func:`jaxrl.run.trainer.join_processes`).
"""

from __future__ import annotations

import os

from jaxrl.core import threefry
from jaxrl.run import compile_cache, config as config_lib
from jaxrl.run.config import ConfigError, RunConfig
from jaxrl.run.files import CONFIG_FILE
from jaxrl.run.resume import OPERATIONAL_KEYS
from jaxrl.run.trainer import join_processes, run

__all__ = ["config_from_args", "join_processes", "main_train"]


def config_from_args(args) -> RunConfig | None:
    """The config named on the command line with ``--set``/``--seeds`` applied (or None)."""
    overrides = list(args.set or [])
    if getattr(args, "seeds", None) is not None:
        overrides.append(f"train.seeds={args.seeds}")
    if args.config is None:  # with --resume, the keys that only change reporting may be set
        if overrides and not (args.resume and all(o.partition("=")[0].strip() in OPERATIONAL_KEYS for o in overrides)):
            raise ConfigError(f"--set/--seeds need a CONFIG; with --resume only {', '.join(OPERATIONAL_KEYS)} may be set")
        return config_lib.load_config(os.path.join(args.resume, CONFIG_FILE), overrides) if overrides else None
    return config_lib.load_config(args.config, overrides)


def main_train(args) -> int:
    """``jaxrl train``: returns 0; failures (config error 2, non-finite stop 1, Ctrl-C 130,
    I/O or memory 3) raise and reach the one-line handler of :func:`jaxrl.cli.main`."""
    if args.config is None and args.resume is None:
        raise ConfigError("train needs a CONFIG file or --resume RUN_DIR")
    compile_cache.enable()  # before the first compile
    threefry.unroll_on_cpu()
    join_processes(args)
    cfg = config_from_args(args)
    accept = bool(getattr(args, "accept_config_change", False))
    accept_data = bool(getattr(args, "accept_data_change", False))
    for flag, given in (("--accept-config-change", accept), ("--accept-data-change", accept_data)):
        if given and args.resume is None:
            raise ConfigError(f"{flag} only applies with --resume RUN_DIR")
    result = run(cfg, run_dir=args.out, resume=args.resume, accept_config_change=accept, init_from=getattr(args, "init_from", None),
                 accept_data_change=accept_data)
    print(f"jaxrl: done: {result.updates} updates; run directory {result.run_dir}")
    return 0
