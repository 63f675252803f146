"""Fresh weights for a decoder of any :class:`~jaxrl.models.lm.LMConfig`, as transformers makes them.

transformers' ``_init_weights`` for Qwen2/Qwen3/Llama/Mistral draws every linear kernel and the
embedding from ``normal(0, initializer_range)``, zeroes biases and sets RMSNorm weights to 1.
:func:`init_params` does the same in the loaded layout (stacked layers, ``[in, out]`` kernels), so
a model made here, saved with :func:`~jaxrl.models.lm.save_hf`, is a checkpoint like any other:
used for models trained from scratch (the text recipes) and for scaled-down stand-ins of a
real architecture in tests.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jaxrl.models.lm.config import LMConfig
from jaxrl.models.lm.load import _set, expected_shapes


def init_params(config: LMConfig, key: jax.Array, dtype=jnp.float32, std: float = 0.02) -> dict:
    """A params pytree for ``config``: kernels and embedding ``normal(0, std)``, biases 0,
    norm weights 1 (``std``: the checkpoint's ``initializer_range``)."""
    shapes = expected_shapes(config)
    keys = jax.random.split(key, len(shapes))
    params: dict = {}
    for k, (path, shape) in zip(keys, sorted(shapes.items())):
        if path[-1] == "bias":
            value = jnp.zeros(shape, dtype)
        elif path[-1] != "kernel" and path != ("embed_tokens",):  # RMSNorm weights
            value = jnp.ones(shape, dtype)
        else:
            value = (std * jax.random.normal(k, shape, jnp.float32)).astype(dtype)
        _set(params, path, value)
    return params


__all__ = ["init_params"]
