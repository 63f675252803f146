"""The training program and the host loop around it.

Two ways to train from a :class:`~jaxrl.run.config.RunConfig`:

* :func:`make_train` returns a pure ``train(key) -> (state, metrics)`` (for Jupyter):
  ``init`` then ``num_updates`` updates in one ``lax.scan``; ``metrics`` are stacked
  ``[num_updates]``. ``jax.jit(jax.vmap(train))(keys)`` trains many seeds in one program.
* :func:`run` is the command-line loop: it vmaps ``init`` over ``train.seeds`` seeds and
  calls one jitted *chunk* (:func:`make_chunk`: ``K`` updates in a ``lax.scan``, the state
  donated) again and again. After each chunk the host checks that the losses and the
  state are finite, appends the chunk's per-update metrics (``[S, K]``, fixed size, so
  memory does not grow with the run) to ``metrics.jsonl``, advances the progress bar,
  and saves periodic checkpoints. At the end it saves a final checkpoint, evaluates and
  plots the learning curve.

Chunking never changes the math: the chunk runs ``update`` exactly ``n_active <= K``
times (``lax.cond`` skips the rest), so any ``K`` and any resume point give the same
states bit for bit. ``n_active`` is an argument, so the chunk compiles once per run.

Run directory layout: ``config.yaml`` (the resolved config), ``metrics.jsonl``,
``learning_curve.png``, ``checkpoints/<updates done>/``, ``eval.json``, ``.lock`` (the
writer's, :mod:`jaxrl.run.rundir`), ``config_changes.jsonl`` (accepted config changes).
Seeds and memory are checked before anything is written (:mod:`jaxrl.run.guards`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import io
import json
import os
import sys
import time
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np

from jaxrl.algos.common.lm import model_mismatch
from jaxrl.algos.common.train import COMPILER_OPTIONS, over_seeds, train
from jaxrl.parallel import distributed, sharding
from jaxrl.run import config as config_lib
from jaxrl.run import evaluate as eval_lib
from jaxrl.run import logging as log_lib
from jaxrl.run import alerts as alerts_lib, guards, loggers, rundir
from jaxrl.run.build import Built, build, seed_keys
from jaxrl.run.checkpoint import Checkpoints, to_storable
from jaxrl.run.config import ConfigError, RunConfig
from jaxrl.run.files import (
    CHANGES_FILE, CHECKPOINT_DIR, CONFIG_FILE, CURVE_FILE, EVAL_FILE, METRICS_FILE, RUN_FILES, STOP_FILE, INIT_FROM_FILE,
)

__all__ = [
    "CHANGES_FILE", "CHECKPOINT_DIR", "CONFIG_FILE", "CURVE_FILE", "EVAL_FILE", "METRICS_FILE", "RUN_FILES",
    "Built", "NonFiniteError", "RunResult", "build", "make_chunk", "make_layout", "make_train", "run", "seed_keys",
]
#: Config keys that change where and how a run reports, never its results: a resume may
#: change them without --accept-config-change.
OPERATIONAL_KEYS = ("train.progress", "train.out_dir", "train.keep_checkpoints", "train.checkpoint_every", "train.loggers")


class NonFiniteError(RuntimeError):
    """A loss or a state leaf went NaN/inf; the message says where and what was kept."""


def make_train(cfg: RunConfig, num_updates: int | None = None) -> Callable[..., tuple[Any, dict]]:
    """A pure ``train(key, hyper=None) -> (final state, per-update metrics)`` for ``cfg``.

    One seed, the whole run (or ``num_updates``) in one scan; ``hyper`` is a dict of traced
    hyperparameters from ``build(cfg).program.hyperparams(...)`` (every algorithm's
    learning rate and clipping among them), so seeds x values sweep in one program:

    >>> train = make_train(load_config("configs/ppo_cartpole.yaml"))
    >>> state, metrics = jax.jit(jax.vmap(train))(jax.random.split(jax.random.PRNGKey(0), 8))

    ``jaxrl train`` compiles its chunks with :data:`jaxrl.algos.common.train.COMPILER_OPTIONS`;
    jit with the same ``compiler_options`` to get its results bit for bit.
    """
    built = build(cfg)
    n = built.derived.num_updates if num_updates is None else int(num_updates)
    if n <= 0:
        raise ValueError(f"num_updates: expected a positive integer, got {num_updates!r}")
    return functools.partial(train, built.program, n)


def _skip_update(update: Callable, state):
    """The ``n_active``-exceeded branch: state unchanged, zero metrics of the right shape."""
    _, shapes = jax.eval_shape(update, state)
    return state, jax.tree_util.tree_map(lambda s: jnp.zeros(s.shape, s.dtype), shapes)


def _chunk_body(update: Callable, n_active: jax.Array, state, i):
    return jax.lax.cond(i < n_active, update, functools.partial(_skip_update, update), state)


def no_nan(tree) -> jax.Array:
    """bool ``[]``: no inexact leaf of ``tree`` holds a NaN.

    Infinities are not flagged: a state may hold a legitimate ``inf`` (e.g. "no clipping"
    as an infinite clip range); a diverged parameter or optimiser moment turns NaN within
    an update or two (``inf - inf``, ``0 * inf``), and losses are checked for any
    non-finite value separately.
    """
    leaves = [x for x in jax.tree_util.tree_leaves(tree) if jnp.issubdtype(jnp.result_type(x), jnp.inexact)]
    if not leaves:
        return jnp.array(True)
    return jnp.logical_not(jnp.any(jnp.stack([jnp.any(jnp.isnan(x)) for x in leaves])))


def chunk_fn(update: Callable, k: int, state, n_active: jax.Array):
    """``n_active <= k`` updates of one seed's state in a ``k``-step scan.

    Returns ``(state, metrics [k] per name (zeros past n_active), no NaN in state bool[])``.
    """
    body = functools.partial(_chunk_body, update, n_active)
    state, metrics = jax.lax.scan(body, state, jnp.arange(k))
    return state, metrics, no_nan(state)


def make_chunk(update: Callable, k: int, layout: sharding.Layout | None = None) -> Callable:
    """The jitted chunk over a ``[S, ...]`` batch of seed states, state donated.

    ``chunk(states, n_active int32[]) -> (states, metrics {name: [S, k]}, finite bool[S])``.
    With a ``layout`` (:func:`make_layout`) the state stays sharded over its mesh and the
    metrics come back replicated: one program over every device.
    """
    per_seed = over_seeds(functools.partial(chunk_fn, update, k))
    if layout is None:
        return jax.jit(per_seed, donate_argnums=0, compiler_options=COMPILER_OPTIONS)
    rep = layout.replicated
    return jax.jit(
        per_seed, in_shardings=(layout.state, rep), out_shardings=(layout.state, rep, rep), donate_argnums=0,
        compiler_options=COMPILER_OPTIONS,
    )


def make_layout(cfg: RunConfig, built: Built, keys: jax.Array) -> sharding.Layout:
    """Where the ``[S, ...]`` train state lives on the ``cfg.devices`` mesh.

    ``shard: seeds`` (or ``auto`` when ``S`` divides over the devices, with more than one
    device): whole seeds per device, no collectives. ``shard: envs`` (or ``auto`` otherwise):
    the leaves the program's ``batch_axes`` marks are split over the devices (its ``batch``
    count must divide), everything else is replicated; ``mesh.model > 1`` splits the leaves
    the program's ``model_params`` declares. Raises :class:`ConfigError` when ``devices`` is
    not available or a split does not divide.
    """
    try:
        mesh = sharding.make_mesh(cfg.devices, cfg.mesh.model)
        specs = sharding.model_specs(mesh, jax.eval_shape(built.program.init, keys[0]), cfg.mesh.strategy, built.program.model_params)
    except ValueError as exc:
        raise ConfigError(str(exc) if str(exc).startswith("mesh.") else f"devices: {exc}") from None
    program = built.program
    shapes = jax.eval_shape(jax.vmap(program.init), keys)
    n_dev, n_seeds = sharding.mesh_size(mesh), int(keys.shape[0])
    if cfg.shard == "seeds" or (cfg.shard == "auto" and n_dev > 1 and n_seeds % n_dev == 0):
        try:
            return sharding.seed_layout(mesh, shapes, specs)
        except ValueError as exc:
            raise ConfigError(f"shard: seeds: {exc}") from None
    try:
        if program.batch is not None:
            b = program.batch
            sharding.check_divisible(b.size, mesh, f"{cfg.algo}.{b.key}", unit=b.unit)
    except ValueError as exc:
        raise ConfigError(f"devices: {exc}") from None
    one_seed = jax.eval_shape(program.init, keys[0])
    axes = jax.tree_util.tree_map(lambda a: a + 1 if a >= 0 else -1, program.batch_axes(one_seed))  # seeds in front
    return sharding.make_layout(mesh, shapes, axes, specs)


def save_checkpoint(ckpts: Checkpoints, step: int, state) -> None:
    """Every process gathers ``state`` to the host; only the primary process writes it.

    The checkpoint holds plain host arrays, not the devices' shards, so it restores on any
    layout (another device count, another number of processes, ``jaxrl eval``).
    """
    host = sharding.fetch(state)
    if distributed.is_primary():
        ckpts.save(step, host)
    distributed.barrier(f"checkpoint-{step}")


# ------------------------------------------------------------------------------------------
# The host loop
# ------------------------------------------------------------------------------------------


@dataclasses.dataclass
class RunResult:
    """What :func:`run` returns."""

    run_dir: str
    state: Any  # the final train state, leaves [S, ...]
    updates: int  # updates done
    evaluation: dict | None  # the eval summary written to eval.json


def default_run_dir(cfg: RunConfig) -> str:
    """``<train.out_dir>/<algo>_<env>_<YYYYmmdd-HHMMSS>`` (with ``-2``, ``-3``... if taken)."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    base = os.path.join(cfg.train.out_dir, f"{cfg.algo}_{cfg.env.id.replace('/', '_')}_{stamp}")
    path, i = base, 1
    while os.path.exists(path):
        i += 1
        path = f"{base}-{i}"
    return path


def check_fresh_run_dir(run_dir: str) -> None:
    """A new run never overwrites another run's config, metrics or checkpoints, nor a file
    of the user's that a run would write (:data:`RUN_FILES`)."""
    ckpt_dir = os.path.join(run_dir, CHECKPOINT_DIR)
    has_checkpoints = os.path.isdir(ckpt_dir) and bool(os.listdir(ckpt_dir))
    if os.path.isdir(run_dir) and (os.path.exists(os.path.join(run_dir, CONFIG_FILE)) or has_checkpoints):
        raise ConfigError(
            f"run directory {run_dir!r} already holds a run; continue it with --resume {run_dir} "
            "or choose another --out"
        )
    rundir.check_fresh(run_dir, RUN_FILES)


def _first_nonfinite(metrics: dict, num_active: int) -> tuple[str, int, int] | None:
    """(loss name, update index in chunk, seed) of the first non-finite loss, if any."""
    for i in range(num_active):
        for name, values in metrics.items():
            if "loss" not in name:
                continue
            column = np.asarray(values)[:, i]
            bad = np.flatnonzero(~np.isfinite(column))
            if bad.size:
                return name, i, int(bad[0])
    return None


def _kept_message(ckpts: Checkpoints) -> str:
    step = ckpts.verified_step()  # "good" means its files and arrays verify
    if step is None:
        return "no checkpoint had been saved yet"
    return f"last good checkpoint kept at {os.path.join(ckpts.directory, str(step))} (update {step})"


def check_finite(metrics: dict, finite: np.ndarray, first_update: int, num_active: int, ckpts: Checkpoints) -> None:
    """Raise :class:`NonFiniteError` if a loss or a state leaf of the chunk is not finite."""
    bad = _first_nonfinite(metrics, num_active)
    if bad is not None:
        name, i, seed = bad
        raise NonFiniteError(
            f"non-finite {name} at update {first_update + i + 1} (seed {seed}); {_kept_message(ckpts)}"
        )
    if not np.all(finite):
        seed = int(np.flatnonzero(~finite)[0])
        raise NonFiniteError(
            f"NaN in the parameters or state at update {first_update + num_active} (seed {seed}); "
            f"{_kept_message(ckpts)}"
        )


def _resolve_resume(cfg: RunConfig | None, resume: str) -> RunConfig:
    path = os.path.join(resume, CONFIG_FILE)
    if not os.path.lexists(path):
        raise ConfigError(f"--resume {resume!r}: no {CONFIG_FILE} there (not a run directory)")
    saved, given = config_lib.load_config(path), cfg and config_lib.config_to_dict(cfg)
    if given and rundir.config_diff(config_lib.config_to_dict(saved), given, ignore=OPERATIONAL_KEYS):
        raise ConfigError(f"--resume {resume!r}: the given config differs from the run's {CONFIG_FILE}")
    return saved if cfg is None else cfg  # differs at most in OPERATIONAL_KEYS (train.progress...)


def _recent_return(records: list[dict], key: str | None = None) -> float | None:
    """The latest training return (or ``key``), skipping updates in which no episode ended."""
    key = key or log_lib.return_key({k for r in records for k in r})
    for rec in reversed(records):
        if key is not None and key in rec:
            return float(np.nanmean(log_lib.as_floats([rec[key]])))
    return None


def run(
    cfg: RunConfig | None = None,
    run_dir: str | None = None,
    resume: str | None = None,
    evaluate: bool = True,
    out=None,
    accept_config_change: bool = False,
    init_from: str | None = None,
) -> RunResult:
    """Train ``cfg`` with logging and checkpoints in ``run_dir``; see the module docstring.

    ``resume=RUN_DIR`` continues that run from its newest verified checkpoint (its own
    ``config.yaml`` is used; a ``cfg`` given as well must equal it). When ``config.yaml``
    differs from the config that checkpoint was trained with, the resume is refused with
    the difference, unless ``accept_config_change`` (then the change is appended to
    ``config_changes.jsonl``). ``init_from=RUN_DIR`` starts a fresh run from the learned
    parameters of that run's newest verified checkpoint (:func:`initial_from`). The primary
    process holds the run directory's lock
    (:class:`jaxrl.run.rundir.RunLock`) from before its first write to the end.
    """
    out = sys.stdout if out is None else out  # looked up per call (redirected streams)
    if resume is not None:
        cfg = _resolve_resume(cfg, resume)
        run_dir = resume
    if cfg is None:
        raise ValueError("run() needs a config or a run directory to resume")
    if init_from is not None and resume is not None:
        raise ConfigError("--init-from starts a new run; it cannot be combined with --resume")
    if run_dir is None and jax.process_count() > 1:  # a default name could differ between processes
        raise ConfigError("a multi-process run needs --out DIR on a filesystem every process shares")
    run_dir = run_dir or default_run_dir(cfg)
    fresh = resume is None and jax.process_count() == 1  # (several processes share one --out)
    if fresh:
        check_fresh_run_dir(run_dir)
    guards.check_seed(cfg.train.seed, "train.seed")
    built = build(cfg)
    guards.check_memory(cfg, built)  # before anything is written or allocated
    keys = seed_keys(cfg.train.seed, cfg.train.seeds)
    layout = make_layout(cfg, built, keys)
    primary = distributed.is_primary()  # only process 0 writes files and prints
    with rundir.RunLock(run_dir) if primary else contextlib.nullcontext():
        if fresh:
            check_fresh_run_dir(run_dir)  # again under the lock: a writer may have started meanwhile
        return _run_locked(cfg, built, keys, layout, run_dir, resume, evaluate, out, accept_config_change, init_from)


def _run_locked(cfg, built, keys, layout, run_dir, resume, evaluate, out, accept_config_change, init_from=None) -> RunResult:
    """The body of :func:`run` once the checks passed and the lock is held."""
    d = built.derived
    primary = distributed.is_primary()
    out = out if primary else io.StringIO()
    print(f"jaxrl: {cfg.algo} on {cfg.env.id}: {d.describe()}", file=out)
    batch = built.program.batch
    per_device = (cfg.train.seeds, "seeds") if layout.mode == "seeds" else ((batch.size, batch.unit) if batch else ())
    print(f"jaxrl: {sharding.summary(layout.mesh, *per_device)}", file=out)
    print(f"jaxrl: run directory {run_dir}", file=out)
    init = sharding.init_sharded(jax.vmap(built.program.init), layout)
    ckpts = Checkpoints(
        os.path.join(run_dir, CHECKPOINT_DIR), keep=cfg.train.keep_checkpoints,
        meta={"config": config_lib.config_to_dict(cfg)}, read_only=not primary,
        run_id=rundir.run_id(run_dir) if primary else None,  # a step copied in from another run is refused
    )
    metrics_path = os.path.join(run_dir, METRICS_FILE)
    done, wall_offset, records = 0, 0.0, []
    if resume is not None and ckpts.steps():
        template = jax.eval_shape(jax.vmap(built.program.init), keys)
        restored = ckpts.restore_verified(template)  # the newest that verifies (warns if it fell back)
        done = restored.step
        _check_config_drift(cfg, restored.record, run_dir, done, accept_config_change, primary, out)
        if primary:
            ckpts.discard_after(done)  # damaged newer steps: this run redoes them
        state = sharding.put(to_storable(restored.state), template, layout.state)  # same file, every process
        del restored
        records, problems = log_lib.repair_metrics(metrics_path, done) if primary else ([], [])
        for line in problems:
            print(f"jaxrl: warning: {line}", file=sys.stderr)
        wall_offset = records[-1]["wall_time"] if records else 0.0
        print(f"jaxrl: resuming at update {done}", file=out)
    else:
        state = init(keys)
        if init_from is not None:
            state, source = initial_from(cfg, built, state, keys, init_from, layout)
            if primary:
                rundir.write_text(os.path.join(run_dir, INIT_FROM_FILE), json.dumps(source) + "\n")
            print(f"jaxrl: starting from the parameters of {init_from} (update {source['update']})", file=out)
        if primary and resume is not None:
            _restart_without_checkpoint(run_dir, metrics_path)
    if primary:
        rundir.write_text(os.path.join(run_dir, CONFIG_FILE), config_lib.dump_config(cfg))
    distributed.barrier("run-dir")
    try:
        state, done = _loop(cfg, built, state, done, wall_offset, ckpts, metrics_path, layout)
        if not ckpts.steps() or ckpts.latest_step() != done:
            save_checkpoint(ckpts, done, state)
    except guards.Interrupted as stop:
        _save_on_interrupt(ckpts, stop, run_dir)
        raise
    finally:
        ckpts.close()
    summary = None
    if primary:
        records = log_lib.read_metrics(metrics_path)
        curve = built.program.curve
        log_lib.plot_learning_curve(records, os.path.join(run_dir, CURVE_FILE), f"{cfg.algo} on {cfg.env.id}",
                                    curve, built.derived.step_unit)
    if evaluate:
        local = sharding.local_copy(state) if jax.process_count() > 1 else state
        if primary:
            summary = eval_lib.evaluate_run(built, local, seed=cfg.train.seed)
            eval_lib.write_summary(summary, os.path.join(run_dir, EVAL_FILE))
            print(eval_lib.format_summary(summary), file=out)
    return RunResult(run_dir, state, done, summary)


def _restart_without_checkpoint(run_dir: str, metrics_path: str) -> None:
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
    if src_cfg.algo != cfg.algo and (why := model_mismatch(src_cfg.algo, src_cfg.algo_config, cfg.algo, cfg.algo_config)):
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


def _tree_mismatch(a, b) -> str | None:
    """The first leaf (path) whose shape or dtype differs between two abstract trees."""
    if jax.tree_util.tree_structure(a) != jax.tree_util.tree_structure(b):
        return "different structure"
    for (path, x), y in zip(jax.tree_util.tree_flatten_with_path(a)[0], jax.tree_util.tree_leaves(b)):
        if x.shape != y.shape or x.dtype != y.dtype:
            return f"{jax.tree_util.keystr(path)}: {x.dtype}{list(x.shape)} vs {y.dtype}{list(y.shape)}"
    return None


def _check_config_drift(cfg: RunConfig, record: dict, run_dir: str, step: int, accept: bool, primary: bool, out) -> None:
    """Refuse (or, with ``accept``, record) a resume whose config differs from the one
    checkpoint ``step`` was trained with (its record's ``meta.config``)."""
    trained = (record.get("meta") or {}).get("config")
    if not isinstance(trained, dict):
        raise ConfigError(f"--resume {run_dir!r}: checkpoint {step} records no config; cannot check config.yaml")
    diff = rundir.config_diff(trained, config_lib.config_to_dict(cfg), ignore=OPERATIONAL_KEYS)
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


def _save_on_interrupt(ckpts: Checkpoints, stop: guards.Interrupted, run_dir: str) -> None:
    """Checkpoint the state a Ctrl-C left (the last completed chunk) and fill in ``stop``."""
    stop.run_dir = run_dir
    state, stop.state = stop.state, None
    try:
        if ckpts.latest_step() == stop.update and ckpts.verified_step() == stop.update:
            stop.saved = True
        elif state is not None and guards.alive(state):
            save_checkpoint(ckpts, stop.update, state)
            stop.saved = True
    finally:
        if not stop.saved:
            stop.last_checkpoint = ckpts.verified_step()


def stop_reached(stop: config_lib.StopAt, record: dict) -> bool:
    """``record[stop.metric]`` (the seed mean of a per-seed list) ``>= stop.threshold``; the
    name was checked before the first chunk (:func:`guards.check_stop_metric`), and a record
    without it (no episode ended in that update) has not reached it."""
    value = alerts_lib.seed_mean(record[stop.metric]) if stop.metric in record else None
    return value is not None and value >= stop.threshold


def record_stop(stop: config_lib.StopAt, record: dict, run_dir: str) -> None:
    """Write ``stopped.json`` (update, env steps, metric, value, threshold) and say so."""
    value = record[stop.metric]
    entry = {
        "update": record["update"], "env_steps": record["env_steps"], "wall_time": record["wall_time"],
        "metric": stop.metric, "value": value, "threshold": stop.threshold,
    }
    rundir.write_text(os.path.join(run_dir, STOP_FILE), json.dumps(entry) + "\n")
    print(f"jaxrl: stopped at update {record['update']}: {stop.metric} = {value} >= {stop.threshold} (train.stop_at)")


def _loop(
    cfg: RunConfig, built: Built, state, done: int, wall_offset: float, ckpts: Checkpoints, metrics_path: str,
    layout: sharding.Layout | None = None,
):
    """Run chunks from ``done`` updates to the end; returns ``(state, updates done)``."""
    d = built.derived
    k = d.updates_per_chunk
    chunk = make_chunk(built.program.update, k, layout)
    where = None if layout is None else layout.replicated
    n_dev = {n: jax.device_put(np.int32(n), where) for n in {k, d.num_updates % k or k}}
    primary = distributed.is_primary()
    jsonl = log_lib.MetricsLog(metrics_path if primary else os.devnull)
    log = loggers.open_sinks(cfg.train.loggers, os.path.dirname(metrics_path), jsonl, config_lib.config_to_dict(cfg), primary)
    show = cfg.train.progress and primary
    curve = built.program.curve
    bar = log_lib.Progress(d.total_env_steps * d.seeds, done * d.env_steps_per_update * d.seeds, show, d.step_unit,
                           curve.label if curve else "return")
    watch = alerts_lib.Watch(built.program.alerts, os.path.dirname(metrics_path), primary)
    start = time.perf_counter()
    chunks_since_save = 0
    trace_mesh = layout.mesh if layout is not None and layout.mode == "envs" else None
    last = (done, state)  # the state after `done` updates, all logged: what a Ctrl-C checkpoints
    guards.check_stop_metric(cfg.train.stop_at, chunk, state, n_dev[k], trace_mesh)
    try:
        with guards.InterruptFlag() as ctrl_c:
            while done < d.num_updates:
                n = min(k, d.num_updates - done)
                with jax.transfer_guard("disallow"), sharding.use_mesh(trace_mesh):
                    state, metrics, finite = chunk(state, n_dev[n])  # env split: traced under the mesh (constrain_batch)
                metrics, finite = jax.device_get((metrics, finite))
                check_finite(metrics, finite, done, n, ckpts)
                wall = wall_offset + time.perf_counter() - start
                records = log_lib.chunk_records(metrics, done, n, d.env_steps_per_update, wall, cfg.train.log_seeds)
                log.write(records)
                bar.write(watch.console_line(watch.observe(records)) if primary else None)
                done += n
                last = (done, state)
                bar.update(n * d.env_steps_per_update * d.seeds, _recent_return(records, curve and curve.metric))
                if cfg.train.stop_at is not None and done < d.num_updates and stop_reached(cfg.train.stop_at, records[-1]):
                    if primary:
                        record_stop(cfg.train.stop_at, records[-1], os.path.dirname(metrics_path))
                    break
                chunks_since_save += 1
                if cfg.train.checkpoint_every and chunks_since_save >= cfg.train.checkpoint_every and done < d.num_updates:
                    save_checkpoint(ckpts, done, state)
                    chunks_since_save = 0
                if ctrl_c.requested and done < d.num_updates:
                    raise guards.Interrupted(done, state)
    except guards.Interrupted:
        raise
    except KeyboardInterrupt:  # a second Ctrl-C, or one raised outside the signal handler
        raise guards.Interrupted(*last) from None
    finally:
        bar.close()
        log.close()
    return state, done


# ------------------------------------------------------------------------------------------
# CLI entry point: `jaxrl train CONFIG [--set k=v ...] [--seeds N] [--out DIR] [--resume DIR]`
# ------------------------------------------------------------------------------------------


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


def join_processes(args) -> bool:
    """``jax.distributed.initialize`` from ``--coordinator-address/--num-processes/
    --process-id``, the ``JAXRL_*`` environment variables or a detected cluster (SLURM...);
    a no-op for a single process. Must run before anything touches a device."""
    try:
        spec = distributed.resolve_spec(
            getattr(args, "coordinator_address", None), getattr(args, "num_processes", None),
            getattr(args, "process_id", None),
        )
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    return distributed.initialize(spec)


def main_train(args) -> int:
    """``jaxrl train``: returns 0; failures (config error 2, non-finite stop 1, Ctrl-C 130,
    I/O or memory 3) raise and reach the one-line handler of :func:`jaxrl.cli.main`."""
    if args.config is None and args.resume is None:
        raise ConfigError("train needs a CONFIG file or --resume RUN_DIR")
    join_processes(args)
    cfg = config_from_args(args)
    accept = bool(getattr(args, "accept_config_change", False))
    if accept and args.resume is None:
        raise ConfigError("--accept-config-change only applies with --resume RUN_DIR")
    result = run(cfg, run_dir=args.out, resume=args.resume, accept_config_change=accept, init_from=getattr(args, "init_from", None))
    print(f"jaxrl: done: {result.updates} updates; run directory {result.run_dir}")
    return 0
