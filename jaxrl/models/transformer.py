"""A tiny causal transformer language model (flax linen) with an explicit key/value cache.

Three entry points share one set of parameters:

* ``model.apply(params, tokens)`` — logits ``float32[B, L, V]`` of a whole sequence in one
  causal forward pass (what the loss uses).
* ``model.apply(params, tokens, method=TransformerLM.prefill)`` — the same logits plus a
  :class:`KVCache` of the ``L`` positions, sized for ``max_len``.
* ``model.apply(params, token, pos, cache, method=TransformerLM.decode)`` — logits
  ``float32[B, V]`` of the next position after feeding one token ``int32[B]`` at position
  ``pos`` (int32 ``[]``), and the cache with that position written. Acting token by token in
  a ``lax.scan`` carries the cache; the cost per token is ``O(max_len)`` instead of
  re-running the prefix. ``TransformerLM.extend`` feeds ``L`` tokens at once (an
  environment's reply in a dialogue) into the same cache.

Architecture (GPT-2 style, pre-norm): token embedding + learned absolute position embedding,
``n_layers`` blocks of ``x + attn(LN(x))`` and ``x + MLP(LN(x))`` (GELU, ``mlp_ratio`` x
width), a final LayerNorm and a linear head to ``vocab_size`` logits. Attention is multi-head
scaled dot-product with a causal mask; the cache holds keys and values of every layer.
Options: ``positions="rope"`` (rotary queries and keys instead of the position table,
:func:`rope`), ``smear_keys`` (each key mixed with the previous position's, :func:`smear`)
and ``tie_embeddings`` (the logits read off the token embedding table, no separate head).
The defaults (d_model 64, 2 layers, 4 heads) give about 105k parameters with a 41-token
vocabulary.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
from flax import struct

Array = jax.Array
_NEG = -1e30  # masked attention logit: exp underflows to exactly 0, never NaN


@struct.dataclass
class KVCache:
    """Keys and values of every layer, for positions ``0 .. max_len - 1``."""

    k: Array  # float32 [n_layers, B, max_len, n_heads, head_dim]
    v: Array  # float32 [n_layers, B, max_len, n_heads, head_dim]


def rope(x: Array, pos: Array, base: float = 10_000.0) -> Array:
    """Rotary position embedding (Su et al. 2021, RoFormer): rotate pairs of ``x``'s last axis
    by angles ``pos * base ** (-2i / D)``.

    ``x [B, L, H, D]`` (``D`` even), ``pos`` int ``[L]``. Attention scores of rotated queries
    and keys depend on positions only through their difference, so a head that looks a
    fixed distance back ("the previous token") is one pattern for every position, not one
    to learn per absolute position pair.
    """
    half = x.shape[-1] // 2
    freq = base ** (-jnp.arange(half, dtype=jnp.float32) / half)
    angle = pos.astype(jnp.float32)[:, None] * freq[None, :]  # [L, D/2]
    cos, sin = jnp.cos(angle)[None, :, None, :], jnp.sin(angle)[None, :, None, :]
    x1, x2 = x[..., :half], x[..., half:]
    return jnp.concatenate([x1 * cos - x2 * sin, x1 * sin + x2 * cos], axis=-1)


def smear(k: Array, gate: Array) -> Array:
    """Smeared keys (Olsson et al. 2022, "In-context learning and induction heads", sec. 3):
    ``k'_t = gate * k_t + (1 - gate) * k_{t-1}`` per head (``k_{-1} = 0``).

    ``k [B, L, H, D]``, ``gate [H, 1]`` in (0, 1). A key then also carries the previous
    token, so one attention layer can find "the position after an earlier copy of the
    current token" and copy what stands there (an induction head), which otherwise needs a
    previous-token head in an earlier layer. Causal: ``k'_t`` reads positions ``<= t`` only,
    so the cache stores the raw keys and smears them when it is read.
    """
    previous = jnp.pad(k, ((0, 0), (1, 0), (0, 0), (0, 0)))[:, :-1]
    return gate * k + (1.0 - gate) * previous


def _attend(q: Array, k: Array, v: Array, mask: Array) -> Array:
    """Multi-head attention. ``q [B, Lq, H, D]``, ``k, v [B, Lk, H, D]``, ``mask`` bool
    broadcastable to ``[B, H, Lq, Lk]`` (True = may attend) -> ``[B, Lq, H, D]``."""
    scale = 1.0 / jnp.sqrt(jnp.float32(q.shape[-1]))
    logits = jnp.einsum("bqhd,bkhd->bhqk", q, k) * scale
    logits = jnp.where(mask, logits, _NEG)
    weights = jax.nn.softmax(logits, axis=-1)
    return jnp.einsum("bhqk,bkhd->bqhd", weights, v)


class Block(nn.Module):
    """One pre-norm transformer block, usable on a whole sequence or one cached step."""

    d_model: int
    n_heads: int
    mlp_ratio: int = 4
    rotary: bool = False  # rotate queries and keys by their positions (rope)
    smear_keys: bool = False  # mix each key with the previous position's key (see smear)

    def setup(self):
        init = nn.initializers.normal(0.02)
        if self.smear_keys:
            self.smear_logit = self.param("smear_logit", nn.initializers.zeros, (self.n_heads, 1))
        self.ln1 = nn.LayerNorm()
        self.qkv = nn.Dense(3 * self.d_model, kernel_init=init)
        self.out = nn.Dense(self.d_model, kernel_init=init)
        self.ln2 = nn.LayerNorm()
        self.fc1 = nn.Dense(self.mlp_ratio * self.d_model, kernel_init=init)
        self.fc2 = nn.Dense(self.d_model, kernel_init=init)

    def _qkv(self, x: Array, pos: Array) -> tuple[Array, Array, Array]:
        """``x [B, L, d]`` at positions ``pos [L]`` -> q, k, v ``[B, L, H, d / H]``."""
        head_dim = self.d_model // self.n_heads
        qkv = self.qkv(self.ln1(x)).reshape(x.shape[:2] + (3, self.n_heads, head_dim))
        q, k, v = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]
        if self.rotary:
            q, k = rope(q, pos), rope(k, pos)
        return q, k, v

    def _keys(self, k: Array) -> Array:
        """The keys attention compares against: ``k [B, L, H, D]`` itself, or smeared."""
        return smear(k, jax.nn.sigmoid(self.smear_logit)) if self.smear_keys else k

    def _finish(self, x: Array, attended: Array) -> Array:
        x = x + self.out(attended.reshape(x.shape[:2] + (self.d_model,)))
        return x + self.fc2(nn.gelu(self.fc1(self.ln2(x))))

    def full(self, x: Array) -> tuple[Array, Array, Array]:
        """Causal pass over ``x [B, L, d]``: ``(y [B, L, d], k, v [B, L, H, D])``."""
        length = x.shape[1]
        q, k, v = self._qkv(x, jnp.arange(length))
        causal = jnp.tril(jnp.ones((length, length), jnp.bool_))
        return self._finish(x, _attend(q, self._keys(k), v, causal[None, None])), k, v

    def step(self, x: Array, pos: Array, k_cache: Array, v_cache: Array) -> tuple[Array, Array, Array]:
        """``L`` positions ``pos .. pos + L - 1``: ``x [B, L, d]``; caches ``[B, M, H, D]``
        (positions before ``pos`` already written) -> ``y [B, L, d]`` and the updated caches."""
        q, k, v = self._qkv(x, pos + jnp.arange(x.shape[1]))
        k_cache = jax.lax.dynamic_update_slice_in_dim(k_cache, k, pos, axis=1)
        v_cache = jax.lax.dynamic_update_slice_in_dim(v_cache, v, pos, axis=1)
        query_pos = pos + jnp.arange(x.shape[1])
        visible = (jnp.arange(k_cache.shape[1])[None, :] <= query_pos[:, None])[None, None]
        return self._finish(x, _attend(q, self._keys(k_cache), v_cache, visible)), k_cache, v_cache


class TransformerLM(nn.Module):
    """Causal language model over ``vocab_size`` tokens, sequences up to ``max_len``."""

    vocab_size: int
    max_len: int
    d_model: int = 64
    n_layers: int = 2
    n_heads: int = 4
    mlp_ratio: int = 4
    positions: str = "learned"  # "learned": absolute embedding added to the input; "rope": rotary
    tie_embeddings: bool = False  # logits = LN(x) @ embedding.T (GPT-2's weight tying), no separate head
    smear_keys: bool = False  # smeared keys in every block (:func:`smear`): one-layer induction heads

    def setup(self):
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model={self.d_model} must be divisible by n_heads={self.n_heads}")
        if self.positions not in ("learned", "rope"):
            raise ValueError(f"positions must be 'learned' or 'rope', got {self.positions!r}")
        if self.positions == "rope" and (self.d_model // self.n_heads) % 2:
            raise ValueError(f"positions='rope' needs an even head size, got {self.d_model // self.n_heads}")
        self.embed = nn.Embed(self.vocab_size, self.d_model, embedding_init=nn.initializers.normal(0.02))
        if self.positions == "learned":
            self.pos_embed = self.param("pos_embed", nn.initializers.normal(0.02), (self.max_len, self.d_model))
        rotary = self.positions == "rope"
        self.blocks = [Block(self.d_model, self.n_heads, self.mlp_ratio, rotary, self.smear_keys) for _ in range(self.n_layers)]
        self.ln_f = nn.LayerNorm()
        if not self.tie_embeddings:
            self.head = nn.Dense(self.vocab_size, kernel_init=nn.initializers.normal(0.02))

    def _logits(self, x: Array) -> Array:
        x = self.ln_f(x)
        return self.embed.attend(x) if self.tie_embeddings else self.head(x)

    def _tokens(self, tokens: Array) -> Array:
        # Out-of-vocabulary ids are clipped so that a garbage token cannot index out of range.
        return self.embed(jnp.clip(tokens, 0, self.vocab_size - 1))

    def __call__(self, tokens: Array) -> Array:
        """``tokens int32[B, L]`` (``L <= max_len``) -> logits ``float32[B, L, V]``."""
        return self.prefill(tokens)[0]

    def prefill(self, tokens: Array) -> tuple[Array, KVCache]:
        """Logits of ``tokens [B, L]`` and the cache of their ``L`` positions (max_len slots)."""
        length = tokens.shape[1]
        x = self._tokens(tokens)
        if self.positions == "learned":
            x = x + self.pos_embed[:length]
        ks, vs = [], []
        for block in self.blocks:
            x, k, v = block.full(x)
            pad = ((0, 0), (0, self.max_len - length), (0, 0), (0, 0))
            ks.append(jnp.pad(k, pad))
            vs.append(jnp.pad(v, pad))
        return self._logits(x), KVCache(jnp.stack(ks), jnp.stack(vs))

    def decode(self, token: Array, pos: Array, cache: KVCache) -> tuple[Array, KVCache]:
        """Feed ``token int32[B]`` at position ``pos``: logits ``[B, V]`` and the new cache."""
        logits, cache = self.extend(token[:, None], pos, cache)
        return logits[:, 0], cache

    def extend(self, tokens: Array, pos: Array, cache: KVCache) -> tuple[Array, KVCache]:
        """Prefill ``tokens int32[B, L]`` at positions ``pos .. pos + L - 1`` (int32 ``[]``)
        into ``cache`` in one pass (an environment's reply): logits ``[B, L, V]`` and the
        cache with those positions written. ``pos + L <= max_len``."""
        length = tokens.shape[1]
        pos = jnp.clip(jnp.asarray(pos, jnp.int32), 0, self.max_len - length)
        x = self._tokens(tokens)
        if self.positions == "learned":
            x = x + jax.lax.dynamic_slice_in_dim(self.pos_embed, pos, length)[None]
        ks, vs = [], []
        for i, block in enumerate(self.blocks):
            x, k, v = block.step(x, pos, cache.k[i], cache.v[i])
            ks.append(k)
            vs.append(v)
        return self._logits(x), KVCache(jnp.stack(ks), jnp.stack(vs))


def num_params(params) -> int:
    """Total number of scalars in a params pytree."""
    return int(sum(x.size for x in jax.tree_util.tree_leaves(params)))
