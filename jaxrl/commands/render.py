"""``jaxrl render RUN_DIR --out FILE.gif``'s handler: a trained run's episode as a GIF.

The GIF is :func:`jaxrl.run.evaluate.save_run_gif`'s; a token-task run prints transcripts
instead. The arguments are checked before any work; failures raise and reach the one-line
handler of :func:`jaxrl.cli.main`.
"""

from __future__ import annotations

import os

from jaxrl.core import threefry
from jaxrl.run import compile_cache
from jaxrl.run.config import ConfigError
from jaxrl.run.evaluate import load_run, sample_lines, save_run_gif

__all__ = ["check_render_args", "main_render"]


def check_render_args(args) -> None:
    """``--steps`` and ``--fps`` positive; ``--out`` a file in an existing directory."""
    for name in ("steps", "fps"):
        value = getattr(args, name)
        if value < 1:
            raise ConfigError(f"--{name}: must be >= 1, got {value}")
    folder = os.path.dirname(os.path.abspath(args.out))
    if not os.path.isdir(folder):
        raise ConfigError(f"--out {args.out!r}: the folder {folder!r} does not exist")
    if os.path.isdir(args.out):
        raise ConfigError(f"--out {args.out!r} is a directory; name a .gif file")


def main_render(args) -> int:
    """``jaxrl render RUN_DIR --out FILE.gif [--steps N] [--fps F] [--stochastic]``."""
    from jaxrl.run import guards

    compile_cache.enable()
    threefry.unroll_on_cpu()

    check_render_args(args)
    guards.check_seed(args.seed, "--seed")
    cfg, built, states, _ = load_run(args.run_dir, step=getattr(args, "step", None))
    if built.program.policy is None and built.program.lm.samples is not None:
        print("jaxrl: this run's episodes are token sequences; transcripts instead of frames:")
        for line in sample_lines(built, states, seed=args.seed):
            print(line)
        return 0
    try:
        rendered, stored = save_run_gif(built, states, args.out, args.steps, not args.stochastic, args.seed, args.fps)
    except NotImplementedError as exc:  # the env has no renderer
        raise ConfigError(f"render: {exc or 'this env does not render'}; `jaxrl eval {args.run_dir}` scores the run without frames") from None
    merged = rendered - stored
    note = f" ({rendered} states; {merged} repeated frames shown by lengthening the previous one)" if merged else ""
    print(f"jaxrl: wrote {stored} frames ({rendered - 1} env steps) to {args.out}{note}")
    return 0
