"""Batch helpers used inside an algorithm's ``update``, aware of a data mesh.

Algorithms call these unconditionally: without an active mesh with axis :data:`DATA`
(``jax.set_mesh``; the trainer traces an env-split chunk under one) they are the plain
operations. With one they pin batches to the data axis (:func:`constrain_batch`), gather a
rollout to every device with one collective (:func:`replicate`), cut each device's slice of
every minibatch locally (:func:`minibatches`) and average a loss's gradient and metrics with
one all-reduce (:func:`batch_mean`). Values never depend on the mesh, only placement does.
Why they are hand-placed rather than left to GSPMD: ``docs/performance.md``.
"""

from __future__ import annotations

from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree
from jax.sharding import NamedSharding, PartitionSpec

#: Name of the data-parallel mesh axis.
DATA = "data"
#: Name of the model-parallel mesh axis (parameters split over it; ``jaxrl.parallel.sharding``).
MODEL = "model"


def batch_spec(axis: int) -> PartitionSpec:
    """``PartitionSpec`` splitting ``axis`` over :data:`DATA` (``-1``: replicated)."""
    return PartitionSpec() if axis < 0 else PartitionSpec(*([None] * axis), DATA)


def _active_data_mesh():
    """The mesh current while tracing if it has the :data:`DATA` axis, else ``None``."""
    mesh = jax.sharding.get_abstract_mesh()
    return None if mesh.empty or DATA not in mesh.axis_names else mesh


def constrain_batch(tree: Any, axis: int = 0) -> Any:
    """Pin ``axis`` of every leaf of ``tree`` to the data axis, inside a program.

    A no-op unless a mesh with axis :data:`DATA` is active (``jax.set_mesh`` /
    :func:`use_mesh`), so algorithms can call it unconditionally on batches they create
    inside ``update`` (GRPO's prompt groups): values are unchanged, only placement.
    Leaves too small or not divisible by the mesh size are left alone.
    """
    mesh = _active_data_mesh()
    if mesh is None:
        return tree
    n = mesh.shape[DATA]

    def pin(x):
        if jnp.ndim(x) <= axis or jnp.shape(x)[axis] % n:
            return x
        return jax.lax.with_sharding_constraint(x, batch_spec(axis))

    return jax.tree_util.tree_map(pin, tree)


def _to_f32_bits(x: jax.Array) -> jax.Array:
    """``x`` as float32 without losing a value: a bitcast for 32-bit types, else a cast
    (exact for bool and integers of up to 16 bits)."""
    if x.dtype == jnp.float32:
        return x
    if x.dtype.itemsize == 4:
        return jax.lax.bitcast_convert_type(x, jnp.float32)
    if x.dtype.itemsize > 2:
        raise TypeError(f"replicate: cannot pack {x.dtype} exactly into float32")
    return x.astype(jnp.float32)


def _from_f32_bits(x: jax.Array, dtype) -> jax.Array:
    if dtype == jnp.float32:
        return x
    if jnp.dtype(dtype).itemsize == 4:
        return jax.lax.bitcast_convert_type(x, dtype)
    return x.astype(dtype)


def replicate(tree: Any, ndim: int) -> Any:
    """Every leaf of ``tree`` whole on every device, gathered with *one* all-gather.

    The leaves share their leading ``ndim`` axes (e.g. ``[T, B]`` of a rollout, ``B`` split
    over the mesh); they are packed side by side into one float32 ``[*lead, F]`` array (bit
    for bit), made replicated, and unpacked. A no-op without an active data mesh. One
    collective instead of one per leaf: XLA's CPU collectives cost a rendezvous each.
    """
    mesh = _active_data_mesh()
    leaves, treedef = jax.tree_util.tree_flatten(tree)
    if mesh is None or not leaves:
        return tree
    lead = leaves[0].shape[:ndim]
    packed = jnp.concatenate([_to_f32_bits(x).reshape(lead + (-1,)) for x in leaves], axis=-1)
    packed = jax.lax.with_sharding_constraint(packed, NamedSharding(mesh, PartitionSpec()))
    out, start = [], 0
    for x in leaves:
        width = int(np.prod(x.shape[ndim:], dtype=np.int64))
        out.append(_from_f32_bits(packed[..., start:start + width].reshape(x.shape), x.dtype))
        start += width
    return jax.tree_util.tree_unflatten(treedef, out)


def psum_packed(tree: Any) -> Any:
    """``jax.lax.psum`` of every leaf of ``tree`` over the data axis (inside a ``shard_map``
    over it), the leaves of each dtype laid end to end into one vector: one all-reduce per
    dtype instead of a tuple all-reduce with a rendezvous per leaf (the same sums). Bools
    are summed as int32 and cast back (exact where at most one device holds True)."""
    leaves, treedef = jax.tree_util.tree_flatten(tree)
    by_dtype: dict[Any, list[int]] = {}
    for i, x in enumerate(leaves):
        by_dtype.setdefault(jnp.dtype(jnp.int32) if x.dtype == jnp.bool_ else x.dtype, []).append(i)
    out = list(leaves)
    for dtype, idx in by_dtype.items():
        summed = jax.lax.psum(jnp.concatenate([jnp.ravel(leaves[i]).astype(dtype) for i in idx]), DATA)
        start = 0
        for i in idx:
            out[i] = summed[start:start + leaves[i].size].reshape(leaves[i].shape).astype(leaves[i].dtype)
            start += leaves[i].size
    return jax.tree_util.tree_unflatten(treedef, out)


def minibatches(tree: Any, perm: jax.Array, num: int) -> Any:
    """``x[perm].reshape(num, -1, ...)`` for every leaf: ``num`` shuffled minibatches.

    With an active data mesh (and the minibatch size divisible by it) the result's axis 1
    is split over the devices and each device gathers *only its own slice* of every
    minibatch from its whole copy of ``tree`` (``shard_map``; ``tree`` should already be
    replicated, e.g. by :func:`replicate`). The values are those of the plain gather.
    """
    size = perm.shape[0] // num
    mesh = _active_data_mesh()
    if mesh is None or size % mesh.shape[DATA]:
        return jax.tree_util.tree_map(lambda x: jnp.reshape(x[perm], (num, size) + x.shape[1:]), tree)
    n = mesh.shape[DATA]

    def local(t, p):
        idx = p.reshape(num, n, size // n)[:, jax.lax.axis_index(DATA)]  # this device's slice
        return jax.tree_util.tree_map(lambda x: x[idx], t)

    return jax.shard_map(local, mesh=mesh, in_specs=(PartitionSpec(), PartitionSpec()), out_specs=batch_spec(1))(
        tree, perm
    )


def batch_mean(fn: Callable, replicated: Any, batch: Any) -> Any:
    """``fn(replicated, batch)``, data-parallel, for an ``fn`` whose every output is a mean
    over the leading axis of ``batch`` (a loss's gradient and its metrics).

    Without an active data mesh, with a :data:`MODEL` axis of more than one device (the
    parameters are split over it: a ``shard_map`` here would gather them whole on every
    device), or when a leaf's leading axis does not divide over it, this is
    ``fn(replicated, batch)`` (GSPMD partitions it if a mesh is active). With one, each
    device applies ``fn`` to its slice of ``batch`` (``shard_map``) and a *single* all-reduce
    of every output, flattened into one float32 vector, averages the slices' results: equal
    slices, so the mean of their means is the mean (up to float32 summation order).

    Why not leave it to GSPMD: it all-reduces each parameter's gradient and each metric as
    one element of a tuple all-reduce, and XLA's CPU collectives pay a rendezvous per
    element, so one vector is much cheaper than many pieces (measured with
    ``bench/collectives.py`` and ``bench/scaling.py``: ``docs/performance.md``, "Collectives").
    """
    mesh = _active_data_mesh()
    if mesh is None or mesh.shape.get(MODEL, 1) > 1:
        return fn(replicated, batch)
    n = mesh.shape[DATA]
    if any(jnp.ndim(x) == 0 or jnp.shape(x)[0] % n for x in jax.tree_util.tree_leaves(batch)):
        return fn(replicated, batch)
    shapes = jax.eval_shape(fn, replicated, batch)
    _, unravel = ravel_pytree(jax.tree_util.tree_map(lambda s: jnp.zeros(s.shape, jnp.float32), shapes))

    def local(r, b):
        # Mark the replicated inputs as varying over the axis, so that a gradient taken
        # inside ``fn`` stays per device (shard_map would otherwise psum each leaf's
        # gradient on its own) and the one psum below does all the communication.
        r = jax.tree_util.tree_map(lambda x: jax.lax.pcast(x, DATA, to="varying"), r)
        flat, _ = ravel_pytree(jax.tree_util.tree_map(lambda x: jnp.asarray(x, jnp.float32), fn(r, b)))
        return jax.lax.psum(flat, DATA) / n

    flat = jax.shard_map(local, mesh=mesh, in_specs=(PartitionSpec(), PartitionSpec(DATA)), out_specs=PartitionSpec())(
        replicated, batch
    )
    return jax.tree_util.tree_map(lambda x, s: x.astype(s.dtype), unravel(flat), shapes)
