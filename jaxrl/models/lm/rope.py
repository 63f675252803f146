"""Rotary position embeddings as transformers computes them (``modeling_rope_utils.py``).

:func:`inv_freq` gives the per-pair inverse frequencies ``[head_dim / 2]`` (float32, computed
on the host in float32 as torch does, so the angles match bit for bit where the maths does)
and the factor that scales cos/sin (1 except for yarn). :func:`rope_tables` turns integer
positions into the ``cos, sin`` tables and :func:`apply_rope` rotates the two halves of the
head dimension (the "rotate_half" convention of Llama/Qwen/Mistral checkpoints).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from jaxrl.models.lm.config import RopeConfig

Array = jax.Array


def _default(theta: float, dim: int) -> np.ndarray:
    exponent = np.arange(0, dim, 2, dtype=np.int64).astype(np.float32) / np.float32(dim)
    return (np.float32(1.0) / (np.float32(theta) ** exponent)).astype(np.float32)


def _llama3(base: np.ndarray, rope: RopeConfig) -> np.ndarray:
    factor, low, high = rope.get("factor"), rope.get("low_freq_factor"), rope.get("high_freq_factor")
    old_len = rope.get("original_max_position_embeddings")
    low_wavelen, high_wavelen = old_len / low, old_len / high
    wavelen = np.float32(2 * math.pi) / base
    scaled = np.where(wavelen > low_wavelen, base / np.float32(factor), base)
    smooth = (np.float32(old_len) / wavelen - np.float32(low)) / np.float32(high - low)
    smoothed = (1 - smooth) * scaled / np.float32(factor) + smooth * scaled
    medium = ~(wavelen < high_wavelen) & ~(wavelen > low_wavelen)
    return np.where(medium, smoothed, scaled).astype(np.float32)


def _yarn(theta: float, dim: int, rope: RopeConfig) -> tuple[np.ndarray, float]:
    factor = rope.get("factor")
    original = rope.get("original_max_position_embeddings")
    attention_factor = rope.get("attention_factor")
    mscale, mscale_all = rope.get("mscale"), rope.get("mscale_all_dim")

    def get_mscale(scale, m=1.0):
        return 1.0 if scale <= 1 else 0.1 * m * math.log(scale) + 1.0

    if attention_factor is None:
        attention_factor = (get_mscale(factor, mscale) / get_mscale(factor, mscale_all)
                            if mscale and mscale_all else get_mscale(factor))
    beta_fast, beta_slow = rope.get("beta_fast") or 32, rope.get("beta_slow") or 1

    def correction_dim(rotations):
        return (dim * math.log(original / (rotations * 2 * math.pi))) / (2 * math.log(theta))

    low, high = correction_dim(beta_fast), correction_dim(beta_slow)
    if rope.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001
    ramp = np.clip((np.arange(dim // 2, dtype=np.float32) - low) / (high - low), 0, 1).astype(np.float32)
    pos_freqs = np.float32(theta) ** (np.arange(0, dim, 2).astype(np.float32) / np.float32(dim))
    extrapolation, interpolation = 1.0 / pos_freqs, 1.0 / (np.float32(factor) * pos_freqs)
    keep = 1 - ramp
    return (interpolation * (1 - keep) + extrapolation * keep).astype(np.float32), float(attention_factor)


def inv_freq(rope: RopeConfig, head_dim: int) -> tuple[np.ndarray, float]:
    """Inverse frequencies float32 ``[head_dim // 2]`` and the cos/sin scale of ``rope``."""
    if rope.rope_type == "yarn":
        return _yarn(rope.theta, head_dim, rope)
    base = _default(rope.theta, head_dim)
    if rope.rope_type == "linear":
        return (base / np.float32(rope.get("factor"))).astype(np.float32), 1.0
    if rope.rope_type == "llama3":
        return _llama3(base, rope), 1.0
    if rope.rope_type == "default":
        return base, 1.0
    raise ValueError(f"rope_type {rope.rope_type!r} is unsupported")


def rope_tables(rope: RopeConfig, head_dim: int, positions: Array) -> tuple[Array, Array]:
    """``cos, sin`` float32 ``[..., head_dim]`` for integer ``positions [...]``."""
    freqs, scale = inv_freq(rope, head_dim)
    angle = positions.astype(jnp.float32)[..., None] * jnp.asarray(freqs)
    angle = jnp.concatenate([angle, angle], axis=-1)
    return jnp.cos(angle) * scale, jnp.sin(angle) * scale


def apply_rope(x: Array, cos: Array, sin: Array) -> Array:
    """Rotate ``x [B, L, H, hd]`` by ``cos, sin [B, L, hd]`` (cast to ``x``'s dtype first, as
    transformers does)."""
    cos = cos.astype(x.dtype)[:, :, None, :]
    sin = sin.astype(x.dtype)[:, :, None, :]
    half = x.shape[-1] // 2
    rotated = jnp.concatenate([-x[..., half:], x[..., :half]], axis=-1)
    return x * cos + rotated * sin
