"""Asynchronous GRPO as a schedule (``grpo.off_policy``): the parameter ring and the
importance-sampling correction, pure functions of arrays.

**The schedule.** With staleness ``k > 0`` the train state holds a ring of ``k`` snapshots of
the trainable parameters (``GRPOState.behaviour``, leading axis ``k``; under LoRA the adapters
only). Update ``t`` (``update_step == t``) samples its rollouts with slot ``t mod k``, which
holds the parameters at the start of update ``max(t - k, 0)``, then writes the parameters at
its own start into that slot. So update ``t`` trains on samples of policy version
``max(t - k, 0)``: the first ``k`` updates use the initial parameters, every later one the
parameters of ``k`` updates ago. Nothing lives on the host: a checkpoint holds the ring and
a resumed run samples exactly what the uninterrupted one does.

**The correction** (``docs/async_grpo.md`` has the formula and the peers' names): the weight
of a sample is ``pi_old / pi_behaviour``, ``pi_old`` the policy at the start of the update
(the PPO ratio's denominator), per token or per sequence (the product over its tokens);
``tis`` truncates it at ``cap``, ``mis`` zeroes it above ``cap`` (TRL's
``vllm_importance_sampling_mode`` ``*_truncate`` / ``*_mask``). It multiplies each token's
surrogate, not the KL term.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

Array = jax.Array

#: Log-weights are clamped to [-LOG_WEIGHT_BOUND, LOG_WEIGHT_BOUND] before exp (verl's bound,
#: exp(+-20)): a long sequence's summed log-ratio stays finite.
LOG_WEIGHT_BOUND = 20.0


def init_ring(params, k: int):
    """``k`` copies of ``params`` stacked on a leading axis (``None`` for ``k == 0``)."""
    if k == 0:
        return None
    return jax.tree_util.tree_map(lambda x: jnp.broadcast_to(x[None], (k,) + x.shape).copy(), params)


def behaviour_slot(ring, update_step: Array, k: int):
    """The parameters that sample update ``update_step``'s rollouts: slot ``update_step mod k``."""
    i = update_step % k
    return jax.tree_util.tree_map(lambda r: jax.lax.dynamic_index_in_dim(r, i, keepdims=False), ring)


def push(ring, update_step: Array, params, k: int):
    """The ring after update ``update_step``: ``params`` (its start's) in slot ``update_step mod k``."""
    if ring is None:
        return None
    i = update_step % k
    return jax.tree_util.tree_map(lambda r, p: jax.lax.dynamic_update_index_in_dim(r, p.astype(r.dtype), i, 0), ring, params)


def version(update_step: Array, k: int) -> Array:
    """int32 []: the policy version (the update whose starting parameters sampled) of update
    ``update_step``'s rollouts, ``max(update_step - k, 0)``."""
    return jnp.maximum(update_step - k, 0).astype(jnp.int32)


def importance_weights(old_logp: Array, behaviour_logp: Array, mask: Array, correction: str, level: str,
                       cap: float) -> tuple[Array, dict]:
    """The off-policy correction of a batch and its diagnostics.

    Args:
      old_logp: float32 ``[N, T]``, log pi_old(a_t), the parameters at the update's start.
      behaviour_logp: float32 ``[N, T]``, log pi_behaviour(a_t), the parameters that sampled.
      mask: bool ``[N, T]``, tokens that count.
      correction: ``"tis"`` (``min(w, cap)``), ``"mis"`` (``w`` if ``w <= cap`` else 0) or
        ``"none"`` (1) (static).
      level: ``"token"`` (``w_t = pi_old(a_t) / pi_b(a_t)``) or ``"sequence"`` (``w = prod_t w_t``
        over the sequence's tokens, the same on each of them) (static).
      cap: the threshold ``C`` (static).
    Returns:
      ``(weights [N, T] in old_logp's dtype, metrics)``: ``weights`` is 0 on masked tokens; ``metrics``:
      ``off_policy/ess`` (normalised effective sample size ``(sum w)^2 / (n sum w^2)`` of the raw
      weights over the tokens, or the sequences, that count; 1 when on-policy),
      ``off_policy/kl`` (k3 estimate of KL(behaviour || pi_old), per token), ``off_policy/clipped_frac``
      and ``off_policy/masked_frac`` (the share of weights above ``cap`` that ``tis`` truncated
      or ``mis`` zeroed), ``off_policy/weight_mean`` (the applied weights' mean).
    """
    weights, sums = weight_sums(old_logp, behaviour_logp, mask, correction, level, cap)
    return weights, metrics_from_sums(sums, correction)


def weight_sums(old_logp: Array, behaviour_logp: Array, mask: Array, correction: str, level: str,
                cap: float) -> tuple[Array, dict]:
    """:func:`importance_weights`' weights and, instead of its metrics, the sums they are ratios
    of (``{"units", "w", "w2", "tokens", "kl", "over", "applied"}``, each ``[]``): sums over
    parts of a batch add up to the whole batch's, and scaling all of them alike leaves
    :func:`metrics_from_sums` unchanged, so a mean of the parts' sums does too."""
    m = mask.astype(jnp.float32)
    diff = (old_logp - behaviour_logp) * m
    if level == "sequence":
        log_w = jnp.sum(diff, axis=1, keepdims=True)  # [N, 1]
        units = (jnp.sum(m, axis=1, keepdims=True) > 0).astype(jnp.float32)
    else:
        log_w, units = diff, m
    raw = jnp.exp(jnp.clip(log_w, -LOG_WEIGHT_BOUND, LOG_WEIGHT_BOUND))
    over = (raw > cap).astype(jnp.float32) * units
    if correction == "tis":
        applied = jnp.minimum(raw, cap)
    elif correction == "mis":
        applied = jnp.where(raw > cap, 0.0, raw)
    else:
        applied = jnp.ones_like(raw)
    r = jnp.exp(diff)  # pi_old / pi_b per token (1 on masked tokens)
    sums = {"units": jnp.sum(units), "w": jnp.sum(raw * units), "w2": jnp.sum(raw**2 * units), "tokens": jnp.sum(m),
            "kl": jnp.sum((r - 1.0 - diff) * m), "over": jnp.sum(over), "applied": jnp.sum(applied * units)}
    weights = (jnp.broadcast_to(applied, mask.shape) * m).astype(old_logp.dtype)
    return weights, sums


def metrics_from_sums(sums: dict, correction: str) -> dict:
    """The ``off_policy/`` metrics of :func:`importance_weights` from :func:`weight_sums`' sums."""
    def ratio(num, den):
        return jnp.where(den > 0, num / jnp.where(den > 0, den, 1.0), 0.0)

    n, s1, s2 = sums["units"], sums["w"], sums["w2"]
    return {
        "off_policy/ess": jnp.where(s2 > 0, ratio(s1 * s1, n * s2), 1.0),
        "off_policy/kl": ratio(sums["kl"], sums["tokens"]),
        "off_policy/clipped_frac": ratio(sums["over"], n) if correction == "tis" else jnp.zeros(()),
        "off_policy/masked_frac": ratio(sums["over"], n) if correction == "mis" else jnp.zeros(()),
        "off_policy/weight_mean": ratio(sums["applied"], n),
    }
