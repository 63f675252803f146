"""The matmul of the decoder's projections and adapters, with its backward written out.

:func:`matmul` is ``x @ w`` whose gradients are autodiff's, computed as two plain dots over
the flattened tokens. Left to autodiff, XLA:CPU fuses the MLP's elementwise backward into a
copy that writes the output gradient transposed for the weight gradient's dot; written out,
the dots read it where it is (measured in ``bench/results/lm_grpo_vs_tunix.md``).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

Array = jax.Array


def precision(dtype) -> jax.lax.Precision | None:
    """Matmul precision for a compute dtype: float32 means float32 (GPUs would otherwise use
    TF32 and miss parity by ~1e-3); lower dtypes use the native products."""
    return jax.lax.Precision.HIGHEST if jnp.dtype(dtype) == jnp.float32 else None


@jax.custom_vjp
def matmul(x: Array, w: Array) -> Array:
    """``x @ w`` for ``x [..., in]`` and ``w [in, out]`` at :func:`precision` of ``x``'s dtype."""
    return jnp.matmul(x, w, precision=precision(x.dtype))


def _forward(x: Array, w: Array):
    return matmul(x, w), (x, w)


def _backward(res, g: Array):
    x, w = res
    prec = precision(x.dtype)
    dw = jnp.matmul(x.reshape(-1, x.shape[-1]).T, g.reshape(-1, g.shape[-1]), precision=prec)
    return jnp.matmul(g, w.T, precision=prec).astype(x.dtype), dw.astype(w.dtype)


matmul.defvjp(_forward, _backward)
