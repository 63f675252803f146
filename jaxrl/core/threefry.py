"""JAX's threefry hash lowered as straight-line rounds on CPU: the same bits, compiled faster.

Every ``jax.random`` draw (with JAX's default PRNG) is the ``threefry2x32`` primitive. On
CPU JAX lowers it as a 5-iteration loop, which XLA's CPU runtime runs as a sequence of small
kernels per iteration, each compiled; on other platforms it emits the 20 rounds straight,
which XLA fuses into the surrounding elementwise kernel. :func:`unroll_on_cpu` registers
the straight form for CPU too. The first ``jaxrl train`` of a recipe compiles markedly
faster with it (``docs/performance.md``); the commands call it before their first compile.
"""

from __future__ import annotations

import jax
import numpy as np

__all__ = ["threefry2x32_unrolled", "unroll_on_cpu"]

_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))
_unrolled = False


def _rotate_left(x: jax.Array, d: int) -> jax.Array:
    return jax.lax.shift_left(x, np.uint32(d)) | jax.lax.shift_right_logical(x, np.uint32(32 - d))


def threefry2x32_unrolled(key1: jax.Array, key2: jax.Array, x1: jax.Array, x2: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Threefry-2x32 (20 rounds; Salmon et al. 2011, as ``jax.random``'s default PRNG) of
    the uint32 counters ``x1, x2`` under the key ``(key1, key2)``, written out round by
    round: the arithmetic of JAX's lowering of ``threefry2x32_p``, without its loop."""
    ks = (key1, key2, key1 ^ key2 ^ np.uint32(0x1BD11BDA))
    x1, x2 = x1 + ks[0], x2 + ks[1]
    for i in range(5):
        for r in _ROTATIONS[i % 2]:
            x1 = x1 + x2
            x2 = _rotate_left(x2, r) ^ x1
        x1 = x1 + ks[(i + 1) % 3]
        x2 = x2 + ks[(i + 2) % 3] + np.uint32(i + 1)
    return x1, x2


def unroll_on_cpu() -> bool:
    """Lower ``jax.random``'s threefry hash on CPU as straight-line rounds from now on, in
    this process (JAX's lowering rules are global; programs lowered earlier keep theirs).
    The bits are the same. Returns whether the rule is in place (``False`` when this JAX
    has no such primitive: its own lowering stays)."""
    global _unrolled
    if _unrolled:
        return True
    try:
        from jax.extend.random import threefry2x32_p
        from jax.interpreters import mlir
    except ImportError:
        return False
    mlir.register_lowering(threefry2x32_p, mlir.lower_fun(threefry2x32_unrolled, multiple_results=True), platform="cpu")
    _unrolled = True
    return True
