"""Orbax checkpoints of the whole train state: atomic, periodic, keep-the-last-few.

A checkpoint is the complete pytree that ``Algorithm.init`` builds (params, optimiser
state, normaliser statistics, env states, observations, RNG keys, counters), saved with
orbax's standard (array) handler, so restoring it continues a run bit for bit.

* **Atomic**: orbax writes each step into a temporary directory and renames it into place
  only when every file is written (``commit_success``), so an interrupted save never
  replaces or corrupts the last good checkpoint; a leftover temporary directory is
  ignored by :meth:`Checkpoints.latest_step` and cleaned up by the next manager.
* **No pickle, structure-checked**: :meth:`Checkpoints.restore` restores *against* a
  template built by ``init`` (via ``jax.eval_shape``): a missing/extra leaf, a different
  shape or dtype raises :class:`CheckpointError` instead of loading something else.
* **PRNG keys**: typed key arrays (``jax.random.key``) are stored as their raw ``uint32``
  key data and re-wrapped with the template's key implementation on restore.

Steps are numbered by *updates done*, so ``latest_step()`` is where a resumed run starts.
"""

from __future__ import annotations

import os
from typing import Any

import jax
import jax.numpy as jnp
import orbax.checkpoint as ocp


class CheckpointError(RuntimeError):
    """A checkpoint is missing or does not match the state structure of the run."""


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


class Checkpoints:
    """The checkpoints of one run directory (``<run_dir>/checkpoints/<step>``).

    Args:
      directory: where the step directories live (created if missing).
      keep: how many of the most recent checkpoints to keep (older ones are deleted).
    """

    def __init__(self, directory: str | os.PathLike, keep: int = 3):
        self.directory = os.path.abspath(os.fspath(directory))
        # Multi-process runs: each process's manager is process-local (no orbax barriers);
        # the trainer gathers the state and only process 0 saves (and cleans up), while
        # every process reads the same files (see jaxrl.run.trainer.save_checkpoint).
        pid, multi = jax.process_index(), jax.process_count() > 1
        if multi:
            os.makedirs(self.directory, exist_ok=True)
        options = ocp.CheckpointManagerOptions(
            max_to_keep=int(keep),
            create=not multi,
            enable_async_checkpointing=False,  # the host loop waits anyway; simpler failures
            cleanup_tmp_directories=pid == 0,  # remove leftovers of an interrupted save
            multiprocessing_options=ocp.options.MultiprocessingOptions(primary_host=pid, active_processes={pid})
            if multi
            else ocp.options.MultiprocessingOptions(),
        )
        # The handler is named up front so that a fresh manager can read item metadata
        # (the structure check in restore) before anything is saved or restored.
        self._manager = ocp.CheckpointManager(
            self.directory, options=options, item_handlers=ocp.StandardCheckpointHandler()
        )

    def save(self, step: int, state: Any) -> str:
        """Write ``state`` as checkpoint ``step`` (updates done); returns its directory."""
        self._manager.save(int(step), args=ocp.args.StandardSave(to_storable(state)), force=True)
        self._manager.wait_until_finished()
        return os.path.join(self.directory, str(int(step)))

    def steps(self) -> list[int]:
        """The committed checkpoint steps, ascending."""
        self._manager.reload()
        return sorted(self._manager.all_steps())

    def latest_step(self) -> int | None:
        """The newest committed step, or ``None``."""
        steps = self.steps()
        return steps[-1] if steps else None

    def restore(self, template: Any, step: int | None = None) -> Any:
        """The state saved at ``step`` (default: latest), with ``template``'s structure.

        ``template`` is a state (or ``jax.eval_shape`` of ``init``) of the run being
        resumed. Raises :class:`CheckpointError` if there is no checkpoint or the saved
        tree does not match the template leaf for leaf (path, shape, dtype).
        """
        step = self.latest_step() if step is None else int(step)
        if step is None:
            raise CheckpointError(f"no checkpoint in {self.directory}")
        if step not in self.steps():
            raise CheckpointError(f"no checkpoint for step {step} in {self.directory}")
        abstract = abstract_state(template)
        self._check_metadata(step, abstract)
        try:
            stored = self._manager.restore(step, args=ocp.args.StandardRestore(abstract))
        except (ValueError, KeyError, TypeError) as exc:
            first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise CheckpointError(
                f"checkpoint {step} in {self.directory} does not match this run's state: {first}"
            ) from None
        _check_same(stored, abstract, step, self.directory)
        return from_storable(stored, template)

    def _check_metadata(self, step: int, abstract: Any) -> None:
        """Compare the saved tree's metadata with ``abstract`` before reading any array."""
        saved = self._manager.item_metadata(step)
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
        self._manager.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


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
