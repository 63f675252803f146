"""Orbax checkpoints of the whole train state: atomic, verified, keep-the-last-few.

A checkpoint is the complete pytree ``init`` builds, so restoring it continues a run bit for bit.

* **Atomic**: orbax writes each step into a temporary directory and renames it into place
  only when every file is written (``commit_success``), so an interrupted save never
  replaces or corrupts the last good checkpoint; a leftover temporary directory is
  ignored by :meth:`Checkpoints.steps` and cleaned up by the next *writer*. A save that
  fails in-process (a full disk: ``OSError``) removes what it wrote of its step itself.
* **Verified**: after orbax commits a step, :data:`RECORD_FILE` is written into it
  (atomically): the sha256 of the saved arrays (:func:`content_digest`), the size and
  sha256 of every file orbax wrote, and the caller's ``meta`` (the trainer stores the
  resolved config). A step without that record is an unfinished save and never counts as
  good. :meth:`Checkpoints.restore` checks the files, then recomputes the digest over the
  restored arrays; a damaged newest checkpoint (flipped bytes, truncated or missing
  files, garbled metadata) falls back to the newest one that verifies, with a one-line
  warning.
* **Read-only readers** (``read_only=True``: eval, render) read step directories with a
  plain orbax checkpointer and create, clean up or delete nothing.
* **No pickle, structure-checked**: :meth:`Checkpoints.restore` restores *against* a
  template built by ``init`` (via ``jax.eval_shape``): a missing/extra leaf, a different
  shape or dtype raises :class:`CheckpointError` instead of loading something else.
* **PRNG keys** are stored as raw ``uint32`` key data and re-wrapped on restore.

Steps are numbered by *updates done*, so the step restored is where a resumed run starts.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import stat
import sys
from typing import TYPE_CHECKING, Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

if TYPE_CHECKING:
    from etils import epath


def _orbax():
    """``orbax.checkpoint``, imported on first use: importing it costs a third of a second,
    which a command that never touches a checkpoint (or has not yet) should not pay."""
    import orbax.checkpoint as ocp

    return ocp


class CheckpointError(RuntimeError):
    """A checkpoint is missing or does not match the state structure of the run."""


class CheckpointCorrupt(CheckpointError):
    """A checkpoint's files are damaged or incomplete (``reason`` says how)."""

    def __init__(self, step: int, directory: str, reason: str):
        super().__init__(f"checkpoint {step} in {directory} is damaged: {reason}")
        self.step, self.reason = step, reason


class CheckpointSaveError(OSError):
    """A checkpoint of a run could not be written (a full disk, another I/O error); nothing of
    it was kept. ``str()`` is the whole one-line message (:func:`save_failed`)."""

    line = ""

    def __str__(self) -> str:
        return self.line or super().__str__()


def save_failed(exc: OSError, ckpts: "Checkpoints", step: int) -> CheckpointSaveError:
    """The :class:`CheckpointSaveError` of a run whose save of ``step`` failed with ``exc``:
    what failed, the run directory, the newest checkpoint that verifies (the one a resume
    starts from) and what to do."""
    run_dir = os.path.dirname(ckpts.directory)
    reason = exc.strerror or _first_line(exc)
    try:
        kept = ckpts.verified_step()
    except Exception:  # noqa: BLE001 -- the message still names the run and the command
        kept = None
    err = CheckpointSaveError(exc.errno, reason, run_dir)
    held = f"the newest good checkpoint is update {kept}" if kept is not None else "no checkpoint had been saved yet"
    todo = "free some space" if exc.errno == errno.ENOSPC else "fix that"
    err.line = (f"I/O error: {reason} while saving checkpoint {step} of run {run_dir} (nothing of it was kept; {held}); "
                f"{todo}, then continue with: jaxrl train --resume {run_dir}")
    return err


#: Written into each step directory after orbax commits it: digest, leaf count, meta.
RECORD_FILE = "jaxrl_checkpoint.json"
ITEM = "default"  # orbax's item directory of a single-item manager


class Restored(NamedTuple):
    """A verified restore: the step, the state and the step's record (``meta`` inside)."""

    step: int
    state: Any
    record: dict


def _is_key(x) -> bool:
    return hasattr(x, "dtype") and jnp.issubdtype(x.dtype, jax.dtypes.prng_key)


def to_storable(state: Any) -> Any:
    """``state`` with every typed PRNG key replaced by its raw ``uint32`` key data."""
    return jax.tree_util.tree_map(lambda x: jax.random.key_data(x) if _is_key(x) else x, state)


def from_storable(stored: Any, template: Any) -> Any:
    """Inverse of :func:`to_storable`: re-wrap key data where ``template`` holds keys."""

    def back(data, like):
        if _is_key(like):
            # An array knows its impl; a ShapeDtypeStruct (eval_shape template) only its dtype.
            impl = jax.random.key_impl(like) if isinstance(like, jax.Array) else like.dtype._impl
            return jax.random.wrap_key_data(data, impl=impl)
        return data

    return jax.tree_util.tree_map(back, stored, template)


def abstract_state(template: Any) -> Any:
    """``ShapeDtypeStruct`` tree of the storable form of ``template`` (arrays or shapes)."""
    return jax.eval_shape(to_storable, template)


def content_digest(stored: Any) -> tuple[str, int]:
    """``(sha256 hex, leaf count)`` of a storable tree's arrays.

    Leaves are taken in the order of their path names (as in the structure check), each
    contributing its name, dtype, shape and raw bytes, so the digest of a tree restored
    from disk equals that of the tree that was saved exactly when every byte came back.
    """
    table = {}
    for path, leaf in jax.tree_util.tree_leaves_with_path(stored):
        table[".".join(_key_name(k) for k in path)] = leaf
    h = hashlib.sha256()
    for name in sorted(table):
        a = np.ascontiguousarray(np.asarray(table[name]))
        h.update(f"{name}|{a.dtype.str}|{a.shape}\n".encode())
        h.update(a.view(np.uint8).reshape(-1).data if a.size else b"")
    return h.hexdigest(), len(table)


def _warn(message: str) -> None:
    print(f"jaxrl: warning: {message}", file=sys.stderr)


class Checkpoints:
    """The checkpoints of one run directory (``<run_dir>/checkpoints/<step>``).

    Args:
      directory: where the step directories live (created by a writer if missing).
      keep: how many of the most recent checkpoints a writer keeps (older ones are deleted).
      meta: JSON-able data stored in every checkpoint's record (e.g. the resolved config).
      read_only: a reader: never creates, cleans up or deletes anything; cannot save.
      warn: called with one line when restore falls back past a damaged checkpoint.
      run_id: the run's identity (:func:`jaxrl.run.rundir.run_id`): a writer stores it in each
        record, a reader refuses a record that names another (a step copied in from elsewhere).
        Without one, a reader refuses every step when the records name more than one run.
    """

    def __init__(
        self, directory: str | os.PathLike, keep: int = 3, meta: dict | None = None, read_only: bool = False,
        warn: Callable[[str], None] = _warn, run_id: str | None = None,
    ):
        self.directory = os.path.abspath(os.fspath(directory))
        self.meta, self.read_only, self._warn, self.run_id = meta, read_only, warn, run_id
        self._keep, self._manager = int(keep), None  # orbax's manager: made at the first write
        self._run_ids: set | None = None  # the run ids the steps' records name (readers without run_id)

    def _writing(self, what: str):
        """The orbax manager of a writer, made (and orbax imported) on first use."""
        if self.read_only:
            raise CheckpointError(f"{self.directory} is opened read-only; cannot {what}")
        if self._manager is None:
            from jaxrl.run import rundir

            rundir.refuse_link(self.directory)  # orbax would write through it
            self._manager = self._writer(self._keep)
        return self._manager

    def _writer(self, keep: int):
        # Multi-process runs: each process's manager is process-local (no orbax barriers);
        # the trainer gathers the state and only process 0 saves (and cleans up), while
        # every process reads the same files (see jaxrl.run.trainer.save_checkpoint).
        ocp = _orbax()
        pid, multi = jax.process_index(), jax.process_count() > 1
        if multi:
            os.makedirs(self.directory, exist_ok=True)
        options = ocp.CheckpointManagerOptions(
            max_to_keep=None,  # pruned by save() once the new step's record is written
            create=not multi,
            enable_async_checkpointing=False,  # the host loop waits anyway; simpler failures
            cleanup_tmp_directories=pid == 0,  # remove leftovers of an interrupted save
            lightweight_initialize=True,  # never parse step metadata up front (it may be damaged)
            multiprocessing_options=ocp.options.MultiprocessingOptions(primary_host=pid, active_processes={pid})
            if multi
            else ocp.options.MultiprocessingOptions(),
        )
        return ocp.CheckpointManager(self.directory, options=options, item_handlers=ocp.StandardCheckpointHandler())

    # ----------------------------------------------------------------------------- writing

    def save(self, step: int, state: Any) -> str:
        """Write ``state`` as checkpoint ``step`` (updates done), then its verified record;
        returns its directory. An existing step of that number is replaced.

        A save that fails (a full disk, any I/O error, a read-back mismatch, an interrupt)
        leaves nothing of ``step`` behind: its step directory (or orbax's temporary one) is
        removed, so the previous checkpoint stays the newest. I/O failures come back as an
        ``OSError`` whose ``errno`` is the cause's (``ENOSPC`` also when orbax or tensorstore
        wrapped it in their own types); orbax's own logging stays silent (one line, not its
        logged tracebacks)."""
        if self.read_only:
            raise CheckpointError(f"{self.directory} is opened read-only; cannot save")
        step = int(step)
        stored = jax.device_get(to_storable(state))
        with _quiet_orbax():
            self._writing("save")  # (a linked directory is refused here, before anything is written)
        good = False  # the step's record is written: from then on the step is kept
        orphans = _OrphanedWrites()
        try:
            with _quiet_orbax(), orphans:  # held until orbax is done, its worker threads included
                self._write_step(step, stored)
                good = True
                self._prune(step)
        except BaseException as exc:
            orphans.keep_quiet()  # the failed save's writes still in flight end later, into a closed loop
            if not good:
                self._discard_unfinished(step)
            io = _os_error(exc)
            if io is not None and io is not exc:
                raise OSError(io.errno, io.strerror or _first_line(io), self._step_dir(step)) from None
            raise
        return self._step_dir(step)

    def _write_step(self, step: int, stored: Any) -> None:
        """Orbax's save of ``stored``, read back, then the record that makes it good."""
        manager = self._writing("save")
        if os.path.isdir(self._step_dir(step)):
            manager.reload()
            manager.delete(step)
        try:
            manager.save(step, args=_orbax().args.StandardSave(stored), force=True)
            manager.wait_until_finished()
        except Exception as exc:  # orbax / tensorstore wrap I/O failures in their own types
            if _os_error(exc) is not None:
                raise
            raise CheckpointError(f"saving checkpoint {step} in {self.directory} failed: {_first_line(exc)}") from exc
        digest, leaves = content_digest(stored)
        self._read_back(step, digest)
        files = _file_table(self._step_dir(step))
        record = {"format": 1, "step": step, "sha256": digest, "leaves": leaves, "files": files, "meta": self.meta}
        if self.run_id is not None:
            record["run_id"] = self.run_id
        from jaxrl.run import rundir

        rundir.write_text(os.path.join(self._step_dir(step), RECORD_FILE), json.dumps(record, indent=1) + "\n")

    def _discard_unfinished(self, step: int) -> None:
        """Remove what a failed save of ``step`` left (the step directory without its record,
        orbax's temporary directory); best effort, never raising: the save's own error is
        the one to report."""
        import shutil

        if os.path.islink(self.directory):
            return  # never delete through a link (refused before any write anyway)
        try:
            names = os.listdir(self.directory)
        except OSError:
            return
        prefix = f"{step}.orbax-checkpoint-tmp"
        for name in names:
            path = os.path.join(self.directory, name)
            if (name == str(step) or name.startswith(prefix)) and not os.path.islink(path) and os.path.isdir(path):
                shutil.rmtree(path, ignore_errors=True)
        if self._manager is not None:
            try:
                with _quiet_orbax():
                    self._manager.reload()
            except Exception:  # noqa: BLE001 -- the next writer lists the directory afresh
                pass

    def _prune(self, newest: int) -> None:
        """Delete all but the ``keep`` newest steps, once ``newest`` is good: orbax's own
        ``max_to_keep`` deleted them as soon as its data was committed, so a save that then
        failed (a full disk writing the record, a read-back mismatch) could leave no good
        checkpoint at all with ``keep: 1``."""
        if self._keep <= 0:
            return
        old = [s for s in self.steps() if s <= newest][: -self._keep]
        try:
            if old:
                self._manager.reload()
                for s in old:
                    self._manager.delete(s)
        except Exception as exc:  # noqa: BLE001 -- the new checkpoint is good; the run goes on
            self._warn(f"checkpoint {newest} saved, but older ones in {self.directory} could not be deleted: "
                       f"{_first_line(exc)}")

    def _read_back(self, step: int, digest: str) -> None:
        """Read the step just written and compare its digest: only a checkpoint that reads
        back gets the record that makes it good."""
        try:
            back = content_digest(_read_item(self._item_dir(step), None, local=True))[0]
        except Exception as exc:
            raise CheckpointError(f"checkpoint {step} in {self.directory} was written but cannot be read back: "
                                  f"{_first_line(exc)}") from None
        if back != digest:
            raise CheckpointError(f"checkpoint {step} in {self.directory} reads back different arrays than were saved")

    def discard_after(self, step: int) -> list[int]:
        """Delete every checkpoint newer than ``step`` (damaged ones a resume skipped, which
        it is about to redo); returns their steps."""
        manager = self._writing("delete")
        newer = [s for s in self.steps() if s > step]
        if newer:
            manager.reload()
            for s in newer:
                manager.delete(s)
        return newer

    # ----------------------------------------------------------------------------- reading

    def _step_dir(self, step: int) -> str:
        return os.path.join(self.directory, str(int(step)))

    def steps(self) -> list[int]:
        """The committed checkpoint steps, ascending (orbax's ``*.orbax-checkpoint-tmp*``
        directories of unfinished saves are not steps; unverified steps are listed)."""
        try:
            names = os.listdir(self.directory)
        except FileNotFoundError:
            return []
        return sorted(int(n) for n in names if n.isdigit() and os.path.isdir(os.path.join(self.directory, n)))

    def latest_step(self) -> int | None:
        """The newest committed step, or ``None`` (not necessarily verified)."""
        steps = self.steps()
        return steps[-1] if steps else None

    def record(self, step: int) -> dict:
        """The record of ``step``; :class:`CheckpointCorrupt` if it is missing or unreadable."""
        path = os.path.join(self._step_dir(step), RECORD_FILE)
        try:
            record = json.loads(_read_small(path))
        except FileNotFoundError:
            raise CheckpointCorrupt(step, self.directory, f"no {RECORD_FILE} (an unfinished save)") from None
        except (OSError, ValueError, RecursionError) as exc:  # RecursionError: absurdly deep JSON
            raise CheckpointCorrupt(step, self.directory, f"unreadable {RECORD_FILE}: {_first_line(exc)}") from None
        problem = _record_problem(record, step)
        if problem:
            raise CheckpointCorrupt(step, self.directory, f"{RECORD_FILE} {problem}")
        own = self.run_id
        if own is not None and record.get("run_id", own) != own:
            raise CheckpointCorrupt(step, self.directory, "it was written by another run (copied or linked in)")
        if own is None and "run_id" in record and len(ids := self._recorded_run_ids()) > 1:
            raise CheckpointCorrupt(
                step, self.directory, f"the checkpoints here were written by {len(ids)} different runs and neither "
                ".lock nor config.yaml says which is this run's (put back the run's .lock)")
        return record

    def _recorded_run_ids(self) -> set:
        """The run ids the records of every step name (read once): without an identity of its
        own, a reader refuses a directory whose steps disagree (a step copied in from another run)."""
        if self._run_ids is None:
            ids = set()
            for step in self.steps():
                try:
                    record = json.loads(_read_small(os.path.join(self._step_dir(step), RECORD_FILE)))
                except (OSError, ValueError, RecursionError):
                    continue  # damaged: record() says so for that step
                if isinstance(record, dict) and isinstance(record.get("run_id"), str):
                    ids.add(record["run_id"])
            self._run_ids = ids
        return self._run_ids

    def restore(self, template: Any, step: int | None = None) -> Any:
        """The state saved at ``step`` (default: the newest that verifies), with ``template``'s
        structure; see :meth:`restore_verified`."""
        return self.restore_verified(template, step).state

    def restore_verified(self, template: Any, step: int | None = None) -> Restored:
        """Restore and verify ``step``, or (``step=None``) the newest checkpoint that verifies.

        ``template`` is a state (or ``jax.eval_shape`` of ``init``) of the run being
        resumed. Raises :class:`CheckpointError` if there is no checkpoint or the saved tree
        does not match the template leaf for leaf (path, shape, dtype), and
        :class:`CheckpointCorrupt` if the named ``step`` (or, by default, every step) is
        damaged. Falling back past damaged steps calls ``warn`` with one line.
        """
        if step is not None:
            if int(step) not in self.steps():
                raise CheckpointError(f"no checkpoint for step {int(step)} in {self.directory}")
            return self._restore_one(int(step), template)
        damaged = []
        for candidate in reversed(self.steps()):
            try:
                restored = self._restore_one(candidate, template)
            except CheckpointCorrupt as exc:
                damaged.append(exc)
                continue
            self.report_fallback(damaged, candidate)
            return restored
        if damaged:
            raise CheckpointError(
                f"no intact checkpoint in {self.directory}: " + "; ".join(f"{e.step}: {e.reason}" for e in damaged)
            )
        raise CheckpointError(f"no checkpoint in {self.directory}")

    def report_fallback(self, damaged: list, used: int) -> None:
        """Say, in one line through ``warn``, that ``used`` was restored past the
        :class:`CheckpointCorrupt` steps ``damaged`` (nothing when there are none)."""
        if damaged:
            self._warn(_fallback_line(damaged, self.directory, used))

    def verified_step(self) -> int | None:
        """The newest step whose arrays match their recorded digest (restored from the
        saved metadata, no template needed), or ``None``."""
        for candidate in reversed(self.steps()):
            try:
                record = self.record(candidate)
                self._check_files(candidate, record)
                stored = _read_item(self._item_dir(candidate), None)
            except Exception:  # damaged or unreadable: not good
                continue
            if content_digest(stored)[0] == record["sha256"]:
                return candidate
        return None

    def _item_dir(self, step: int) -> epath.Path:
        from etils import epath

        return epath.Path(self._step_dir(step)) / ITEM

    def _check_files(self, step: int, record: dict) -> None:
        """Every file orbax wrote for ``step`` is there with its recorded size and sha256
        (checked before orbax reads anything, so damage is named instead of failing deep
        inside an asynchronous read)."""
        files = record.get("files")
        if not isinstance(files, dict) or not files:
            raise CheckpointCorrupt(step, self.directory, f"{RECORD_FILE} lists no files")
        root = self._step_dir(step)
        if os.path.islink(root):
            raise CheckpointCorrupt(step, self.directory, "the step directory is a symbolic link (not written by this run)")
        for name, (size, digest) in sorted(files.items()):
            path = os.path.join(root, name)
            try:
                st = os.lstat(path)
            except OSError:
                raise CheckpointCorrupt(step, self.directory, f"file {name} is missing") from None
            if not stat.S_ISREG(st.st_mode):  # a link or a device would be read instead of the data
                raise CheckpointCorrupt(step, self.directory, f"file {name} is not a regular file")
            actual = st.st_size
            if actual != size:
                raise CheckpointCorrupt(step, self.directory, f"file {name} has {actual} bytes, {size} were written")
            if _file_sha256(path) != digest:
                raise CheckpointCorrupt(step, self.directory, f"file {name} changed on disk (sha256 mismatch)")

    def _restore_one(self, step: int, template: Any) -> Restored:
        record = self.record(step)
        self._check_files(step, record)
        abstract = abstract_state(template)
        self._check_metadata(step, abstract)
        try:  # the metadata matched, so a failure to read is damage, not another run's state
            stored = _read_item(self._item_dir(step), abstract)
        except Exception as exc:
            raise CheckpointCorrupt(step, self.directory, f"unreadable arrays: {_first_line(exc)}") from None
        _check_same(stored, abstract, step, self.directory)
        if content_digest(stored)[0] != record["sha256"]:
            raise CheckpointCorrupt(step, self.directory, "content checksum mismatch (the arrays changed on disk)")
        return Restored(step, from_storable(stored, template), record)

    def _check_metadata(self, step: int, abstract: Any) -> None:
        """Compare the saved tree's metadata with ``abstract`` before reading any array."""
        ocp = _orbax()
        try:
            saved = ocp.StandardCheckpointHandler().metadata(self._item_dir(step))
        except Exception as exc:  # a missing or garbled metadata file
            raise CheckpointCorrupt(step, self.directory, f"unreadable metadata: {_first_line(exc)}") from None
        saved = _leaf_table(getattr(saved, "tree", saved))
        wanted = _leaf_table(abstract)
        where = f"checkpoint {step} in {self.directory} does not match this run's state"
        for path in sorted(set(saved) | set(wanted)):
            if path not in saved:
                raise CheckpointError(f"{where}: leaf {path} is missing from the checkpoint")
            if path not in wanted:
                raise CheckpointError(f"{where}: the checkpoint has an extra leaf {path}")
            if saved[path] != wanted[path]:
                (s_shape, s_dtype), (w_shape, w_dtype) = saved[path], wanted[path]
                raise CheckpointError(
                    f"{where}: leaf {path} is {s_dtype}{list(s_shape)}, expected {w_dtype}{list(w_shape)}"
                )

    def close(self) -> None:
        if self._manager is not None:
            manager, self._manager = self._manager, None
            with _quiet_orbax():  # a failed save's leftovers are not logged with tracebacks here either
                manager.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _read_item(path: epath.Path, abstract: Any, local: bool = False) -> Any:
    """The arrays of one orbax item directory, read with a plain (read-only) checkpointer.
    ``local``: this process alone reads (no barrier with the others: the read-back after a
    save, which only process 0 of a multi-process run makes)."""
    ocp = _orbax()
    args = ocp.args.StandardRestore(abstract) if abstract is not None else ocp.args.StandardRestore()
    options = {}
    if local and jax.process_count() > 1:
        pid = jax.process_index()
        options["multiprocessing_options"] = ocp.options.MultiprocessingOptions(primary_host=pid, active_processes={pid})
    with ocp.Checkpointer(ocp.StandardCheckpointHandler(), **options) as checkpointer:
        return checkpointer.restore(path, args=args)


_SHA256_HEX = frozenset("0123456789abcdef")


def _record_problem(record: Any, step: int) -> str | None:
    """What is wrong with a checkpoint record's shape (None when nothing): the fields read
    later are checked here, so a crafted record is one line, never a traceback, and names no
    file outside its step directory."""
    if not isinstance(record, dict):
        return "is not a JSON object"
    digest = record.get("sha256")
    if not isinstance(digest, str) or len(digest) != 64 or not set(digest) <= _SHA256_HEX:
        return "holds no sha256"
    if "step" in record and (type(record["step"]) is not int or record["step"] != step):
        return f"names step {short_value(record['step'])}, not {step} (copied from elsewhere?)"
    if record.get("meta") is not None and not isinstance(record["meta"], dict):
        return "has a meta field that is not a mapping"
    files = record.get("files")
    if not isinstance(files, dict) or not files:
        return "lists no files"
    for name, entry in files.items():
        parts = name.replace("\\", "/").split("/")
        if not name or os.path.isabs(name) or any(p in ("", ".", "..") for p in parts):
            return f"names a file outside its step directory: {short_value(name)}"
        if not (
            isinstance(entry, list) and len(entry) == 2 and type(entry[0]) is int and entry[0] >= 0
            and isinstance(entry[1], str) and len(entry[1]) == 64
        ):
            return f"has a malformed entry for file {short_value(name)}"
    return None


def short_value(value: Any, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


class _quiet_orbax:
    """Context manager: orbax's and absl's loggers print nothing below CRITICAL inside it.
    Orbax logs every failed write (with its traceback) from each of its worker threads
    before raising; the caller reports the raised error in one line instead."""

    NAMES = ("absl", "orbax", "orbax.checkpoint", "etils")

    def __enter__(self):
        import logging

        self._levels = {name: logging.getLogger(name).level for name in self.NAMES}
        for name in self.NAMES:
            logging.getLogger(name).setLevel(logging.CRITICAL)
        return self

    def __exit__(self, *exc):
        import logging

        for name, level in self._levels.items():
            logging.getLogger(name).setLevel(level)


def _closed_loop_noise(unraisable) -> bool:
    """An orphaned tensorstore write completing after orbax closed its event loop: tensorstore
    calls ``loop.call_soon_threadsafe`` from its own thread, which raises ``RuntimeError('Event
    loop is closed')`` into ``sys.unraisablehook`` (no object; a traceback on stderr per write)."""
    exc = unraisable.exc_value
    return isinstance(exc, RuntimeError) and str(exc) == "Event loop is closed" and unraisable.object is None


class _OrphanedWrites:
    """Context manager: inside it (and, after :meth:`keep_quiet`, to the end of the process)
    ``sys.unraisablehook`` drops :func:`_closed_loop_noise`; everything else goes to the hook
    that was there. When a save fails (a full disk), orbax abandons its other pending writes;
    each one that completes later printed a traceback of its own (dozens to hundreds of lines
    around the run's one line, depending on timing)."""

    def __init__(self):
        self._previous, self._hook, self._kept = None, None, False

    def __enter__(self):
        previous = self._previous = sys.unraisablehook

        def hook(unraisable):
            if not _closed_loop_noise(unraisable):
                previous(unraisable)

        self._hook = sys.unraisablehook = hook
        return self

    def keep_quiet(self) -> None:
        self._kept = True

    def __exit__(self, *exc):
        if exc[0] is None and not self._kept and sys.unraisablehook is self._hook:
            sys.unraisablehook = self._previous


def _read_small(path: str, limit: int = 1 << 24) -> bytes:
    """At most ``limit`` bytes of the regular file ``path``: never through a symbolic link,
    never blocking on a FIFO (``OSError`` for either)."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(f"{os.path.basename(path)} is not a regular file")
        return f.read(limit)


def _file_sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _file_table(step_dir: str) -> dict:
    """``{relative path: [size, sha256]}`` of every file orbax wrote into ``step_dir``."""
    table = {}
    for root, _, names in os.walk(step_dir):
        for name in names:
            path = os.path.join(root, name)
            rel = os.path.relpath(path, step_dir)
            if rel != RECORD_FILE:
                table[rel] = [os.path.getsize(path), _file_sha256(path)]
    return table


def _os_error(exc: BaseException) -> OSError | None:
    """The I/O failure behind ``exc``: ``exc`` itself or an ``OSError`` in its chain of causes,
    else an ``ENOSPC`` ``OSError`` when its text says the disk is full (tensorstore's
    ``DATA_LOSS: ... No space left on device``, safetensors' ``StorageFull``); None otherwise."""
    seen, link = set(), exc
    while link is not None and id(link) not in seen:
        if isinstance(link, OSError):
            return link
        seen.add(id(link))
        link = link.__cause__ if link.__cause__ is not None or link.__suppress_context__ else link.__context__
    text = str(exc)
    if "No space left" in text or "StorageFull" in text or "ENOSPC" in text:
        return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    return None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    line = text.splitlines()[0] if text else type(exc).__name__
    return line if len(line) <= 200 else line[:197] + "..."


def _fallback_line(damaged: list, directory: str, used: int) -> str:
    which = "; ".join(f"checkpoint {e.step}: {e.reason}" for e in damaged)
    return f"damaged checkpoint(s) in {directory} skipped ({which}); restored checkpoint {used} instead"


def _key_name(key) -> str:
    for attr in ("name", "key", "idx"):
        if hasattr(key, attr):
            return str(getattr(key, attr))
    return str(key)


def _leaf_table(tree) -> dict[str, tuple[tuple, str]]:
    """``{"a.b.0": (shape, dtype name)}`` for every array leaf; paths name fields, dict
    keys and sequence indices alike (orbax's metadata turns dataclass fields into keys)."""
    table = {}
    for path, leaf in jax.tree_util.tree_leaves_with_path(tree):
        if hasattr(leaf, "shape") and hasattr(leaf, "dtype"):
            table[".".join(_key_name(k) for k in path)] = (tuple(leaf.shape), str(jnp.dtype(leaf.dtype)))
    return table


def _check_same(stored, abstract, step, directory) -> None:
    """Shapes and dtypes equal leaf for leaf (orbax would cast dtypes silently)."""
    got = jax.tree_util.tree_leaves_with_path(stored)
    want = jax.tree_util.tree_leaves_with_path(abstract)
    if len(got) != len(want):
        raise CheckpointError(f"checkpoint {step} in {directory}: {len(got)} leaves, expected {len(want)}")
    for (path, a), (_, b) in zip(got, want):
        if a.shape != b.shape or a.dtype != b.dtype:
            raise CheckpointError(
                f"checkpoint {step} in {directory}: leaf {jax.tree_util.keystr(path)} is "
                f"{a.dtype}{list(a.shape)}, expected {b.dtype}{list(b.shape)}"
            )
