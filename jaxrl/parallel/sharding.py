"""One training program over every device: a data-parallel ``Mesh`` and the state's layout.

The same jitted chunk runs on one CPU, all GPUs of a node, or every device of many hosts
(:func:`jaxrl.parallel.distributed.initialize`). No ``pmap``: the program is written for the
*global* batch and ``jax.jit`` with ``NamedSharding`` s partitions it (GSPMD). The env
batch is split along the mesh axis :data:`DATA`; params, optimiser state, keys and counters
are replicated; gradients and metrics are global means, equal to the single-device run up
to float32 summation order. A second axis :data:`MODEL` (run key ``mesh``) splits the
parameters a program declares, and their optimiser state (:func:`param_specs`: tensor
parallel or FSDP). Random numbers do not depend on the layout. Layout table and costs:
``docs/scale_out.md``; collectives an algorithm controls itself: :mod:`jaxrl.algos.common.batching`.

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

from jaxrl.algos.common.batching import DATA, MODEL, batch_spec  # noqa: F401  (re-exported: the mesh's axes)
from jaxrl.algos.contract import ModelParams


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


def make_mesh(devices: str | int | Sequence[jax.Device] = "all", model: int = 1) -> Mesh:
    """A mesh over ``devices`` (``"all"``, a count, or a list).

    ``model=1``: 1-D, axis :data:`DATA`. ``model > 1``: 2-D ``(DATA, MODEL)`` of shape
    ``(n / model, model)``, neighbouring devices (one host's, when ``model`` divides its
    count) forming a model group. Axis types are ``Auto``: GSPMD propagates shardings
    through unannotated code, so algorithms written for one device run unchanged. Raises
    ``ValueError`` when ``model`` does not divide the number of devices.
    """
    devs = devices if isinstance(devices, (list, tuple)) else resolve_devices(devices)
    if not devs:
        raise ValueError("a mesh needs at least one device")
    if model == 1:
        return Mesh(np.asarray(devs, dtype=object), (DATA,), axis_types=(AxisType.Auto,))
    if isinstance(model, bool) or not isinstance(model, (int, np.integer)) or model < 1 or len(devs) % model:
        raise ValueError(f"mesh.model={model} does not divide the {len(devs)} device(s) of the run")
    grid = np.asarray(devs, dtype=object).reshape(len(devs) // model, model)
    return Mesh(grid, (DATA, MODEL), axis_types=(AxisType.Auto, AxisType.Auto))


def mesh_size(mesh: Mesh) -> int:
    """Number of devices along the data axis."""
    return int(mesh.shape[DATA])


def model_size(mesh: Mesh) -> int:
    """Number of devices along the model axis (``1`` for a data-only mesh)."""
    return int(dict(mesh.shape).get(MODEL, 1))


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
    axes = f"mesh axis '{DATA}'" if model_size(mesh) == 1 else f"mesh '{DATA}' x '{MODEL}' = {mesh_size(mesh)} x {model_size(mesh)}"
    line = (
        f"devices: {_describe(devs)} ({axes}), "
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
      mesh: the data mesh, or the ``(data, model)`` mesh.
      state: pytree of ``NamedSharding`` with the train state's structure (batched leaves
        ``P("data")``, parameters split by the model axis's rules, everything else
        replicated ``P()``).
      replicated: ``NamedSharding(mesh, P())``, used for keys, metrics and counters.
    """

    mesh: Mesh
    state: Any
    replicated: NamedSharding
    mode: str = "envs"  # "envs": each seed's batch is split; "seeds": whole seeds per device

    def batch(self, axis: int = 0) -> NamedSharding:
        """Sharding of a leaf split along ``axis``."""
        return NamedSharding(self.mesh, batch_spec(axis))


def make_layout(mesh: Mesh, state_shapes: Any, batch_axes: Any, model_specs: Any = None) -> Layout:
    """The :class:`Layout` of a train state (``batch_axes`` as the program declares them).

    Every batched axis is checked for divisibility by the mesh size. ``model_specs``
    (:func:`model_specs` / :func:`param_specs`, ``None``: none) adds the model axis: each
    spec is aligned with the *last* axes of its leaf, so specs of one seed's state apply to
    the ``[S, ...]`` state too.
    """

    def pick(path, leaf, axis, model=None):
        if axis >= 0:
            size = int(np.shape(leaf)[axis])
            check_divisible(size, mesh, "num_envs", f"state leaf {jax.tree_util.keystr(path)}: ")
        return NamedSharding(mesh, _merge(batch_spec(axis), model, len(np.shape(leaf)), path))

    extra = () if model_specs is None else (model_specs,)
    shardings = jax.tree_util.tree_map_with_path(pick, state_shapes, batch_axes, *extra)
    return Layout(mesh=mesh, state=shardings, replicated=NamedSharding(mesh, PartitionSpec()))


def _merge(spec: PartitionSpec, model: PartitionSpec | None, ndim: int, path=()) -> PartitionSpec:
    """``spec`` (leading axes) with ``model``'s entries on the leaf's last axes."""
    if model is None or not any(p is not None for p in model):
        return spec
    parts = list(spec) + [None] * (ndim - len(spec))
    lead = ndim - len(model)
    for i, name in enumerate(model):
        if name is None:
            continue
        if parts[lead + i] is not None:
            raise ValueError(f"state leaf {jax.tree_util.keystr(path)}: axis {lead + i} is split over both {parts[lead + i]!r} and {name!r}")
        parts[lead + i] = name
    return PartitionSpec(*parts)


# ----------------------------------------------------------------------------- model axis

#: How a ``model`` axis splits parameters: ``tp`` (tensor parallel, by name) or ``fsdp``.
STRATEGIES = ("tp", "fsdp")

# Tensor parallelism (Megatron): module name -> {leaf name: axis, counted from the end,
# split over MODEL}. Column-parallel layers split their output (kernel [in, out], its bias,
# LoRA's b [r, out]); row-parallel ones their input (kernel, LoRA's a [in, r]), so one
# all-reduce per block joins the partial sums. The vocabulary of the head too.
_COLUMN = {"kernel": -1, "bias": -1, "b": -1}
_ROW = {"kernel": -2, "a": -2}
TP_RULES: dict[str, dict[str, int]] = {
    **{m: _COLUMN for m in ("q_proj", "k_proj", "v_proj", "gate_proj", "up_proj")},
    **{m: _ROW for m in ("o_proj", "down_proj")},
    "lm_head": {"kernel": -1},
}
_VOCAB_LEAVES = {"embed_tokens": -2}  # [V, D]: a leaf of its own, split on the vocabulary


def _names(path) -> tuple[str, ...]:
    """The path's dict keys, attribute names and indices, as strings."""
    tu = jax.tree_util
    out = []
    for k in path:
        if isinstance(k, (tu.DictKey, tu.FlattenedIndexKey)):
            out.append(str(k.key))
        elif isinstance(k, tu.GetAttrKey):
            out.append(k.name)
        elif isinstance(k, tu.SequenceKey):
            out.append(str(k.idx))
    return tuple(out)


def _tp_axis(names: tuple[str, ...]) -> tuple[int | None, bool]:
    """``(axis from the end, is the vocabulary)`` tensor parallelism splits, by path suffix."""
    if names and names[-1] in _VOCAB_LEAVES:
        return _VOCAB_LEAVES[names[-1]], True
    if len(names) >= 2 and names[-2] in TP_RULES:
        return TP_RULES[names[-2]].get(names[-1]), names[-2] == "lm_head"
    return None, False


def _fsdp_axis(shape: tuple[int, ...], m: int) -> int | None:
    """The largest axis divisible by ``m`` (the first of equals), or ``None``."""
    fits = [(-size, i) for i, size in enumerate(shape) if size >= m and size % m == 0]
    return min(fits)[1] if fits else None


def check_heads(num_heads: int, num_kv_heads: int, model: int) -> None:
    """Tensor parallelism gives each device whole heads: ``ValueError`` (one line) when
    ``model`` does not divide ``num_heads`` or ``num_kv_heads``."""
    for name, n in (("num_heads", num_heads), ("num_kv_heads", num_kv_heads)):
        if n and n % model:
            ok = [d for d in range(1, model) if num_heads % d == 0 and num_kv_heads % d == 0]
            raise ValueError(
                f"mesh.model={model}: tensor parallelism splits attention heads over the model axis, but the "
                f"model's {name}={n} is not divisible by {model}; use mesh.model: {max(ok)} or mesh.strategy: fsdp"
            )


def param_specs(
    tree: Any, mesh: Mesh, strategy: str = "tp", mask: Any = None, heads: tuple[int, int] | None = None
) -> Any:
    """Per leaf of a parameter pytree (or a state holding one), where the model axis splits it.

    Args:
      tree: arrays or ``jax.ShapeDtypeStruct`` s: HF-named LM parameters (kernels
        ``[..., in, out]``, layers stacked in front), LoRA adapters, optimiser state that
        mirrors them (rules match a path's *suffix*), or any state.
      mesh: a mesh with axis :data:`MODEL` (without one every spec is ``P()``).
      strategy: ``"tp"``: the :data:`TP_RULES` by name (q/k/v/gate/up on their output,
        o/down on their input, embeddings and head on the vocabulary when it divides,
        norms and unnamed leaves replicated); ``"fsdp"``: every leaf on its largest axis
        divisible by the model axis (replicated if none), gathered by GSPMD for compute.
      mask: pytree of bool with ``tree``'s structure: only ``True`` leaves are split
        (``None``: all).
      heads: ``(num_heads, num_kv_heads)`` checked by :func:`check_heads` under ``tp``.

    Returns a pytree of ``PartitionSpec`` as long as each leaf's rank (``P()``: replicated).
    Raises ``ValueError`` (one line, naming ``mesh.model``) for an unknown strategy, heads
    that do not divide, or a named dimension (MLP width, heads x head_dim) that does not.
    """
    if strategy not in STRATEGIES:
        raise ValueError(f"mesh.strategy: expected one of {', '.join(STRATEGIES)}, got {strategy!r}")
    m = model_size(mesh)
    if m > 1 and strategy == "tp" and heads is not None:
        check_heads(*heads, m)
    if mask is None:
        mask = jax.tree_util.tree_map(lambda _: True, tree)

    def spec(path, leaf, split):
        shape = tuple(np.shape(leaf))
        if m == 1 or not split or not shape:
            return PartitionSpec()
        if strategy == "fsdp":
            axis = _fsdp_axis(shape, m)
        else:
            axis, vocab = _tp_axis(_names(path))
            if axis is None or len(shape) < -axis:
                return PartitionSpec()
            axis = len(shape) + axis
            if shape[axis] % m:
                if vocab:  # an odd vocabulary stays whole (replicated), it only costs memory
                    return PartitionSpec()
                raise ValueError(
                    f"mesh.model={m}: tensor parallelism splits {jax.tree_util.keystr(path)} of shape {shape} "
                    f"on axis {axis} ({shape[axis]}), which is not divisible by {m}; use mesh.strategy: fsdp"
                )
        if axis is None:
            return PartitionSpec()
        return PartitionSpec(*[MODEL if i == axis else None for i in range(len(shape))])

    return jax.tree_util.tree_map_with_path(spec, tree, mask)


def model_specs(mesh: Mesh, state_shapes: Any, strategy: str, declared: ModelParams | None) -> Any:
    """:func:`param_specs` of the leaves a program declares (:class:`ModelParams`), for
    :func:`make_layout` / :func:`seed_layout`; ``None`` on a mesh without a model axis.

    ``state_shapes`` is one seed's abstract state. Raises ``ValueError`` (one line, naming
    ``mesh.model``) when the program declares no parameters or the rules do not divide.
    """
    m = model_size(mesh)
    if m == 1:
        return None
    if declared is None:
        raise ValueError(
            f"mesh.model={m}: this algorithm declares no parameters a model axis could split "
            "(Program.lm.model_params); use mesh.model: 1"
        )
    heads = (declared.num_heads, declared.num_kv_heads) if declared.num_heads or declared.num_kv_heads else None
    return param_specs(state_shapes, mesh, strategy, declared.leaves(state_shapes), heads)


# ----------------------------------------------------------------------------- programs


def seed_layout(mesh: Mesh, state_shapes: Any, model_specs: Any = None) -> Layout:
    """Whole seeds per device: every leaf of a ``[S, ...]`` state split along axis 0.

    Seeds never interact, so the chunk needs no collective at all (the only cross-device
    traffic is gathering the metrics at the end of a chunk). ``S`` must divide over the
    mesh's data axis. ``model_specs`` as in :func:`make_layout` (each seed's parameters
    split over the model axis).
    """

    check_divisible(int(np.shape(jax.tree_util.tree_leaves(state_shapes)[0])[0]), mesh, "train.seeds", unit="seeds")

    def pick(path, leaf, model=None):
        return NamedSharding(mesh, _merge(batch_spec(0), model, len(np.shape(leaf)), path))

    extra = () if model_specs is None else (model_specs,)
    shardings = jax.tree_util.tree_map_with_path(pick, state_shapes, *extra)
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
