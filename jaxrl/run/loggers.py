"""Metric sinks: ``train.loggers: [jsonl, tensorboard, wandb]``.

Every sink is fed on the host after each chunk with exactly the records written to
``metrics.jsonl`` (:func:`jaxrl.run.logging.chunk_records`), so the compiled program stays
pure and every sink sees the same numbers:

* ``jsonl`` — ``metrics.jsonl`` in the run directory; always written (resume and
  ``jaxrl eval`` read it), listing it is optional.
* ``tensorboard`` — event files under ``RUN_DIR/tensorboard`` through ``tensorboardX``
  (``pip install tensorboardX``): one scalar per metric, ``global_step`` = ``env_steps``,
  per-seed lists as ``<name>/seed<i>``.
* ``wandb`` — ``wandb.log(record, step=update)`` into a run under ``RUN_DIR/wandb`` with
  the resolved config; mode from ``WANDB_MODE`` (``offline`` keeps everything local).

A sink's directory that is a symbolic link is refused (:func:`jaxrl.run.rundir.refuse_link`),
never written through.
"""

from __future__ import annotations

import importlib.util
import math
import os
from typing import Iterable, Sequence

from jaxrl.run import rundir
from jaxrl.run.files import TENSORBOARD_DIR, WANDB_DIR

#: name -> (module that must import, pip package)
SINKS = {"jsonl": (None, None), "tensorboard": ("tensorboardX", "tensorboardX"), "wandb": ("wandb", "wandb")}
#: Record keys that index a record rather than measure something.
INDEX_KEYS = ("update", "env_steps", "wall_time")


def check_loggers(names: Sequence[str]) -> None:
    """Raise a one-line ``ValueError`` for an unknown, repeated or uninstalled sink."""
    for i, name in enumerate(names):
        if name not in SINKS:
            raise ValueError(f"train.loggers[{i}]: unknown logger {name!r}; expected some of {sorted(SINKS)}")
        module, package = SINKS[name]
        if module is not None and importlib.util.find_spec(module) is None:
            raise ValueError(f"train.loggers[{i}]: {name} needs the {package} package: pip install {package}")
    if len(set(names)) != len(names):
        raise ValueError(f"train.loggers: listed twice in {list(names)}")


def scalars(record: dict) -> dict[str, float]:
    """The finite numbers of one record, per-seed lists spread as ``<name>/seed<i>``."""
    out = {}
    for key, value in record.items():
        if key in INDEX_KEYS:
            continue
        values = value if isinstance(value, list) else [value]
        for i, v in enumerate(values):
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                continue
            out[key if not isinstance(value, list) else f"{key}/seed{i}"] = float(v)
    return out


class TensorBoardSink:
    """Scalars into ``RUN_DIR/tensorboard`` (tensorboardX event files)."""

    def __init__(self, run_dir: str, config: dict):
        from tensorboardX import SummaryWriter

        logdir = os.path.join(run_dir, TENSORBOARD_DIR)
        rundir.refuse_link(logdir)  # its event files would be written wherever the link points
        self.writer = SummaryWriter(logdir=logdir)

    def write(self, records: Iterable[dict]) -> None:
        for record in records:
            for key, value in scalars(record).items():
                self.writer.add_scalar(key, value, global_step=int(record["env_steps"]))
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


class WandbSink:
    """``wandb.log`` per record into ``RUN_DIR/wandb`` (``WANDB_MODE=offline`` for local)."""

    def __init__(self, run_dir: str, config: dict):
        import wandb

        rundir.refuse_link(os.path.join(run_dir, WANDB_DIR))  # (makedirs and wandb would write through it)
        os.makedirs(os.path.join(run_dir, WANDB_DIR), exist_ok=True)
        self.run = wandb.init(dir=os.path.join(run_dir, WANDB_DIR), config=config, name=os.path.basename(os.path.normpath(run_dir)), reinit=True)

    def write(self, records: Iterable[dict]) -> None:
        for record in records:
            self.run.log({**scalars(record), "env_steps": record["env_steps"]}, step=int(record["update"]))

    def close(self) -> None:
        self.run.finish()


class Sinks:
    """``metrics.jsonl`` plus the configured extra sinks, written together."""

    def __init__(self, jsonl, extra: list):
        self.jsonl, self.extra = jsonl, extra

    def write(self, records: list[dict]) -> None:
        self.jsonl.write(records)
        for sink in self.extra:
            sink.write(records)

    def close(self) -> None:
        for sink in [self.jsonl, *self.extra]:
            sink.close()


def open_sinks(names: Sequence[str], run_dir: str, jsonl, config: dict, primary: bool = True) -> Sinks:
    """The sinks of ``train.loggers`` (only the primary process writes any but ``jsonl``,
    which the caller points at ``os.devnull`` elsewhere)."""
    check_loggers(names)
    kinds = {"tensorboard": TensorBoardSink, "wandb": WandbSink}
    extra = [kinds[n](run_dir, config) for n in names if n != "jsonl"] if primary else []
    return Sinks(jsonl, extra)
