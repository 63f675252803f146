"""Guards a run passes before it writes anything, and the Ctrl-C that stops it cleanly.

* :func:`check_seed`: a PRNG seed is an integer in ``[0, 2**63 - 1]``.
* :func:`check_memory`: first a floor from the config's arithmetic alone (:func:`config_floor`:
  the hidden weights of an MLP, 12 d^2 per transformer block, times Adam's three copies),
  so a huge size is refused in a second without tracing ``init`` layer by layer; then an
  estimate from the *abstract* train state
  (``jax.eval_shape`` of ``init``: nothing is allocated) times the seeds, plus the env
  states of the evaluation episodes where the algorithm's config has ``eval_episodes``,
  against the memory available (the devices' ``bytes_limit``, or host memory on CPU via
  ``psutil`` when installed, else ``/proc/meminfo`` or ``os.sysconf``). It refuses only
  sizes that cannot fit: the state is a floor of what a run needs, not a prediction.
* :func:`check_compiled_memory`: the compiled chunk's own buffers (XLA's buffer assignment:
  state, rollout, minibatches), checked before the state is allocated.
* :class:`InterruptFlag`: the host loop's Ctrl-C handling. The first SIGINT sets a flag
  that the loop reads after each chunk (the state it then holds is consistent and can be
  checkpointed); a second SIGINT raises ``KeyboardInterrupt`` at once.
  :class:`Interrupted` carries where the run stopped to the command line.
"""

from __future__ import annotations

import math
import os
import signal
import sys
from typing import Any

import jax
import jax.numpy as jnp

from jaxrl.run.config import ConfigError
from jaxrl.run.yamlio import short

MAX_SEED = 2**63 - 1


class ResourceError(RuntimeError):
    """The run cannot fit the machine (memory); the message is one line."""


def check_seed(seed, name: str, limit: int = MAX_SEED) -> None:
    """Raise :class:`ConfigError` unless ``seed`` is an int in ``[0, limit]``."""
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= limit:
        raise ConfigError(f"{name}: must be an integer in [0, {limit}], got {short(seed)}")


# ------------------------------------------------------------------------------------------
# Memory
# ------------------------------------------------------------------------------------------


def tree_bytes(tree: Any) -> int:
    """Bytes of the array leaves of an (abstract) pytree; PRNG keys count as their data."""
    total = 0
    for leaf in jax.tree_util.tree_leaves(tree):
        dtype = leaf.dtype
        if jnp.issubdtype(dtype, jax.dtypes.prng_key):
            shape = jax.eval_shape(jax.random.key_data, leaf)
            total += math.prod(shape.shape) * shape.dtype.itemsize
        else:
            total += math.prod(leaf.shape) * jnp.dtype(dtype).itemsize
    return total


def host_memory() -> int:
    """Bytes of host memory available to a new allocation."""
    try:
        import psutil

        return int(psutil.virtual_memory().available)
    except ImportError:
        pass
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def available_memory(devices) -> tuple[int, str]:
    """``(bytes, where)``: the memory the run's devices can hold."""
    local = jax.local_devices()
    if local[0].platform == "cpu":
        return host_memory(), "host memory"
    n = len(local) if devices == "all" else max(1, min(int(devices), len(local)))
    try:
        limit = (local[0].memory_stats() or {}).get("bytes_limit")
    except Exception:  # a backend without memory statistics
        limit = None
    if not limit:
        return host_memory(), "host memory"
    return int(limit) * n, f"memory of {n} {local[0].platform} device{'s' if n > 1 else ''}"


def _gib(n: int) -> str:
    return f"{n / 2**30:,.1f} GiB" if n >= 2**30 else f"{n / 2**20:,.1f} MiB" if n >= 2**20 else f"{n / 2**10:,.1f} KiB"


def _seeds(n: int) -> str:
    return f"{n:,} seed{'s' if n > 1 else ''}"


def not_enough_memory(need: str, have: int, where: str, lower: str, per: str = "available") -> ResourceError:
    """The one shape of every memory refusal: what needs how much (``need``), the memory
    ``have`` of ``where`` (``per``: "available", or "per device"), and what to ``lower``."""
    return ResourceError(f"not enough memory: {need}, more than the {_gib(have)} of {where} {per}; lower {lower}")


def config_floor(cfg, built=None) -> tuple[int, str, str] | None:
    """``(parameters, how, keys)``: a lower bound on the trained parameters of one seed,
    from the algorithm config's sizes alone (nothing traced), or ``None`` when it has none.

    Counted: the weights between consecutive ``hidden`` widths of one MLP (the algorithm's
    networks have at least one), and for a transformer policy (``model.d_model`` /
    ``model.n_layers``, GRPO on a token task) 12 d_model^2 per block (qkv 3, output 1, MLP
    4 + 4). Embeddings, heads, biases, second networks and target copies are left out, so
    the bound only refuses sizes that cannot fit.
    """
    a = cfg.algo_config
    best = None
    model = getattr(a, "model", None)
    policy = getattr(model, "policy", None)
    if policy in ("transformer", "auto") and isinstance(getattr(model, "n_layers", None), int):
        token = policy == "transformer"
        if policy == "auto" and built is not None:
            from jaxrl.core.tokens import TokenTask

            token = isinstance(built.envs.env, TokenTask)
        if token:
            d, n = model.d_model, model.n_layers
            best = (12 * d * d * n, f"{n:,} blocks x 12 x {d}^2", f"{cfg.algo}.model.n_layers / d_model")
    else:
        for owner, where in ((model, f"{cfg.algo}.model.hidden"), (a, f"{cfg.algo}.hidden")):
            hidden = getattr(owner, "hidden", None) if owner is not None and policy not in ("hf",) else None
            if isinstance(hidden, (tuple, list)) and len(hidden) > 1 and all(isinstance(h, int) for h in hidden):
                n = sum(x * y for x, y in zip(hidden, hidden[1:]))
                best = (n, f"the products of consecutive {where} widths", where)
                break
    return best


def check_config_floor(cfg, built=None, available: tuple[int, str] | None = None) -> None:
    """Raise :class:`ResourceError` when :func:`config_floor` alone (float32, with Adam's two
    moments, times the seeds) exceeds the memory available; in about a second whatever
    the sizes, since nothing is traced."""
    floor = config_floor(cfg, built)
    if floor is None:
        return
    params, how, keys = floor
    need = params * 4 * 3 * cfg.train.seeds
    have, where = available or available_memory(cfg.devices)
    if need <= have:
        return
    raise not_enough_memory(
        f"the {cfg.algo} network has at least {params:,} parameters ({how}, from the config), "
        f"at least {_gib(need)} as float32 with Adam's two moments for {_seeds(cfg.train.seeds)}",
        have, where, f"{keys} or train.seeds",
    )


def estimate_bytes(cfg, built) -> tuple[int, int]:
    """``(train state bytes, evaluation bytes)`` of ``cfg`` (all seeds), from shapes only."""
    key = jax.ShapeDtypeStruct((2,), jnp.uint32)
    per_seed = tree_bytes(jax.eval_shape(built.program.init, key))
    episodes = getattr(cfg.algo_config, "eval_episodes", None)
    eval_bytes = 0
    if isinstance(episodes, int) and episodes > 0:
        try:
            per_episode = tree_bytes(jax.eval_shape(built.envs.env.reset, key, built.envs.eval_params))
        except Exception:  # an env whose reset cannot be traced alone: no estimate
            per_episode = 0
        eval_bytes = per_episode * episodes * cfg.train.seeds
    return per_seed * cfg.train.seeds, eval_bytes


def check_memory(cfg, built, available: tuple[int, str] | None = None) -> None:
    """Raise :class:`ResourceError` when the train state (plus evaluation) of ``cfg`` cannot
    fit in the memory available (the config's arithmetic first: :func:`check_config_floor`)."""
    have, where = available or available_memory(cfg.devices)
    check_config_floor(cfg, built, (have, where))
    state, evaluation = estimate_bytes(cfg, built)
    declared = built.program.lm.model_params
    if declared is not None and declared.estimate is not None:  # a model's own estimate, per device
        from jaxrl.parallel.sharding import resolve_devices

        n_dev = len(resolve_devices(cfg.devices))
        model = cfg.mesh.model
        est = declared.estimate(max(1, n_dev // model), model, cfg.mesh.strategy)
        per_device = have // max(1, n_dev) if where != "host memory" else have
        if est.total * cfg.train.seeds > per_device:
            raise not_enough_memory(
                f"one update needs {_gib(est.total * cfg.train.seeds)} per device ({est.parts()}; {est.setup})",
                per_device, where, f"{cfg.algo}.num_prompts, use {cfg.algo}.micro_batches, LoRA, bfloat16 or mesh.model",
                per="per device",
            )
    if state + evaluation <= have:
        return
    parts = f"the train state of {_seeds(cfg.train.seeds)} needs {_gib(state)}"
    if evaluation:
        parts += f" and evaluation {_gib(evaluation)}"
    raise not_enough_memory(parts, have, where, f"train.seeds or the sizes in the {cfg.algo} section")


def compiled_bytes(compiled) -> tuple[int, int] | None:
    """``(arguments, the rest)`` one device of a compiled program holds, from XLA's buffer
    assignment: the rest is its temporaries and the outputs not written in place of an
    argument. ``None`` where the backend has no memory analysis."""
    try:
        stats = compiled.memory_analysis()
    except Exception:  # noqa: BLE001 -- a backend without memory analysis
        return None
    if stats is None:
        return None
    temps = int(stats.temp_size_in_bytes) + int(stats.output_size_in_bytes) - int(stats.alias_size_in_bytes)
    return int(stats.argument_size_in_bytes), temps


def check_compiled_memory(cfg, compiled, n_devices: int = 1, available: tuple[int, str] | None = None) -> None:
    """Raise :class:`ResourceError` when the compiled chunk's buffers on each of ``n_devices``
    (its arguments, the outputs not written in place of them, and its temporaries: the
    rollout, the minibatches) need more than the memory available. The train-state estimate
    of :func:`check_memory` cannot see the temporaries; XLA's buffer assignment can."""
    sizes = compiled_bytes(compiled)
    if sizes is None:  # a backend without memory analysis: the state estimate stands alone
        return
    state, temps = sizes
    need = (state + max(0, temps)) * max(1, n_devices)
    have, where = available or available_memory(cfg.devices)
    if need <= have:
        return
    raise not_enough_memory(
        f"one chunk of {_seeds(cfg.train.seeds)} needs {_gib(need)} (train state {_gib(state * max(1, n_devices))}, "
        f"rollout and update buffers {_gib(max(0, temps) * max(1, n_devices))}, from the compiled program)",
        have, where, f"train.seeds or the batch sizes in the {cfg.algo} section",
    )


def check_stop_metric(stop, chunk, state, n, mesh=None) -> None:
    """Refuse a ``train.stop_at.metric`` that the update records will never hold, before the
    first chunk runs (``jax.eval_shape`` of the chunk: its trace is the one the first call
    reuses, nothing runs). Records hold every metric of the update, ``<metric>/min`` and
    ``/max`` over seeds, and the index keys."""
    if stop is None:
        return
    from jaxrl.parallel import sharding
    from jaxrl.run.loggers import INDEX_KEYS

    with sharding.use_mesh(mesh):
        metrics = jax.eval_shape(chunk, state, n)[1]
    names = set(metrics) | {f"{m}/{s}" for m in metrics for s in ("min", "max")}
    if stop.metric not in names and stop.metric not in INDEX_KEYS:
        raise ConfigError(
            f"train.stop_at.metric: no metric {short(stop.metric)} in the update records; they have: {', '.join(sorted(metrics))}"
        )


# ------------------------------------------------------------------------------------------
# Ctrl-C
# ------------------------------------------------------------------------------------------


class Interrupted(KeyboardInterrupt):
    """The run stopped on Ctrl-C at ``update`` (holding ``state``, if still alive).

    The trainer fills in ``run_dir`` and ``saved`` (a checkpoint at ``update`` exists) and
    drops ``state``; ``str()`` is the one line the command line prints.
    """

    def __init__(self, update: int, state: Any = None):
        super().__init__(update)
        self.update, self.state = update, state
        self.run_dir: str | None = None
        self.saved = False
        self.last_checkpoint: int | None = None

    def __str__(self) -> str:
        if self.saved:
            what = "checkpoint saved"
        elif self.last_checkpoint is not None:
            what = f"no checkpoint saved (the last one is at update {self.last_checkpoint})"
        else:
            what = "no checkpoint saved"
        resume = f"; continue with: jaxrl train --resume {self.run_dir}" if self.run_dir else ""
        return f"interrupted at update {self.update}; {what}{resume}"


def alive(state: Any) -> bool:
    """No array of ``state`` was deleted (donated into a chunk that never returned)."""
    return not any(isinstance(x, jax.Array) and x.is_deleted() for x in jax.tree_util.tree_leaves(state))


class InterruptFlag:
    """Context manager: SIGINT or SIGTERM (a scheduler's or ``kill``'s stop) sets
    :attr:`requested`, so the run saves at the chunk boundary; a second one raises at once.

    Only installed in the main thread of a single-process run (a signal handler cannot be
    set elsewhere, and processes of a multi-process run must stop together).
    """

    def __init__(self, out=None):
        self.requested = False
        self._out = out  # None: the sys.stderr of the moment
        self._installed, self._previous = False, {}

    def _handle(self, signum, frame) -> None:
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True
        out = sys.stderr if self._out is None else self._out
        what = "interrupt" if signum == signal.SIGINT else f"{signal.Signals(signum).name} received"
        print(f"jaxrl: {what}: stopping after the current chunk (Ctrl-C again to stop at once)", file=out)

    def __enter__(self) -> "InterruptFlag":
        try:
            if jax.process_count() == 1:
                for signum in (signal.SIGINT, signal.SIGTERM):
                    self._previous[signum] = signal.signal(signum, self._handle)
                self._installed = True
        except ValueError:  # not the main thread
            pass
        return self

    def __exit__(self, *exc) -> None:
        if self._installed:
            for signum, previous in self._previous.items():
                if previous is None:
                    previous = signal.default_int_handler if signum == signal.SIGINT else signal.SIG_DFL
                signal.signal(signum, previous)
            self._previous, self._installed = {}, False
