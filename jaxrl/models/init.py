"""The shared kernel initialisers of the networks: orthogonal matrices drawn without LAPACK.

:func:`orthogonal` is a flax initialiser (one kernel); :func:`orthogonal_matrices` draws many
at once (what :func:`jaxrl.models.networks.init_params` uses). Both are our own, not flax's:
flax/JAX draw it with ``jnp.linalg.qr``, which on CPU is a LAPACK custom call that, batched
(e.g. under ``jax.vmap(train)`` over seeds), splits the batch over XLA's intra-op thread pool
from *inside* a task of that same pool and can deadlock it (both pool threads blocked in
``jax::ParallelBatchMap``; seen with jaxlib 0.10, diagnosis in ``docs/results.md``). Ours is
plain XLA arithmetic and gives the same matrix up to float rounding.

This module sits below :mod:`jaxrl.models.networks` and :mod:`jaxrl.models.conv`, so
neither imports the other for it.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp

from jaxrl.core import prng


def _orthonormal_columns(a: jax.Array, cols: jax.Array) -> jax.Array:
    """``Q`` of the thin QRs ``a[l] = Q[l] R[l]`` with ``diag(R) > 0``, batched.

    ``a [L, M, N]`` holds ``L`` matrices zero-padded to ``M x N``; matrix ``l`` has
    ``cols[l] <= N`` live columns (and at least as many live rows). Classical
    Gram-Schmidt applied twice per column ("twice is enough", Giraud et al. 2005), which
    keeps ``Q^T Q = I`` to float32 rounding for a well-conditioned ``a``; the columns not
    yet visited are zero, so ``Q (Q^T v)`` projects out exactly the ones done so far, and
    dead (padding) columns stay zero. Only matmuls, one ``fori_loop`` and norms: no LAPACK
    custom call, and one loop for all ``L`` matrices.
    """
    hi = jax.lax.Precision.HIGHEST

    def column(j, q):
        v = a[:, :, j]  # [L, M]
        for _ in range(2):
            coef = jnp.einsum("lmn,lm->ln", q, v, precision=hi)
            v = v - jnp.einsum("lmn,ln->lm", q, coef, precision=hi)
        live = (j < cols)[:, None]
        norm = jnp.linalg.norm(v, axis=-1, keepdims=True)
        return q.at[:, :, j].set(jnp.where(live, v / jnp.where(live, norm, 1.0), 0.0))

    return jax.lax.fori_loop(0, a.shape[2], column, jnp.zeros_like(a))


def orthogonal_matrices(key: jax.Array, shapes: list[tuple[int, int]]) -> list[jax.Array]:
    """One uniformly distributed (semi-)orthogonal ``[rows, cols]`` matrix per shape.

    Matrix ``l`` is the ``Q`` factor (signs fixed by ``diag(R) > 0``) of an i.i.d.
    Gaussian ``[max, min]`` block, transposed when ``rows < cols``: the construction of
    ``jax.nn.initializers.orthogonal`` (Mezzadri 2007). All blocks come from one
    Gaussian draw and one batched Gram-Schmidt, so a network's init is a handful of
    kernels however many layers it has.
    """
    dims = [(max(r, c), min(r, c)) for r, c in shapes]
    m, n = max(d[0] for d in dims), max(d[1] for d in dims)
    rows = jnp.asarray([d[0] for d in dims])[:, None, None]
    cols = jnp.asarray([d[1] for d in dims])
    mask = (jnp.arange(m)[None, :, None] < rows) & (jnp.arange(n)[None, None, :] < cols[:, None, None])
    a = jnp.where(mask, prng.normal(key, (len(shapes), m, n)), 0.0)
    q = _orthonormal_columns(a, cols)
    return [q[i, :big, :small].T if r < c else q[i, :big, :small] for i, ((r, c), (big, small)) in enumerate(zip(shapes, dims))]


def orthogonal(scale: float = 1.0):
    """Initializer of (semi-)orthogonal ``[..., in, out]`` kernels times ``scale``.

    The same distribution and, for the same key, the same matrix (up to rounding) as
    ``jax.nn.initializers.orthogonal(scale)``: a Gaussian ``[max, min]`` draw, its ``Q``
    with the signs fixed by ``diag(R) > 0``, transposed when there are fewer rows than
    columns. See the module docstring for why it avoids ``jnp.linalg.qr``.
    """

    def init(key: jax.Array, shape, dtype=jnp.float32) -> jax.Array:
        if len(shape) < 2:
            raise ValueError(f"orthogonal init needs a shape of rank >= 2, got {tuple(shape)}")
        n_cols = shape[-1]
        (q,) = orthogonal_matrices(key, [(math.prod(shape) // n_cols, n_cols)])
        return (scale * q).reshape(shape).astype(dtype)

    return init
