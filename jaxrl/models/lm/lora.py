"""LoRA adapters (Hu et al. 2021) as a second pytree beside the frozen base parameters.

A targeted projection ``y = x @ W`` becomes ``y = x @ W + (alpha / rank) * (x @ a) @ b`` with
``a [in, r]`` and ``b [r, out]`` per layer, stacked like the base (``[L, in, r]``,
``[L, r, out]``). :func:`init_lora` initialises ``a`` as PEFT does (kaiming-uniform with
``a = sqrt(5)`` on the ``[r, in]`` matrix, i.e. ``U(-1/sqrt(in), 1/sqrt(in))``) and ``b = 0``,
so a fresh adapter leaves the model unchanged. The adapters are an argument of the forward
(``model.apply(params, ids, mask, lora=lora)``): the KL reference is the same call with
``lora=None``, never a copy of the weights.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp

from jaxrl.models.lm.ops import matmul

Array = jax.Array
ALL_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


@dataclasses.dataclass(frozen=True)
class LoRAConfig:
    """Adapter shape: ``rank`` r, ``alpha`` (the update is scaled by ``alpha / rank``) and the
    projections it adapts (names from :data:`ALL_TARGETS`)."""

    rank: int = 8
    alpha: float = 16.0
    targets: tuple[str, ...] = ALL_TARGETS

    def __post_init__(self):
        object.__setattr__(self, "targets", tuple(self.targets))
        if self.rank <= 0:
            raise ValueError(f"LoRAConfig.rank must be positive, got {self.rank}")
        unknown = set(self.targets) - set(ALL_TARGETS)
        if unknown or not self.targets:
            raise ValueError(f"LoRAConfig.targets must be a non-empty subset of {ALL_TARGETS}, got {self.targets}")

    @property
    def scale(self) -> float:
        return self.alpha / self.rank


class LoRAParams(dict):
    """The adapter weights ``{target: {"a": [L, in, r], "b": [L, r, out]}}``, a dict that also
    carries the static update scale ``alpha / rank`` (pytree aux data: never traced, never
    trained, preserved by ``jax.tree.map``, gradients and optax updates). Restore a
    checkpoint into a target made by :func:`init_lora`; a plain dict has no scale."""

    def __init__(self, weights: dict, scale: float):
        super().__init__(weights)
        self.scale = float(scale)

    def __repr__(self):
        return f"LoRAParams(scale={self.scale}, {dict.__repr__(self)})"


def _flatten_with_keys(p: LoRAParams):
    keys = tuple(sorted(p))
    return [(jax.tree_util.DictKey(k), p[k]) for k in keys], (keys, p.scale)


def _unflatten(aux, children) -> LoRAParams:
    keys, scale = aux
    return LoRAParams(dict(zip(keys, children)), scale)


jax.tree_util.register_pytree_with_keys(
    LoRAParams, _flatten_with_keys, _unflatten, lambda p: ([p[k] for k in sorted(p)], (tuple(sorted(p)), p.scale)))


def projection_dims(config) -> dict[str, tuple[int, int]]:
    """``(in, out)`` of every projection of an :class:`~jaxrl.models.lm.config.LMConfig`."""
    d, f = config.hidden_size, config.intermediate_size
    q, kv = config.num_heads * config.head_dim, config.num_kv_heads * config.head_dim
    return {"q_proj": (d, q), "k_proj": (d, kv), "v_proj": (d, kv), "o_proj": (q, d),
            "gate_proj": (d, f), "up_proj": (d, f), "down_proj": (f, d)}


@functools.partial(jax.jit, static_argnames=("model", "lcfg", "dtype"))
def init_lora(key: Array, model, lcfg: LoRAConfig, dtype=jnp.float32) -> LoRAParams:
    """Fresh adapters for ``model`` (an :class:`~jaxrl.models.lm.model.LM`): ``a`` uniform in
    ``±1/sqrt(in)`` (PEFT's kaiming-uniform, a=sqrt(5)), ``b = 0``."""
    n_layers = model.config.num_layers
    dims = projection_dims(model.config)
    sizes = [n_layers * dims[name][0] * lcfg.rank for name in lcfg.targets]
    # one draw for every target: a single threefry in the program compiles much faster than seven
    uniform = jax.random.uniform(key, (sum(sizes),), dtype, -1.0, 1.0)
    weights, start = {}, 0
    for name, size in zip(lcfg.targets, sizes):
        d_in, d_out = dims[name]
        a = uniform[start:start + size].reshape(n_layers, d_in, lcfg.rank) / d_in ** 0.5
        weights[name] = {"a": a, "b": jnp.zeros((n_layers, lcfg.rank, d_out), dtype)}
        start += size
    return LoRAParams(weights, lcfg.scale)


def lora_delta(x: Array, ab: dict, scale: float) -> Array:
    """``scale * (x @ a) @ b`` for one layer's ``a [in, r]``, ``b [r, out]``, in the adapter's
    dtype, returned in ``x``'s dtype (both dots :func:`jaxrl.models.lm.ops.matmul`)."""
    h = matmul(x.astype(ab["a"].dtype), ab["a"])
    return (scale * matmul(h, ab["b"])).astype(x.dtype)


def _check(lora: LoRAParams, lcfg: LoRAConfig) -> None:
    if abs(lora.scale - lcfg.scale) > 1e-12 or set(lora) != set(lcfg.targets):
        raise ValueError(f"the adapters (scale {lora.scale}, targets {sorted(lora)}) do not match {lcfg}")


def merge_lora(model, params: dict, lora: LoRAParams, lcfg: LoRAConfig) -> dict:
    """Base parameters with the adapters folded in: ``kernel + (alpha / rank) * a @ b`` per layer
    (computed in float32, cast back to the kernel's dtype)."""
    _check(lora, lcfg)
    return _merge(params, lora, lcfg.scale)


@functools.partial(jax.jit, static_argnames=("scale",))
def _merge(params: dict, lora: LoRAParams, scale: float) -> dict:
    layers = dict(params["layers"])
    for name, ab in lora.items():
        proj = dict(layers[name])
        kernel = proj["kernel"]
        delta = jnp.einsum("lir,lro->lio", ab["a"].astype(jnp.float32), ab["b"].astype(jnp.float32),
                           precision=jax.lax.Precision.HIGHEST)
        proj["kernel"] = (kernel.astype(jnp.float32) + scale * delta).astype(kernel.dtype)
        layers[name] = proj
    return {**params, "layers": layers}
