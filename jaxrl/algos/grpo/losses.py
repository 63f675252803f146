"""GRPO-family advantages and losses: module-level pure functions with their shapes.

Group-relative advantages (std-scaled, mean-centred or leave-one-out, per sequence or per
token), the clipped surrogates of the six variants with token-, sequence- or
constant-normalised means (one table: :mod:`jaxrl.algos.grpo.variants`), the k3 KL estimator, DAPO's overlong shaping and dynamic-sampling
selection. Which paper or TRL convention each follows: ``docs/grpo_losses.md``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jaxrl.algos.grpo.config import GRPOHyper
from jaxrl.algos.grpo.variants import seq_mean as _seq_mean
from jaxrl.algos.grpo.variants import token_mean as _token_mean, variant

Array = jax.Array
ADV_EPS = 1e-4  # TRL's epsilon in (R - mean) / (std + eps)


def _group_stats(rewards: Array, valid: Array) -> tuple[Array, Array, Array, Array]:
    """``(v [P, G], n [P, 1], mean [P, 1], centred [P, G])`` over each group's valid members."""
    v = valid.astype(jnp.float32)
    n = jnp.sum(v, axis=1, keepdims=True)
    mean = jnp.sum(rewards * v, axis=1, keepdims=True) / jnp.maximum(n, 1.0)
    return v, n, mean, (rewards - mean) * v


def _group_std(centred: Array, n: Array) -> Array:
    """The unbiased std ``[P, 1]`` of each group (0 for a single member)."""
    return jnp.sqrt(jnp.sum(centred**2, axis=1, keepdims=True) / jnp.maximum(n - 1.0, 1.0))


KINDS = ("std", "batch_std", "mean", "loo", "loo_std", "loo_batch_std")


def _check_kind(kind: str) -> None:
    if kind not in KINDS:
        raise ValueError(f"unknown advantage kind {kind!r}: expected one of {KINDS}")


def _loo_factor(n: Array) -> Array:
    """``n / (n - 1)`` (0 for a single member): ``R_i - mean_{j != i} R_j = n / (n - 1) (R_i - mean)``."""
    return jnp.where(n > 1, n / jnp.maximum(n - 1.0, 1.0), 0.0)


def _batch_std(rewards: Array, valid: Array) -> Array:
    """The unbiased std ``[1, 1]`` of every valid reward of the batch: the whole ``[P, G]``
    batch taken as one group."""
    _, n, _, centred = _group_stats(rewards.reshape(1, -1), valid.reshape(1, -1))
    return _group_std(centred, n)


def _group_scale(rewards: Array, valid: Array, kind: str) -> tuple[Array, Array, Array]:
    """``(mean [P, 1], scale [P, 1], v [P, G])``: the group-relative advantage of ``kind`` is
    ``scale * (R - mean) * v``, equal to :func:`group_advantages` up to float rounding (the
    per-token advantages of :func:`token_advantages` use it)."""
    _check_kind(kind)
    v, n, mean, centred = _group_stats(rewards, valid)
    scale = _loo_factor(n) if kind.startswith("loo") else jnp.ones_like(n)
    if kind.endswith("batch_std"):
        scale = scale / (_batch_std(rewards, valid) + ADV_EPS)
    elif kind.endswith("std"):
        scale = scale / (_group_std(centred, n) + ADV_EPS)
    return mean, scale, v


def group_advantages(rewards: Array, valid: Array, kind: str) -> Array:
    """Group-relative advantages.

    Args:
      rewards: float32 ``[P, G]``, one score per group member.
      valid: bool ``[P, G]``, members that count (others get advantage 0 and do not enter
        the group's statistics).
      kind: ``"std"`` — ``(R - mean) / (std + 1e-4)`` with the unbiased std (GRPO);
        ``"batch_std"`` — the same with the std of the whole batch's rewards instead of the
        group's (TRL's ``scale_rewards="batch"``; the group-mean / batch-std advantage of
        Liu et al. 2025, "Tricks or Traps? A Deep Dive into RL for LLM Reasoning"): a group
        that is nearly solved no longer has its small differences blown up by a tiny std;
        ``"mean"`` — ``R - mean`` (Dr. GRPO); ``"loo"`` — ``R_i - mean_{j != i} R_j`` (RLOO);
        ``"loo_std"`` / ``"loo_batch_std"`` — the leave-one-out advantage divided by the
        group's / the batch's std (``+ 1e-4``).
    Returns:
      float32 ``[P, G]``. A group with a single valid member gets 0 (no baseline exists),
      never NaN.
    """
    # Divides where _group_scale multiplies by a reciprocal: the recorded curves of recipes
    # without token_credit reproduce bit for bit; the two agree to float rounding.
    _check_kind(kind)
    v, n, mean, centred = _group_stats(rewards, valid)
    if kind == "std":
        adv = centred / (_group_std(centred, n) + ADV_EPS)
    elif kind == "batch_std":
        adv = centred / (_batch_std(rewards, valid) + ADV_EPS)
    elif kind == "mean":
        adv = centred
    elif kind == "loo":
        adv = jnp.where(n > 1, centred * n / jnp.maximum(n - 1.0, 1.0), 0.0)
    else:
        std = _batch_std(rewards, valid) if kind == "loo_batch_std" else _group_std(centred, n)
        adv = centred * _loo_factor(n) / (std + ADV_EPS)
    return (adv * v).astype(jnp.float32)


def token_advantages(step_rewards: Array, valid: Array, kind: str, discount: float = 1.0) -> Array:
    """Per-token group-relative advantages from per-step rewards (``grpo.token_credit``).

    Token ``t`` of member ``i`` is credited with its reward-to-go ``Q_it = sum_{s >= t}
    gamma^(s - t) r_is`` (what it and the later tokens earned; rewards before it cannot depend
    on it; ``gamma = discount`` < 1 trusts later rewards less as evidence about token ``t``,
    for tasks whose later tokens barely depend on the earlier ones), centred by
    the group's mean reward-to-go at the same step (members that have ended count with
    ``Q = 0``) and scaled like the sequence advantage of ``kind`` (for ``"std"``: by the
    group's return std), the outcome-plus-process form of DeepSeekMath's GRPO (Shao et al.
    2024, sec. 4.1.3):

        A_it = scale_g(R) * (Q_it - mean_j Q_jt),   R_i = sum_t r_it (undiscounted).

    When every reward arrives on the last step and a group's members end together this is
    :func:`group_advantages` on every token; with ``params.step_rewards`` a token task pays
    partial credit as it is earned, and a token's advantage no longer carries the luck of
    the tokens before it.

    Args:
      step_rewards: float32 ``[P, G, T]`` (0 after a member's end).
      valid: bool ``[P, G]``.
      kind: as :func:`group_advantages`.
      discount: ``gamma`` in ``[0, 1]`` (a Python float).
    Returns:
      float32 ``[P, G, T]``.
    """
    t = jnp.arange(step_rewards.shape[-1])
    gap = t[None, :] - t[:, None]  # [t, s]: s - t
    weight = jnp.where(gap >= 0, jnp.float32(discount) ** jnp.maximum(gap, 0), 0.0)  # gamma^(s-t), s >= t
    rtg = jnp.einsum("pgs,ts->pgt", step_rewards, weight)  # [P, G, T]
    _, scale, v = _group_scale(jnp.sum(step_rewards, -1), valid, kind)
    vt = v[..., None]
    mean_t = jnp.sum(rtg * vt, axis=1, keepdims=True) / jnp.maximum(jnp.sum(vt, axis=1, keepdims=True), 1.0)
    return (scale[..., None] * (rtg - mean_t) * vt).astype(jnp.float32)


def advantage_kind(loss_type: str, scale_rewards: str = "auto") -> str:
    """Which :func:`group_advantages` a loss variant uses: its centring (leave-one-out for
    ``rloo``, the group mean otherwise) and ``scale_rewards`` (TRL's: ``"group"`` std,
    ``"batch"`` std or ``"none"``; ``"auto"``: none for ``dr_grpo`` and ``rloo``, group for
    the others)."""
    v = variant(loss_type)
    if scale_rewards == "auto":
        scale_rewards = v.auto_scale
    if scale_rewards not in ("group", "batch", "none"):
        raise ValueError(f"unknown scale_rewards {scale_rewards!r}: expected 'auto', 'group', 'batch' or 'none'")
    suffix = {"group": "std", "batch": "batch_std", "none": ""}[scale_rewards]
    if v.centring == "loo":
        return "loo_" + suffix if suffix else "loo"
    return suffix or "mean"


def k3_kl(logp: Array, ref_logp: Array) -> Array:
    """Per-token k3 estimate of KL(pi || ref): ``exp(ref - logp) - (ref - logp) - 1 >= 0``."""
    d = ref_logp - logp
    return jnp.exp(d) - d - 1.0


def _clip_metrics(ratio: Array, adv: Array, eps_low: Array, eps_high: Array, reduce) -> dict:
    low = (ratio < 1.0 - eps_low) & (adv < 0)
    high = (ratio > 1.0 + eps_high) & (adv > 0)
    f = lambda b: reduce(b.astype(jnp.float32))  # noqa: E731
    return {"clip_ratio/low_mean": f(low), "clip_ratio/high_mean": f(high), "clip_ratio/region_mean": f(low | high)}


def policy_loss(
    logp: Array,
    old_logp: Array,
    ref_logp: Array | None,
    advantages: Array,
    mask: Array,
    hyper: GRPOHyper,
    loss_type: str,
    cispo_clip_low: bool = False,
    is_weight: Array | None = None,
) -> tuple[Array, dict]:
    """The GRPO-family loss of one (mini)batch (formulas in the module docstring).

    Args:
      logp: float32 ``[N, T]``, log pi(a_t) under the parameters being optimised.
      old_logp: float32 ``[N, T]``, log-probs of the behaviour policy (no gradient).
      ref_logp: float32 ``[N, T]`` of the frozen reference, or None (no KL term).
      advantages: float32 ``[N]``, one per sequence, or ``[N, T]`` per token
        (:func:`token_advantages`; not for ``gspo``).
      mask: bool ``[N, T]``, valid tokens.
      hyper: clip ranges ``eps_low``/``eps_high`` and KL coefficient ``beta``.
      loss_type: a key of :data:`jaxrl.algos.grpo.variants.VARIANTS` (static).
      cispo_clip_low: ``cispo`` only (static): clip the weight below at ``1 - eps_low`` too;
        False (the default, TRL's and the CISPO paper's) caps it above at ``1 + eps_high`` only.
      is_weight: float32 ``[N, T]`` or None: the off-policy correction
        (:func:`jaxrl.algos.grpo.offpolicy.importance_weights`, no gradient) multiplying each
        token's surrogate before the mean, as TRL does; the KL term is not weighted. ``gspo``
        weights each sequence's surrogate by its tokens' mean weight.
    Returns:
      ``(loss [], metrics)`` with ``loss/policy``, ``kl`` and the clip ratios.
    """
    v = variant(loss_type)
    old_logp = jax.lax.stop_gradient(old_logp)
    adv = advantages[:, None] if advantages.ndim == 1 else advantages
    kl = k3_kl(logp, jax.lax.stop_gradient(ref_logp)) if ref_logp is not None else jnp.zeros_like(logp)
    reduce = v.reduce
    eps_low, eps_high = hyper.eps_low, hyper.eps_high
    if is_weight is not None:
        is_weight = jax.lax.stop_gradient(is_weight)
    if v.surrogate == "sequence":
        return _gspo_loss(logp, old_logp, kl, advantages, mask, hyper, is_weight)
    ratio = jnp.exp(logp - old_logp)
    if v.surrogate == "cispo":
        low = 1.0 - eps_low if cispo_clip_low else None
        weight = jax.lax.stop_gradient(jnp.clip(ratio, low, 1.0 + eps_high))
        per_token = -weight * adv * logp
        below = (ratio < 1.0 - eps_low) if cispo_clip_low else jnp.zeros(ratio.shape, jnp.bool_)
        clipped = below | (ratio > 1.0 + eps_high)
        clip = {
            "clip_ratio/low_mean": _token_mean(below.astype(jnp.float32), mask),
            "clip_ratio/high_mean": _token_mean((ratio > 1.0 + eps_high).astype(jnp.float32), mask),
            "clip_ratio/region_mean": _token_mean(clipped.astype(jnp.float32), mask),
        }
    else:
        surrogate = jnp.minimum(ratio * adv, jnp.clip(ratio, 1.0 - eps_low, 1.0 + eps_high) * adv)
        per_token = -surrogate
        clip = _clip_metrics(ratio, jnp.broadcast_to(adv, ratio.shape), eps_low, eps_high, lambda x: _token_mean(x, mask))
    if is_weight is not None:
        per_token = per_token * is_weight
    pg = reduce(per_token, mask)
    kl_term = reduce(kl, mask)
    loss = pg + hyper.beta * kl_term
    return loss, {"loss/policy": pg, "kl": _token_mean(kl, mask), **clip}


def _gspo_loss(logp, old_logp, kl, advantages, mask, hyper, is_weight=None) -> tuple[Array, dict]:
    m = mask.astype(jnp.float32)
    count = jnp.sum(m, axis=1)
    has = (count > 0).astype(jnp.float32)
    log_s = jnp.sum((logp - old_logp) * m, axis=1) / jnp.maximum(count, 1.0)
    s = jnp.exp(log_s)
    surrogate = jnp.minimum(s * advantages, jnp.clip(s, 1.0 - hyper.eps_low, 1.0 + hyper.eps_high) * advantages)
    if is_weight is not None:  # a sequence's surrogate times its tokens' mean weight
        surrogate = surrogate * jnp.sum(is_weight * m, axis=1) / jnp.maximum(count, 1.0)
    seq_mean = lambda x: jnp.sum(x * has) / jnp.maximum(jnp.sum(has), 1.0)  # noqa: E731
    pg = seq_mean(-surrogate)
    loss = pg + hyper.beta * _seq_mean(kl, mask)
    clip = _clip_metrics(s, advantages, hyper.eps_low, hyper.eps_high, seq_mean)
    return loss, {"loss/policy": pg, "kl": _token_mean(kl, mask), **clip}


def overlong_shaping(length: Array, max_len: int, buffer: int) -> Array:
    """DAPO's soft overlong punishment (Yu et al. 2025, eq. 13), float32 like ``length``.

    ``0`` if ``length <= max_len - buffer``; ``(max_len - buffer - length) / buffer`` in the
    buffer (down to -1 at ``max_len``); ``-1`` beyond. ``buffer == 0`` gives 0 everywhere.
    """
    if buffer <= 0:
        return jnp.zeros(jnp.shape(length), jnp.float32)
    start = max_len - buffer
    pen = (start - length.astype(jnp.float32)) / buffer
    return jnp.clip(jnp.where(length <= start, 0.0, pen), -1.0, 0.0).astype(jnp.float32)


def select_groups(rewards: Array, num_keep: int) -> tuple[Array, Array]:
    """Dynamic sampling with static shapes: indices of ``num_keep`` groups and their validity.

    ``rewards``: float32 ``[P', G]``. Groups with non-zero spread come first (in their
    original order), then the rest; a kept group with zero spread is marked invalid.
    Returns ``(idx int32 [num_keep], valid bool [num_keep])``.
    """
    spread = jnp.max(rewards, axis=1) > jnp.min(rewards, axis=1)
    order = jnp.argsort(~spread, stable=True)[:num_keep]
    return order.astype(jnp.int32), spread[order]
