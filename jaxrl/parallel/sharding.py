"""One training program over every device: a data-parallel ``Mesh`` and the state's layout.

The same jitted chunk runs on one CPU, all GPUs of a node, or every device of many hosts
(:func:`jaxrl.parallel.distributed.initialize`). No ``pmap``: the program is written for the
*global* batch and ``jax.jit`` with ``NamedSharding`` s partitions it (GSPMD). The env
batch is split along the mesh axis :data:`DATA`; params, optimiser state, keys and counters
are replicated; gradients and metrics are global means, equal to the single-device run up
to float32 summation order. Random numbers do not depend on the layout (partitionable
threefry draws each shard's slice in place). Collectives an algorithm controls itself:
:mod:`jaxrl.algos.common.batching`. Layout table and costs: ``docs/scale_out.md``.

Which leaves carry the env batch is a pytree of axis indices over the train state (``-1`` =
replicated) that the algorithm declares (:attr:`jaxrl.algos.contract.Program.batch_axes`).
Typical use (the trainer does this)::

    mesh = make_mesh(cfg.devices)                      # axis "data"
    check_divisible(program.batch.size, mesh)
    axes = program.batch_axes(jax.eval_shape(program.init, key))
    layout = make_layout(mesh, jax.eval_shape(program.init, key), axes)
    state = init_sharded(program.init, layout)(key)       # born sharded, never on one device
    chunk = jit_chunk(chunk_fn, layout)                # state -> (state, metrics)
    with use_mesh(mesh):                               # pins batches born inside update
        state, metrics = chunk(state)

Checkpoints go through :func:`fetch` (host arrays, any layout) and :func:`put`.
"""

from __future__ import annotations

import contextlib
import dataclasses
from typing import Any, Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec

from jaxrl.algos.common.batching import DATA, batch_spec  # noqa: F401  (re-exported: the mesh's axis)


# ----------------------------------------------------------------------------- devices


def resolve_devices(devices: str | int = "all") -> list[jax.Device]:
    """The devices a run uses: ``"all"`` or the first ``N`` (an equal share per process).

    With several processes every process must own part of the mesh, so ``N`` must be a
    multiple of ``jax.process_count()`` and each process contributes its first
    ``N / process_count`` local devices.
    """
    every = jax.devices()
    if isinstance(devices, str):
        if devices != "all":
            raise ValueError(f"devices must be 'all' or a positive integer, got {devices!r}")
        return list(every)
    if isinstance(devices, bool) or not isinstance(devices, (int, np.integer)):
        raise ValueError(f"devices must be 'all' or a positive integer, got {devices!r}")
    n, n_proc = int(devices), jax.process_count()
    if not 1 <= n <= len(every):
        raise ValueError(f"devices={n} but {len(every)} device(s) are visible: {_describe(every)}")
    if n % n_proc:
        raise ValueError(f"devices={n} must be a multiple of the number of processes ({n_proc})")
    per_process = n // n_proc
    chosen = []
    for p in range(n_proc):
        local = sorted((d for d in every if d.process_index == p), key=lambda d: d.id)
        if len(local) < per_process:
            raise ValueError(f"devices={n} needs {per_process} device(s) on process {p}, it has {len(local)}")
        chosen += local[:per_process]
    return chosen


def make_mesh(devices: str | int | Sequence[jax.Device] = "all") -> Mesh:
    """A 1-D mesh with axis :data:`DATA` over ``devices`` (``"all"``, a count, or a list).

    The axis type is ``Auto``: GSPMD propagates shardings through unannotated code, so
    algorithms written for one device run unchanged.
    """
    devs = devices if isinstance(devices, (list, tuple)) else resolve_devices(devices)
    if not devs:
        raise ValueError("a mesh needs at least one device")
    return Mesh(np.asarray(devs, dtype=object), (DATA,), axis_types=(AxisType.Auto,))


def mesh_size(mesh: Mesh) -> int:
    """Number of devices along the data axis."""
    return int(mesh.shape[DATA])


def check_divisible(batch: int, mesh: Mesh, what: str = "num_envs", where: str = "", unit: str = "envs") -> int:
    """``batch / n_devices``; raises ``ValueError`` naming ``what`` when it does not divide."""
    n = mesh_size(mesh)
    if batch % n:
        lower, upper = (batch // n) * n, (batch // n + 1) * n
        hint = f"{lower} or {upper}" if lower else f"{upper}"
        raise ValueError(
            f"{where}{what}={batch} is not divisible by the number of devices ({n}): "
            f"each device must hold the same number of {unit}; use e.g. {what}={hint}, "
            f"or fewer devices (devices: N)"
        )
    return batch // n


def _describe(devs: Sequence[jax.Device]) -> str:
    kinds = sorted({f"{d.platform}:{d.device_kind}" for d in devs})
    return f"{len(devs)} x {', '.join(kinds)}"


def summary(mesh: Mesh, num_envs: int | None = None, unit: str = "envs") -> str:
    """One start-up line: devices, processes, envs (or ``unit``, e.g. seeds) per device."""
    devs = list(mesh.devices.flat)
    line = (
        f"devices: {_describe(devs)} (mesh axis '{DATA}'), "
        f"processes: {jax.process_count()} (this is {jax.process_index()})"
    )
    if num_envs is not None:
        line += f", {unit} per device: {check_divisible(num_envs, mesh, unit=unit)} of {num_envs}"
    return line


# ----------------------------------------------------------------------------- layout


@dataclasses.dataclass(frozen=True)
class Layout:
    """Where every leaf of a train state lives.

    Attributes:
      mesh: the 1-D data mesh.
      state: pytree of ``NamedSharding`` with the train state's structure (batched leaves
        ``P("data")``, everything else replicated ``P()``).
      replicated: ``NamedSharding(mesh, P())``, used for keys, metrics and counters.
    """

    mesh: Mesh
    state: Any
    replicated: NamedSharding
    mode: str = "envs"  # "envs": each seed's batch is split; "seeds": whole seeds per device

    def batch(self, axis: int = 0) -> NamedSharding:
        """Sharding of a leaf split along ``axis``."""
        return NamedSharding(self.mesh, batch_spec(axis))


def make_layout(mesh: Mesh, state_shapes: Any, batch_axes: Any) -> Layout:
    """The :class:`Layout` of a train state (``batch_axes`` as the program declares them).

    Every batched axis is checked for divisibility by the mesh size.
    """

    def pick(path, leaf, axis):
        if axis >= 0:
            size = int(np.shape(leaf)[axis])
            check_divisible(size, mesh, "num_envs", f"state leaf {jax.tree_util.keystr(path)}: ")
        return NamedSharding(mesh, batch_spec(axis))

    shardings = jax.tree_util.tree_map_with_path(pick, state_shapes, batch_axes)
    return Layout(mesh=mesh, state=shardings, replicated=NamedSharding(mesh, PartitionSpec()))


# ----------------------------------------------------------------------------- programs


def seed_layout(mesh: Mesh, state_shapes: Any) -> Layout:
    """Whole seeds per device: every leaf of a ``[S, ...]`` state split along axis 0.

    Seeds never interact, so the chunk needs no collective at all (the only cross-device
    traffic is gathering the metrics at the end of a chunk). ``S`` must divide over the
    mesh.
    """

    check_divisible(int(np.shape(jax.tree_util.tree_leaves(state_shapes)[0])[0]), mesh, "train.seeds", unit="seeds")
    split = NamedSharding(mesh, batch_spec(0))
    shardings = jax.tree_util.tree_map(lambda _: split, state_shapes)
    return Layout(mesh=mesh, state=shardings, replicated=NamedSharding(mesh, PartitionSpec()), mode="seeds")


def init_sharded(init: Callable[[jax.Array], Any], layout: Layout) -> Callable[[jax.Array], Any]:
    """``init`` compiled to produce the state already in ``layout`` (no single-device copy).

    Every process calls it with the same key; each device computes its own shard.
    """
    return jax.jit(init, out_shardings=layout.state)


def jit_chunk(chunk: Callable[[Any], tuple[Any, Any]], layout: Layout, donate: bool = True):
    """``chunk(state) -> (state, metrics)`` jitted with the layout: state in and out in
    ``layout.state``, metrics replicated (readable on every process), the state's buffers
    donated."""
    return jax.jit(
        chunk,
        in_shardings=(layout.state,),
        out_shardings=(layout.state, layout.replicated),
        donate_argnums=(0,) if donate else (),
    )


def use_mesh(mesh: Mesh | None):
    """Context manager making ``mesh`` current while tracing (for
    :func:`jaxrl.algos.common.batching.constrain_batch`);
    ``None``: no mesh, a no-op context."""
    if mesh is None:
        return contextlib.nullcontext()
    return jax.set_mesh(mesh)


# Primitive names and lowered-program tokens that mean "talk to the host".
_HOST_PRIMITIVES = ("callback", "infeed", "outfeed", "print")
_HOST_HLO = ("callback", "infeed", "outfeed", "stablehlo.send", "stablehlo.recv", "host")


def host_traffic(jitted: Callable, *args) -> list[str]:
    """What in ``jitted(*args)``'s program would move data to or from the host.

    Walks the jaxpr (nested jaxprs included) for callback / infeed / outfeed / print
    primitives and scans the lowered StableHLO for host custom calls, send/recv and
    host memory spaces. Returns the offending names (empty: one on-device program).
    Lowers only; nothing is compiled or run.
    """
    from jax.extend.core import jaxprs_in_params

    prims: set[str] = set()

    def walk(jaxpr):
        for eqn in jaxpr.eqns:
            prims.add(eqn.primitive.name)
            for sub in jaxprs_in_params(eqn.params):
                walk(sub)

    walk(jax.make_jaxpr(jitted)(*args).jaxpr)
    found = sorted(f"primitive:{p}" for p in prims if any(h in p for h in _HOST_PRIMITIVES))
    text = jitted.lower(*args).as_text().lower()
    return found + sorted(f"hlo:{h}" for h in _HOST_HLO if h in text)


# ----------------------------------------------------------------------------- host <-> devices


def _is_key(x) -> bool:
    return isinstance(x, jax.Array) and jnp.issubdtype(x.dtype, jax.dtypes.prng_key)


def fetch(tree: Any) -> Any:
    """A host (numpy) copy of a sharded pytree, complete on *every* process.

    Leaves spread over several processes are all-gathered (a collective: every process
    must call this); typed PRNG keys come back as their raw ``uint32`` key data.
    """
    from jax.experimental import multihost_utils

    def get(x):
        if _is_key(x):
            x = jax.random.key_data(x)
        if isinstance(x, jax.Array) and not x.is_fully_addressable and not x.is_fully_replicated:
            return np.asarray(multihost_utils.process_allgather(x, tiled=True))
        if isinstance(x, jax.Array) and not x.is_fully_addressable:
            return np.asarray(x.addressable_data(0))
        return np.asarray(x)

    return jax.tree_util.tree_map(get, tree)


def local_copy(tree: Any) -> Any:
    """:func:`fetch`, then back onto this process's default device with typed keys re-wrapped.

    For work that every process (or only the primary) does on the *whole* state with a
    single-device program, e.g. the final evaluation. A collective, like :func:`fetch`.
    """
    host = fetch(tree)

    def back(h, ref):
        if _is_key(ref):
            return jax.random.wrap_key_data(jnp.asarray(h), impl=jax.random.key_impl(ref))
        return jnp.asarray(h)

    return jax.tree_util.tree_map(back, host, tree)


def put(host_tree: Any, like: Any, shardings: Any) -> Any:
    """Global arrays in ``shardings`` from a host copy holding the *full* values.

    Args:
      host_tree: numpy pytree (e.g. a restored checkpoint), the same on every process.
      like: abstract or concrete pytree of the target (dtypes; typed keys are re-wrapped).
      shardings: pytree of ``NamedSharding`` (``layout.state``).

    Each process materialises only the shards its own devices hold.
    """

    def place(host, ref, sharding):
        host = np.asarray(host)
        if jnp.issubdtype(ref.dtype, jax.dtypes.prng_key):
            impl = jax.random.key_impl(ref) if isinstance(ref, jax.Array) else None
            data = jax.make_array_from_callback(host.shape, sharding, lambda idx: host[idx])
            return jax.jit(lambda d: jax.random.wrap_key_data(d, impl=impl), out_shardings=sharding)(data)
        if tuple(host.shape) != tuple(ref.shape):
            raise ValueError(f"restored leaf has shape {host.shape}, the state expects {tuple(ref.shape)}")
        host = host.astype(ref.dtype, copy=False)
        return jax.make_array_from_callback(host.shape, sharding, lambda idx: host[idx])

    return jax.tree_util.tree_map(place, host_tree, like, shardings)
