"""GRPO-family losses and advantages against a float64 NumPy transcription of TRL's
``GRPOTrainer`` (``_compute_loss`` and the advantage block of
``_generate_and_score_completions``). Which TRL line each convention follows, and the
documented differences: docs/grpo_losses.md, "Against TRL"."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl.algos import grpo
from jaxrl.algos.grpo.losses import advantage_kind, group_advantages, policy_loss

N, T = 6, 5
RNG = np.random.default_rng(0)
OLD = np.log(RNG.uniform(0.2, 0.9, (N, T)))
LOGP = OLD + RNG.uniform(-0.5, 0.5, (N, T))  # ratios in [0.6, 1.65]: inside and outside the clip range
REF = OLD + RNG.uniform(-0.3, 0.3, (N, T))
ADV = RNG.normal(size=N)
MASK = np.arange(T)[None, :] < np.array([5, 3, 1, 4, 5, 2])[:, None]  # ragged, no empty row


def trl_loss(logp, old, ref, adv, mask, loss_type, eps_low, eps_high, beta, level="token", max_completion_length=T):
    """TRL's _compute_loss, transcribed (float64; one process, no gradient accumulation)."""
    m = mask.astype(np.float64)
    log_ratio = logp - old
    if level == "token":
        log_w = log_ratio
    else:  # importance_sampling_level == "sequence" (GSPO)
        log_w = ((log_ratio * m).sum(-1) / np.maximum(m.sum(-1), 1.0))[:, None]
    coef_1 = np.exp(log_w)
    if loss_type == "cispo":
        clamped = np.minimum(coef_1, eps_high)  # torch.clamp(coef_1, max=self.epsilon_high).detach()
        per_token_loss = -clamped * adv[:, None] * logp
    else:
        coef_2 = np.clip(coef_1, 1 - eps_low, 1 + eps_high)
        per_token_loss = -np.minimum(coef_1 * adv[:, None], coef_2 * adv[:, None])
    if beta != 0.0:
        per_token_loss = per_token_loss + beta * (np.exp(ref - logp) - (ref - logp) - 1)
    if loss_type == "grpo":
        return ((per_token_loss * m).sum(-1) / np.maximum(m.sum(-1), 1.0)).mean()
    if loss_type == "dr_grpo":
        return (per_token_loss * m).sum() / (per_token_loss.shape[0] * max_completion_length)
    return (per_token_loss * m).sum() / m.sum()  # dapo, cispo: num_items_in_batch


def trl_advantages(rewards, group_size, scale_rewards):
    """TRL's advantages: group mean, then the group's / the batch's unbiased std or none."""
    grouped = rewards.reshape(-1, group_size)
    mean = np.repeat(grouped.mean(1), group_size)
    if scale_rewards in ("group", "none"):
        std = np.repeat(grouped.std(1, ddof=1), group_size)
    else:
        std = np.full_like(rewards, rewards.std(ddof=1))
    adv = rewards - mean
    return adv / (std + 1e-4) if scale_rewards != "none" else adv


def numeric_grad(f, x, h=1e-6):
    g = np.zeros_like(x)
    for idx in np.ndindex(x.shape):
        d = np.zeros_like(x)
        d[idx] = h
        g[idx] = (f(x + d) - f(x - d)) / (2 * h)
    return g


# (our loss type, TRL loss_type, TRL importance_sampling_level)
CASES = [("grpo", "grpo", "token"), ("dapo", "dapo", "token"), ("dr_grpo", "dr_grpo", "token"), ("gspo", "grpo", "sequence")]


@pytest.mark.parametrize("ours, theirs, level", CASES)
@pytest.mark.parametrize("beta", [0.0, 0.04])
def test_loss_and_gradient_equal_trls_in_float64(ours, theirs, level, beta):
    eps_low, eps_high = (3e-2, 4e-2) if ours == "gspo" else (0.2, 0.28)
    with jax.enable_x64(True):
        hyper = grpo.GRPOHyper(*(jnp.float64(v) for v in (eps_low, eps_high, beta, 1.0)))
        ref = jnp.asarray(REF) if beta else None

        def mine(lp):
            return policy_loss(lp, jnp.asarray(OLD), ref, jnp.asarray(ADV), jnp.asarray(MASK), hyper, ours)[0]

        value, grad = jax.value_and_grad(mine)(jnp.asarray(LOGP))
        assert value.dtype == jnp.float64
        value, grad = float(value), np.asarray(grad)
    theirs_fn = lambda lp: trl_loss(lp, OLD, REF, ADV, MASK, theirs, eps_low, eps_high, beta, level)  # noqa: E731
    assert value == pytest.approx(theirs_fn(LOGP), rel=1e-12, abs=1e-14)
    np.testing.assert_allclose(grad, numeric_grad(theirs_fn, LOGP), rtol=1e-6, atol=1e-9)
    assert np.any(grad != 0)


def test_cispo_caps_the_weight_from_above_only_by_default():
    """TRL's cispo: ``clamp(coef_1, max=epsilon_high)``; ours caps at ``1 + eps_high`` (so
    TRL's ``epsilon_high = c`` is our ``eps_high = c - 1``) and, by default, never lifts a
    small ratio to ``1 - eps_low``; ``loss.cispo_clip_low: true`` restores the two-sided clip."""
    cap = 1.28
    with jax.enable_x64(True):
        hyper = grpo.GRPOHyper(*(jnp.float64(v) for v in (0.2, cap - 1.0, 0.0, 1.0)))

        def mine(lp, low=False):
            return policy_loss(lp, jnp.asarray(OLD), None, jnp.asarray(ADV), jnp.asarray(MASK), hyper, "cispo", low)[0]

        value, grad = jax.value_and_grad(mine)(jnp.asarray(LOGP))
        two_sided = float(mine(jnp.asarray(LOGP), True))
    theirs = lambda lp: trl_loss(lp, OLD, REF, ADV, MASK, "cispo", 0.2, cap, 0.0)  # noqa: E731
    assert float(value) == pytest.approx(theirs(LOGP), rel=1e-12)
    # the weight is a constant (detach): d loss / d logp = -w A m / sum(m)
    w = np.minimum(np.exp(LOGP - OLD), cap)
    np.testing.assert_allclose(np.asarray(grad), -w * ADV[:, None] * MASK / MASK.sum(), rtol=1e-12)
    assert np.any((np.exp(LOGP - OLD) < 0.8) & MASK)  # there are ratios the two-sided clip lifts
    assert two_sided != pytest.approx(float(value), rel=1e-6)
    assert grpo.GRPOConfig().loss.cispo_clip_low is False


def test_fully_masked_rows_leave_the_per_sequence_mean():
    """The documented difference: TRL's ``grpo`` divides by every row, ours by the rows with a
    valid token (a group masked by dynamic sampling does not dilute the batch)."""
    mask = MASK.copy()
    mask[[1, 4]] = False
    hyper = grpo.GRPOHyper(*(jnp.float32(v) for v in (0.2, 0.2, 0.0, 1.0)))
    ours = float(policy_loss(jnp.asarray(LOGP, jnp.float32), jnp.asarray(OLD, jnp.float32), None, jnp.asarray(ADV, jnp.float32), jnp.asarray(mask), hyper, "grpo")[0])
    theirs = trl_loss(LOGP, OLD, REF, ADV, mask, "grpo", 0.2, 0.2, 0.0)
    assert ours == pytest.approx(theirs * N / (N - 2), rel=1e-5)


@pytest.mark.parametrize("scale", ["group", "batch", "none"])
@pytest.mark.parametrize("loss_type", ["grpo", "dapo", "dr_grpo", "cispo", "gspo", "rloo"])
def test_scale_rewards_applies_to_every_variant(loss_type, scale):
    g = 4
    rewards = RNG.integers(0, 3, size=3 * g).astype(np.float64)
    rewards[:g] = 1.0  # a zero-spread group: advantage 0, never NaN
    kind = advantage_kind(loss_type, scale)
    ours = np.asarray(group_advantages(jnp.asarray(rewards.reshape(-1, g), jnp.float32), jnp.ones((3, g), bool), kind)).reshape(-1)
    expected = trl_advantages(rewards, g, scale)
    if loss_type == "rloo":  # leave-one-out: G / (G - 1) times the group-mean-centred advantage
        expected = expected * g / (g - 1)
    np.testing.assert_allclose(ours, expected, rtol=1e-5, atol=1e-6)


def test_scale_rewards_defaults():
    """``auto``: dr_grpo (TRL's recommendation ``scale_rewards="none"``) and rloo unscaled, the
    others by the group std; an explicit value now applies to dr_grpo too."""
    assert [advantage_kind(t) for t in ("grpo", "dapo", "cispo", "gspo", "dr_grpo", "rloo")] == ["std"] * 4 + ["mean", "loo"]
    assert advantage_kind("dr_grpo", "group") == "std" and advantage_kind("rloo", "batch") == "loo_batch_std"
    with pytest.raises(ValueError, match="loss.scale_rewards"):
        grpo.GRPOConfig(loss=grpo.config.LossConfig(scale_rewards="per_token")).validate()
