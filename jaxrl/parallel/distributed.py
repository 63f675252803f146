"""Many hosts: wiring ``jax.distributed.initialize`` into the command line.

One process per host (or per GPU group) runs the *same* program; after initialisation
``jax.devices()`` lists every device of every process and :mod:`jaxrl.parallel.sharding` builds
one mesh over them. Where the settings come from, first match wins:

1. command-line flags ``--coordinator-address HOST:PORT --num-processes N --process-id I``;
2. environment variables ``JAXRL_COORDINATOR_ADDRESS``, ``JAXRL_NUM_PROCESSES``,
   ``JAXRL_PROCESS_ID`` (JAX's own ``JAX_COORDINATOR_ADDRESS`` is honoured too);
3. a cluster JAX detects by itself (SLURM, Open MPI, Kubernetes, Cloud TPU): nothing to set,
   ``srun jaxrl train ...`` just works.

Nothing set and no cluster detected means a single process: no initialisation at all.
On CPU, cross-process collectives go over gloo (set before the backend starts).

Only the primary process (:func:`is_primary`, process 0) writes logs, plots and
checkpoints; every process reads the same checkpoint on resume. See docs/scale_out.md.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Mapping

import jax

ENV_ADDRESS = "JAXRL_COORDINATOR_ADDRESS"
ENV_NUM_PROCESSES = "JAXRL_NUM_PROCESSES"
ENV_PROCESS_ID = "JAXRL_PROCESS_ID"


@dataclasses.dataclass(frozen=True)
class DistributedSpec:
    """How this process joins a multi-process run (all ``None``: let JAX detect a cluster).

    Attributes:
      coordinator_address: ``host:port`` of process 0's coordinator service.
      num_processes: total number of processes.
      process_id: this process's index in ``[0, num_processes)``.
    """

    coordinator_address: str | None = None
    num_processes: int | None = None
    process_id: int | None = None

    @property
    def explicit(self) -> bool:
        """Any field was given (flags or environment variables)."""
        return any(v is not None for v in dataclasses.astuple(self))


def _int_or_none(value, name: str) -> int | None:
    if value is None or value == "":
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be an integer, got {value!r}") from None


def resolve_spec(
    coordinator_address: str | None = None,
    num_processes: int | str | None = None,
    process_id: int | str | None = None,
    environ: Mapping[str, str] | None = None,
) -> DistributedSpec:
    """Merge flags (arguments) over environment variables and validate them.

    Raises ``ValueError`` naming the setting when a partial or impossible combination is
    given (an address without a process count, an id outside ``[0, N)``...).
    """
    env = os.environ if environ is None else environ
    address = coordinator_address or env.get(ENV_ADDRESS) or env.get("JAX_COORDINATOR_ADDRESS") or None
    n = _int_or_none(num_processes if num_processes is not None else env.get(ENV_NUM_PROCESSES), "num_processes")
    pid = _int_or_none(process_id if process_id is not None else env.get(ENV_PROCESS_ID), "process_id")
    spec = DistributedSpec(address, n, pid)
    if not spec.explicit:
        return spec
    missing = [name for name, v in (("coordinator_address", address), ("num_processes", n), ("process_id", pid)) if v is None]
    if missing:
        raise ValueError(
            f"multi-process run needs coordinator_address, num_processes and process_id; missing {missing} "
            f"(flags --coordinator-address/--num-processes/--process-id or env {ENV_ADDRESS}/"
            f"{ENV_NUM_PROCESSES}/{ENV_PROCESS_ID})"
        )
    if ":" not in address or not address.rsplit(":", 1)[1].isdigit():
        raise ValueError(f"coordinator_address must be host:port, got {address!r}")
    if n < 1:
        raise ValueError(f"num_processes must be >= 1, got {n}")
    if not 0 <= pid < n:
        raise ValueError(f"process_id must be in [0, {n}), got {pid}")
    return spec


def detected_cluster() -> str | None:
    """Name of the cluster environment JAX would auto-detect (``"SlurmCluster"``...), if any.

    A SLURM allocation with a single task counts as no cluster: there is nobody to join.
    """
    try:
        from jax._src import clusters  # JAX's own detectors; private, hence the guard
    except ImportError:  # pragma: no cover - layout change in a future jax
        return None
    for cls in clusters.ClusterEnv._cluster_types:
        try:
            if cls.opt_in_only_method or not cls.is_env_present():
                continue
            if cls.__name__ == "SlurmCluster" and int(os.environ.get("SLURM_NTASKS", "1")) <= 1:
                continue
            return cls.__name__
        except Exception:  # a detector probing a metadata server etc.: not this cluster
            continue
    return None


def add_arguments(parser) -> None:
    """Add ``--coordinator-address``, ``--num-processes``, ``--process-id`` to an argparse parser."""
    group = parser.add_argument_group("multi-process (jax.distributed)")
    group.add_argument("--coordinator-address", default=None, help=f"host:port of process 0 (env {ENV_ADDRESS})")
    group.add_argument("--num-processes", default=None, type=int, help=f"number of processes (env {ENV_NUM_PROCESSES})")
    group.add_argument("--process-id", default=None, type=int, help=f"this process's index (env {ENV_PROCESS_ID})")


_INITIALIZED = False


def initialize(spec: DistributedSpec | None = None, *, platform: str | None = None) -> bool:
    """Join a multi-process run if one is configured or detected; idempotent.

    Args:
      spec: from :func:`resolve_spec` (default: environment variables only).
      platform: the backend that will run (default ``JAX_PLATFORMS`` or auto); on CPU
        cross-process collectives use gloo.

    Returns:
      ``True`` when ``jax.distributed`` was initialised (now or earlier), ``False`` for a
      single-process run. Must be called before anything touches a JAX device.
    """
    global _INITIALIZED
    if _INITIALIZED:
        return True
    spec = resolve_spec() if spec is None else spec
    cluster = None if spec.explicit else detected_cluster()
    if not spec.explicit and cluster is None:
        return False
    if spec.explicit and spec.num_processes == 1:
        return False
    platforms = (platform or os.environ.get("JAX_PLATFORMS", "")).lower()
    if platforms in ("", "cpu") or platforms.startswith("cpu"):
        # Harmless for GPU/TPU runs (it only configures the CPU client's collectives).
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
    if spec.explicit:
        jax.distributed.initialize(spec.coordinator_address, spec.num_processes, spec.process_id)
    else:
        jax.distributed.initialize()
    _INITIALIZED = True
    return True


def is_primary() -> bool:
    """``True`` on the process that writes logs and checkpoints (process 0)."""
    return jax.process_index() == 0


def barrier(name: str) -> None:
    """Wait until every process reaches ``name`` (no-op with one process)."""
    if jax.process_count() > 1:
        from jax.experimental import multihost_utils

        multihost_utils.sync_global_devices(name)
