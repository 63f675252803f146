"""The host loop of ``jaxrl train``: chunks, logs, checkpoints, the end of a run.

:func:`run` vmaps ``init`` over ``train.seeds`` seeds and calls one jitted *chunk*
(:func:`jaxrl.run.program.make_chunk`: ``K`` updates in a ``lax.scan``, the state
donated) again and again. After each chunk the host checks that the losses and the
state are finite, appends the chunk's per-update metrics (``[S, K]``, fixed size, so
memory does not grow with the run) to ``metrics.jsonl``, advances the progress bar,
and saves periodic checkpoints. At the end it saves a final checkpoint, evaluates and
plots the learning curve. The pure ``train`` for Jupyter and the chunk itself live in
:mod:`jaxrl.run.program`; ``--resume`` and ``--init-from`` in :mod:`jaxrl.run.resume`
(re-exported here); the command's handler is :mod:`jaxrl.commands.train`.

Run directory layout: ``config.yaml`` (the resolved config, under a comment naming the run's
identity), ``metrics.jsonl``, ``learning_curve.png``, ``checkpoints/<updates done>/`` (each
record names the data and tokenizer trained on, :mod:`jaxrl.run.records`), ``eval.json``,
``.lock`` (the writer's, :mod:`jaxrl.run.rundir`), ``config_changes.jsonl`` (accepted config
and data changes).
Seeds and memory are checked before anything is written (:mod:`jaxrl.run.guards`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import os
import sys
import threading
import time
from typing import Any, Callable

import jax
import numpy as np

from jaxrl.algos.common.train import COMPILER_OPTIONS
from jaxrl.parallel import distributed, sharding
from jaxrl.run import config as config_lib
from jaxrl.run import evaluate as eval_lib
from jaxrl.run import logging as log_lib
from jaxrl.run import alerts as alerts_lib, guards, loggers, rundir
from jaxrl.run import records as records_lib
from jaxrl.run import checkpoint as checkpoint_lib
from jaxrl.run.build import Built, build, seed_keys
from jaxrl.run.checkpoint import Checkpoints, to_storable
from jaxrl.run.config import ConfigError, RunConfig
from jaxrl.run.files import (
    CHANGES_FILE, CHECKPOINT_DIR, CONFIG_FILE, CURVE_FILE, EVAL_FILE, METRICS_FILE, RUN_FILES, STOP_FILE, INIT_FROM_FILE,
)
from jaxrl.run.program import chunk_fn, make_chunk, make_layout, make_train, no_nan, prepare_chunk, trace_mesh
from jaxrl.run.resume import (
    OPERATIONAL_KEYS, check_config_drift, check_data_drift, early_data_check, early_model_check, initial_from, keep_choices,
    resolve_resume, restart_without_checkpoint,
)

__all__ = [
    "CHANGES_FILE", "CHECKPOINT_DIR", "CONFIG_FILE", "CURVE_FILE", "EVAL_FILE", "METRICS_FILE", "RUN_FILES",
    "Built", "COMPILER_OPTIONS", "NonFiniteError", "OPERATIONAL_KEYS", "RunResult", "build", "chunk_fn", "initial_from", "make_chunk",
    "join_processes", "make_layout", "make_train", "no_nan", "run", "seed_keys",
]


class NonFiniteError(RuntimeError):
    """A loss or a state leaf went NaN/inf; the message says where and what was kept."""


def save_checkpoint(ckpts: Checkpoints, step: int, state) -> None:
    """Every process gathers ``state`` to the host; only the primary process writes it.

    The checkpoint holds plain host arrays, not the devices' shards, so it restores on any
    layout (another device count, another number of processes, ``jaxrl eval``). A save that
    fails on I/O (a full disk) raises :class:`~jaxrl.run.checkpoint.CheckpointSaveError`: one
    line naming the run directory, the checkpoint kept and the resume command.
    """
    host = sharding.fetch(state)
    if distributed.is_primary():
        try:
            ckpts.save(step, host)
        except OSError as exc:  # a full disk, any I/O error: nothing of the step was kept (Checkpoints.save)
            if isinstance(exc, checkpoint_lib.CheckpointSaveError):
                raise
            raise checkpoint_lib.save_failed(exc, ckpts, step) from None
    distributed.barrier(f"checkpoint-{step}")


def _import_end_of_run() -> None:
    """Import what the end of a run needs: orbax for the final checkpoint, matplotlib for the
    curve (run :func:`beside` the chunks instead of after them)."""
    import matplotlib.backends.backend_agg  # noqa: F401
    import matplotlib.figure  # noqa: F401

    checkpoint_lib._orbax()


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


@dataclasses.dataclass(frozen=True)
class RunContext:
    """What :func:`run` hands its locked body: the compiled program and how the run was asked for."""

    built: Built  # the env and the algorithm's program (:func:`jaxrl.run.build.build`)
    keys: Any  # the seeds' PRNG keys [S, ...] (:func:`jaxrl.run.build.seed_keys`)
    layout: Any  # where the state lives on the devices (:func:`jaxrl.run.program.make_layout`)
    chunk: Callable  # the compiled chunk (:func:`jaxrl.run.program.prepare_chunk`)
    init: Callable  # the sharded, vmapped ``init(keys)``
    trained_on: dict  # the data's and tokenizers' hashes, stored in every checkpoint record
    run_dir: str
    resume: str | None = None  # the run directory continued (``--resume``), or None
    init_from: str | None = None  # the run whose learned parameters start this one (``--init-from``)
    evaluate: bool = True  # evaluate the final state (eval.json)
    accept_config_change: bool = False
    accept_data_change: bool = False
    kept: tuple[tuple[str, Any], ...] = ()  # the auto choices a resume took from the checkpoint (keep_choices)


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


def _recent_return(records: list[dict], key: str | None = None) -> float | None:
    """The latest training return (or ``key``), skipping updates in which no episode ended."""
    key = key or log_lib.return_key({k for r in records for k in r})
    for rec in reversed(records):
        if key is not None and key in rec:
            return float(np.nanmean(log_lib.as_floats([rec[key]])))
    return None


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


def run(
    cfg: RunConfig | None = None,
    run_dir: str | None = None,
    resume: str | None = None,
    evaluate: bool = True,
    out=None,
    accept_config_change: bool = False,
    init_from: str | None = None,
    accept_data_change: bool = False,
) -> RunResult:
    """Train ``cfg`` with logging and checkpoints in ``run_dir``; see the module docstring.

    ``resume=RUN_DIR`` continues that run from its newest verified checkpoint (its own
    ``config.yaml`` is used; a ``cfg`` given as well must equal it). When ``config.yaml``
    differs from the config that checkpoint was trained with, the resume is refused with
    the difference, unless ``accept_config_change`` (then the change is appended to
    ``config_changes.jsonl``); likewise ``accept_data_change`` for data files and tokenizers
    that differ from those the checkpoint records (:mod:`jaxrl.run.records`).
    ``init_from=RUN_DIR`` starts a fresh run from the learned parameters of that run's
    newest verified checkpoint (:func:`initial_from`). The primary
    process holds the run directory's lock
    (:class:`jaxrl.run.rundir.RunLock`) from before its first write to the end.
    """
    out = sys.stdout if out is None else out  # looked up per call (redirected streams)
    if resume is not None:
        rundir.refuse_links(resume, RUN_FILES)  # a linked entry is refused before anything is read, compiled or written
        cfg = resolve_resume(cfg, resume)
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
    if init_from is not None:
        early_model_check(cfg, init_from)  # another checkpoint's run: refused before anything compiles
    # a resume builds with the auto choices the run made when it started, not this machine's
    built_cfg, kept = keep_choices(cfg, run_dir) if resume is not None else (cfg, {})
    built = build(built_cfg)  # (reads and checks the data files first)
    guards.check_memory(cfg, built)  # before anything is written or allocated
    trained_on = records_lib.trained_on(config_lib.config_to_dict(cfg))  # the data's and tokenizers' hashes
    if resume is not None and not accept_data_change:
        early_data_check(trained_on, run_dir)  # before anything compiles
    keys = seed_keys(cfg.train.seed, cfg.train.seeds)
    layout = make_layout(cfg, built, keys)
    init = sharding.init_sharded(jax.vmap(built.program.init), layout)
    init_compile = beside(lambda: init.lower(keys).compile(), "compile-init") if resume is None else None  # while the chunk is traced
    try:
        chunk = prepare_chunk(cfg, built, keys, layout)  # compiled; its memory checked
    finally:
        if init_compile is not None:
            init_compile.join()
    primary = distributed.is_primary()  # only process 0 writes files and prints
    with rundir.RunLock(run_dir) if primary else contextlib.nullcontext():
        if fresh:
            check_fresh_run_dir(run_dir)  # again under the lock: a writer may have started meanwhile
        ctx = RunContext(built, keys, layout, chunk, init, trained_on, run_dir, resume, init_from, evaluate,
                         accept_config_change, accept_data_change, tuple(kept.items()))
        return _run_locked(cfg, ctx, out)


def beside(work: Callable[[], Any], name: str) -> threading.Thread:
    """Run ``work`` in a daemon thread while the caller goes on: a compile (XLA releases the
    interpreter while it compiles; a later call of the compiled function reuses the
    executable) or an import. A failure is left for the later use to raise."""

    def run_():
        try:
            work()
        except Exception:  # noqa: BLE001 -- raised again where the program is used
            pass

    thread = threading.Thread(target=run_, name=f"jaxrl-{name}", daemon=True)
    thread.start()
    return thread


def _run_locked(cfg: RunConfig, ctx: RunContext, out) -> RunResult:
    """The body of :func:`run` once the checks passed and the lock is held."""
    built, keys, layout, chunk, init, run_dir = ctx.built, ctx.keys, ctx.layout, ctx.chunk, ctx.init, ctx.run_dir
    resume, init_from, evaluate, trained_on = ctx.resume, ctx.init_from, ctx.evaluate, ctx.trained_on
    d = built.derived
    primary = distributed.is_primary()
    out = out if primary else io.StringIO()
    print(f"jaxrl: {cfg.algo} on {cfg.env.id}: {d.describe()}", file=out)
    batch = built.program.batch
    per_device = (cfg.train.seeds, "seeds") if layout.mode == "seeds" else ((batch.size, batch.unit) if batch else ())
    print(f"jaxrl: {sharding.summary(layout.mesh, *per_device)}", file=out)
    print(f"jaxrl: run directory {run_dir}", file=out)
    for note in built.program.lm.notes if built.program.lm is not None else ():
        print(f"jaxrl: {note}", file=out)
    if ctx.kept:
        print(f"jaxrl: {', '.join(f'{k}={v}' for k, v in ctx.kept)}: as chosen when the run started "
              "(recorded in its checkpoint)", file=out)
    raw = config_lib.config_to_dict(cfg)
    chosen = dict(built.program.lm.chosen) if built.program.lm is not None else {}
    ident = rundir.run_id(run_dir) if primary else None
    ckpts = Checkpoints(
        os.path.join(run_dir, CHECKPOINT_DIR), keep=cfg.train.keep_checkpoints,
        meta={"config": raw, "trained_on": trained_on, **({"chosen": chosen} if chosen else {})}, read_only=not primary,
        run_id=ident,  # a step copied in from another run is refused
    )
    metrics_path = os.path.join(run_dir, METRICS_FILE)
    done, wall_offset, records = 0, 0.0, []
    if resume is not None and ckpts.steps():
        template = jax.eval_shape(jax.vmap(built.program.init), keys)
        restored = ckpts.restore_verified(template)  # the newest that verifies (warns if it fell back)
        done = restored.step
        check_config_drift(cfg, restored.record, run_dir, done, ctx.accept_config_change, primary, out)
        check_data_drift(trained_on, restored.record, run_dir, done, ctx.accept_data_change, primary, out)
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
            restart_without_checkpoint(run_dir, metrics_path)
    if primary:
        rundir.write_text(os.path.join(run_dir, CONFIG_FILE), rundir.id_header(ident) + config_lib.dump_config(cfg))
    distributed.barrier("run-dir")
    if primary:
        beside(_import_end_of_run, "imports")
    prepared, preparing = [], None  # the evaluation program, compiled while the chunks run (one process)
    if evaluate and primary and jax.process_count() == 1 and done < built.derived.num_updates:
        abstract = jax.tree_util.tree_map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding), state)
        preparing = beside(lambda: prepared.append(eval_lib.prepare_evaluate(built, abstract, cfg.train.seed)), "compile-eval")
    try:
        state, done = _loop(cfg, built, chunk, state, done, wall_offset, ckpts, metrics_path, layout)
        if not ckpts.steps() or ckpts.latest_step() != done:
            save_checkpoint(ckpts, done, state)
    except guards.Interrupted as stop:
        _save_on_interrupt(ckpts, stop, run_dir)
        raise
    finally:
        ckpts.close()
        if preparing is not None:
            preparing.join()
    summary, pending = None, None
    if evaluate:
        local = sharding.local_copy(state) if jax.process_count() > 1 else state
        if primary:  # dispatched now, run by the devices while the host plots the curve
            if not prepared:  # several processes, nothing left to train, or its compile failed: now
                prepared.append(eval_lib.prepare_evaluate(built, local, cfg.train.seed))
            pending = prepared[0](local)
    if primary:
        records = log_lib.read_metrics(metrics_path)
        curve = built.program.monitor.curve
        log_lib.plot_learning_curve(records, os.path.join(run_dir, CURVE_FILE), f"{cfg.algo} on {cfg.env.id}",
                                    curve, built.derived.step_unit)
    if pending is not None:
        summary = {**eval_lib.summarise(jax.device_get(pending), built.program.report), "checkpoint_update": done}
        eval_lib.write_summary(summary, os.path.join(run_dir, EVAL_FILE))
        print(eval_lib.format_summary(summary), file=out)
    return RunResult(run_dir, state, done, summary)


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
    cfg: RunConfig, built: Built, chunk: Callable, state, done: int, wall_offset: float, ckpts: Checkpoints, metrics_path: str,
    layout: sharding.Layout | None = None,
):
    """Run chunks from ``done`` updates to the end; returns ``(state, updates done)``."""
    d = built.derived
    k = d.updates_per_chunk
    where = None if layout is None else layout.replicated
    n_dev = {n: jax.device_put(np.int32(n), where) for n in {k, d.num_updates % k or k}}
    primary = distributed.is_primary()
    jsonl = log_lib.MetricsLog(metrics_path if primary else os.devnull)
    log = loggers.open_sinks(cfg.train.loggers, os.path.dirname(metrics_path), jsonl, config_lib.config_to_dict(cfg), primary)
    show = cfg.train.progress and primary
    curve = built.program.monitor.curve
    bar = log_lib.Progress(d.total_env_steps * d.seeds, done * d.env_steps_per_update * d.seeds, show, d.step_unit,
                           curve.label if curve else "return")
    watch = alerts_lib.Watch(built.program.monitor.alerts, os.path.dirname(metrics_path), primary)
    start = time.perf_counter()
    chunks_since_save = 0
    mesh = trace_mesh(layout)
    last = (done, state)  # the state after `done` updates, all logged: what a Ctrl-C checkpoints
    try:
        with guards.InterruptFlag() as ctrl_c:
            while done < d.num_updates:
                n = min(k, d.num_updates - done)
                with jax.transfer_guard("disallow"), sharding.use_mesh(mesh):
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
