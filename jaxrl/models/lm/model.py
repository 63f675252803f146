"""A Hugging Face decoder (Qwen2/Qwen3/Llama/Mistral) as pure JAX functions over a params pytree.

Parameters (HF names, kernels ``[in, out]``, the layers stacked on a leading axis ``L`` and run
with one ``lax.scan``)::

    {"embed_tokens": [V, D],
     "layers": {"input_layernorm": [L, D], "post_attention_layernorm": [L, D],
                "q_proj": {"kernel": [L, D, Hq*hd], "bias": [L, Hq*hd]}, "k_proj", "v_proj" (Hkv*hd),
                "o_proj": {"kernel": [L, Hq*hd, D]}, "q_norm", "k_norm": [L, hd] (Qwen3),
                "gate_proj", "up_proj": {"kernel": [L, D, F]}, "down_proj": {"kernel": [L, F, D]}},
     "norm": [D], "lm_head": {"kernel": [D, V]} (absent when tied)}

Block: ``x += o(attn(rope(q), rope(k), v))`` on ``rmsnorm(x)``, then
``x += down(silu(gate(h)) * up(h))`` on ``rmsnorm(x)``. Dtype policy: parameters and
activations in ``LM.dtype``; RMSNorm in float32, cast back before the weight (as
transformers' ``Qwen2RMSNorm``); attention scores and softmax in float32; logits float32.

Batches are left-padded: a row's positions are ``cumsum(mask) - 1`` (as transformers' generate
computes them), padded keys are never attended, padded query rows stay finite. The cache
(:class:`KVCache`) is addressed by absolute slots: ``extend`` writes ``R`` tokens at slots
``write_at .. write_at + R - 1`` and a token attends to the valid slots up to its own, so a
dialogue can leave unused slots between turns; positions come from the count of real tokens.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
from flax import struct

from jaxrl.models.lm.config import LMConfig
from jaxrl.models.lm.lora import LoRAParams, lora_delta
from jaxrl.models.lm.ops import matmul, precision
from jaxrl.models.lm.rope import apply_rope, rope_tables

Array = jax.Array
_NEG = -1e30  # masked score: exp underflows to exactly 0; a fully masked row stays finite


@struct.dataclass
class KVCache:
    """Keys and values of every layer in ``M`` absolute slots."""

    k: Array      # dtype [n_layers, B, M, Hkv, hd]
    v: Array      # dtype [n_layers, B, M, Hkv, hd]
    valid: Array  # bool [B, M]: the slot holds a real token
    count: Array  # int32 [B]: real tokens so far (= the next token's position)


def rms_norm(x: Array, weight: Array, eps: float) -> Array:
    """``weight * (x / rms(x))`` with the normalisation in float32, cast back to ``x``'s dtype
    before the weight (transformers' ``Qwen2RMSNorm``/``LlamaRMSNorm``)."""
    x32 = x.astype(jnp.float32)
    y = x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + eps)
    return weight * y.astype(x.dtype)


def _linear(x: Array, p: dict, lora_p: dict | None, scale: float) -> Array:
    y = matmul(x, p["kernel"])
    if "bias" in p:
        y = y + p["bias"]
    if lora_p is not None:
        y = y + lora_delta(x, lora_p, scale)
    return y


def _attend(q: Array, k: Array, v: Array, mask: Array) -> Array:
    """Grouped-query attention. ``q [B, R, Hq, hd]``, ``k, v [B, M, Hkv, hd]``, ``mask`` bool
    ``[B, R, M]`` (True = may attend) -> ``[B, R, Hq * hd]``; scores/softmax in float32."""
    b, r, hq, hd = q.shape
    hkv = k.shape[2]
    q = q.reshape(b, r, hkv, hq // hkv, hd)
    prec = precision(q.dtype)
    s = jnp.einsum("brhgd,bmhd->bhgrm", q, k, preferred_element_type=jnp.float32, precision=prec) * (hd ** -0.5)
    s = jnp.where(mask[:, None, None], s, _NEG)
    p = jax.nn.softmax(s, axis=-1).astype(v.dtype)
    o = jnp.einsum("bhgrm,bmhd->brhgd", p, v, preferred_element_type=jnp.float32, precision=prec).astype(v.dtype)
    return o.reshape(b, r, hq * hd)


def _attend_shared(q: Array, kp: Array, vp: Array, kc: Array, vc: Array, mask_p: Array, mask_c: Array) -> Array:
    """Attention of ``G`` completions per prompt to their group's shared prompt and to themselves.

    ``q, kc, vc [P, G, R, H, hd]`` (queries ``Hq`` heads, keys/values ``Hkv``), the prompt's
    ``kp, vp [P, Lp, Hkv, hd]`` (computed once per group, never repeated), masks bool
    ``mask_p [P, G, R, Lp]`` and ``mask_c [P, G, R, R]`` -> ``[P * G, R, Hq * hd]``. One
    softmax over the prompt's and the completion's keys together: the same numbers as
    :func:`_attend` on the concatenated sequence (scores/softmax in float32).
    """
    p_, g_, r, hq, hd = q.shape
    hkv = kp.shape[2]
    lp = kp.shape[1]
    q = q.reshape(p_, g_, r, hkv, hq // hkv, hd)
    prec = precision(q.dtype)
    scale = hd ** -0.5
    s_p = jnp.einsum("pGrhgd,pmhd->pGhgrm", q, kp, preferred_element_type=jnp.float32, precision=prec) * scale
    s_c = jnp.einsum("pGrhgd,pGmhd->pGhgrm", q, kc, preferred_element_type=jnp.float32, precision=prec) * scale
    s = jnp.concatenate([jnp.where(mask_p[:, :, None, None], s_p, _NEG), jnp.where(mask_c[:, :, None, None], s_c, _NEG)],
                        axis=-1)
    p = jax.nn.softmax(s, axis=-1).astype(vp.dtype)
    o = (jnp.einsum("pGhgrm,pmhd->pGrhgd", p[..., :lp], vp, preferred_element_type=jnp.float32, precision=prec)
         + jnp.einsum("pGhgrm,pGmhd->pGrhgd", p[..., lp:], vc, preferred_element_type=jnp.float32, precision=prec))
    return o.astype(vp.dtype).reshape(p_ * g_, r, hq * hd)


def _window_mask(mask: Array, q_pos: Array, k_pos: Array, window: int | None) -> Array:
    """``mask [B, R, M]`` restricted to keys less than ``window`` positions back."""
    if window is None:
        return mask
    return mask & (q_pos[:, :, None] - k_pos[:, None, :] < window)


def _check_lora(lora) -> None:
    if lora is not None and not isinstance(lora, LoRAParams):
        raise TypeError(f"lora must be the LoRAParams that init_lora returns (it carries alpha / rank), "
                        f"got {type(lora).__name__}")


@dataclasses.dataclass(frozen=True)
class LM:
    """A loaded decoder: its :class:`LMConfig`, compute/param ``dtype``, the id written after a
    row's end (``pad_id``) and the ids that end a row (``eos_ids``). Hashable, so it can be a
    static argument of ``jax.jit``; every method is pure and jit-able."""

    config: LMConfig
    dtype: Any = jnp.float32
    pad_id: int = 0
    eos_ids: tuple[int, ...] = ()

    def __post_init__(self):
        object.__setattr__(self, "dtype", jnp.dtype(self.dtype))
        object.__setattr__(self, "eos_ids", tuple(int(e) for e in self.eos_ids))

    # -- the pieces of a block ---------------------------------------------------------------

    @staticmethod
    def _proj(x: Array, lp: dict, ll: LoRAParams | None, name: str) -> Array:
        """Projection ``name`` of one layer, with its adapter when ``ll`` has one."""
        if ll is None:
            return _linear(x, lp[name], None, 1.0)
        return _linear(x, lp[name], ll.get(name), ll.scale)

    def _qkv(self, lp: dict, ll: LoRAParams | None, h: Array, cos: Array, sin: Array):
        c = self.config
        b, r, _ = h.shape
        q = self._proj(h, lp, ll, "q_proj").reshape(b, r, c.num_heads, c.head_dim)
        k = self._proj(h, lp, ll, "k_proj").reshape(b, r, c.num_kv_heads, c.head_dim)
        v = self._proj(h, lp, ll, "v_proj").reshape(b, r, c.num_kv_heads, c.head_dim)
        if c.qk_norm:
            q = rms_norm(q, lp["q_norm"], c.rms_norm_eps)
            k = rms_norm(k, lp["k_norm"], c.rms_norm_eps)
        return apply_rope(q, cos, sin), apply_rope(k, cos, sin), v

    def _finish(self, lp: dict, ll: LoRAParams | None, x: Array, attended: Array) -> Array:
        """Output projection and residual, then the SwiGLU MLP and residual."""
        c = self.config
        x = x + self._proj(attended, lp, ll, "o_proj")
        h = rms_norm(x, lp["post_attention_layernorm"], c.rms_norm_eps)
        gate, up = self._proj(h, lp, ll, "gate_proj"), self._proj(h, lp, ll, "up_proj")
        return x + self._proj(jax.nn.silu(gate) * up, lp, ll, "down_proj")

    def _sliding(self) -> Array:
        c = self.config
        return jnp.asarray(c.sliding_layers or (False,) * c.num_layers, bool)

    def _layer_mask(self, sliding: Array, full: Array, windowed: Array) -> Array:
        return full if self.config.sliding_window is None else jnp.where(sliding, windowed, full)

    def _embed(self, params: dict, ids: Array) -> Array:
        return jnp.take(params["embed_tokens"], ids, axis=0).astype(self.dtype)

    # -- whole sequences ---------------------------------------------------------------------

    def _forward(self, params: dict, input_ids: Array, attention_mask: Array | None, lora, keep_kv: bool,
                 remat: bool = True):
        """Hidden states ``[B, L, D]`` (final-normed) and, if ``keep_kv``, keys/values
        ``[n_layers, B, L, Hkv, hd]``. ``remat`` (loss passes, ``keep_kv`` False): the
        backward pass keeps each layer's input only and recomputes its inside."""
        _check_lora(lora)
        c = self.config
        b, length = input_ids.shape
        mask = jnp.ones((b, length), bool) if attention_mask is None else attention_mask.astype(bool)
        pos = jnp.cumsum(mask, axis=1, dtype=jnp.int32) - 1
        cos, sin = rope_tables(c.rope, c.head_dim, pos)
        idx = jnp.arange(length)
        full = mask[:, None, :] & (idx[None, :, None] >= idx[None, None, :])
        windowed = _window_mask(full, pos, pos, c.sliding_window)

        def body(x, xs):
            lp, ll, sliding = xs
            h = rms_norm(x, lp["input_layernorm"], c.rms_norm_eps)
            q, k, v = self._qkv(lp, ll, h, cos, sin)
            attended = _attend(q, k, v, self._layer_mask(sliding, full, windowed))
            return self._finish(lp, ll, x, attended), ((k, v) if keep_kv else None)

        if remat and not keep_kv:  # the loss pass: backward keeps each layer's input only and recomputes its inside
            body = jax.checkpoint(body, prevent_cse=False)
        x, kv = jax.lax.scan(body, self._embed(params, input_ids), (params["layers"], lora, self._sliding()))
        return rms_norm(x, params["norm"], c.rms_norm_eps), kv, mask

    def hidden(self, params: dict, input_ids: Array, attention_mask: Array | None = None,
               lora: LoRAParams | None = None, remat: bool = True) -> Array:
        """Final-normed hidden states ``[B, L, D]`` (``dtype``) of ``input_ids`` int ``[B, L]``;
        ``remat``: recompute each layer's inside in the backward pass (less memory, more work)."""
        return self._forward(params, input_ids, attention_mask, lora, keep_kv=False, remat=remat)[0]

    def hidden_shared(self, params: dict, prompt_ids: Array, prompt_mask: Array, ids: Array, mask: Array,
                      group: int, lora: LoRAParams | None = None, remat: bool = True) -> tuple[Array, Array]:
        """:meth:`hidden` of ``P * group`` sequences ``prompt + ids`` whose consecutive runs of
        ``group`` rows share a prompt, with each prompt computed once.

        ``prompt_ids [P, Lp]`` (left-padded; ``prompt_mask`` bool, False = padding) and the
        rows' continuations ``ids [P * group, R]`` (``mask`` False = a pad: invisible, no
        position) -> final-normed ``(prompt hidden [P, Lp, D], continuation hidden
        [P * group, R, D])``, equal to :meth:`hidden` of the concatenated rows (positions
        count real tokens from the prompt's; the continuation attends to the prompt's keys
        and causally to its own). Gradients through the shared prompt sum over its rows.
        Projections and the MLP run once over the prompt's and the continuations' tokens.
        """
        _check_lora(lora)
        c = self.config
        p_, lp = prompt_ids.shape
        n, r = ids.shape
        if n != p_ * group:
            raise ValueError(f"hidden_shared: {n} continuations for {p_} prompts x group {group}")
        pmask, cmask = prompt_mask.astype(bool), mask.astype(bool)
        ppos = jnp.cumsum(pmask, axis=1, dtype=jnp.int32) - 1
        count = jnp.repeat(pmask.sum(axis=1, dtype=jnp.int32), group)
        cpos = count[:, None] + jnp.cumsum(cmask, axis=1, dtype=jnp.int32) - 1
        pos = jnp.concatenate([ppos.reshape(-1), cpos.reshape(-1)])[None]  # [1, P*Lp + N*R]: one token axis
        cos, sin = rope_tables(c.rope, c.head_dim, pos)
        pidx, cidx = jnp.arange(lp), jnp.arange(r)
        p_full = pmask[:, None, :] & (pidx[None, :, None] >= pidx[None, None, :])               # [P, Lp, Lp]
        c_full = cmask[:, None, :] & (cidx[None, :, None] >= cidx[None, None, :])               # [N, R, R]
        cp_full = jnp.broadcast_to(pmask[:, None, None, :], (p_, group, r, lp))                 # [P, G, R, Lp]
        p_win = _window_mask(p_full, ppos, ppos, c.sliding_window)
        c_win = _window_mask(c_full, cpos, cpos, c.sliding_window)
        cp_win = cp_full
        if c.sliding_window is not None:
            cp_win = cp_full & (cpos.reshape(p_, group, r, 1) - ppos[:, None, None, :] < c.sliding_window)
        shape_c = (p_, group, r, r)
        tp = p_ * lp

        def body(x, xs):
            lp_, ll, sliding = xs
            h = rms_norm(x, lp_["input_layernorm"], c.rms_norm_eps)
            q, k, v = self._qkv(lp_, ll, h, cos, sin)  # [1, T, H, hd], one matmul per projection
            split = lambda a, heads: (a[0, :tp].reshape(p_, lp, heads, c.head_dim),  # noqa: E731
                                      a[0, tp:].reshape(p_, group, r, heads, c.head_dim))
            (qp, qc), (kp, kc), (vp, vc) = split(q, c.num_heads), split(k, c.num_kv_heads), split(v, c.num_kv_heads)
            att_p = _attend(qp, kp, vp, self._layer_mask(sliding, p_full, p_win))
            att_c = _attend_shared(qc, kp, vp, kc, vc, self._layer_mask(sliding, cp_full, cp_win),
                                   self._layer_mask(sliding, c_full, c_win).reshape(shape_c))
            attended = jnp.concatenate([att_p.reshape(1, tp, -1), att_c.reshape(1, n * r, -1)], axis=1)
            return self._finish(lp_, ll, x, attended), None

        if remat:
            body = jax.checkpoint(body, prevent_cse=False)
        x0 = jnp.concatenate([self._embed(params, prompt_ids).reshape(1, tp, -1),
                              self._embed(params, ids).reshape(1, n * r, -1)], axis=1)
        x, _ = jax.lax.scan(body, x0, (params["layers"], lora, self._sliding()))
        x = rms_norm(x, params["norm"], c.rms_norm_eps)
        return x[0, :tp].reshape(p_, lp, -1), x[0, tp:].reshape(n, r, -1)

    def logits(self, params: dict, hidden: Array) -> Array:
        """The LM head: float32 logits ``[..., V]`` of hidden states ``[..., D]`` (products in
        ``dtype``, accumulated in float32)."""
        prec = precision(hidden.dtype)
        if "lm_head" in params:
            return jnp.einsum("...d,dv->...v", hidden, params["lm_head"]["kernel"],
                              preferred_element_type=jnp.float32, precision=prec)
        return jnp.einsum("...d,vd->...v", hidden, params["embed_tokens"], preferred_element_type=jnp.float32,
                          precision=prec)

    def apply(self, params: dict, input_ids: Array, attention_mask: Array | None = None,
              lora: LoRAParams | None = None) -> Array:
        """float32 logits ``[B, L, V]`` of a (left-padded) batch ``input_ids [B, L]`` with
        ``attention_mask [B, L]`` (1 = real token; None = all real)."""
        return self.logits(params, self.hidden(params, input_ids, attention_mask, lora))

    # -- the cache ---------------------------------------------------------------------------

    def init_cache(self, batch: int, max_len: int) -> KVCache:
        """An empty cache of ``max_len`` slots."""
        c = self.config
        shape = (c.num_layers, batch, max_len, c.num_kv_heads, c.head_dim)
        return KVCache(k=jnp.zeros(shape, self.dtype), v=jnp.zeros(shape, self.dtype),
                       valid=jnp.zeros((batch, max_len), bool), count=jnp.zeros((batch,), jnp.int32))

    def prefill(self, params: dict, input_ids: Array, attention_mask: Array | None, max_len: int,
                lora: LoRAParams | None = None) -> tuple[Array, KVCache]:
        """Logits float32 ``[B, L, V]`` of the prompt and a cache of ``max_len`` slots holding it
        in slots ``0 .. L-1`` (the same as :meth:`extend` at slot 0 of an empty cache)."""
        hidden, (k, v), mask = self._forward(params, input_ids, attention_mask, lora, keep_kv=True)
        b, length = input_ids.shape
        pad = ((0, 0), (0, 0), (0, max_len - length), (0, 0), (0, 0))
        cache = KVCache(k=jnp.pad(k, pad), v=jnp.pad(v, pad),
                        valid=jnp.pad(mask, ((0, 0), (0, max_len - length))),
                        count=mask.sum(axis=1, dtype=jnp.int32))
        return self.logits(params, hidden), cache

    def extend(self, params: dict, cache: KVCache, tokens: Array, write_at: Array,
               token_mask: Array | None = None, lora: LoRAParams | None = None) -> tuple[Array, KVCache]:
        """Feed ``tokens`` int ``[B, R]`` into slots ``write_at .. write_at + R - 1`` (int32 scalar;
        the caller keeps them inside the cache). ``token_mask`` bool ``[B, R]`` (None = all
        real): a False token is padding, invisible to every later query and consuming no
        position. Returns logits float32 ``[B, R, V]`` and the updated cache."""
        _check_lora(lora)
        c = self.config
        b, r = tokens.shape
        tmask = jnp.ones((b, r), bool) if token_mask is None else token_mask.astype(bool)
        write_at = jnp.asarray(write_at, jnp.int32)
        pos = cache.count[:, None] + jnp.cumsum(tmask, axis=1, dtype=jnp.int32) - 1
        cos, sin = rope_tables(c.rope, c.head_dim, pos)
        valid = jax.lax.dynamic_update_slice(cache.valid, tmask, (0, write_at))
        slots = jnp.arange(cache.valid.shape[1])
        full = valid[:, None, :] & (slots[None, None, :] <= write_at + jnp.arange(r)[None, :, None])
        key_pos = jnp.cumsum(valid, axis=1, dtype=jnp.int32) - 1   # slots fill in order
        windowed = _window_mask(full, pos, key_pos, c.sliding_window)

        def body(carry, xs):
            x, kc, vc = carry
            lp, ll, sliding, layer = xs
            h = rms_norm(x, lp["input_layernorm"], c.rms_norm_eps)
            q, k, v = self._qkv(lp, ll, h, cos, sin)
            kc = jax.lax.dynamic_update_slice(kc, k[None].astype(kc.dtype), (layer, 0, write_at, 0, 0))
            vc = jax.lax.dynamic_update_slice(vc, v[None].astype(vc.dtype), (layer, 0, write_at, 0, 0))
            k_all = jax.lax.dynamic_index_in_dim(kc, layer, keepdims=False)
            v_all = jax.lax.dynamic_index_in_dim(vc, layer, keepdims=False)
            attended = _attend(q, k_all, v_all, self._layer_mask(sliding, full, windowed))
            return (self._finish(lp, ll, x, attended), kc, vc), None

        xs = (params["layers"], lora, self._sliding(), jnp.arange(c.num_layers))
        (x, kc, vc), _ = jax.lax.scan(body, (self._embed(params, tokens), cache.k, cache.v), xs)
        hidden = rms_norm(x, params["norm"], c.rms_norm_eps)
        new = KVCache(k=kc, v=vc, valid=valid, count=cache.count + tmask.sum(axis=1, dtype=jnp.int32))
        return self.logits(params, hidden), new

    def decode(self, params: dict, cache: KVCache, token: Array, write_at: Array,
               token_mask: Array | None = None, lora: LoRAParams | None = None) -> tuple[Array, KVCache]:
        """One token ``[B]`` at slot ``write_at``: logits float32 ``[B, V]`` and the cache."""
        tmask = None if token_mask is None else token_mask[:, None]
        logits, cache = self.extend(params, cache, token[:, None], write_at, tmask, lora)
        return logits[:, 0], cache
