"""Continuing a run: ``--resume`` (the same run, from its newest verified checkpoint) and
``--init-from`` (a new run from another run's learned parameters).

A resume uses the run's own ``config.yaml``; it is refused when that file differs from the
config the checkpoint was trained with, except in :data:`OPERATIONAL_KEYS` (where and how
the run reports), unless the change is accepted and recorded in ``config_changes.jsonl``.
Likewise when a data file or a tokenizer differs from what the checkpoint records it was
trained on (:mod:`jaxrl.run.records`), unless ``--accept-data-change``.
"""

from __future__ import annotations

import os
import sys
import time

import jax
import jax.numpy as jnp

from jaxrl.algos.common.lm import model_mismatch
from jaxrl.parallel import sharding
from jaxrl.run import config as config_lib
from jaxrl.run import records, rundir
from jaxrl.run.build import Built
from jaxrl.run.checkpoint import CheckpointError, Checkpoints, to_storable
from jaxrl.run.config import ConfigError, RunConfig
from jaxrl.run.files import CHANGES_FILE, CHECKPOINT_DIR, CONFIG_FILE

__all__ = [
    "OPERATIONAL_KEYS", "check_config_drift", "check_data_drift", "early_data_check", "early_model_check", "first_leaf_difference", "initial_from",
    "keep_choices", "resolve_resume", "restart_without_checkpoint",
]

#: Config keys that change where and how a run reports, never its results: a resume may
#: change them without --accept-config-change.
OPERATIONAL_KEYS = ("train.progress", "train.out_dir", "train.keep_checkpoints", "train.checkpoint_every", "train.loggers")


def resolve_resume(cfg: RunConfig | None, resume: str) -> RunConfig:
    path = os.path.join(resume, CONFIG_FILE)
    if not os.path.lexists(path):
        raise ConfigError(f"--resume {resume!r}: no {CONFIG_FILE} there (not a run directory; a run stopped before its first "
                          f"write, e.g. during its first compile, left nothing to resume: start it again with "
                          f"`jaxrl train CONFIG --out {resume}`)")
    saved, given = config_lib.load_config(path), cfg and config_lib.config_to_dict(cfg)
    if given and rundir.config_diff(config_lib.config_to_dict(saved), given, ignore=OPERATIONAL_KEYS):
        raise ConfigError(f"--resume {resume!r}: the given config differs from the run's {CONFIG_FILE}")
    return saved if cfg is None else cfg  # differs at most in OPERATIONAL_KEYS (train.progress...)


def restart_without_checkpoint(run_dir: str, metrics_path: str) -> None:
    """``--resume`` found no checkpoint: say so, and set aside the metrics of the lost updates."""
    note = ""
    if os.path.lexists(metrics_path) and os.path.getsize(metrics_path) > 0:
        kept = rundir.set_aside(metrics_path)
        note = f"; its earlier metrics were kept as {os.path.basename(kept)}"
    print(f"jaxrl: warning: {run_dir} has no checkpoint to resume from: starting at update 0{note}", file=sys.stderr)


def initial_from(cfg: RunConfig, built: Built, fresh, keys, source_dir: str, layout):
    """``(state, record)``: ``fresh`` (seeds ``[S, ...]``) with the learned parameters of the
    run in ``source_dir`` put in by the program's ``load_params``; the source must have the same network
    shapes (another algorithm's: the same loaded model, ``model_mismatch``) and train 1 or S seeds."""
    from jaxrl.run.evaluate import load_run

    load = built.program.load_params
    if load is None:
        raise ConfigError(f"--init-from: {cfg.algo} cannot start from another run's parameters")
    src_cfg, _, trained, step = load_run(source_dir)
    if why := model_mismatch(src_cfg.algo, src_cfg.algo_config, cfg.algo, cfg.algo_config):
        raise ConfigError(f"--init-from: {source_dir!r} trained {src_cfg.algo}, this run is {cfg.algo}: {why}")
    n_src, n = src_cfg.train.seeds, cfg.train.seeds
    if n_src not in (1, n):
        raise ConfigError(f"--init-from: {source_dir!r} trained {n_src} seeds; this run needs 1 or {n}")
    if n_src != n:
        trained = jax.tree_util.tree_map(lambda x: jnp.broadcast_to(x, (n,) + x.shape[1:]), trained)
    template = jax.eval_shape(jax.vmap(built.program.init), keys)
    try:
        loaded = jax.eval_shape(jax.vmap(load), template, trained)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"--init-from: {source_dir!r}'s parameters do not fit this config: {exc}") from None
    diff = _tree_mismatch(template, loaded)
    if diff:
        raise ConfigError(f"--init-from: {source_dir!r}'s parameters do not fit this config (network shapes differ): {diff}")
    host = to_storable(jax.device_get(jax.jit(jax.vmap(load))(sharding.local_copy(fresh) if jax.process_count() > 1 else fresh, trained)))
    state = sharding.put(host, template, layout.state)
    return state, {"run_dir": os.path.abspath(source_dir), "update": int(step), "seeds": n_src}


def first_leaf_difference(a, b):
    """``None`` when two (abstract) trees have the same structure, leaf shapes and dtypes;
    else ``(path, x, y)``: the first leaf that differs (``path`` is None when the structures do)."""
    if jax.tree_util.tree_structure(a) != jax.tree_util.tree_structure(b):
        return None, None, None
    for (path, x), y in zip(jax.tree_util.tree_flatten_with_path(a)[0], jax.tree_util.tree_leaves(b)):
        if x.shape != y.shape or x.dtype != y.dtype:
            return jax.tree_util.keystr(path), x, y
    return None


def _tree_mismatch(a, b) -> str | None:
    """The first leaf (path) whose shape or dtype differs between two abstract trees."""
    diff = first_leaf_difference(a, b)
    if diff is None:
        return None
    path, x, y = diff
    return "different structure" if path is None else f"{path}: {x.dtype}{list(x.shape)} vs {y.dtype}{list(y.shape)}"


def check_config_drift(cfg: RunConfig, record: dict, run_dir: str, step: int, accept: bool, primary: bool, out) -> None:
    """Refuse (or, with ``accept``, record) a resume whose config differs from the one
    checkpoint ``step`` was trained with (its record's ``meta.config``)."""
    trained = (record.get("meta") or {}).get("config")
    if not isinstance(trained, dict):
        raise ConfigError(f"--resume {run_dir!r}: checkpoint {step} records no config; cannot check config.yaml")
    diff = rundir.config_diff(config_lib.in_current_spelling(trained), config_lib.config_to_dict(cfg), ignore=OPERATIONAL_KEYS)
    if not diff:
        return
    changes = rundir.describe_diff(diff)
    if not accept:
        raise ConfigError(
            f"--resume {run_dir!r}: {CONFIG_FILE} differs from the config checkpoint {step} was trained with: "
            f"{changes}; restore it, or pass --accept-config-change to continue with the new values"
        )
    if primary:
        when = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        entry = {"update": step, "time": when, "changes": {k: [a, b] for k, (a, b) in diff.items()}}
        rundir.append_jsonl(os.path.join(run_dir, CHANGES_FILE), entry)
    print(f"jaxrl: config changed at update {step} (accepted, recorded in {CHANGES_FILE}): {changes}", file=out)


def check_data_drift(trained_on: dict, record: dict, run_dir: str, step: int, accept: bool, primary: bool, out) -> None:
    """Refuse (or, with ``accept``, record) a resume whose data files or tokenizers
    (``trained_on``, :func:`jaxrl.run.records.trained_on` of the files now) differ from those
    checkpoint ``step`` records (``meta.trained_on``; a checkpoint without one is not checked)."""
    then = (record.get("meta") or {}).get("trained_on")
    if not isinstance(then, dict):
        return
    diff = records.changes(then, trained_on)
    if not diff:
        return
    what = records.describe(diff)
    if not accept:
        raise ConfigError(
            f"--resume {run_dir!r}: checkpoint {step} was trained on other data or another tokenizer: {what}; "
            "restore them, or pass --accept-data-change to continue on the new ones"
        )
    if primary:
        when = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        rundir.append_jsonl(os.path.join(run_dir, CHANGES_FILE), {"update": step, "time": when, "data_changes": diff})
    print(f"jaxrl: data changed at update {step} (accepted, recorded in {CHANGES_FILE}): {what}", file=out)


def early_data_check(trained_on: dict, run_dir: str) -> None:
    """:func:`check_data_drift` against the newest checkpoint's record, before anything is
    built or compiled (a refusal costs no compile). The checkpoint the resume restores is
    checked again once restored (an older one when the newest is damaged)."""
    ckpts = Checkpoints(os.path.join(run_dir, CHECKPOINT_DIR), read_only=True, run_id=rundir.run_id(run_dir))
    step = ckpts.latest_step()
    if step is None:
        return
    try:
        record = ckpts.record(step)
    except CheckpointError:
        return  # damaged: the resume falls back past it and checks the one it restores
    check_data_drift(trained_on, record, run_dir, step, accept=False, primary=False, out=None)


def keep_choices(cfg: RunConfig, run_dir: str) -> tuple[RunConfig, dict]:
    """``(config to build, {key: value})``: ``cfg`` with the ``auto`` keys its program set
    from the machine's memory when the run started (the newest readable checkpoint's
    ``meta.chosen``, :attr:`jaxrl.algos.contract.LMHooks.chosen`) at the recorded values, so
    a resume on another machine does not choose again differently (a micro-batch count
    changes the updates). ``config.yaml`` keeps ``auto``. A key the config no longer leaves
    at ``auto``, or values the config no longer accepts (an accepted change of the batch),
    are chosen again."""
    ckpts = Checkpoints(os.path.join(run_dir, CHECKPOINT_DIR), read_only=True, run_id=rundir.run_id(run_dir))
    chosen = None
    for step in reversed(ckpts.steps()):
        try:
            chosen = (ckpts.record(step).get("meta") or {}).get("chosen")
        except CheckpointError:
            continue  # damaged: an older step's record
        break
    if not isinstance(chosen, dict):
        return cfg, {}
    raw, kept = config_lib.config_to_dict(cfg), {}
    for key, value in chosen.items():
        *path, leaf = str(key).split(".")
        node = raw
        for part in path:
            node = node.get(part) if isinstance(node, dict) else None
        if isinstance(node, dict) and node.get(leaf) == "auto" and isinstance(value, (bool, int)):
            node[leaf] = kept[key] = value
    if not kept:
        return cfg, {}
    try:
        return config_lib.config_from_dict(raw), kept
    except ConfigError:
        return cfg, {}


def early_model_check(cfg: RunConfig, source_dir: str) -> None:
    """:func:`initial_from`'s model check against ``source_dir``'s ``config.yaml``, before
    anything is built or compiled (the checkpoint's recorded config is checked again later)."""
    from jaxrl.run.evaluate import run_config

    src_cfg = run_config(source_dir)
    if why := model_mismatch(src_cfg.algo, src_cfg.algo_config, cfg.algo, cfg.algo_config):
        raise ConfigError(f"--init-from: {source_dir!r} trained {src_cfg.algo}, this run is {cfg.algo}: {why}")
