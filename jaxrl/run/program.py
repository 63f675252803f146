"""The training program: the pure ``train`` for Jupyter, the jitted chunk the command line
calls, and where its state lives on the devices.

* :func:`make_train` returns a pure ``train(key) -> (state, metrics)``: ``init`` then
  ``num_updates`` updates in one ``lax.scan``; ``jax.jit(jax.vmap(train))(keys)`` trains
  many seeds in one program.
* :func:`make_chunk` is what ``jaxrl train`` calls again and again: ``K`` updates in a
  ``lax.scan`` over the ``[S, ...]`` seed states, the state donated. Chunking never
  changes the math: the chunk runs ``update`` exactly ``n_active <= K`` times
  (``lax.cond`` skips the rest), so any ``K`` and any resume point give the same states
  bit for bit, and ``n_active`` is an argument, so the chunk compiles once per run.
* :func:`prepare_chunk` compiles that chunk before anything is written or allocated, and
  refuses what only its trace can show: a ``train.stop_at`` metric the records never hold,
  and buffers (the rollout, the minibatches) that cannot fit the memory available.
* :func:`make_layout`: the mesh and the shardings of the train state.
"""

from __future__ import annotations

import functools
from typing import Any, Callable

import jax
import jax.numpy as jnp

from jaxrl.algos.common.train import COMPILER_OPTIONS, over_seeds, train
from jaxrl.parallel import sharding
from jaxrl.run import guards
from jaxrl.run.build import Built, build
from jaxrl.run.config import ConfigError, RunConfig

__all__ = ["chunk_args", "chunk_fn", "compile_chunk", "make_chunk", "make_layout", "make_train", "no_nan", "prepare_chunk",
           "trace_mesh"]


def make_train(cfg: RunConfig, num_updates: int | None = None) -> Callable[..., tuple[Any, dict]]:
    """A pure ``train(key, hyper=None) -> (final state, per-update metrics)`` for ``cfg``.

    One seed, the whole run (or ``num_updates``) in one scan; ``hyper`` is a dict of traced
    hyperparameters from ``build(cfg).program.hyperparams(...)`` (every algorithm's
    learning rate and clipping among them), so seeds x values sweep in one program:

    >>> train = make_train(load_config("configs/ppo_cartpole.yaml"))
    >>> state, metrics = jax.jit(jax.vmap(train))(jax.random.split(jax.random.PRNGKey(0), 8))

    ``jaxrl train`` compiles its chunks with :data:`jaxrl.algos.common.train.COMPILER_OPTIONS`
    and its ``init`` apart from them. ``train`` compiles ``init`` into the same program as the
    updates, so XLA may fuse them differently: its results equal ``jaxrl train``'s to float32
    rounding (about 1e-7 to 1e-6 after a few updates), not bit for bit. Bit for bit: jit
    ``init`` alone, then scan ``update`` (with the same ``compiler_options``), as
    :func:`jaxrl.run.conformance.check_algorithm` does.
    """
    built = build(cfg)
    n = built.derived.num_updates if num_updates is None else int(num_updates)
    if n <= 0:
        raise ValueError(f"num_updates: expected a positive integer, got {num_updates!r}")
    return functools.partial(train, built.program, n)


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
    ``update`` is traced once: its jaxpr is the taken branch of each step and gives the
    skipped branch (``i >= n_active``: state unchanged, zero metrics) its shapes (tracing
    the update is most of the chunk's trace time).
    """
    closed, (_, shapes) = jax.make_jaxpr(update, return_shape=True)(state)
    out_tree = jax.tree_util.tree_structure((state, shapes))

    def run(s):
        out = jax.core.eval_jaxpr(closed.jaxpr, closed.consts, *jax.tree_util.tree_leaves(s))
        return jax.tree_util.tree_unflatten(out_tree, out)

    def skip(s):
        return s, jax.tree_util.tree_map(lambda a: jnp.zeros(a.shape, a.dtype), shapes)

    def body(s, i):
        return jax.lax.cond(i < n_active, run, skip, s)

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
    the program's ``lm.model_params`` declares. Raises :class:`ConfigError` when ``devices`` is
    not available or a split does not divide.
    """
    try:
        mesh = sharding.make_mesh(cfg.devices, cfg.mesh.model)
        specs = sharding.model_specs(mesh, jax.eval_shape(built.program.init, _one_key(keys)), cfg.mesh.strategy, built.program.lm.model_params)
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
    one_seed = jax.eval_shape(program.init, _one_key(keys))
    axes = jax.tree_util.tree_map(lambda a: a + 1 if a >= 0 else -1, program.batch_axes(one_seed))  # seeds in front
    return sharding.make_layout(mesh, shapes, axes, specs)


def _one_key(keys: jax.Array) -> jax.ShapeDtypeStruct:
    """One seed's key, abstract (indexing ``keys`` would compile a program)."""
    return jax.ShapeDtypeStruct(keys.shape[1:], keys.dtype)


def trace_mesh(layout: sharding.Layout | None):
    """The mesh the chunk is traced under: the env-split layout's (``constrain_batch``), else none."""
    return layout.mesh if layout is not None and layout.mode == "envs" else None


def chunk_args(built: Built, keys: jax.Array, layout: sharding.Layout) -> tuple[Any, jax.ShapeDtypeStruct]:
    """The chunk's abstract arguments on ``layout``: the ``[S, ...]`` seed states and ``n_active``."""
    shapes = jax.eval_shape(jax.vmap(built.program.init), keys)
    state = jax.tree_util.tree_map(lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s), shapes, layout.state)
    return state, jax.ShapeDtypeStruct((), jnp.int32, sharding=layout.replicated)


def compile_chunk(chunk: Callable, state: Any, n_active: jax.ShapeDtypeStruct, layout: sharding.Layout):
    """``chunk`` (:func:`make_chunk`) compiled for its abstract arguments (:func:`chunk_args`),
    traced under :func:`trace_mesh`; nothing is allocated."""
    with sharding.use_mesh(trace_mesh(layout)):
        return chunk.lower(state, n_active).compile()


def prepare_chunk(cfg: RunConfig, built: Built, keys: jax.Array, layout: sharding.Layout) -> Callable:
    """The run's chunk (:func:`make_chunk`), compiled now for the abstract state: the first
    call reuses the executable. Refuses a ``train.stop_at`` metric the records never hold
    and a program whose compiled buffers need more memory than the devices have
    (:func:`jaxrl.run.guards.check_compiled_memory`); nothing is allocated before that."""
    chunk = make_chunk(built.program.update, built.derived.updates_per_chunk, layout)
    state, n_active = chunk_args(built, keys, layout)
    guards.check_stop_metric(cfg.train.stop_at, chunk, state, n_active, trace_mesh(layout))
    compiled = compile_chunk(chunk, state, n_active, layout)
    guards.check_compiled_memory(cfg, compiled, sharding.mesh_size(layout.mesh))
    return chunk
