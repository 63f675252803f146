"""Compiler settings for the tests' multi-device subprocesses: faster compiles, same checks.

The subprocesses of tests/test_algo_conformance*.py, tests/test_sharding.py and
tests/test_model_parallel.py spend nearly all their time compiling small programs. They run
XLA's CPU backend at -O0 with LLVM's expensive passes off (:data:`OPTIONS`: in ``XLA_FLAGS``
for every jit, and in place of the trainer's ``COMPILER_OPTIONS`` where a subprocess opts
in). Each of their properties compares two programs compiled with the same settings
(chunked vs scanned, vmapped vs alone, resumed vs straight, split vs one device), so each
keeps its meaning and its failure (a trace-time Python value, an ``n_active`` that changes
the math, a lossy restore, a layout-dependent result). Fusion-emitter switches are not used:
with ``--xla_cpu_use_fusion_emitters=false`` a chunk and the scan of the same updates round
differently, and chunked == scanned would no longer hold bit for bit.
"""

from __future__ import annotations

import os

#: XLA debug options (as ``jax.jit(compiler_options=...)`` and ``XLA_FLAGS`` spell them).
OPTIONS = {"xla_backend_optimization_level": 0, "xla_llvm_disable_expensive_passes": True}
#: :data:`OPTIONS` as ``XLA_FLAGS`` text.
XLA_FLAGS = " ".join(f"--{k}={str(v).lower()}" for k, v in OPTIONS.items())


def subprocess_env(**extra: str) -> dict:
    """This process's environment for a CPU subprocess: its own ``XLA_FLAGS`` dropped,
    :data:`XLA_FLAGS` in their place, ``JAX_PLATFORMS=cpu``, then ``extra``."""
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    env.update(JAX_PLATFORMS="cpu", XLA_FLAGS=XLA_FLAGS, **extra)
    return env
