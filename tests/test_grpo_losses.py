"""The GRPO loss family against hand-computed examples at importance ratios != 1.

The running example (derivations in the comments): two sequences of two tokens,
``old_logp = log 0.5`` everywhere and ratios ``r = [[1.5, 0.5], [1.5, 0.5]]`` (so
``logp = log [[0.75, 0.25], [0.75, 0.25]]``), advantages ``A = [+1, -0.5]``, eps = 0.2.

Per-token surrogate ``min(r A, clip(r, 0.8, 1.2) A)``:
  seq 0 (A = +1):   t0 r=1.5 -> min(1.5, 1.2) = 1.2   (clipped high: no gradient)
                    t1 r=0.5 -> min(0.5, 0.8) = 0.5   (A > 0, low ratio: not clipped)
  seq 1 (A = -0.5): t0 r=1.5 -> min(-0.75, -0.6) = -0.75 (A < 0, high ratio: not clipped)
                    t1 r=0.5 -> min(-0.25, -0.4) = -0.4  (clipped low: no gradient)
Per-token loss (the negative): [[-1.2, -0.5], [0.75, 0.4]].
"""

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl.algos import grpo

OLD = jnp.full((2, 2), math.log(0.5), jnp.float32)
RATIO = jnp.array([[1.5, 0.5], [1.5, 0.5]], jnp.float32)
LOGP = OLD + jnp.log(RATIO)
ADV = jnp.array([1.0, -0.5], jnp.float32)
FULL = jnp.ones((2, 2), jnp.bool_)
PART = jnp.array([[True, True], [True, False]])  # seq 1's second token is padding


def hyper(eps_low=0.2, eps_high=0.2, beta=0.0):
    return grpo.GRPOHyper(*(jnp.float32(x) for x in (eps_low, eps_high, beta, 1.0)))


@functools.partial(jax.jit, static_argnums=0)
def _loss(loss_type, logp, mask, adv, h, ref):
    return grpo.losses.policy_loss(logp, OLD, ref, adv, mask, h, loss_type)


@functools.partial(jax.jit, static_argnums=0)
def _grad(loss_type, logp, mask, adv, h):
    return jax.grad(lambda lp: grpo.losses.policy_loss(lp, OLD, None, adv, mask, h, loss_type)[0])(logp)


def loss(loss_type, logp=LOGP, mask=FULL, adv=ADV, h=None, ref=None):
    if loss_type not in grpo.config.LOSS_TYPES:  # the eager call raises the library's own error
        return grpo.losses.policy_loss(logp, OLD, ref, adv, mask, h or hyper(), loss_type)
    return _loss(loss_type, logp, mask, adv, h or hyper(), ref)


def grad(loss_type, logp=LOGP, mask=FULL, adv=ADV, h=None):
    return _grad(loss_type, logp, mask, adv, h or hyper())


# ---------------------------------------------------------------------------------------
# Hand-computed values
# ---------------------------------------------------------------------------------------


def test_grpo_value_gradient_and_clip_metrics():
    value, m = loss("grpo")
    # per-sequence means: (-1.2 - 0.5) / 2 = -0.85 and (0.75 + 0.4) / 2 = 0.575; mean -0.1375
    assert float(value) == pytest.approx(-0.1375, abs=1e-6)
    # d/dlogp of -r A on unclipped tokens is -r A; clipped tokens give 0; scale 1/(2 seqs * 2 tokens)
    expected = np.array([[0.0, -0.5 * 1.0], [-1.5 * -0.5, 0.0]]) / 4
    np.testing.assert_allclose(grad("grpo"), expected, atol=1e-6)
    assert float(m["clip_ratio/high_mean"]) == pytest.approx(0.25)  # seq 0 t0
    assert float(m["clip_ratio/low_mean"]) == pytest.approx(0.25)  # seq 1 t1
    assert float(m["clip_ratio/region_mean"]) == pytest.approx(0.5)


def test_grpo_masked_tokens_use_per_sequence_means():
    value, _ = loss("grpo", mask=PART)
    # seq 0: -0.85; seq 1 has one valid token: 0.75; mean (-0.85 + 0.75) / 2 = -0.05
    assert float(value) == pytest.approx(-0.05, abs=1e-6)


def test_dapo_token_level_mean_and_clip_higher():
    value, _ = loss("dapo", mask=PART)
    # token mean over the 3 valid tokens: (-1.2 - 0.5 + 0.75) / 3
    assert float(value) == pytest.approx(-0.95 / 3, abs=1e-6)
    # clip-higher eps_high = 0.6: seq 0 t0 (r = 1.5 < 1.6) is no longer clipped: -1.5 instead of -1.2
    value_hi, m = loss("dapo", mask=PART, h=hyper(eps_high=0.6))
    assert float(value_hi) == pytest.approx((-1.5 - 0.5 + 0.75) / 3, abs=1e-6)
    assert float(m["clip_ratio/high_mean"]) == 0.0


def test_dr_grpo_constant_normaliser():
    value, _ = loss("dr_grpo", mask=PART)
    # sum over valid tokens / (N * T) = (-1.2 - 0.5 + 0.75) / 4
    assert float(value) == pytest.approx(-0.95 / 4, abs=1e-6)


def test_cispo_stop_gradient_weight():
    value, m = loss("cispo")
    w = np.array([[1.2, 0.5], [1.2, 0.5]])  # min(r, 1.2), a constant (upper cap only, as TRL)
    a = np.array([[1.0], [-0.5]])
    logp = np.log([[0.75, 0.25], [0.75, 0.25]])
    assert float(value) == pytest.approx(float(np.sum(-w * a * logp) / 4), abs=1e-6)
    np.testing.assert_allclose(grad("cispo"), -w * a / 4, atol=1e-6)
    assert float(m["clip_ratio/region_mean"]) == pytest.approx(0.5)  # the ratios above 1.2


def test_cispo_two_sided_clip_when_asked():
    value, m = grpo.losses.policy_loss(LOGP, OLD, None, ADV, FULL, hyper(), "cispo", True)
    w = np.array([[1.2, 0.8], [1.2, 0.8]])  # clip(r, 0.8, 1.2), a constant
    a = np.array([[1.0], [-0.5]])
    logp = np.log([[0.75, 0.25], [0.75, 0.25]])
    assert float(value) == pytest.approx(float(np.sum(-w * a * logp) / 4), abs=1e-6)  # = 0.18178...
    # gradient -w A / 4 on *every* token (the clipped ones keep theirs), no d(weight)/dlogp term
    g = jax.grad(lambda lp: grpo.losses.policy_loss(lp, OLD, None, ADV, FULL, hyper(), "cispo", True)[0])(LOGP)
    np.testing.assert_allclose(g, -w * a / 4, atol=1e-6)
    assert float(m["clip_ratio/region_mean"]) == pytest.approx(1.0)  # every ratio is outside [0.8, 1.2]


def test_gspo_sequence_ratio_and_clip():
    # s_i = exp(mean_t log r) = sqrt(1.5 * 0.5) = 0.8660 for both sequences
    s = math.sqrt(0.75)
    value, _ = loss("gspo")
    # eps 0.2: s inside [0.8, 1.2]; loss mean(-s * A) = (-s + 0.5 s) / 2
    assert float(value) == pytest.approx((-s + 0.5 * s) / 2, abs=1e-6)
    value, m = loss("gspo", h=hyper(0.1, 0.1))
    # eps 0.1: clip(s) = 0.9. seq 0 (A > 0): min(s, 0.9) = s; seq 1: min(-0.5 s, -0.45) = -0.45 (clipped)
    assert float(value) == pytest.approx((-s + 0.45) / 2, abs=1e-6)
    assert float(m["clip_ratio/low_mean"]) == pytest.approx(0.5)
    # gradient: seq 0 gets -s A / |y| / N = -s / 4 on each token; the clipped seq 1 gets 0
    np.testing.assert_allclose(grad("gspo", h=hyper(0.1, 0.1)), [[-s / 4, -s / 4], [0.0, 0.0]], atol=1e-6)


def test_rloo_advantages_exact():
    r = jnp.array([[1.0, 2.0, 4.0]])
    adv = grpo.losses.group_advantages(r, jnp.ones_like(r, bool), "loo")
    # R_i minus the mean of the other two: 1 - 3, 2 - 2.5, 4 - 1.5
    np.testing.assert_allclose(adv, [[-2.0, -0.5, 2.5]], atol=1e-6)


def test_grpo_and_dr_grpo_advantages():
    r = jnp.array([[1.0, 2.0, 4.0]])
    valid = jnp.ones_like(r, bool)
    mean, std = 7 / 3, math.sqrt(42 / 18)  # unbiased: sum of squares 42/9 over n - 1 = 2
    np.testing.assert_allclose(grpo.losses.group_advantages(r, valid, "std"), (np.array(r) - mean) / (std + 1e-4), atol=1e-5)
    np.testing.assert_allclose(grpo.losses.group_advantages(r, valid, "mean"), np.array(r) - mean, atol=1e-6)


def test_batch_std_advantages_use_the_whole_batch_std():
    # group means are per group; the scale is the unbiased std of every valid reward of the
    # batch (TRL scale_rewards="batch"): a nearly solved group keeps small advantages
    r = jnp.array([[1.0, 1.0, 1.0, 0.9], [0.0, 1.0, 0.0, 1.0]])
    valid = jnp.array([[True] * 4, [True, True, True, False]])
    vals = np.array([1.0, 1.0, 1.0, 0.9, 0.0, 1.0, 0.0])
    batch_std = np.std(vals, ddof=1)
    means = np.array([[0.975], [1 / 3]])
    expected = (np.array(r) - means) / (batch_std + 1e-4) * np.array(valid)
    np.testing.assert_allclose(grpo.losses.group_advantages(r, valid, "batch_std"), expected, atol=1e-5)
    # the group-std version blows the 0.1 gap of group 0 up to ~1.5 standard deviations
    assert float(jnp.max(jnp.abs(grpo.losses.group_advantages(r, valid, "std")[0]))) > 1.4
    assert float(jnp.max(jnp.abs(grpo.losses.group_advantages(r, valid, "batch_std")[0]))) < 0.2
    # identical rewards everywhere: zero advantages, no NaN
    same = grpo.losses.group_advantages(jnp.ones((2, 3)), jnp.ones((2, 3), bool), "batch_std")
    assert np.all(np.asarray(same) == 0.0)
    assert grpo.losses.advantage_kind("dapo", "batch") == "batch_std" and grpo.losses.advantage_kind("dr_grpo") == "mean"
    assert grpo.losses.advantage_kind("grpo") == "std"
    with pytest.raises(ValueError, match="batch_std"):
        grpo.losses.group_advantages(r, valid, "bogus")


def test_k3_kl_term():
    ref = jnp.full((2, 2), math.log(0.5), jnp.float32)
    logp = jnp.full((2, 2), math.log(0.75), jnp.float32)
    value, m = grpo.losses.policy_loss(logp, logp, ref, jnp.zeros(2), FULL, hyper(beta=0.1), "grpo")
    k3 = 2 / 3 - math.log(2 / 3) - 1  # exp(d) - d - 1 with d = log(0.5 / 0.75)
    assert float(m["kl"]) == pytest.approx(k3, abs=1e-6)
    assert float(value) == pytest.approx(0.1 * k3, abs=1e-6)


def test_overlong_shaping_and_group_selection():
    lengths = jnp.array([6, 7, 9, 10])
    np.testing.assert_allclose(grpo.losses.overlong_shaping(lengths, 10, 4), [0.0, -0.25, -0.75, -1.0], atol=1e-6)
    np.testing.assert_allclose(grpo.losses.overlong_shaping(lengths, 10, 0), 0.0)
    rewards = jnp.array([[1.0, 1.0], [0.0, 1.0], [2.0, 2.0], [3.0, 0.0]])
    idx, valid = grpo.losses.select_groups(rewards, 3)
    np.testing.assert_array_equal(idx, [1, 3, 0])
    np.testing.assert_array_equal(valid, [True, True, False])


# ---------------------------------------------------------------------------------------
# Limits and invariants
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("loss_type", grpo.config.LOSS_TYPES)
def test_identical_rewards_give_zero_policy_gradient(loss_type):
    r = jnp.full((1, 2), 0.7)
    adv = grpo.losses.group_advantages(r, jnp.ones_like(r, bool), grpo.losses.advantage_kind(loss_type))[0]
    np.testing.assert_array_equal(adv, 0.0)
    np.testing.assert_array_equal(grad(loss_type, adv=adv, mask=PART), 0.0)


@pytest.mark.parametrize("kind", ["std", "mean", "loo"])
def test_single_valid_member_gives_zero_not_nan(kind):
    r = jnp.array([[3.0, 1.0, 2.0], [5.0, 5.0, 5.0]])
    valid = jnp.array([[True, False, False], [False, False, False]])
    adv = grpo.losses.group_advantages(r, valid, kind)
    np.testing.assert_array_equal(adv, 0.0)
    for loss_type in grpo.config.LOSS_TYPES:
        value, m = loss(loss_type, adv=adv[:, :2].reshape(-1)[:2], mask=jnp.zeros((2, 2), bool))
        assert np.isfinite(float(value)) and all(np.isfinite(float(v)) for v in m.values())


def test_dapo_equals_grpo_for_equal_lengths_and_symmetric_clip():
    np.testing.assert_allclose(loss("dapo")[0], loss("grpo")[0], atol=1e-7)
    np.testing.assert_allclose(grad("dapo"), grad("grpo"), atol=1e-7)


def test_dr_grpo_equals_dapo_when_every_token_is_valid():
    np.testing.assert_allclose(loss("dr_grpo")[0], loss("dapo")[0], atol=1e-7)


def test_rloo_advantage_is_rescaled_dr_grpo_advantage():
    r = jax.random.normal(jax.random.PRNGKey(0), (4, 5))
    valid = jnp.ones_like(r, bool)
    np.testing.assert_allclose(
        grpo.losses.group_advantages(r, valid, "loo"), grpo.losses.group_advantages(r, valid, "mean") * 5 / 4, atol=1e-6
    )


def test_gspo_equals_grpo_for_single_token_sequences():
    logp, old = LOGP[:, :1], OLD[:, :1]
    for h in (hyper(), hyper(0.1, 0.1)):
        a = grpo.losses.policy_loss(logp, old, None, ADV, FULL[:, :1], h, "gspo")[0]
        b = grpo.losses.policy_loss(logp, old, None, ADV, FULL[:, :1], h, "grpo")[0]
        np.testing.assert_allclose(a, b, atol=1e-7)


def test_cispo_gradient_equals_token_level_pg_on_policy():
    # At r = 1 every objective's gradient is the plain policy gradient A * dlogp (token mean).
    on = OLD
    g_cispo = jax.grad(lambda lp: grpo.losses.policy_loss(lp, OLD, None, ADV, PART, hyper(), "cispo")[0])(on)
    g_dapo = jax.grad(lambda lp: grpo.losses.policy_loss(lp, OLD, None, ADV, PART, hyper(), "dapo")[0])(on)
    np.testing.assert_allclose(g_cispo, g_dapo, atol=1e-7)
    np.testing.assert_allclose(g_dapo, -np.array([[1.0, 1.0], [-0.5, 0.0]]) / 3, atol=1e-7)


def test_unknown_loss_type_is_rejected():
    with pytest.raises(ValueError, match="loss_type"):
        loss("ppo")
    with pytest.raises(ValueError, match="loss.type"):
        grpo.config.validate(grpo.GRPOConfig(loss=grpo.config.LossConfig(type="nope")))
    with pytest.raises(ValueError, match="num_minibatches"):
        grpo.config.validate(grpo.GRPOConfig(num_prompts=3, group_size=3, num_minibatches=2))
    with pytest.raises(ValueError, match="group_size"):
        grpo.config.validate(grpo.GRPOConfig(group_size=1))


# ---------------------------------------------------------------------------------------
# Per-token credit (token_credit): group-centred reward-to-go
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["std", "batch_std", "mean", "loo"])
def test_token_advantages_equal_sequence_advantages_for_final_rewards(kind):
    # rewards only on the last step, every member ends at T: each token gets the sequence advantage
    returns = jnp.array([[1.0, 0.0, 0.5, 0.25], [0.3, 0.3, 0.9, 0.1]], jnp.float32)  # [P=2, G=4]
    step = jnp.zeros((2, 4, 3), jnp.float32).at[..., -1].set(returns)
    valid = jnp.array([[True] * 4, [True, True, True, False]])
    tok = grpo.losses.token_advantages(step, valid, kind)
    seq = grpo.losses.group_advantages(returns, valid, kind)
    np.testing.assert_allclose(tok, jnp.broadcast_to(seq[..., None], tok.shape), rtol=1e-6, atol=1e-6)


def test_token_advantages_hand_example():
    # one group, G = 2, T = 3.  member 0: rewards [0.25, 0, 0.75] (R = 1);
    # member 1 ends after two steps: [0.5, 0.25, 0] (R = 0.75).
    # reward-to-go Q: m0 [1, 0.75, 0.75], m1 [0.75, 0.25, 0]; step means [0.875, 0.5, 0.375]
    # centred: m0 [0.125, 0.25, 0.375], m1 [-0.125, -0.25, -0.375]
    step = jnp.array([[[0.25, 0.0, 0.75], [0.5, 0.25, 0.0]]], jnp.float32)
    valid = jnp.ones((1, 2), jnp.bool_)
    centred = np.array([[[0.125, 0.25, 0.375], [-0.125, -0.25, -0.375]]])
    np.testing.assert_allclose(grpo.losses.token_advantages(step, valid, "mean"), centred, atol=1e-6)
    std = np.std([1.0, 0.75], ddof=1)  # the group's return std scales every step ("std" kind)
    np.testing.assert_allclose(grpo.losses.token_advantages(step, valid, "std"), centred / (std + grpo.losses.ADV_EPS), rtol=1e-5)
    np.testing.assert_allclose(grpo.losses.token_advantages(step, valid, "loo"), 2.0 * centred, atol=1e-6)  # G/(G-1)
    # discount 0: each token only with its own step reward (step means [0.375, 0.125, 0.375]);
    # 0.5: Q m0 [0.4375, 0.375, 0.75], m1 [0.625, 0.25, 0] (step means [0.53125, 0.3125, 0.375])
    np.testing.assert_allclose(grpo.losses.token_advantages(step, valid, "mean", 0.0), [[[-0.125, -0.125, 0.375], [0.125, 0.125, -0.375]]], atol=1e-6)
    np.testing.assert_allclose(grpo.losses.token_advantages(step, valid, "mean", 0.5), [[[-0.09375, 0.0625, 0.375], [0.09375, -0.0625, -0.375]]], atol=1e-6)
    # the token that earned a reward is credited with it; the later tokens are not
    adv = np.asarray(grpo.losses.token_advantages(step, valid, "mean"))
    assert adv[0, 0, 0] < adv[0, 0, 2]


def test_per_token_advantages_in_the_loss():
    # [N, T] advantages constant over T give the [N] loss; a per-token one changes only its token
    tok = jnp.broadcast_to(ADV[:, None], (2, 2))
    for lt in ("grpo", "dapo", "cispo", "rloo", "dr_grpo"):
        np.testing.assert_allclose(loss(lt, adv=tok)[0], loss(lt)[0], rtol=1e-6)
    g_seq = grad("dapo", adv=tok)
    g_tok = grad("dapo", adv=tok.at[1, 0].set(0.0))
    np.testing.assert_allclose(g_tok[1, 0], 0.0, atol=1e-7)
    np.testing.assert_allclose(np.delete(np.asarray(g_tok).ravel(), 2), np.delete(np.asarray(g_seq).ravel(), 2), rtol=1e-6)


def test_token_credit_is_rejected_with_gspo_and_a_bad_discount():
    with pytest.raises(ValueError, match="token_credit"):
        grpo.config.validate(grpo.GRPOConfig(loss=grpo.config.LossConfig(type="gspo", token_credit=True)))
    with pytest.raises(ValueError, match="credit_discount"):
        grpo.config.validate(grpo.GRPOConfig(loss=grpo.config.LossConfig(token_credit=True, credit_discount=1.5)))


def test_frac_reward_zero_std_counts_equal_rewards_within_float32_rounding():
    """Eight rewards of 0.1 have a float32 std of ~8e-9, not 0: the group still counts as all
    alike (as TRL's isclose does), a group with a real spread does not; reward_std_batch is the
    std of the whole batch's rewards beside the mean within-group reward_std."""
    rewards = jnp.asarray([[0.1] * 8, [0.0, 1.0] * 4], jnp.float32)
    assert float(jnp.std(rewards[0], ddof=1)) > 0  # the float32 rounding the tolerance is for
    ro = grpo.rollout.Rollout(*(jnp.zeros((16, 2)),) * 6, returns=rewards.reshape(-1), length=jnp.ones(16, jnp.int32),
                              truncated=jnp.zeros(16, bool), final_info={})
    m = grpo.update._reward_metrics(ro, rewards.reshape(-1), rewards, jnp.ones((16, 2), bool))
    assert float(m["frac_reward_zero_std"]) == 0.5
    np.testing.assert_allclose(float(m["reward_std_batch"]), float(np.std(np.asarray(rewards), ddof=1)), rtol=1e-6)
    np.testing.assert_allclose(float(m["reward_std"]), float(np.std([0.0, 1.0] * 4, ddof=1)) / 2, rtol=1e-5)
