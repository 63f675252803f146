"""The GRPO family on the shared env contract: group rollouts, group-relative advantages and
the clipped-surrogate losses of LLM post-training, all inside one XLA program.

One update (:func:`update`):

1. **Group rollout.** ``P`` reset keys; each is used ``G`` times, so the ``G`` members of a
   group start from the *same* prompt / start state, and act with *different* sampling keys
   (temperature sampling). Episodes run in lockstep for ``T`` steps (a token task's maximum
   completion length, a control env's step limit); finished members are frozen and masked.
   A token task's policy is a causal transformer acting token by token with a key/value
   cache (:mod:`jaxrl.models.transformer`); a control env's is an MLP. Each member's score is its
   episodic return — for a token task, the verifier's reward of the completion.
2. **Batch shaping** (DAPO): optional soft overlong punishment, then dynamic sampling with
   static shapes: ``oversample * P`` groups are generated and the ``P`` kept are those with
   non-zero reward spread first; kept groups whose rewards are all equal are masked out.
3. **Advantages** (:func:`group_advantages`): std-normalised (``grpo``, ``dapo``, ``cispo``,
   ``gspo``), mean-centred only (``dr_grpo``) or leave-one-out (``rloo``). With
   ``token_credit`` every token gets its own (:func:`token_advantages`): the group-centred
   reward-to-go, which differs from the sequence advantage when the env pays rewards before
   the last step (a token task's ``params.step_rewards``).
4. **Optimisation**: ``num_epochs`` passes x ``num_minibatches`` over the sequences; the
   loss (:func:`policy_loss`) uses importance ratios against the behaviour log-probs, and an
   optional k3 KL penalty to a frozen reference policy (the initial parameters).

Loss variants (``loss_type``), with ``r_t = pi(a_t) / pi_old(a_t)``, ``A`` the sequence's
advantage and ``m_t`` the valid-token mask:

``grpo``    Shao et al. 2024 (DeepSeekMath), TRL ``loss_type="grpo"``:
            ``A = (R - mean_g R) / (std_g R + 1e-4)`` (unbiased std, as TRL),
            ``L = mean_i [ sum_t m_t l_t / sum_t m_t ]``,
            ``l_t = -min(r_t A, clip(r_t, 1 - eps_low, 1 + eps_high) A) + beta k3_t``.
``dr_grpo`` Liu et al. 2025 (Dr. GRPO, "Understanding R1-Zero-like training"): ``A = R -
            mean_g R`` (no std), ``L = sum_{i,t} m_t l_t / (N * T)`` (a constant normaliser:
            no length bias).
``dapo``    Yu et al. 2025 (DAPO): clip-higher (``eps_high > eps_low``, e.g. 0.28 / 0.2),
            token-level mean ``L = sum_{i,t} m_t l_t / sum_{i,t} m_t``; with
            ``dynamic_sampling`` and ``overlong_buffer`` (config) for the full recipe.
``rloo``    Ahmadian et al. 2024 ("Back to Basics"), Kool et al. 2019: leave-one-out baseline
            ``A_i = R_i - mean_{j != i} R_j = G / (G - 1) (R_i - mean_g R)``, with GRPO's
            clipped surrogate and per-sequence mean.
``cispo``   MiniMax-M1 (2025): ``l_t = -sg(clip(r_t, 1 - eps_low, 1 + eps_high)) A log pi(a_t)
            + beta k3_t``, token-level mean. The truncated importance weight is a constant
            (stop-gradient), so every token keeps a gradient (no token is clipped away).
``gspo``    Zheng et al. 2025 (Qwen, GSPO): sequence ratio ``s_i = exp(sum_t m_t (log pi -
            log pi_old) / sum_t m_t)``, ``L = mean_i -min(s_i A, clip(s_i, 1 - eps_low, 1 +
            eps_high) A) + beta mean_t k3``; the paper's eps are ~3e-4 / 4e-4.

KL: k3 estimator (Schulman 2020) ``k3 = exp(ref - logp) - (ref - logp) - 1 >= 0`` per token,
weight ``beta``; the reference is only evaluated when ``beta > 0`` (static).

Metrics follow TRL's names: ``reward``, ``reward_std`` (mean within-group std),
``rewards/<term>/mean`` and ``/std`` for every verifier term, ``frac_reward_zero_std``,
``clip_ratio/low_mean``, ``clip_ratio/high_mean``, ``clip_ratio/region_mean``, ``kl``,
``entropy``, ``completions/mean_length``, ``completions/clipped_ratio`` (truncated fraction),
plus ``loss``, ``grad_norm``, ``return_mean`` and ``curriculum_level``.

Static vs traced: everything in :class:`GRPOConfig` that changes shapes or the program
(sizes, counts, ``loss_type``, whether ``beta > 0``) is static; the learning rate, clip
ranges, KL coefficient and sampling temperature live in :class:`GRPOHyper` inside the state,
so a sweep over them is one vmapped program.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Callable, Literal, NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax
from flax import struct

from jaxrl.algos.common import batching
from jaxrl.algos import base
from jaxrl.algos.base import Algorithm, Plan
from jaxrl.core.env import Environment, replace_params, tree_select
from jaxrl.models.transformer import TransformerLM

Array = jax.Array
LOSS_TYPES = ("grpo", "dr_grpo", "dapo", "rloo", "cispo", "gspo")
ADV_EPS = 1e-4  # TRL's epsilon in (R - mean) / (std + eps)

#: :data:`jaxrl.algos.base.COMPILER_OPTIONS` (the GRPO chunk is many small launch-bound
#: kernels: decode steps of a tiny transformer, per-token env steps).
COMPILER_OPTIONS = base.COMPILER_OPTIONS


# =======================================================================================
# Config
# =======================================================================================


@dataclasses.dataclass(frozen=True)
class GRPOConfig:
    """GRPO-family hyperparameters (the ``grpo:`` section of a run config)."""

    loss_type: Literal["grpo", "dr_grpo", "dapo", "rloo", "cispo", "gspo"] = "grpo"
    num_prompts: int = 32  # P: groups (prompts / start states) per update
    group_size: int = 8  # G: generations per group (same reset key, different sampling keys)
    num_updates: int = 100  # updates in the run
    num_epochs: int = 1  # optimisation passes over each batch (TRL's num_iterations)
    num_minibatches: int = 1  # gradient steps per pass; must divide P * G
    lr: float = 1e-3  # Adam learning rate (traced)
    adam_b1: float = 0.9
    adam_b2: float = 0.99
    warmup_updates: int = 0  # linear learning-rate warm-up over this many updates
    lr_end_frac: float = 1.0  # the learning rate decays linearly to lr * lr_end_frac at num_updates
    max_grad_norm: float = 1.0  # global-norm gradient clipping
    eps_low: float = 0.2  # clip range below 1 (traced)
    eps_high: float = 0.2  # clip range above 1; DAPO's clip-higher uses 0.28 (traced)
    beta: float = 0.0  # KL-to-reference coefficient; 0 skips the reference (static: > 0)
    temperature: float = 1.0  # sampling temperature of rollouts and of the loss (traced)
    dynamic_sampling: bool = False  # DAPO: mask groups whose rewards are all equal
    oversample: int = 1  # generate oversample * P groups and keep P (non-zero spread first)
    overlong_buffer: int = 0  # DAPO soft overlong punishment window L_cache (0 = off)
    overlong_penalty: float = 1.0  # scale of that punishment
    token_credit: bool = False  # per-token advantages: group-centred reward-to-go (needs step rewards
    #                             from the env to differ from the sequence advantage; not with gspo)
    credit_discount: float = 1.0  # gamma of that reward-to-go (1 = undiscounted; static)
    scale_rewards: Literal["group", "batch"] = "group"  # std-scaled losses: divide by the group's or the batch's reward std
    max_steps: int = 0  # rollout length T; 0 = the token task's max completion length or
    #                     the env's params.max_steps_in_episode
    policy: Literal["auto", "transformer", "mlp"] = "auto"  # auto: transformer for token tasks
    d_model: int = 64  # transformer width
    n_layers: int = 2  # transformer blocks
    n_heads: int = 4  # attention heads
    positions: Literal["learned", "rope"] = "learned"  # transformer position encoding
    tie_embeddings: bool = False  # transformer output head = the token embedding (GPT-2 weight tying)
    smear_keys: bool = False  # transformer keys mixed with the previous position's (one-layer induction heads)
    hidden: tuple[int, ...] = (64, 64)  # MLP policy hidden widths
    eval_episodes: int = 512  # held-out prompts (token tasks) or episodes for evaluate
    eval_params: dict = dataclasses.field(default_factory=dict)  # env param overrides at eval
    curriculum_param: str = ""  # env params field raised by the curriculum ("" = off)
    curriculum_start: int = 1  # its first value
    curriculum_stop: int = 1  # its last value
    curriculum_metric: str = "exact_match"  # batch mean of this info key (else the return)
    curriculum_threshold: float = 0.9  # ... must reach this to advance one level
    curriculum_step: int = 1  # a level raises the param by this much (capped at curriculum_stop)


@struct.dataclass
class GRPOHyper:
    """Traced hyperparameters (vmap over them for sweeps)."""

    lr: Array  # float32 []
    eps_low: Array  # float32 []
    eps_high: Array  # float32 []
    beta: Array  # float32 []
    temperature: Array  # float32 []


def hyperparams(cfg: GRPOConfig, **overrides) -> GRPOHyper:
    """The traced hyperparameters of ``cfg`` (``overrides`` replace fields)."""
    values = {k: overrides.get(k, getattr(cfg, k)) for k in ("lr", "eps_low", "eps_high", "beta", "temperature")}
    return GRPOHyper(**{k: jnp.asarray(v, jnp.float32) for k, v in values.items()})


def _check(ok: bool, key: str, msg: str) -> None:
    if not ok:
        raise ValueError(f"{key}: {msg}")


def validate(cfg: GRPOConfig) -> None:
    """Reject impossible configs with ``ValueError("<key>: <message>")``."""
    _check(cfg.loss_type in LOSS_TYPES, "loss_type", f"expected one of {LOSS_TYPES}, got {cfg.loss_type!r}")
    for name in ("num_prompts", "num_updates", "num_epochs", "num_minibatches", "oversample", "eval_episodes"):
        _check(getattr(cfg, name) >= 1, name, f"must be >= 1, got {getattr(cfg, name)}")
    _check(cfg.group_size >= 2, "group_size", f"group-relative advantages need >= 2 generations, got {cfg.group_size}")
    n = cfg.num_prompts * cfg.group_size
    _check(n % cfg.num_minibatches == 0, "num_minibatches", f"{cfg.num_minibatches} does not divide num_prompts * group_size = {n}")
    _check(cfg.lr > 0, "lr", f"must be > 0, got {cfg.lr}")
    _check(0 <= cfg.eps_low < 1, "eps_low", f"must be in [0, 1), got {cfg.eps_low}")
    _check(cfg.eps_high >= 0, "eps_high", f"must be >= 0, got {cfg.eps_high}")
    _check(cfg.beta >= 0, "beta", f"must be >= 0, got {cfg.beta}")
    _check(cfg.temperature > 0, "temperature", f"must be > 0, got {cfg.temperature}")
    _check(cfg.max_grad_norm > 0, "max_grad_norm", f"must be > 0, got {cfg.max_grad_norm}")
    _check(cfg.max_steps >= 0, "max_steps", f"must be >= 0, got {cfg.max_steps}")
    _check(cfg.overlong_buffer >= 0, "overlong_buffer", f"must be >= 0, got {cfg.overlong_buffer}")
    _check(cfg.warmup_updates >= 0, "warmup_updates", f"must be >= 0, got {cfg.warmup_updates}")
    _check(0.0 <= cfg.lr_end_frac <= 1.0, "lr_end_frac", f"must be in [0, 1], got {cfg.lr_end_frac}")
    _check(cfg.d_model % cfg.n_heads == 0, "d_model", f"{cfg.d_model} is not divisible by n_heads={cfg.n_heads}")
    _check(cfg.oversample == 1 or cfg.dynamic_sampling, "oversample", "> 1 needs dynamic_sampling: true")
    _check(not (cfg.token_credit and cfg.loss_type == "gspo"), "token_credit", "gspo's ratio and advantage are per sequence; use another loss_type")
    _check(0.0 <= cfg.credit_discount <= 1.0, "credit_discount", f"must be in [0, 1], got {cfg.credit_discount}")
    if cfg.curriculum_param:
        _check(cfg.curriculum_start <= cfg.curriculum_stop, "curriculum_stop", f"must be >= curriculum_start ({cfg.curriculum_start})")
        _check(cfg.curriculum_step >= 1, "curriculum_step", f"must be >= 1, got {cfg.curriculum_step}")


def derive(cfg: GRPOConfig) -> Plan:
    """Static counts without an env: env steps per update = generated episodes x ``T`` with
    ``T = max_steps``, or *episodes* (T = 1) when ``max_steps`` is 0 because the rollout
    length then comes from the env. :func:`make_grpo`'s ``Algorithm.plan`` (what the trainer
    reports) always uses the real ``T``."""
    steps = cfg.max_steps or 1
    return Plan(
        num_updates=cfg.num_updates,
        env_steps_per_update=cfg.oversample * cfg.num_prompts * cfg.group_size * steps,
        grad_steps_per_update=cfg.num_epochs * cfg.num_minibatches,
    )


# =======================================================================================
# Advantages and losses (pure functions; the tests' specification)
# =======================================================================================


def _group_stats(rewards: Array, valid: Array) -> tuple[Array, Array, Array, Array]:
    """``(v [P, G], n [P, 1], mean [P, 1], centred [P, G])`` over each group's valid members."""
    v = valid.astype(jnp.float32)
    n = jnp.sum(v, axis=1, keepdims=True)
    mean = jnp.sum(rewards * v, axis=1, keepdims=True) / jnp.maximum(n, 1.0)
    return v, n, mean, (rewards - mean) * v


def _group_std(centred: Array, n: Array) -> Array:
    """The unbiased std ``[P, 1]`` of each group (0 for a single member)."""
    return jnp.sqrt(jnp.sum(centred**2, axis=1, keepdims=True) / jnp.maximum(n - 1.0, 1.0))


def _check_kind(kind: str) -> None:
    if kind not in ("std", "batch_std", "mean", "loo"):
        raise ValueError(f"unknown advantage kind {kind!r}: expected 'std', 'batch_std', 'mean' or 'loo'")


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
    if kind == "std":
        scale = 1.0 / (_group_std(centred, n) + ADV_EPS)
    elif kind == "batch_std":
        scale = jnp.broadcast_to(1.0 / (_batch_std(rewards, valid) + ADV_EPS), n.shape)
    elif kind == "mean":
        scale = jnp.ones_like(n)
    else:
        scale = jnp.where(n > 1, n / jnp.maximum(n - 1.0, 1.0), 0.0)
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
        ``"mean"`` — ``R - mean`` (Dr. GRPO); ``"loo"`` — ``R_i - mean_{j != i} R_j`` (RLOO).
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
    else:
        adv = jnp.where(n > 1, centred * n / jnp.maximum(n - 1.0, 1.0), 0.0)
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


def advantage_kind(loss_type: str, scale_rewards: str = "group") -> str:
    """Which :func:`group_advantages` a loss variant uses (``scale_rewards: batch`` swaps the
    group std of the std-scaled variants for the batch std)."""
    kind = {"dr_grpo": "mean", "rloo": "loo"}.get(loss_type, "std")
    return "batch_std" if kind == "std" and scale_rewards == "batch" else kind


def k3_kl(logp: Array, ref_logp: Array) -> Array:
    """Per-token k3 estimate of KL(pi || ref): ``exp(ref - logp) - (ref - logp) - 1 >= 0``."""
    d = ref_logp - logp
    return jnp.exp(d) - d - 1.0


def _seq_mean(x: Array, mask: Array) -> Array:
    """Mean over sequences that have a valid token of each one's token mean. ``[N, T] -> []``."""
    m = mask.astype(jnp.float32)
    per_seq = jnp.sum(x * m, axis=1) / jnp.maximum(jnp.sum(m, axis=1), 1.0)
    has = (jnp.sum(m, axis=1) > 0).astype(jnp.float32)
    return jnp.sum(per_seq * has) / jnp.maximum(jnp.sum(has), 1.0)


def _token_mean(x: Array, mask: Array) -> Array:
    m = mask.astype(jnp.float32)
    return jnp.sum(x * m) / jnp.maximum(jnp.sum(m), 1.0)


def _constant_mean(x: Array, mask: Array) -> Array:
    return jnp.sum(x * mask.astype(jnp.float32)) / (x.shape[0] * x.shape[1])


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
      loss_type: one of :data:`LOSS_TYPES` (static).
    Returns:
      ``(loss [], metrics)`` with ``loss/policy``, ``kl`` and the clip ratios.
    """
    if loss_type not in LOSS_TYPES:
        raise ValueError(f"unknown loss_type {loss_type!r}: expected one of {LOSS_TYPES}")
    old_logp = jax.lax.stop_gradient(old_logp)
    adv = advantages[:, None] if advantages.ndim == 1 else advantages
    kl = k3_kl(logp, jax.lax.stop_gradient(ref_logp)) if ref_logp is not None else jnp.zeros_like(logp)
    reduce = {"grpo": _seq_mean, "rloo": _seq_mean, "dr_grpo": _constant_mean}.get(loss_type, _token_mean)
    eps_low, eps_high = hyper.eps_low, hyper.eps_high
    if loss_type == "gspo":
        return _gspo_loss(logp, old_logp, kl, advantages, mask, hyper)
    ratio = jnp.exp(logp - old_logp)
    if loss_type == "cispo":
        weight = jax.lax.stop_gradient(jnp.clip(ratio, 1.0 - eps_low, 1.0 + eps_high))
        per_token = -weight * adv * logp
        clipped = (ratio < 1.0 - eps_low) | (ratio > 1.0 + eps_high)
        clip = {
            "clip_ratio/low_mean": _token_mean((ratio < 1.0 - eps_low).astype(jnp.float32), mask),
            "clip_ratio/high_mean": _token_mean((ratio > 1.0 + eps_high).astype(jnp.float32), mask),
            "clip_ratio/region_mean": _token_mean(clipped.astype(jnp.float32), mask),
        }
    else:
        surrogate = jnp.minimum(ratio * adv, jnp.clip(ratio, 1.0 - eps_low, 1.0 + eps_high) * adv)
        per_token = -surrogate
        clip = _clip_metrics(ratio, jnp.broadcast_to(adv, ratio.shape), eps_low, eps_high, lambda x: _token_mean(x, mask))
    pg = reduce(per_token, mask)
    kl_term = reduce(kl, mask)
    loss = pg + hyper.beta * kl_term
    return loss, {"loss/policy": pg, "kl": _token_mean(kl, mask), **clip}


def _gspo_loss(logp, old_logp, kl, advantages, mask, hyper) -> tuple[Array, dict]:
    m = mask.astype(jnp.float32)
    count = jnp.sum(m, axis=1)
    has = (count > 0).astype(jnp.float32)
    log_s = jnp.sum((logp - old_logp) * m, axis=1) / jnp.maximum(count, 1.0)
    s = jnp.exp(log_s)
    surrogate = jnp.minimum(s * advantages, jnp.clip(s, 1.0 - hyper.eps_low, 1.0 + hyper.eps_high) * advantages)
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


# =======================================================================================
# Policies: a small named tuple of pure functions
# =======================================================================================


class Policy(NamedTuple):
    """How the GRPO rollout and loss talk to a network.

    * ``init(key, obs) -> params`` with ``obs [N, *obs_shape]``.
    * ``start(params, obs [N, ...]) -> (carry, logits [N, A])`` on the first observation.
    * ``step(params, carry, obs [N, ...], action [N], t) -> (carry, logits [N, A])`` after
      action ``t`` led to ``obs``.
    * ``sequence_logits(params, obs [N, T, ...], actions [N, T]) -> logits [N, T, A]``: the
      logits every action was drawn from, in one pass (what the loss differentiates).
    """

    init: Callable
    start: Callable
    step: Callable
    sequence_logits: Callable


def _lm_init(model: TransformerLM, key, obs):
    return model.init(key, obs[:1, :1])


def _lm_start(model: TransformerLM, prompt_len: int, params, obs):
    logits, cache = model.apply(params, obs[:, :prompt_len], method=TransformerLM.prefill)
    return cache, logits[:, -1]


def _lm_step(model: TransformerLM, prompt_len: int, params, cache, obs, action, t):
    logits, cache = model.apply(params, action.astype(jnp.int32), prompt_len + t, cache, method=TransformerLM.decode)
    return cache, logits


def _lm_sequence_logits(model: TransformerLM, prompt_len: int, params, obs, actions):
    tokens = jnp.concatenate([obs[:, 0, :prompt_len], actions[:, :-1].astype(jnp.int32)], axis=1)
    logits = model.apply(params, tokens)
    return logits[:, prompt_len - 1 :]


def transformer_policy(model: TransformerLM, prompt_len: int) -> Policy:
    """A causal LM over a token task: the prompt is ``obs[:prompt_len]``, actions are tokens."""
    return Policy(
        functools.partial(_lm_init, model),
        functools.partial(_lm_start, model, prompt_len),
        functools.partial(_lm_step, model, prompt_len),
        functools.partial(_lm_sequence_logits, model, prompt_len),
    )


class MLPPolicy(nn.Module):
    """Logits of a categorical policy from a flat observation (torso: :class:`jaxrl.models.networks.MLP`)."""

    num_actions: int
    hidden: tuple[int, ...] = (64, 64)

    @nn.compact
    def __call__(self, obs: Array) -> Array:
        from jaxrl.models.networks import MLP, orthogonal

        x = jnp.asarray(obs, jnp.float32)
        h = MLP(self.hidden, "tanh", name="torso")(x)
        return nn.Dense(self.num_actions, kernel_init=orthogonal(0.01), name="head")(h)


def _mlp_init(model, key, obs):
    return model.init(key, obs[:1])


def _mlp_start(model, params, obs):
    return (), model.apply(params, obs)


def _mlp_step(model, params, carry, obs, action, t):
    return carry, model.apply(params, obs)


def _mlp_sequence_logits(model, params, obs, actions):
    return model.apply(params, obs)


def mlp_policy(model: MLPPolicy) -> Policy:
    """A memoryless MLP over flat observations (control envs)."""
    return Policy(
        functools.partial(_mlp_init, model),
        functools.partial(_mlp_start, model),
        functools.partial(_mlp_step, model),
        functools.partial(_mlp_sequence_logits, model),
    )


# =======================================================================================
# Group rollout
# =======================================================================================


@struct.dataclass
class Rollout:
    """``N`` lockstep episodes of ``T`` steps (``N = groups x G``)."""

    obs: Array  # [N, T, *obs_shape], observation each action was chosen on
    actions: Array  # int32 [N, T]
    logp: Array  # float32 [N, T], behaviour log-prob (at the sampling temperature)
    mask: Array  # bool [N, T], the step was taken inside the episode
    entropy: Array  # float32 [N, T], entropy of the sampling distribution
    rewards: Array  # float32 [N, T], reward of each step (0 on masked steps)
    returns: Array  # float32 [N], episodic return (a token task: the verifier's reward)
    length: Array  # int32 [N], steps taken
    truncated: Array  # bool [N], ended by a limit (or still running at T)
    final_info: dict  # str -> float32 [N], the env's info on each episode's last step


@struct.dataclass
class _Carry:
    env_state: Any
    obs: Array  # [N, *obs_shape]
    policy_carry: Any
    logits: Array  # float32 [N, A]
    alive: Array  # bool [N]
    returns: Array  # float32 [N]
    length: Array  # int32 [N]
    truncated: Array  # bool [N]
    final_info: dict
    key: Array


def _rollout_step(policy: Policy, env: Environment, greedy: bool, params, env_params, temperature, c: _Carry, t):
    key, k_act, k_env = jax.random.split(c.key, 3)
    scaled = c.logits / temperature
    if greedy:
        action = jnp.argmax(scaled, axis=-1).astype(jnp.int32)
    else:
        action = jax.random.categorical(k_act, scaled).astype(jnp.int32)
    log_probs = jax.nn.log_softmax(scaled)
    logp = jnp.take_along_axis(log_probs, action[:, None], axis=1)[:, 0]
    entropy = -jnp.sum(jnp.exp(log_probs) * log_probs, axis=-1)
    n = action.shape[0]
    new_state, ts = jax.vmap(env.step, in_axes=(0, 0, 0, None))(jax.random.split(k_env, n), c.env_state, action, env_params)
    alive = c.alive
    env_state = tree_select(alive, new_state, c.env_state)
    obs = tree_select(alive, ts.obs, c.obs)
    ended = alive & ts.done
    step_reward = jnp.where(alive, ts.reward, 0.0).astype(jnp.float32)
    final_info = tree_select(ended, ts.info, c.final_info)
    policy_carry, logits = policy.step(params, c.policy_carry, obs, action, t)
    new = _Carry(
        env_state,
        obs,
        policy_carry,
        logits,
        alive & ~ts.done,
        c.returns + step_reward,
        c.length + alive.astype(jnp.int32),
        c.truncated | (ended & ts.truncated & ~ts.terminated),
        final_info,
        key,
    )
    return new, (c.obs, action, logp, alive, entropy, step_reward)


def group_rollout(
    policy: Policy,
    env: Environment,
    env_params,
    params,
    reset_keys: Array,
    key: Array,
    num_steps: int,
    temperature: Array,
    greedy: bool = False,
) -> Rollout:
    """Roll ``N = len(reset_keys)`` episodes for ``num_steps`` lockstep steps.

    Members sharing a reset key start identically; ``key`` seeds the (different) action
    and env keys of every member. Finished members stay frozen (state, obs) and masked.
    """
    n = reset_keys.shape[0]
    env_state, ts = jax.vmap(env.reset, in_axes=(0, None))(reset_keys, env_params)
    policy_carry, logits = policy.start(params, ts.obs)
    zero_info = jax.tree_util.tree_map(jnp.zeros_like, ts.info)
    carry = _Carry(
        env_state, ts.obs, policy_carry, logits.astype(jnp.float32),
        jnp.ones((n,), jnp.bool_), jnp.zeros((n,), jnp.float32), jnp.zeros((n,), jnp.int32),
        jnp.zeros((n,), jnp.bool_), zero_info, key,
    )
    body = functools.partial(_rollout_step, policy, env, greedy, params, env_params, temperature)
    carry, (obs, actions, logp, mask, entropy, rewards) = jax.lax.scan(body, carry, jnp.arange(num_steps))
    swap = lambda x: jnp.swapaxes(x, 0, 1)  # noqa: E731  [T, N, ...] -> [N, T, ...]
    return Rollout(
        swap(obs), swap(actions), swap(logp), swap(mask), swap(entropy), swap(rewards),
        carry.returns, carry.length, carry.truncated | carry.alive, carry.final_info,
    )


# =======================================================================================
# Training state and one update
# =======================================================================================


@struct.dataclass
class GRPOState:
    """Everything a GRPO run depends on (checkpointed whole; exact resume)."""

    params: Any  # policy parameters
    ref_params: Any  # frozen reference policy (the initial parameters) for the KL term
    opt_state: Any  # optax state
    hyper: GRPOHyper  # traced hyperparameters
    key: Array  # PRNG key
    update_step: Array  # int32 [], updates done
    level: Array  # int32 [], curriculum level (the value of cfg.curriculum_param)


class Setup(NamedTuple):
    """Static pieces of one configured run (hashable parts and pure functions)."""

    cfg: GRPOConfig
    env: Environment
    env_params: Any
    policy: Policy
    num_steps: int  # T
    optimizer: optax.GradientTransformation


@struct.dataclass
class Batch:
    """One minibatch of sequences for the loss."""

    obs: Array  # [n, T, *obs_shape]
    actions: Array  # int32 [n, T]
    old_logp: Array  # float32 [n, T]
    ref_logp: Array  # float32 [n, T] (zeros when beta == 0)
    mask: Array  # bool [n, T]
    advantages: Array  # float32 [n], or [n, T] with token_credit


def _token_logp(policy: Policy, params, obs, actions, temperature) -> tuple[Array, Array]:
    logits = policy.sequence_logits(params, obs, actions).astype(jnp.float32) / temperature
    log_probs = jax.nn.log_softmax(logits)
    logp = jnp.take_along_axis(log_probs, actions[..., None].astype(jnp.int32), axis=-1)[..., 0]
    entropy = -jnp.sum(jnp.exp(log_probs) * log_probs, axis=-1)
    return logp, entropy


def loss_fn(setup: Setup, hyper: GRPOHyper, params, batch: Batch) -> tuple[Array, dict]:
    """:func:`policy_loss` of ``params`` on ``batch``, plus its token entropy."""
    logp, entropy = _token_logp(setup.policy, params, batch.obs, batch.actions, hyper.temperature)
    ref = batch.ref_logp if setup.cfg.beta > 0 else None
    loss, metrics = policy_loss(logp, batch.old_logp, ref, batch.advantages, batch.mask, hyper, setup.cfg.loss_type)
    return loss, {**metrics, "entropy": _token_mean(jax.lax.stop_gradient(entropy), batch.mask)}


def _sgd_step(setup: Setup, hyper: GRPOHyper, lr: Array, carry, batch: Batch):
    params, opt_state = carry
    (loss, metrics), grads = jax.value_and_grad(functools.partial(loss_fn, setup, hyper), has_aux=True)(params, batch)
    updates, opt_state = setup.optimizer.update(grads, opt_state, params)
    updates = jax.tree_util.tree_map(lambda u: -lr * u, updates)
    params = optax.apply_updates(params, updates)
    return (params, opt_state), {**metrics, "loss": loss, "grad_norm": optax.tree.norm(grads)}


def _epoch(setup: Setup, hyper: GRPOHyper, lr: Array, batch: Batch, carry, key):
    n = batch.actions.shape[0]
    k = setup.cfg.num_minibatches
    perm = jax.random.permutation(key, n)
    shuffled = jax.tree_util.tree_map(lambda x: x[perm].reshape((k, n // k) + x.shape[1:]), batch)
    shuffled = batching.constrain_batch(shuffled, axis=1)  # data mesh: each device steps on its slice
    return jax.lax.scan(functools.partial(_sgd_step, setup, hyper, lr), carry, shuffled)


def _reward_metrics(rollout: Rollout, rewards: Array, group_rewards: Array, mask: Array) -> dict:
    std_g = jnp.std(group_rewards, axis=1, ddof=1)
    metrics = {
        "reward": jnp.mean(rewards),
        "reward_std": jnp.mean(std_g),
        "return_mean": jnp.mean(rollout.returns),
        "frac_reward_zero_std": jnp.mean((std_g == 0).astype(jnp.float32)),
        "completions/mean_length": jnp.mean(rollout.length.astype(jnp.float32)),
        "completions/clipped_ratio": jnp.mean(rollout.truncated.astype(jnp.float32)),
        "tokens_trained_frac": jnp.mean(mask.astype(jnp.float32)),
    }
    for name, value in rollout.final_info.items():
        metrics[f"rewards/{name}/mean"] = jnp.mean(value)
        metrics[f"rewards/{name}/std"] = jnp.std(value)
    return metrics


def _env_params_at(setup: Setup, level: Array):
    cfg = setup.cfg
    if not cfg.curriculum_param:
        return setup.env_params
    return setup.env_params.replace(**{cfg.curriculum_param: level})


def _next_level(setup: Setup, level: Array, rollout: Rollout) -> Array:
    cfg = setup.cfg
    if not cfg.curriculum_param:
        return level
    score = rollout.final_info.get(cfg.curriculum_metric, rollout.returns)
    up = jnp.mean(score) >= cfg.curriculum_threshold
    return jnp.where(up, jnp.minimum(level + cfg.curriculum_step, cfg.curriculum_stop), level).astype(jnp.int32)


def collect(setup: Setup, state: GRPOState, key: Array) -> tuple[Rollout, Batch, dict]:
    """Group rollout, shaping, selection and advantages: the batch of one update."""
    cfg = setup.cfg
    p_all, g = cfg.oversample * cfg.num_prompts, cfg.group_size
    k_reset, k_roll = jax.random.split(key)
    reset_keys = jnp.repeat(jax.random.split(k_reset, p_all), g, axis=0)  # [P' * G]: groups share keys
    reset_keys = batching.constrain_batch(reset_keys)  # whole groups per device on a data mesh; no-op otherwise
    env_params = _env_params_at(setup, state.level)
    ro = group_rollout(setup.policy, setup.env, env_params, state.params, reset_keys, k_roll, setup.num_steps, state.hyper.temperature)
    penalty = cfg.overlong_penalty * overlong_shaping(ro.length, setup.num_steps, cfg.overlong_buffer)
    rewards = ro.returns + penalty
    grouped = rewards.reshape(p_all, g)
    if cfg.dynamic_sampling:
        idx, group_valid = select_groups(grouped, cfg.num_prompts)
    else:
        idx, group_valid = jnp.arange(cfg.num_prompts), jnp.ones((cfg.num_prompts,), jnp.bool_)
    members = (idx[:, None] * g + jnp.arange(g)[None]).reshape(-1)
    ro = jax.tree_util.tree_map(lambda x: x[members], ro)
    grouped = grouped[idx]
    valid = jnp.broadcast_to(group_valid[:, None], grouped.shape)
    if cfg.token_credit:
        last = jnp.arange(setup.num_steps)[None] == (ro.length - 1)[:, None]  # the penalty lands on the last step
        step_r = (ro.rewards + penalty[members][:, None] * last).reshape(cfg.num_prompts, g, -1)
        adv = token_advantages(step_r, valid, advantage_kind(cfg.loss_type, cfg.scale_rewards), cfg.credit_discount).reshape(cfg.num_prompts * g, -1)
    else:
        adv = group_advantages(grouped, valid, advantage_kind(cfg.loss_type, cfg.scale_rewards)).reshape(-1)
    mask = ro.mask & jnp.repeat(group_valid, g)[:, None]
    ref_logp = jnp.zeros_like(ro.logp)
    if cfg.beta > 0:
        ref_logp, _ = _token_logp(setup.policy, state.ref_params, ro.obs, ro.actions, state.hyper.temperature)
    batch = Batch(ro.obs, ro.actions, ro.logp, jax.lax.stop_gradient(ref_logp), mask, adv)
    return ro, batch, _reward_metrics(ro, grouped.reshape(-1), grouped, mask)


def current_lr(setup: Setup, state: GRPOState) -> Array:
    """float32 ``[]``: ``hyper.lr`` with the linear warm-up and the linear decay to
    ``lr * lr_end_frac`` at ``num_updates`` (both static; each off by default)."""
    cfg = setup.cfg
    step = state.update_step.astype(jnp.float32)
    lr = state.hyper.lr
    if cfg.lr_end_frac < 1.0:
        lr = lr * (1.0 - (1.0 - cfg.lr_end_frac) * jnp.minimum(step / cfg.num_updates, 1.0))
    if cfg.warmup_updates > 0:
        lr = lr * jnp.minimum((step + 1.0) / cfg.warmup_updates, 1.0)
    return lr


def update(setup: Setup, state: GRPOState) -> tuple[GRPOState, dict]:
    """One GRPO update: collect a group batch, then epochs x minibatches of gradient steps."""
    key, k_collect, k_epochs = jax.random.split(state.key, 3)
    ro, batch, metrics = collect(setup, state, k_collect)
    lr = current_lr(setup, state)
    epoch = functools.partial(_epoch, setup, state.hyper, lr, batch)
    (params, opt_state), losses = jax.lax.scan(epoch, (state.params, state.opt_state), jax.random.split(k_epochs, setup.cfg.num_epochs))
    metrics.update(jax.tree_util.tree_map(jnp.mean, losses))
    level = _next_level(setup, state.level, ro)
    metrics["curriculum_level"] = state.level.astype(jnp.float32)
    new = state.replace(params=params, opt_state=opt_state, key=key, update_step=state.update_step + 1, level=level)
    return new, {k: jnp.asarray(v, jnp.float32) for k, v in metrics.items()}


def init(setup: Setup, key: Array, hyper: GRPOHyper | None = None) -> GRPOState:
    """A fresh state: random policy, reference = a copy of it, Adam state, counters at 0."""
    cfg = setup.cfg
    k_params, k_obs, key = jax.random.split(key, 3)
    _, ts = setup.env.reset(k_obs, setup.env_params)
    params = setup.policy.init(k_params, ts.obs[None])
    ref = params if cfg.beta > 0 else None
    level = jnp.asarray(cfg.curriculum_start if cfg.curriculum_param else 0, jnp.int32)
    return GRPOState(
        params, ref, setup.optimizer.init(params), hyper if hyper is not None else hyperparams(cfg),
        key, jnp.zeros((), jnp.int32), level,
    )


# =======================================================================================
# Evaluation
# =======================================================================================


def _ci95(x: Array) -> Array:
    """Half-width of the normal-approximation 95% interval of the mean of ``x [N]``."""
    return 1.96 * jnp.std(x, ddof=1) / jnp.sqrt(x.shape[0])


def eval_rollout(setup: Setup, params, key: Array) -> Rollout:
    """Greedy episodes on the evaluation params (held-out prompts for token tasks)."""
    cfg = setup.cfg
    env_params = eval_env_params(setup.env_params, cfg)
    k_reset, k_roll = jax.random.split(key)
    reset_keys = jax.random.split(k_reset, cfg.eval_episodes)
    return group_rollout(setup.policy, setup.env, env_params, params, reset_keys, k_roll, setup.num_steps, jnp.float32(1.0), greedy=True)


def eval_env_params(env_params, cfg: GRPOConfig):
    """``env_params`` with ``cfg.eval_params`` applied and the held-out split switched on."""
    params = replace_params(env_params, **cfg.eval_params)
    if dataclasses.is_dataclass(params) and "held_out" in {f.name for f in dataclasses.fields(params)}:
        params = params.replace(held_out=True)
    return params


def evaluate(setup: Setup, state: GRPOState, key: Array) -> dict:
    """Greedy evaluation over ``eval_episodes`` (held-out prompts for token tasks).

    Returns ``episode_returns`` (float32 ``[E]``, the trainer's eval convention: per-episode
    return of the greedy policy, i.e. the verifier reward for token tasks), for a token
    task ``episode_returns_exact_match`` (the per-prompt 0/1 exact match, so ``jaxrl eval``
    summarises it with its own 95% interval), and scalars: ``return_mean``, ``return_ci95``,
    ``length_mean`` and, for every info key (e.g. ``exact_match``), its mean and ``_ci95``
    (normal-approximation half-width).
    """
    ro = eval_rollout(setup, state.params, key)
    out = {
        "episode_returns": ro.returns,
        "return_mean": jnp.mean(ro.returns),
        "return_ci95": _ci95(ro.returns),
        "length_mean": jnp.mean(ro.length.astype(jnp.float32)),
    }
    for name, value in ro.final_info.items():
        out[name] = jnp.mean(value)
        out[f"{name}_ci95"] = _ci95(value)
    if "exact_match" in ro.final_info:
        out["episode_returns_exact_match"] = ro.final_info["exact_match"]
    return out


def sample_completions(setup: Setup, params, key: Array, num: int = 5) -> list[tuple[str, str, float]]:
    """Host-side ``(prompt, completion, reward)`` strings of ``num`` greedy held-out episodes
    of a token task (for ``jaxrl eval`` and notebooks)."""
    from jaxrl_envs.text.vocab import decode

    ro = jax.device_get(eval_rollout(setup, params, key))
    lp = setup.env.prompt_len
    return [(decode(ro.obs[i, 0, :lp]), decode(ro.actions[i]), float(ro.returns[i])) for i in range(min(num, ro.returns.shape[0]))]



def eval_samples(env: Environment, env_params, cfg: GRPOConfig, state: GRPOState, key: Array, num: int = 5) -> list[str]:
    """Lines for ``jaxrl eval``: ``num`` greedy held-out prompts with their completions and
    rewards (token tasks only; an empty list for control envs)."""
    if not hasattr(env, "prompt_len"):
        return []
    setup = make_setup(env, env_params, cfg)
    return [f"{prompt!r} -> {completion!r}  reward {reward:.3f}" for prompt, completion, reward in sample_completions(setup, state.params, key, num)]


# =======================================================================================
# Building an Algorithm
# =======================================================================================


def rollout_length(env: Environment, env_params, cfg: GRPOConfig) -> int:
    """T: ``cfg.max_steps``, else a token task's max completion length, else the env's limit."""
    if cfg.max_steps:
        return int(cfg.max_steps)
    if hasattr(env, "max_completion_len"):
        return int(env.max_completion_len)
    limit = getattr(env_params, "max_steps_in_episode", None)
    if limit is None:
        raise ValueError(f"max_steps: {env.name} has no step limit; set grpo.max_steps")
    return int(limit)


def build_policy(env: Environment, env_params, cfg: GRPOConfig) -> Policy:
    """The transformer for token tasks (``policy: auto``), else an MLP over flat obs."""
    kind = cfg.policy
    is_token = hasattr(env, "prompt_len") and hasattr(env, "vocab_size")
    if kind == "auto":
        kind = "transformer" if is_token else "mlp"
    n_actions = getattr(env.action_space(env_params), "n", None)
    if n_actions is None:
        raise ValueError(f"policy: GRPO here needs a Discrete action space, {env.name} has {env.action_space(env_params)}")
    if kind == "transformer":
        if not is_token:
            raise ValueError(f"policy: 'transformer' needs a token task, {env.name} is not one")
        model = TransformerLM(env.vocab_size, env.prompt_len + env.max_completion_len, cfg.d_model, cfg.n_layers,
                              cfg.n_heads, positions=cfg.positions,
                              tie_embeddings=cfg.tie_embeddings, smear_keys=cfg.smear_keys)
        return transformer_policy(model, env.prompt_len)
    return mlp_policy(MLPPolicy(n_actions, tuple(cfg.hidden)))


def make_setup(env: Environment, env_params, cfg: GRPOConfig) -> Setup:
    validate(cfg)
    optimizer = optax.chain(
        optax.clip_by_global_norm(cfg.max_grad_norm),
        optax.scale_by_adam(b1=cfg.adam_b1, b2=cfg.adam_b2),
    )
    return Setup(cfg, env, env_params, build_policy(env, env_params, cfg), rollout_length(env, env_params, cfg), optimizer)


def make_grpo(env: Environment, env_params, cfg: GRPOConfig) -> Algorithm:
    """The :class:`~jaxrl.algos.base.Algorithm` of ``cfg`` on ``env``."""
    setup = make_setup(env, env_params, cfg)
    plan = Plan(
        num_updates=cfg.num_updates,
        env_steps_per_update=cfg.oversample * cfg.num_prompts * cfg.group_size * setup.num_steps,
        grad_steps_per_update=cfg.num_epochs * cfg.num_minibatches,
    )
    return Algorithm(
        init=functools.partial(init, setup),
        update=functools.partial(update, setup),
        evaluate=functools.partial(evaluate, setup),
        plan=plan,
    )


def _scan_update(update_fn, state, _):
    return update_fn(state)


def make_train(env: Environment, env_params, cfg: GRPOConfig, num_updates: int | None = None):
    """A pure ``train(key) -> (state, metrics [num_updates])`` (jit / vmap it)."""
    algo = make_grpo(env, env_params, cfg)
    n = cfg.num_updates if num_updates is None else num_updates
    return functools.partial(_train, algo, n)


def _train(algo: Algorithm, num_updates: int, key: Array):
    state = algo.init(key)
    return jax.lax.scan(functools.partial(_scan_update, algo.update), state, None, length=num_updates)


# Registered under ``algo: grpo`` (jaxrl.algos.registry imports this module at its end).
from jaxrl.algos.registry import AlgoEntry, register_algorithm  # noqa: E402

register_algorithm("grpo", AlgoEntry(config_cls=GRPOConfig, make=make_grpo, validate=validate, derive=derive), overwrite=True)
